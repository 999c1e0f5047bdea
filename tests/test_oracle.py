"""Oracle credit: the exact step credit from uncharged value estimates, and the blame rules
(where a failure's blame lands, and how much of it there is)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.methods.contract import FILLER_MASK
from creditbench.methods.core import group_normalized_scores
from creditbench.methods.grpo import grpo_advantages
from creditbench.methods.oracle import Oracle, OracleConfig, oracle_advantages
from creditbench.methods.registry import get_method
from creditbench.methods.values import STATE_VALUES, chunk_ids, state_starts, step_credit

from fakes import FakeServices
from strategies import build_batch, rollout_batches


def _grpo(batch) -> torch.Tensor:
    return grpo_advantages(batch.rewards, batch.response_mask, batch.group_ids)


def _masks(batch):
    e = batch.extras
    return e["first_wrong_mask"], e["after_wrong_mask"], e["wrong_step_mask"]


def _scores(batch) -> torch.Tensor:
    return group_normalized_scores(batch.rewards, batch.group_ids)


def test_registered_as_a_reference_that_needs_ground_truth() -> None:
    cls = get_method("oracle")
    assert cls is Oracle and cls.reference
    assert set(cls.needs.step_truth) == {
        "first_wrong_mask",
        "after_wrong_mask",
        "wrong_step_mask",
        "filler_mask",
    }
    assert OracleConfig().mode == "exact"


def test_worked_example() -> None:
    """Two responses of four tokens, rewards 1 and 0: A = +1 and -1 (std of {0, 1} is 1/sqrt 2
    and the gap to the mean is 1/2). The failure's first wrong step is tokens 1-2."""
    mask = torch.ones(2, 4)
    first = torch.tensor([[0, 0, 0, 0], [0, 1, 1, 0]], dtype=torch.float32)
    after = torch.tensor([[0, 0, 0, 0], [0, 0, 0, 1]], dtype=torch.float32)
    scores = torch.tensor([1.0, -1.0])
    none = torch.zeros(2, 4)
    got = oracle_advantages(scores, mask, first, after, none)
    torch.testing.assert_close(got, torch.tensor([[1.0, 1, 1, 1], [0, -2, -2, 0]]))
    got = oracle_advantages(scores, mask, first, after, none, redistribute=False)
    torch.testing.assert_close(got, torch.tensor([[1.0, 1, 1, 1], [0, -1, -1, 0]]))
    got = oracle_advantages(scores, mask, first, after, none, mode="suffix")
    torch.testing.assert_close(got, torch.tensor([[1.0, 1, 1, 1], [0, -4 / 3, -4 / 3, -4 / 3]]))
    wrong_in_success = torch.tensor([[0, 0, 1, 0], [0, 0, 0, 0]], dtype=torch.float32)
    got = oracle_advantages(
        scores, mask, first, after, wrong_in_success, penalize_wrong_in_success=True
    )
    torch.testing.assert_close(got, torch.tensor([[1.0, 1, -1, 1], [0, -2, -2, 0]]))


@given(batch=rollout_batches(extras=True), mode=st.sampled_from(["first_wrong", "suffix"]))
def test_each_response_keeps_grpos_total_credit(batch, mode: str) -> None:
    got = Oracle(mode=mode).advantages(batch)
    torch.testing.assert_close(got.sum(-1), _grpo(batch).sum(-1), rtol=1e-4, atol=1e-4)


@given(batch=rollout_batches(extras=True), mode=st.sampled_from(["first_wrong", "suffix"]))
def test_a_failure_blames_only_its_wrong_step(batch, mode: str) -> None:
    first, after, _ = _masks(batch)
    blame = (first if mode == "first_wrong" else torch.maximum(first, after)) * batch.response_mask
    scores = _scores(batch)
    got = Oracle(mode=mode).advantages(batch)
    grpo = _grpo(batch)
    for i in range(batch.size):
        if scores[i] < 0 and blame[i].sum() > 0:
            assert torch.all(got[i][blame[i] == 0] == 0)
            assert torch.all(got[i][blame[i] > 0] < 0)
        else:  # successes, ties and failures with no detectable wrong step: GRPO's credit
            torch.testing.assert_close(got[i], grpo[i])


