"""Differential tests: our advantage estimators and losses against verl 0.9.1's ``core_algos``.

The fixtures in ``tests/verl_fixtures/*.json`` hold random inputs and verl's outputs; they were
written by ``tests/verl_fixtures/make_verl_fixtures.py`` (run by hand, see its docstring). This
file only replays them and never imports verl. Tolerance: ``atol = 1e-5`` in float32.

verl's estimators take token-level rewards ``[B, T]`` and sum them per row; ours take the
scalar reward ``[B]``, so the tests pass the row sums. verl groups rows by equal ``uid``
labels; the tests map each label to an int64 group id.

Conventions that differ on purpose, each checked below rather than hidden:

- Groups of one (GRPO, Dr. GRPO, RLOO, REINFORCE++-baseline): verl keeps the raw reward
  (``r / (1 + eps)`` in GRPO); our default (``singleton="zero"``) gives 0, since a lone
  response has nothing to be compared with. ``singleton="raw"`` reproduces verl.
- verl's ``masked_mean`` divides by ``count + 1e-8`` and ours by ``max(count, 1)``; the two
  agree far inside the tolerance whenever the count is at least 1, as in every fixture.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from creditbench.methods.core import (
    AGG_MODES,
    ClipConfig,
    Normalizers,
    aggregate_loss,
    clipped_surrogate,
    importance_ratio,
    masked_mean,
)
from creditbench.methods.drgrpo import drgrpo_advantages
from creditbench.methods.grpo import grpo_advantages
from creditbench.methods.reinforce_pp import (
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
)
from creditbench.methods.rloo import rloo_advantages

FIXTURES = Path(__file__).parent / "verl_fixtures"
VERL_VERSION = "0.9.1"
ATOL = 1e-5


def load(name: str) -> list[dict]:
    payload = json.loads((FIXTURES / f"{name}.json").read_text())
    assert payload["verl_version"] == VERL_VERSION, f"{name}.json is from another verl version"
    return payload["cases"]


def tensor(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def group_ids(labels: list[str]) -> torch.Tensor:
    """verl's uid labels as int64 group ids, numbered in order of first appearance."""
    numbering: dict[str, int] = {}
    return torch.tensor([numbering.setdefault(label, len(numbering)) for label in labels])


