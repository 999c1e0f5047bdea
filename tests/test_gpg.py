"""GPG: the plain policy gradient on r - mean, scaled by the batch's share of mixed groups
(arXiv 2504.02546)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from creditbench.methods.core import rows_of_mixed_groups
from creditbench.methods.drgrpo import DrGRPO
from creditbench.methods.gpg import GPG, GPGConfig, gpg_alpha

from strategies import build_batch, rollout_batches


def test_alpha_scales_by_the_share_of_responses_that_carry_a_gradient():
    # a mixed group of 4 and an all-failed group of 4: M = 4 of B = 8, α = 2
    batch = build_batch([4, 4], [3] * 8, [1.0, 0.0, 0.0, 0.0] + [0.0] * 4)
    adv = GPG().advantages(batch)
    assert float(gpg_alpha(batch.rewards, batch.group_ids)) == 2.0
    assert float(adv[0, 0]) == pytest.approx(2 * 0.75) and float(adv[1, 0]) == pytest.approx(-0.5)
    assert float(adv[4:].abs().sum()) == 0.0
    # verl's code counts non-zero rewards instead: one of eight, α = 8
    assert float(gpg_alpha(batch.rewards, batch.group_ids, "nonzero")) == 8.0
    assert float(GPG(alpha="one").advantages(batch)[0, 0]) == pytest.approx(0.75)


@given(batch=rollout_batches(binary=True))
def test_the_batch_mean_of_the_advantages_is_the_mean_over_responses_with_a_gradient(batch):
    """α = B / (B - M): the batch's mean advantage magnitude, over all B responses, is the
    uncorrected one over the B - M responses of mixed groups (the others carry 0)."""
    mixed = rows_of_mixed_groups(batch.rewards, batch.group_ids)
    if not bool(mixed.any()):
        return
    scaled = GPG(singleton="zero").advantages(batch)[:, 0].abs().double()
    plain = DrGRPO().advantages(batch)[:, 0].abs().double()
    assert float(scaled.mean()) == pytest.approx(float(plain[mixed].mean()), rel=1e-5)


@given(batch=rollout_batches())
def test_without_alpha_the_advantage_is_dr_grpos(batch):
    torch.testing.assert_close(
        GPG(alpha="one", singleton="zero").advantages(batch), DrGRPO().advantages(batch)
    )


@given(batch=rollout_batches(min_groups=2))
def test_the_loss_is_the_plain_policy_gradient_never_clipped(batch):
    """No surrogate: at any ratio the loss's gradient on a token is -ρ Â / N_tok (ρ = 1 on an
    exactly on-policy step, the paper's -Â ∇ log π), where PPO's clip would zero some."""
    method = GPG()
    adv = method.advantages(batch)
    drift = 0.5 * torch.sin(torch.arange(batch.old_logprobs.numel()).float()).view_as(adv)
    logprobs = (batch.old_logprobs + drift).requires_grad_(True)
    loss, _ = method.loss(logprobs, batch, adv)
    loss.backward()
    mask = batch.response_mask
    ratio = (logprobs.detach() - batch.old_logprobs).exp()
    expected = -ratio * adv * mask / mask.sum()
    torch.testing.assert_close(logprobs.grad * mask, expected, rtol=1e-4, atol=1e-6)


def test_a_group_of_one_keeps_alpha_times_its_reward_or_gets_zero():
    batch = build_batch([2, 1], [2, 2, 2], [1.0, 0.0, 1.0])
    alpha = float(gpg_alpha(batch.rewards, batch.group_ids))  # 3 / 2
    assert float(GPG().advantages(batch)[2, 0]) == pytest.approx(alpha)
    assert float(GPG(singleton="zero").advantages(batch)[2].abs().sum()) == 0.0


@pytest.mark.parametrize("field,value", [("alpha", "all"), ("singleton", "drop")])
def test_a_bad_option_names_its_field(field, value):
    with pytest.raises(ValueError, match=field):
        GPGConfig(**{field: value})
