"""GTPO and GRPO-S (arXiv 2508.04349): token and response rewards weighted by entropy."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.methods.contract import BEHAVIOUR_ENTROPY
from creditbench.methods.gtpo import (
    GTPO,
    GTPOConfig,
    grpo_s_rewards,
    gtpo_token_rewards,
)

from strategies import rollout_batches

entropy_batches = rollout_batches(statistics=[BEHAVIOUR_ENTROPY], binary=True)


def test_eq3_and_eq5_on_a_hand_example():
    """Two passed responses (the second ends after one token) and two failed ones."""
    entropy = torch.tensor([[2.0, 1.0], [1.0, 9.0], [0.5, 2.0], [2.0, 2.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    passed = torch.tensor([True, True, False, False])
    groups = torch.zeros(4, dtype=torch.long)
    r = gtpo_token_rewards(entropy, mask, passed, groups, 1.0, 0.1, eps=0.0)
    # t = 0, passed: H / mean(2, 1) -> 1 + 0.1 * 2/1.5 and 1 + 0.1 * 1/1.5
    assert r[0, 0].item() == pytest.approx(1 + 0.1 * 2 / 1.5)
    assert r[1, 0].item() == pytest.approx(1 + 0.1 * 1 / 1.5)
    # t = 1: the second passed response has ended (d_1 = 1): the first is its own mean
    assert r[0, 1].item() == pytest.approx(1.1) and r[1, 1].item() == 0.0
    # failed, t = 0: inverse entropies 2 and 0.5, mean 1.25: the confident token is blamed more
    assert r[2, 0].item() == pytest.approx(-(1 + 0.1 * 2 / 1.25))
    assert r[3, 0].item() == pytest.approx(-(1 + 0.1 * 0.5 / 1.25))


@given(batch=entropy_batches)
def test_reward_mass_is_conserved_at_every_position(batch):
    """Prop. 2.2: with α1 + α2 = 1 the passed responses' token rewards at position t sum to
    d_t, the number of passed responses still running there (where their entropies are not
    all 0, which leaves the ratio undefined and ε in charge)."""
    entropy, mask = batch.extra(BEHAVIOUR_ENTROPY), batch.response_mask
    passed = batch.rewards >= 1
    r = gtpo_token_rewards(entropy, mask, passed, batch.group_ids, 0.9, 0.1, eps=0.0)
    for group in batch.group_ids.unique():
        rows = (batch.group_ids == group) & passed
        defined = (entropy[rows] * mask[rows]).sum(0) > 0
        got, want = r[rows].sum(0)[defined], mask[rows].sum(0).double()[defined]
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


@given(batch=entropy_batches)
def test_every_passed_token_is_pushed_up_and_every_failed_token_down(batch):
    """In a group that mixes passes and failures every shaped reward of a pass (>= α1) lies
    above every one of a failure (<= -α1), so after the group's z-score a passed token's
    advantage is positive and a failed token's negative (the joint reading of Eq. 6)."""
    method = GTPO(dynamic_sampling=False)
    adv = method.advantages(batch)
    mask = batch.response_mask > 0
    for group in batch.group_ids.unique():
        rows = batch.group_ids == group
        passed = batch.rewards[rows] >= 1
        if passed.all() or not passed.any():
            continue
        group_adv, group_mask = adv[rows], mask[rows]
        assert (group_adv[passed][group_mask[passed]] > 0).all()
        assert (group_adv[~passed][group_mask[~passed]] < 0).all()


@given(batch=entropy_batches, alpha2=st.sampled_from([0.05, 0.1, 0.5]))
def test_among_passed_tokens_at_one_position_more_entropy_more_advantage(batch, alpha2):
    method = GTPO(dynamic_sampling=False, alpha2=alpha2)
    adv = method.advantages(batch)
    entropy, mask = batch.extra(BEHAVIOUR_ENTROPY), batch.response_mask > 0
    for group in batch.group_ids.unique():
        rows = ((batch.group_ids == group) & (batch.rewards >= 1)).nonzero().flatten()
        for t in range(mask.shape[1]):
            live = [int(i) for i in rows if mask[i, t]]
            for a in live:
                for b in live:
                    if entropy[a, t] > entropy[b, t] + 1e-4:
                        assert adv[a, t] > adv[b, t]


@given(batch=entropy_batches)
def test_groups_dynamic_sampling_drops_get_no_credit(batch):
    """An all-pass group: DAPO's dynamic sampling keeps none of it, so no credit; without it
    GTPO still ranks the group's tokens by entropy (the z-score of Eq. 6)."""
    batch.rewards[:] = 1.0
    assert (GTPO().advantages(batch) == 0).all()
    free = GTPO(dynamic_sampling=False).advantages(batch)
    assert (free[batch.response_mask == 0] == 0).all()


def test_grpo_s_weighs_whole_responses_by_their_mean_entropy():
    entropy = torch.tensor([[2.0, 2.0], [1.0, 1.0], [1.0, 3.0], [4.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    passed = torch.tensor([True, True, False, False])
    groups = torch.zeros(4, dtype=torch.long)
    r = grpo_s_rewards(entropy, mask, passed, groups, 1.0, 0.1, eps=0.0)
    # passed: mean entropies 2 and 1, their mean 1.5 (Eq. 9, n / Σ = 1 / mean)
    assert r[:2].tolist() == pytest.approx([1 + 0.1 * 2 / 1.5, 1 + 0.1 * 1 / 1.5])
    # failed: mean entropies 2 and 4 -> inverses 0.5 and 0.25, their mean 0.375
    assert r[2:].tolist() == pytest.approx([-(1 + 0.1 * 0.5 / 0.375), -(1 + 0.1 * 0.25 / 0.375)])


@given(batch=entropy_batches)
def test_grpo_s_gives_one_advantage_a_response(batch):
    adv = GTPO(level="sequence", dynamic_sampling=False).advantages(batch)
    for i in range(batch.size):
        values = adv[i][batch.response_mask[i] > 0]
        assert torch.allclose(values, values[0].expand_as(values))


def test_bad_options_are_refused_by_name():
    with pytest.raises(ValueError, match="level: one of token, sequence"):
        GTPOConfig(level="word")
    with pytest.raises(ValueError, match="alpha2: must be >= 0"):
        GTPOConfig(alpha2=-0.1)


def test_the_defaults_are_the_papers():
    cfg = GTPOConfig()
    assert (cfg.alpha1, cfg.alpha2, cfg.eps_low, cfg.eps_high) == (1.0, 0.1, 0.2, 0.28)
    assert cfg.aggregation == "token-mean" and cfg.kl_coef == 0
    assert cfg.overlong_shaping is False
