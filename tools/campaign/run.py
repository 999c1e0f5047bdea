"""``creditbench campaign PLAN``: run a plan's phases, each with its pinned commits' own CLI,
and ``--dry-run``: what is left of each phase and its expected core-hours.

A run, in order (each step can be killed and the command run again; it continues):

1. a clean worktree of every pinned commit in the cache (:mod:`.worktrees`);
2. the committed records unpacked into the work folder (``WORK/results``, and the claims' own
   rows into ``WORK/claims-rows``), so the benches skip what the repository holds;
3. the package's teachers into the cache, where pinned commits older than them look;
4. each phase: for each pinned commit in the plan's order, its ``creditbench bench --suite
   SUITE --results WORK/results --seeds SEEDS --only '<setting>-<method>-s*' ...`` with the
   commit's methods the phase runs (for ``rule: easy-seeds``, the rows the rule chooses once
   their easy seeds 0-4 are in; until then the phase waits), or for ``reproduce: CARD`` the card
   method's commit's ``creditbench reproduce CARD --scale cpu --results WORK/claims-CARD``.
   A bench skips finished runs and resumes unfinished ones from their last checkpoint.

A phase whose runs failed (a bench's exit 1) does not stop the campaign; the logs are in
``WORK/results/logs``. SIGTERM or Ctrl-C stops the bench that is running (its workers with it)
and the campaign, exit 130; what finished is kept.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from creditbench.tools.campaign.plan import Phase, Plan, seed_text
from creditbench.tools.campaign.records import (
    committed_runs,
    finished_runs,
    finished_table,
    restore,
    seed_teachers,
)
from creditbench.tools.campaign.worktrees import checkout, pinned_cli

STOP_SECONDS = 120  # how long a stopped bench may take to stop its workers before it is killed


def default_work(plan: Plan) -> Path:
    """A plan's work folder when ``--work`` is not given: ``<cache>/campaigns/<plan name>``."""
    from creditbench.harness.models.policy_cache import default_cache_dir

    return default_cache_dir() / "campaigns" / plan.path.stem


@dataclass
class Step:
    """One command of a phase: a pinned commit, the methods it runs, and the runs they cover."""

    commit: str
    methods: tuple[str, ...]
    runs: list


def phase_steps(plan: Plan, phase: Phase, sources: list[Path]) -> tuple[list[Step], str]:
    """The steps of ``phase`` in the pins' order, and why it waits ("" when it does not; a
    waiting phase runs nothing): a rule phase waits while the records in ``sources`` cannot
    tell the rows it chooses, a reproduce phase on another suite than the standard one while
    they hold no run of a row's method in a setting (:func:`own_rows`)."""
    if phase.reproduce:
        runs, waits = own_rows(plan, phase, sources)
        return [Step(plan.commit_of(phase.reproduce), (phase.reproduce,), runs)], waits
    methods = phase.methods
    if phase.rule:
        from creditbench.tools.campaign.easy_seeds import chosen

        try:
            picked = chosen(finished_table(sources), list(methods))
        except ValueError as err:
            return [], str(err)
        methods = tuple(m for m in methods if m in picked)
    steps = []
    for commit, pinned in plan.pins.items():
        mine = tuple(m for m in pinned if m in methods)
        if mine:
            steps.append(Step(commit, mine, plan.runs_of(phase, mine)))
    return steps, ""


def own_rows(plan: Plan, phase: Phase, sources: list[Path]) -> tuple[list, str]:
    """The runs a ``reproduce`` phase trains (its card's rows the board does not run, on the
    plan's suite), and why it waits ("" when it does not): on a suite other than the standard
    one a row runs at its method's seeds in ``sources``, so the phase waits while they hold no
    run of a row's method in one of the suite's settings (reproduce would train the board's
    runs itself, at every seed)."""
    from creditbench.reference.cards import load_cards
    from creditbench.tools.reproduce.claims import (
        claim_runs,
        is_standard,
        methods_run_name,
        on_the_board,
        planned_runs,
    )

    card = load_cards()[phase.reproduce]
    names = {n for src in sources for n in (*finished_runs(src), *committed_runs(src))}
    runs = planned_runs(claim_runs(card, suite=plan.suite), plan.suite, names)
    own = [run for run in runs if not on_the_board(card, run.entry)]
    if is_standard(plan.suite):
        return own, ""
    held = {(r.label, r.method) for r in runs if methods_run_name(r) in names}
    missing = sorted({(r.label, r.method) for r in runs} - held)
    if missing:
        label, method = missing[0]
        return own, f"the board's runs of {method} in {label} are not in its records yet"
    return own, ""


def step_argv(plan: Plan, phase: Phase, step: Step, work: Path, workers: int, threads: int):
    """The pinned command of one step (module doc), without the CLI's own argv."""
    if phase.reproduce:
        argv = ["reproduce", phase.reproduce, "--scale", "cpu"]
        argv += ["--results", str(work / f"claims-{phase.reproduce}")]
        argv += ["--records", str(work / "results")]  # a wiped machine skips the records' runs
        if (work / "claims-rows").is_dir():
            argv += ["--records", str(work / "claims-rows")]
        from creditbench.tools.reproduce.claims import is_standard

        if not is_standard(plan.suite):  # a pinned commit before --suite runs the standard alone
            argv += ["--suite", plan.suite]
        return [*argv, "--workers", str(workers)]
    argv = ["bench", "--suite", plan.suite, "--results", str(work / "results")]
    argv += ["--workers", str(workers), "--threads", str(threads)]
    argv += ["--seeds", seed_text(phase.seeds)]
    for label in plan.labels[phase.setting]:
        for method in step.methods:
            argv += ["--only", f"{label}-{method}-s*"]
    return argv


