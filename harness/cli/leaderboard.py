"""``creditbench leaderboard [RESULTS_DIR] [--out DIR]``: render the leaderboard of a results
directory (every finished run below it) as leaderboard.md, .csv, .html and PNG plots.

``creditbench validate``: run the ``validation`` suite (oracle credit against GRPO) and write
its report, ``validation.md``, and one row per setting, ``validation.csv``, beside the runs."""

from __future__ import annotations

import argparse

from creditbench.harness.cli.common import usage_error


def _cmd_leaderboard(args: argparse.Namespace) -> int:
    from creditbench.leaderboard import LeaderboardError, render

    if args.reps < 1:
        return usage_error("leaderboard", f"--reps: must be >= 1 (got {args.reps})")
    try:
        paths = render(args.results_dir, args.out, reps=args.reps)
    except LeaderboardError as err:
        return usage_error("leaderboard", str(err))
    for name in ("markdown", "csv", "html"):
        print(paths[name])
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from creditbench.harness.bench import SuiteError, run_suite, suite_path
    from creditbench.leaderboard.validation import validation_report

    results = Path(args.results or "runs/bench-validation")
    if args.report_only:
        if not results.is_dir():
            return usage_error("validate", f"--results: {results} is not a folder")
    else:
        try:
            suite_path(args.suite)
            code = run_suite(args.suite, workers=args.workers, results=str(results))
        except SuiteError as err:
            return usage_error("validate", str(err))
        if code != 0:
            print("creditbench validate: some runs failed; the report covers the finished ones")
    report, table = validation_report(results, reps=args.reps)
    (results / "validation.md").write_text(report, encoding="utf-8")
    if table:
        (results / "validation.csv").write_text(table, encoding="utf-8")
    print(report)
    return 0


def add_leaderboard_commands(subparsers) -> None:
    """Register ``leaderboard`` on the main parser's subparsers."""
    p = subparsers.add_parser(
        "leaderboard", help="render the leaderboard of a results directory (md, csv, html, png)"
    )
    p.add_argument(
        "results_dir",
        nargs="?",
        default="runs",
        help="the folder holding run directories, searched recursively (default: runs)",
    )
    p.add_argument("--out", default=None, help="where to write (default: RESULTS_DIR)")
    p.add_argument(
        "--reps", type=int, default=2000, help="bootstrap resamples per interval (default 2000)"
    )
    p.set_defaults(func=_cmd_leaderboard)

    p = subparsers.add_parser(
        "validate", help="oracle credit against GRPO on the testbed: run the sweep, report the gap"
    )
    p.add_argument("--suite", default="validation", help="the sweep (default: validation)")
    p.add_argument("--results", help="results folder (default: runs/bench-validation)")
    p.add_argument("--workers", type=int, help="parallel runs (default: sized to the machine)")
    p.add_argument(
        "--report-only", action="store_true", help="only write the report of finished runs"
    )
    p.add_argument("--reps", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.set_defaults(func=_cmd_validate)
