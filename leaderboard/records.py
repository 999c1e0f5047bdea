"""Run records: a leaderboard's ``runs.csv`` read back as runs, so new runs compare against them.

``runs.csv`` (written by :func:`leaderboard.report.render`) is :func:`.collect.collect_runs`'s
table: per run one ``kind = "run"`` row (every scalar the leaderboard reads, the run's config as
JSON, its digest, commit and packages), one ``kind = "eval"`` row per evaluation at a budget
fraction (the accuracy curve) and one ``kind = "eval_responses"`` row per evaluation at a count
of trained responses, where the run has them. Committed next to a published snapshot, it
stands in for the run folders: a contributor runs only the new method and renders it against
the file,

    creditbench leaderboard docs/results/standard/runs.csv runs/mine --out board

and the statistics are those the original folders would give (``tests/test_records.py`` checks
that a folder and its ``runs.csv`` give the same leaderboard).

A file that is not such a record is an error naming the file and line, never a partial read.
The columns that make a run row a record (its config as canonical JSON, its digest, commit and
packages: :func:`run_record`) are defined here, and :mod:`.collect` writes them.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from creditbench.harness.records.files import RunFormatError

# Config fields that name where or how a run was executed, not what it computed.
NOT_A_SETTING = ("run_name", "output_dir", "device", "checkpoint_every", "vllm")
# The kind of an evaluation row at a count of trained responses (``budget.eval_responses``).
SAMPLES_EVAL = "eval_responses"
REQUIRED = ("run", "kind", "method", "task", "options", "setting", "seed", "config")
# Columns collect_runs adds to every run row from the run's config and environment.
RECORD_COLUMNS = ("config", "config_digest", "commit", "git_dirty", "packages")
INTEGER_COLUMNS = ("seed", "step", "steps", "responses_mark")


def config_text(config: dict[str, Any]) -> str:
    """A config as canonical JSON (sorted keys, no spaces), less :data:`NOT_A_SETTING`."""
    kept = {k: v for k, v in config.items() if k not in NOT_A_SETTING}
    return json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str)


def config_digest(text: str) -> str:
    """The first 12 hex digits of the SHA-256 of a :func:`config_text`."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def run_record(config: dict[str, Any], environment: dict[str, Any]) -> dict[str, Any]:
    """The columns of a run row that make it a record: its config, digest and provenance."""
    text = config_text(config)
    packages = environment.get("packages")
    return {
        "config": text,
        "config_digest": config_digest(text),
        "commit": str(environment.get("git_commit") or ""),
        "git_dirty": bool(environment.get("git_dirty")),
        "packages": json.dumps(packages if isinstance(packages, dict) else {}, sort_keys=True),
    }


def _value(column: str, value: Any) -> Any:
    if column in INTEGER_COLUMNS and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _environment(row: dict[str, Any], where: str) -> dict[str, Any]:
    try:
        packages = json.loads(row.get("packages") or "{}")
    except ValueError:
        raise RunFormatError(f"{where}: packages is not JSON") from None
    dirty = row.get("git_dirty")
    return {
        "git_commit": row.get("commit") or "",
        "git_dirty": dirty is True or str(dirty).lower() == "true",
        "packages": packages if isinstance(packages, dict) else {},
    }


def _config(row: dict[str, Any], where: str) -> dict[str, Any]:
    text = row.get("config")
    try:
        config = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        config = None
    if not isinstance(config, dict):
        raise RunFormatError(f"{where}: config is not a JSON object")
    method = str(row["method"]).split("[", 1)[0]
    if config.get("method") != method or config.get("seed") != row["seed"]:
        raise RunFormatError(
            f"{where}: config says method {config.get('method')!r} seed {config.get('seed')!r}, "
            f"the row {method!r} seed {row['seed']!r}"
        )
    digest = row.get("config_digest")
    if isinstance(digest, str) and config_digest(config_text(config)) != digest:
        raise RunFormatError(f"{where}: config does not match its config_digest {digest}")
    return config


# The columns of a runs.csv that hold text; every other column holds numbers.
TEXT_COLUMNS = frozenset(
    ("run", "kind", "method", "task", "options", "setting", "accuracy_metric", *RECORD_COLUMNS)
)

# The ranges of a record's numbers; one outside is an edit or damage, never a result. An
# accuracy (and its area over the budget) is a share of problems solved; a seed is the run
# config's, in [0, 2**32); the budget spent at an evaluation passes 1 by the last step's
# overshoot, up to MAX_SPENT (ours: a run stops at the first step past its budget, so a hundred
# budgets spent is no run's record). Every number of a record is finite.
ACCURACIES = ("sampled_accuracy", "greedy_accuracy", "pass_at_k")
SHARE_COLUMNS = (
    *ACCURACIES,
    *(f"{kind}_{metric}" for kind in ("final", "auc") for metric in ACCURACIES[:2]),
    "final_accuracy",
    "start_accuracy",
    "auc",
    "budget_fraction",
)
MAX_SPENT = 100.0
SEED_LIMIT = 2**32
RANGES = {
    **{column: (0.0, 1.0) for column in SHARE_COLUMNS},
    "spent_fraction": (0.0, MAX_SPENT),
    "seed": (0, SEED_LIMIT - 1),
}


