"""TRL hosts a method's own loss and its own sampling, and gives what the builtin trainer gives.

A method with a loss of its own (DFPO's reweighted surrogate, SDPO's top-K distillation) trains
inside `CreditGRPOTrainer` with that loss: TRL's ``compute_loss`` hands it TRL's log-probs of
the micro-batch and the generation batch's counts; its loss there equals the builtin trainer's
on the same responses. A method that samples its own batch (OPPO's host sampling aside: it
runs on TRL's own) runs its rollout through the harness's services on TRL's model, from the
prompts TRL's sampler chose; its batch and credit equal the builtin trainer's from the same
prompts and seed, and TRL trains on exactly that batch. The refusals that remain say why.

They import TRL (the ``compare`` extra), so they run in the ``engines`` step of ``.ci/run``.
"""

from __future__ import annotations

import copy

import pytest
import test_engine_trl_methods as trl_methods
import torch
from trl import GRPOConfig

from creditbench.harness.budget import BudgetMeter
from creditbench.harness.config import RolloutConfig
from creditbench.harness.scoring.forward import token_logprobs_and_entropy
from creditbench.harness.services import HarnessServices
from creditbench.harness.services.engines import TRL, has_own_loss, supported_methods
from creditbench.harness.services.step_plan import StepPlan
from creditbench.integrations.trl import CreditGRPOTrainer
from creditbench.integrations.trl_services import TRLRolloutServices, adamw_like_trl
from creditbench.methods.core import Normalizers
from creditbench.methods.registry import get_method

pytestmark = pytest.mark.engines

# the testbed's tiny model and chain task, and one TRL step on it, as the 15 methods' tests use
testbed = trl_methods.testbed
PROMPTS, GROUP, LIMIT = trl_methods.PROMPTS, trl_methods.GROUP, trl_methods.LIMIT
_builtin_batch, _one_trl_step = trl_methods._builtin_batch, trl_methods._one_trl_step

SEEDS_OF_THE_ISSUE = ("oppo", "sdpo", "dfpo", "rrpo", "srpo", "ibpo", "ccpo")
OWN_ROLLOUT = sorted(
    n for n in supported_methods(TRL, LIMIT) if get_method(n)().group_filter() is None
)
OWN_LOSS = sorted(
    n
    for n in supported_methods(TRL, LIMIT)
    if has_own_loss(get_method(n)()) and get_method(n)().group_filter() is not None
)


def test_the_seed_methods_run_inside_trl():
    assert set(SEEDS_OF_THE_ISSUE) <= set(supported_methods(TRL, LIMIT))
    assert {"dfpo", "sdpo"} <= set(OWN_LOSS)
    assert {"ccpo", "ibpo", "rrpo", "srpo"} <= set(OWN_ROLLOUT)
    assert "oppo" not in OWN_ROLLOUT  # GRPO + OPPO: its host's plain batch, TRL's own sampling


def _spy_losses(trainer):
    """Record every call of the method's loss inside TRL: its arguments and its value."""
    calls = []
    loss = trainer.credit_method.loss

    def spy(logprobs, batch, advantages, normalizers=None, services=None):
        value, stats = loss(logprobs, batch, advantages, normalizers, services)
        calls.append((batch, advantages.detach().clone(), normalizers, float(value.detach())))
        return value, stats

    trainer.credit_method.loss = spy
    return calls


@pytest.mark.parametrize("name", OWN_LOSS)
def test_a_loss_of_its_own_inside_trl_is_the_builtin_trainers(testbed, tmp_path, name):
    captured = {}
    original = CreditGRPOTrainer._keep_for_loss

    def keep(self, batch, advantages, output, rows):
        captured["calls"] = captured.get("calls") or _spy_losses(self)
        original(self, batch, advantages, output, rows)

    CreditGRPOTrainer._keep_for_loss = keep
    try:
        trainer, trl_batch, trl_advantages = _one_trl_step(testbed, tmp_path, name)
    finally:
        CreditGRPOTrainer._keep_for_loss = original
    calls = captured["calls"]
    assert len(calls) == 1  # one micro-batch: the whole generation batch, in TRL's order
    _, _, normalizers, trl_loss = calls[0]
    instance, batch, services = _builtin_batch(testbed, trl_batch, get_method(name), trainer.args)
    advantages = instance.advantages(batch, services)
    width = trl_batch.response_mask.shape[1]
    torch.testing.assert_close(trl_advantages, advantages[:, :width], atol=1e-5, rtol=1e-5)
    assert normalizers == Normalizers.of(instance.loss_mask(batch)[:, :width])
    policy = services.scorers.policy  # the initial policy, as TRL's before its first update
    logprobs, _ = token_logprobs_and_entropy(
        policy, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask
    )
    builtin_loss, _ = instance.loss(logprobs, batch, advantages, None, services)
    assert trl_loss == pytest.approx(float(builtin_loss.detach()), abs=1e-5)
    assert trl_loss != 0.0


