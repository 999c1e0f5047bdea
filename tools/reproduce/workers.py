"""The runs of a reproduction, shared by its two paths (a card's recipe in ``run.py``, its claims
on the standard suite in ``claims.py``): every config checked before any worker starts, the
pending runs trained on bench workers, the report written and printed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from creditbench.tools.reproduce.recipe import ReproduceError


def threads_per_worker(workers: int) -> int:
    """Torch threads for each of ``workers`` runs sharing this machine's cores."""
    return max(1, (os.cpu_count() or 1) // workers)


def check_configs(runs, results: Path) -> dict[str, Any]:
    """``{run name: Trainer}`` of ``runs``, every config checked before any worker starts."""
    from creditbench.harness.config import ConfigError
    from creditbench.harness.training.trainer import Trainer
    from creditbench.tools.suite import run_config

    trainers = {}
    for run in runs:
        try:
            trainers[run.name] = Trainer(run_config(run, results))
        except ConfigError as err:
            raise ReproduceError(f"run {run.name}: {err}") from None
    return trainers


def train(pending, trainers: dict[str, Any], results: Path, workers: int, done: int) -> list[str]:
    """Train ``pending`` (checked by :func:`check_configs`) into ``results`` on ``workers``
    bench workers, after ``done`` finished ones; the names of the failed runs."""
    from tqdm.auto import tqdm

    from creditbench.tools.bench import _prepare_base_policies
    from creditbench.tools.bench_workers import run_workers
    from creditbench.tools.suite import SuiteError

    if not pending:
        return []
    _prepare_base_policies([trainers[r.name] for r in pending])
    try:
        return run_workers(pending, results, workers, threads_per_worker(workers), done, tqdm)
    except SuiteError as err:  # a run's log is a link
        raise ReproduceError(str(err)) from None


def publish(folder: Path, file_name: str, report: str, failed: list[str]) -> int:
    """Write ``report`` to ``folder/file_name``, print it and its path and any failed runs'
    logs; the exit code (1 when a run failed)."""
    from creditbench.harness.records.rundir import atomic_write_text

    path = folder / file_name
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, report)
    print("\n" + report)
    print(path)
    if failed:
        logs = ", ".join(str(folder / "logs" / f"{name}.log") for name in failed)
        print(f"{len(failed)} runs failed; logs: {logs}")
        return 1
    return 0


# ---------------------------------------------------------------------------------------------
# The command
