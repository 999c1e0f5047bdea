"""The rooms and their import rule, read from the source (no import runs).

    methods/      torch and the standard library only, and methods/ itself
    reference/    nothing of ours
    harness/      the core: methods/, reference/ and itself; of methods/ only the shared
                  modules, never a method file (it never learns method names); never the
                  leaderboard, never a tool
    leaderboard/  reference/, itself, and of the harness only the run-directory format
                  (harness/records/files.py) that writer and reader must agree on
    integrations/ methods/ (its shared modules), harness/ and itself, besides verl and TRL: the
                  adapters that run methods inside other trainers with the harness's scoring
    tools/        any room: the CLI, bench, reproduce, perf and the other tools a user runs;
                  the launches it writes name the integrations without importing them

so the graph of rooms has no cycle and nothing but the tools imports a tool. The test also
checks the harness's folders form no cycle of their own (training -> sampling, ...), and that
nothing outside ``harness/tasks`` calls a task member the ``Task`` contract does not declare.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("methods", "harness", "leaderboard", "reference", "integrations", "tools")
MAY_IMPORT = {
    "methods": {"methods"},
    "reference": {"reference"},
    "leaderboard": {"leaderboard", "reference"},
    "harness": {"harness", "methods", "reference"},
    "integrations": {"integrations", "methods", "harness"},
    "tools": {"tools", "harness", "methods", "reference", "leaderboard", "integrations"},
}
# the one module of the harness the leaderboard reads run directories through
RUN_FORMAT = ["harness", "records", "files"]
# values: the states (state_starts) whose values Services.task_values returns
SHARED_METHOD_MODULES = {
    "checks",
    "core",
    "base",
    "contract",
    "registry",
    "conformance",
    "values",
    "prefix_tree",
}
THIRD_PARTY_FOR_METHODS = {"torch"}


def source_files(room: str) -> list[Path]:
    return sorted((ROOT / room).rglob("*.py"))


def module_name(path: Path) -> list[str]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def imports_of(path: Path) -> list[tuple[int, list[str]]]:
    """``(line, dotted name split)`` of everything ``path`` imports, relative imports resolved
    to ``<room>.<module>`` and ``creditbench.<room>`` stripped to ``<room>``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = module_name(path)
    package = here if path.name == "__init__.py" else here[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = base + (node.module.split(".") if node.module else [])
            else:
                target = (node.module or "").split(".")
            names = (
                [target + [alias.name] for alias in node.names] if node.module is None else [target]
            )
        else:
            continue
        for name in names:
            if name[0] == "creditbench":
                name = name[1:]
            out.append((node.lineno, name))
    return out


def violations() -> list[str]:
    out = []
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for room in ROOMS:
        for path in source_files(room):
            rel = path.relative_to(ROOT).as_posix()
            for line, name in imports_of(path):
                top = name[0]
                if room == "leaderboard" and name[:3] == RUN_FORMAT:
                    continue
                if top in ROOMS and top not in MAY_IMPORT[room]:
                    out.append(f"{rel}:{line}: {room}/ may not import {'.'.join(name)}")
                if room in ("harness", "integrations") and top == "methods" and len(name) > 1:
                    if name[1] not in SHARED_METHOD_MODULES:
                        out.append(f"{rel}:{line}: {room}/ imports a method file ({name[1]})")
                if room == "methods" and top not in ROOMS:
                    if top not in stdlib and top not in THIRD_PARTY_FOR_METHODS:
                        out.append(f"{rel}:{line}: methods/ imports {top} (torch only)")
    return out


def test_rooms_follow_the_import_rule():
    assert violations() == []


def folder_graph() -> dict[str, set[str]]:
    """Which parts of harness/ import which: a part is a folder, or a module at its top."""
    graph: dict[str, set[str]] = {}
    for path in source_files("harness"):
        parts = module_name(path)
        if len(parts) < 2:
            continue
        for _, name in imports_of(path):
            if name[0] == "harness" and len(name) >= 2 and name[1] != parts[1]:
                graph.setdefault(parts[1], set()).add(name[1])
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle's node list, found by depth-first search from each node."""
    found = []
    for start in sorted(graph):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    found.append(path)
                elif nxt not in path and nxt > start:
                    stack.append((nxt, [*path, nxt]))
    return found


def test_cycle_finder_finds_a_cycle_and_only_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}}) == []


@pytest.mark.parametrize("room", [room for room in ROOMS if room != "tools"])  # tools: any room
def test_the_rule_would_catch_a_forbidden_import(room, tmp_path, monkeypatch):
    """Plant a module that breaks the rule in a copy of the room's layout; it is reported."""
    forbidden = {
        "methods": "from creditbench.harness.config import RunConfig\n",
        "reference": "from creditbench.methods import core\n",
        "leaderboard": "from creditbench.harness.records.rundir import RunDir\n",
        "harness": "from creditbench.methods.grpo import GRPO\n",
        "integrations": "from creditbench.leaderboard.collect import collect_runs\n",
    }[room]
    (tmp_path / room).mkdir()
    (tmp_path / room / "planted.py").write_text(forbidden)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert len(violations()) == 1