def out_of_range(column: str, value: Any, ranges: dict[str, tuple[float, float]] = RANGES):
    """Why ``value`` cannot be the number of ``column`` in a record (not a number, not finite,
    outside its range), or None."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return f"{column} {value!r} is not a number"
    if not math.isfinite(value):
        return f"{column} {value!r} is not a finite number"
    low, high = ranges.get(column, (-math.inf, math.inf))
    if not low <= value <= high:
        return f"{column} {value!r} is outside [{low:g}, {high:g}]"
    return None


# A cell a spreadsheet would run as a formula starts with one of these (OWASP, "CSV
# Injection"): written with a leading apostrophe, which spreadsheets show as text, and read
# back without it.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell that starts like a formula behind a leading ``'``;
    numbers (``-0.5``) stay numbers. What the leaderboard writes as CSV goes through it."""
    out = frame.copy()
    for column in out.columns:
        if pd.api.types.is_numeric_dtype(out[column]):
            continue
        out[column] = out[column].map(
            lambda v: f"'{v}" if isinstance(v, str) and v.startswith(FORMULA_STARTS) else v
        )
    return out


def _unquote(value: Any) -> Any:
    """A text cell as it was before :func:`spreadsheet_safe`."""
    if isinstance(value, str) and value.startswith("'") and value[1:].startswith(FORMULA_STARTS):
        return value[1:]
    return value


def _check_numbers(frame: pd.DataFrame, path: Path) -> None:
    """Refuse a cell that should hold a number and does not (a contributed runs.csv edited by
    hand: ``sampled_accuracy=high``), naming the file, line and column."""
    for column in frame.columns:
        if column in TEXT_COLUMNS or pd.api.types.is_numeric_dtype(frame[column]):
            continue
        numbers = pd.to_numeric(frame[column], errors="coerce")
        bad = frame[column].notna() & numbers.isna()
        if bad.any():
            index = int(bad.to_numpy().nonzero()[0][0])
            value = frame[column].iloc[index]
            raise RunFormatError(f"{path}:{index + 2}: {column} {value!r} is not a number")


def _check_ranges(frame: pd.DataFrame, path: Path) -> None:
    """Refuse a number no run records (an accuracy of -5, NaN written out, a seed of 1e23),
    naming the file, line and column. An empty cell is a number not measured."""
    for column in frame.columns:
        if column in TEXT_COLUMNS or not pd.api.types.is_numeric_dtype(frame[column]):
            continue
        for index, value in enumerate(frame[column].tolist()):
            if isinstance(value, float) and math.isnan(value):
                continue  # empty: not measured (an evaluation's own accuracy: checked per run)
            problem = out_of_range(column, value)
            if problem is not None:
                raise RunFormatError(f"{path}:{index + 2}: {problem}")


def _check_accuracy_metric(run: str, entries: list[tuple[str, dict]], metric: Any) -> None:
    """Every evaluation row of ``run`` holds the accuracy its run row names (``accuracy_metric``):
    a file without that column, or with the cell empty, would draw a curve through nothing."""
    if not isinstance(metric, str):
        return  # records older than the column
    for where, row in entries:
        if row["kind"] == "eval" and not isinstance(row.get(metric), (int, float)):
            raise RunFormatError(
                f"{where}: run {run} reads its accuracy from {metric}, which this evaluation "
                "row does not hold"
            )


def read_records(path: str | Path) -> dict[str, tuple[dict, dict, list[dict]]]:
    """``{run: (config, environment, rows)}`` of a ``runs.csv``, as :mod:`.collect` reads a folder.

    Raises:
        RunFormatError: not a leaderboard's ``runs.csv``; the message names the file and line.
    """
    path = Path(path)
    try:
        # only an empty cell is "not measured": a "NaN" or "null" written in a cell is refused
        frame = pd.read_csv(
            path,
            dtype={"config_digest": str, "commit": str},
            keep_default_na=False,
            na_values=[""],
        )
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise RunFormatError(f"{path}: not a readable CSV ({err})") from None
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise RunFormatError(
            f"{path}: not a leaderboard's runs.csv (no column {', '.join(missing)})"
        )
    _check_numbers(frame, path)
    _check_ranges(frame, path)
    runs: dict[str, tuple[dict, dict, list[dict]]] = {}
    rows: dict[str, list[tuple[str, dict]]] = {}
    accuracy_metric: dict[str, Any] = {}
    for index, raw in enumerate(frame.to_dict("records")):
        where = f"{path}:{index + 2}"  # line 1 is the header
        row = {
            k: _unquote(_value(k, v))
            for k, v in raw.items()
            if not (isinstance(v, float) and math.isnan(v))
        }
        missing = [c for c in REQUIRED if c != "config" and c not in row]
        if missing or row["kind"] not in ("run", "eval", SAMPLES_EVAL):
            problem = f"empty {', '.join(missing)}" if missing else f"kind {row['kind']!r}"
            raise RunFormatError(f"{where}: {problem}")
        if not isinstance(row["seed"], int):
            raise RunFormatError(f"{where}: seed {row['seed']!r} is not an integer")
        run = str(row["run"])
        if row["kind"] == "run":
            if run in runs:
                raise RunFormatError(f"{where}: a second run row for {run}")
            runs[run] = (_config(row, where), _environment(row, where), [])
        kept = {k: v for k, v in row.items() if k not in RECORD_COLUMNS}
        rows.setdefault(run, []).append((where, kept))
        if row["kind"] == "run":
            accuracy_metric[run] = row.get("accuracy_metric")
    for run, entries in rows.items():
        if run not in runs:
            raise RunFormatError(f"{path}: run {run} has evaluation rows but no run row")
        if not any(r["kind"] == "eval" for _, r in entries):
            raise RunFormatError(f"{path}: run {run} has no evaluation rows")
        _check_accuracy_metric(run, entries, accuracy_metric[run])
        runs[run][2].extend(r for _, r in entries)
    return runs
