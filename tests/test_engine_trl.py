"""Differential tests of the TRL adapter on the testbed's tiny model and chain task: through
`CreditGRPOTrainer`, creditbench's ``grpo`` takes the same two steps as TRL's own
``GRPOTrainer`` (same samples, loss and weights), and a token-level method (TEMPO) trains two
steps end to end with advantages that vary along a response.

They import TRL (the ``compare`` extra), so they run in the ``engines`` step of ``.ci/run``.
"""

from __future__ import annotations

import contextlib
import copy
import io

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from creditbench.harness.config import RunConfig
from creditbench.harness.models.modeling import load_policy
from creditbench.harness.training.setup import base_policy_path, load_task
from creditbench.integrations.trl import CreditGRPOTrainer

pytestmark = pytest.mark.engines

ROWS, GROUP = 8, 4  # two prompts of four completions a step


@pytest.fixture(scope="module")
def testbed():
    config = RunConfig()
    policy, tokenizer = load_policy(base_policy_path(config))
    task = load_task(config)
    problems = task.problems("train")[:16]
    dataset = Dataset.from_list([{"prompt": p.prompt, "index": i} for i, p in enumerate(problems)])

    def reward(prompts, completions, index, **_):
        return [
            task.grade(problems[i], text).reward for i, text in zip(index, completions, strict=True)
        ]

    return policy, tokenizer, dataset, reward


