"""Each method page's "Where the mechanism acts" table: its chain rows' measured cells, computed
from the standard board's records.

    python scripts/mechanism_lines.py            # rewrite the chain rows' measured cells
    python scripts/mechanism_lines.py --check    # exit 1, naming each page that differs

A method page (``docs/methods/*.md``, the methods its "Registered name(s):" line lists) has a
section ``## Where the mechanism acts``: prose, then a table

    | world · setting | what it has to act on | diagnostic | measured |

with one row per world: ``chain · hard``, ``chain · easy``, ``countdown`` and ``ledger``. A
chain row names its diagnostics in backticks in the diagnostic cell, each a column of the
board's ``runs.csv`` (a run's mean over its logged steps, e.g. ``clip_frac``). Its measured cell
is computed here: for each diagnostic, the mean over the setting's seeds with its 95% t interval
and the number of seeds, per method where the page documents several (``rrpo: ...; srpo:
...``); a method without runs in the setting reads "no runs on the board yet". The other
worlds' rows are written by hand, from their world pages' diagnostics.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from creditbench.harness.records.files import atomic_write_text
from creditbench.leaderboard.headline import setting_rows
from creditbench.leaderboard.stats import t_interval
from creditbench.tools.new_method import BACKTICKED, registered_names

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "methods"
RECORDS = ROOT / "docs" / "results" / "standard" / "runs.csv"
SECTION = "## Where the mechanism acts"
HEADER = ["world · setting", "what it has to act on", "diagnostic", "measured"]
WORLDS = ("chain · hard", "chain · easy", "countdown", "ledger")
CHAIN_SETTINGS = {"chain · hard": "hard", "chain · easy": "easy"}  # row -> the suite's label


@dataclass
class Row:
    world: str
    acts_on: str
    diagnostic: str
    measured: str
    line: int  # 0-based line of the page


def section_rows(text: str) -> list[Row] | None:
    """The rows of the page's section table; None where the page has no such section."""
    lines = text.splitlines()
    if SECTION not in lines:
        return None
    rows = []
    for number in range(lines.index(SECTION) + 1, len(lines)):
        line = lines[number]
        if line.startswith("## "):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or cells == HEADER or set(line) <= set("|- "):
            continue
        if len(cells) != len(HEADER):
            header = " | ".join(HEADER)
            raise ValueError(f"line {number + 1}: a row of {len(HEADER)} cells ({header})")
        rows.append(Row(*cells, line=number))
    return rows


def _number(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3f}" if value == 0 or abs(value) >= 0.01 else f"{value:.1e}"


def measured_cell(runs: pd.DataFrame, methods: list[str], label: str, columns: list[str]) -> str:
    """The measured cell of a chain row: each diagnostic's mean over the setting's seeds with
    its 95% t interval, for each method, and the number of seeds."""
    board = setting_rows(runs, label)
    parts = []
    for method in methods:
        rows = board[(board["kind"] == "run") & (board["method"] == method)]
        figures = "no runs on the board yet" if rows.empty else _figures(rows, columns)
        parts.append(figures if len(methods) == 1 else f"{method}: {figures}")
    return "; ".join(parts)


def _figures(rows: pd.DataFrame, columns: list[str]) -> str:
    """``name mean [low, high]`` for each column, then the seeds (once where they agree)."""
    texts, seeds = [], []
    for column in columns:
        values = rows[column] if column in rows else pd.Series(dtype=float)
        interval = t_interval(values.to_numpy(dtype=float))
        seeds.append(interval.n)
        if interval.n == 0:
            texts.append(f"`{column}` not recorded")
        elif interval.n == 1:
            texts.append(f"`{column}` {_number(interval.point)}")
        else:
            low, high = _number(interval.low), _number(interval.high)
            texts.append(f"`{column}` {_number(interval.point)} [{low}, {high}]")
    counted = [n for n in seeds if n]
    if len(set(counted)) > 1:  # a column some runs lack: each figure says its own seeds
        return ", ".join(f"{t} ({n} seeds)" for t, n in zip(texts, seeds, strict=True))
    n = counted[0] if counted else 0
    return ", ".join(texts) + (f" ({n} seed{'s' if n != 1 else ''})" if n else "")


def page_problems(text: str, runs: pd.DataFrame) -> tuple[list[str], str]:
    """What is wrong with a page's section, and the page with its chain cells recomputed."""
    try:
        rows = section_rows(text)
    except ValueError as error:
        return [str(error)], text
    if rows is None:
        return [f'no section "{SECTION}"'], text
    problems = []
    worlds = [row.world for row in rows]
    if sorted(worlds) != sorted(WORLDS):
        problems.append(f"rows {worlds}: one each of {list(WORLDS)}")
    methods = registered_names(text)
    lines = text.splitlines()
    for row in rows:
        if not all((row.acts_on, row.diagnostic, row.measured)):
            problems.append(f"line {row.line + 1}: an empty cell")
        if row.world not in CHAIN_SETTINGS:
            continue
        columns = BACKTICKED.findall(row.diagnostic)
        unknown = [column for column in columns if column not in runs.columns]
        if not columns or unknown:
            problems.append(
                f"line {row.line + 1}: the diagnostic names no column of runs.csv in backticks"
                + (f" (unknown: {', '.join(unknown)})" if unknown else "")
            )
            continue
        cell = measured_cell(runs, methods, CHAIN_SETTINGS[row.world], columns)
        if cell != row.measured:
            problems.append(f"line {row.line + 1}: measured {row.measured!r}, the records {cell!r}")
            cells = [row.world, row.acts_on, row.diagnostic, cell]
            lines[row.line] = "| " + " | ".join(cells) + " |"
    return problems, "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def read_runs(records: Path) -> pd.DataFrame:
    """The board's runs table (``runs.csv``)."""
    return pd.read_csv(records, low_memory=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report pages that differ")
    parser.add_argument("--records", type=Path, default=RECORDS, help="the board's runs.csv")
    parser.add_argument("--pages", type=Path, default=PAGES, help="the method pages' folder")
    args = parser.parse_args(argv)
    runs = read_runs(args.records)
    stale = 0
    for page in sorted(args.pages.glob("*.md")):
        text = page.read_text()
        if not registered_names(text):  # the index, not a method's page
            continue
        problems, fixed = page_problems(text, runs)
        for problem in problems:
            print(f"{page}: {problem}")
        stale += bool(problems)
        if not args.check and fixed != text:
            atomic_write_text(page, fixed)  # whole or not at all: a killed sync keeps the page
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
