"""Every method that runs inside TRL gives, on the batch TRL sampled, the token advantages the
builtin trainer gives on the same responses: one step of `CreditGRPOTrainer` on the testbed's
tiny model and chain task against the harness's own graded, scored batch of those responses
(`HarnessServices.batch_from_responses`, the initial policy, the same groups). What differs
between the two paths is everything the adapter does: gathering, prompt and completion layout,
rewards from TRL's reward function, the behaviour and reference log-probs and statistics from
TRL's model, the task's prompt variants, the auxiliary model, DAPO's group filter.

They import TRL (the ``compare`` extra), so they run in the ``engines`` step of ``.ci/run``.
"""

from __future__ import annotations

import contextlib
import copy
import io

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig

from creditbench.harness.budget import BudgetMeter
from creditbench.harness.config import RolloutConfig, RunConfig
from creditbench.harness.models.modeling import load_policy
from creditbench.harness.services import HarnessServices
from creditbench.harness.services.engines import TRL, supported_methods
from creditbench.harness.services.step_plan import StepPlan
from creditbench.harness.training.setup import base_policy_path, load_task
from creditbench.integrations.trl import PROBLEM_COLUMN, CreditGRPOTrainer
from creditbench.integrations.trl_services import adamw_like_trl
from creditbench.methods.registry import get_method

pytestmark = pytest.mark.engines

PROMPTS, GROUP, LIMIT = 2, 4, 160
# the methods on TRL's own sampling; those with a rollout of their own:
# tests/test_engine_trl_hosted.py
IN_TRL = sorted(
    name for name in supported_methods(TRL, LIMIT) if get_method(name)().group_filter() is not None
)


@pytest.fixture(scope="module")
def testbed():
    config = RunConfig()
    policy, tokenizer = load_policy(base_policy_path(config))
    policy.eval()
    task = load_task(config)
    problems = task.problems("train")[:32]
    rows = [{"prompt": p.prompt, PROBLEM_COLUMN: i} for i, p in enumerate(problems)]

    def reward(prompts, completions, problem_index, **_):
        graded = zip(problem_index, completions, strict=True)
        return [task.grade(problems[i], text).reward for i, text in graded]

    return policy, tokenizer, task, Dataset.from_list(rows), reward


# options and seeds under which a method's credit is not zero by construction: Pass@k's credit
# is 0 in a group with fewer failures than k (its every k-subset holds a pass), so with the
# default k = 4, the whole group, it is always 0 here; at k = 2 seed 0's groups still hold at
# most one failure beside a pass, seed 1's do not (the comparison would be of zeros)
OPTIONS = {"passk": {"k": 2}}
SEEDS = {"passk": 1}


