"""PRIME: implicit process rewards from a reward model trained online on the outcomes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.methods.core import masked_whiten
from creditbench.methods.prime import (
    PRIME,
    PRIMEConfig,
    implicit_process_rewards,
    leave_one_out,
    outcome_loss,
    prime_advantages,
)
from creditbench.methods.rloo import rloo_advantages

from strategies import build_batch, rollout_batches

betas = st.sampled_from([0.05, 0.5, 1.0])


@given(batch=rollout_batches(), beta=betas)
def test_the_implicit_rewards_of_a_response_sum_to_its_sequence_log_ratio(batch, beta):
    prm = batch.old_logprobs + 0.1 * torch.randn(batch.old_logprobs.shape)
    ref = batch.old_logprobs
    mask = batch.response_mask
    process = implicit_process_rewards(prm, ref, mask, beta)
    sequence = beta * ((prm * mask).sum(-1) - (ref * mask).sum(-1))  # β log π_φ(y)/π_ref(y)
    torch.testing.assert_close(process.sum(-1), sequence)
    assert (process[mask == 0] == 0).all()  # padding holds garbage log-probs, never read


@given(batch=rollout_batches())
def test_with_the_reward_model_at_its_start_prime_is_whitened_rloo(batch):
    """π_φ = π_ref: every process reward is 0 and the outcome's leave-one-out advantage,
    whitened over the batch, is all that is left (§5.1)."""
    zero = torch.zeros_like(batch.old_logprobs)
    got = prime_advantages(zero, batch.rewards, batch.response_mask, batch.group_ids)
    rloo = rloo_advantages(batch.rewards, batch.response_mask, batch.group_ids)
    torch.testing.assert_close(got, masked_whiten(rloo, batch.response_mask))


@given(batch=rollout_batches())
def test_the_baselines_leave_each_response_out(batch):
    values = torch.randn(batch.size)
    got = leave_one_out(values, batch.group_ids)
    for i in range(batch.size):
        others = (batch.group_ids == batch.group_ids[i]) & (torch.arange(batch.size) != i)
        expected = values[others].mean() if others.any() else torch.tensor(0.0)
        assert got[i].item() == pytest.approx(expected.item(), abs=1e-5)


@given(batch=rollout_batches(), beta=betas)
def test_a_step_on_the_outcome_loss_raises_the_reward_of_correct_responses(batch, beta):
    """The cross-entropy's gradient on the reward model's log-probs pushes the sequence
    reward of a correct response up and of a wrong one down."""
    logprobs = batch.old_logprobs.clone().requires_grad_(True)
    ref = batch.old_logprobs.detach()
    labels = (batch.rewards >= 1).float()
    loss = outcome_loss(logprobs, ref, batch.response_mask, labels, beta).mean()
    loss.backward()
    ascent = -(logprobs.grad * batch.response_mask).sum(-1)  # d(-loss)/d(Σ log π_φ)
    has_tokens = batch.response_mask.sum(-1) > 0
    assert (ascent[(labels == 1) & has_tokens] > 0).all()
    assert (ascent[(labels == 0) & has_tokens] < 0).all()


def test_refuses_a_bad_setting():
    with pytest.raises(ValueError, match="beta"):
        PRIMEConfig(beta=0.0)
    with pytest.raises(ValueError, match="gamma"):
        PRIMEConfig(gamma=1.5)
    with pytest.raises(ValueError, match="services"):
        PRIME().advantages(build_batch([2], [1, 2], [0.0, 1.0]))
