"""Compare a published run's records with a re-run of it (``creditbench verify``).

Two runs of one config at one commit compute the same thing, so their records must match value
for value, except what a clock or a folder decides: every ``"time"`` object (phase seconds,
``wall_seconds``, ``budget_seconds``, a reference method's ``reference_seconds``) and the
config's ``output_dir``. Everything else in ``config.yaml``, ``summary.json`` and every record
of ``metrics.jsonl`` is compared leaf by leaf; a leaf is identical when its JSON text is (so
``0.1`` and ``0.1000000001`` differ, and NaN equals NaN). A differing number carries its
absolute and relative difference.

A re-run on another CPU may sum floats in another order (torch picks its vectorised kernels by
the machine's instruction set): counts, sampled outcomes and accuracies come back exactly, float
statistics such as gradient norms may move in the 6th-7th significant digit. So the report
groups the differences by key, with the largest difference of each, and sets the two runs'
environments (CPU, kernel capability, torch, commit) side by side.

Everything here is a pure function of records already read; running the re-run is
``tools/cli/verify.py``'s.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from creditbench.harness.records.files import (
    ARCHIVE_SUFFIX,
    RunFormatError,
    is_run_archive,
    read_metric_lines,
    read_record_text,
    read_run_config,
)
from creditbench.harness.records.provenance import KERNEL_PIN_VARIABLES

CLOCK_KEY = "time"  # the object under which every record keeps its clocks
# How far a float statistic may move when the kernels sum in another order (another CPU, AVX-512
# against AVX2): relative, and absolute for means near 0. Measured across CPUs by the replay
# test (tests/test_replay.py, which holds replays to these same tolerances; its module doc
# gives the figures).
CROSS_CPU_REL_TOL, CROSS_CPU_ABS_TOL = 1e-4, 1e-6
PATH_KEYS = ("output_dir",)  # config fields that name where a run was written
RECORD_FILES = ("config.yaml", "summary.json", "metrics.jsonl")


@dataclass(frozen=True)
class RunRecords:
    """What ``creditbench verify`` reads of one run: its config (parsed, and its text for the
    re-run to read), environment, summary and the records of ``metrics.jsonl`` in file order."""

    config_text: str
    config: dict[str, Any]
    environment: dict[str, Any]
    summary: dict[str, Any]
    metrics: list[dict[str, Any]]


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_record_text(path))
    except FileNotFoundError:
        raise RunFormatError(f"{path}: missing (not a finished run)") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise RunFormatError(f"{path}: cannot read it as JSON ({err})") from None
    if not isinstance(data, dict):
        raise RunFormatError(f"{path}: not a JSON object")
    return data


def find_run(path: Path) -> Path | None:
    """The run ``path`` names: a run folder, a run archive, or the name of a run that is
    committed as ``<name>.tar.xz``; None when there is neither."""
    if path.is_dir() or is_run_archive(path):
        return path
    packed = path.with_name(path.name + ARCHIVE_SUFFIX)
    return packed if is_run_archive(packed) else None


def read_records(run: Path) -> RunRecords:
    """The records of ``run``, a run folder or a run archive (``<name>.tar.xz``);
    `RunFormatError` naming the file that is missing or unreadable, or the damaged archive."""
    config = run / "config.yaml"
    try:
        config_text = read_record_text(config)
    except FileNotFoundError:
        raise RunFormatError(f"{config}: missing (not a run)") from None
    except (OSError, UnicodeDecodeError) as err:
        raise RunFormatError(f"{config}: cannot read it ({err})") from None
    return RunRecords(
        config_text=config_text,
        config=read_run_config(config),
        environment=_read_json_object(run / "environment.json"),
        summary=_read_json_object(run / "summary.json"),
        metrics=[record for _, record in read_metric_lines(run / "metrics.jsonl")],
    )


def cannot_rerun(records: RunRecords) -> str | None:
    """Why the run cannot be re-run at its commit (one line naming the field), or None."""
    environment = records.environment
    if not environment.get("git_commit"):
        return (
            "environment.json: git_commit is not recorded; only a run made from a git checkout "
            "of creditbench can be re-run at its commit"
        )
    if environment.get("git_dirty") is not False:
        state = "had uncommitted changes" if environment.get("git_dirty") else "is not recorded"
        return (
            f"environment.json: git_dirty: the checkout the run was made from {state}, so its "
            f"code is not commit {environment['git_commit'][:7]}'s"
        )
    if (records.config.get("budget") or {}).get("unit") == "seconds":
        return (
            "config.yaml: budget.unit is seconds: the run stopped at a wall-clock time, which no "
            "re-run reproduces"
        )
    if not records.config.get("run_name"):
        return "config.yaml: run_name is not recorded; the re-run's folder needs it"
    return None


def rerun_environment(published: dict[str, Any], here: dict[str, str]) -> dict[str, str]:
    """The process environment of the re-run: this one's (``here``), with the published run's
    kernel pins exactly (those it did not record removed, where it recorded its pins), the
    torch threads it recorded for OpenMP and MKL too (as ``creditbench bench`` starts a run),
    and no GPU visible to a run that ran on the CPU."""
    out = dict(here)
    pins = published.get("kernel_pins")
    if isinstance(pins, dict):
        for name in KERNEL_PIN_VARIABLES:
            out.pop(name, None)
        out.update({str(k): str(v) for k, v in pins.items()})
    threads = published.get("torch_threads")
    if isinstance(threads, int) and threads >= 1:
        out["OMP_NUM_THREADS"] = out["MKL_NUM_THREADS"] = str(threads)
    if published.get("cuda") is None:
        out["CUDA_VISIBLE_DEVICES"] = ""
    return out


# ---------------------------------------------------------------------------------------------
# Comparing


@dataclass(frozen=True)
class Difference:
    """One leaf that differs: ``key`` is its path in the record (``eval.sampled_accuracy``,
    ``grad_norms[2]``), ``line`` its line in metrics.jsonl (None in the other files); a side
    without the key holds `MISSING`."""

    file: str
    line: int | None
    key: str
    published: Any
    rerun: Any

    @property
    def absolute(self) -> float | None:
        """|published - rerun| for two finite numbers, else None."""
        if not (_is_number(self.published) and _is_number(self.rerun)):
            return None
        return abs(float(self.published) - float(self.rerun))

    @property
    def relative(self) -> float | None:
        """The absolute difference over the larger magnitude of the two, else None."""
        absolute = self.absolute
        if absolute is None:
            return None
        scale = max(abs(float(self.published)), abs(float(self.rerun)))
        return absolute / scale if scale else 0.0

    @property
    def within_cross_cpu_tolerance(self) -> bool:
        """Whether two floats differ by no more than another CPU's kernels move them
        (:data:`CROSS_CPU_REL_TOL` relative or :data:`CROSS_CPU_ABS_TOL` absolute). Integers
        (counts) and anything else must be equal."""
        a, b = self.published, self.rerun
        if not (isinstance(a, float) and isinstance(b, float) and self.absolute is not None):
            return False
        return math.isclose(a, b, rel_tol=CROSS_CPU_REL_TOL, abs_tol=CROSS_CPU_ABS_TOL)

    @property
    def key_name(self) -> str:
        """The key without list positions (``grad_norms[i]``): one name for every element."""
        return re.sub(r"\[\d+\]", "[i]", self.key)


MISSING = "<missing>"


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """``(path, leaf)`` of a JSON value: objects by key, lists by position; clocks left out."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            if key == CLOCK_KEY:
                continue
            yield from _leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            yield from _leaves(item, f"{path}[{index}]")
    else:
        yield path, value


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _compare_record(
    file: str, line: int | None, published: Any, rerun: Any
) -> tuple[int, list[Difference]]:
    """(leaves compared, the differences) of one record and its re-run."""
    mine, theirs = dict(_leaves(published)), dict(_leaves(rerun))
    differences = []
    for key in list(mine) + [key for key in theirs if key not in mine]:
        a, b = mine.get(key, MISSING), theirs.get(key, MISSING)
        if not _same(a, b):
            differences.append(Difference(file, line, key, a, b))
    return len(set(mine) | set(theirs)), differences


