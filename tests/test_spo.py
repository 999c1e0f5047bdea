"""SPO-chain: segments cut at every m-th low-probability token, Monte-Carlo values at their
boundaries, the segment's advantage on its low-probability tokens alone."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.methods.contract import PROBLEM_INDEX
from creditbench.methods.core import RolloutBatch
from creditbench.methods.registry import get_method
from creditbench.methods.spo import (
    SPO,
    SPOConfig,
    low_probability_tokens,
    segment_ids,
    spo_advantages,
)
from creditbench.methods.values import STATE_VALUES

from fakes import RecordingServices
from strategies import rollout_batches


def test_registered_with_the_papers_defaults():
    cls = get_method("spo")
    assert cls is SPO and not cls.reference and not cls.group_local
    assert cls.needs.behaviour_logprobs  # its cutpoints are the behaviour probabilities
    cfg = SPOConfig()
    assert (cfg.rho, cfg.cutpoint_interval, cfg.rollouts_per_state) == (0.9, 5, 9)
    assert cfg.kl_coef == 1e-4 and cfg.kl_aggregation == "seq-mean-token-sum" and cfg.whiten
    assert cfg.aggregation == "token-mean" and cfg.eps_low == cfg.eps_high == 0.2
    for field, value in [("rho", 0.0), ("cutpoint_interval", 0), ("rollouts_per_state", 0)]:
        with pytest.raises(ValueError, match=f"^{field}:"):
            SPOConfig(**{field: value})


def one_row(probabilities: list[float], reward: float) -> RolloutBatch:
    width = len(probabilities)
    return RolloutBatch(
        prompt_ids=torch.ones(1, 1, dtype=torch.long),
        prompt_mask=torch.ones(1, 1),
        response_ids=torch.arange(1, width + 1).unsqueeze(0),
        response_mask=torch.ones(1, width),
        group_ids=torch.zeros(1, dtype=torch.long),
        rewards=torch.tensor([reward]),
        old_logprobs=torch.tensor([probabilities]).log(),
    )


def test_a_worked_example_by_hand():
    """p = (.95, .5, .99, .3, .2), m = 2: the cutpoints are tokens 1, 3, 4; every 2nd from the
    first (1 and 4) opens a segment. V(s_1) = .25, V(s_4) = .75, R = 1: tokens 1 and 3 (the
    low-probability tokens of [1, 4)) get .75 - .25 = .5, token 4 gets 1 - .75 = .25, tokens
    0 (before the first cutpoint) and 2 (probable) get nothing."""
    batch = one_row([0.95, 0.5, 0.99, 0.3, 0.2], reward=1.0)
    method = SPO(cutpoint_interval=2, whiten=False)
    segmented = method.segmented(batch)
    assert segmented.step_ids.tolist() == [[0, 1, 1, 1, 2]]
    values = torch.tensor([[float("nan"), 0.25, 0.75]])
    batch.extras = {STATE_VALUES: values}
    expected = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.25]])
    torch.testing.assert_close(method.advantages(batch), expected)


def test_a_passed_response_can_sum_below_a_failed_one_so_spo_opts_out_of_direction():
    """Four low-probability tokens in a falling segment (V .9 -> .1) and one in the last
    (.1 -> R = 1): the passed row's token sum is 4(-.8) + .9 = -2.3, below the 0 of a failed
    row with no cutpoint, although its segment advantages sum to R - V = .1."""
    method = SPO(cutpoint_interval=4, whiten=False)
    passed = one_row([0.5] * 5, reward=1.0)
    passed.extras = {STATE_VALUES: torch.tensor([[0.9, 0.1]])}
    failed = one_row([0.99] * 5, reward=0.0)
    failed.extras = {STATE_VALUES: torch.tensor([[float("nan")]])}
    passed_sum = float(method.advantages(passed).sum())
    assert passed_sum == pytest.approx(-2.3) and float(method.advantages(failed).sum()) == 0.0
    assert "direction" in SPO.opt_outs


def cutpoint_rows() -> st.SearchStrategy[torch.Tensor]:
    return st.lists(st.lists(st.booleans(), min_size=1, max_size=24), min_size=1, max_size=6).map(
        lambda rows: torch.tensor([row + [False] * (24 - len(row)) for row in rows])
    )


@given(cutpoints=cutpoint_rows(), interval=st.integers(1, 6))
def test_a_segment_opens_at_every_intervalth_cutpoint_and_nowhere_else(cutpoints, interval):
    segments = segment_ids(cutpoints, interval)
    for row in range(cutpoints.shape[0]):
        points = cutpoints[row].nonzero().flatten().tolist()
        opening = set(points[::interval])
        ids = segments[row].tolist()
        assert ids[0] == 0 and all(b - a in (0, 1) for a, b in pairwise(ids))
        opened = {t for t in range(1, len(ids)) if ids[t] == ids[t - 1] + 1}
        assert opened == opening - {0}
        leading = 0 if points and points[0] == 0 else 1
        assert ids[-1] == math.ceil(len(points) / interval) - 1 + leading


@given(seed=st.integers(0, 50), rho=st.sampled_from([0.3, 0.5, 0.9]), interval=st.integers(1, 3))
def test_continuations_are_bought_at_the_segment_starts_alone(seed, rho, interval):
    """Every bought state is a (problem, prefix) ending just before an opening cutpoint (the
    empty prefix only where the first token is a cutpoint); every opening cutpoint's is."""
    services = RecordingServices(seed=seed)
    method = SPO(rho=rho, cutpoint_interval=interval, rollouts_per_state=3)
    batch = method.rollout(services)
    cutpoints = low_probability_tokens(batch.old_logprobs, batch.response_mask, rho)
    problems = batch.extra(PROBLEM_INDEX).tolist()
    wanted = set()
    for row in range(batch.size):
        points = cutpoints[row].nonzero().flatten().tolist()
        for start in points[::interval]:
            wanted.add((int(problems[row]), tuple(batch.response_ids[row, :start].tolist())))
    bought = getattr(services, "states", [])
    assert set(bought) == wanted
    assert len(bought) == len(wanted)  # a shared state (a group's empty prefix) is bought once
    if wanted:
        assert services.stats["value_rollouts"] == 3 * len(wanted)


