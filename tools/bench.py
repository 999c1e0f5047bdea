"""``creditbench bench``: run a suite (:mod:`.suite`) in parallel workers.

Each run is a ``creditbench train`` subprocess with its threads set explicitly, writing
``RESULTS/<run name>/``. Finished runs (``summary.json``) are skipped and interrupted ones resume
from their last checkpoint, so the command can be rerun after any interruption. Every run's
config is validated, and each distinct base policy is built once, before any worker starts.

A suite too long for one sitting can be split across machines or days: ``--only GLOB``
(repeatable) runs just the runs whose names match, into the same results folder, and
``RESULTS/suite-<name>.json`` lists every run of the suite, so the leaderboard can say how much
of it the folder holds.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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


def _progress_of(run_dir: Path) -> float:
    """The budget fraction of the last metrics record of a run (0 when none)."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0.0
    for line in reversed(lines):
        try:
            fraction = json.loads(line).get("budget_fraction")
        except ValueError:
            continue
        if fraction is not None:
            return min(float(fraction), 1.0)
    return 0.0


def run_suite(
    suite: str,
    *,
    workers: int | None = None,
    results: str | None = None,
    dry_run: bool = False,
    overrides: list[str] = (),
    only: list[str] = (),
    threads: int | None = None,
    seeds: list[int] | None = None,
    timings: list[str] = (),
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
        describe_plan,
        estimate_seconds,
        longest_first,
        measured_seconds,
        minutes_text,
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
    if workers is not None and workers < 1:
        raise SuiteError(f"--workers: must be >= 1 (got {workers})")
    if threads is not None and threads < 1:
        raise SuiteError(f"--threads: must be >= 1 (got {threads})")
    selected = select_runs(runs, list(only))
    cores = os.cpu_count() or 1
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
    timings = list(timings) or default_timings()
    try:
        estimates = estimate_seconds(runs, measured_seconds([results_dir, *timings]))
    except RunFormatError as err:
        raise SuiteError(f"--timings: {err}") from None
    pending = longest_first([r for r in selected if r.name not in finished], estimates)
    chosen = f", {len(selected)} selected by --only" if only else ""
    print(
        f"suite {path.stem}: {len(runs)} runs{chosen}, {len(finished)} finished, "
        f"{len(pending)} to run on {workers} workers x {threads} threads -> {results_dir}"
    )
    if dry_run:
        for run in selected:
            state = (
                "done"
                if run.name in finished
                else ("resume" if (results_dir / run.name / "config.yaml").exists() else "new")
            )
            shown = minutes_text(estimates.get(run.name))
            print(f"  [{state:>6}] {shown}  {run.name}")
        print(describe_plan(pending, estimates, workers))
        where = ", ".join(map(str, timings)) or "none: no --timings, no committed runs.csv"
        print(f"measured times: {results_dir} and the timings sources ({where})")
        return 0
    # One bench a results folder: a second one would count the first's runs in progress as
    # its own failures (each run's lock refuses it) and rewrite the manifest under it.
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(RunDir(results_dir).lock(writing="these results (a bench)"))
        except RunDirError as err:
            raise SuiteError(f"--results: {err}") from None
        write_manifest(results_dir, path, runs)
        _prepare_base_policies([trainers[r.name] for r in pending])
        done = len(selected) - len(pending)
        failed = _run_workers(pending, results_dir, workers, threads, done, tqdm)
    _print_table(runs, results_dir)
    if failed:
        print(
            f"{len(failed)} runs failed; logs: "
            + ", ".join(str(results_dir / "logs" / f"{n}.log") for n in failed)
        )
    from creditbench.leaderboard import render

    render(results_dir)
    return 1 if failed else 0


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


def _run_workers(
    pending: list[Run], results_dir: Path, workers: int, threads: int, done: int, tqdm
):
    logs = results_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    queue = list(pending)
    running: dict[str, tuple[subprocess.Popen, Any]] = {}
    failed: list[str] = []
    finished = done
    bar = tqdm(
        total=done + len(pending),
        initial=done,
        unit="run",
        desc="bench",
        bar_format="{l_bar}{bar}| {n:.2f}/{total} runs [{elapsed}<{remaining}]",
    )
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    try:
        while queue or running:
            while queue and len(running) < workers:
                run = queue.pop(0)
                log = open(logs / f"{run.name}.log", "ab")
                cmd = [
                    sys.executable,
                    "-m",
                    "creditbench.tools.cli.main",
                    "train",
                    "--quiet",
                    "--threads",
                    str(threads),
                    "--method",
                    run.method,
                    "--task",
                    run.task,
                    "--seed",
                    str(run.seed),
                    "--output",
                    str(results_dir),
                    "--name",
                    run.name,
                ]
                for item in run.overrides:
                    cmd += ["--set", item]
                running[run.name] = (
                    subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env),
                    log,
                )
            time.sleep(1.0)
            for name, (proc, log) in list(running.items()):
                if proc.poll() is not None:
                    log.close()
                    del running[name]
                    finished += 1
                    if proc.returncode != 0:
                        failed.append(name)
            partial = sum(_progress_of(results_dir / name) for name in running)
            bar.n = finished + partial
            bar.refresh()
    finally:
        for proc, log in running.values():
            proc.terminate()
            log.close()
        bar.close()
    return failed


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
