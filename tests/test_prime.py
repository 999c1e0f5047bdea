"""PRIME: implicit process rewards from a reward model trained online on the outcomes."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.methods.core import masked_whiten
from creditbench.methods.prime import (
    PRIME,
    PRIMEConfig,
    batch_normalized,
    implicit_process_rewards,
    leave_one_out,
    outcome_loss,
    prime_advantages,
    prime_token_rewards,
    term_weight,
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
    torch.testing.assert_close(got, whitened_rloo(batch))


def whitened_rloo(batch):
    """``[B, T]`` the outcome's leave-one-out advantage whitened over the batch: PRIME
    without process rewards."""
    rloo = rloo_advantages(batch.rewards, batch.response_mask, batch.group_ids)
    return masked_whiten(rloo, batch.response_mask)


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


@given(batch=rollout_batches(), scale=st.floats(1e-4, 10.0))
def test_batch_norm_scales_the_largest_return_of_the_batch_to_one(batch, scale):
    """``prime_norm: batch_norm``: every process reward divided by the batch's largest
    |return|, so the largest is 1 whatever β·log-ratio's size (PRIME-RL's dp_prime.py)."""
    raw = scale * torch.randn(batch.old_logprobs.shape) * batch.response_mask
    returns = raw.flip(-1).cumsum(-1).flip(-1).abs().max()
    normalized = batch_normalized(raw)
    largest = normalized.flip(-1).cumsum(-1).flip(-1).abs().max()
    if returns > 1e-3:
        assert largest.item() == pytest.approx(1.0, rel=1e-2)
    torch.testing.assert_close(normalized * (returns + 1e-6), raw)


def test_on_the_first_testbed_step_prime_is_exactly_whitened_rloo(tmp_path):
    """The first step's reward model is the reference: its process rewards are 0 (§5.1). In
    this layout (four prompts of four) the two passes' computed log-ratio is float noise of
    about 1e-10 a token, which the batch norm would raise to about 0.4% of the outcome term,
    and differently on each CPU."""
    trainer = prime_trainer(tmp_path, "rollout.prompts_per_step=4", "rollout.group_size=4")
    record = trainer.train_step()
    batch, advantages = trainer.last_credit
    assert record["process_reward_abs"] == 0.0
    torch.testing.assert_close(advantages, whitened_rloo(batch), rtol=0, atol=1e-6)


def prime_trainer(folder, *overrides):
    """A built PRIME trainer on the shipped testbed base policy, with a budget of two steps."""
    from creditbench.harness.config import load_config
    from creditbench.harness.training.trainer import Trainer

    budget = ["budget.unit=steps", "budget.amount=2", "budget.eval_fractions=[1.0]"]
    config = load_config(None, ["method=prime", "task=chain", *budget, *overrides])
    trainer = Trainer(config, folder)
    trainer.build()
    return trainer


@pytest.fixture(scope="module")
def testbed_steps(tmp_path_factory):
    """Two PRIME steps on the shipped testbed base policy for each ``process_norm``: the
    second step's record and credit (the first step's reward model is the reference, so its
    process rewards are 0)."""
    out = {}
    for norm in ("batch_norm", "none"):
        trainer = prime_trainer(
            tmp_path_factory.mktemp(norm),
            f"method_options.process_norm={norm}",
            "rollout.prompts_per_step=2",
            "rollout.group_size=8",
            "rollout.max_new_tokens=160",
            "train.lr=5e-5",
        )
        trainer.train_step()
        record = trainer.train_step()
        out[norm] = (record, *trainer.last_credit)
    return out


def test_on_a_testbed_batch_the_normalised_process_term_moves_the_advantages(testbed_steps):
    """The raw β·log-ratio returns are about 1% of the outcome term's on the testbed, so
    without the normalisation PRIME's advantages are whitened RLOO's to within a few
    hundredths; with it the process term weighs a sizeable fraction of the outcome's and the
    advantages move by a good part of a standard deviation."""
    for norm, (record, batch, advantages) in testbed_steps.items():
        moved = ((advantages - whitened_rloo(batch)).abs() * batch.response_mask).max().item()
        if norm == "none":
            assert record["process_to_outcome"] < 0.05
            assert moved < 0.1
        else:
            assert record["process_to_outcome"] > 0.1
            assert moved > 0.3


def test_the_process_to_outcome_weight_is_undefined_without_a_mixed_group():
    """A batch whose groups all failed has an outcome term of 0: the weight is NaN (and left
    out of the step's record), not the process term over a 1e-12 floor (about 1e10)."""
    mask = torch.ones(4, 3)
    process = torch.arange(12.0).reshape(4, 3) / 100  # differs between the responses
    group_ids = torch.tensor([0, 0, 1, 1])
    all_fail = prime_token_rewards(process, torch.zeros(4), mask, group_ids)
    assert math.isnan(term_weight(*all_fail, mask))
    mixed = prime_token_rewards(process, torch.tensor([1.0, 0.0, 0.0, 0.0]), mask, group_ids)
    weight = term_weight(*mixed, mask)
    assert math.isfinite(weight) and 0 < weight < 10