def _one_trl_step(testbed, tmp_path, method: str, **args):
    """One step of CreditGRPOTrainer; the batch and advantages the method saw."""
    policy, tokenizer, task, dataset, reward = testbed
    config = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=PROMPTS * GROUP,
        num_generations=GROUP,
        max_completion_length=LIMIT,
        temperature=1.0,
        beta=0.0,
        learning_rate=1e-3,
        use_cpu=True,
        bf16=False,
        max_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=args.pop("seed", 0),
        **args,
    )
    trainer = CreditGRPOTrainer(
        method=method,
        method_options=OPTIONS.get(method),
        task=task,
        model=copy.deepcopy(policy),
        reward_funcs=[reward],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    seen = []
    credit = trainer.credit_method.advantages

    def spy(batch, services=None):
        advantages = credit(batch, services)
        seen.append((batch.select(torch.arange(batch.size)), advantages.clone()))
        return advantages

    trainer.credit_method.advantages = spy
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.train()
    assert seen  # T-SPMO's loss mask calls its credit again, without services
    return trainer, *seen[0]


def _builtin_batch(testbed, trl_batch, method_cls, args):
    """The harness's graded, scored batch of the same responses under the initial policy,
    with the same groups, and the services the builtin trainer gives a method."""
    policy, tokenizer, task, _, _ = testbed
    instance = method_cls(**OPTIONS.get(method_cls.name, {}))
    model = copy.deepcopy(policy)
    services = HarnessServices(
        task=task,
        policy=model,
        tokenizer=tokenizer,
        meter=BudgetMeter.for_model(model),
        rollout=RolloutConfig(prompts_per_step=PROMPTS, group_size=GROUP, max_new_tokens=LIMIT),
        micro_batch_size=8,
        seed=0,
        reference=copy.deepcopy(policy).requires_grad_(False) if instance.needs_reference else None,
        policy_optimizer=adamw_like_trl(args),
    )
    services.begin_step(StepPlan(0, behaviour_statistics=method_cls.needs.behaviour_statistics))
    lengths = trl_batch.response_mask.sum(-1).long().tolist()
    responses = [row[:n].tolist() for row, n in zip(trl_batch.response_ids, lengths, strict=True)]
    batch = services.batch_from_responses(trl_batch.extra("problem_index"), responses)
    batch.group_ids = trl_batch.group_ids.clone()
    return instance, batch, services


@pytest.mark.parametrize("name", IN_TRL)
def test_a_method_inside_trl_gives_the_builtin_trainers_advantages(testbed, tmp_path, name):
    method_cls = get_method(name)
    trainer, trl_batch, trl_advantages = _one_trl_step(
        testbed, tmp_path, name, seed=SEEDS.get(name, 0)
    )
    instance, batch, services = _builtin_batch(testbed, trl_batch, method_cls, trainer.args)
    width = trl_batch.response_mask.shape[1]
    assert torch.equal(batch.response_ids[:, :width], trl_batch.response_ids)
    assert torch.equal(batch.response_mask[:, :width], trl_batch.response_mask)
    assert torch.equal(batch.rewards, trl_batch.rewards)  # TRL's reward function is the grader
    assert torch.equal(batch.truncated, trl_batch.truncated)
    # TRL's model before the update, as the builtin's scoring pass
    if method_cls.needs.reads_behaviour:
        torch.testing.assert_close(
            batch.old_logprobs[:, :width], trl_batch.old_logprobs, atol=1e-5, rtol=1e-5
        )
    advantages = instance.advantages(batch, services)[:, :width]
    torch.testing.assert_close(trl_advantages, advantages, atol=1e-5, rtol=1e-5)
    assert bool(trl_advantages.abs().sum() > 0) or len(set(trl_batch.rewards.tolist())) == 1


def test_dynamic_sampling_in_trl_keeps_mixed_groups_and_draws_more(testbed, tmp_path, monkeypatch):
    policy, tokenizer, task, dataset, grade = testbed
    draws = []
    draw = CreditGRPOTrainer._draw

    def counted(self, inputs, group_size):
        draws.append([row[PROBLEM_COLUMN] for row in inputs])
        return draw(self, inputs, group_size)

    monkeypatch.setattr(CreditGRPOTrainer, "_draw", counted)

    def reward(prompts, completions, problem_index, **kw):  # even problems: always passed
        graded = grade(prompts, completions, problem_index, **kw)
        return [1.0 if i % 2 == 0 else r for i, r in zip(problem_index, graded, strict=True)]

    trainer, batch, advantages = _one_trl_step(
        (policy, tokenizer, task, dataset, reward), tmp_path, "dapo", seed=3
    )
    assert len(draws) > 1, "a refill was expected: every even problem's group is uniform"
    assert draws[1] != draws[0]  # a second pass over the training set, in its own order
    for group in batch.group_ids.unique():
        rewards = batch.rewards[batch.group_ids == group]
        assert len(rewards.unique()) > 1  # only mixed groups reach the credit
    assert batch.size % trainer.args.steps_per_generation == 0
    assert bool(advantages.abs().sum() > 0)
    # TRL's completions log shows the kept rows, whichever draw they came from: each row's
    # prompt, completion and reward beside its own credit (not the first draw's rows)
    logs = trainer._logs
    assert len(logs["prompt"]) == len(logs["completion"]) == len(logs["advantages"]) == batch.size
    assert list(logs["rewards"]["reward"]) == batch.rewards.tolist()
    texts = [
        tokenizer.decode(ids[mask > 0], skip_special_tokens=True)
        for ids, mask in zip(batch.response_ids, batch.response_mask, strict=True)
    ]
    assert list(logs["completion"]) == texts
    means = (advantages * batch.response_mask).sum(-1) / batch.response_mask.sum(-1).clamp(min=1)
    assert list(logs["advantages"]) == pytest.approx(means.tolist(), abs=1e-6)
    problems = task.problems("train")
    prompts = [problems[int(i)].prompt for i in batch.extra("problem_index")]
    assert list(logs["prompt"]) == prompts


def test_a_loss_mask_of_its_own_becomes_trls_completion_mask(testbed, tmp_path):
    trainer, batch, _ = _one_trl_step(testbed, tmp_path, "forking")
    outputs = []
    original = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: outputs.append(original(inputs))
    inputs = [dict(row) for row in testbed[3].select(range(PROMPTS)) for _ in range(GROUP)]
    trainer.model.train()
    trainer._generate_and_score_completions(inputs)
    output = outputs[0]
    mask = output["completion_mask"]
    assert 0 < int(mask.sum()) < int(mask.numel())
    assert int(output["num_items_in_batch"]) == int(mask.sum())
    with torch.no_grad():  # only forking tokens (the top 20% entropy of the batch) remain
        assert float(mask.float().mean()) < 0.5


def test_a_method_that_reads_the_tasks_prompts_needs_the_task(testbed, tmp_path):
    policy, tokenizer, _, dataset, reward = testbed
    with pytest.raises(ValueError, match="scapo.*cannot run inside TRL.*creditbench task"):
        CreditGRPOTrainer(
            method="scapo",
            model=copy.deepcopy(policy),
            reward_funcs=[reward],
            args=GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none"),
            train_dataset=dataset,
            processing_class=tokenizer,
        )


# a chat template written in the testbed's alphabet: the prompt, then a blank line to answer
CHAT = (
    "{% for m in messages %}{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}\n\n{% endif %}"
)


def test_one_prompt_format_across_the_builtin_trainer_trl_and_verl(testbed, tmp_path):
    """With a chat template, the builtin trainer, the TRL launch's conversational prompts and
    the verl launch's chat prompts render a task's prompt to the same tokens, so the credit of
    a method that scores the prompt (OTB's behaviour log-probs) agrees through TRL."""
    from creditbench.harness.sampling.rollout import chat_turn, encode, encode_prompts
    from creditbench.tools.reproduce.trl_launch import TRAIN

    policy, tokenizer, task, _, grade = testbed
    chat = copy.deepcopy(tokenizer)
    chat.chat_template = CHAT
    prompt = task.problems("train")[0].prompt
    rendered = encode_prompts(chat, [prompt])[0]
    assert rendered[: len(encode(tokenizer, [prompt])[0])] == encode(tokenizer, [prompt])[0]
    assert len(rendered) > len(encode(tokenizer, [prompt])[0])  # the template's own tokens
    assert "chat_turn(p.prompt) if chat else p.prompt" in TRAIN  # the TRL launch's rows
    problems = task.problems("train")[:32]
    rows = [{"prompt": chat_turn(p.prompt), PROBLEM_COLUMN: i} for i, p in enumerate(problems)]

    def reward(prompts, completions, problem_index, **kw):  # TRL: messages in, messages out
        return grade(prompts, [c[-1]["content"] for c in completions], problem_index, **kw)

    trainer, batch, advantages = _one_trl_step(
        (policy, chat, task, Dataset.from_list(rows), reward), tmp_path, "otb"
    )
    assert trainer._tokenize_prompts([chat_turn(prompt)])[0][0] == rendered  # TRL's own
    first = batch.prompt_ids[0][batch.prompt_mask[0] > 0].tolist()
    assert first == encode_prompts(chat, [problems[int(batch.extra("problem_index")[0])].prompt])[0]
    instance, builtin, services = _builtin_batch(
        (policy, chat, task, None, None), batch, get_method("otb"), trainer.args
    )
    width = batch.response_mask.shape[1]
    torch.testing.assert_close(
        builtin.old_logprobs[:, :width], batch.old_logprobs, atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(
        instance.advantages(builtin, services)[:, :width], advantages, atol=1e-5, rtol=1e-5
    )
