"""Every method page says where its mechanism acts, world by world, with the diagnostic that
shows it, and its chain figures are the board's (scripts/mechanism_lines.py).

The rules, as the script reads them: a section ``## Where the mechanism acts`` whose table has
one row for each of ``chain · hard``, ``chain · easy``, ``countdown`` and ``ledger``, no empty
cell; a chain row names columns of the board's ``runs.csv`` in backticks, and its measured cell
is what the records give (the mean over the setting's seeds with its 95% t interval, per method
of the page). Planted pages show that a missing section, a missing world, an unknown column and
a figure the records do not give are each reported, and that the rewrite restores the figure.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from creditbench.methods.registry import list_methods, method_origin

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "mechanism_lines.py"
spec = importlib.util.spec_from_file_location("mechanism_lines", SCRIPT)
assert spec is not None and spec.loader is not None
lines = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = lines  # its dataclass looks its module up there
spec.loader.exec_module(lines)


def method_pages() -> dict[str, str]:
    """Each method page's text, by its file's stem (the index aside)."""
    pages = {}
    for page in sorted(lines.PAGES.glob("*.md")):
        text = page.read_text()
        if lines.registered_names(text):
            pages[page.stem] = text
    return pages


def test_every_builtin_method_has_a_page_with_the_section():
    pages = method_pages()
    covered = {name for text in pages.values() for name in lines.registered_names(text)}
    builtin = {name for name in list_methods() if method_origin(name) == "builtin"}
    assert builtin <= covered, f"methods without a page: {sorted(builtin - covered)}"
    missing = [stem for stem, text in pages.items() if lines.section_rows(text) is None]
    assert missing == [], f"pages without '{lines.SECTION}': {missing}"


def test_every_page_matches_the_board_records():
    runs = lines.read_runs(lines.RECORDS)
    problems = {
        stem: found
        for stem, text in method_pages().items()
        if (found := lines.page_problems(text, runs)[0])
    }
    assert problems == {}, "run `python scripts/mechanism_lines.py`: " + repr(problems)


# --------------------------------------------------------------------------------------------
# Planted pages and records
# --------------------------------------------------------------------------------------------

HARD = "chain-hard-steps=10-slip_rate=0.1-weak_slip_rate=0.3-direct_slip_rate=0.65"


def planted_runs() -> pd.DataFrame:
    """Three hard-setting runs of `mymethod` (clip_frac 0.1, 0.2, 0.3) and no easy ones."""
    return pd.DataFrame(
        {
            "run": [f"{HARD}-mymethod-s{seed}" for seed in range(3)],
            "kind": ["run"] * 3,
            "method": ["mymethod"] * 3,
            "clip_frac": [0.1, 0.2, 0.3],
        }
    )


def planted_page(hard: str, *, worlds=lines.WORLDS, diagnostic: str = "`clip_frac`") -> str:
    cells = {
        "chain · hard": hard,
        "chain · easy": "no runs on the board yet",
        "countdown": "not measured",
        "ledger": "not measured",
    }
    rows = "".join(f"| {w} | tokens | {diagnostic} | {cells[w]} |\n" for w in worlds)
    return (
        "# My method\n\n- Registered name: `mymethod`.\n\n"
        f"{lines.SECTION}\n\nProse.\n\n| " + " | ".join(lines.HEADER) + " |\n"
        "|---|---|---|---|\n" + rows + "\n## References\n"
    )


def test_the_measured_cell_is_the_mean_with_its_t_interval():
    half = 4.302652729911275 * np.std([0.1, 0.2, 0.3], ddof=1) / np.sqrt(3)  # t_{0.975, 2}
    cell = lines.measured_cell(planted_runs(), ["mymethod"], "hard", ["clip_frac"])
    assert cell == f"`clip_frac` 0.200 [{0.2 - half:.3f}, {0.2 + half:.3f}] (3 seeds)"
    assert lines.measured_cell(planted_runs(), ["mymethod"], "easy", ["clip_frac"]) == (
        "no runs on the board yet"
    )


def test_a_page_with_the_records_figure_passes():
    runs = planted_runs()
    cell = lines.measured_cell(runs, ["mymethod"], "hard", ["clip_frac"])
    assert lines.page_problems(planted_page(cell), runs)[0] == []


def test_a_stale_figure_is_reported_and_rewritten():
    runs = planted_runs()
    stale = planted_page("`clip_frac` 0.5 [0.4, 0.6] (3 seeds)")
    problems, fixed = lines.page_problems(stale, runs)
    assert len(problems) == 1 and "the records" in problems[0]
    assert lines.page_problems(fixed, runs)[0] == []


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        ("# My method\n\n- Registered name: `mymethod`.\n", "no section"),
        (planted_page("x", worlds=("chain · hard", "chain · easy", "countdown")), "one each of"),
        (planted_page("x", diagnostic="`no_such_column`"), "unknown: no_such_column"),
        (planted_page("x", diagnostic="clip share"), "names no column"),
        (planted_page(""), "an empty cell"),
        (planted_page("x").replace("| x |", "| x | extra |"), "a row of 4 cells"),
    ],
)
def test_a_broken_section_is_reported(page, expected):
    problems = lines.page_problems(page, planted_runs())[0]
    assert any(expected in problem for problem in problems), problems
