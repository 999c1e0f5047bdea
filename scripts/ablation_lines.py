"""OTB's page's ablation block: where its gain over GRPO comes from, rung by rung, computed from
the board's records and the ablation rows' (docs/testbed.md, "OTB's ablation rows").

    python scripts/ablation_lines.py            # rewrite the block between the page's markers
    python scripts/ablation_lines.py --check    # exit 1 when the page's block differs

The records default to the board's folder and the ablation rows' folder, the latter where it
exists; the block names the folders it read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from creditbench.harness.records.files import RunFormatError, atomic_write_text
from creditbench.leaderboard.ablation import END, START, ladder_block
from creditbench.leaderboard.collect import collect_runs
from creditbench.leaderboard.headline import current, rewrite

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "methods" / "otb.md"
RECORDS = [ROOT / "docs" / "results" / "standard", ROOT / "docs" / "results" / "ablations"]


def shown(path: Path) -> str:
    """A records folder as the page names it: relative to the repository where it lies there."""
    path = path.resolve()
    return f"`{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}`"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report a page that differs")
    parser.add_argument(
        "--records", type=Path, action="append", help="a records folder or runs.csv (repeatable)"
    )
    parser.add_argument("--page", type=Path, default=PAGE, help="the page with the markers")
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap resamples")
    args = parser.parse_args(argv)
    sources = args.records or [path for path in RECORDS if path.exists()]
    missing = [str(path) for path in sources if not path.exists()]
    if missing:
        parser.error(f"--records: no such folder or file: {', '.join(missing)}")
    if args.reps < 100:
        parser.error("--reps: at least 100 resamples")
    try:
        table, _ = collect_runs([str(path) for path in sources])
    except RunFormatError as err:
        print(f"ablation_lines: {err}", file=sys.stderr)
        return 2
    text = args.page.read_text()
    block = ladder_block(table, sources=", ".join(shown(p) for p in sources), reps=args.reps)
    if current(text, START, END) is None:
        print(f"{args.page}: no markers {START} ... {END}", file=sys.stderr)
        return 2
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
