"""Every default of every method's Config cites its source.

Each method page in ``docs/methods/`` has a section ``## Config fields`` with a table
``| field | default | source |``: one row per dataclass field of the method's Config class
(``cls.Config``), inherited `LossConfig` fields included.

The rules this file checks:

- **The page of a method** is the page whose Quick facts line ``Registered name: `x`.`` (or
  ``Registered names: `x`, `y`.``) lists the method's name in backticks. Every built-in method
  has exactly one page, and a page names only registered built-in methods. Methods that other
  code registers at run time (tests, plugins) are not checked: only those whose origin is
  ``builtin`` (`methods.registry.method_origin`).
- **Which table** a Config class is checked against: inside the section, every ``###``
  sub-heading starts a new table. A Config class of method ``m`` goes to the table under the
  sub-heading that names ``m`` in backticks (``### `reinforce_pp_baseline` ``); else to the
  table before any sub-heading.
- **Rows**: the first cell is the field name in backticks; every field has exactly one row in
  its table; every row of a table names a field of some Config class checked against that
  table (no row outlives a renamed or removed field), and every table has such a class.
- **Default cell**: the dataclass default, written as ``null`` (None), ``true``/``false``, a
  number (compared numerically: ``1e-6`` matches ``1e-06``), a string bare or in backticks, or
  ``[a, b]`` for a tuple or list, ``{}`` for an empty mapping. On a page with several methods
  a cell may give one default per method, ``rrpo: 0.5; srpo: 1.0`` (names bare or in
  backticks); each method is compared with its own.
- **Source cell**: not empty, and either starts with "ours" (a choice of this project, with its
  reason) or holds a citation: §, Table, Eq., App./Appendix, arXiv, a path with ``/``, or the
  name of a framework whose code is cited (verl, TRL, OpenRLHF, EasyR1).

The planted pages at the end show that the checks fail on a missing row, a wrong default, a
duplicate, a source without a citation and a table no Config class maps to.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from creditbench.methods.registry import list_methods, method_origin
from creditbench.tools.new_method import BACKTICKED, registered_names

DOCS = Path(__file__).resolve().parents[1] / "docs" / "methods"
SECTION = "## Config fields"
HEADER = ["field", "default", "source"]
FIELD_CELL = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")
NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
CITATION = re.compile(
    r"§|\bTable\b|\bEq\.|\bApp\.|\bAppendix\b|arXiv|[\w.-]+/[\w./-]+"
    r"|\b(verl|TRL|OpenRLHF|EasyR1)\b"
)


# --------------------------------------------------------------------------------------------
# Reading a page
# --------------------------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    default: str
    source: str
    line: int


@dataclass
class Table:
    heading: str | None  # the ``###`` sub-heading above it, None before any
    rows: list[Row] = field(default_factory=list)


def split_cells(line: str) -> list[str]:
    """The cells of a markdown table row (``|`` escaped as ``\\|`` stays inside a cell)."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", body)]


def config_tables(text: str) -> tuple[list[Table], list[str]]:
    """The tables of the page's ``## Config fields`` section, and what is malformed in it."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == SECTION]
    if len(starts) != 1:
        return [], [f"the page needs exactly one {SECTION!r} section (found {len(starts)})"]
    tables: list[Table] = []
    problems: list[str] = []
    heading: str | None = None
    current: Table | None = None
    for number, line in enumerate(lines[starts[0] + 1 :], start=starts[0] + 2):
        stripped = line.strip()
        if stripped.startswith("## ") or stripped.startswith("# "):
            break  # the next section
        if stripped.startswith("### "):
            heading, current = stripped[4:].strip(), None
            continue
        if not stripped.startswith("|"):
            current = None  # a table ends at the first line that is not a row
            continue
        cells = split_cells(stripped)
        if current is None:
            if [cell.lower() for cell in cells] != HEADER:
                problems.append(
                    f"line {number}: a table must start with | field | default |"
                    f" source | (got {stripped!r})"
                )
            current = Table(heading)
            tables.append(current)
            continue
        if all(re.fullmatch(r":?-{3,}:?", cell) for cell in cells):
            continue  # the separator row
        name = FIELD_CELL.fullmatch(cells[0])
        if len(cells) != 3 or name is None:
            problems.append(
                f"line {number}: a row needs 3 cells, the field in backticks first "
                f"(got {stripped!r})"
            )
            continue
        current.rows.append(Row(name.group(1), cells[1], cells[2], number))
    if not tables:
        problems.append(f"the {SECTION!r} section has no table")
    return tables, problems


def table_for(tables: list[Table], method: str, cls: type, page_methods: list[str]) -> Table | None:
    """The table a Config class of ``method`` is checked against (see the module docstring)."""
    for table in tables:
        named = BACKTICKED.findall(table.heading or "")
        if method in named and method in page_methods:
            return table
    untitled = [table for table in tables if table.heading is None]
    return untitled[0] if untitled else None


# --------------------------------------------------------------------------------------------
# Checking a row
# --------------------------------------------------------------------------------------------


def _default_of(cls: type, name: str) -> object:
    """The default of dataclass field ``name`` of ``cls``, or MISSING."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
    return dataclasses.MISSING


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text.startswith("`") and text.endswith("`"):
        text = text[1:-1].strip()
    return text


