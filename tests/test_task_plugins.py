"""Tasks register like methods: a builder under a name, and plugins from the
``creditbench.tasks`` entry points of installed distributions (found as ``pip install`` leaves
them: a ``.dist-info`` with ``entry_points.txt`` on ``sys.path``), refused with one clear
message when broken or when they take a name."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from creditbench.harness.tasks import registry
from creditbench.harness.tasks.registry import get_task, list_tasks, task_origin
from creditbench.methods.registry import PluginError

PLUGIN = '''
"""A task of one's own: the testbed at a fixed length."""
from creditbench.harness.tasks import get_task, register_task


@register_task("short_chain", "the testbed with four steps")
def build(**options):
    return get_task("chain", steps=4, **options)
'''


TINY = 'def tiny(**options):\n    """A one-line task."""\n    return 1\n'


def install(site: Path, name: str, entry_points: dict[str, str], files: dict[str, str]) -> None:
    for path, text in files.items():
        (site / path).write_text(text, encoding="utf-8")
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    declared = "".join(f"{key} = {value}\n" for key, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\n{declared}")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(registry, "_BUILDERS", dict(registry._BUILDERS))
    monkeypatch.setattr(registry, "_ORIGINS", dict(registry._ORIGINS))
    monkeypatch.setattr(registry, "_LOADED", False)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("short_chain_plugin", "broken_task_plugin", "taken_task_plugin"):
        sys.modules.pop(name, None)


def test_a_plugin_task_is_listed_with_its_origin_and_builds(site: Path) -> None:
    install(
        site,
        "short-chain",
        {"short_chain": "short_chain_plugin"},
        {"short_chain_plugin.py": PLUGIN},
    )
    assert list_tasks()["short_chain"] == "the testbed with four steps"
    assert str(task_origin("short_chain")) == "plugin: short-chain 0.1"
    assert str(task_origin("chain")) == "builtin"
    task = get_task("short_chain")
    assert task.config.steps == 4 and task.problems("train")


def test_a_plugin_builder_is_registered_under_its_entry_point_name(site: Path) -> None:
    install(
        site,
        "short-chain",
        {"tiny": "short_chain_plugin:tiny"},
        {"short_chain_plugin.py": TINY},
    )
    assert list_tasks()["tiny"] == "A one-line task."
    assert get_task("tiny") == 1


@pytest.mark.parametrize(
    "files, entry, problem",
    [
        (
            {"broken_task_plugin.py": "raise RuntimeError('no data here')\n"},
            "broken_task_plugin",
            "RuntimeError: no data here",
        ),
        (
            {"taken_task_plugin.py": PLUGIN.replace('"short_chain"', '"chain"')},
            "taken_task_plugin",
            "a name that is taken",
        ),
        ({"taken_task_plugin.py": "x = 1\n"}, "taken_task_plugin", "registers no task"),
    ],
)
def test_a_broken_plugin_task_stops_the_look_up_naming_it(site, files, entry, problem) -> None:
    install(site, "bad-task", {"bad": entry}, files)
    with pytest.raises(PluginError, match=f"plugin bad-task 0.1, entry point bad = .*{problem}"):
        get_task("chain")
