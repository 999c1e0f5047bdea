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

Which runs a suite promised, beside those that finished, is :mod:`.suite_manifests`.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from creditbench.harness.records.files import (
    DamagedRunError,
    RunFormatError,
    budget_auc,
    find_runs,
    is_run_archive,
    read_finished_metrics,
    read_record_bytes,
    read_run_config,
    run_name,
    spent_fraction,
)

from .records import (
    ACCURACIES,
    MAX_SPENT,
    NOT_A_SETTING,
    SAMPLES_EVAL,
    out_of_range,
    read_records,
    run_record,
)

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


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _environment(run: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_record_bytes(run / "environment.json"))
    except DamagedRunError:
        raise
    except (OSError, ValueError):
        return {}  # a run without its environment has no provenance, and is still a result
    return data if isinstance(data, dict) else {}


def _run_seconds(summary: dict, records: list[dict]) -> dict[str, float]:
    """The run's wall time (``summary.json``) and its evaluations' share of it (the eval
    records' own times), what ``bench --dry-run`` plans a campaign from; and the median time of
    its training steps (``step_seconds``, evaluations left out), the board's cost of a step:
    a run paused or resumed part-way (a machine shared with other jobs) changes its wall time
    but only the few steps the pause fell in; and the pace of its evaluations
    (``eval_token_seconds``), the same work in every run of a setting, which the board divides
    the step by to take out the load the run met. Each where recorded."""
    seconds = {}
    wall: Any = (summary.get("time") or {}).get("wall_seconds")
    if _finite(wall):
        seconds["wall_seconds"] = float(wall)
    evals: list[Any] = [
        (r.get("time") or {}).get("eval") for r in records if isinstance(r.get("eval"), dict)
    ]
    if evals and all(_finite(t) for t in evals):
        seconds["eval_seconds"] = float(sum(evals))
        # the machine's pace while the run ran: each evaluation's seconds over its samples' mean
        # length (the same problems and samples at every point of every run of a setting), the
        # median over the run's evaluations, so one paused evaluation moves it little
        lengths: list[Any] = [
            r["eval"].get("mean_length") for r in records if isinstance(r.get("eval"), dict)
        ]
        if all(_finite(n) and float(n) > 0 for n in lengths):
            paces = [float(t) / float(n) for t, n in zip(evals, lengths, strict=True)]
            seconds["eval_token_seconds"] = float(statistics.median(paces))
    recorded: list[Any] = [(r.get("time") or {}).get("step") for r in records if "eval" not in r]
    steps = [float(t) for t in recorded if _finite(t)]
    if steps:
        seconds["step_seconds"] = float(statistics.median(steps))
    return seconds


class RunRecords(NamedTuple):
    """What a finished run's records give the table."""

    config: dict[str, Any]
    evals: list[dict]  # the evaluations at budget fractions, in order
    sample_evals: list[dict]  # the evaluations at counts of trained responses, in order
    steps: list[dict]  # the step records
    seconds: dict[str, float]


def _read_run(run: Path) -> RunRecords:
    """A finished run's :class:`RunRecords`; RunFormatError says why not."""
    config = read_run_config(run / "config.yaml")
    try:
        summary = json.loads(read_record_bytes(run / "summary.json"))
    except FileNotFoundError:
        raise RunFormatError("unfinished (no summary.json)") from None
    except (OSError, ValueError) as err:
        raise RunFormatError(f"corrupt summary.json ({err})") from None
    if not isinstance(summary, dict):
        raise RunFormatError("corrupt summary.json (not a JSON object)")
    status = summary.get("status")
    if status != "finished":
        detail = f": {summary['error']}" if summary.get("error") else ""
        raise RunFormatError(f"not finished (status {status!r}{detail})")
    for key in ("method", "task", "seed"):
        if key in summary and summary[key] != config.get(key):
            raise RunFormatError(
                f"corrupt: summary.json {key}={summary[key]!r} but config.yaml "
                f"says {config.get(key)!r}"
            )
    if not isinstance(config.get("method"), str) or not isinstance(config.get("seed"), int):
        raise RunFormatError("corrupt config.yaml (no method name or integer seed)")
    if (problem := out_of_range("seed", config["seed"])) is not None:
        raise DamagedRunError(f"{run / 'config.yaml'}: {problem}; repair or remove the run")
    try:
        numbered = read_finished_metrics(run / "metrics.jsonl")
        for number, record in numbered:
            if isinstance(record.get("eval"), dict):
                _check_eval_numbers(record["eval"], f"{run / 'metrics.jsonl'}:{number}")
    except DamagedRunError:
        raise
    except RunFormatError as err:  # the harness never writes such a line: damage, or an edit
        raise DamagedRunError(f"{err}; repair or remove the run") from None
    records = [record for _, record in numbered]
    by_fraction: dict[float, dict] = {}
    by_count: dict[int, dict] = {}
    steps = []
    for record in records:
        entry = record.get("eval")
        if not isinstance(entry, dict):
            steps.append(record)
        elif _finite(entry.get("fraction")):
            by_fraction[min(float(entry["fraction"]), 1.0)] = entry  # a repeat: the later one
        elif _count(entry.get("responses")):
            by_count[int(entry["responses"])] = entry
        else:
            raise RunFormatError(
                f"corrupt eval record at step {record.get('step')}: neither a fraction of the "
                "budget nor a count of trained responses"
            )
    if not by_fraction:
        raise RunFormatError("finished but metrics.jsonl holds no evaluation")
    evals = [dict(by_fraction[f], fraction=f) for f in sorted(by_fraction)]
    _check_final_evaluation(run, summary, evals[-1])
    if spent_fraction(evals[-1]) < 1.0:
        raise RunFormatError(
            f"its evaluations end at {spent_fraction(evals[-1]):.3g} of the budget, short of "
            "its end: no AUC over the whole budget"
        )
    counted = [by_count[n] for n in sorted(by_count)]
    return RunRecords(config, evals, counted, steps, _run_seconds(summary, records))


