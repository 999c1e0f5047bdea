"""The worker pool of ``creditbench bench`` (:mod:`.bench`): one ``creditbench train`` subprocess
a run, at most ``workers`` at a time, a progress bar that never goes backwards, and one line a
run as it finishes (its method, setting, seed, AUC, final accuracy and wall time), so a long
suite shows its results as they arrive rather than only at the end.

Each run's output goes to ``RESULTS/logs/<run>.log``, opened so that a link there is never
followed: in a shared results folder a link could send the log into any file the bench's user
can write.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from creditbench.tools.suite import Run, SuiteError


def open_log(path: Path):
    """``path`` opened for appending, refusing a link (``O_NOFOLLOW``) with `SuiteError`."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as err:
        if err.errno == errno.ELOOP or path.is_symlink():
            raise SuiteError(f"{path}: is a link; a bench log is never written through one") from (
                None
            )
        raise SuiteError(f"{path}: cannot write this run's log ({err.strerror})") from None
    return os.fdopen(fd, "ab")


def check_logs_writable(logs: Path, runs: list[Run]) -> None:
    """`SuiteError` before any run starts when the logs folder or a pending run's log is a link."""
    if logs.is_symlink():
        raise SuiteError(f"{logs}: is a link; the bench's logs folder is never written through one")
    for run in runs:
        if (logs / f"{run.name}.log").is_symlink():
            raise SuiteError(
                f"{logs / f'{run.name}.log'}: is a link; a bench log is never written through one"
            )


def progress_of(run_dir: Path) -> float:
    """The budget fraction of the last metrics record of a run (0 when none)."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0.0
    for line in reversed(lines):
        try:
            fraction = json.loads(line).get("budget_fraction")
        except (ValueError, AttributeError):
            continue
        if fraction is not None:
            return min(float(fraction), 1.0)
    return 0.0


def finished_line(run: Run, summary: dict[str, Any] | None, seconds: float, log: Path) -> str:
    """The line a run prints as it ends: ``done grpo chain seed 0: AUC 0.412, final 0.430, 2.1
    min`` (the sampled accuracy's, as the summary table's), or where its log is when it failed."""
    where = f"{run.entry} {run.label} seed {run.seed}"
    minutes = f"{seconds / 60:.1f} min"
    if summary is None or summary.get("status", "finished") != "finished":
        status = (summary or {}).get("status", "failed")
        return f"FAILED {where} ({status}, {minutes}); log: {log}"
    final = _accuracy(summary.get("final_eval"))
    auc = (summary.get("auc") or {}).get("sampled_accuracy")
    return (
        f"done   {where}: AUC {_number(auc)}, final accuracy {_number(final)}, "
        f"{summary.get('steps', '?')} steps, {minutes}"
    )


def _accuracy(evaluation: dict[str, Any] | None) -> float | None:
    if not evaluation:
        return None
    return evaluation.get("sampled_accuracy", evaluation.get("greedy_accuracy"))


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def train_command(run: Run, results_dir: Path, threads: int) -> list[str]:
    """The ``creditbench train`` command line of one run."""
    cmd = [
        sys.executable, "-m", "creditbench.tools.cli.main", "train", "--quiet",
        "--threads", str(threads), "--method", run.method, "--task", run.task,
        "--seed", str(run.seed), "--output", str(results_dir), "--name", run.name,
    ]  # fmt: skip
    for item in run.overrides:
        cmd += ["--set", item]
    return cmd


def run_workers(
    pending: list[Run], results_dir: Path, workers: int, threads: int, done: int, tqdm
) -> list[str]:
    """Run ``pending`` in order on ``workers`` subprocesses; returns the names that failed.
    ``done`` runs of the selection finished before; the bar starts there plus what the runs
    in progress when an earlier bench stopped had done (it started at ``done`` and went back)."""
    from creditbench.harness.records.rundir import RunDir

    logs = results_dir / "logs"
    check_logs_writable(logs, pending)
    logs.mkdir(parents=True, exist_ok=True)
    queue = list(pending)
    # a queued run's progress is read once: it cannot move before the run starts
    waiting = {run.name: progress_of(results_dir / run.name) for run in pending}
    running: dict[str, tuple[Run, subprocess.Popen, Any, float]] = {}
    failed: list[str] = []
    finished = done
    shown = done + sum(waiting.values())  # the bar's position: a resumed run may restart lower
    bar = tqdm(
        total=done + len(pending),
        initial=shown,
        unit="run",
        desc="bench",
        bar_format="{l_bar}{bar}| {n:.2f}/{total} runs [{elapsed}<{remaining}]",
    )
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    try:
        while queue or running:
            while queue and len(running) < workers:
                run = queue.pop(0)
                waiting.pop(run.name)
                log = open_log(logs / f"{run.name}.log")
                process = subprocess.Popen(
                    train_command(run, results_dir, threads),
                    stdout=log, stderr=subprocess.STDOUT, env=env,
                )  # fmt: skip
                running[run.name] = (run, process, log, time.monotonic())
            time.sleep(1.0)
            for name, (run, process, log, started) in list(running.items()):
                if process.poll() is None:
                    continue
                log.close()
                del running[name]
                finished += 1
                summary = RunDir(results_dir / name).read_summary()
                if process.returncode != 0:
                    failed.append(name)
                    summary = summary if summary is not None else {"status": "failed"}
                seconds = time.monotonic() - started
                bar.write(finished_line(run, summary, seconds, logs / f"{name}.log"))
            partial = sum(progress_of(results_dir / name) for name in running)
            partial += sum(waiting.values())
            shown = max(shown, min(finished + partial, float(bar.total)))
            bar.n = shown
            bar.refresh()
    finally:
        for _, process, _, _ in running.values():
            process.terminate()
        for _, process, log, _ in running.values():
            try:
                process.wait(timeout=30)  # its checkpoints are written whole or not at all
            except subprocess.TimeoutExpired:
                process.kill()
            log.close()
        bar.close()
    return failed