def _trl_rollout_step(testbed, tmp_path, name):
    """One step of CreditGRPOTrainer with a method's own rollout: the prompts TRL chose, the
    refill prompts drawn, the batch and credit the method made, and what TRL trained on."""
    seen = {}
    rollout_step = CreditGRPOTrainer._own_rollout_batch

    def spy(self, inputs, step, max_steps):
        services = self.credit_services
        more = services.prompts.more
        seen["more"] = []

        def recorded():
            prompts = more()
            seen["more"].append(prompts)
            return prompts

        services.prompts.more = recorded
        rollout = self.credit_method.rollout
        self.credit_method.rollout = lambda s: seen.setdefault("batch", rollout(s))
        output = rollout_step(self, inputs, step, max_steps)
        seen.setdefault("first", list(services.prompts.first))
        seen.setdefault("output", {k: v.clone() for k, v in output.items()})
        return output

    CreditGRPOTrainer._own_rollout_batch = spy
    try:
        trainer, batch, advantages = _one_trl_step(testbed, tmp_path, name)
    finally:
        CreditGRPOTrainer._own_rollout_batch = rollout_step
    assert batch is seen["batch"] or torch.equal(batch.response_ids, seen["batch"].response_ids)
    return trainer, seen, batch, advantages


class _SamePrompts:
    """The builtin's prompt schedule, drawing the prompts the TRL step drew."""

    def __init__(self, first, more):
        self.first, self.more, self.calls = first, list(more), 0

    def next_call(self, step):
        self.calls += 1
        return self.calls - 1

    def indices(self, step, call=0):
        return self.first if call == 0 else self.more.pop(0)


@pytest.mark.parametrize("name", OWN_ROLLOUT)
def test_an_own_rollout_inside_trl_samples_and_credits_as_the_builtin_trainer(
    testbed, tmp_path, name
):
    trainer, seen, trl_batch, trl_advantages = _trl_rollout_step(testbed, tmp_path, name)
    assert isinstance(trainer.credit_services, TRLRolloutServices)
    # TRL's sampler chose the step's prompts: one per group of TRL's generation batch
    assert len(seen["first"]) == PROMPTS
    # the builtin trainer's services on the same initial policy, prompts and seed
    policy, tokenizer, task, _, _ = testbed
    instance = get_method(name)()
    model = copy.deepcopy(policy)
    services = HarnessServices(
        task=task,
        policy=model,
        tokenizer=tokenizer,
        meter=BudgetMeter.for_model(model),
        rollout=RolloutConfig(prompts_per_step=PROMPTS, group_size=GROUP, max_new_tokens=LIMIT),
        micro_batch_size=PROMPTS * GROUP,
        seed=0,
        reference=copy.deepcopy(policy) if instance.needs_reference else None,
        policy_optimizer=adamw_like_trl(trainer.args),
    )
    services.prompt_schedule = _SamePrompts(seen["first"], seen["more"])
    services.begin_step(StepPlan(0, behaviour_statistics=instance.needs.behaviour_statistics))
    batch = instance.rollout(services)
    advantages = instance.advantages(batch, services) * batch.response_mask
    assert torch.equal(batch.response_ids, trl_batch.response_ids)
    torch.testing.assert_close(batch.rewards, trl_batch.rewards, equal_nan=True)  # InT: NaN
    assert torch.equal(batch.group_ids, trl_batch.group_ids)
    torch.testing.assert_close(batch.old_logprobs, trl_batch.old_logprobs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(advantages, trl_advantages, atol=1e-5, rtol=1e-5)
    # TRL trains on that batch: its ids, its mask (the method's loss mask), its credit
    output = seen["output"]
    assert torch.equal(output["completion_ids"], batch.response_ids)
    assert torch.equal(output["prompt_ids"], batch.prompt_ids)
    mask = instance.loss_mask(batch)
    assert torch.equal(output["completion_mask"], mask.to(torch.int))
    torch.testing.assert_close(output["advantages"], advantages, atol=1e-5, rtol=1e-5)
    assert bool(trl_advantages.abs().sum() > 0)


def test_an_own_rollout_needs_the_task_and_its_problem_column(testbed, tmp_path):
    policy, tokenizer, task, dataset, reward = testbed
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    common = dict(model=copy.deepcopy(policy), reward_funcs=[reward], args=args)
    with pytest.raises(ValueError, match="'ibpo' cannot run inside TRL.*needs a creditbench task"):
        CreditGRPOTrainer(
            method="ibpo", train_dataset=dataset, processing_class=tokenizer, **common
        )
    with pytest.raises(ValueError, match="train_dataset.*'problem_index' column"):
        CreditGRPOTrainer(
            method="ibpo",
            task=task,
            train_dataset=dataset.remove_columns("problem_index"),
            processing_class=tokenizer,
            **common,
        )
