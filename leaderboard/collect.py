"""Collect finished runs under a results directory into one tidy table.

A run directory is any folder holding ``config.yaml``, and a run's records packed as
``<run name>.tar.xz`` read as its folder (both found and read with :mod:`.files`).
A run is read only when it is finished: ``summary.json`` parses and says ``"status":
"finished"``. Everything else (no summary yet, a failed run, an unreadable file, a finished run
without evaluations or whose evaluations end short of its budget) is skipped with a warning that
names the folder; a finished run whose ``metrics.jsonl`` holds a line the harness never writes
is an error naming the file and line.

The table (a pandas DataFrame) has three kinds of rows, told apart by ``kind``:

- ``"eval"``: one per run and evaluation point, with ``budget_fraction`` (the fraction of the
  budget it was scheduled at, ``budget.eval_fractions``: the same points in every run),
  ``spent_fraction`` (the share of the budget spent when it happened, where the AUC puts it:
  :func:`~creditbench.harness.records.files.spent_fraction`), ``responses_trained``
  (responses the run had trained on by then) and the evaluation metrics (``sampled_accuracy``,
  ``greedy_accuracy``, ``pass_at_k``, ...);
- ``"eval_responses"``: one per run and evaluation at a count of trained responses
  (``budget.eval_responses``; records of runs without it have none), with ``responses_mark``
  (the count it was placed at), ``step``, ``responses_trained`` and the evaluation metrics:
  the equal-samples axis (:func:`.stats.with_samples_auc`), read from these alone;
- ``"run"``: one per run (``budget_fraction`` empty) with ``start_accuracy`` (at fraction 0),
  ``final_accuracy``, ``auc`` (the area under accuracy against the spent fraction, over the
  whole budget: :func:`~creditbench.harness.records.files.budget_auc`; and
  ``final_<metric>``, ``auc_<metric>`` for each accuracy metric every evaluation has), the
  means of the step-level diagnostics (``credit_precision``, ``credit_auroc``, ``entropy``, ...)
  plus the filler entropy at the first and last logged step and its drift (last - first); and
  the run's totals of the counters its step records carry cumulated: ``flops_total`` (the
  charged FLOPs) and, for a reference method, ``reference_flops``,
  ``reference_generated_tokens`` and ``reference_forward_tokens`` (its passes counted and not
  charged, :data:`RUN_TOTALS`).

Every row carries ``run`` (the folder relative to the results directory), ``method``, ``task``,
``options`` (the task options as ``key=value``, ``default`` when none), ``setting`` (the config
fields besides method, task, options and seed that vary between collected runs of one task and
options, such as a swept batch size, less those that change no step: the counts of trained
responses a run is evaluated at; ``default`` when none) and ``seed``. ``accuracy_metric``
names the metric behind ``final_accuracy`` and ``auc``: ``sampled_accuracy`` when every
evaluation of the run has it, otherwise ``greedy_accuracy`` (the trainer's summary uses the same
rule).

Run rows also carry the run's record (:func:`.records.run_record`): ``config`` (its config as
JSON, less the fields that say where it ran: :data:`.records.NOT_A_SETTING`), ``config_digest``
(the first 12 hex digits of that JSON's SHA-256: two runs with one digest computed the same
thing), and from its ``environment.json``
``commit``, ``git_dirty`` and ``packages``; and its times where recorded: ``wall_seconds``,
``eval_seconds`` (its evaluations' share) and ``step_seconds`` (the median training step). That
makes the table written as ``runs.csv`` a complete record: :mod:`.records` reads it back, and
``collect_runs`` takes such files beside results directories, so new runs are compared against
committed ones without re-running them.

No run is counted twice: a folder reached by two paths (a symbolic link) is read once, and two
folders holding the same run (same method, method options, task, options, setting and seed) keep
the one whose relative path sorts first, with a warning naming both. Between sources the first
given wins: a record in a committed ``runs.csv`` listed first is kept over a re-run of it.

How one run's records are read and checked is :mod:`.run_records`; which runs a suite
promised, beside those that finished, is :mod:`.suite_manifests`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from creditbench.harness.records.files import (
    DamagedRunError,
    RunFormatError,
    budget_auc,
    find_runs,
    is_run_archive,
    run_name,
    spent_fraction,
)

from .records import (
    NOT_A_SETTING,
    SAMPLES_EVAL,
    read_records,
    run_record,
)
from .run_records import RunRecords, finite, read_environment, read_run

# Fields that change no step of a run and so do not split a setting (its digest still tells the
# configs apart): the counts of trained responses it is also evaluated at, which runs of one
# setting may or may not have (a row without them reads "not measured" on the samples axis).
NOT_A_SETTING_FIELDS = ("budget.eval_responses",)
IDENTITY_FIELDS = ("method", "method_options", "task", "task_options", "seed")
# Step-record keys that are bookkeeping, not diagnostics.
NOT_A_DIAGNOSTIC = {
    "step",
    "budget_fraction",
    "flops",
    "generated_tokens",
    "forward_tokens",
    "trained_tokens",
    "optimizer_steps",
    "responses",
}
# Counters a reference method's step records carry cumulated over the run, as ``flops``: the
# passes counted and not charged (the oracle's values). A run's row holds its total, the last.
RUN_TOTALS = ("reference_flops", "reference_generated_tokens", "reference_forward_tokens")
EVAL_METRICS = ("sampled_accuracy", "greedy_accuracy", "pass_at_k", "mean_length")


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: json.dumps(data, sort_keys=True)}


def options_key(options: dict[str, Any] | None) -> str:
    """``{"steps": 8, "slip_rate": 0.1}`` -> ``"slip_rate=0.1,steps=8"``; empty -> ``"default"``."""
    if not options:
        return "default"
    flat = _flatten(options)
    return ",".join(f"{key}={json.loads(value)}" for key, value in sorted(flat.items()))


def trained_responses(steps: list[dict]):
    """``step -> responses trained on in steps 1..step`` from the step records' ``responses``."""
    counts = sorted(
        (int(r["step"]), float(r["responses"]))
        for r in steps
        if isinstance(r.get("step"), int) and finite(r.get("responses"))
    )

    def upto(step: int) -> float:
        return sum(n for s, n in counts if s <= step)

    return upto


