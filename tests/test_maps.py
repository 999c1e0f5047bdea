"""The maps a newcomer reads first match the tree: the README's folder and scripts tables, the
docstrings of the harness's ``__init__.py`` files, and docs/harness.md's "Where things live".
A file or folder added without its line in the map fails here, naming it."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from test_architecture import ROOMS

ROOT = Path(__file__).resolve().parent.parent


def readme_row(folder: str) -> str:
    """The README's folder-table row of ``folder`` (``scripts/``)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith(f"| `{folder}` |")]
    assert len(rows) == 1, f"README.md: {len(rows)} rows for {folder}"
    return rows[0]


def subpackages(folder: str) -> list[str]:
    return sorted(p.parent.name for p in (ROOT / folder).glob("*/__init__.py"))


def docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def test_the_readme_scripts_row_names_every_script():
    row = readme_row("scripts/")
    scripts = sorted(p.name for p in (ROOT / "scripts").iterdir() if p.is_file())
    missing = [name for name in scripts if f"`{name}`" not in row]
    assert missing == [], f"README.md's scripts row lacks {missing}"
    stale = [name for name in re.findall(r"`([\w.]+\.(?:py|sh))`", row) if name not in scripts]
    assert stale == [], f"README.md's scripts row names {stale}, not in scripts/"


def test_the_readme_folder_table_has_a_row_for_every_room():
    for room in (*ROOMS, "scripts", "tests", "docs"):
        readme_row(f"{room}/")


def test_the_harness_docstring_names_every_folder_of_the_harness():
    text = docstring(ROOT / "harness" / "__init__.py")
    missing = [name for name in subpackages("harness") if f"``{name}/``" not in text]
    assert missing == [], f"harness/__init__.py's docstring lacks {missing}"


def test_the_training_docstring_names_every_module_of_training():
    text = docstring(ROOT / "harness" / "training" / "__init__.py")
    modules = sorted(p.name for p in (ROOT / "harness" / "training").glob("[!_]*.py"))
    missing = [name for name in modules if f"``{name}``" not in text]
    assert missing == [], f"harness/training/__init__.py's docstring lacks {missing}"


def test_where_things_live_has_every_folder_of_the_harness():
    page = (ROOT / "docs" / "harness.md").read_text(encoding="utf-8")
    section = page.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`harness/([a-z_]+)/`", section))
    missing = [name for name in subpackages("harness") if name not in named]
    assert missing == [], f"docs/harness.md, Where things live, lacks harness/{missing}/"


def test_the_map_test_sees_a_script_the_row_lacks(tmp_path, monkeypatch):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "new_probe.py").write_text("")
    (tmp_path / "README.md").write_text("| `scripts/` | `other.py`: something |\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    try:
        test_the_readme_scripts_row_names_every_script()
    except AssertionError as err:
        assert "new_probe.py" in str(err)
    else:
        raise AssertionError("a script missing from the row passed")


# methods/ modules shared by the method files, not methods themselves
SHARED_METHOD_MODULES = {
    "__init__",
    "alignment",
    "base",
    "checks",
    "compose",
    "contract",
    "core",
    "prefix_tree",
    "registry",
    "rollouts",
    "values",
}
METHOD_FILE_CEILING = 330  # docs/contributing.md, "1. The method file"


def test_every_method_file_keeps_the_contributing_pages_promise():
    page = (ROOT / "docs" / "contributing.md").read_text(encoding="utf-8")
    assert f"every method file under {METHOD_FILE_CEILING} lines" in " ".join(page.split())
    long = {
        path.name: lines
        for path in sorted((ROOT / "methods").glob("*.py"))
        if path.stem not in SHARED_METHOD_MODULES
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > METHOD_FILE_CEILING
    }
    assert long == {}, f"method files past the {METHOD_FILE_CEILING} lines contributing promises"
