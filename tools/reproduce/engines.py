"""A paper-scale plan as a launch of another trainer: ``creditbench reproduce CARD --scale paper
--engine verl`` writes, into ``RESULTS/verl/``, what runs the plan on a verl cluster.

- ``data/train.parquet``, ``data/test.parquet``: the task's problems in verl's RL format (a
  chat ``prompt``, ``reward_model.ground_truth``, ``extra_info.split``/``index``);
- ``reward.py``: verl's ``compute_score`` on creditbench's own grader for the task;
- ``creditbench_plan.py``: registers each card row as a verl estimator and loss
  (`creditbench.integrations.verl.register`) with the row's options; every verl process imports
  it through ``VERL_USE_EXTERNAL_MODULES``;
- ``launch.sh``: one ``python -m verl.trainer.main_ppo`` per run (row x seed), every value of
  the plan as a verl override (the mapping is :data:`VERL_KEYS`), ``$MODEL_DIR`` where the
  plan has no ``--model-dir``.

A row whose method cannot run inside verl is left out, with the reason
(`creditbench.harness.services.engines`). A row whose method's rollout keeps only mixed groups
(DAPO's dynamic sampling) runs on verl's own filter
(`creditbench.harness.services.engines.VERL_MIXED_GROUPS_SETTINGS`), and the launch notes where
verl's filter differs from the method's. A row whose credit reads the response token ids
(TEMPO, KTAE) runs on verl's legacy trainer (``VERL_LEGACY_SETTINGS``), whose batch the plugin
passes to the estimator, and so does every other row of its launch (the baseline beside it),
so that a launch compares its rows on one trainer; only a row on verl's group filter, which the
legacy trainer lacks, stays on the v1 trainer, with a note. Nothing is run: verl runs on the
cluster, not here.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from creditbench.harness.sampling.rollout import chat_turn
from creditbench.harness.services.engines import (
    VERL,
    VERL_LEGACY,
    VERL_LEGACY_SETTINGS,
    VERL_MIXED_GROUPS_SETTINGS,
    unsupported_reason,
)
from creditbench.methods.contract import MIXED_GROUPS, GroupFilter
from creditbench.methods.registry import get_method

from .plan import Plan
from .recipe import ReproduceError

ENGINES = ("builtin", "verl", "trl")

# run-config field -> verl override (verl 0.9.1, trainer/config/_generated_ppo_trainer.yaml)
VERL_KEYS = {
    "rollout.prompts_per_step": "data.train_batch_size",
    "rollout.max_new_tokens": "data.max_response_length",
    "rollout.group_size": "actor_rollout_ref.rollout.n",
    "rollout.temperature": "actor_rollout_ref.rollout.temperature",
    "rollout.top_p": "actor_rollout_ref.rollout.top_p",
    "train.lr": "actor_rollout_ref.actor.optim.lr",
    "train.weight_decay": "actor_rollout_ref.actor.optim.weight_decay",
    "train.adam_betas": "actor_rollout_ref.actor.optim.betas",
    "train.ppo_epochs": "actor_rollout_ref.actor.ppo_epochs",
    "train.grad_clip": "actor_rollout_ref.actor.grad_clip",
}
ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
NO_DUAL_CLIP = 1.0e9  # verl always dual-clips; a constant this large never acts
GPUS_PER_NODE = 8  # the nodes of verl's recipes (trainer.n_gpus_per_node 8)
# Tokens a chat template adds around a prompt (Qwen's default system prompt and role markers
# are about 30): ours, generous, since an overlong prompt stops verl (data.truncation=error).
CHAT_TEMPLATE_TOKENS = 128
GENERATION_BATCHES = 3  # data.gen_batch_size = 3 x data.train_batch_size, verl's DAPO recipe


def prompt_token_bound(prompts: list[str]) -> int:
    """An upper bound on the longest prompt in tokens, chat template included, for any
    byte-level BPE tokenizer (Qwen's, Llama's: every token covers at least one byte), rounded
    up to a multiple of 128: verl's ``data.max_prompt_length``."""
    longest = max((len(p.encode()) for p in prompts), default=0) + CHAT_TEMPLATE_TOKENS
    return -(-longest // 128) * 128


def model_billions(model: str | None) -> float | None:
    """The parameter count, in billions, of a model named with its size ("Qwen2.5-32B",
    "Qwen3-8B-Base": 32, 8), or None when the name gives none."""
    match = re.search(r"(\d+(?:\.\d+)?)B\b", model or "")
    return float(match.group(1)) if match else None


def rollout_tensor_parallel(model: str | None, gpus_per_node: int) -> int:
    """vLLM's tensor parallelism for a model named with its size (:func:`model_billions`): one
    GPU per 8B parameters, rounded up to a power of two within a node (ours; it gives the 4 of
    verl's DAPO recipe for 32B, and 1 for a model of 8B or less or of unknown size)."""
    billions = model_billions(model)
    wanted = max(1, math.ceil(billions / 8)) if billions is not None else 1
    size = 1
    while size < wanted and size * 2 <= gpus_per_node:
        size *= 2
    return size


def verl_cluster_settings(plan: Plan, prompt_tokens: int, response_tokens: int) -> dict:
    """What verl 0.9.1 needs beyond a run config, the same for every run of the plan: the
    rollout engine, dynamic micro-batches sized to one full sequence, the GPUs and nodes of
    the card, vLLM's parallelism and memory, an explicit logger, and the card's warm-up and
    validation top-p (verl's DAPO recipe, ``recipe/dapo/run_dapo_qwen2.5_32b.sh``, where the
    card is silent)."""
    scale, other = plan.card.paper_scale, plan.card.recipe.other
    gpus = scale.gpu_count if scale is not None else 1
    per_node = min(gpus, GPUS_PER_NODE)
    sequence = prompt_tokens + response_tokens

    def card_value(name: str, default: Any) -> Any:
        entry = other.get(name)
        return entry.value if entry is not None else default

    return {
        "data.max_prompt_length": prompt_tokens,
        "data.truncation": "error",  # a longer prompt stops verl instead of being cut
        f"{ROLLOUT}.name": "vllm",  # mandatory: verl 0.9.1 has no default
        f"{ROLLOUT}.tensor_model_parallel_size": rollout_tensor_parallel(
            scale.model if scale is not None else None, per_node
        ),
        f"{ROLLOUT}.gpu_memory_utilization": 0.8,  # verl's DAPO recipe
        f"{ROLLOUT}.max_num_batched_tokens": sequence,  # verl's DAPO recipe
        "actor_rollout_ref.model.use_remove_padding": True,  # verl's DAPO recipe
        f"{ACTOR}.use_dynamic_bsz": True,  # verl's DAPO recipe: micro-batches by tokens
        f"{ACTOR}.ppo_max_token_len_per_gpu": sequence,
        f"{ROLLOUT}.log_prob_use_dynamic_bsz": True,
        f"{ROLLOUT}.log_prob_max_token_len_per_gpu": sequence,
        "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": True,
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": sequence,
        f"{ACTOR}.optim.lr_warmup_steps": int(card_value("warmup_steps", 0)),
        f"{ROLLOUT}.val_kwargs.top_p": float(card_value("eval_top_p", 1.0)),
        "trainer.n_gpus_per_node": per_node,
        "trainer.nnodes": -(-gpus // per_node),
        "trainer.logger": ["console"],  # verl's default adds wandb, which needs a login
        "trainer.val_before_train": True,
    }


def filter_note(kept: GroupFilter | None) -> str | None:
    """Where verl's filter differs from the method's ``kept``, or None."""
    if kept is None or kept.keep != MIXED_GROUPS or not kept.max_batches:
        return None
    return (
        f"verl's filter samples until the batch is full, without the row's bound of "
        f"{kept.max_batches} batches a step (verl 0.9.1 ignores max_num_gen_batches)"
    )


@dataclass
class Launch:
    """What ``--engine`` wrote: the files, the rows left out (with why), the commands."""

    files: list[Path] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)
    commands: list[list[str]] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)  # row -> where the engine differs


