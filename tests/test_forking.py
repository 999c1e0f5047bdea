"""Forking tokens (Beyond the 80/20 Rule): DAPO's gradient on the top-ρ tokens by entropy."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.harness.services.step_plan import StepPlan
from creditbench.methods.contract import BEHAVIOUR_ENTROPY
from creditbench.methods.core import Normalizers
from creditbench.methods.dapo import DAPO
from creditbench.methods.forking import ForkingConfig, ForkingTokens, forking_mask
from creditbench.methods.grpo import GRPO

from fakes import FakeServices
from strategies import rollout_batches

entropy_batches = rollout_batches(statistics=[BEHAVIOUR_ENTROPY])
rhos = st.sampled_from([0.05, 0.2, 0.5, 0.8, 1.0])


@given(batch=entropy_batches, rho=rhos)
def test_exactly_the_top_rho_tokens_by_entropy_keep_credit(batch, rho):
    entropy, mask = batch.extra(BEHAVIOUR_ENTROPY), batch.response_mask
    kept = forking_mask(entropy, mask, rho) > 0
    valid = mask > 0
    count = int(valid.sum())
    assert not (kept & ~valid).any()
    # at least ceil(rho N); more only where entropies tie at the threshold
    assert kept.sum() >= min(count, math.ceil(rho * count - 1e-9))
    if kept.any() and (valid & ~kept).any():
        assert entropy[kept].min() > entropy[valid & ~kept].max()
    distinct = entropy[valid].unique().numel() == count
    if distinct:
        assert kept.sum() == max(1, math.ceil(rho * count - 1e-9))


@given(batch=entropy_batches, rho=rhos)
def test_only_forking_tokens_get_dapos_credit_and_count_in_the_loss(batch, rho):
    services = FakeServices()
    forking = ForkingTokens(rho=rho)
    got = forking.advantages(batch, services)
    dapo = DAPO().advantages(batch, services)
    kept = forking.loss_mask(batch) > 0
    torch.testing.assert_close(got[kept], dapo[kept])
    assert (got[~kept] == 0).all()
    trained = DAPO().trained_responses(batch)
    assert not kept[~trained].any()  # groups dynamic sampling leaves out are not counted


@given(batch=entropy_batches)
def test_at_rho_one_it_is_dapo(batch):
    services = FakeServices()
    dapo, forking = DAPO(), ForkingTokens(rho=1.0)
    trained = dapo.trained_responses(batch).unsqueeze(-1).float()
    expected = dapo.advantages(batch, services)
    torch.testing.assert_close(forking.advantages(batch, services), expected)
    torch.testing.assert_close(forking.loss_mask(batch), batch.response_mask * trained)


@given(batch=entropy_batches)
def test_without_dapos_additions_at_rho_one_it_is_grpo(batch):
    grpo_like = dict(
        eps_high=0.2,
        aggregation="seq-mean-token-mean",
        dynamic_sampling=False,
        overlong_shaping=False,
        rho=1.0,
    )
    services = FakeServices()
    forking, grpo = ForkingTokens(**grpo_like), GRPO()
    advantages = forking.advantages(batch, services)
    torch.testing.assert_close(advantages, grpo.advantages(batch, services))
    logprobs = batch.old_logprobs + 0.05 * torch.randn(batch.old_logprobs.shape)
    ours, _ = forking.loss(logprobs, batch, advantages, Normalizers.of(forking.loss_mask(batch)))
    theirs, _ = grpo.loss(logprobs, batch, advantages, Normalizers.of(batch.response_mask))
    torch.testing.assert_close(ours, theirs)


def test_the_loss_averages_over_the_forking_tokens_alone():
    """Eq. 6: one over the number of selected tokens, not over every response token."""
    batch = next_batch()
    forking = ForkingTokens(rho=0.25, dynamic_sampling=False, overlong_shaping=False)
    advantages = forking.advantages(batch, FakeServices())
    kept = forking.loss_mask(batch)
    logprobs = batch.old_logprobs.clone().requires_grad_(True)
    loss, _ = forking.loss(logprobs, batch, advantages)
    # at ratio 1 the token-mean surrogate is -mean over the kept tokens of the advantage
    torch.testing.assert_close(loss, -(advantages * kept).sum() / kept.sum())
    (grad,) = torch.autograd.grad(loss, logprobs)
    assert (grad[kept == 0] == 0).all() and (grad[kept > 0] != 0).any()


def next_batch():
    batch = FakeServices(seed=3).sample_batch()
    assert BEHAVIOUR_ENTROPY in batch.extras
    return batch


def test_a_batch_without_entropy_and_a_bad_rho_are_refused():
    batch = next_batch()
    del batch.extras[BEHAVIOUR_ENTROPY]
    with pytest.raises(ValueError, match="behaviour entropy"):
        ForkingTokens().advantages(batch, FakeServices())
    for rho in (0.0, 1.5, -0.2):
        with pytest.raises(ValueError, match="^rho:"):
            ForkingConfig(rho=rho)
    assert ForkingTokens.needs.behaviour_statistics == (BEHAVIOUR_ENTROPY,)
    assert not ForkingTokens.group_local


def test_the_harness_hands_the_scoring_passes_entropy_to_a_method_that_needs_it(tmp_path):
    from creditbench.harness.config import load_config
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, save_policy
    from creditbench.harness.scoring.forward import token_logprobs_and_entropy
    from creditbench.harness.tasks import get_task
    from creditbench.harness.training.trainer import Trainer

    tokenizer = build_char_tokenizer(task_alphabet(get_task("chain", steps=2)))
    policy = save_policy(build_model("nano", tokenizer, seed=0), tokenizer, tmp_path / "nano")
    on_policy = ["train.minibatches=1", "train.ppo_epochs=1", "train.skip_onpolicy_scoring=true"]
    settings = ["task=chain", "task_options.steps=2", f"model.path={policy}", *on_policy]
    config = load_config(None, settings)
    trainer = Trainer(config, str(tmp_path / "run"))
    trainer.build()
    services = trainer.services
    services.begin_step(StepPlan(0))
    assert BEHAVIOUR_ENTROPY not in services.sample_batch().extras  # only when asked
    services.begin_step(StepPlan(1, behaviour_statistics=(BEHAVIOUR_ENTROPY,)))
    batch = services.sample_batch()
    with torch.no_grad():
        logprobs, entropy = token_logprobs_and_entropy(
            trainer.policy,
            batch.prompt_ids,
            batch.prompt_mask,
            batch.response_ids,
            batch.response_mask,
            temperature=config.rollout.temperature,
        )
    torch.testing.assert_close(batch.extra(BEHAVIOUR_ENTROPY), entropy, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(batch.old_logprobs, logprobs, atol=1e-5, rtol=1e-5)
    # exactly on-policy, GRPO's scoring pass is skipped; a method that reads the entropy keeps it
    assert StepPlan.for_method(0, GRPO(), trainer.config.train).behaviour_from_update
    assert not StepPlan.for_method(0, ForkingTokens(), trainer.config.train).behaviour_from_update