def run_plan(plan: Plan, work: Path, workers: int, threads: int) -> int:
    """Run what is left of the plan (module doc); the exit code."""
    from creditbench.harness.records.rundir import RunDir

    with RunDir(work).lock(writing="this campaign's work folder (a campaign)"):
        clis = {}
        for commit, methods in plan.pins.items():
            clis[commit] = pinned_cli(checkout(commit, repo=plan.repo))
            print(f"checkout {commit[:7]} ({', '.join(methods)}): clean")
        restored = restore(plan.board, work / "results")
        if plan.claims_rows is not None:
            restored += restore(plan.claims_rows, work / "claims-rows")
        print(f"restored {restored} committed runs into {work}")
        seed_teachers()
        failed = []
        for phase in plan.phases:
            steps, waits = phase_steps(plan, phase, [work / "results"])
            if waits:
                print(f"=== {_now()} {phase.describe()} waits: {waits}", flush=True)
                continue
            for step in steps:
                print(
                    f"=== {_now()} {phase.describe()}: {step.commit[:7]} {', '.join(step.methods)}"
                )
                argv = step_argv(plan, phase, step, work, workers, threads)
                code = run_pinned([*clis[step.commit], *argv], work)
                if code == 1:  # some runs failed; the others went on, and so does the campaign
                    failed.append(f"{phase.describe()} at {step.commit[:7]}")
                elif code != 0:
                    print(f"=== {_now()} {argv[0]} exited {code}; the campaign stops here")
                    return code
    print(
        f"=== {_now()} campaign done" + (f"; runs failed in {'; '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


def run_pinned(argv: list[str], work: Path) -> int:
    """Run a pinned command in the work folder, its output the campaign's; stopped with the
    campaign (a KeyboardInterrupt here: SIGTERM or Ctrl-C), as its own Ctrl-C would stop it."""
    sys.stdout.flush()  # the campaign's lines before the command's, in a log file too
    process = subprocess.Popen(argv, cwd=work)
    try:
        return process.wait()
    except KeyboardInterrupt:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        raise


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def dry_run(plan: Plan, work: Path, workers: int) -> int:
    """Print each phase's runs, what is left of them and the expected core-hours, from the
    measured times of the work folder's and the records' runs (``creditbench bench``'s
    estimates, :mod:`creditbench.tools.bench_plan`); writes nothing."""
    from creditbench.tools.bench_plan import (
        default_timings,
        describe_plan,
        estimate_seconds,
        left_of_started,
        measured_seconds,
    )

    results = work / "results"
    done = {*finished_runs(results), *committed_runs(plan.board)}
    done |= set(committed_runs(plan.claims_rows))
    done |= {
        n for p in plan.phases if p.reproduce for n in finished_runs(work / f"claims-{p.reproduce}")
    }
    timings = _timing_sources(plan, results) + [t for t in default_timings() if t.exists()]
    timings = list(dict.fromkeys(p.resolve() for p in timings))
    measured = measured_seconds(timings)
    print(f"campaign {plan.path.stem}" + (f": {plan.description}" if plan.description else ""))
    print(f"suite {Path(plan.suite).stem}, {len(plan.pins)} pinned commits, work folder {work}")
    left_all: list = []
    estimates: dict[str, float] = {}
    counted: set[str] = set()
    maybe = resumed = 0
    for phase in plan.phases:
        steps, waits = phase_steps(plan, phase, [results, plan.board])
        if waits:  # a reproduce phase knows its runs; a rule phase, those it chooses among
            planned = [r for step in steps for r in step.runs] or plan.runs_of(phase)
            runs = [r for r in planned if r.name not in done | counted]
            maybe += len(runs)
            print(f"{phase.describe()}: waits ({waits}); up to {len(runs)} runs")
            continue
        runs = [run for step in steps for run in step.runs]
        estimates |= estimate_seconds(runs, measured)
        left = [run for run in runs if run.name not in done | counted]
        estimates, started = left_of_started(estimates, left, results)  # resumed: what is left
        resumed += started
        counted |= {run.name for run in runs}
        left_all += left
        print(f"{phase.describe()}: {len(runs)} runs, {len(left)} left, {_hours(left, estimates)}")
        _print_steps(steps, left, estimates)
    part = f" ({resumed} of them part-done, counted for what is left)" if resumed else ""
    print(f"total: {len(left_all)} runs left{part}; {describe_plan(left_all, estimates, workers)}")
    if maybe:
        print(f"and up to {maybe} runs more that the easy-seeds rule will choose among")
    print(f"measured times: {', '.join(map(str, timings)) or 'none'}")
    return 0


def _timing_sources(plan: Plan, results: Path) -> list[Path]:
    """The work folder's runs and the records' (their ``runs.csv`` where it is rendered)."""
    board = plan.board / "runs.csv" if (plan.board / "runs.csv").is_file() else plan.board
    return [p for p in (results, board) if p.exists()]


def _hours(runs: list, estimates: dict[str, float]) -> str:
    seconds = sum(estimates.get(run.name, 0.0) for run in runs)
    unknown = sum(run.name not in estimates for run in runs)
    return f"{seconds / 3600:.1f} core-hours" + (f" ({unknown} not measured)" if unknown else "")


def _print_steps(steps: list[Step], left: list, estimates: dict[str, float]) -> None:
    from creditbench.tools.bench_plan import longest_first, minutes_text

    names = {run.name for run in left}
    for step in steps:
        mine = [run for run in step.runs if run.name in names]
        if mine:
            print(f"  {step.commit[:7]} {', '.join(step.methods)}: {len(mine)} left")
            for run in longest_first(mine, estimates):
                print(f"    {minutes_text(estimates.get(run.name))}  {run.name}")
