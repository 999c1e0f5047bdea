"""What ``creditbench reproduce`` runs: a :class:`Plan` built from a paper card.

:func:`cpu_plan` (then :func:`finish_cpu_plan`, which sizes the budget) maps a card's
``cpu_scale`` section onto the embedded testbed; :func:`paper_plan` maps its recipe onto run
settings for the paper's model on a GPU. Settings and options carry where they came from
(suite, card, user), and :func:`describe` prints them that way.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from creditbench.reference.cards import Card
from creditbench.tools.reproduce.budget import (
    DEFAULT_MINUTES,
    BudgetPlan,
    eval_flops_per_run,
    plan_budget,
)
from creditbench.tools.reproduce.profile import LLM_PROFILE, PROFILE_EPOCHS, PROFILE_TASK
from creditbench.tools.reproduce.recipe import (
    RECIPE_SETTINGS,
    ReproduceError,
    Setting,
    map_options,
    nest_host_options,
    paper_recipe,
    row_settings,
    split_methods,
)

__all__ = ["Plan", "cpu_plan", "describe", "finish_cpu_plan", "paper_plan"]


@dataclass
class Plan:
    """What a reproduction runs: ``settings`` shared by every run, ``options`` per method.

    ``methods`` are the card's rows by name: a registry name, or the run name of a row that is
    a registered method with options (``oppo_teacher``); `registry_name` tells which.
    """

    card: Card
    scale: str
    methods: list[str]
    skipped: dict[str, str]
    seeds: list[int]
    task: str = "chain"
    task_options: dict[str, Any] = field(default_factory=dict)
    settings: list[Setting] = field(default_factory=list)
    options: dict[str, list[Setting]] = field(default_factory=dict)
    not_mapped: list[Setting] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    budget: dict[str, Any] = field(default_factory=dict)
    estimate: BudgetPlan | None = None
    workers: int = 1
    origins: dict[str, str] = field(default_factory=dict)  # "task", "budget": where from

    def setting_values(self) -> dict[str, Any]:
        return {s.key: s.value for s in self.settings}

    def option_values(self, method: str) -> dict[str, Any]:
        """The row's options as its Config reads them (a hosted rule's host options nested in
        ``host``)."""
        from creditbench.methods.registry import get_method

        options = {s.key: s.value for s in self.options.get(method, [])}
        return nest_host_options(get_method(self.registry_name(method)), options)

    def registry_name(self, row: str) -> str:
        """The registered method the card row ``row`` runs."""
        return self.card.method_row(row).registry_name


def _suite_settings(name: str) -> dict[str, Any]:
    from creditbench.tools.suite import SuiteError, load_suite, suite_path

    try:
        suite = load_suite(suite_path(name))
    except SuiteError as err:
        raise ReproduceError(f"cpu_scale.budget: {err}") from None
    return dict(suite.get("settings") or {})


def _user_settings(overrides: list[str]) -> list[Setting]:
    from creditbench.harness.config import ConfigError, parse_key_value

    try:
        return [Setting(*parse_key_value(item, "--set"), "--set") for item in overrides]
    except ConfigError as err:
        raise ReproduceError(str(err)) from None


def _merge(settings: list[Setting]) -> list[Setting]:
    """One setting per key, the last one winning, in the order of last appearance."""
    merged: dict[str, Setting] = {}
    for s in settings:
        merged.pop(s.key, None)
        merged[s.key] = s
    return list(merged.values())


def _seeds(card: Card, n: int | None) -> list[int]:
    if n is not None and n < 1:
        raise ReproduceError(f"--seeds: must be >= 1 (got {n})")
    default = list(card.cpu_scale.seeds) if card.cpu_scale else [0, 1, 2]
    if n is None:
        return default
    return default[:n] if n <= len(default) else list(range(n))


def _shared(plan: Plan, settings: list[Setting], user: list[Setting], n_eval: int | None) -> None:
    for s in user:
        if s.key in ("budget.unit", "budget.amount"):
            raise ReproduceError(f"--set {s.key}: the budget is set with --budget (or --steps)")
    if n_eval is not None:
        if n_eval < 1:
            raise ReproduceError(f"--n-eval: must be >= 1 (got {n_eval})")
        settings = [*settings, Setting("eval.n_problems", n_eval, "--n-eval")]
    plan.settings = _merge(settings + [s for s in user if not s.key.startswith("method_options.")])


def _resolved(plan: Plan):
    """The run config of the plan's first method (for lengths and evaluation settings)."""
    from creditbench.harness.config import ConfigError, load_config

    overrides = [f"method={plan.registry_name(plan.methods[0])}", f"task={plan.task}"]
    overrides += [f"{s.key}={json.dumps(s.value)}" for s in plan.settings]
    try:
        return load_config(None, overrides, resolve=False)
    except ConfigError as err:
        raise ReproduceError(str(err)) from None