def _train(trainer_class, testbed, tmp_path, **extra):
    policy, tokenizer, dataset, reward = testbed
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=ROWS,
        num_generations=GROUP,
        max_completion_length=160,
        temperature=1.0,
        beta=0.0,
        loss_type="grpo",
        learning_rate=1e-3,
        use_cpu=True,
        bf16=False,
        max_steps=2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )
    trainer = trainer_class(
        model=copy.deepcopy(policy),
        reward_funcs=[reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        **extra,
    )
    seen = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        output = original(inputs)
        seen.append({k: v.clone() for k, v in output.items() if isinstance(v, torch.Tensor)})
        return output

    trainer._generate_and_score_completions = spy
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.train()
    return trainer, seen


def test_grpo_through_the_adapter_takes_trls_own_two_steps(testbed, tmp_path):
    theirs, their_batches = _train(GRPOTrainer, testbed, tmp_path / "trl")
    # TRL's GRPO: (r - mean) / (unbiased std + 1e-4)
    ours, our_batches = _train(
        CreditGRPOTrainer,
        testbed,
        tmp_path / "ours",
        method="grpo",
        method_options={"std_eps": 1e-4},
    )
    assert len(our_batches) == len(their_batches) == 2
    for mine, trl in zip(our_batches, their_batches, strict=True):
        assert torch.equal(mine["completion_ids"], trl["completion_ids"])
        mask = mine["completion_mask"]
        assert mine["advantages"].shape == mask.shape  # [B, T] against TRL's [B]
        expected = trl["advantages"][:, None] * mask
        torch.testing.assert_close(mine["advantages"], expected, atol=1e-6, rtol=1e-6)
    assert any(bool(b["advantages"].abs().sum() > 0) for b in their_batches)  # a step learned
    losses = [[log["loss"] for log in t.state.log_history if "loss" in log] for t in (ours, theirs)]
    assert losses[0] == pytest.approx(losses[1], abs=1e-6)
    # GRPO's credit is one value a completion: the table shows TRL's own advantages, no spread
    assert list(ours._logs["advantages"]) == pytest.approx(
        list(theirs._logs["advantages"]), abs=1e-6
    )
    spreads = [
        log["credit/token_std"] for log in ours.state.log_history if "credit/token_std" in log
    ]
    assert spreads and max(spreads) == pytest.approx(0.0, abs=1e-6)
    for a, b in zip(ours.model.parameters(), theirs.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_a_token_level_method_trains_two_steps_with_credit_along_the_response(testbed, tmp_path):
    trainer, batches = _train(CreditGRPOTrainer, testbed, tmp_path, method="tempo")
    assert trainer.state.global_step == 2
    assert len(batches) == 2
    varying = False
    for batch in batches:
        advantages, mask = batch["advantages"], batch["completion_mask"]
        assert torch.all(advantages[mask == 0] == 0)
        first = advantages[:, :1].expand_as(advantages) * mask
        varying |= not torch.allclose(advantages, first)
    assert varying  # TEMPO's tree credit, not one number a response
    # TRL's completions table holds the method's credit (each completion's mean over its
    # tokens), not TRL's own advantages; the spread along completions is a metric
    last = batches[-1]
    mask = last["completion_mask"]
    means = (last["advantages"] * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    logged = list(trainer._logs["advantages"])[-len(means) :]
    assert logged == pytest.approx(means.tolist(), abs=1e-6)
    spreads = [
        log["credit/token_std"] for log in trainer.state.log_history if "credit/token_std" in log
    ]
    assert spreads and max(spreads) > 0
    before = testbed[0].state_dict()
    moved = [not torch.equal(p, before[n]) for n, p in trainer.model.state_dict().items()]
    assert any(moved)


def test_a_method_that_needs_the_harness_is_refused_before_trl_starts(testbed, tmp_path):
    with pytest.raises(ValueError, match="oracle.*cannot run inside TRL"):
        _train(CreditGRPOTrainer, testbed, tmp_path, method="oracle")


def test_a_reproduce_launch_gives_grpo_config_only_arguments_it_has(tmp_path):
    import json

    from creditbench.tools.cli.main import main

    args = ["reproduce", "drgrpo", "--scale", "paper", "--task", "math", "--steps", "4"]
    assert main([*args, "--engine", "trl", "--results", str(tmp_path)]) == 0
    plan = json.loads((tmp_path / "trl" / "runs.json").read_text())
    completions = (
        plan["prompts_per_step"] * next(iter(plan["runs"].values()))["trl"]["num_generations"]
    )
    for name, run in plan["runs"].items():
        # train.py's batch arguments on one process: micro-steps of micro_batch completions
        micro, minibatches = run["micro_batch"], run["minibatches"]
        accumulation = completions // (micro * minibatches)
        assert accumulation * micro * minibatches == completions
        here = {"use_vllm": False, "bf16": False, "use_cpu": True}  # the CPU stands in for a GPU
        config = GRPOConfig(
            output_dir=str(tmp_path / name),
            per_device_train_batch_size=micro,
            gradient_accumulation_steps=accumulation,
            steps_per_generation=minibatches * accumulation,
            **{**run["trl"], **here},
        )
        assert config.loss_type == run["trl"]["loss_type"]
        assert config.generation_batch_size == completions  # one generation a plan step
        # 3,000 new tokens and MATH's prompts (4,608 at most): two sequences in 16,384 tokens
        assert micro == 2
    assert plan["runs"]["math-drgrpo-s0"]["trl"]["loss_type"] == "dr_grpo"


def test_a_trl_launch_shards_a_model_that_outgrows_one_gpu(tmp_path):
    from accelerate.commands.config.config_args import load_config_from_file

    from creditbench.tools.cli.main import main
    from creditbench.tools.reproduce.trl_launch import micro_batch, needs_sharding

    assert needs_sharding("Qwen/Qwen2.5-Math-7B", 80) and not needs_sharding("Qwen/Qwen3-1.7B", 80)
    assert not needs_sharding("realtreetune/rho-1b-sft-MATH", 80)  # size unknown: no
    assert micro_batch(4608, 20480) == 1 and micro_batch(512, 1024) == 10
    for card, distributed in (("drgrpo", "FSDP"), ("tempo", "MULTI_GPU")):
        folder = tmp_path / card
        args = ["reproduce", card, "--scale", "paper", "--task", "math", "--steps", "4"]
        assert main([*args, "--engine", "trl", "--results", str(folder)]) == 0
        config = load_config_from_file(str(folder / "trl" / "accelerate.yaml"))  # accelerate's
        assert config.distributed_type.value == distributed