def default_matches(value: object, cell: str) -> bool:
    """Whether ``cell`` writes ``value`` by the rules of the module docstring."""
    text = _unquote(cell)
    if value is None:
        return text == "null"
    if isinstance(value, bool):
        return text == ("true" if value else "false")
    if isinstance(value, (int, float)):
        return NUMBER.fullmatch(text) is not None and math.isclose(
            float(text), float(value), rel_tol=1e-12, abs_tol=0.0
        )
    if isinstance(value, str):
        return text == value
    if isinstance(value, (tuple, list)):
        if not (text.startswith("[") and text.endswith("]")):
            return False
        inner = text[1:-1].strip()
        items = inner.split(",") if inner else []
        return len(items) == len(value) and all(
            default_matches(v, item) for v, item in zip(value, items, strict=True)
        )
    if isinstance(value, dict):  # an empty mapping only (a hosted rule's host options)
        return not value and text == "{}"
    return False  # a default of another type needs a rule here first


def default_cell_for(cell: str, method: str, page_methods: list[str]) -> str | None:
    """The part of ``cell`` that gives ``method``'s default: all of it, unless the cell gives
    one default per method (``a: 1; b: 2``), then ``method``'s part, or None without one."""
    parts = [part.strip() for part in cell.split(";")]
    keyed = [re.fullmatch(r"`?([\w-]+)`?\s*:\s*(.+)", part) for part in parts]
    if not all(match and match.group(1) in page_methods for match in keyed):
        return cell
    values = {match.group(1): match.group(2) for match in keyed if match}
    return values.get(method)


def source_problem(source: str) -> str | None:
    """What is wrong with a source cell, or None."""
    if not source.strip():
        return "the source cell is empty"
    if source.strip().lower().startswith("ours") or CITATION.search(source):
        return None
    return (
        f"the source {source!r} neither starts with 'ours' nor cites a section, table, "
        "equation, appendix, arXiv id, path or framework"
    )


def config_problems(text: str, method: str, cls: type, page_methods: list[str]) -> list[str]:
    """Everything wrong with the rows of ``cls`` (a Config class of ``method``) on a page."""
    tables, problems = config_tables(text)
    if not tables:
        return problems
    table = table_for(tables, method, cls, page_methods)
    if table is None:
        return [*problems, f"no table for {cls.__name__} of {method}"]
    where = f"{cls.__name__} of {method}" + (
        f" (table '### {table.heading}')" if table.heading else ""
    )
    for f in dataclasses.fields(cls):
        rows = [row for row in table.rows if row.name == f.name]
        if len(rows) != 1:
            problems.append(
                f"{where}: field {f.name!r} has {len(rows)} rows, needs 1"
                + ("" if rows else " (no row)")
            )
            continue
        row = rows[0]
        value = _default_of(cls, f.name)
        cell = default_cell_for(row.default, method, page_methods)
        if value is dataclasses.MISSING:
            problems.append(f"{where}: field {f.name!r} has no default")
        elif cell is None:
            problems.append(
                f"line {row.line}: {f.name!r}: the cell {row.default!r} gives no "
                f"default for {method}"
            )
        elif not default_matches(value, cell):
            problems.append(
                f"line {row.line}: {f.name!r}: the default cell {cell!r} does not "
                f"match the real default {value!r}"
            )
        issue = source_problem(row.source)
        if issue:
            problems.append(f"line {row.line}: {f.name!r}: {issue}")
    return problems


