"""The rooms and their import rule, read from the source (no import runs).

    methods/      torch and the standard library only, and methods/ itself
    common/       nothing of ours: utilities every other room may import (the YAML loader)
    reference/    nothing of ours but common/
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
checks the harness's folders form no cycle of their own (training -> sampling, ...), that no two
modules import each other around a cycle, an import inside a function included (a lazy import
hides a cycle rather than breaking it), and that nothing outside ``harness/tasks`` calls a task
member the ``Task`` contract does not declare.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("methods", "common", "harness", "leaderboard", "reference", "integrations", "tools")
MAY_IMPORT = {
    "methods": {"methods"},
    "common": {"common"},
    "reference": {"reference", "common"},
    "leaderboard": {"leaderboard", "reference", "common"},
    "harness": {"harness", "methods", "reference", "common"},
    "integrations": {"integrations", "methods", "harness", "common"},
    "tools": {"tools", "harness", "methods", "reference", "leaderboard", "integrations", "common"},
}
# the one module of the harness the leaderboard reads run directories through
RUN_FORMAT = ["harness", "records", "files"]
# values: the states (state_starts) whose values Services.task_values returns; compose: a hosted
# rule's host (HostedCredit), whose loss an engine runs for the rule (no method's name)
SHARED_METHOD_MODULES = {
    "compose",
    "field_checks",
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
        "common": "from creditbench.reference.cards import load_cards\n",
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


# --- no module cycles, lazy imports included ------------------------------------------------

# none: the last pair (reproduce's run.py and claims.py) now share their runs' steps through
# tools/reproduce/workers.py; a cycle that must stay a while is named here, so none joins unseen
KNOWN_CYCLES: list[list[str]] = []


def under_type_checking(tree: ast.Module) -> set[int]:
    """Line numbers of imports inside ``if TYPE_CHECKING:``: read by type checkers, never run."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            imports = (ast.Import, ast.ImportFrom)
            lines |= {n.lineno for s in node.body for n in ast.walk(s) if isinstance(n, imports)}
    return lines


def module_graph() -> dict[str, set[str]]:
    """Which module of the package imports which, every import statement counted wherever it
    stands (module level or inside a function), less those only type checkers read. An import
    of a name resolves to the module that defines it: ``from .records import read_records`` is
    an edge to ``leaderboard.records``, ``from . import plots`` one to ``leaderboard.plots``."""
    modules = {".".join(module_name(path)): path for room in ROOMS for path in source_files(room)}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = under_type_checking(tree)
        here = module_name(path)
        package = here if path.name == "__init__.py" else here[:-1]
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno in skipped:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name.split(".") for alias in node.names]
            else:
                base = package[: len(package) - (node.level - 1)] if node.level else []
                module = base + (node.module.split(".") if node.module else [])
                targets = [[*module, alias.name] for alias in node.names]
            for target in targets:
                if target[0] == "creditbench":
                    target = target[1:]
                while target and ".".join(target) not in modules:
                    target = target[:-1]  # a name defined in the module, not a module
                if target and target != here:
                    graph.setdefault(name, set()).add(".".join(target))
    return graph


def module_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules of each strongly connected component larger than one (each a cycle or
    several), sorted: Tarjan's algorithm, iterative, since a module graph is deep."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_module_cycle_finder_finds_cycles_and_only_cycles():
    assert module_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert module_cycles({"a": {"b"}, "b": {"c"}, "d": {"b"}}) == []
    assert module_cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}) == [
        ["a", "b"],
        ["c", "d"],
    ]


def test_no_two_modules_import_each_other_around_a_cycle_lazy_imports_included():
    assert module_cycles(module_graph()) == KNOWN_CYCLES


def test_the_cycle_rule_sees_a_function_level_import_and_ignores_type_checking(
    tmp_path, monkeypatch
):
    """A planted pair that imports each other only inside a function is a cycle; a pair whose
    second import is read only by type checkers is not."""
    (tmp_path / "leaderboard").mkdir()
    (tmp_path / "leaderboard" / "first.py").write_text("from .second import B\n")
    (tmp_path / "leaderboard" / "second.py").write_text(
        "def f():\n    from creditbench.leaderboard.first import A\n"
    )
    (tmp_path / "leaderboard" / "third.py").write_text("from .fourth import D\n")
    (tmp_path / "leaderboard" / "fourth.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .third import C\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert module_cycles(module_graph()) == [["leaderboard.first", "leaderboard.second"]]


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
