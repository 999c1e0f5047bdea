"""How long will a suite take? Each run's expected wall time, from runs already measured.

A campaign of hundreds of runs is planned before it is launched (``creditbench bench
--dry-run``) and run longest first, so the slowest runs do not start last and leave a core
idle. The figures come from finished runs' records (``wall_seconds`` in the leaderboard's
table): the results folder's own and any ``--timings`` sources (folders or committed
``runs.csv``), read by :func:`creditbench.leaderboard.collect.collect_runs`. Without
``--timings``, a package run from a checkout of the repository plans from the leaderboard
campaign's committed records (:data:`COMMITTED_RECORDS`, as ``creditbench reproduce`` reads
them), whatever the working directory.

A run's estimate is, in order of preference:

1. the median wall time of the measured runs of the same setting and method (its name without
   the seed: ``chain-hard-...-grpo``);
2. the method's median ratio to GRPO's time over the settings where both were measured, times
   GRPO's median in this setting (a method that costs twice GRPO's step on one setting is
   taken to cost twice on another, evaluation included, which makes it slightly high);
3. for a variant (a suite entry that is a registered method with options of its own, such as
   GTPO's ``grpo_s``) never measured itself: its method's estimate, by 1 or 2 (a variant that
   costs more than its method, OPPO's with a teacher, is then under-estimated);
4. none: the run is listed as not measured, and the total counts it apart.

A run that is partly done (killed or stopped, with a checkpoint to resume from) is counted for
what is left of it (:func:`left_of_started`): its estimate times the share of its budget past
its latest checkpoint, as the share its metrics record at that step.

Estimates are wall seconds on the machine and under the load the records were made on.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import re
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

BASELINE = "grpo"  # the unit of the ratios: the method every setting measures first
# The leaderboard campaign's committed records in the checkout this package runs from (an
# installed wheel has none): the measured times a plan falls back on, and the records
# `creditbench reproduce` reads first.
COMMITTED_RECORDS = Path(__file__).resolve().parents[1] / "docs" / "results" / "standard"


def default_timings(suite: str | None = None) -> list[Path]:
    """The timing sources when none are given: the committed records of the same suite
    (``docs/results/<suite>/runs.csv``, whose settings match its runs' names), then the
    standard board's, where each exists."""
    tables = [COMMITTED_RECORDS.parent / suite / "runs.csv"] if suite else []
    tables.append(COMMITTED_RECORDS / "runs.csv")
    return [table for table in dict.fromkeys(tables) if table.is_file()]


_SEED = re.compile(r"-s\d+$")
_LAST_PART = re.compile(r"-([A-Za-z_][\w.]*)=[^=]*$")  # a label's last key=value (5e-05 too)


def setting_method(run_name: str) -> str:
    """A run's name without its seed: ``chain-hard-grpo-s3`` -> ``chain-hard-grpo``."""
    return _SEED.sub("", run_name.rsplit("/", 1)[-1])


def measured_seconds(sources: Iterable[str | Path]) -> dict[str, list[float]]:
    """``{setting-method: [wall seconds of each finished run]}`` over ``sources``."""
    from creditbench.leaderboard.collect import collect_runs

    existing = [s for s in sources if Path(s).exists()]
    if not existing:
        return {}
    table, _ = collect_runs(existing)
    if table.empty or "wall_seconds" not in table:
        return {}
    runs = table[(table["kind"] == "run") & table["wall_seconds"].notna()]
    out: dict[str, list[float]] = {}
    for name, seconds in zip(runs["run"], runs["wall_seconds"], strict=True):
        out.setdefault(setting_method(str(name)), []).append(float(seconds))
    return out


def estimate_seconds(runs: Sequence[Any], measured: dict[str, list[float]]) -> dict[str, float]:
    """``{run name: expected wall seconds}`` for the runs that can be estimated (module doc);
    ``runs`` carry ``name``, ``label`` and ``entry`` (:class:`creditbench.tools.suite.Run`)."""
    median = {key: statistics.median(values) for key, values in measured.items()}
    ratios: dict[str, list[float]] = {}
    for label, entry in dict.fromkeys(
        (run.label, name) for run in runs for name in (run.entry, run.method)
    ):
        own, base = f"{label}-{entry}", f"{label}-{BASELINE}"
        if own in median and base in median and median[base] > 0:
            ratios.setdefault(entry, []).append(median[own] / median[base])
    ratio = {entry: statistics.median(values) for entry, values in ratios.items()}
    out: dict[str, float] = {}
    for run in runs:
        for label in shorter_labels(run):
            base = f"{label}-{BASELINE}"
            for name in dict.fromkeys((run.entry, run.method)):  # the variant's, then its method's
                if f"{label}-{name}" in median:
                    out[run.name] = median[f"{label}-{name}"]
                elif base in median and name in ratio:
                    out[run.name] = median[base] * ratio[name]
                if run.name in out:
                    break
            if run.name in out:
                break
    return out


def resumed_share(run_dir: Path) -> float:
    """The share of a run's budget spent by its latest checkpoint, where a resumed run goes on
    from (0 without one, or where its records do not say)."""
    from creditbench.harness.records.files import RunFormatError, read_metric_lines
    from creditbench.harness.records.rundir import RunDir

    try:
        checkpoint = RunDir(run_dir).latest_checkpoint()
        if checkpoint is None:
            return 0.0
        step = int(checkpoint.name.rsplit("-", 1)[-1])
        records = read_metric_lines(run_dir / "metrics.jsonl")
    except (OSError, ValueError, RunFormatError):
        return 0.0
    spent = [
        float(r["budget_fraction"])
        for _, r in records
        if r.get("step") == step
        and "eval" not in r
        and isinstance(r.get("budget_fraction"), int | float)
        and not isinstance(r.get("budget_fraction"), bool)
    ]
    return min(max(spent[-1], 0.0), 1.0) if spent and math.isfinite(spent[-1]) else 0.0


def left_of_started(
    estimates: dict[str, float], runs: Iterable[Any], results: Path
) -> tuple[dict[str, float], int]:
    """``(estimates with each partly done run's cut to what is left, how many were cut)``:
    a run folder in ``results`` with a checkpoint resumes from it (:func:`resumed_share`)."""
    out, started = dict(estimates), 0
    for run in runs:
        share = resumed_share(results / run.name) if run.name in out else 0.0
        if share > 0:
            out[run.name] *= 1.0 - share
            started += 1
    return out, started


def shorter_labels(run: Any) -> list[str]:
    """The run's label, then without its grid point (the trailing ``key=value`` parts that are
    not task options): a grid point never measured (``chain-hard-steps=10-lr=0.00015``) is
    estimated by its setting's measured runs (``chain-hard-steps=10``), never by another
    setting's."""
    options: set[str] = set()
    for override in getattr(run, "overrides", []):
        key, _, value = override.partition("=")
        if key == "task_options":
            options = set(json.loads(value))
    out = [run.label]
    while (match := _LAST_PART.search(out[-1])) and match.group(1) not in options:
        out.append(out[-1][: match.start()])
    return out


def minutes_text(seconds: float | None) -> str:
    """A run's expected wall time as the dry runs list it: ``  12.5 min`` or ``not measured``."""
    return f"{seconds / 60:6.1f} min" if seconds is not None else "  not measured"


def longest_first(runs: list[Any], estimates: dict[str, float]) -> list[Any]:
    """Runs without an estimate first (their time is news), then by expected time, longest
    first; ties keep the suite's order."""
    return sorted(runs, key=lambda run: -estimates.get(run.name, math.inf))


def expected_wall(pending: list[Any], estimates: dict[str, float], workers: int) -> float:
    """Seconds until the last of ``pending`` ends when ``workers`` take them in this order, each
    worker the next run as it frees: two runs on two workers take the longer one's time, not
    half their sum. A run not measured counts at the median measured run's time (ours: the
    quick suite's runs differ by under 2x); 0 when none is measured."""
    known = [estimates[r.name] for r in pending if r.name in estimates]
    if not known:
        return 0.0
    stand_in = statistics.median(known)
    free_at = [0.0] * max(1, min(workers, len(pending)))
    for run in pending:
        heapq.heappush(free_at, heapq.heappop(free_at) + estimates.get(run.name, stand_in))
    return max(free_at)


def duration_text(seconds: float) -> str:
    """``4.1 min`` under an hour and a half, ``2.3 hours`` beyond."""
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} hours"


