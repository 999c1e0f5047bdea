"""``creditbench leaderboard [RESULTS_DIR] [--out DIR]``: render the leaderboard of a results
directory (every finished run below it) as leaderboard.md, .csv, .html and PNG plots."""

from __future__ import annotations

import argparse
import sys


def _cmd_leaderboard(args: argparse.Namespace) -> int:
    from creditbench.leaderboard import LeaderboardError, render

    if args.reps < 1:
        print(
            f"creditbench leaderboard: error: --reps: must be >= 1 (got {args.reps})",
            file=sys.stderr,
        )
        return 2
    try:
        paths = render(args.results_dir, args.out, reps=args.reps)
    except LeaderboardError as err:
        print(f"creditbench leaderboard: error: {err}", file=sys.stderr)
        return 2
    for name in ("markdown", "csv", "html"):
        print(paths[name])
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
