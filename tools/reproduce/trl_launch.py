"""A paper-scale plan as a TRL launch: ``creditbench reproduce CARD --scale paper --engine trl``
writes, into ``RESULTS/trl/``, what runs the plan with `CreditGRPOTrainer` under accelerate.

- ``runs.json``: every run (card row x seed) with its method, options and TRL ``GRPOConfig``
  arguments, mapped from the plan (:func:`grpo_arguments`);
- ``train.py``: trains one run of ``runs.json`` (``--run NAME``) on the task's train split with
  creditbench's grader as the reward function;
- ``accelerate.yaml`` and ``launch.sh``: ``accelerate launch`` of each run on ``$NUM_GPUS``
  processes (default 1), vLLM colocated for the rollouts.

TRL's loss aggregates as its ``loss_type`` says; a method's aggregation maps onto one
(:data:`TRL_LOSS_TYPES`) or its row is left out, with the reason, as is a row whose method
cannot run inside TRL (`creditbench.harness.services.engines`). The generation batch is the plan's
``prompts_per_step x group_size`` completions, split into ``train.minibatches`` optimizer steps
(TRL's ``steps_per_generation``); ``train.py`` divides it over the processes it finds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from creditbench.harness.services.engines import TRL, unsupported_reason
from creditbench.methods.contract import MIXED_GROUPS
from creditbench.methods.registry import get_method

from .engines import (
    Launch,
    model_billions,
    nothing_runs,
    plan_task,
    prompt_token_bound,
    script_start,
    task_prompts,
)
from .plan import Plan
from .recipe import ReproduceError

# our aggregation -> TRL 1.16 GRPOConfig.loss_type with the same normaliser
TRL_LOSS_TYPES = {
    "seq-mean-token-mean": "grpo",
    "token-mean": "dapo",
    "seq-mean-token-sum-norm": "dr_grpo",  # TRL's L is max_completion_length
    "seq-mean-token-sum": "luspo",
}


def _left_out(method: Any, max_new_tokens: int) -> str | None:
    """Why TRL cannot run ``method`` (an instance) as its row asks, or None."""
    reason = unsupported_reason(method, TRL, max_new_tokens)
    if reason is not None:
        return reason
    kept = method.group_filter()
    if kept is not None and kept.keep == MIXED_GROUPS:  # CreditGRPOTrainer refuses it on many
        return (
            "its dynamic sampling runs on one TRL process (the adapter's refills); on the "
            "card's GPUs use --engine verl (algorithm.filter_groups)"
        )
    cfg = method.config
    if cfg.aggregation not in TRL_LOSS_TYPES:
        return f"TRL has no loss_type that aggregates as {cfg.aggregation}"
    if cfg.dual_clip is not None:
        return "TRL has no dual clip"
    if cfg.horizon:
        return "TRL's dr_grpo normaliser is max_completion_length, not a horizon of its own"
    return None


# Tokens one micro-step of one GPU holds: verl's default actor ppo_max_token_len_per_gpu
# (16384, verl 0.9.1 ppo_trainer.yaml), so a completion of 20k tokens goes alone.
MICRO_STEP_TOKENS = 16384
# AdamW in mixed precision keeps about 16 bytes a parameter (fp32 weights and two moments, bf16
# weights and gradients; the ZeRO paper's 16 Psi, arXiv 1910.02054 §3.1): above the GPU's memory
# the launch shards the model with FSDP.
TRAINING_BYTES_PER_PARAMETER = 16


def micro_batch(prompt_tokens: int, max_new_tokens: int) -> int:
    """Completions a GPU takes in one micro-step: as many full sequences as
    :data:`MICRO_STEP_TOKENS` holds, at least one."""
    return max(1, MICRO_STEP_TOKENS // (prompt_tokens + max_new_tokens))


def needs_sharding(model: str | None, gpu_memory_gib: int) -> bool:
    """Whether full-parameter AdamW training of a model named with its size
    (:func:`.engines.model_billions`) outgrows one GPU of ``gpu_memory_gib`` (unknown size or
    memory: no)."""
    billions = model_billions(model)
    if billions is None or gpu_memory_gib <= 0:
        return False
    return billions * 1e9 * TRAINING_BYTES_PER_PARAMETER > gpu_memory_gib * 2**30


def grpo_arguments(config: Any, method: Any) -> dict[str, Any]:
    """TRL ``GRPOConfig`` arguments of one run, from its ``RunConfig`` and method instance
    (the batch arguments are set by ``train.py``, which knows the processes: see
    :data:`TRAIN`)."""
    cfg = method.config
    if config.budget.unit != "steps":
        raise ReproduceError("--engine trl: TRL counts optimizer steps; give --steps N")
    rollout, train = config.rollout, config.train
    return {
        "num_generations": rollout.group_size,
        "max_completion_length": rollout.max_new_tokens,
        "temperature": rollout.temperature,
        "top_p": rollout.top_p,
        "learning_rate": train.lr,
        "weight_decay": train.weight_decay,
        "adam_beta1": train.adam_betas[0],
        "adam_beta2": train.adam_betas[1],
        "max_grad_norm": train.grad_clip,
        "num_iterations": train.ppo_epochs,
        "max_steps": int(config.budget.amount),
        "beta": cfg.kl_coef,
        "epsilon": cfg.eps_low,
        "epsilon_high": cfg.eps_high,
        "loss_type": TRL_LOSS_TYPES[cfg.aggregation],
        "importance_sampling_level": cfg.ratio_level,
        "seed": config.seed,
        "bf16": True,
        "use_vllm": True,
        "vllm_mode": "colocate",
        "save_strategy": "steps",
        "save_steps": max(1, int(config.budget.amount) // 4),
        "logging_steps": 1,
        "report_to": "none",
    }


TRAIN = '''"""Train one run of runs.json with creditbench's CreditGRPOTrainer:
accelerate launch --config_file accelerate.yaml train.py --run NAME"""

import argparse
import json
from pathlib import Path

from accelerate import PartialState
from datasets import Dataset
from transformers import AutoTokenizer
from trl import GRPOConfig

from creditbench.harness.sampling.rollout import chat_turn, has_chat_template
from creditbench.harness.tasks import get_task
from creditbench.integrations.trl import CreditGRPOTrainer

HERE = Path(__file__).resolve().parent
PLAN = json.loads((HERE / "runs.json").read_text())

parser = argparse.ArgumentParser()
parser.add_argument("--run", required=True, choices=sorted(PLAN["runs"]))
parser.add_argument("--model", required=True, help="a local copy of the model the card names")
args = parser.parse_args()
run = PLAN["runs"][args.run]

task = get_task(PLAN["task"], **PLAN["task_options"])
problems = task.problems("train")
# the prompt format of every engine: one user turn under the model's chat template, if it has one
tokenizer = AutoTokenizer.from_pretrained(args.model)
chat = has_chat_template(tokenizer)
rows = [
    {"prompt": chat_turn(p.prompt) if chat else p.prompt, "problem_index": i}
    for i, p in enumerate(problems)
]
dataset = Dataset.from_list(rows)


def reward(prompts, completions, problem_index, **_):
    texts = [c[-1]["content"] if chat else c for c in completions]  # TRL: messages in, out
    return [task.grade(problems[i], text).reward for i, text in zip(problem_index, texts)]


# one generation of `completions`, trained in `minibatches` optimizer steps, each made of
# micro-steps of `micro` completions a GPU (TRL: generation_batch_size = per-device batch x
# processes x steps_per_generation; an optimizer step = gradient_accumulation_steps micro-steps)
completions = PLAN["prompts_per_step"] * run["trl"]["num_generations"]
micro, minibatches = run["micro_batch"], run["minibatches"]
shards = micro * PartialState().num_processes * minibatches
if completions % shards:
    raise SystemExit(f"{completions} completions a step do not split into {shards} micro-batches")
accumulation = completions // shards
trainer = CreditGRPOTrainer(
    method=run["method"],
    method_options=run["options"],
    task=task,
    model=args.model,
    processing_class=tokenizer,
    reward_funcs=[reward],
    args=GRPOConfig(
        output_dir=str(HERE / "checkpoints" / args.run),
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accumulation,
        steps_per_generation=minibatches * accumulation,
        **run["trl"],
    ),
    train_dataset=dataset,
)
trainer.train()
'''

ACCELERATE = """# accelerate launch --config_file accelerate.yaml: data parallel on one machine
compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
mixed_precision: bf16
machine_rank: 0
num_machines: 1
num_processes: 1  # launch.sh passes --num_processes $NUM_GPUS
"""

# FSDP2 with full sharding, for a model whose training state outgrows one GPU (TRL's
# examples/accelerate_configs/fsdp2.yaml)
ACCELERATE_FSDP = """# accelerate launch --config_file accelerate.yaml: FSDP2, parameters, gradients
# and optimizer state sharded over the GPUs (the model's training state outgrows one)
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_version: 2
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_reshard_after_forward: true
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_cpu_ram_efficient_loading: true
  fsdp_offload_params: false
  fsdp_activation_checkpointing: true
