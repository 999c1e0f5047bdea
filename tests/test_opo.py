"""OPO: the optimal reward baseline, a length-weighted group mean (arXiv 2505.23585)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.methods.drgrpo import DrGRPO
from creditbench.methods.opo import OPO, OPOConfig, length_weighted_baselines

from strategies import build_batch, rollout_batches


def loop_advantages(batch) -> torch.Tensor:
    """The estimator written out one group and one response at a time."""
    lengths = [float(n) for n in batch.response_mask.sum(-1).tolist()]
    rewards = [float(r) for r in batch.rewards.tolist()]
    groups = batch.group_ids.tolist()
    out = torch.zeros(batch.response_mask.shape, dtype=torch.float64)
    for i, group in enumerate(groups):
        rows = [j for j, g in enumerate(groups) if g == group]
        baseline = 0.0
        if len(rows) > 1:
            baseline = sum(lengths[j] * rewards[j] for j in rows) / sum(lengths[j] for j in rows)
        out[i] = (rewards[i] - baseline) * batch.response_mask[i].double()
    return out


@given(batch=rollout_batches())
def test_the_advantages_are_the_length_weighted_baseline_written_out(batch):
    got = OPO().advantages(batch)
    torch.testing.assert_close(got.double(), loop_advantages(batch), rtol=1e-5, atol=1e-6)


@given(batch=rollout_batches(min_groups=1))
def test_each_groups_token_credit_sums_to_zero(batch):
    """Σ_i l_i (r_i - b) = 0: the baseline is the reward every token of the group averages, so
    the credit a group's tokens carry adds up to nothing (groups of two or more)."""
    adv = OPO().advantages(batch).double()
    for group in torch.unique(batch.group_ids):
        rows = batch.group_ids == group
        if int(rows.sum()) > 1:
            assert abs(float(adv[rows].sum())) < 1e-4


@given(
    rewards=st.lists(st.floats(0, 1), min_size=2, max_size=8),
    lengths=st.lists(st.integers(1, 50), min_size=8, max_size=8),
    shift=st.floats(-0.5, 0.5).filter(lambda x: abs(x) > 1e-3),
)
def test_the_baseline_minimises_the_length_weighted_squared_error(rewards, lengths, shift):
    """Under the paper's assumption ||∇ log π(y)||² ∝ l_y the gradient's second moment is
    Σ l_i (r_i - b)²; b* = Σ l r / Σ l is its minimiser: any other b gives more."""
    r = torch.tensor(rewards, dtype=torch.float64)
    n = torch.tensor(lengths[: len(rewards)], dtype=torch.float64)
    b = length_weighted_baselines(r, n, torch.zeros(len(rewards), dtype=torch.long))[0]

    def second_moment(baseline: float) -> float:
        return float((n * (r - baseline) ** 2).sum())

    assert second_moment(float(b)) <= second_moment(float(b) + shift) + 1e-12


def test_a_long_response_pulls_the_baseline_to_its_reward():
    # a 90-token failure and a 10-token pass: b = 10/100, where the plain mean is 1/2
    batch = build_batch([2], [90, 10], [0.0, 1.0])
    adv = OPO().advantages(batch)
    assert float(adv[1, 0]) == pytest.approx(0.9)
    assert float(adv[0, 0]) == pytest.approx(-0.1)
    mean = OPO(baseline="mean").advantages(batch)
    assert float(mean[1, 0]) == pytest.approx(0.5) and float(mean[0, 0]) == pytest.approx(-0.5)


@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    length=st.integers(1, 6),
    data=st.data(),
)
def test_equal_lengths_give_dr_grpos_advantage(sizes, length, data):
    """With every response of a group the same length the weights cancel: b is the mean."""
    rewards = data.draw(
        st.lists(st.sampled_from([0.0, 0.25, 1.0]), min_size=sum(sizes), max_size=sum(sizes))
    )
    full = build_batch(sizes, [length] * sum(sizes), rewards)
    torch.testing.assert_close(
        OPO(singleton="zero").advantages(full), DrGRPO().advantages(full), rtol=1e-5, atol=1e-6
    )


def test_a_group_of_one_keeps_its_reward_or_gets_zero():
    batch = build_batch([2, 1], [4, 3, 5], [1.0, 0.0, 1.0])
    assert float(OPO().advantages(batch)[2, 0]) == pytest.approx(1.0)  # verl's rule
    assert float(OPO(singleton="zero").advantages(batch)[2].abs().sum()) == 0.0


@pytest.mark.parametrize(
    "field,value", [("baseline", "median"), ("singleton", "drop"), ("eps_low", 1.5)]
)
def test_a_bad_option_names_its_field(field, value):
    with pytest.raises(ValueError, match=field):
        OPOConfig(**{field: value})