def describe_plan(pending: list[Any], estimates: dict[str, float], workers: int) -> str:
    """One line: the pending runs' expected hours of one core and the wall time on ``workers``
    workers (:func:`expected_wall`), and how many runs have no measured time."""
    known = [estimates[r.name] for r in pending if r.name in estimates]
    unknown = len(pending) - len(known)
    if not pending:
        return "expected: nothing to run"
    if not known:  # a sum of nothing would read as a plan that costs nothing
        return (
            f"expected: not known; none of the {unknown} runs is measured (no finished run of "
            "their setting and method in the measured times)"
        )
    total = sum(known)
    hours = total / 3600
    line = (
        f"expected: {hours:.1f}" if hours >= 1 else f"expected: {hours:.2f}"
    ) + f" core-hours for {len(known)} measured runs"
    wall = expected_wall(pending, estimates, workers)
    line += f", about {duration_text(wall)} on {workers} workers"
    if unknown:
        line += f"; {unknown} runs not measured (no finished run of their setting and method)"
        line += ", counted at the median measured run's time"
    return line


# Linux's scheduler gives a process about 1.25 times the CPU of one a nice level below it
# (kernel/sched/core.c, sched_prio_to_weight: "every nice level ... is about 10% CPU"), so a
# niced campaign yields most of a core to a run at nice 0.
NICE_STEP = 1.25