@given(batch=rollout_batches(), rho=st.sampled_from([0.2, 0.5, 0.9]))
def test_credit_reaches_only_low_probability_tokens_and_whitening_centres_them(batch, rho):
    method = SPO(rho=rho)
    mask = method.loss_mask(batch) > 0
    assert torch.equal(mask, (batch.old_logprobs.exp() < rho) & (batch.response_mask > 0))
    advantages = method.advantages(batch)
    assert torch.all(advantages[~mask] == 0)
    if mask.sum() > 1 and SPO(rho=rho, whiten=False).advantages(batch)[mask].std() > 1e-3:
        assert abs(float(advantages[mask].mean())) < 1e-4
        assert float(advantages[mask].std()) == pytest.approx(1.0, abs=1e-3)


@given(batch=rollout_batches(), interval=st.integers(1, 4))
def test_a_rows_segment_credits_add_up_to_its_reward_less_its_first_boundarys_value(
    batch, interval
):
    """Unwhitened, the segments' advantages telescope: the sum over segments (one token of
    each) is R - V(first boundary), 0 for a row without a cutpoint."""
    method = SPO(cutpoint_interval=interval, whiten=False)
    segmented = method.segmented(batch)
    mask = method.loss_mask(batch) > 0
    states = int(segmented.step_ids.max()) + 1
    values = torch.rand(batch.size, states)
    advantages = spo_advantages(segmented, values, mask, whiten=False)
    for row in range(batch.size):
        ids, on = segmented.step_ids[row], mask[row]
        per_segment = {int(k): float(advantages[row][(ids == k) & on][0]) for k in ids[on].unique()}
        if not per_segment:
            assert torch.all(advantages[row] == 0)
            continue
        first = 0 if on[0] else 1
        expected = float(batch.rewards[row]) - float(values[row, first])
        assert sum(per_segment.values()) == pytest.approx(expected, abs=1e-5)


@given(batch=rollout_batches())
def test_the_loss_and_its_kl_ignore_the_probable_tokens(batch):
    """The code ANDs the mask into the action mask: moving the policy or the reference on a
    token of probability >= rho changes neither the surrogate nor the KL term."""
    batch.ref_logprobs = batch.old_logprobs - 0.5 * torch.rand(batch.old_logprobs.shape)
    method = SPO(kl_coef=0.1)
    mask = method.loss_mask(batch) > 0
    advantages = torch.randn(batch.response_mask.shape) * mask
    logprobs = (batch.old_logprobs + 0.1 * torch.randn(batch.old_logprobs.shape)).requires_grad_()
    loss, stats = method.loss(logprobs, batch, advantages)
    loss.backward()
    assert torch.all(logprobs.grad[~mask] == 0)
    moved = batch.ref_logprobs.clone()
    moved[~mask] -= 3.0
    batch.ref_logprobs = moved
    again, _ = method.loss(logprobs.detach(), batch, advantages)
    torch.testing.assert_close(again, loss.detach())
    assert math.isfinite(stats["kl_ref"])
