"""``creditbench bench`` (a suite of methods x seeds x tasks in parallel workers) and
``creditbench perf`` (where a step's time goes, against a plain loop) and ``creditbench
gradients`` (each method's gradient at a fixed policy: norm, consistency, agreement) and
``creditbench values`` (the task's own state values against Monte Carlo).

creditbench bench --suite quick --workers 2
creditbench perf
creditbench gradients --methods grpo oracle --batches 12
"""

from __future__ import annotations

import argparse
from pathlib import Path

from creditbench.harness.cli.common import (
    add_set_option,
    positive_int,
    quiet_transformers,
    set_threads,
    usage_error,
)


def _cmd_bench(args: argparse.Namespace) -> int:
    from creditbench.harness.bench import SuiteError, parse_seeds, run_suite

    quiet_transformers()
    try:
        seeds = parse_seeds(args.seeds) if args.seeds is not None else None
        return run_suite(
            args.suite,
            seeds=seeds,
            timings=args.timings,
            workers=args.workers,
            results=args.results,
            dry_run=args.dry_run,
            overrides=args.overrides,
            only=args.only,
            threads=args.threads,
        )
    except SuiteError as err:
        return usage_error("bench", str(err))


def _cmd_perf(args: argparse.Namespace) -> int:
    from creditbench.harness.config import ConfigError
    from creditbench.harness.tools.perf import run_perf
    from creditbench.methods.registry import list_methods

    if args.repeats < 1:
        return usage_error("perf", f"--repeats: must be >= 1 (got {args.repeats})")
    unknown = sorted(set(args.methods or ()) - set(list_methods()))
    if unknown:
        known = ", ".join(list_methods())
        return usage_error("perf", f"--methods: unknown method {unknown[0]!r}; known: {known}")
    set_threads(args.threads)
    quiet_transformers()
    try:
        return run_perf(
            args.config,
            args.overrides,
            repeats=args.repeats,
            methods=args.methods,
            compare_trl=not args.no_trl,
        )
    except ConfigError as err:
        return usage_error("perf", str(err))


def _cmd_gradients(args: argparse.Namespace) -> int:
    from creditbench.harness.config import ConfigError
    from creditbench.harness.tools.gradients import run_gradients
    from creditbench.methods.registry import list_methods

    if args.batches < 2:
        return usage_error("gradients", f"--batches: must be >= 2 (got {args.batches})")
    known = list_methods()
    for flag, names in (("--methods", args.methods), ("--reference", [args.reference])):
        unknown = [name for name in names if name not in known]
        if unknown:
            listed = ", ".join(known)
            message = f"{flag}: unknown method {unknown[0]!r}; known: {listed}"
            return usage_error("gradients", message)
    methods = list(dict.fromkeys([*args.methods, args.reference]))
    set_threads(args.threads)
    quiet_transformers()
    try:
        return run_gradients(args.config, args.overrides, methods, args.batches, args.reference)
    except ConfigError as err:
        return usage_error("gradients", str(err))


def _cmd_values(args: argparse.Namespace) -> int:
    from creditbench.harness.config import ConfigError
    from creditbench.harness.tools.value_check import run_value_check

    for flag, value, least in (("--batches", args.batches, 1), ("--states", args.states, 1),
                               ("--samples", args.samples, 2)):  # fmt: skip
        if value < least:
            return usage_error("values", f"{flag}: must be >= {least} (got {value})")
    if args.out is not None:
        from creditbench.harness.records.rundir import RunDirError, check_creatable

        if Path(args.out).is_dir():
            return usage_error("values", f"--out: {args.out} is a folder; name a CSV file")
        try:  # before the continuations are sampled, not after
            check_creatable(Path(args.out).parent, "--out")
        except RunDirError as err:
            return usage_error("values", str(err))
    set_threads(args.threads)
    quiet_transformers()
    try:
        return run_value_check(
            args.config,
            args.overrides,
            args.batches,
            args.states,
            args.samples,
            args.out,
            args.checkpoint,
            args.mc_from,
        )
    except (ConfigError, ValueError) as err:
        return usage_error("values", str(err))


def add_bench_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run a benchmark suite (methods x seeds x tasks)")
    p.add_argument("--suite", required=True, help="quick, standard, or a suite YAML file")
    p.add_argument(
        "--workers", type=positive_int, help="parallel runs (default: sized to the machine)"
    )
    p.add_argument("--results", help="results folder (default: runs/bench-SUITE)")
    p.add_argument("--dry-run", action="store_true", help="list the runs and exit")
    p.add_argument(
        "--timings",
        action="append",
        default=[],
        metavar="SOURCE",
        help="finished runs (a folder or a runs.csv, repeatable) whose wall times plan the "
        "suite, beside the results folder's own: the dry run's expected times, longest first",
    )
    p.add_argument(
        "--seeds",
        help="run these seeds instead of the suite's, e.g. 10-19 (a confirmatory set) or 0,2,5-7",
    )
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="GLOB",
        help="run only the runs whose names match (repeatable), e.g. 'chain-steps=8-*-s0'",
    )
    p.add_argument(
        "--threads", type=positive_int, help="torch threads per run (default: cores / workers)"
    )
    add_set_option(p, "override a config field of every run (repeatable)")
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser(
        "perf", help="time a step by phase: fast and reference paths, a plain loop, TRL"
    )
    p.add_argument("--config", help="a YAML run config (default: the defaults)")
    add_set_option(p)
    p.add_argument("--repeats", type=positive_int, default=3, help="steps per median (default 3)")
    p.add_argument(
        "--methods", nargs="*", help="methods to time one step of (default: all; none: skip)"
    )
    p.add_argument("--no-trl", action="store_true", help="skip the TRL GRPOTrainer step")
    p.add_argument("--threads", type=positive_int)
    p.set_defaults(func=_cmd_perf)

    p = sub.add_parser(
        "gradients",
        help="each method's policy gradient at the starting policy: norm, batch-to-batch "
        "consistency, agreement with the reference's mean gradient",
    )
    p.add_argument("--config", help="a YAML run config (default: the defaults)")
    add_set_option(p)
    p.add_argument("--methods", nargs="+", default=["grpo"], help="methods (default: grpo)")
    p.add_argument(
        "--reference", default="oracle", help="whose mean gradient to agree with (default oracle)"
    )
    p.add_argument("--batches", type=positive_int, default=12, help="batches (default 12)")
    p.add_argument("--threads", type=positive_int)
    p.set_defaults(func=_cmd_gradients)

    p = sub.add_parser(
        "values",
        help="the task's own state values against Monte Carlo, at the starting policy or a "
        "checkpoint's",
    )
    p.add_argument("--config", help="a YAML run config (default: the defaults)")
    add_set_option(p)
    p.add_argument("--batches", type=positive_int, default=2, help="batches (default 2)")
    p.add_argument(
        "--states", type=positive_int, default=120, help="states per batch (default 120)"
    )
    p.add_argument("--samples", type=positive_int, default=256, help="continuations a state (256)")
    p.add_argument("--out", help="write one CSV row per state here")
    p.add_argument(
        "--checkpoint",
        help="a run's checkpoints/step-N folder: value the states of its policy (the run's "
        "config.yaml is the default config)",
    )
    p.add_argument(
        "--mc-from",
        help="an earlier --out CSV of the same states: take its Monte-Carlo values instead of "
        "sampling them again (a changed estimator checked in seconds)",
    )
    p.add_argument("--threads", type=positive_int)
    p.set_defaults(func=_cmd_values)