def busy_cores(sample_seconds: float = 2.0) -> tuple[float, str] | None:
    """How many cores other processes keep busy now, weighed against this process's priority,
    and how that was read: the CPU time each process took over ``sample_seconds`` (psutil),
    a niced one's weighed down by :data:`NICE_STEP` a level; where psutil is missing, the
    1-minute load average, which counts a niced process as a whole one; None where neither is
    available."""
    import time

    try:
        import psutil
    except ImportError:
        try:
            return os.getloadavg()[0], "by the load average, niced processes counted whole"
        except (AttributeError, OSError):
            return None
    mine, ours = os.getpid(), os.nice(0)

    def cpu_seconds() -> dict[int, tuple[int, float]]:
        taken = {}
        for process in psutil.process_iter(["nice", "cpu_times"]):
            nice, times = process.info["nice"], process.info["cpu_times"]
            if process.pid != mine and nice is not None and times is not None:
                taken[process.pid] = (nice, times.user + times.system)
        return taken

    before, start = cpu_seconds(), time.monotonic()
    time.sleep(sample_seconds)
    after, elapsed = cpu_seconds(), time.monotonic() - start
    return (
        weighed_busy(before, after, elapsed, ours),
        f"kept busy by other processes over {sample_seconds:.0f} s, niced ones weighed down",
    )


def weighed_busy(
    before: dict[int, tuple[int, float]],
    after: dict[int, tuple[int, float]],
    elapsed: float,
    ours: int,
) -> float:
    """The cores' worth of CPU the processes took between two readings ``{pid: (nice, CPU
    seconds)}`` ``elapsed`` seconds apart, each weighed by what it would take from a run at nice
    ``ours``: all of it at our priority or above, 1 / :data:`NICE_STEP` less a level below."""
    busy = sum(
        max(0.0, seconds - before[pid][1]) * min(1.0, NICE_STEP ** (ours - nice))
        for pid, (nice, seconds) in after.items()
        if pid in before
    )
    return busy / max(elapsed, 1e-9)


def load_factor(busy: float, workers: int, cores: int) -> float:
    """How many times slower than its record a run goes now: the records were made with a core
    a run (ours: the campaigns run one single-threaded worker per core), and now ``workers``
    runs share ``cores`` with ``busy`` cores' worth of other work (:func:`busy_cores`)."""
    return max(1.0, (busy + workers) / max(cores, 1))


def describe_load(pending: list[Any], estimates: dict[str, float], workers: int) -> str:
    """One line scaling the plan's wall time by this machine's load now (:func:`load_factor`),
    or ``""`` on a quiet machine or where the load is not known."""
    read = busy_cores()
    if read is None or not pending:
        return ""
    busy, how = read
    cores = os.cpu_count() or 1
    running = min(workers, len(pending))
    factor = load_factor(busy, running, cores)
    if factor <= 1.0:
        return ""
    wall = expected_wall(pending, estimates, workers) * factor
    return (
        f"at this machine's load now ({busy:.1f} of {cores} cores {how}; plus "
        f"{running} workers): about {duration_text(wall)}, {factor:.1f} x the records' times, "
        "which assume a core a run"
    )
