"""``creditbench bench``: run a suite (:mod:`.suite`) in parallel workers.

Each run is a ``creditbench train`` subprocess with its threads set explicitly, writing
``RESULTS/<run name>/``. Finished runs (``summary.json``) are skipped and interrupted ones resume
from their last checkpoint, so the command can be rerun after any interruption. Every run's
config is validated, and each distinct base policy is built once, before any worker starts.

A suite too long for one sitting can be split across machines or days: ``--only GLOB``
(repeatable) runs just the runs whose names match, into the same results folder, and
``RESULTS/suite-<name>.json`` lists every run of the suite, so the leaderboard can say how much
of it the folder holds.

GRPO's and the oracle's runs start first (every board is read between GRPO, 0, and the oracle,
1, so a suite stopped early still places what ran), then the rest longest first. Each run
prints a line as it finishes (:mod:`.bench_workers`) and checkpoints every step (unless the
suite says otherwise), so Ctrl-C or SIGTERM loses at most the step each run had in progress.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from creditbench.tools.suite import (
    Run,
    SuiteError,
    expand_suite,
    load_suite,
    run_config,
    select_runs,
    suite_path,
    write_manifest,
)


def default_workers() -> tuple[int, int]:
    """(workers, threads per worker): one single-threaded worker per core on a CPU."""
    cores = os.cpu_count() or 1
    return cores, 1


# Bounds of what a user types, checked before anything is written: more workers or threads
# than this only time-share the cores, each worker holding its models in memory (ours).
MAX_PER_CORE = 4
FIRST = ("grpo", "oracle")  # the board's 0 and 1: run first, so a partial board places methods
CHECKPOINT_EVERY = 1  # a quick run lasts ~15 steps; a step's checkpoint costs well under 1%


def references_first(runs: list[Run]) -> list[Run]:
    """GRPO's runs, then the oracle's, then the others, each group in the given order."""
    rank = {name: i for i, name in enumerate(FIRST)}
    return sorted(runs, key=lambda run: rank.get(run.entry, len(FIRST)))


def checkpoint_setting(run_dir: Path) -> str:
    """The ``checkpoint_every`` override a run gets: every step, or, for a run begun under
    another value, that value (a resumed run's config must not change)."""
    from creditbench.harness.config import ConfigError, load_yaml_file

    config = run_dir / "config.yaml"
    if config.is_file() and not config.is_symlink():
        try:
            earlier = load_yaml_file(config, "run config")
        except ConfigError:
            earlier = None  # the run's own resume says what is wrong with it
        if isinstance(earlier, dict) and isinstance(earlier.get("checkpoint_every"), int):
            return f"checkpoint_every={earlier['checkpoint_every']}"
    return f"checkpoint_every={CHECKPOINT_EVERY}"


def check_sizes(workers: int | None, threads: int | None, cores: int) -> None:
    """`SuiteError` for a worker or thread count below 1 or above :data:`MAX_PER_CORE` x cores."""
    most = MAX_PER_CORE * cores
    for flag, value in (("--workers", workers), ("--threads", threads)):
        if value is not None and not 1 <= value <= most:
            raise SuiteError(
                f"{flag}: must be between 1 and {most} ({MAX_PER_CORE} x this machine's "
                f"{cores} cores; got {value})"
            )


def run_suite(
    suite: str,
    *,
    workers: int | None = None,
    results: str | None = None,
    dry_run: bool = False,
    overrides: Sequence[str] = (),
    only: Sequence[str] = (),
    threads: int | None = None,
    seeds: list[int] | None = None,
    timings: Sequence[str] = (),
) -> int:
    """Run every run of a suite (or those matching ``only``); print a summary, render the
    leaderboard. ``seeds`` replaces the suite's seeds (a confirmatory set on new seeds runs
    the same suite). Pending runs start longest first, by the wall times measured in the
    results folder and ``timings`` (:mod:`.bench_plan`); the dry run prints them."""
    from tqdm.auto import tqdm

    from creditbench.harness.config import ConfigError
    from creditbench.harness.records.rundir import (
        RunDir,
        RunDirError,
        check_creatable,
        check_not_inside_a_run,
    )
    from creditbench.harness.training.trainer import Trainer
    from creditbench.tools.bench_plan import (
        default_timings,
        estimate_seconds,
        left_of_started,
        longest_first,
        measured_seconds,
    )

    path = suite_path(suite)
    definition = load_suite(path)
    if seeds is not None:
        definition["seeds"] = list(seeds)
    runs = expand_suite(definition, path, list(overrides))
    results_dir = Path(results or f"runs/bench-{path.stem}")
    try:
        check_creatable(results_dir, "--results")
        check_not_inside_a_run(results_dir / "run", "--results")  # results_dir itself included
    except ConfigError as err:
        raise SuiteError(str(err)) from None
    cores = os.cpu_count() or 1
    check_sizes(workers, threads, cores)
    selected = select_runs(runs, list(only))
    for run in selected:  # the suite's own checkpoint_every, or a --set, comes later and wins
        run.overrides = [checkpoint_setting(results_dir / run.name), *run.overrides]
    workers = workers or default_workers()[0]
    threads = threads or max(1, cores // workers)
    trainers = {}
    for run in selected:
        try:
            trainers[run.name] = Trainer(run_config(run, results_dir))
        except ConfigError as err:
            raise SuiteError(f"{path}: run {run.name}: {err}") from None
    finished = {r.name for r in runs if RunDir(results_dir / r.name).is_finished()}
    from creditbench.harness.records.files import RunFormatError

    for source in timings:
        if not Path(source).exists():
            raise SuiteError(f"--timings: {source} does not exist")
    timings = list(timings) or default_timings(path.stem)
    try:
        estimates = estimate_seconds(runs, measured_seconds([results_dir, *timings]))
    except RunFormatError as err:
        raise SuiteError(f"--timings: {err}") from None
    unfinished = [r for r in selected if r.name not in finished]
    estimates, _ = left_of_started(estimates, unfinished, results_dir)  # a resumed run's rest
    pending = references_first(longest_first(unfinished, estimates))
    chosen = f", {len(selected)} selected by --only" if only else ""
    print(
        f"suite {path.stem}: {len(runs)} runs{chosen}, {len(finished)} finished, "
        f"{len(pending)} to run on {workers} workers x {threads} threads -> {results_dir}"
    )
    if dry_run:
        _print_dry_run(selected, pending, finished, estimates, results_dir, timings, workers)
        return 0
    # One bench a results folder: a second one would count the first's runs in progress as
    # its own failures (each run's lock refuses it) and rewrite the manifest under it. The
    # lock is held until the board is rendered, so no other bench renders beside this one.
    from creditbench.tools import bench_workers

    bench_workers.check_logs_writable(results_dir / "logs", pending)  # before anything is written
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(RunDir(results_dir).lock(writing="these results (a bench)"))
        except RunDirError as err:
            raise SuiteError(f"--results: {err}") from None
        write_manifest(results_dir, path, runs)
        _prepare_base_policies([trainers[r.name] for r in pending])
        done = len(selected) - len(pending)
        failed = bench_workers.run_workers(pending, results_dir, workers, threads, done, tqdm)
        _print_table(runs, results_dir)
        if failed:
            print(
                f"{len(failed)} runs failed; logs: "
                + ", ".join(str(results_dir / "logs" / f"{n}.log") for n in failed)
            )
        return _render_board(results_dir, failed)


def _render_board(results_dir: Path, failed: list[str]) -> int:
    """Render the results folder's board and say where it is: 0, 1 when some runs failed,
    `SuiteError` (one line, exit 2) when no run of the folder has finished."""
    from creditbench.leaderboard import render
    from creditbench.leaderboard.report import LeaderboardError

    try:
        written = render(results_dir)
    except LeaderboardError as err:
        if failed:
            raise SuiteError(
                f"every run failed ({len(failed)}), so there is no board; the first log: "
                f"{results_dir / 'logs' / f'{failed[0]}.log'}"
            ) from None
        raise SuiteError(str(err)) from None
    print(f"board: {written['markdown']} (and {written['html'].name} beside it)")
    return 1 if failed else 0


def _print_dry_run(selected, pending, finished, estimates, results_dir, timings, workers) -> None:
    """The dry run: each selected run in the order it will run, its expected time, the total,
    and the records the times come from."""
    from creditbench.tools.bench_plan import describe_load, describe_plan, minutes_text

    order = [r for r in selected if r.name in finished] + pending
    for run in order:
        state = (
            "done"
            if run.name in finished
            else ("resume" if (results_dir / run.name / "config.yaml").exists() else "new")
        )
        print(f"  [{state:>6}] {minutes_text(estimates.get(run.name))}  {run.name}")
    print(describe_plan(pending, estimates, workers))
    load = describe_load(pending, estimates, workers)
    if load:
        print(load)
    where = ", ".join(map(str, timings)) or "none: no --timings, no committed runs.csv"
    timed = sum(r.name in estimates for r in selected)
    print(
        f"measured times: {results_dir} and the timings sources ({where}); "
        f"{timed} of {len(selected)} runs timed by them"
    )


def _prepare_base_policies(trainers) -> None:
    """Build every distinct base policy once, here, before the workers need it."""
    from creditbench.harness.models.bootstrap import ensure_base_policy

    seen = set()
    for trainer in trainers:
        cfg = trainer.config
        if cfg.model.path is not None:
            continue
        key = json.dumps(
            [cfg.task, cfg.task_options, cfg.model.preset, cfg.bootstrap_options], sort_keys=True
        )
        if key not in seen:
            seen.add(key)
            ensure_base_policy(cfg.task, cfg.task_options, cfg)


def _print_table(runs: list[Run], results_dir: Path) -> None:
    from creditbench.harness.records.rundir import RunDir

    rows: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        summary = RunDir(results_dir / run.name).read_summary()
        if summary is not None:
            rows.setdefault((run.label, run.entry), []).append(summary)
    if not rows:
        return
    print(f"\n{'setting':<24} {'method':<16} {'seeds':>5} {'initial':>8} {'final':>8} {'auc':>8}")
    for (label, method), summaries in rows.items():

        def mean(values):
            values = [v for v in values if v is not None]
            return sum(values) / len(values) if values else float("nan")

        def acc(s, which):
            return s.get(which, {}).get("sampled_accuracy", s.get(which, {}).get("greedy_accuracy"))

        initial = mean([acc(s, "initial_eval") for s in summaries])
        final = mean([acc(s, "final_eval") for s in summaries])
        auc = mean([s.get("auc", {}).get("sampled_accuracy") for s in summaries])
        counts = f"{len(summaries):>5} {initial:>8.3f} {final:>8.3f} {auc:>8.3f}"
        print(f"{label:<24} {method:<16} {counts}")
