"""``creditbench bench``: a suite of methods x seeds x tasks in parallel workers.

creditbench bench --suite quick --workers 2
"""

from __future__ import annotations

import argparse

from creditbench.tools.cli.common import (
    add_set_option,
    not_a_regular_file,
    positive_int,
    quiet_transformers,
    usage_error,
)


def _cmd_bench(args: argparse.Namespace) -> int:
    from creditbench.tools.bench import run_suite
    from creditbench.tools.suite import SuiteError, parse_seeds

    quiet_transformers()
    args.interrupted = (
        "finished runs are kept, and each run in progress keeps its checkpoint of its last "
        "finished step (runs checkpoint every step unless the suite says otherwise); the same "
        "command resumes them"
    )
    # a FIFO as the suite read as absent, and as --timings escaped as a traceback
    for flag, path in [("--suite", args.suite), *(("--timings", t) for t in args.timings)]:
        if problem := not_a_regular_file(path):
            return usage_error("bench", f"{flag}: {problem}")
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


def add_bench_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run a benchmark suite (methods x seeds x tasks)")
    p.add_argument("--suite", required=True, help="quick, standard, or a suite YAML file")
    p.add_argument(
        "--workers",
        type=positive_int,
        help="parallel runs, at most 4 x the cores (default: one a core)",
    )
    p.add_argument("--results", help="results folder (default: runs/bench-SUITE)")
    p.add_argument("--dry-run", action="store_true", help="list the runs and exit")
    p.add_argument(
        "--timings",
        action="append",
        default=[],
        metavar="SOURCE",
        help="finished runs (a folder or a runs.csv, repeatable) whose wall times plan the "
        "suite, beside the results folder's own: the dry run's expected times, longest first "
        "(default: docs/results/standard where it exists)",
    )
    p.add_argument(
        "--seeds",
        help="run these seeds instead of the suite's, e.g. 10-19 (a confirmatory set) or 0,2,5-7 "
        "(each below 2**32, at most 10,000)",
    )
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="GLOB",
        help="run only the runs whose names match (repeatable), e.g. 'chain-steps=8-*-s0'",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        help="torch threads per run, at most 4 x the cores (default: cores / workers)",
    )
    add_set_option(p, "override a config field of every run (repeatable)")
    p.set_defaults(func=_cmd_bench)