@dataclass
class Comparison:
    """Every difference between two runs' records, and how much was compared."""

    compared: int = 0  # leaves compared, over all files and records
    differences: list[Difference] = field(default_factory=list)
    metrics_lines: tuple[int, int] = (0, 0)  # records in each metrics.jsonl (published, re-run)

    @property
    def identical(self) -> bool:
        return not self.differences

    @property
    def beyond_cross_cpu_tolerance(self) -> list[Difference]:
        """The differences another CPU's kernels do not explain."""
        return [d for d in self.differences if not d.within_cross_cpu_tolerance]

    @property
    def largest_relative(self) -> Difference | None:
        """The numeric difference with the largest relative size, if any."""
        numeric = [d for d in self.differences if d.relative is not None]
        return max(numeric, key=lambda d: d.relative or 0.0, default=None)


def compare_runs(published: RunRecords, rerun: RunRecords) -> Comparison:
    """Compare config.yaml (less its paths), summary.json and metrics.jsonl record by record
    (by line: a record one run has and the other has not differs in every key)."""
    result = Comparison(metrics_lines=(len(published.metrics), len(rerun.metrics)))

    def add(file: str, line: int | None, a: Any, b: Any) -> None:
        compared, differences = _compare_record(file, line, a, b)
        result.compared += compared
        result.differences += differences

    def without_paths(config: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in config.items() if key not in PATH_KEYS}

    add("config.yaml", None, without_paths(published.config), without_paths(rerun.config))
    add("summary.json", None, published.summary, rerun.summary)
    lines = max(result.metrics_lines)
    for index in range(lines):
        a = published.metrics[index] if index < len(published.metrics) else {}
        b = rerun.metrics[index] if index < len(rerun.metrics) else {}
        add("metrics.jsonl", index + 1, a, b)
    return result