def stale_problems(
    text: str, configs: list[tuple[str, type]], page_methods: list[str]
) -> list[str]:
    """Rows naming a field no Config class checked against their table has, and tables that
    no Config class of the page's methods is checked against."""
    tables, problems = config_tables(text)
    mapped: dict[int, set[str]] = {id(table): set() for table in tables}
    for method, cls in configs:
        table = table_for(tables, method, cls, page_methods)
        if table is not None:
            mapped[id(table)].update(f.name for f in dataclasses.fields(cls))
    for table in tables:
        label = f"table '### {table.heading}'" if table.heading else "the first table"
        fields = mapped[id(table)]
        if not fields:
            problems.append(f"{label}: no Config class of {', '.join(page_methods)} maps to it")
            continue
        problems += [
            f"line {row.line}: {label}: {row.name!r} is a field of no Config class it documents"
            for row in table.rows
            if row.name not in fields
        ]
    return problems


# --------------------------------------------------------------------------------------------
# The real pages
# --------------------------------------------------------------------------------------------


def _builtin_methods() -> dict[str, type]:
    return {
        name: cls for name, cls in list_methods().items() if method_origin(name).kind == "builtin"
    }


def _pages() -> dict[Path, str]:
    return {path: path.read_text(encoding="utf-8") for path in sorted(DOCS.glob("*.md"))}


def _method_pages() -> dict[Path, list[str]]:
    """Every page with a "Registered name(s):" line, and the names it lists."""
    listed = {path: registered_names(text) for path, text in _pages().items()}
    return {path: names for path, names in listed.items() if names}


def _page_of(method: str) -> Path:
    pages = [path for path, names in _method_pages().items() if method in names]
    assert len(pages) == 1, f"{method}: {len(pages)} pages list it as a registered name"
    return pages[0]


BUILTIN = _builtin_methods()
CASES = [
    pytest.param(name, cls, id=f"{name}-{cls.__name__}")
    for name, method in BUILTIN.items()
    for cls in (method.Config,)
]


def test_every_builtin_method_has_exactly_one_page():
    pages = _method_pages()
    missing = [name for name in BUILTIN if sum(name in names for names in pages.values()) != 1]
    assert not missing, f"methods without exactly one page naming them: {missing}"
    unknown = {
        path.name: [name for name in names if name not in BUILTIN]
        for path, names in pages.items()
        if any(name not in BUILTIN for name in names)
    }
    assert not unknown, f"pages naming methods that are not registered built-ins: {unknown}"


LEADERBOARD_SECTION = "## On the leaderboard"
LEADERBOARD_PARTS = (
    "**What runs.**",
    "**What its mechanism needs that the suite lacks.**",
    "**Measured in the hard setting.**",
)


def test_every_method_page_says_what_the_leaderboard_runs_and_lacks():
    """The leaderboard issue: a method whose paper's mechanism needs a setting the suite lacks
    says so on its page. Every page has the section and its three parts, in order."""
    pages = {_page_of(name) for name in _builtin_methods()}
    assert pages
    for page in sorted(pages):
        text = page.read_text(encoding="utf-8")
        count = text.count(LEADERBOARD_SECTION)
        assert count == 1, f"{page.name}: {count} sections {LEADERBOARD_SECTION}, not one"
        section = text.split(LEADERBOARD_SECTION, 1)[1].split("\n## ", 1)[0]
        where = [section.find(part) for part in LEADERBOARD_PARTS]
        assert -1 not in where and where == sorted(where), f"{page.name}: {where}"


@pytest.mark.parametrize(("method", "cls"), CASES)
def test_every_config_field_has_a_sourced_row_with_its_default(method, cls):
    path = _page_of(method)
    problems = config_problems(path.read_text(encoding="utf-8"), method, cls, _method_pages()[path])
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", sorted(_method_pages()), ids=lambda path: path.name)
def test_no_row_outlives_its_field(path):
    names = _method_pages()[path]
    configs = [(name, BUILTIN[name].Config) for name in names if name in BUILTIN]
    problems = stale_problems(path.read_text(encoding="utf-8"), configs, names)
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


# --------------------------------------------------------------------------------------------
# The checks fail where they should: planted pages
# --------------------------------------------------------------------------------------------


@dataclass
class Planted:
    eps: float = 1e-6
    mode: str = "token-mean"
    items: tuple[str, ...] = ("a", "b")
    off: float | None = None
    flag: bool = True
    count: int = 10


@dataclass
class PlantedBeta(Planted):
    eps: float = 0.5


PLANTED_ROWS = {
    "eps": "| `eps` | 1e-6 | verl `verl/trainer/ppo/core_algos.py` |",
    "mode": "| `mode` | `token-mean` | DAPO §3.3 |",
    "items": "| `items` | `[a, b]` | ours: two are enough here |",
    "off": "| `off` | null | Table 6 |",
    "flag": "| `flag` | true | Eq. 3 |",
    "count": "| `count` | 10 | arXiv 2503.14476 |",
}


