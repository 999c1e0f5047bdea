"""The run-directory format, shared by the harness that writes it and the leaderboard that reads
it: reading a run directory, writing atomically, and the area under a learning curve.

A run directory (layout in ``docs/harness.md``) holds ``config.yaml``, ``metrics.jsonl`` (one
JSON record per line) and, once the run has finished, ``summary.json``. The harness's run
directory reads and writes through these functions, and the leaderboard reads runs through them
and imports nothing else of the harness, so the format is defined once, here. The module
imports the standard library, PyYAML and the reference loader only: reading a board never loads
torch.

Writes are atomic: a reader sees the old file or the new one, never a part of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from creditbench.reference.yaml_loading import load_yaml


class RunFormatError(ValueError):
    """A run-directory file that cannot be read as the format says; the message names it."""


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def process_umask() -> int:
    """The process's file-creation mask, read without changing it where the system says it
    (Linux's ``/proc/self/status``), else by setting and restoring it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a part.
    The file gets the mode a plain ``open`` would give it (0644 under the usual umask 022), not
    the 0600 of the temporary file it is written through, so a shared results folder stays
    readable to the people it is shared with."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~process_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


def read_run_config(path: str | Path) -> dict[str, Any]:
    """The mapping in a run's ``config.yaml`` at ``path``."""
    path = Path(path)
    try:
        data = load_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise RunFormatError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise RunFormatError(f"{where}: invalid YAML: {problem}") from None
    except OSError as err:
        raise RunFormatError(f"{path}: cannot read the run config ({err.strerror})") from None
    if not isinstance(data, dict):
        raise RunFormatError(f"{path}: the run config is not a mapping")
    return data


def read_metric_lines(
    path: str | Path, lists: tuple[str, ...] = ()
) -> list[tuple[str, dict[str, Any]]]:
    """``(line, record)`` of every complete line of a ``metrics.jsonl`` or ``responses.jsonl``
    (none if it is absent).

    The part after the last newline is a line torn by a crash mid-append and is ignored; a
    complete line that is not a JSON object with an integer ``"step"`` (and a list under each
    key of ``lists``) is an error naming the file and line.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except UnicodeDecodeError:
        raise RunFormatError(f"{path}: not UTF-8 text") from None
    out = []
    for number, line in enumerate(text.split("\n")[:-1], start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise RunFormatError(f"{path}:{number}: not a JSON record") from None
        step = record.get("step") if isinstance(record, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            raise RunFormatError(
                f'{path}:{number}: not a record of this file (a JSON object with an integer "step")'
            )
        for key in lists:
            if not isinstance(record.get(key), list):
                raise RunFormatError(f'{path}:{number}: "{key}" is missing or not a list')
        out.append((line, record))
    return out


def trapezoid(xs: list[float], ys: list[float]) -> float:
    """Area under the piecewise-linear curve through ``(xs, ys)``; one point gives 0. The AUC a
    run's ``summary.json`` records and the board's ``auc`` column, computed by one rule."""
    return sum(
        (x1 - x0) * (y0 + y1) / 2 for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:], strict=False)
    )