def test_the_parts_of_the_harness_import_each_other_without_a_cycle():
    assert cycles(folder_graph()) == []


def packages_on_disk() -> set[str]:
    """Every folder of a room that holds an ``__init__.py``, as the installed package name."""
    return {
        ".".join(["creditbench", *module_name(init)])
        for room in ROOMS
        for init in (ROOT / room).rglob("__init__.py")
    }


def test_every_folder_with_code_is_listed_as_a_package_so_a_wheel_ships_it():
    """setuptools installs only the packages pyproject lists: a folder missing there works in an
    editable checkout and is absent from a wheel (harness/services once was)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    assert packages_on_disk() - listed == set()
    assert listed - packages_on_disk() == set()


def forbidden_imports(room: str, target: str) -> list[str]:
    """The rule's findings where ``room`` imports ``target``."""
    return [v for v in violations() if f" {room}/ may not import {target}." in v]


def test_the_harness_imports_nothing_from_the_leaderboard():
    assert forbidden_imports("harness", "leaderboard") == []


def test_no_module_of_the_core_imports_a_tool():
    for room in ROOMS:
        if room != "tools":
            assert forbidden_imports(room, "tools") == [], room


def test_the_rule_would_catch_the_harness_importing_the_leaderboard_or_a_tool(
    tmp_path, monkeypatch
):
    (tmp_path / "harness" / "training").mkdir(parents=True)
    (tmp_path / "harness" / "training" / "planted.py").write_text(
        "from creditbench.tools.perf import run_perf\n"
        "from creditbench.leaderboard.collect import collect_runs\n"
    )
    (tmp_path / "leaderboard").mkdir()
    (tmp_path / "leaderboard" / "reader.py").write_text(
        "from creditbench.harness.records.files import read_run_config\n"  # allowed
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert forbidden_imports("harness", "tools") == [
        "harness/training/planted.py:1: harness/ may not import tools.perf"
    ]
    assert len(forbidden_imports("harness", "leaderboard")) == 1
    assert violations() == forbidden_imports("harness", "tools") + forbidden_imports(
        "harness", "leaderboard"
    )


# --- the task contract ----------------------------------------------------------------------


def task_contract() -> set[str]:
    """The members ``harness/tasks/base.py``'s ``Task`` Protocol declares."""
    tree = ast.parse((ROOT / "harness" / "tasks" / "base.py").read_text(encoding="utf-8"))
    (task,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Task"]
    members = set()
    for node in task.body:
        if isinstance(node, ast.FunctionDef):
            members.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            members.add(node.target.id)
    return members


def names_a_task(node: ast.expr) -> bool:
    """``task``, ``base_task``, ``self.task``, ``services.task``: an expression holding a task."""
    if isinstance(node, ast.Name):
        return node.id == "task" or node.id.endswith("_task")
    return isinstance(node, ast.Attribute) and node.attr == "task"


def task_calls_outside_the_contract() -> list[str]:
    """Every ``<task>.<member>`` outside ``harness/tasks`` whose member ``Task`` lacks."""
    contract = task_contract()
    out = []
    for room in ROOMS:
        for path in source_files(room):
            if module_name(path)[:2] == ["harness", "tasks"]:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.Attribute)
                    and names_a_task(node.value)
                    and node.attr not in contract
                ):
                    rel = path.relative_to(ROOT).as_posix()
                    out.append(f"{rel}:{node.lineno}: task.{node.attr} is not in the Task contract")
    return out


def test_the_harness_calls_no_task_member_outside_the_contract():
    assert {"problems", "grade", "capabilities", "check_steps"} <= task_contract()
    assert task_calls_outside_the_contract() == []


def test_the_task_rule_would_catch_a_duck_typed_call(tmp_path, monkeypatch):
    (tmp_path / "harness" / "tasks").mkdir(parents=True)
    (tmp_path / "harness" / "tasks" / "base.py").write_text(
        (ROOT / "harness" / "tasks" / "base.py").read_text(encoding="utf-8")
    )
    (tmp_path / "harness" / "services").mkdir()
    (tmp_path / "harness" / "services" / "planted.py").write_text(
        "def f(self, task):\n    task.grade(1, 2)\n    return self.task.wrong_steps(1, 2)\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert task_calls_outside_the_contract() == [
        "harness/services/planted.py:3: task.wrong_steps is not in the Task contract"
    ]
