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
(`creditbench.integrations.engine`). A row whose method's rollout keeps only mixed groups
(DAPO's dynamic sampling) runs on verl's own filter
(`creditbench.integrations.engine.VERL_MIXED_GROUPS_SETTINGS`), and the launch notes where
verl's filter differs from the method's. Nothing is run: verl runs on the cluster, not here.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from creditbench.integrations.engine import VERL, VERL_MIXED_GROUPS_SETTINGS, unsupported_reason
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
NO_DUAL_CLIP = 1.0e9  # verl always dual-clips; a constant this large never acts


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


def verl_overrides(config: Any, method: Any, name: str, folder: Path, model: str) -> list[str]:
    """The verl overrides of one run: its ``RunConfig`` and its method instance (whose loss
    settings become verl's actor settings), registered as ``name``."""
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
        }
    )
    kept = method.group_filter()
    if kept is not None and kept.keep == MIXED_GROUPS:
        values.update(VERL_MIXED_GROUPS_SETTINGS)
    return [f"{key}={_value(value)}" for key, value in values.items()]


def _write_data(plan: Plan, folder: Path) -> list[Path]:
    from datasets import Dataset

    from creditbench.harness.tasks import get_task

    task = get_task(plan.task, **plan.task_options)
    paths = []
    for split in ("train", "test"):
        rows = [
            {
                "data_source": f"creditbench/{plan.task}",
                "prompt": [{"role": "user", "content": problem.prompt}],
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
    for run, config in zip(runs, configs, strict=True):
        method = get_method(run.method)(**plan.option_values(run.entry))
        reason = unsupported_reason(method, VERL, config.rollout.max_new_tokens)
        if reason is not None:
            launch.left_out[run.entry] = reason
            continue
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
    for run, config in zip(runs, configs, strict=True):
        if run.entry not in rows:
            continue
        method = get_method(run.method)(**plan.option_values(run.entry))
        name = _name(plan, run.entry)
        overrides = verl_overrides(config, method, name, Path("$HERE"), model)
        launch.commands.append(["python", "-m", "verl.trainer.main_ppo", *overrides, env])
        quoted = [f'"{part}"' if "$" in part else shlex.quote(part) for part in overrides]
        script.append(" \\\n    ".join(["python -m verl.trainer.main_ppo", *quoted, env]))
    folder.mkdir(parents=True, exist_ok=True)
    launch.files += _write_data(plan, folder)
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
