"""The run-directory format, shared by the harness that writes it and the leaderboard that reads
it: reading a run directory, writing atomically, and the area under a learning curve.

A run directory (layout in ``docs/harness.md``) holds ``config.yaml``, ``metrics.jsonl`` (one
JSON record per line) and, once the run has finished, ``summary.json``. The harness's run
directory reads and writes through these functions, and the leaderboard reads runs through them
and imports nothing else of the harness, so the format is defined once, here. The module
imports the standard library, PyYAML and the common YAML loader only: reading a board never loads
torch.

Writes are atomic: a reader sees the old file or the new one, never a part of one.

A finished run's records are committed packed: ``<run name>.tar.xz`` beside where its folder
would be, holding the four :data:`RECORD_FILES` at the archive's top level, byte for byte
(:func:`pack_run`). Readers treat such an archive as the run folder of that name: they list a
results folder's runs with :func:`find_runs` and read a record with :func:`read_record_bytes`
(``<folder or archive>/<file>``), so no reader checks which form it holds.
"""

from __future__ import annotations

import errno
import functools
import io
import json
import lzma
import math
import os
import stat
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from creditbench.common.yaml_loading import load_yaml


class RunFormatError(ValueError):
    """A run-directory file that cannot be read as the format says; the message names it."""


class DamagedRunError(RunFormatError):
    """A finished run's records that are damaged (an archive that does not unpack, a line the
    harness never writes): an error, not a run to skip, since a board without it would silently
    lose a seed of its intervals."""


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
        data = load_yaml(read_record_text(path))
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
    return [(line, record) for _, line, record in _numbered_lines(Path(path), lists)]


