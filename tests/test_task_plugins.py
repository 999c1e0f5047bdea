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
    for name in ("short_chain_plugin", "broken_task_plugin", "taken_task_plugin", "lines_plugin"):
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


OLD_STYLE = '''
"""A task written before capabilities: it cuts responses into steps but does not say so."""
from creditbench.harness.tasks.base import Grade, Problem


class Lines:
    name = "lines"

    def problems(self, split):
        return [Problem("lines/0", "say two lines", "2")]

    def grade(self, problem, response):
        return Grade(float(response.count("\\n") == 1), "lines")

    def step_spans(self, response):
        return [(0, len(response))]


def build(**options):
    """Two lines of text."""
    return Lines()
'''


def test_a_task_that_has_a_capabilitys_methods_but_does_not_declare_it_is_refused(site) -> None:
    """Its steps would otherwise be ignored in silence: the message names the part and the
    fix; declared, the same task builds and has steps."""
    from creditbench.harness.tasks.base import STEPS, has_steps

    install(site, "lines", {"lines": "lines_plugin:build"}, {"lines_plugin.py": OLD_STYLE})
    with pytest.raises(ValueError, match=r"implements steps \(step_spans\) but does not declare"):
        get_task("lines")
    sys.modules["lines_plugin"].Lines.capabilities = frozenset({STEPS})
    assert has_steps(get_task("lines"))
    assert get_task("chain") is not None and get_task("gsm8k", limit=1) is not None