def _set_method_options(plan: Plan, wanted: dict[str, list[Setting]], user: list[Setting]) -> None:
    """Each row's options: the card row's own (``methods[i].options``), ``wanted``, then the
    user's ``method_options.*`` settings (where the method has the option)."""
    from_user = [
        dataclasses.replace(s, key=s.key.removeprefix("method_options."))
        for s in user
        if s.key.startswith("method_options.")
    ]
    for row in plan.methods:
        method = plan.registry_name(row)
        own = row_settings(plan.card, row)
        mapped, rejected = map_options(method, [*own, *wanted.get(row, []), *from_user])
        plan.options[row] = mapped
        plan.not_mapped += [dataclasses.replace(s, key=f"{row}.{s.key}") for s in rejected]


def cpu_plan(
    card: Card, *, seeds: int | None = None, n_eval: int | None = None, overrides=()
) -> Plan:
    """The CPU-scale plan of ``card``; :func:`finish_cpu_plan` sizes its budget.

    Settings, later ones winning: the suite named by ``cpu_scale.budget``, the card's
    ``cpu_scale.settings``, ``n_eval``, the user's ``overrides`` (``key=value``). Options: the
    card's ``cpu_scale.method_options`` where the method has them, the user's
    ``method_options.*``, the length constants.
    """
    if card.cpu_scale is None:
        raise ReproduceError(f"cpu_scale: the card {card.id} has no cpu_scale section")
    scale = card.cpu_scale
    methods, skipped = split_methods(card)
    if not methods:
        raise ReproduceError(
            f"cpu_scale.methods: none of {', '.join(scale.methods)} is implemented"
        )
    plan = Plan(card=card, scale="cpu", methods=methods, skipped=skipped, seeds=_seeds(card, seeds))
    settings = [
        Setting(k, v, f"suite {scale.budget}") for k, v in _suite_settings(scale.budget).items()
    ]
    settings += [Setting(k, v, "card cpu_scale.settings") for k, v in scale.settings.items()]
    user = _user_settings(list(overrides))
    _shared(plan, settings, user, n_eval)
    wanted = {
        m: [Setting(k, v, "card cpu_scale.method_options") for k, v in options.items()]
        for m, options in scale.method_options.items()
    }
    _set_method_options(plan, wanted, user)
    return plan


def finish_cpu_plan(
    plan: Plan,
    *,
    minutes: float = DEFAULT_MINUTES,
    workers: int | None = None,
    flops: float | None = None,
) -> Plan:
    """Size the per-run FLOP budget of a CPU plan (:func:`plan_budget`) for ``workers``
    parallel runs (default: one per core)."""
    if workers is not None and workers < 1:
        raise ReproduceError(f"--workers: must be >= 1 (got {workers})")
    runs = len(plan.methods) * len(plan.seeds)
    plan.workers = min(workers or os.cpu_count() or 1, runs)
    plan.estimate = plan_budget(
        minutes=minutes,
        runs=runs,
        workers=plan.workers,
        eval_flops=eval_flops_per_run(_resolved(plan)),
        flops=flops,
    )
    plan.budget = {"unit": "flops", "amount": plan.estimate.flops}
    return plan


