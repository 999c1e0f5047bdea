"""``creditbench leaderboard [SOURCE ...] [--out DIR]``: render the leaderboard of results
directories (every finished run below them) and committed ``runs.csv`` records, together, as
leaderboard.md, .csv, runs.csv, .html and PNG plots.

``creditbench claims [SOURCE ...] [--card ID ...] [--out FILE]``: every paper card's claims
checked against the records (:mod:`creditbench.leaderboard.claims`), each on the axis its paper
compares at and in every setting of the board, as one Markdown table.

``creditbench validate``: run the ``validation`` suite (oracle credit against GRPO) and write
its report, ``validation.md``, and one row per setting, ``validation.csv``, beside the runs."""

from __future__ import annotations

import argparse

from creditbench.tools.cli.common import resample_count, usage_error, worker_count


def _cmd_leaderboard(args: argparse.Namespace) -> int:
    from creditbench.harness.records.rundir import RunDirError, check_creatable
    from creditbench.leaderboard import LeaderboardError, render

    try:
        if args.out is not None:
            check_creatable(args.out, "--out")
    except RunDirError as err:
        return usage_error("leaderboard", str(err))
    try:
        paths = render(args.sources, args.out, reps=args.reps, records_only=args.records_only)
    except LeaderboardError as err:
        return usage_error("leaderboard", str(err))
    for name in ("runs_csv",) if args.records_only else ("markdown", "csv", "html"):
        print(paths[name])
    return 0


def _cmd_claims(args: argparse.Namespace) -> int:
    from pathlib import Path

    from creditbench.harness.records.files import RunFormatError, atomic_write_text
    from creditbench.harness.records.rundir import RunDirError, check_creatable
    from creditbench.leaderboard.claims_page import claims_page
    from creditbench.reference.cards import CardError, load_cards

    try:
        if args.out is not None:
            check_creatable(Path(args.out).parent, "--out")
    except RunDirError as err:
        return usage_error("claims", str(err))
    try:
        cards = load_cards()
    except CardError as err:
        return usage_error("claims", str(err))
    unknown = [card for card in args.card if card not in cards]
    if unknown:
        return usage_error(
            "claims", f"--card: no card {unknown[0]!r}; cards: {', '.join(sorted(cards))}"
        )
    chosen = [cards[card] for card in (args.card or sorted(cards))]
    try:
        page = claims_page(chosen, args.sources, reps=args.reps, refuse_empty=True)
    except (FileNotFoundError, RunFormatError) as err:
        return usage_error("claims", str(err))
    if args.out is not None:
        atomic_write_text(Path(args.out), page)
    print(page)
    if args.out is not None:
        print(args.out)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from creditbench.harness.records.files import RunFormatError, atomic_write_text
    from creditbench.leaderboard.validation import validation_report
    from creditbench.tools.bench import run_suite
    from creditbench.tools.suite import SuiteError, suite_path

    results = Path(args.results or "runs/bench-validation")
    if args.report_only:
        if not results.is_dir() and not (results.is_file() and results.suffix == ".csv"):
            return usage_error(
                "validate", f"--results: {results} is neither a folder nor a runs.csv"
            )
    else:
        try:
            suite_path(args.suite)
            code = run_suite(args.suite, workers=args.workers, results=str(results))
        except SuiteError as err:
            return usage_error("validate", str(err))
        if code != 0:
            print("creditbench validate: some runs failed; the report covers the finished ones")
    try:
        report, table = validation_report(results, reps=args.reps, refuse_empty=True)
    except RunFormatError as err:
        return usage_error("validate", str(err))
    folder = results if results.is_dir() else results.parent  # beside a runs.csv
    atomic_write_text(folder / "validation.md", report)
    if table:
        atomic_write_text(folder / "validation.csv", table)
    print(report)
    return 0


def add_leaderboard_commands(subparsers) -> None:
    """Register ``leaderboard`` on the main parser's subparsers."""
    p = subparsers.add_parser(
        "leaderboard", help="render the leaderboard of a results directory (md, csv, html, png)"
    )
    p.add_argument(
        "sources",
        nargs="*",
        default=["runs"],
        metavar="SOURCE",
        help="a folder holding run directories (searched recursively) or a committed runs.csv; "
        "several are rendered together (default: runs)",
    )
    p.add_argument(
        "--out", default=None, help="where to write (default: the first SOURCE, if a folder)"
    )
    p.add_argument(
        "--reps",
        type=resample_count,
        default=2000,
        help="bootstrap resamples per interval (default 2000, at most 100,000)",
    )
    p.add_argument(
        "--records-only", action="store_true", help="write only runs.csv, the runs' records"
    )
    p.set_defaults(func=_cmd_leaderboard)

    p = subparsers.add_parser(
        "claims",
        help="each paper card's claims checked against the records, on each claim's axis and in "
        "every setting (a Markdown table)",
    )
    p.add_argument(
        "sources",
        nargs="+",
        metavar="SOURCE",
        help="the standard suite's records: a results folder or a committed runs.csv "
        "(docs/results/standard/runs.csv)",
    )
    p.add_argument("--card", action="append", default=[], help="one card's claims (repeatable)")
    p.add_argument("--out", default=None, help="also write the page to this file")
    p.add_argument(
        "--reps",
        type=resample_count,
        default=2000,
        help="bootstrap resamples (default 2000, at most 100,000)",
    )
    p.set_defaults(func=_cmd_claims)

    p = subparsers.add_parser(
        "validate", help="oracle credit against GRPO on the testbed: run the sweep, report the gap"
    )
    p.add_argument("--suite", default="validation", help="the sweep (default: validation)")
    p.add_argument(
        "--results",
        help="results folder (default: runs/bench-validation); with --report-only also a runs.csv",
    )
    p.add_argument(
        "--workers",
        type=worker_count,
        help="parallel runs, at most 4 x the cores (default: sized to the machine)",
    )
    p.add_argument(
        "--report-only", action="store_true", help="only write the report of finished runs"
    )
    p.add_argument(
        "--reps",
        type=resample_count,
        default=2000,
        help="bootstrap resamples (default 2000, at most 100,000)",
    )
    p.set_defaults(func=_cmd_validate)
