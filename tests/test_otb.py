"""OTB (the optimal token baseline): a per-position baseline weighted by each path's variance."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.harness.services.step_plan import StepPlan
from creditbench.methods.contract import BEHAVIOUR_SUM_PI_SQUARED
from creditbench.methods.grpo import GRPO
from creditbench.methods.otb import (
    OTB,
    OTBConfig,
    logit_gradient_proxy,
    optimal_token_baselines,
    otb_advantages,
)

from fakes import FakeServices
from strategies import build_batch, rollout_batches

otb_batches = rollout_batches(statistics=[BEHAVIOUR_SUM_PI_SQUARED])


def loop_advantages(batch, zero_tail: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """The estimator written out one group, one position and one response at a time."""
    mask = batch.response_mask.double()
    pi = batch.old_logprobs.double().exp()
    s2 = batch.extra(BEHAVIOUR_SUM_PI_SQUARED).double()
    lengths = [int(n) for n in mask.sum(-1).tolist()]
    out = torch.zeros_like(mask)
    for group in set(batch.group_ids.tolist()):
        rows = [i for i, g in enumerate(batch.group_ids.tolist()) if g == group]
        weight = {i: [] for i in rows}
        for i in rows:
            total = 0.0
            for t in range(lengths[i]):
                total += max(0.0, 1.0 - 2.0 * float(pi[i, t]) + float(s2[i, t]))
                weight[i].append(total)
        ordered = sorted(lengths[i] for i in rows)
        for i in rows:
            reward = float(batch.rewards[i])
            for t in range(lengths[i]):
                running = [j for j in rows if t < lengths[j]]
                if len(rows) == 1:
                    baseline = 0.0
                elif zero_tail and lengths[i] == ordered[-1] > ordered[-2] and t >= ordered[-2]:
                    baseline = 0.0
                else:
                    num = sum(float(batch.rewards[j]) * weight[j][t] for j in running)
                    baseline = num / (sum(weight[j][t] for j in running) + eps)
                out[i, t] = reward - baseline
    return out


@given(batch=otb_batches, zero_tail=st.booleans())
def test_the_advantages_are_the_estimator_written_out_token_by_token(batch, zero_tail):
    got = OTB(zero_tail=zero_tail).advantages(batch)
    torch.testing.assert_close(
        got.double(), loop_advantages(batch, zero_tail), atol=1e-5, rtol=1e-5
    )


def test_the_proxy_is_the_squared_norm_of_the_log_probs_logit_gradient():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 11, generator=gen, dtype=torch.float64) * 2.0
    tokens = torch.randint(0, 11, (6,), generator=gen)
    logits.requires_grad_(True)
    chosen = torch.log_softmax(logits, -1).gather(-1, tokens[:, None]).sum()
    (grad,) = torch.autograd.grad(chosen, logits)
    probs = torch.softmax(logits.detach(), -1)
    proxy = logit_gradient_proxy(
        probs.gather(-1, tokens[:, None]).squeeze(-1).log(), probs.square().sum(-1), torch.ones(6)
    )
    torch.testing.assert_close(proxy, grad.square().sum(-1))


def test_equal_paths_give_the_mean_reward_of_the_responses_still_running():
    # every token has the same proxy, so W_t is the same for every running response and B_t
    # is the plain mean of their rewards; the third response ends after 2 tokens
    batch = build_batch(
        [3], [4, 4, 2], [1.0, 0.0, 1.0], seed=0, statistics=[BEHAVIOUR_SUM_PI_SQUARED]
    )
    batch.old_logprobs = torch.full_like(batch.old_logprobs, -0.5)
    batch.extras[BEHAVIOUR_SUM_PI_SQUARED] = torch.full_like(batch.old_logprobs, 0.5)
    adv = OTB().advantages(batch)
    torch.testing.assert_close(adv[:, :2], torch.tensor([[1 / 3] * 2, [-2 / 3] * 2, [1 / 3] * 2]))
    torch.testing.assert_close(adv[:2, 2:], torch.tensor([[0.5, 0.5], [-0.5, -0.5]]))
    assert adv[2, 2:].abs().sum() == 0  # past its end: no credit


def test_a_path_of_more_variance_weighs_more_in_the_baseline():
    # two responses; the passed one's first token is uncertain (proxy near 1), the failed one's
    # certain (proxy near 0): the baseline leans to the passed response's return, 1
    batch = build_batch([2], [1, 1], [1.0, 0.0], seed=0, statistics=[BEHAVIOUR_SUM_PI_SQUARED])
    batch.old_logprobs = torch.tensor([[torch.tensor(0.05).log()], [torch.tensor(0.99).log()]])
    batch.extras[BEHAVIOUR_SUM_PI_SQUARED] = torch.tensor([[0.05], [0.99**2]])
    adv = OTB().advantages(batch)
    grpo_like = torch.tensor([[0.5], [-0.5]])
    assert adv[0, 0] < grpo_like[0, 0] and adv[1, 0] < grpo_like[1, 0]
    assert 0.0 < adv[0, 0] < 0.05 and -1.0 < adv[1, 0] < -0.95


def test_the_zero_tail_gives_the_only_longest_response_its_reward_past_the_others():
    batch = build_batch(
        [3], [6, 3, 2], [1.0, 0.0, 1.0], seed=1, statistics=[BEHAVIOUR_SUM_PI_SQUARED]
    )
    on = OTB().advantages(batch)
    off = OTB(zero_tail=False).advantages(batch)
    torch.testing.assert_close(on[0, 3:6], torch.ones(3))
    assert off[0, 3:6].abs().max() < 1e-4  # alone, its own return is its baseline (ε aside)
    torch.testing.assert_close(on[:, :3], off[:, :3])
    # two responses tied for longest: no tail
    tied = build_batch(
        [3], [6, 6, 2], [1.0, 0.0, 1.0], seed=1, statistics=[BEHAVIOUR_SUM_PI_SQUARED]
    )
    torch.testing.assert_close(OTB().advantages(tied), OTB(zero_tail=False).advantages(tied))


def test_a_group_of_one_gets_its_reward_and_groups_do_not_mix():
    batch = build_batch(
        [1, 2], [3, 2, 4], [1.0, 1.0, 0.0], seed=2, statistics=[BEHAVIOUR_SUM_PI_SQUARED]
    )
    adv = OTB().advantages(batch)
    torch.testing.assert_close(adv[0, :3], torch.ones(3))
    alone = build_batch([2], [2, 4], [1.0, 0.0], seed=2, statistics=[BEHAVIOUR_SUM_PI_SQUARED])
    alone.old_logprobs = batch.old_logprobs[1:, :4]
    alone.extras[BEHAVIOUR_SUM_PI_SQUARED] = batch.extra(BEHAVIOUR_SUM_PI_SQUARED)[1:, :4]
    torch.testing.assert_close(OTB().advantages(alone), adv[1:, :4])


def test_baselines_are_zero_off_the_mask():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    baselines = optimal_token_baselines(
        torch.ones(2, 3), torch.ones(2, 3), mask, torch.tensor([0, 0]), zero_tail=False
    )
    assert baselines[mask == 0].abs().sum() == 0


def test_a_batch_without_the_statistic_is_refused_and_the_harness_is_told_to_compute_it():
    batch = build_batch([2], [2, 2], [1.0, 0.0], seed=0)
    with pytest.raises(ValueError, match="sum of squared probabilities"):
        OTB().advantages(batch, FakeServices())
    assert OTB.needs.behaviour_statistics == (BEHAVIOUR_SUM_PI_SQUARED,)
    with pytest.raises(ValueError, match="^eps:"):
        OTBConfig(eps=0.0)


def test_the_harness_scoring_pass_gives_the_sum_of_squared_probabilities(tmp_path):
    from creditbench.harness.config import load_config
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, save_policy
    from creditbench.harness.scoring.forward import response_logits
    from creditbench.harness.tasks import get_task
    from creditbench.harness.training.trainer import Trainer

    tokenizer = build_char_tokenizer(task_alphabet(get_task("chain", steps=2)))
    policy = save_policy(build_model("nano", tokenizer, seed=0), tokenizer, tmp_path / "nano")
    on_policy = ["train.minibatches=1", "train.ppo_epochs=1", "train.skip_onpolicy_scoring=true"]
    settings = ["task=chain", "task_options.steps=2", f"model.path={policy}", *on_policy]
    config = load_config(None, [*settings, "rollout.temperature=0.7"])
    trainer = Trainer(config, str(tmp_path / "run"))
    trainer.build()
    services = trainer.services
    services.begin_step(StepPlan(0, behaviour_statistics=(BEHAVIOUR_SUM_PI_SQUARED,)))
    batch = services.sample_batch()
    with torch.no_grad():
        logits = response_logits(
            trainer.policy,
            batch.prompt_ids,
            batch.prompt_mask,
            batch.response_ids,
            batch.response_mask,
        )
    expected = torch.softmax(logits / 0.7, -1).square().sum(-1) * batch.response_mask
    torch.testing.assert_close(
        batch.extra(BEHAVIOUR_SUM_PI_SQUARED), expected, atol=1e-5, rtol=1e-5
    )
    # the statistic is consistent with the batch's behaviour log-probs: Σπ² >= π²
    pi = batch.old_logprobs.exp() * batch.response_mask
    assert bool((batch.extra(BEHAVIOUR_SUM_PI_SQUARED) >= pi.square() - 1e-6).all())
    # exactly on-policy the scoring pass is skipped for GRPO, never for OTB, which reads it
    assert StepPlan.for_method(0, GRPO(), trainer.config.train).behaviour_from_update
    assert not StepPlan.for_method(0, OTB(), trainer.config.train).behaviour_from_update


def test_otb_advantages_keeps_the_mask_dtype():
    batch = build_batch([2], [2, 1], [1.0, 0.0], seed=3, statistics=[BEHAVIOUR_SUM_PI_SQUARED])
    adv = otb_advantages(
        batch.rewards, batch.response_mask, batch.group_ids, batch.old_logprobs,
        batch.extra(BEHAVIOUR_SUM_PI_SQUARED),
    )  # fmt: skip
    assert adv.dtype == batch.response_mask.dtype


@given(batch=otb_batches, zero_tail=st.booleans())
def test_uniform_weighting_is_the_plain_mean_of_the_running_returns(batch, zero_tail):
    """The ablation without OTB's weights: B_t is the mean reward of the group's responses still
    running at t (the zero tail as OTB's), whatever the behaviour statistics say."""
    got = OTB(zero_tail=zero_tail, weighting="uniform").advantages(batch)
    mask = batch.response_mask.double()
    lengths = [int(n) for n in mask.sum(-1).tolist()]
    expected = torch.zeros_like(mask)
    for group in set(batch.group_ids.tolist()):
        rows = [i for i, g in enumerate(batch.group_ids.tolist()) if g == group]
        ordered = sorted(lengths[i] for i in rows)
        for i in rows:
            for t in range(lengths[i]):
                running = [j for j in rows if t < lengths[j]]
                alone = len(rows) == 1 or (
                    zero_tail and lengths[i] == ordered[-1] > ordered[-2] and t >= ordered[-2]
                )
                if alone:
                    baseline = 0.0
                else:
                    baseline = sum(float(batch.rewards[j]) for j in running) / len(running)
                expected[i, t] = float(batch.rewards[i]) - baseline
    torch.testing.assert_close(got.double(), expected, atol=1e-6, rtol=1e-6)


def test_uniform_weighting_is_refused_under_another_name():
    with pytest.raises(ValueError, match="weighting: must be one of path_variance, uniform"):
        OTBConfig(weighting="flat")