def paper_plan(
    card: Card,
    *,
    model_dir: str | None,
    task: str | None = None,
    steps: int | None = None,
    flops: float | None = None,
    seeds: int | None = None,
    n_eval: int | None = None,
    overrides=(),
) -> Plan:
    """The paper-scale plan: the recipe on the model in ``model_dir``, vLLM rollouts on CUDA.

    The task is the card's training data when it is one of ours, else ``task``; the budget is
    the recipe's steps, else ``steps`` (or ``flops``). Fields the card marks unknown take the
    LLM-scale profile's values (`tools.reproduce.profile`), never the testbed's defaults, and
    :attr:`Plan.unknown` says so, field by field.
    """
    methods, skipped = split_methods(card)
    if not methods:
        raise ReproduceError("methods: none of the card's methods is implemented")
    recipe = paper_recipe(card, methods)
    plan = Plan(
        card=card, scale="paper", methods=methods, skipped=skipped, seeds=_seeds(card, seeds)
    )
    plan.task = task or recipe.task or ""
    if task is not None:
        from creditbench.harness.tasks import list_tasks

        if task not in list_tasks():
            raise ReproduceError(
                f"--task: unknown task {task!r}; known tasks: {', '.join(list_tasks())}"
            )
    task_origin = "--task" if task is not None else "the card's training data"
    if not plan.task:
        state = "unknown" if "training_data" in recipe.unknown else "not one of our tasks"
        plan.task, task_origin = PROFILE_TASK.value, f"{PROFILE_TASK.origin}; the card's is {state}"
    if steps is not None and flops is not None:
        raise ReproduceError("--steps: give --steps or --budget, not both")
    if flops is not None:
        if not flops > 0:
            raise ReproduceError(f"--budget: must be > 0 FLOPs (got {flops:g})")
        plan.budget = {"unit": "flops", "amount": flops}
    elif (amount := steps if steps is not None else recipe.steps) is not None:
        if amount < 1:
            raise ReproduceError(f"--steps: must be >= 1 (got {amount})")
        plan.budget = {"unit": "steps", "amount": amount}
    settings = [
        Setting("model.path", model_dir, "--model-dir"),
        Setting("model.dtype", "float32", "paper scale: fp32 weights, bf16 compute (autocast)"),
        Setting("device", "cuda", "paper scale"),
        Setting("rollout.backend", "vllm", "paper scale"),
        *LLM_PROFILE,  # where the card is silent; never the testbed's defaults
        *recipe.settings,
    ]
    sampled_eval = next((s for s in recipe.settings if s.key == "eval.temperature"), None)
    if sampled_eval is not None:  # the paper evaluates sampled: the profile's greedy gives way
        settings.append(Setting("eval.greedy", False, sampled_eval.origin))
    user = _user_settings(list(overrides))
    _shared(plan, settings, user, n_eval)
    plan.not_mapped = list(recipe.not_mapped)
    _set_method_options(plan, recipe.options, user)
    budget_origin = "--steps/--budget" if steps is not None or flops is not None else "the card"
    if not plan.budget:
        plan.budget = {"unit": "steps", "amount": _profile_steps(plan)}
        budget_origin = f"{PROFILE_EPOCHS.value} epochs of the task ({PROFILE_EPOCHS.origin})"
    plan.origins = {"task": task_origin, "budget": budget_origin}
    if plan.budget["unit"] == "steps":
        _round_to_whole_batches(plan)
    plan.unknown = _unknown_notes(plan, recipe.unknown)
    plan.workers = 1
    return plan


def optimizer_steps_a_batch(plan: Plan) -> int:
    """How many optimizer steps one rollout batch makes: ``train.minibatches`` x
    ``train.ppo_epochs`` (the unit verl's ``trainer.total_training_steps`` counts in)."""
    config = _resolved(plan)
    return config.train.minibatches * config.train.ppo_epochs


def _round_to_whole_batches(plan: Plan) -> None:
    """A steps budget up to a whole number of rollout batches (never fewer steps than asked),
    saying so in its origin: every engine trains whole batches, and verl counts them (DAPO's 16
    minibatches of 32 prompts refused ``--steps 200``; it is 208 = 13 batches of 16)."""
    per_batch = optimizer_steps_a_batch(plan)
    asked = int(plan.budget["amount"])
    rounded = math.ceil(asked / per_batch) * per_batch
    if rounded != asked:
        plan.budget["amount"] = rounded
        plan.origins["budget"] += (
            f"; {asked} rounded to {rounded}, a whole number of batches of {per_batch} "
            "optimizer steps"
        )


def budget_text(plan: Plan) -> str:
    """The budget line of :func:`describe`. A steps budget says what a step is: an optimizer
    step, ``minibatches x ppo_epochs`` of them a rollout batch, and how many batches that makes
    (the number a verl launch's ``trainer.total_training_steps`` carries)."""
    origin = plan.origins.get("budget", "the card")
    amount, unit = plan.budget["amount"], plan.budget["unit"]
    text = f"budget: {amount:g} {unit} per run ({origin})"
    if unit != "steps":
        return text
    config = _resolved(plan)
    prompts, minibatches = config.rollout.prompts_per_step, config.train.minibatches
    per_batch = optimizer_steps_a_batch(plan)
    return (
        f"{text}: optimizer steps. A rollout batch of {prompts} prompts x "
        f"{config.rollout.group_size} responses is split into {minibatches} minibatches of "
        f"{prompts // max(minibatches, 1)} prompts and trained {config.train.ppo_epochs} "
        f"epoch(s), {per_batch} optimizer steps a batch, so {int(amount) // per_batch} batches "
        "(verl's trainer.total_training_steps counts these)"
    )