def planted_page(rows: dict[str, str] | None = None, extra: str = "") -> str:
    rows = PLANTED_ROWS if rows is None else rows
    return "\n".join(
        [
            "# Planted",
            "",
            "- Registered names: `alpha`, `beta`.",
            "",
            "## Defaults and deviations",
            "",
            "| `eps` | 7 | not this section |",
            "",
            SECTION,
            "",
            "| field | default | source |",
            "|---|---|---|",
            *rows.values(),
            extra,
            "",
            "## References",
            "",
            "| `eps` | 9 | nor this one |",
        ]
    )


def test_planted_page_passes():
    page = planted_page()
    assert registered_names(page) == ["alpha", "beta"]
    assert config_problems(page, "alpha", Planted, ["alpha", "beta"]) == []


def test_a_missing_row_is_caught():
    rows = {name: row for name, row in PLANTED_ROWS.items() if name != "flag"}
    problems = config_problems(planted_page(rows), "alpha", Planted, ["alpha"])
    assert len(problems) == 1 and "'flag'" in problems[0] and "no row" in problems[0]


def test_a_duplicate_row_is_caught():
    rows = {**PLANTED_ROWS, "again": PLANTED_ROWS["mode"]}
    problems = config_problems(planted_page(rows), "alpha", Planted, ["alpha"])
    assert len(problems) == 1 and "'mode' has 2 rows" in problems[0]


@pytest.mark.parametrize(
    ("name", "cell"),
    [
        ("eps", "1e-5"),
        ("eps", "`1e-6 (the run's)`"),
        ("mode", "`token-sum`"),
        ("items", "[a]"),
        ("items", "[b, a]"),
        ("items", "a, b"),
        ("off", "0"),
        ("off", "None"),
        ("flag", "false"),
        ("flag", "1"),
        ("count", "11"),
        ("count", "true"),
    ],
)
def test_a_wrong_default_is_caught(name, cell):
    rows = dict(PLANTED_ROWS)
    rows[name] = re.sub(r"^(\| `\w+` \|)[^|]*\|", rf"\1 {cell} |", rows[name])
    problems = config_problems(planted_page(rows), "alpha", Planted, ["alpha"])
    assert len(problems) == 1 and f"'{name}'" in problems[0] and "does not match" in problems[0]


@pytest.mark.parametrize("source", ["", "the usual value", "see above", "our choice"])
def test_a_source_without_a_citation_is_caught(source):
    rows = {**PLANTED_ROWS, "mode": f"| `mode` | `token-mean` | {source} |"}
    problems = config_problems(planted_page(rows), "alpha", Planted, ["alpha"])
    assert len(problems) == 1 and "'mode'" in problems[0] and "source" in problems[0]


def test_a_missing_section_is_caught():
    page = planted_page().replace(SECTION, "## Settings")
    assert "section" in config_problems(page, "alpha", Planted, ["alpha"])[0]


def test_one_default_per_method_is_compared_per_method():
    rows = {**PLANTED_ROWS, "eps": "| `eps` | `alpha`: 1e-6; beta: 0.5 | DAPO §3.1 |"}
    page = planted_page(rows)
    assert config_problems(page, "alpha", Planted, ["alpha", "beta"]) == []
    assert config_problems(page, "beta", PlantedBeta, ["alpha", "beta"]) == []
    wrong = config_problems(page, "beta", Planted, ["alpha", "beta"])
    assert len(wrong) == 1 and "does not match" in wrong[0]
    rows["eps"] = "| `eps` | alpha: 1e-6 | DAPO §3.1 |"
    missing = config_problems(planted_page(rows), "beta", PlantedBeta, ["alpha", "beta"])
    assert len(missing) == 1 and "no default for beta" in missing[0]


def test_a_method_sub_heading_selects_its_table():
    beta_rows = {**PLANTED_ROWS, "eps": "| `eps` | 0.5 | DAPO §3.1 |"}
    extra = "\n### `beta`\n\n| field | default | source |\n|---|---|---|\n" + "\n".join(
        beta_rows.values()
    )
    page = planted_page(extra=extra)
    names = ["alpha", "beta"]
    assert config_problems(page, "alpha", Planted, names) == []
    assert config_problems(page, "beta", PlantedBeta, names) == []
    assert config_problems(page, "beta", Planted, names) != []  # 1e-6 against the beta table
