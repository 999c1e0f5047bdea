"""``creditbench reproduce CARD``: run a paper card's recipe and set our numbers beside the paper's.

Two scales (the tutorial is ``docs/reproducing.md``):

- ``cpu`` (the default without a CUDA GPU): the card's ``cpu_scale`` methods that ``methods/``
  implements, with the card's relative settings and per-method options, on the embedded chain
  testbed. The base settings (model preset, lengths, evaluation) are those of the shipped suite
  the card's ``cpu_scale.budget`` names; every run gets the same FLOP budget, sized so that the
  whole reproduction takes about ``--minutes`` (30) on this machine (:func:`plan_budget`).
- ``paper``: the card's recipe mapped onto run-config fields
  (:func:`creditbench.harness.reproduce_recipe.paper_recipe`), on the paper's model from a local
  directory, with the vLLM rollout backend on a GPU. Without them it refuses, in one message
  naming each missing piece (model, hardware, package).

Runs go through the bench machinery (:mod:`creditbench.harness.bench`): a suite built from the
plan expands into runs (each with its method's options), each run a ``creditbench train``
worker writing ``RESULTS/<run>/``. A rerun skips finished runs, resumes interrupted ones and
keeps the budget they were started with. Then :mod:`creditbench.harness.reproduce_report`
writes ``RESULTS/reproduce_<CARD>.md``: the paper's numbers, ours, and whether the ordering of
methods agrees.

Every user error raises :class:`ReproduceError`; the command prints it and exits with 2.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from creditbench.reference.cards import Card

from .reproduce_recipe import (
    RECIPE_SETTINGS,
    Environment,
    ReproduceError,
    Setting,
    length_options,
    load_card_by_id,
    map_options,
    missing_requirements,
    paper_recipe,
    probe_environment,
    refusal,
    split_methods,
)

__all__ = ["BudgetPlan", "Plan", "ReproduceError", "cpu_plan", "paper_plan", "reproduce"]

# Throughput of one bench worker (one thread, two workers on a 2-core machine) on the tiny
# preset, in metered FLOPs per second of step time (generation, scoring and update together):
# 1.86e10-2.13e10, median 1.99e10, over the six runs of a `creditbench reproduce dapo` at
# 1.6e13 FLOPs each, and 1.86e10 for the quick suite's GRPO run. Their three evaluations
# took 40 s (median), 1.7 times what the earlier constant of 1.5e10 planned.
STEP_FLOPS_PER_SECOND = 2.0e10
EVAL_FLOPS_PER_SECOND = 9.0e9
RUN_OVERHEAD_SECONDS = 20.0  # process start, imports, model load, checkpoints
DEFAULT_MINUTES = 30.0
SCALES = ("cpu", "paper")


def flops_text(x: float) -> str:
    """``1.6e13`` rather than ``1.6e+13``."""
    return f"{x:.2g}".replace("e+", "e")


@dataclass(frozen=True)
class BudgetPlan:
    """A per-run FLOP budget and the wall-clock time it should take on ``workers`` workers."""

    flops: float
    runs: int
    workers: int
    train_seconds: float
    eval_seconds: float
    overhead_seconds: float

    @property
    def rounds(self) -> int:
        return math.ceil(self.runs / self.workers)

    @property
    def run_seconds(self) -> float:
        return self.train_seconds + self.eval_seconds + self.overhead_seconds

    @property
    def minutes(self) -> float:
        return self.rounds * self.run_seconds / 60

    def describe(self) -> str:
        return (
            f"{flops_text(self.flops)} FLOPs per run; {self.runs} runs on {self.workers} "
            f"workers ({self.rounds} round{'s' if self.rounds > 1 else ''}), about "
            f"{self.run_seconds / 60:.1f} min a run "
            f"({self.train_seconds / 60:.1f} min training at "
            f"{flops_text(STEP_FLOPS_PER_SECOND)} FLOP/s, {self.eval_seconds / 60:.1f} min "
            f"evaluation): about {self.minutes:.1f} min in all"
        )


@dataclass
class Plan:
    """What a reproduction runs: ``settings`` shared by every run, ``options`` per method."""

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

    def setting_values(self) -> dict[str, Any]:
        return {s.key: s.value for s in self.settings}

    def option_values(self, method: str) -> dict[str, Any]:
        return {s.key: s.value for s in self.options.get(method, [])}


# ---------------------------------------------------------------------------------------------
# The CPU budget


def plan_budget(
    *,
    minutes: float,
    runs: int,
    workers: int,
    eval_flops: float,
    flops: float | None = None,
    overhead: float = RUN_OVERHEAD_SECONDS,
) -> BudgetPlan:
    """The per-run FLOP budget that fills ``minutes`` with ``runs`` runs on ``workers`` workers.

    The runs go in ``ceil(runs / workers)`` rounds. Each run's share of the wall clock pays its
    evaluations (``eval_flops`` metered FLOPs at ``EVAL_FLOPS_PER_SECOND``) and a fixed
    overhead; the rest buys training at ``STEP_FLOPS_PER_SECOND``, rounded down to two
    significant digits. With ``flops`` given: that budget, and how long it should take.
    """
    if not minutes > 0:
        raise ReproduceError(f"--minutes: must be > 0 (got {minutes})")
    if workers < 1:
        raise ReproduceError(f"--workers: must be >= 1 (got {workers})")
    if runs < 1:
        raise ReproduceError(f"runs: must be >= 1 (got {runs})")
    eval_seconds = eval_flops / EVAL_FLOPS_PER_SECOND
    if flops is None:
        share = minutes * 60 / math.ceil(runs / workers)
        train_seconds = share - eval_seconds - overhead
        if train_seconds <= 0:
            raise ReproduceError(
                f"--minutes: too short for {runs} runs on {workers} workers, whose evaluations "
                f"alone take about {eval_seconds:.0f} s a run; lower --seeds or --n-eval, or "
                f"raise --minutes (got {minutes:g})"
            )
        exact = train_seconds * STEP_FLOPS_PER_SECOND
        scale = 10.0 ** (math.floor(math.log10(exact)) - 1)
        flops = math.floor(exact / scale) * scale
    elif not flops > 0:
        raise ReproduceError(f"--budget: must be > 0 FLOPs (got {flops:g})")
    return BudgetPlan(
        flops=float(flops),
        runs=runs,
        workers=workers,
        train_seconds=flops / STEP_FLOPS_PER_SECOND,
        eval_seconds=eval_seconds,
        overhead_seconds=overhead,
    )


def eval_flops_per_run(config) -> float:
    """Metered FLOPs of a run's evaluations: at every eval fraction, ``n_problems`` problems
    times ``k_samples`` samples (+1 greedy), each generating ``max_new_tokens`` tokens after its
    prompt (an upper bound: most responses stop earlier)."""
    from .bootstrap import task_alphabet
    from .budget import BudgetMeter
    from .modeling import build_char_tokenizer, build_model, load_policy
    from .tasks import get_task

    task = get_task(config.task, **config.task_options)
    if config.model.path is not None:
        model, tokenizer = load_policy(Path(config.model.path))
    else:
        tokenizer = build_char_tokenizer(task_alphabet(task))
        model = build_model(config.model.preset, tokenizer, seed=0)
    meter = BudgetMeter.for_model(model)
    ev = config.eval
    problems = task.problems("eval")[: ev.n_problems]
    prompts = [len(tokenizer(p.prompt, add_special_tokens=False)["input_ids"]) for p in problems]
    samples = ev.k_samples + (1 if ev.greedy else 0)
    news = [config.rollout.max_new_tokens] * len(prompts)
    one = meter.charge_generation(prompts * samples, news * samples)
    return float(one * len(config.budget.eval_fractions))


# ---------------------------------------------------------------------------------------------
# Plans


def _suite_settings(name: str) -> dict[str, Any]:
    from .bench import SuiteError, load_suite, suite_path

    try:
        suite = load_suite(suite_path(name))
    except SuiteError as err:
        raise ReproduceError(f"cpu_scale.budget: {err}") from None
    return dict(suite.get("settings") or {})


def _user_settings(overrides: list[str]) -> list[Setting]:
    out = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ReproduceError(f"--set: expected KEY=VALUE (got {item!r})")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            raise ReproduceError(f"--set: the value of {item!r} is not valid YAML") from None
        out.append(Setting(key.strip(), value, "--set"))
    return out


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
    from .config import ConfigError, load_config

    overrides = [f"method={plan.methods[0]}", f"task={plan.task}"]
    overrides += [f"{s.key}={json.dumps(s.value)}" for s in plan.settings]
    try:
        return load_config(None, overrides, resolve=False)
    except ConfigError as err:
        raise ReproduceError(str(err)) from None


def _set_method_options(plan: Plan, wanted: dict[str, list[Setting]], user: list[Setting]) -> None:
    """Each method's options: ``wanted``, then the user's ``method_options.*`` settings (where
    the method has the option), then the length constants of :func:`length_options`."""
    max_new = _resolved(plan).rollout.max_new_tokens
    from_user = [
        dataclasses.replace(s, key=s.key.removeprefix("method_options."))
        for s in user
        if s.key.startswith("method_options.")
    ]
    for method in plan.methods:
        mapped, rejected = map_options(method, [*wanted.get(method, []), *from_user])
        mapped += length_options(method, {s.key: s.value for s in mapped}, max_new)
        plan.options[method] = mapped
        plan.not_mapped += [dataclasses.replace(s, key=f"{method}.{s.key}") for s in rejected]


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
    the recipe's steps, else ``steps`` (or ``flops``). Fields the card marks unknown keep the
    harness defaults, and :attr:`Plan.unknown` says so, field by field.
    """
    methods, skipped = split_methods(card)
    if not methods:
        raise ReproduceError("methods: none of the card's methods is implemented")
    recipe = paper_recipe(card, methods)
    plan = Plan(
        card=card, scale="paper", methods=methods, skipped=skipped, seeds=_seeds(card, seeds)
    )
    plan.task = task or recipe.task or ""
    if not plan.task:
        state = "unknown" if "training_data" in recipe.unknown else "not one of our tasks"
        raise ReproduceError(
            f"--task: the card's training data is {state} (recipe.training_data); "
            "name a task, e.g. --task math"
        )
    if steps is not None and flops is not None:
        raise ReproduceError("--steps: give --steps or --budget, not both")
    if flops is not None:
        if not flops > 0:
            raise ReproduceError(f"--budget: must be > 0 FLOPs (got {flops:g})")
        plan.budget = {"unit": "flops", "amount": flops}
    elif steps is not None or recipe.steps is not None:
        amount = steps if steps is not None else recipe.steps
        if amount < 1:
            raise ReproduceError(f"--steps: must be >= 1 (got {amount})")
        plan.budget = {"unit": "steps", "amount": amount}
    else:
        raise ReproduceError(
            "--steps: the card's recipe.steps_or_budget is unknown; give --steps N (or --budget)"
        )
    settings = [
        Setting("model.path", model_dir, "--model-dir"),
        Setting("model.dtype", "bfloat16", "paper scale"),
        Setting("device", "cuda", "paper scale"),
        Setting("rollout.backend", "vllm", "paper scale"),
        *recipe.settings,
    ]
    user = _user_settings(list(overrides))
    _shared(plan, settings, user, n_eval)
    plan.not_mapped = list(recipe.not_mapped)
    _set_method_options(plan, recipe.options, user)
    plan.unknown = _unknown_notes(plan, recipe.unknown)
    plan.workers = 1
    return plan


