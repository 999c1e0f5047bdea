"""Pass@k training: the analytic advantage of rewarding k-subsets by their best response
(arXiv 2508.10751), and verl's grpo_passk beside it."""

from __future__ import annotations

from itertools import combinations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.methods.grpo import GRPO
from creditbench.methods.passk import PassK, PassKConfig, passk_group_advantages

from strategies import build_batch, rollout_batches


@given(passed=st.lists(st.booleans(), min_size=1, max_size=9), k=st.integers(1, 9))
def test_the_closed_form_is_the_mean_over_every_k_subset(passed, k):
    """Pass@k as the paper defines it before the closed form: every k-subset of the group is
    rewarded 1 if one of its responses passes; its advantage is z-scored over all subsets, and
    a response's advantage is the mean over the subsets it is in."""
    k = min(k, len(passed))
    subsets = list(combinations(range(len(passed)), k))
    reward = {s: float(any(passed[i] for i in s)) for s in subsets}
    values = torch.tensor(list(reward.values()), dtype=torch.float64)
    mean, std = float(values.mean()), float(values.std(unbiased=False))
    got = passk_group_advantages(passed, k)
    for i in range(len(passed)):
        mine = [s for s in subsets if i in s]
        want = 0.0 if std == 0 else sum((reward[s] - mean) / std for s in mine) / len(mine)
        assert got[i] == pytest.approx(want, abs=1e-9)


@given(batch=rollout_batches(binary=True))
def test_with_k_one_it_is_grpo_with_the_population_std(batch):
    ours = PassK(k=1).advantages(batch)
    grpo = GRPO(std_kind="population", std_eps=1e-12).advantages(batch)
    torch.testing.assert_close(ours, grpo, rtol=1e-5, atol=1e-5)


def test_a_group_with_fewer_failures_than_k_carries_no_signal():
    # 8 responses, 3 failed, k = 4: every 4-subset holds a pass
    batch = build_batch([8], [2] * 8, [0.0, 0.0, 0.0] + [1.0] * 5)
    assert float(PassK(k=4).advantages(batch).abs().sum()) == 0.0
    assert float(PassK(k=3).advantages(batch).abs().sum()) > 0.0


def test_one_pass_of_eight_at_k_four_by_hand():
    # C(7,4)/C(8,4) = 1/2: R̄ = σ = 1/2; a pass 1/2 / 1/2 = 1; a failure is blamed in the
    # subsets without the pass, C(6,3)/C(7,3) = 4/7 of its own: (1/2 - 4/7) / (1/2) = -1/7
    batch = build_batch([8], [2] * 8, [1.0] + [0.0] * 7)
    adv = PassK(k=4).advantages(batch)[:, 0]
    assert float(adv[0]) == pytest.approx(1.0)
    assert [float(a) for a in adv[1:]] == pytest.approx([-1 / 7] * 7)


@given(passed=st.lists(st.booleans(), min_size=1, max_size=9), k=st.integers(1, 9))
def test_a_groups_advantages_sum_to_zero(passed, k):
    """Each k-subset's z-score is counted once for each of its k members, and the z-scores
    sum to zero: so do the responses' means of them."""
    assert sum(passk_group_advantages(passed, k)) == pytest.approx(0.0, abs=1e-9)


@given(passed=st.lists(st.booleans(), min_size=2, max_size=9), k=st.integers(2, 9))
def test_a_pass_never_gets_less_than_a_failure_and_signs_split(passed, k):
    got = passk_group_advantages(passed, k)
    for ok, value in zip(passed, got, strict=True):
        assert (value >= 0.0) if ok else (value <= 1e-12)


def test_verls_estimator_credits_the_best_response_alone():
    batch = build_batch([4], [2] * 4, [0.25, 1.0, 0.5, 0.0])
    adv = PassK(estimator="max_minus_second").advantages(batch)[:, 0]
    std = float(torch.tensor([0.25, 1.0, 0.5, 0.0]).std())
    assert float(adv[1]) == pytest.approx(0.5 / (std + 1e-6), rel=1e-5)
    assert float(adv[[0, 2, 3]].abs().sum()) == 0.0


@pytest.mark.parametrize("field,value", [("k", 0), ("k", 2.5), ("estimator", "bootstrap")])
def test_a_bad_option_names_its_field(field, value):
    with pytest.raises(ValueError, match=field):
        PassKConfig(**{field: value})
