"""Rewrite the home page's headline block from the leaderboard's committed records.

    python scripts/home_headline.py docs/results/standard/runs.csv docs/index.md

The block lies between the markers of :mod:`creditbench.leaderboard.headline`; run this after
each `creditbench leaderboard docs/results/standard/runs.csv --out docs/results/standard`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from creditbench.leaderboard.headline import HeadlineError, headline_block, rewrite


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python scripts/home_headline.py RECORDS PAGE", file=sys.stderr)
        return 2
    records, page = Path(argv[0]), Path(argv[1])
    try:
        text = rewrite(page.read_text(encoding="utf-8"), headline_block(records))
    except (OSError, HeadlineError) as err:
        print(f"home_headline: {err}", file=sys.stderr)
        return 2
    page.write_text(text, encoding="utf-8")
    print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