def _run_rows(rel: str, records: RunRecords) -> list[dict]:
    config, evals, steps = records.config, records.evals, records.steps
    base = {
        "run": rel,
        "method": config["method"],
        "task": str(config.get("task")),
        "options": options_key(config.get("task_options")),
        "seed": config["seed"],
    }
    metric = (
        "sampled_accuracy"
        if all(finite(e.get("sampled_accuracy")) for e in evals)
        else "greedy_accuracy"
    )
    rows = []
    trained = trained_responses(steps)
    for entry in evals:
        step = entry.get("step")
        row = {
            **base,
            "kind": "eval",
            "budget_fraction": entry["fraction"],
            "spent_fraction": spent_fraction(entry),
            "step": step,
            "responses_trained": trained(step) if isinstance(step, int) else math.nan,
        }
        row.update({k: entry[k] for k in EVAL_METRICS if finite(entry.get(k))})
        rows.append(row)
    for entry in records.sample_evals:
        step = entry.get("step")
        row = {
            **base,
            "kind": SAMPLES_EVAL,
            "responses_mark": entry["responses"],
            "step": step,
            "responses_trained": trained(step) if isinstance(step, int) else math.nan,
        }
        row.update({k: entry[k] for k in EVAL_METRICS if finite(entry.get(k))})
        rows.append(row)
    run_row: dict[str, Any] = {**base, "kind": "run", "accuracy_metric": metric}
    for name in ("sampled_accuracy", "greedy_accuracy"):
        if all(finite(e.get(name)) for e in evals):
            run_row[f"final_{name}"] = float(evals[-1][name])
            run_row[f"auc_{name}"] = budget_auc(evals, name)
    run_row["final_accuracy"] = run_row.get(f"final_{metric}", math.nan)
    first = evals[0]
    run_row["start_accuracy"] = (
        float(first[metric]) if first["fraction"] == 0.0 and finite(first.get(metric)) else math.nan
    )
    run_row["auc"] = run_row.get(f"auc_{metric}", math.nan)
    run_row["steps"] = max((r["step"] for r in steps if isinstance(r.get("step"), int)), default=0)
    run_row.update(records.seconds)
    flops = [float(r["flops"]) for r in steps if finite(r.get("flops"))]
    if flops:
        run_row["flops_total"] = max(flops)  # the meter's count, cumulative over the run
    for key in RUN_TOTALS:
        counts = [float(r[key]) for r in steps if finite(r.get(key))]
        if counts:
            run_row[key] = max(counts)
    values: dict[str, list[float]] = {}
    for record in steps:
        for key, value in record.items():
            if key not in NOT_A_DIAGNOSTIC and key not in RUN_TOTALS and finite(value):
                values.setdefault(key, []).append(float(value))
    for key, series in values.items():
        run_row[key] = sum(series) / len(series)
    filler = values.get("filler_entropy")
    if filler:
        run_row["filler_entropy_first"] = filler[0]
        run_row["filler_entropy_last"] = filler[-1]
        run_row["filler_entropy_drift"] = filler[-1] - filler[0]
    rows.append(run_row)
    return rows


