"""Rewrite the home page's computed blocks from the leaderboard's committed records.

    python scripts/home_headline.py docs/results/standard/runs.csv docs/index.md [--explain]

The headline and the credit picture's block lie between the markers of
:mod:`creditbench.leaderboard.headline`, the board across worlds between those of
:mod:`creditbench.leaderboard.worlds` (every world's records, found beside the page); run this
after each `creditbench leaderboard docs/results/standard/runs.csv --out docs/results/standard`
and after a world's records change. When the board's best method
changes, the credit picture must show it: without ``--explain`` the script says so and exits 1;
with it, the picture is redrawn (``creditbench explain``, a minute or two).
"""

from __future__ import annotations

import sys
from pathlib import Path

from creditbench.harness.records.files import atomic_write_text
from creditbench.leaderboard.explain import shown_columns
from creditbench.leaderboard.headline import (
    CREDIT_END,
    CREDIT_START,
    PICTURE,
    HeadlineError,
    credit_argv,
    home_blocks,
    rewrite,
)
from creditbench.leaderboard.worlds import END as WORLDS_END
from creditbench.leaderboard.worlds import START as WORLDS_START
from creditbench.leaderboard.worlds import read_worlds, worlds_block
from creditbench.reference.cards import CardError, load_cards


def main(argv: list[str]) -> int:
    explain = "--explain" in argv
    paths = [a for a in argv if a != "--explain"]
    if len(paths) != 2 or any(a.startswith("-") for a in paths):
        print("usage: python scripts/home_headline.py RECORDS PAGE [--explain]", file=sys.stderr)
        return 2
    records, page = Path(paths[0]), Path(paths[1])
    try:
        home = home_blocks(records)
        text = rewrite(page.read_text(encoding="utf-8"), home.headline)
        text = rewrite(text, home.credit, CREDIT_START, CREDIT_END)
        worlds = worlds_block(read_worlds(page.parent), list(load_cards().values()))
        text = rewrite(text, worlds, WORLDS_START, WORLDS_END)
    except (OSError, HeadlineError, CardError) as err:
        print(f"home_headline: {err}", file=sys.stderr)
        return 2
    atomic_write_text(page, text)  # whole or not at all: a sync killed mid-write keeps the old page
    print(page)
    folder = page.parent / PICTURE
    html = folder / "credit.html"
    shown = shown_columns(html.read_text(encoding="utf-8")) if html.is_file() else []
    if shown == home.methods:
        return 0
    if not explain:
        print(
            f"home_headline: {html} shows {shown or 'nothing'}, the page names {home.methods}; "
            "rerun with --explain to redraw it",
            file=sys.stderr,
        )
        return 1
    from creditbench.tools.cli.main import main as cli

    return cli(credit_argv(home.methods, str(folder)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