def read_finished_metrics(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` of every line of a finished run's ``metrics.jsonl``, read as
    :func:`read_metric_lines` reads it, except that a last line without its newline is an error
    naming the file and line: a finished run wrote every line whole, so a torn one is damage
    (a copy cut short), never a crash mid-append to ignore."""
    return [(n, record) for n, _, record in _numbered_lines(Path(path), (), torn_is_damage=True)]


def _numbered_lines(
    path: Path, lists: tuple[str, ...], *, torn_is_damage: bool = False
) -> list[tuple[int, str, dict[str, Any]]]:
    try:
        text = read_record_text(path)
    except FileNotFoundError:
        return []
    except UnicodeDecodeError:
        raise RunFormatError(f"{path}: not UTF-8 text") from None
    lines = text.split("\n")
    if torn_is_damage and lines[-1].strip():
        raise RunFormatError(
            f"{path}:{len(lines)}: the last line is cut short (no newline at its end), in a "
            "run that finished"
        )
    out = []
    for number, line in enumerate(lines[:-1], start=1):
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
        out.append((number, line, record))
    return out


def spent_fraction(entry: dict[str, Any]) -> float:
    """Where an evaluation record (an ``"eval"`` entry of ``metrics.jsonl``) happened, as a share
    of the run's budget: its ``budget_fraction``, the share spent by then (above 1 at the run's
    end, whose last step overshoots the budget), or the fraction it was scheduled at
    (``fraction``) where that is not recorded: a budget in wall-clock seconds, whose spent share
    is not reproducible, and records written before the field."""
    spent = entry.get("budget_fraction")
    if isinstance(spent, (int, float)) and not isinstance(spent, bool) and math.isfinite(spent):
        return float(spent)
    return float(entry["fraction"])


def area_until(xs: Sequence[float], ys: Sequence[float], end: float) -> float:
    """Area under the piecewise-linear curve through ``(xs, ys)`` from its first point to
    ``end``; one point at ``end`` gives 0.

    The curve past ``end`` earns nothing: the segment that crosses ``end`` is cut there, its
    value at ``end`` read on the line between the two points that bracket it. So a run whose
    last evaluation falls at 1.16 of its budget is credited over [0, 1] with what it showed by
    then, never with what the extra 0.16 bought it.

    Raises:
        ValueError: ``xs`` decrease somewhere, or the curve stops short of ``end`` (its last
            point lies before it: what it would have shown up to ``end`` is not measured).
    """
    if len(xs) != len(ys) or not xs:
        raise ValueError(f"a curve needs one value a point, and a point: {len(xs)}, {len(ys)}")
    if any(b < a for a, b in zip(xs, xs[1:], strict=False)):
        raise ValueError(f"the points of a curve must not decrease: {list(xs)}")
    if xs[-1] < end:
        raise ValueError(f"the curve ends at {xs[-1]:.4g}, short of {end:g}")
    area = 0.0
    for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:], strict=False):
        if x0 >= end:
            break
        if x1 > end:  # the segment that crosses the end: cut at it
            y1 = y0 + (y1 - y0) * (end - x0) / (x1 - x0)
            x1 = end
        area += (x1 - x0) * (y0 + y1) / 2
    return area


def budget_auc(evals: Sequence[dict[str, Any]], metric: str) -> float:
    """The AUC of a run's evaluation records (in order) in ``metric``: the area under the
    metric against the share of the budget spent at each evaluation (:func:`spent_fraction`),
    up to the whole budget (:func:`area_until` its end, 1). The AUC a run's ``summary.json``
    records and the board's ``auc`` column, computed by this one rule.

    Raises:
        ValueError: the evaluations end short of the whole budget (a run that stopped early).
    """
    return area_until([spent_fraction(e) for e in evals], [e[metric] for e in evals], 1.0)


# A finished run's committed records: one xz-compressed tar per run (module doc).
RECORD_FILES = ("config.yaml", "environment.json", "metrics.jsonl", "summary.json")
ARCHIVE_SUFFIX = ".tar.xz"
# xz's default preset: on records (each run's well under its 8 MiB dictionary) presets 9 and
# 9|extreme pack no smaller (docs/results/index.md gives the measurement), at 4x the time and
# 7x the memory.
XZ_PRESET = 6


def is_run_archive(path: str | Path) -> bool:
    """Whether ``path`` is a run's records packed by :func:`pack_run` (by its name)."""
    path = Path(path)
    return path.name.endswith(ARCHIVE_SUFFIX) and path.is_file()


def run_name(path: str | Path) -> str:
    """The run's name of its folder or its archive: ``runs/grpo-s0.tar.xz`` -> ``grpo-s0``."""
    name = Path(path).name
    return name[: -len(ARCHIVE_SUFFIX)] if name.endswith(ARCHIVE_SUFFIX) else name


def pack_run(run_dir: str | Path, dest_folder: str | Path) -> Path:
    """Pack the finished run at ``run_dir`` into ``dest_folder/<run name>.tar.xz``; its path.

    The archive holds the four :data:`RECORD_FILES` at its top level, byte for byte, in that
    order, each with mode 0644, owner 0 and time 0, so packing one run twice gives the same
    bytes (a re-synced run is no change to commit). It is written atomically: a sync killed
    mid-write leaves no archive, or the old one, never a part of one. An archive of that name is
    replaced; whether it may be is the caller's decision.

    Raises:
        RunFormatError: a record file is missing or unreadable (only a finished run's records
            are packed); nothing is written.
    """
    run_dir = Path(run_dir)
    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in RECORD_FILES:
            try:
                data = (run_dir / name).read_bytes()
            except OSError as err:
                raise RunFormatError(
                    f"{run_dir / name}: cannot pack the run ({err.strerror}); "
                    "only a finished run's records are packed"
                ) from None
            member = tarfile.TarInfo(name)
            member.size, member.mode, member.mtime = len(data), 0o644, 0
            tar.addfile(member, io.BytesIO(data))
    packed = lzma.compress(
        tar_bytes.getvalue(), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=XZ_PRESET
    )
    archive = Path(dest_folder) / f"{Path(os.path.abspath(run_dir)).name}{ARCHIVE_SUFFIX}"
    atomic_write_bytes(archive, packed)
    return archive


@functools.lru_cache(maxsize=8)
def _archive_members(path: str, stamp: tuple[int, int, int]) -> dict[str, bytes]:
    """``{file name: bytes}`` of a run archive; ``stamp`` (inode, mtime, size) keys the cache, so
    an archive replaced on disk is read anew. A reader asks for one run's files in turn: the
    archive is unpacked once for all of them."""
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(path, mode="r:xz") as tar:
            for member in tar:
                extracted = tar.extractfile(member) if member.isfile() else None
                if extracted is None or "/" in member.name:
                    raise DamagedRunError(
                        f"{path}: not a run archive (its member {member.name!r} is not a file "
                        "at the top level)"
                    )
                members[member.name] = extracted.read()
    except (tarfile.TarError, lzma.LZMAError, EOFError, OSError) as err:
        reason = str(err) or type(err).__name__
        raise DamagedRunError(
            f"{path}: damaged run archive ({reason}); restore it from git or re-pack the run"
        ) from None
    missing = [name for name in RECORD_FILES if name not in members]
    if missing:
        raise DamagedRunError(f"{path}: not a run archive (no {', '.join(missing)})")
    return members


def read_record_bytes(path: str | Path) -> bytes:
    """The bytes of one record file of a run, ``<run folder or archive>/<file name>``.

    Raises:
        FileNotFoundError: the run has no such file (in its folder or in its archive).
        DamagedRunError: the run's archive does not unpack; the message names it.
        RunFormatError: the file is a FIFO, socket or device, which no run writes: reading a
            FIFO planted in a shared results folder waited for a writer, forever.
    """
    path = Path(path)
    archive = path.parent
    if not is_run_archive(archive):
        try:
            mode = path.stat().st_mode
        except OSError:
            mode = None  # absent: the read below names it
        if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise RunFormatError(f"{path}: not a regular file, which no run writes")
        return path.read_bytes()
    info = archive.stat()
    members = _archive_members(str(archive), (info.st_ino, info.st_mtime_ns, info.st_size))
    if path.name not in members:
        raise FileNotFoundError(errno.ENOENT, "not in the run's archive", str(path))
    return members[path.name]


def read_record_text(path: str | Path) -> str:
    """:func:`read_record_bytes` as UTF-8 text with universal newlines (as ``Path.read_text``).

    Raises:
        UnicodeDecodeError: not UTF-8 text; and what :func:`read_record_bytes` raises.
    """
    text = read_record_bytes(path).decode("utf-8")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def find_runs(root: str | Path) -> tuple[list[Path], list[str]]:
    """Every run under ``root``, sorted: each folder holding ``config.yaml`` and each
    ``<name>.tar.xz`` (:func:`pack_run`), read alike through :func:`read_record_bytes`; and
    warnings. ``root`` may itself be a run folder or archive.

    A run reached both directly and through a link is read at its direct path, with a warning;
    links are followed, but no real folder is walked twice (so a link cycle ends).

    Raises:
        RunFormatError: a run present both as a folder and as an archive in one folder (a sync
            or a conversion stopped half-way): which holds the record is not for a reader to
            guess, so the message names both.
    """
    root = Path(root)
    if is_run_archive(root):
        return [root], []
    seen_dirs: set[str] = set()
    reached: dict[str, list[Path]] = {}
    for current, dirnames, filenames in os.walk(root, followlinks=True):
        here = Path(current)
        seen_dirs.add(os.path.realpath(here))
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and os.path.realpath(here / d) not in seen_dirs
        )
        if "config.yaml" in filenames:
            dirnames[:] = []  # a run directory holds no other run
            reached.setdefault(os.path.realpath(here), []).append(here)
            continue
        archives = [f for f in filenames if f.endswith(ARCHIVE_SUFFIX) and not f.startswith(".")]
        for name in sorted(archives):
            twin = here / run_name(name)
            if (twin / "config.yaml").is_file():
                raise RunFormatError(
                    f"{twin} and {here / name}: one run both as a folder and as an archive; "
                    "keep one (the archive, once it reads back as the folder)"
                )
            reached.setdefault(os.path.realpath(here / name), []).append(here / name)
    warnings: list[str] = []
    found = []
    for paths in reached.values():
        direct = sorted(paths, key=lambda p: (os.path.realpath(p) != os.path.abspath(p), str(p)))
        found.append(direct[0])
        for other in direct[1:]:
            warnings.append(
                f"{other.relative_to(root).as_posix()}: the same "
                f"{'directory' if other.is_dir() else 'archive'} as "
                f"{direct[0].relative_to(root).as_posix()} (a link); counted once"
            )
    # in the order of the runs' names, as if every run were a folder
    return sorted(found, key=lambda p: p.with_name(run_name(p))), sorted(warnings)