def _labels(configs: dict[str, dict]) -> tuple[dict[str, str], dict[str, str]]:
    """Per run: the setting label and the method label (method options that vary, if any)."""
    flat = {
        rel: _flatten({k: v for k, v in c.items() if k not in IDENTITY_FIELDS})
        for rel, c in configs.items()
    }
    keys = sorted(
        {
            k
            for f in flat.values()
            for k in f
            if k.split(".")[0] not in NOT_A_SETTING and k not in NOT_A_SETTING_FIELDS
        }
    )
    # A field names a setting only where it varies between runs of one task and task options:
    # a budget that each task setting fixes (the standard suite's hard and easy) says nothing
    # the options do not already say.
    by_task_setting: dict[tuple, list[dict[str, Any]]] = {}
    for rel, c in configs.items():
        key = (c.get("task"), options_key(c.get("task_options")))
        by_task_setting.setdefault(key, []).append(flat[rel])
    varying = [
        k
        for k in keys
        if any(len({f.get(k) for f in runs}) > 1 for runs in by_task_setting.values())
    ]
    settings = {
        rel: ",".join(f"{k}={json.loads(f[k]) if k in f else None}" for k in varying) or "default"
        for rel, f in flat.items()
    }
    options = {rel: _flatten(c.get("method_options") or {}) for rel, c in configs.items()}
    methods = {}
    for rel, config in configs.items():
        same = [options[r] for r, c in configs.items() if c["method"] == config["method"]]
        differ = sorted(
            k for k in {k for o in same for k in o} if len({o.get(k) for o in same}) > 1
        )
        suffix = ",".join(
            f"{k}={json.loads(options[rel][k]) if k in options[rel] else None}" for k in differ
        )
        methods[rel] = f"{config['method']}[{suffix}]" if suffix else config["method"]
    return settings, methods


def _read_folder(root: Path) -> tuple[dict[str, tuple], list[str]]:
    """``{rel: (config, environment, rows)}`` of the finished runs under ``root``, warnings."""
    paths, warnings = find_runs(root)
    read: dict[str, tuple] = {}
    for path in paths:
        rel = path.with_name(run_name(path)).relative_to(root).as_posix() if path != root else "."
        try:
            records = read_run(path)
        except DamagedRunError:
            raise  # a finished run that cannot be read would leave its seed out unseen
        except RunFormatError as err:
            text = str(err).replace(f"{path}{os.sep}", "").replace(str(path), "")
            message = text.lstrip(": ") or "unreadable"
            warnings.append(f"{rel}: skipped: {message}")
            continue
        except (OSError, ValueError, TypeError, KeyError) as err:
            warnings.append(f"{rel}: skipped: corrupt ({type(err).__name__}: {err})")
            continue
        read[rel] = (records.config, read_environment(path), _run_rows(rel, records))
    return read, warnings


def collect_runs(sources: str | Path | Iterable[str | Path]) -> tuple[pd.DataFrame, list[str]]:
    """Every finished run of ``sources`` as one tidy table, and the warnings.

    ``sources`` is a results directory (every finished run below it), a ``runs.csv`` written by
    the leaderboard (:mod:`.records`), or several of either. Setting and method labels are
    computed over all of them together, as if their runs lay in one folder.

    Raises:
        FileNotFoundError: a source is neither a directory nor a file.
        RunFormatError: a ``runs.csv`` is not a leaderboard's record (the message names the
            file and line).
    """
    paths = [Path(sources)] if isinstance(sources, (str, Path)) else [Path(s) for s in sources]
    read: dict[str, tuple] = {}
    warnings: list[str] = []
    for source in paths:
        if source.is_dir() or is_run_archive(source):
            found, notes = _read_folder(source)
        elif source.is_file():
            found, notes = read_records(source), []
        else:
            raise FileNotFoundError(f"{source}: no such results directory or runs.csv")
        warnings += notes
        for rel, entry in found.items():
            name = rel if rel not in read else f"{source.as_posix()}:{rel}"
            read[name] = entry
    settings, methods = _labels({rel: cfg for rel, (cfg, _, _) in read.items()})
    rows: list[dict] = []
    kept: dict[tuple, str] = {}
    for rel in read:  # sources in the order given, each folder's runs sorted
        config, environment, run_rows = read[rel]
        identity = (
            methods[rel],
            str(config.get("task")),
            options_key(config.get("task_options")),
            settings[rel],
            config["seed"],
        )
        if identity in kept:
            warnings.append(
                f"{rel}: skipped: a duplicate of {kept[identity]} (method {identity[0]}, task "
                f"{identity[1]}, options {identity[2]}, setting {identity[3]}, seed {identity[4]})"
            )
            continue
        kept[identity] = rel
        record = run_record(config, environment)
        for row in run_rows:
            row = dict(row, run=rel, method=methods[rel], setting=settings[rel])
            if row["kind"] == "run":
                row.update(record)
            rows.append(row)
    front = ["run", "kind", "method", "task", "options", "setting", "seed", "budget_fraction"]
    table = pd.DataFrame(rows)
    if table.empty:
        table = pd.DataFrame(columns=front)
    rest = [c for c in table.columns if c not in front]
    return table[front + rest], warnings


def refuse_no_runs(table: pd.DataFrame, warnings: list[str], sources: Iterable[Any]) -> None:
    """``RunFormatError`` when ``table`` (:func:`collect_runs` of ``sources``) holds no finished
    run, naming the sources and the first runs skipped: what ``leaderboard``, ``claims`` and
    ``validate`` say of a folder of something else, an empty one, or runs none of which
    finished."""
    if not table.empty and (table["kind"] == "run").any():
        return
    where = ", ".join(str(s) for s in sources)
    detail = f"; skipped: {'; '.join(warnings[:5])}" if warnings else ""
    raise RunFormatError(f"{where}: holds no finished run{detail}")
