"""OTB's page's ablation block: where its gain over GRPO comes from, rung by rung, computed from
the board's records and the ablation rows' (docs/testbed.md, "OTB's ablation rows").

    python scripts/ablation_lines.py            # rewrite the block between the page's markers
    python scripts/ablation_lines.py --check    # exit 1 when the page's block differs

``--board`` is the board whose GRPO and OTB rows are the ladder's ends (default: the standard
board), ``--ablations`` the ablation rows' records (default: ``docs/results/ablations``, read
where it exists). The block names the records it read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from creditbench.harness.records.files import RunFormatError, atomic_write_text
from creditbench.leaderboard.ablation import END, START, ladder_block
from creditbench.leaderboard.collect import collect_runs
from creditbench.leaderboard.headline import current, rewrite
from creditbench.tools.cli.common import resample_count

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "methods" / "otb.md"
BOARD = ROOT / "docs" / "results" / "standard"
ABLATIONS = ROOT / "docs" / "results" / "ablations"


def shown(path: Path) -> str:
    """A records path as the page names it: relative to the repository where it lies there."""
    path = path.resolve()
    return f"`{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}`"


def fail(message: str) -> int:
    print(f"ablation_lines: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report a page that differs")
    parser.add_argument("--board", type=Path, default=BOARD, help="the board: folder or runs.csv")
    parser.add_argument(
        "--ablations",
        type=Path,
        help="the ablation rows' records (default: docs/results/ablations)",
    )
    parser.add_argument("--page", type=Path, default=PAGE, help="the page with the markers")
    parser.add_argument("--reps", type=resample_count, default=2000, help="bootstrap resamples")
    args = parser.parse_args(argv)
    sources = [args.board]
    if args.ablations is not None:
        sources.append(args.ablations)
    elif ABLATIONS.exists():
        sources.append(ABLATIONS)
    for flag, path in (("--board", args.board), ("--ablations", args.ablations)):
        if path is not None and not path.exists():
            return fail(f"{flag}: {path}: no such folder or file")
    try:
        text = args.page.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return fail(f"--page: {args.page}: {getattr(err, 'strerror', None) or err}")
    if current(text, START, END) is None:
        return fail(f"--page: {args.page}: no markers {START} ... {END}")
    try:
        table, _ = collect_runs([str(path) for path in sources])
    except RunFormatError as err:
        return fail(str(err))
    block = ladder_block(table, sources=", ".join(shown(p) for p in sources), reps=args.reps)
    fixed = rewrite(text, block, START, END)
    if args.check:
        if fixed != text:
            print(f"{args.page}: the ablation block differs from the records")
            return 1
        return 0
    if fixed != text:
        atomic_write_text(args.page, fixed)  # whole or not at all: a killed render keeps the page
    return 0


if __name__ == "__main__":
    sys.exit(main())