def _setting_line(plan: Plan, setting: Setting) -> str:
    """A setting as :func:`describe` prints it; a model path not given says which model the
    runs need and how to give it."""
    if setting.key == "model.path" and setting.value is None:
        base = next((s.value for s in plan.not_mapped if s.key == "base_model"), None)
        wanted = f"a local copy of {base}" if base else "a local copy of the paper's model"
        return (
            f"  model.path: not given; give --model-dir DIR, {wanted} "
            "(a launch reads it from $MODEL_DIR)"
        )
    return f"  {setting.key} = {setting.value}  ({setting.origin})"


def _profile_steps(plan: Plan) -> int:
    """The profile's budget where the card has none: its epochs over the task's train split,
    in optimizer steps (``train.minibatches`` x ``train.ppo_epochs`` a batch of
    ``rollout.prompts_per_step`` prompts)."""
    from creditbench.harness.tasks import get_task

    config = _resolved(plan)
    problems = len(get_task(plan.task, **plan.task_options).problems("train"))
    batches = math.ceil(PROFILE_EPOCHS.value * problems / config.rollout.prompts_per_step)
    return batches * config.train.minibatches * config.train.ppo_epochs


def _unknown_notes(plan: Plan, unknown: list[str]) -> list[str]:
    """For each recipe field the card marks unknown, what the paper-scale runs use instead."""
    config = _resolved(plan)
    given = {s.key: s.origin for s in plan.settings}
    used = {
        "base_model": "the model of --model-dir",
        "training_data": f"task {plan.task} ({plan.origins['task']})",
        "steps_or_budget": f"{plan.budget['amount']:g} {plan.budget['unit']} "
        f"({plan.origins['budget']})",
    }
    notes = []
    for name in unknown:
        if name in RECIPE_SETTINGS:
            key = RECIPE_SETTINGS[name][0]
            section, attr = key.split(".")
            value = getattr(getattr(config, section), attr)
            notes.append(f"{name}: {key} = {value} ({given.get(key, 'harness default')})")
        elif name in used:
            notes.append(f"{name}: {used[name]}")
        elif name.startswith("other."):
            notes.append(f"{name}: not used")
        else:
            notes.append(f"{name}: each method's default")
    return notes


def _row_text(plan: Plan, row: str) -> str:
    """A card row as the plan names it: ``oppo_teacher (oppo: GRPO + Teacher-OPPO)``."""
    method = plan.registry_name(row)
    label = plan.card.method_row(row).label
    if method == row:
        return row if label == row else f"{row} ({label})"
    return f"{row} ({method}: {label})"


def describe(plan: Plan) -> list[str]:
    """The plan as lines of text (printed before the runs, repeated in the report)."""
    card = plan.card
    where = " (the embedded chain testbed)"
    if plan.scale != "cpu":
        where = f" (task {plan.task}: {plan.origins.get('task', 'the card')})"
    skipped = ", ".join(f"{m} ({why})" for m, why in plan.skipped.items())
    lines = [
        f"card {card.id}: {card.title} (arXiv {card.arxiv})",
        f"scale: {plan.scale}{where}",
        "methods: " + ", ".join(_row_text(plan, row) for row in plan.methods),
        f"skipped: {skipped or 'none'}",
        f"seeds: {', '.join(map(str, plan.seeds))}",
    ]
    if plan.estimate is not None:
        lines.append(f"budget: {plan.estimate.describe()}")
    elif plan.budget:
        lines.append(budget_text(plan))
    lines.append("settings:")
    lines += [_setting_line(plan, s) for s in plan.settings]
    for method in plan.methods:
        options = plan.options.get(method, [])
        lines.append(f"options of {method}:" + ("" if options else " its defaults"))
        lines += [f"  {s.key} = {s.value}  ({s.origin})" for s in options]
    if plan.not_mapped:
        lines.append("not mapped:")
        lines += [f"  {s.key} = {s.value}  ({s.origin})" for s in plan.not_mapped]
    if plan.unknown:
        lines.append("unknown in the card, and what is used instead:")
        lines += [f"  {note}" for note in plan.unknown]
    return lines