mixed_precision: bf16
machine_rank: 0
num_machines: 1
num_processes: 1  # launch.sh passes --num_processes $NUM_GPUS
"""


def sharded(plan: Plan) -> bool:
    """Whether the plan's model needs FSDP on the card's GPUs."""
    scale = plan.card.paper_scale
    if scale is None:
        return False
    return needs_sharding(scale.model, scale.gpu_memory_gib)


def write_trl_launch(plan: Plan, runs: list[Any], configs: list[Any], folder: Path) -> Launch:
    """Write the TRL launch of ``plan`` (its bench ``runs`` and their run ``configs``) into
    ``folder``; see the module doc."""
    launch = Launch()
    entries: dict[str, Any] = {}
    prompt_tokens = prompt_token_bound(task_prompts(plan_task(plan)))
    for run, config in zip(runs, configs, strict=True):
        method = get_method(run.method)(**plan.option_values(run.entry))
        reason = _left_out(method, config.rollout.max_new_tokens)
        if reason is not None:
            launch.left_out[run.entry] = reason
            continue
        entries[run.name] = {
            "method": run.method,
            "options": plan.option_values(run.entry),
            "micro_batch": micro_batch(prompt_tokens, config.rollout.max_new_tokens),
            "minibatches": config.train.minibatches,
            "trl": grpo_arguments(config, method),
        }
    if not entries:
        raise nothing_runs("TRL", launch.left_out)
    model, script = script_start(
        plan, "one TRL run per card row and seed, on $NUM_GPUS GPUs (default 1)"
    )
    for name in entries:
        command = [
            "accelerate launch",
            '--config_file "$HERE/accelerate.yaml"',
            '--num_processes "${NUM_GPUS:-1}"',
            '"$HERE/train.py"',
            f"--run {name}",
            f'--model "{model}"',
        ]
        launch.commands.append(command)
        script.append(" \\\n    ".join(command))
    prompts = plan.setting_values().get(
        "rollout.prompts_per_step", configs[0].rollout.prompts_per_step
    )
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "runs.json": json.dumps(
            {
                "card": plan.card.id,
                "task": plan.task,
                "task_options": dict(plan.task_options),
                "prompts_per_step": prompts,
                "runs": entries,
            },
            indent=2,
        )
        + "\n",
        "train.py": TRAIN,
        "accelerate.yaml": ACCELERATE_FSDP if sharded(plan) else ACCELERATE,
        "launch.sh": "\n".join(script) + "\n",
    }
    for name, text in files.items():
        path = folder / name
        path.write_text(text)
        launch.files.append(path)
    (folder / "launch.sh").chmod(0o755)
    return launch