# ---------------------------------------------------------------------------------------------
# Reporting


@dataclass(frozen=True)
class KeyDifferences:
    """The differences of one key name in one file: in how many records, the largest one."""

    file: str
    key_name: str
    records: int
    beyond_tolerance: int  # of those records, where it differs beyond the cross-CPU tolerance
    largest: Difference  # by relative size where numeric, else the first


def group_by_key(differences: list[Difference]) -> list[KeyDifferences]:
    """One entry per (file, key name): first the keys whose values are not both numbers (a
    text, a list's length, a key one side lacks), in file order; then the numeric ones, the
    largest relative difference first."""
    groups: dict[tuple[str, str], list[Difference]] = {}
    for difference in differences:
        groups.setdefault((difference.file, difference.key_name), []).append(difference)
    out = []
    for (file, key_name), members in groups.items():
        numeric = [d for d in members if d.relative is not None]
        largest = max(numeric, key=lambda d: d.relative or 0.0) if numeric else members[0]
        records = len({d.line for d in members})
        beyond = len({d.line for d in members if not d.within_cross_cpu_tolerance})
        out.append(KeyDifferences(file, key_name, records, beyond, largest))
    return sorted(
        out, key=lambda g: (0.0, 0.0) if g.largest.relative is None else (1.0, -g.largest.relative)
    )


def _short(value: Any, width: int = 24) -> str:
    text = value if value == MISSING else json.dumps(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _environment_rows(environment: dict[str, Any]) -> dict[str, str]:
    """The fields of ``environment.json`` that decide whether floats can match bit for bit."""
    packages = environment.get("packages") or {}
    pins = environment.get("kernel_pins")
    commit = environment.get("git_commit") or "not recorded"
    return {
        "commit": commit[:12] + (" (dirty)" if environment.get("git_dirty") else ""),
        "CPU": environment.get("cpu_model") or "not recorded",
        "kernel capability": environment.get("cpu_capability") or "not recorded",
        "kernel pins": (
            "not recorded"
            if pins is None
            else ", ".join(f"{k}={v}" for k, v in pins.items()) or "none"
        ),
        "torch": packages.get("torch") or "not recorded",
        "threads": str(environment.get("torch_threads", "not recorded")),
    }


def format_comparison(
    published: RunRecords, rerun: RunRecords, comparison: Comparison, max_keys: int = 30
) -> str:
    """The report a user reads in one screen: the two environments, what was compared, one
    line per differing key (records where it differs, its largest difference), the verdict."""
    lines = [f"{'':<18} {'published':<30} re-run"]
    mine, theirs = _environment_rows(published.environment), _environment_rows(rerun.environment)
    lines += [f"{name:<18} {mine[name]:<30} {theirs[name]}" for name in mine]
    n_published, n_rerun = comparison.metrics_lines
    records = (
        f"{n_published} records"
        if n_published == n_rerun
        else f"{n_published} records published, {n_rerun} re-run"
    )
    identical = comparison.compared - len(comparison.differences)
    lines += [
        "",
        f"compared {comparison.compared} values of {', '.join(RECORD_FILES)} ({records}; "
        f"clocks and output_dir left out): {identical} identical, "
        f"{len(comparison.differences)} differ",
    ]
    largest = comparison.largest_relative
    if largest is not None:
        lines.append(
            f"largest relative difference {largest.relative:.2g} "
            f"({largest.file} {largest.key}" + (f", line {largest.line})" if largest.line else ")")
        )
    beyond = len(comparison.beyond_cross_cpu_tolerance)
    tolerance = (
        f"the tolerance another CPU's kernels explain ({CROSS_CPU_REL_TOL:g} relative or "
        f"{CROSS_CPU_ABS_TOL:g} absolute, floats only)"
    )
    if comparison.differences and not beyond:
        lines.append(f"every difference is within {tolerance}")
    elif beyond:
        lines.append(f"{beyond} differences are beyond {tolerance}")
    groups = group_by_key(comparison.differences)
    if groups:
        lines += [
            "",
            f"{'file':<14} {'key':<30} {'records':>7} {'beyond':>6}  {'largest abs':>11} "
            f"{'rel':>7}  published -> re-run (where largest)",
        ]
        for group in groups[:max_keys]:
            d = group.largest
            absolute = "" if d.absolute is None else f"{d.absolute:.3g}"
            relative = "" if d.relative is None else f"{d.relative:.2g}"
            lines.append(
                f"{group.file:<14} {group.key_name:<30} {group.records:>7} "
                f"{group.beyond_tolerance:>6}  {absolute:>11} {relative:>7}  "
                f"{_short(d.published)} -> {_short(d.rerun)}"
            )
        if len(groups) > max_keys:
            lines.append(f"... and {len(groups) - max_keys} more keys")
    lines += ["", "records identical" if comparison.identical else "records differ"]
    return "\n".join(lines)