def outcome_inputs(case: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(rewards [B], response_mask [B, T], group_ids [B])`` from a verl estimator case."""
    rewards = tensor(case["token_level_rewards"]).sum(-1)
    return rewards, tensor(case["response_mask"]), group_ids(case["index"])


def singleton_rows(case: dict) -> torch.Tensor:
    ids = group_ids(case["index"])
    return (ids.unsqueeze(0) == ids.unsqueeze(1)).sum(-1) == 1


def case_id(case: dict) -> str:
    keys = ("seed", "norm_adv_by_std_in_grpo", "gamma", "mask_has_holes", "clip_ratio_c")
    keys += ("loss_agg_mode", "loss_scale_factor")
    return "-".join(f"{key}={case[key]}" for key in keys if key in case)


def cases(name: str, **where) -> list:
    selected = [c for c in load(name) if all(c[k] == v for k, v in where.items())]
    assert selected, f"no {name} fixture with {where}"
    return [pytest.param(c, id=case_id(c)) for c in selected]


def assert_close(ours: torch.Tensor, verl: torch.Tensor) -> None:
    torch.testing.assert_close(ours, verl, atol=ATOL, rtol=0.0)


def test_fixtures_cover_singletons_and_equal_reward_groups():
    """The inputs exercise the edge cases the comparison is meant to catch."""
    grpo = load("grpo")
    assert any(singleton_rows(c).any() for c in grpo)
    assert any(not singleton_rows(c).any() for c in grpo)
    for case in grpo:
        rewards, _, ids = outcome_inputs(case)
        tied = [
            g
            for g in ids.unique()
            if (ids == g).sum() > 1 and rewards[ids == g].unique().numel() == 1
        ]
        assert tied, "every GRPO fixture has a zero-variance group"


# --------------------------------------------------------------------------------------------
# Group-relative outcome advantages
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", cases("grpo", norm_adv_by_std_in_grpo=True))
def test_grpo_matches_verl(case):
    rewards, mask, ids = outcome_inputs(case)
    ours = grpo_advantages(rewards, mask, ids, eps=case["epsilon"], singleton="raw")
    assert_close(ours, tensor(case["advantages"]))


@pytest.mark.parametrize("case", cases("grpo", norm_adv_by_std_in_grpo=True))
def test_grpo_default_singleton_rule_differs_from_verl_on_purpose(case):
    """Our default gives a group of one advantage 0; verl gives it its raw reward. Every other
    row agrees."""
    rewards, mask, ids = outcome_inputs(case)
    ours = grpo_advantages(rewards, mask, ids)
    verl = tensor(case["advantages"])
    lone = singleton_rows(case)
    assert_close(ours[~lone], verl[~lone])
    assert torch.all(ours[lone] == 0)
    assert_close(verl[lone], rewards[lone].unsqueeze(-1) / (1 + case["epsilon"]) * mask[lone])


@pytest.mark.parametrize("case", cases("grpo", norm_adv_by_std_in_grpo=False))
def test_unscaled_grpo_and_drgrpo_match_verl_without_std_normalisation(case):
    """verl's ``norm_adv_by_std_in_grpo=False`` is the Dr. GRPO advantage ``r - mean_g``."""
    rewards, mask, ids = outcome_inputs(case)
    verl = tensor(case["advantages"])
    assert_close(grpo_advantages(rewards, mask, ids, scale_by_std=False, singleton="raw"), verl)
    assert_close(drgrpo_advantages(rewards, mask, ids, singleton="raw"), verl)
    lone = singleton_rows(case)
    ours_default = drgrpo_advantages(rewards, mask, ids)
    assert torch.all(ours_default[lone] == 0)
    assert_close(ours_default[~lone], verl[~lone])


@pytest.mark.parametrize("case", cases("rloo"))
def test_rloo_matches_verl(case):
    """With ``singleton="raw"`` (verl's loop rule: a group of one keeps its reward) every row
    agrees; our default gives a group of one 0, as verl's ``rloo_vectorized`` does."""
    rewards, mask, ids = outcome_inputs(case)
    verl = tensor(case["advantages"])
    assert_close(rloo_advantages(rewards, mask, ids, singleton="raw"), verl)
    ours_default = rloo_advantages(rewards, mask, ids)
    lone = singleton_rows(case)
    assert torch.all(ours_default[lone] == 0)
    assert_close(ours_default[~lone], verl[~lone])


@pytest.mark.parametrize("case", cases("reinforce_pp_baseline"))
def test_reinforce_pp_baseline_matches_verl(case):
    """verl centres a group of one to its raw reward before whitening over the batch, so a
    singleton shifts every row's whitened advantage. ``singleton="raw"`` matches verl on every
    batch; our default (centred reward 0) matches it on batches without a group of one."""
    rewards, mask, ids = outcome_inputs(case)
    verl = tensor(case["advantages"])
    assert_close(reinforce_pp_baseline_advantages(rewards, mask, ids, singleton="raw"), verl)
    if not singleton_rows(case).any():
        assert_close(reinforce_pp_baseline_advantages(rewards, mask, ids), verl)


@pytest.mark.parametrize("case", cases("reinforce_pp"))
def test_reinforce_pp_matches_verl(case):
    token_rewards = tensor(case["token_level_rewards"])
    mask = tensor(case["response_mask"])
    ours = reinforce_pp_advantages(token_rewards, mask, case["gamma"])
    assert_close(ours, tensor(case["advantages"]))


# --------------------------------------------------------------------------------------------
# The clipped surrogate and loss aggregation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", cases("ppo_loss"))
def test_vanilla_ppo_loss_value_gradient_and_clip_fraction_match_verl(case):
    """verl's dual clip is always on; its ``clip_ratio_c = 1e9`` case is our ``dual_clip=None``."""
    old = tensor(case["old_log_prob"])
    log_prob = tensor(case["log_prob"]).requires_grad_(True)
    advantages = tensor(case["advantages"])
    mask = tensor(case["response_mask"])
    dual = None if case["clip_ratio_c"] >= 1e8 else case["clip_ratio_c"]
    clip = ClipConfig(case["clip_ratio_low"], case["clip_ratio_high"], dual_clip=dual)

    ratio = importance_ratio(log_prob, old, mask)
    token_loss, was_clipped = clipped_surrogate(ratio, advantages, clip)
    loss = aggregate_loss(token_loss, mask, case["loss_agg_mode"])
    loss.backward()

    assert_close(loss.detach(), torch.tensor(case["loss"]))
    assert_close(log_prob.grad, tensor(case["grad_log_prob"]))
    # Our indicator marks a token clipped by either bound. verl reports the trust-region clip
    # (pg_clipfrac) and the dual clip (pg_clipfrac_lower) apart; the two never hit the same
    # token (the trust region binds a negative advantage only at ratio < 1 - eps_low, where
    # the loss is far below the dual-clip bound), so our fraction is their sum.
    expected = case["pg_clipfrac"] + case["pg_clipfrac_lower"]
    assert_close(masked_mean(was_clipped, mask), torch.tensor(expected))
    assert_close(masked_mean(old - log_prob.detach(), mask), torch.tensor(case["ppo_kl"]))


def test_ppo_fixtures_exercise_both_clips():
    ppo = load("ppo_loss")
    assert all(c["pg_clipfrac"] > 0 for c in ppo)
    assert any(c["pg_clipfrac_lower"] > 0 for c in ppo if c["clip_ratio_c"] < 1e8)


def test_verl_has_exactly_our_aggregation_modes():
    assert {c["loss_agg_mode"] for c in load("agg_loss")} == set(AGG_MODES)


@pytest.mark.parametrize("case", cases("agg_loss"))
def test_aggregate_loss_matches_verl(case):
    """Whole batch, and two micro-batches given the whole batch's counts. verl's default K of
    ``seq-mean-token-sum-norm`` is the padded width, as is our ``Normalizers.of`` default."""
    loss_mat, mask = tensor(case["loss_mat"]), tensor(case["loss_mask"])
    mode, factor = case["loss_agg_mode"], case["loss_scale_factor"]
    whole = aggregate_loss(loss_mat, mask, mode, Normalizers.of(mask, horizon=factor))
    assert_close(whole, torch.tensor(case["loss"]))

    split = case["micro_batch_split"]
    global_counts = Normalizers(
        num_tokens=case["batch_num_tokens"],
        num_sequences=case["global_batch_size"],
        horizon=float(mask.shape[-1] if factor is None else factor),
    )
    micro = [
        aggregate_loss(loss_mat[rows], mask[rows], mode, global_counts)
        for rows in (slice(0, split), slice(split, None))
    ]
    assert_close(torch.stack(micro), tensor(case["micro_batch_losses"]))
    assert_close(sum(micro), whole)