@given(batch=rollout_batches(extras=True))
def test_without_redistribution_blamed_tokens_get_grpos_advantage(batch) -> None:
    first, _, _ = _masks(batch)
    got = Oracle(mode="first_wrong", redistribute=False).advantages(batch)
    grpo = _grpo(batch)
    blamed = (first * batch.response_mask) > 0
    failed = (_scores(batch) < 0).unsqueeze(-1)
    torch.testing.assert_close(got[blamed & failed], grpo[blamed & failed])
    assert torch.all(got.abs() <= grpo.abs() + 1e-6)


@given(batch=rollout_batches(extras=True))
def test_suffix_blame_contains_first_wrong_blame(batch) -> None:
    first = Oracle(mode="first_wrong").advantages(batch) != 0
    suffix = Oracle(mode="suffix").advantages(batch) != 0
    assert torch.all(suffix | ~first)


@given(batch=rollout_batches(extras=True))
def test_wrong_steps_inside_successes_get_negative_credit(batch) -> None:
    _, _, wrong = _masks(batch)
    plain = Oracle(mode="first_wrong").advantages(batch)
    got = Oracle(mode="first_wrong", penalize_wrong_in_success=True).advantages(batch)
    success = (_scores(batch) > 0).unsqueeze(-1) & (batch.response_mask > 0)
    hit = success & (wrong > 0)
    torch.testing.assert_close(got[hit], -plain[hit])
    torch.testing.assert_close(got[~hit], plain[~hit])


def test_a_failure_without_a_detectable_wrong_step_falls_back_to_grpo() -> None:
    batch = build_batch([4], [5, 5, 5, 5], [1.0, 0.0, 0.0, 1.0], seed=3)
    for key in batch.extras:
        batch.extras[key] = torch.zeros_like(batch.extras[key])
    torch.testing.assert_close(Oracle(mode="first_wrong").advantages(batch), _grpo(batch))


def test_a_group_of_equal_rewards_gets_no_credit() -> None:
    batch = build_batch([3], [4, 6, 5], [0.0, 0.0, 0.0], seed=1)
    assert torch.all(Oracle(mode="suffix", penalize_wrong_in_success=True).advantages(batch) == 0)


def test_missing_ground_truth_is_refused() -> None:
    batch = build_batch([2], [3, 3], [1.0, 0.0], with_extras=False)
    with pytest.raises(ValueError, match="first_wrong_mask"):
        Oracle(mode="first_wrong").advantages(batch)
    with pytest.raises(ValueError, match="filler_mask"):
        Oracle().advantages(batch)


def test_bad_mode_is_named() -> None:
    with pytest.raises(ValueError, match="^mode:"):
        OracleConfig(mode="everything")
    with pytest.raises(ValueError, match="^value_samples:"):
        OracleConfig(value_samples=0)
    assert OracleConfig().redistribute is True


# --- exact credit ------------------------------------------------------------------------------


def test_exact_rollout_estimates_values_inside_a_reference_block() -> None:
    services = FakeServices(seed=4)
    method = Oracle(estimator="mc", value_samples=3, pool_correct=False)
    batch = method.rollout(services)
    assert services.calls[:3] == ["sample_batch", "reference_passes", "problems"]
    assert services.calls[3].startswith("generate:")
    values = batch.extra(STATE_VALUES)
    starts, valid = state_starts(batch.step_ids)
    assert values.shape == valid.shape and torch.isfinite(values[valid]).all()
    assert torch.isnan(values[~valid]).all()
    # three 0/1 continuations per state: every estimate is a multiple of 1/3
    torch.testing.assert_close((values[valid] * 3).round(), values[valid] * 3)
    advantages = method.advantages(batch, services)
    filler = batch.extra(FILLER_MASK) > 0
    assert (advantages[filler] == 0).all()
    credit = step_credit(values, valid, batch.rewards)
    chunks = chunk_ids(starts, valid, batch.response_ids.shape[1])
    own = batch.response_mask.bool() & ~filler
    torch.testing.assert_close(advantages[own], credit.gather(-1, chunks.clamp(min=0))[own])