def _value(value: Any) -> str:
    """A value as Hydra reads it on verl's command line."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_value(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def verl_overrides(
    config: Any,
    method: Any,
    name: str,
    folder: Path,
    model: str,
    cluster: dict[str, Any],
    *,
    legacy: bool = False,
) -> list[str]:
    """The verl overrides of one run: its ``RunConfig`` and its method instance (whose loss
    settings become verl's actor settings), registered as ``name``, and the plan's
    ``cluster`` settings (:func:`verl_cluster_settings`); ``legacy``: the method's credit reads
    the response token ids, which only verl's legacy trainer passes (see ``VERL_LEGACY``)."""
    cfg = method.config
    if config.budget.unit != "steps":
        raise ReproduceError("--engine verl: verl's budget is steps, not FLOPs; give --steps N")
    values = {
        verl: getattr(getattr(config, key.split(".")[0]), key.split(".")[1])
        for key, verl in VERL_KEYS.items()
    }
    prompts, minibatches = config.rollout.prompts_per_step, config.train.minibatches
    if prompts % minibatches:
        raise ReproduceError(
            f"train.minibatches: {minibatches} does not divide rollout.prompts_per_step {prompts}"
        )
    # verl's total_training_steps counts batches, each ppo_epochs x minibatches optimizer steps
    per_batch = minibatches * config.train.ppo_epochs
    if int(config.budget.amount) % per_batch:
        raise ReproduceError(
            f"--steps: verl counts training batches of {per_batch} optimizer steps "
            f"(train.minibatches x train.ppo_epochs); give a multiple of {per_batch}"
        )
    horizon = cfg.horizon or config.rollout.max_new_tokens
    values.update(
        {
            "actor_rollout_ref.model.path": model,
            "data.train_files": str(folder / "data" / "train.parquet"),
            "data.val_files": str(folder / "data" / "test.parquet"),
            "data.seed": config.seed,
            f"{ACTOR}.data_loader_seed": config.seed,
            f"{ACTOR}.ppo_mini_batch_size": prompts // minibatches,
            f"{ACTOR}.clip_ratio_low": cfg.eps_low,
            f"{ACTOR}.clip_ratio_high": cfg.eps_high,
            f"{ACTOR}.clip_ratio_c": cfg.dual_clip or NO_DUAL_CLIP,
            f"{ACTOR}.loss_agg_mode": cfg.aggregation,
            f"{ACTOR}.loss_scale_factor": int(horizon),
            f"{ACTOR}.use_kl_loss": cfg.kl_coef > 0,
            f"{ACTOR}.kl_loss_coef": cfg.kl_coef,
            f"{ACTOR}.kl_loss_type": cfg.kl_kind,
            f"{ACTOR}.policy_loss.loss_mode": name,
            "algorithm.adv_estimator": name,
            "algorithm.use_kl_in_reward": False,
            "actor_rollout_ref.rollout.val_kwargs.do_sample": not config.eval.greedy,
            "actor_rollout_ref.rollout.val_kwargs.temperature": (
                0.0 if config.eval.greedy else config.eval.temperature
            ),
            "actor_rollout_ref.rollout.val_kwargs.n": config.eval.k_samples,
            "reward.custom_reward_function.path": str(folder / "reward.py"),
            "reward.custom_reward_function.name": "compute_score",
            "trainer.total_training_steps": int(config.budget.amount) // per_batch,
            "trainer.project_name": "creditbench",
            "trainer.experiment_name": config.run_name,
            "trainer.default_local_dir": str(folder / "checkpoints" / config.run_name),
            **cluster,
        }
    )
    kept = method.group_filter()
    if kept is not None and kept.keep == MIXED_GROUPS:
        values.update(VERL_MIXED_GROUPS_SETTINGS)
        values["data.gen_batch_size"] = GENERATION_BATCHES * prompts
    if legacy:
        values.update(VERL_LEGACY_SETTINGS)
    return [f"{key}={_value(value)}" for key, value in values.items()]


def plan_task(plan: Plan) -> Any:
    """The plan's task, loaded once for everything a launch writes from it."""
    from creditbench.harness.tasks import get_task

    return get_task(plan.task, **plan.task_options)


def task_prompts(task: Any) -> list[str]:
    """Every prompt of ``task``, both splits."""
    return [problem.prompt for split in ("train", "test") for problem in task.problems(split)]


def _write_data(plan: Plan, task: Any, folder: Path) -> list[Path]:
    from datasets import Dataset
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()  # a bar a parquet file of a few rows buries the launch's text

    paths = []
    for split in ("train", "test"):
        rows = [
            {
                "data_source": f"creditbench/{plan.task}",
                "prompt": chat_turn(problem.prompt),  # the prompt format of every engine
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": problem.answer},
                "extra_info": {"split": split, "index": index},
            }
            for index, problem in enumerate(task.problems(split))
        ]
        path = folder / "data" / f"{split}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        Dataset.from_list(rows).to_parquet(str(path))
        paths.append(path)
    return paths


REWARD = '''"""verl's reward function for this plan: creditbench's grader of task {task!r}."""

from creditbench.harness.tasks import get_task

TASK = get_task({task!r}, **{options!r})
PROBLEMS = {{split: TASK.problems(split) for split in ("train", "test")}}


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    problem = PROBLEMS[extra_info["split"]][extra_info["index"]]
    assert problem.answer == ground_truth, "the data files are not this task's"
    return TASK.grade(problem, solution_str).reward
'''

PLUGIN = '''"""The card's rows as verl estimators and losses; VERL_USE_EXTERNAL_MODULES imports
it in every verl process."""

from creditbench.integrations.verl import register

{lines}
'''


def nothing_runs(engine: str, left_out: dict[str, str]) -> ReproduceError:
    """The error of a launch none of whose rows can run inside ``engine``."""
    reasons = "; ".join(f"{row}: {why}" for row, why in left_out.items())
    return ReproduceError(
        f"--engine {engine.lower()}: no method of the card runs inside {engine}: {reasons}"
    )


def script_start(plan: Plan, what: str) -> tuple[str, list[str]]:
    """The model path a launch uses (``$MODEL_DIR`` without ``--model-dir``) and the first
    lines of its ``launch.sh``: ``what`` it runs, strict bash, ``HERE`` the launch's folder,
    and a check that ``MODEL_DIR`` is set where it is needed."""
    model = plan.setting_values().get("model.path") or "$MODEL_DIR"
    lines = [
        "#!/usr/bin/env bash",
        f"# creditbench reproduce {plan.card.id} --scale paper: {what}",
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "$0")" && pwd)"',
    ]
    if model == "$MODEL_DIR":
        lines.append(': "${MODEL_DIR:?set MODEL_DIR to a local copy of the model the card names}"')
    return model, lines