def _unknown_notes(plan: Plan, unknown: list[str]) -> list[str]:
    """For each recipe field the card marks unknown, what the paper-scale runs use instead."""
    config = _resolved(plan)
    given = {s.key: s.origin for s in plan.settings}
    used = {
        "base_model": "the model of --model-dir",
        "training_data": f"task {plan.task} (--task)",
        "steps_or_budget": f"{plan.budget['amount']:g} {plan.budget['unit']} (--steps/--budget)",
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


# ---------------------------------------------------------------------------------------------
# Running


def suite_of(plan: Plan) -> dict[str, Any]:
    """The bench suite of a plan (:func:`runs_of` adds each method's options to its runs)."""
    values = plan.setting_values()
    budget = {k.removeprefix("budget."): v for k, v in values.items() if k.startswith("budget.")}
    return {
        "description": f"creditbench reproduce {plan.card.id} --scale {plan.scale}",
        "methods": list(plan.methods),
        "seeds": list(plan.seeds),
        "tasks": [{"name": plan.task, "options": dict(plan.task_options)}],
        "settings": {k: v for k, v in values.items() if not k.startswith("budget.")},
        "budget": {**budget, **plan.budget},
    }


def runs_of(plan: Plan):
    """The bench runs of a plan, each with its method's options."""
    from .bench import SuiteError, expand_suite

    try:
        runs = expand_suite(suite_of(plan), Path(f"{plan.card.id}.yaml"))
    except SuiteError as err:
        raise ReproduceError(str(err)) from None
    for run in runs:
        options = plan.option_values(run.method)
        run.overrides += [f"method_options.{k}={json.dumps(v)}" for k, v in options.items()]
    return runs


def existing_budget(runs, results: Path) -> dict[str, Any] | None:
    """The budget of the first of ``runs`` already started in ``results`` (None: none is)."""
    for run in runs:
        path = results / run.name / "config.yaml"
        try:
            budget = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("budget")
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        if isinstance(budget, dict) and "unit" in budget and "amount" in budget:
            return {"unit": budget["unit"], "amount": float(budget["amount"])}
    return None


def execute(plan: Plan, results: Path) -> list[str]:
    """Run every unfinished run of ``plan`` into ``results``; the names of the failed ones."""
    from tqdm.auto import tqdm

    from .bench import _prepare_base_policies, _run_workers, run_config
    from .config import ConfigError
    from .rundir import RunDir
    from .trainer import Trainer

    runs = runs_of(plan)
    trainers = {}
    for run in runs:  # every config is checked before any worker starts
        try:
            trainers[run.name] = Trainer(run_config(run, results))
        except ConfigError as err:
            raise ReproduceError(f"run {run.name}: {err}") from None
    pending = [r for r in runs if not RunDir(results / r.name).is_finished()]
    threads = max(1, (os.cpu_count() or 1) // plan.workers)
    print(
        f"{len(runs)} runs, {len(runs) - len(pending)} finished, {len(pending)} to run on "
        f"{plan.workers} workers x {threads} threads -> {results}"
    )
    if not pending:
        return []
    _prepare_base_policies([trainers[r.name] for r in pending])
    done = len(runs) - len(pending)
    return _run_workers(pending, results, plan.workers, threads, done, tqdm)


def describe(plan: Plan) -> list[str]:
    """The plan as lines of text (printed before the runs, repeated in the report)."""
    card = plan.card
    where = " (the embedded chain testbed)" if plan.scale == "cpu" else f" (task {plan.task})"
    skipped = ", ".join(f"{m} ({why})" for m, why in plan.skipped.items())
    lines = [
        f"card {card.id}: {card.title} (arXiv {card.arxiv})",
        f"scale: {plan.scale}{where}",
        f"methods: {', '.join(plan.methods)}",
        f"skipped: {skipped or 'none'}",
        f"seeds: {', '.join(map(str, plan.seeds))}",
    ]
    if plan.estimate is not None:
        lines.append(f"budget: {plan.estimate.describe()}")
    elif plan.budget:
        lines.append(f"budget: {plan.budget['amount']:g} {plan.budget['unit']} per run")
    lines.append("settings:")
    lines += [f"  {s.key} = {s.value}  ({s.origin})" for s in plan.settings]
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


# ---------------------------------------------------------------------------------------------
# The command


def reproduce(
    card_id: str,
    *,
    scale: str | None = None,
    results: str | Path | None = None,
    seeds: int | None = None,
    minutes: float | None = None,
    flops: float | None = None,
    steps: int | None = None,
    n_eval: int | None = None,
    workers: int | None = None,
    model_dir: str | None = None,
    task: str | None = None,
    ignore_hardware: bool = False,
    overrides=(),
    dry_run: bool = False,
    reps: int = 2000,
    environment: Environment | None = None,
) -> int:
    """Plan, run and report one card; the exit code (0, or 1 when a run failed).

    ``environment`` (default: :func:`probe_environment`) says whether a GPU and the packages
    are there; ``dry_run`` prints the plan (and, at paper scale, what is missing) and runs
    nothing.
    """
    card = load_card_by_id(card_id)
    if scale is not None and scale not in SCALES:
        raise ReproduceError(f"--scale: must be one of {', '.join(SCALES)} (got {scale!r})")
    if reps < 1:
        raise ReproduceError(f"--reps: must be >= 1 (got {reps})")
    if environment is None:
        environment = probe_environment(card.paper_scale.requires if card.paper_scale else ())
    scale = scale or ("paper" if environment.gpus else "cpu")
    folder = Path(results) if results is not None else Path("runs") / f"reproduce-{card.id}"
    missing: list[str] = []
    if scale == "paper":
        missing = missing_requirements(
            card, model_dir, environment, ignore_hardware=ignore_hardware
        )
        if missing and not dry_run:
            raise ReproduceError(refusal(card, missing))
        plan = paper_plan(
            card,
            model_dir=model_dir,
            task=task,
            steps=steps,
            flops=flops,
            seeds=seeds,
            n_eval=n_eval,
            overrides=overrides,
        )
    else:
        for flag, value in (("--model-dir", model_dir), ("--steps", steps), ("--task", task)):
            if value is not None:
                raise ReproduceError(f"{flag}: only with --scale paper (got {value})")
        plan = cpu_plan(card, seeds=seeds, n_eval=n_eval, overrides=overrides)
        previous = existing_budget(runs_of(plan), folder)
        if previous is not None and flops is None and minutes is None:
            flops = previous["amount"]
            print(f"resuming the runs in {folder}: their budget is {flops_text(flops)} FLOPs")
        finish_cpu_plan(plan, minutes=minutes or DEFAULT_MINUTES, workers=workers, flops=flops)
    runs = runs_of(plan)
    previous = existing_budget(runs, folder)
    if previous is not None and previous != plan.budget:
        raise ReproduceError(
            f"--budget: {folder} holds runs of this card with a budget of "
            f"{previous['amount']:g} {previous['unit']}, not {plan.budget['amount']:g} "
            f"{plan.budget['unit']}; rerun without --budget, --steps and --minutes to finish "
            "them, or use another --results"
        )
    lines = describe(plan)
    print("\n".join(lines))
    if dry_run:
        if missing:
            print("missing for --scale paper: " + "; ".join(missing))
        print("runs: " + ", ".join(run.name for run in runs))
        return 0
    failed = execute(plan, folder)
    from .reproduce_report import render_report
    from .rundir import atomic_write_text

    names = {run.name: run.method for run in runs}
    report = render_report(plan, folder, names, reps=reps, plan_lines=lines)
    path = folder / f"reproduce_{card.id}.md"
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, report)
    print("\n" + report)
    print(path)
    if failed:
        logs = ", ".join(str(folder / "logs" / f"{name}.log") for name in failed)
        print(f"{len(failed)} runs failed; logs: {logs}")
        return 1
    return 0