# an evaluation's numbers and their ranges (records.RANGES): in metrics.jsonl "fraction" is the
# scheduled share of the budget and "budget_fraction" the share spent
EVAL_RANGES = {
    **{metric: (0.0, 1.0) for metric in ACCURACIES},
    "fraction": (0.0, 1.0),
    "budget_fraction": (0.0, MAX_SPENT),
    "mean_length": (0.0, math.inf),
}


def _check_eval_numbers(entry: dict[str, Any], where: str) -> None:
    """``RunFormatError`` naming ``where`` (the file and line) for a number of an evaluation
    that no run records: an accuracy of NaN, -5 or 1e308, a budget share of 1e308."""
    for key in EVAL_RANGES:
        if entry.get(key) is not None:
            problem = out_of_range(key, entry[key], EVAL_RANGES)
            if problem is not None:
                raise RunFormatError(f"{where}: {problem}")


def _check_final_evaluation(run: Path, summary: dict[str, Any], last: dict[str, Any]) -> None:
    """``DamagedRunError`` when the last evaluation of ``metrics.jsonl`` is not the one
    ``summary.json`` records as the run's final one: the file lost its last lines (a copy cut
    at a line's end), and reading it would put an earlier accuracy in the run's place."""
    final = summary.get("final_eval")
    if not isinstance(final, dict):
        return  # a summary written without it
    if final.get("step") != last.get("step") or final.get("fraction") != last.get("fraction"):
        raise DamagedRunError(
            f"{run / 'metrics.jsonl'}: ends before the final evaluation summary.json records "
            f"(step {final.get('step')}, fraction {final.get('fraction')}): its last lines are "
            "lost; repair or remove the run"
        )


def _count(value: Any) -> bool:
    """Whether ``value`` is a count of trained responses an evaluation was placed at."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def trained_responses(steps: list[dict]):
    """``step -> responses trained on in steps 1..step`` from the step records' ``responses``."""
    counts = sorted(
        (int(r["step"]), float(r["responses"]))
        for r in steps
        if isinstance(r.get("step"), int) and _finite(r.get("responses"))
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
        if all(_finite(e.get("sampled_accuracy")) for e in evals)
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
        row.update({k: entry[k] for k in EVAL_METRICS if _finite(entry.get(k))})
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
        row.update({k: entry[k] for k in EVAL_METRICS if _finite(entry.get(k))})
        rows.append(row)
    run_row: dict[str, Any] = {**base, "kind": "run", "accuracy_metric": metric}
    for name in ("sampled_accuracy", "greedy_accuracy"):
        if all(_finite(e.get(name)) for e in evals):
            run_row[f"final_{name}"] = float(evals[-1][name])
            run_row[f"auc_{name}"] = budget_auc(evals, name)
    run_row["final_accuracy"] = run_row.get(f"final_{metric}", math.nan)
    first = evals[0]
    run_row["start_accuracy"] = (
        float(first[metric])
        if first["fraction"] == 0.0 and _finite(first.get(metric))
        else math.nan
    )
    run_row["auc"] = run_row.get(f"auc_{metric}", math.nan)
    run_row["steps"] = max((r["step"] for r in steps if isinstance(r.get("step"), int)), default=0)
    run_row.update(records.seconds)
    flops = [float(r["flops"]) for r in steps if _finite(r.get("flops"))]
    if flops:
        run_row["flops_total"] = max(flops)  # the meter's count, cumulative over the run
    for key in RUN_TOTALS:
        counts = [float(r[key]) for r in steps if _finite(r.get(key))]
        if counts:
            run_row[key] = max(counts)
    values: dict[str, list[float]] = {}
    for record in steps:
        for key, value in record.items():
            if key not in NOT_A_DIAGNOSTIC and key not in RUN_TOTALS and _finite(value):
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
            records = _read_run(path)
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
        read[rel] = (records.config, _environment(path), _run_rows(rel, records))
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
