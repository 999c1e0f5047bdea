"""PPPO: the gradient on each response's prefix alone, the prefix scored by its own outcome
plus its G continuations', the kept share climbing 15% -> 35% over the budget."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.methods.contract import PROBLEM_INDEX
from creditbench.methods.core import group_normalized_scores
from creditbench.methods.pppo import (
    CONTINUATION_REWARD,
    PPPO,
    PREFIX,
    PPPOConfig,
    pppo_advantages,
    prefix_mask,
    retention,
)
from creditbench.methods.registry import get_method

from fakes import RecordingServices
from strategies import rollout_batches


def test_registered_with_the_papers_defaults():
    cls = get_method("pppo")
    assert cls is PPPO and cls.group_local and not cls.reference
    cfg = PPPOConfig()
    assert cfg.continuations == 8 and (cfg.eta_start, cfg.eta_step, cfg.eta_max) == (
        0.15,
        0.05,
        0.35,
    )
    assert (cfg.eps_low, cfg.eps_high, cfg.aggregation, cfg.kl_coef) == (
        0.2,
        0.28,
        "token-mean",
        0.0,
    )
    for field, value in [("continuations", -1), ("eta_start", 0.0), ("eta_max", 0.1)]:
        with pytest.raises(ValueError, match=f"^{field}:"):
            PPPOConfig(**{field: value})


@pytest.mark.parametrize(
    ("fraction", "eta"),
    [
        (0.0, 0.15),
        (0.19, 0.15),
        (0.2, 0.20),
        (0.45, 0.25),
        (0.65, 0.30),
        (0.8, 0.35),
        (1.0, 0.35),
        (1.4, 0.35),
    ],
)
def test_the_kept_share_climbs_a_staircase_over_the_budget(fraction, eta):
    assert retention(fraction, 0.15, 0.05, 0.35) == pytest.approx(eta)


@given(
    lengths=st.lists(st.integers(0, 30), min_size=1, max_size=6),
    eta=st.floats(0.01, 1.0),
)
def test_the_prefix_is_the_first_floor_of_eta_times_the_length_tokens(lengths, eta):
    width = max(lengths) + 2
    mask = torch.tensor([[1.0] * n + [0.0] * (width - n) for n in lengths])
    prefix = prefix_mask(mask, eta)
    for row, n in enumerate(lengths):
        kept = int(prefix[row].sum())
        assert kept == math.floor(eta * n + 1e-6)
        assert torch.all(prefix[row, :kept] == 1) and torch.all(prefix[row, kept:] == 0)


def test_a_worked_example_by_hand():
    """One group of three: own outcomes (1, 0, 0), continuation sums (5, 6, 1) of G = 8, so
    R = (6, 6, 1): the first two share the group's top score, the third the bottom one, and
    only the prefix tokens carry it."""
    rewards = torch.tensor([1.0, 0.0, 0.0])
    continuations = torch.tensor([5.0, 6.0, 1.0])
    prefix = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    advantages = pppo_advantages(rewards, continuations, prefix, torch.zeros(3, dtype=torch.long))
    mean, std = 13 / 3, torch.tensor([6.0, 6.0, 1.0]).std().item()
    high, low = (6 - mean) / (std + 1e-6), (1 - mean) / (std + 1e-6)
    expected = torch.tensor([[high, high, 0, 0], [high, 0, 0, 0], [low, low, low, 0]])
    torch.testing.assert_close(advantages, expected)


@given(seed=st.integers(0, 50), fraction=st.sampled_from([0.0, 0.5, 0.9]), g=st.integers(1, 4))
def test_continuations_are_bought_at_the_prefixes_alone_and_summed(seed, fraction, g):
    services = RecordingServices(seed=seed, budget_fraction=fraction)
    batch = PPPO(continuations=g, eta_start=0.3, eta_step=0.2, eta_max=0.9).rollout(services)
    eta = retention(fraction, 0.3, 0.2, 0.9)
    prefix = batch.extras[PREFIX]
    torch.testing.assert_close(prefix, prefix_mask(batch.response_mask, eta))
    problems = batch.extra(PROBLEM_INDEX).tolist()
    lengths = batch.response_mask.sum(-1).long().tolist()
    wanted = {
        (int(problems[row]), tuple(batch.response_ids[row, :kept].tolist()))
        for row, kept in enumerate(prefix.sum(-1).long().tolist())
        if 0 < kept < lengths[row]
    }
    bought = getattr(services, "states", [])
    assert set(bought) == wanted and len(bought) == len(wanted)
    if wanted:
        assert services.samples == g and services.stats["value_rollouts"] == g * len(wanted)
    summed = batch.extras[CONTINUATION_REWARD]
    assert torch.all((summed >= 0) & (summed <= g))
    torch.testing.assert_close(summed, summed.round())  # a count of passed continuations
    for row, kept in enumerate(prefix.sum(-1).long().tolist()):
        if not 0 < kept < lengths[row]:
            assert summed[row] == 0


@given(batch=rollout_batches())
def test_credit_sits_on_the_prefix_one_value_a_response(batch):
    method = PPPO()
    advantages = method.advantages(batch)
    prefix = prefix_mask(batch.response_mask, 0.15) > 0
    assert torch.all(advantages[~prefix] == 0)
    scores = group_normalized_scores(batch.rewards, batch.group_ids)
    for row in range(batch.size):
        on = advantages[row][prefix[row]]
        assert torch.all(on == scores[row])
