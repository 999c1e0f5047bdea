"""The methods index (docs/methods/index.md) has a row for every built-in method in each of its
two tables: what the method does and its paper, and what it adds, what one step costs against
GRPO's, and the question it answers."""

from __future__ import annotations

import re
from pathlib import Path

from creditbench.methods.registry import list_methods, method_origin

PAGE = Path(__file__).resolve().parents[1] / "docs" / "methods" / "index.md"


def _rows_of(section: str) -> dict[str, list[str]]:
    """``{method name: its row's cells}`` of the table under ``## section``."""
    text = PAGE.read_text(encoding="utf-8").split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in text.splitlines():
        found = re.match(r"\| \[`([a-z0-9_]+)`\]", line)
        if found:
            rows[found.group(1)] = [cell.strip() for cell in line.strip("|").split(" | ")]
    return rows


def _builtin() -> set[str]:
    return {name for name in list_methods() if method_origin(name).kind == "builtin"}


def test_every_method_has_a_row_with_its_paper():
    rows = _rows_of("Every method")
    assert set(rows) == _builtin(), f"missing: {_builtin() - set(rows)}"
    for name, cells in rows.items():
        assert len(cells) == 4 and all(cells), name


def test_every_method_has_a_row_with_its_cost_and_question():
    rows = _rows_of("What each method adds, and what it costs")
    assert set(rows) == _builtin(), f"missing: {_builtin() - set(rows)}"
    for name, cells in rows.items():
        adds, wall, flops, question = cells[1:]
        assert adds and len(question.split()) >= 4, name
        assert re.match(r"\d+\.\d\d", wall) and re.match(r"\d+\.\d\d", flops), name