def _name(plan: Plan, row: str) -> str:
    """The verl name of a card row: its own, beside the plugin's ``creditbench_<method>`` with
    the method's defaults, which a row's options may differ from."""
    return f"creditbench_{plan.card.id}_{row}"


def write_verl_launch(plan: Plan, runs: list[Any], configs: list[Any], folder: Path) -> Launch:
    """Write the verl launch of ``plan`` (its bench ``runs`` and their run ``configs``) into
    ``folder``; see the module doc."""
    launch = Launch()
    rows: dict[str, tuple[str, dict[str, Any]]] = {}
    legacy: set[str] = set()  # rows whose credit reads the response ids (see VERL_LEGACY)
    for run, config in zip(runs, configs, strict=True):
        method = get_method(run.method)(**plan.option_values(run.entry))
        limit = config.rollout.max_new_tokens
        reason = unsupported_reason(method, VERL, limit)
        if reason is not None:
            if unsupported_reason(method, VERL_LEGACY, limit) is not None:
                launch.left_out[run.entry] = reason
                continue
            legacy.add(run.entry)
        options = {"max_new_tokens": config.rollout.max_new_tokens}
        rows[run.entry] = (run.method, {**options, **plan.option_values(run.entry)})
        note = filter_note(method.group_filter())
        if note is not None:
            launch.notes[run.entry] = note
    if not rows:
        raise nothing_runs("verl", launch.left_out)
    model, script = script_start(
        plan, "one verl run per card row and seed, where verl and creditbench are installed"
    )
    script.insert(2, "# (on the cluster; the folder may move: every path is relative to it)")
    script += [
        'export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"',
        "export VERL_USE_EXTERNAL_MODULES=creditbench_plan",
    ]
    env = "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=creditbench_plan"
    responses = max(config.rollout.max_new_tokens for config in configs)
    task = plan_task(plan)
    cluster = verl_cluster_settings(plan, prompt_token_bound(task_prompts(task)), responses)
    for run, config in zip(runs, configs, strict=True):
        if run.entry not in rows:
            continue
        method = get_method(run.method)(**plan.option_values(run.entry))
        name = _name(plan, run.entry)
        # one trainer for the launch's rows: the legacy one where a row needs it
        kept = method.group_filter()
        on_filter = kept is not None and kept.keep == MIXED_GROUPS
        if legacy and on_filter:
            launch.notes[run.entry] = (
                f"{launch.notes.get(run.entry, '')} It runs on verl's v1 trainer (its group "
                "filter), the launch's other rows on the legacy one, which the token-level rows "
                "need."
            ).strip()
        overrides = verl_overrides(
            config,
            method,
            name,
            Path("$HERE"),
            model,
            cluster,
            legacy=bool(legacy) and not on_filter,
        )
        launch.commands.append(["python", "-m", "verl.trainer.main_ppo", *overrides, env])
        quoted = [f'"{part}"' if "$" in part else shlex.quote(part) for part in overrides]
        script.append(" \\\n    ".join(["python -m verl.trainer.main_ppo", *quoted, env]))
    folder.mkdir(parents=True, exist_ok=True)
    launch.files += _write_data(plan, task, folder)
    reward = folder / "reward.py"
    reward.write_text(REWARD.format(task=plan.task, options=dict(plan.task_options)))
    plugin = folder / "creditbench_plan.py"
    lines = [
        f"register({_name(plan, row)!r}, {method!r}, **{options!r})"
        for row, (method, options) in rows.items()
    ]
    plugin.write_text(PLUGIN.format(lines="\n".join(lines)))
    path = folder / "launch.sh"
    path.write_text("\n".join(script) + "\n")
    path.chmod(0o755)
    launch.files += [reward, plugin, path]
    return launch
