"""A campaign's runs on both sides: the records committed in the repository and the work folder.

The repository keeps each finished run's records (:data:`RECORD_FILES`) packed as
``<run>.tar.xz`` (or, from before that form, as a folder); the work folder holds the runs as
the pinned commits' ``creditbench bench`` writes and reads them, folders with checkpoints. So:

- :func:`restore` unpacks the committed runs into the work folder before a campaign runs, so
  a fresh machine's bench skips what the repository holds and runs only the rest;
- :func:`finished_runs` and :func:`finished_table` say what is done, whichever side holds it;
- :func:`seed_teachers` puts the package's teachers into the cache, where a pinned commit
  older than the shipped teachers looks for them (it finds the same key).

Every file lands whole or not at all: a run is unpacked into a hidden folder beside its place
and renamed into it, a teacher copied likewise.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from creditbench.harness.records.files import (
    RECORD_FILES,
    RunFormatError,
    atomic_write_bytes,
    find_runs,
    read_record_bytes,
    run_name,
)


def committed_runs(folder: Path | None) -> dict[str, Path]:
    """``{run name: its folder or archive}`` of the records in ``folder`` (none when it does not
    exist). Only finished runs are committed, so every one counts as finished."""
    if folder is None or not folder.is_dir():
        return {}
    runs, _ = find_runs(folder)
    return {run_name(path): path for path in runs}


def finished_runs(folder: Path) -> dict[str, Path]:
    """``{run name: folder}`` of the finished runs (a ``summary.json`` that parses) directly in
    a results folder as a bench writes it."""
    if not folder.is_dir():
        return {}
    out = {}
    for run in sorted(folder.iterdir()):
        if run.name.startswith("."):  # a run being restored, not yet in place
            continue
        try:
            summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(summary, dict):
            out[run.name] = run
    return out


def restore(committed: Path | None, results: Path) -> int:
    """Unpack every committed run of ``committed`` that ``results`` lacks into
    ``results/<run>/``; how many. A run already there (finished or not) is left alone."""
    results.mkdir(parents=True, exist_ok=True)
    for left in results.glob(".*.restoring-*"):  # by a restore that was killed
        shutil.rmtree(left, ignore_errors=True)
    restored = 0
    for name, source in committed_runs(committed).items():
        target = results / name
        if target.exists():
            continue
        partial = results / f".{name}.restoring-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            for record in RECORD_FILES:
                atomic_write_bytes(partial / record, read_record_bytes(source / record))
            os.rename(partial, target)
        except FileNotFoundError as err:
            missing = Path(str(err.filename)).name
            raise RunFormatError(f"{source}: a committed run without {missing}") from None
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        restored += 1
    return restored


def finished_table(sources: list[Path]):
    """The leaderboard's table (``collect_runs``) of the finished runs in ``sources`` (results
    folders, record folders, ``runs.csv`` files), each run once: a run restored from the
    records into the work folder is read from the first source that has it."""
    import pandas as pd

    from creditbench.leaderboard.collect import collect_runs

    tables: list[pd.DataFrame] = []
    seen: set[str] = set()
    for source in sources:
        if not source.exists():
            continue
        table, _ = collect_runs([source])
        if table.empty:
            continue
        names = table["run"].map(lambda run: Path(str(run)).name)
        tables.append(table[~names.isin(seen)])
        seen |= set(names)
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def seed_teachers(cache: Path | None = None) -> list[str]:
    """Copy the package's teachers (``harness/assets/teacher/<key>/``) that the cache lacks into
    ``<cache>/teacher/``; the keys copied."""
    from creditbench.harness.models.policy_cache import ASSETS_DIR, default_cache_dir

    shipped = ASSETS_DIR / "teacher"
    target = (cache if cache is not None else default_cache_dir()) / "teacher"
    copied = []
    for entry in sorted(shipped.iterdir()) if shipped.is_dir() else []:
        if not entry.is_dir() or (target / entry.name).exists():
            continue
        partial = target / f".{entry.name}.copying-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(entry, partial)
        try:
            os.rename(partial, target / entry.name)
            copied.append(entry.name)
        except OSError:  # another campaign put it there meanwhile
            shutil.rmtree(partial, ignore_errors=True)
    return copied