def test_the_analytic_estimator_takes_the_tasks_values_inside_a_reference_block() -> None:
    services = FakeServices(seed=4)
    method = Oracle(estimator="analytic")
    batch = method.rollout(services)
    assert services.calls == ["sample_batch", "reference_passes", "task_values"]
    values = batch.extra(STATE_VALUES)
    torch.testing.assert_close(values, services.task_values(batch), equal_nan=True)
    starts, valid = state_starts(batch.step_ids)
    credit = step_credit(values, valid, batch.rewards)
    # every response's credit sums to R - V(s_0); its fillers get none
    advantages = method.advantages(batch, services)
    assert (advantages[batch.extra(FILLER_MASK) > 0] == 0).all()
    torch.testing.assert_close(credit.sum(-1), batch.rewards - values[:, 0])
    with pytest.raises(ValueError, match="^estimator:"):
        OracleConfig(estimator="guess")


@given(batch=rollout_batches(extras=True))
def test_exact_credit_is_non_zero_where_grpo_has_none(batch) -> None:
    """A batch without estimates is valued by the services, or refused without them (the
    reference never falls back to group-mean credit, which is zero in a group of equal rewards
    as GRPO's); with estimates the oracle has credit in all-fail groups too (a lower value
    after a step)."""
    batch.extras.pop(STATE_VALUES, None)
    with pytest.raises(ValueError, match="^oracle: the batch lacks state_values"):
        Oracle().advantages(batch)  # without services nothing can value it
    services = FakeServices()
    valued = Oracle().advantages(batch, services)  # a batch from elsewhere is valued here
    assert "reference_passes" in services.calls and "task_values" in services.calls
    batch.extras[STATE_VALUES] = services.task_values(batch)
    torch.testing.assert_close(valued, Oracle().advantages(batch))
    starts, valid = state_starts(batch.step_ids)
    values = torch.linspace(0.9, 0.1, valid.shape[1]).expand(valid.shape).clone()
    batch.extras[STATE_VALUES] = values
    own = batch.response_mask * (1 - batch.extra(FILLER_MASK))
    # a failed response with steps and a token of its own (not all filler) carries credit
    failed = (batch.rewards == 0) & (batch.step_ids.max(-1).values >= 1) & (own.sum(-1) > 0)
    with_values = Oracle().advantages(batch)
    assert ((with_values * own)[failed].sum(-1) < 0).all()


def test_whitened_exact_credit_keeps_fillers_at_zero() -> None:
    services = FakeServices(seed=1)
    method = Oracle(estimator="mc", value_samples=2, whiten=True)
    batch = method.rollout(services)
    advantages = method.advantages(batch, services)
    filler = batch.extra(FILLER_MASK) > 0
    assert (advantages[filler] == 0).all()
    own = batch.response_mask.bool() & ~filler
    assert abs(float(advantages[own].mean())) < 1e-5


def test_correct_prefixes_of_a_problem_pool_until_the_first_wrong_step() -> None:
    from creditbench.methods.oracle import correct_prefix_pools

    batch = build_batch([3, 2], [6, 6, 6, 6, 6], [1.0, 0.0, 0.0, 1.0, 0.0], seed=5)
    pools = correct_prefix_pools(batch)
    starts, valid = state_starts(batch.step_ids)
    first = batch.extra("first_wrong_mask")
    problem = batch.extra("problem_index")
    for row in range(batch.size):
        wrong_steps = batch.step_ids[row][first[row] > 0].unique().tolist()
        fw = min(wrong_steps) if wrong_steps else None
        for k in range(valid.shape[1]):
            if not valid[row, k]:
                assert pools[row, k] == -1
            elif fw is None or k <= fw:  # steps 0..k-1 all right
                assert pools[row, k] == problem[row] * valid.shape[1] + k
            else:
                assert pools[row, k] == -1
