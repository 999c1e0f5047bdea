"""One finished run's records, read and checked: what :mod:`.collect` puts in the runs table.

A run is read only when it is finished (``summary.json`` says ``"status": "finished"``) and its
records hold together: its evaluations at budget fractions reach the budget's end, the last of
them is the final one ``summary.json`` records, and every number of an evaluation lies in the
range a run can write. A run that is not finished, or whose records end short, is a
``RunFormatError`` (the table skips it with a warning); a record the harness never writes is a
``DamagedRunError`` naming the file and line (the table refuses it).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, NamedTuple

from creditbench.harness.records.files import (
    DamagedRunError,
    RunFormatError,
    read_finished_metrics,
    read_record_bytes,
    read_run_config,
    spent_fraction,
)

from .records import ACCURACIES, MAX_SPENT, out_of_range


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_environment(run: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_record_bytes(run / "environment.json"))
    except DamagedRunError:
        raise
    except (OSError, ValueError):
        return {}  # a run without its environment has no provenance, and is still a result
    return data if isinstance(data, dict) else {}


def run_seconds(summary: dict, records: list[dict]) -> dict[str, float]:
    """The run's wall time (``summary.json``) and its evaluations' share of it (the eval
    records' own times), what ``bench --dry-run`` plans a campaign from; and the median time of
    its training steps (``step_seconds``, evaluations left out), the board's cost of a step:
    a run paused or resumed part-way (a machine shared with other jobs) changes its wall time
    but only the few steps the pause fell in; and the pace of its evaluations
    (``eval_token_seconds``), the same work in every run of a setting, which the board divides
    the step by to take out the load the run met. Each where recorded."""
    seconds = {}
    wall: Any = (summary.get("time") or {}).get("wall_seconds")
    if finite(wall):
        seconds["wall_seconds"] = float(wall)
    evals: list[Any] = [
        (r.get("time") or {}).get("eval") for r in records if isinstance(r.get("eval"), dict)
    ]
    if evals and all(finite(t) for t in evals):
        seconds["eval_seconds"] = float(sum(evals))
        # the machine's pace while the run ran: each evaluation's seconds over its samples' mean
        # length (the same problems and samples at every point of every run of a setting), the
        # median over the run's evaluations, so one paused evaluation moves it little
        lengths: list[Any] = [
            r["eval"].get("mean_length") for r in records if isinstance(r.get("eval"), dict)
        ]
        if all(finite(n) and float(n) > 0 for n in lengths):
            paces = [float(t) / float(n) for t, n in zip(evals, lengths, strict=True)]
            seconds["eval_token_seconds"] = float(statistics.median(paces))
    recorded: list[Any] = [(r.get("time") or {}).get("step") for r in records if "eval" not in r]
    steps = [float(t) for t in recorded if finite(t)]
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


def read_run(run: Path) -> RunRecords:
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
        elif finite(entry.get("fraction")):
            by_fraction[min(float(entry["fraction"]), 1.0)] = entry  # a repeat: the later one
        elif is_count(entry.get("responses")):
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
    return RunRecords(config, evals, counted, steps, run_seconds(summary, records))


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


def is_count(value: Any) -> bool:
    """Whether ``value`` is a count of trained responses an evaluation was placed at."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
