"""Plugins: methods from the ``creditbench.methods`` entry points of installed distributions.

The plugin under test is the walk-through of docs/contributing.md (section 4): its files are
read from the page (each fenced block after a "File `PATH`:" line), written to a temporary
folder on ``sys.path`` beside the ``.dist-info`` that ``pip install`` would write (``METADATA``
and ``entry_points.txt``, which ``importlib.metadata`` discovers there), and checked: listed with
its origin, passing the conformance checks, and refused with one clear line when broken.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from creditbench.methods import registry
from creditbench.methods.registry import Origin, get_method, method_origin
from creditbench.tools.cli.main import main

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
CONTRIBUTING = ROOT / "docs" / "contributing.md"
FILE_BLOCK = re.compile(r"^File `(?P<path>[^`]+)`:\n\n```\w*\n(?P<text>.*?)^```$", re.M | re.S)
OUTPUT_BLOCK = re.compile(
    r"^Output of `(?P<command>[^`]+)`[^\n]*:\n\n```\w*\n(?P<text>.*?)^```$", re.M | re.S
)


# --------------------------------------------------------------------------------------------
# A distribution as pip would leave it, and the registry as a first look-up finds it
# --------------------------------------------------------------------------------------------


def install(
    site: Path, name: str, version: str, entry_points: dict[str, str], files: dict[str, str]
) -> None:
    """Make a distribution importable and discoverable as ``pip install`` would: its files in
    ``site`` (a folder on ``sys.path``) and a ``.dist-info`` with its name, version and
    ``creditbench.methods`` entry points."""
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text, encoding="utf-8")
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    declared = "".join(f"{key} = {value}\n" for key, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\n{declared}")


def walkthrough() -> tuple[dict, dict[str, str]]:
    """The walk-through's ``[project]`` table and its Python files, by path in the project."""
    page = CONTRIBUTING.read_text(encoding="utf-8")
    files = {match["path"]: match["text"] for match in FILE_BLOCK.finditer(page)}
    (pyproject,) = [path for path in files if Path(path).name == "pyproject.toml"]
    project_dir = Path(pyproject).parent
    project = tomllib.loads(files[pyproject])["project"]
    sources = {
        Path(path).relative_to(project_dir).as_posix(): text
        for path, text in files.items()
        if path.endswith(".py")
    }
    assert sources, f"{CONTRIBUTING}: no 'File `PATH`:' block of a Python file"
    return project, sources


def install_walkthrough(site: Path) -> tuple[list[str], str]:
    """Install the walk-through's plugin into ``site``; its method names and its origin."""
    project, sources = walkthrough()
    entry_points = project["entry-points"][registry.ENTRY_POINT_GROUP]
    install(site, project["name"], project["version"], entry_points, sources)
    return list(entry_points), f"{project['name']} {project['version']}"


def documented_output(command: str) -> list[str]:
    """The lines the page shows for ``command``, after an "Output of `COMMAND`" line."""
    page = CONTRIBUTING.read_text(encoding="utf-8")
    (text,) = [m["text"] for m in OUTPUT_BLOCK.finditer(page) if m["command"] == command]
    return text.splitlines()


def squeeze(line: str) -> str:
    """A line with its runs of spaces made one: column widths follow the longest method name."""
    return " ".join(line.split())


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on ``sys.path`` for plugins, and the registry as a first look-up finds it (the
    built-in methods registered, the plugins not yet loaded); the registry, ``sys.path`` and
    the plugins' modules are put back afterwards."""
    registry.list_methods()  # the built-in methods, imported once per process
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_ORIGINS", dict(registry._ORIGINS))
    monkeypatch.setattr(registry, "_LOADED", False)
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(folder)):
            del sys.modules[name]


def run_cli(*args: str, site: Path) -> subprocess.CompletedProcess[str]:
    """``creditbench ARGS`` in a fresh interpreter that has ``site`` on its path: pytest runs
    the conformance checks there, not inside this test session."""
    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "creditbench.tools.cli.main", *args],
        env={**os.environ, "PYTHONPATH": path},
        cwd=site,
        capture_output=True,
        text=True,
    )


# --------------------------------------------------------------------------------------------
# The walk-through's plugin
# --------------------------------------------------------------------------------------------


def test_the_walkthrough_plugin_is_listed_with_its_origin(site: Path, capsys) -> None:
    names, origin = install_walkthrough(site)
    assert main(["methods"]) == 0
    listed = [squeeze(line) for line in capsys.readouterr().out.splitlines()]

    for line in documented_output("creditbench methods"):
        assert squeeze(line) in listed, "docs/contributing.md shows a line the command does not"
    for name in names:
        assert method_origin(name) == Origin("plugin", origin)
        assert any(line.startswith(f"{name} ") and f"[plugin: {origin}]" in line for line in listed)
    assert method_origin("grpo").kind == "builtin"
    (grpo_line,) = [line for line in listed if line.startswith("grpo ")]
    assert "[plugin" not in grpo_line


def test_the_walkthrough_plugin_passes_the_conformance_checks(site: Path) -> None:
    names, _ = install_walkthrough(site)
    result = run_cli("conformance", *names, "--max-examples", "10", site=site)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in names:
        assert f"test_method_is_documented[{name}] PASSED" in result.stdout


def test_conformance_fails_a_plugin_that_breaks_the_contract(site: Path) -> None:
    """Advantages on padding: the command exits 1 with pytest's report of the broken check."""
    leaky = textwrap.dedent(
        '''
        """Leaky: the reward on every position, padding included.

        Deviations: all of them.
        """
        from creditbench.methods.base import CreditMethod
        from creditbench.methods.registry import register_method


        @register_method("leaky")
        class Leaky(CreditMethod):
            summary = "the reward on every position"
            paper = "Nobody (arXiv 0000.00000)"

            def advantages(self, batch, services=None):
                return batch.rewards.unsqueeze(-1).expand_as(batch.response_mask).clone()
        '''
    )
    install(site, "leaky", "0.0.1", {"leaky": "leaky"}, {"leaky.py": leaky})
    result = run_cli("conformance", "leaky", "--max-examples", "10", site=site)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAILED" in result.stdout and "non-zero advantage on a masked position" in result.stdout


# --------------------------------------------------------------------------------------------
# Plugins that cannot be loaded
# --------------------------------------------------------------------------------------------

UNREGISTERED_CLASS = textwrap.dedent(
    """
    from creditbench.methods.base import CreditMethod
    from creditbench.methods.registry import register_method


    class Impostor(CreditMethod):
        summary = "a method class no decorator registered"
    """
)

BROKEN = {
    "import error": (
        "broken",
        "from creditbench.methods.core import no_such_function\n",
        ["importing it raised ImportError", "no_such_function", "broken.py:1;"],
    ),
    "registers nothing": ("broken", "x = 1\n", ["registers no method"]),
    "not a method": ("broken:x", "x = 1\n", ["1 is not a CreditMethod subclass"]),
    "missing class": ("broken:Nothing", "x = 1\n", ["AttributeError", "Nothing"]),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_plugin_stops_the_command_with_one_line_naming_it(
    site: Path, capsys, case: str
) -> None:
    value, source, fragments = BROKEN[case]
    install(site, "broken-plugin", "0.2.0", {"mine": value}, {"broken.py": source})
    assert main(["methods"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()  # one line, no traceback
    assert line.startswith("creditbench methods: error: plugin broken-plugin 0.2.0, ")
    assert f"entry point mine = {value!r}" in line
    for fragment in fragments:
        assert fragment in line
    assert "pip uninstall broken-plugin" in line


@pytest.mark.parametrize(
    "value, source",
    [
        ("clash", UNREGISTERED_CLASS + "register_method('grpo')(Impostor)\n"),
        ("clash:Impostor", UNREGISTERED_CLASS),
    ],
    ids=["module registers grpo", "class under the entry point name grpo"],
)
def test_a_plugin_that_takes_a_builtin_name_is_refused(
    site: Path, capsys, value: str, source: str
) -> None:
    builtin = registry._REGISTRY["grpo"]  # not get_method: that would load the plugins now
    install(site, "clasher", "1.0", {"grpo": value}, {"clash.py": source})
    assert main(["methods"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "plugin clasher 1.0" in line and "refused" in line
    assert "'grpo' is already registered by creditbench.methods.grpo" in line
    assert registry._REGISTRY["grpo"] is builtin


def test_an_entry_point_may_name_the_class(site: Path) -> None:
    """``name = "module:Class"``: the class is registered under the entry point's name."""
    source = UNREGISTERED_CLASS.replace("Impostor", "Mine")
    install(site, "mine", "2.1", {"mine": "mine_module:Mine"}, {"mine_module.py": source})
    cls = get_method("mine")
    assert cls.__name__ == "Mine" and cls.name == "mine"
    assert method_origin("mine") == Origin("plugin", "mine 2.1")


# --------------------------------------------------------------------------------------------
# creditbench conformance: bad input
# --------------------------------------------------------------------------------------------


def test_conformance_refuses_an_unknown_method(capsys) -> None:
    assert main(["conformance", "no-such-method"]) == 2
    err = capsys.readouterr().err
    assert "unknown method 'no-such-method'" in err and "grpo" in err


def test_conformance_asks_for_the_test_extra_without_hypothesis(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # find_spec reports it missing
    assert main(["conformance", "grpo"]) == 2
    assert 'need hypothesis: pip install -e ".[test]" in the clone' in capsys.readouterr().err


def test_conformance_refuses_a_bad_number_of_examples(capsys) -> None:
    assert main(["conformance", "grpo", "--max-examples", "0"]) == 2
    assert "--max-examples: must be an integer >= 1 (got 0)" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# The contributor's flow: a new method against committed records
# --------------------------------------------------------------------------------------------


@pytest.mark.slow  # four tiny runs in subprocesses: about a minute
def test_a_new_method_is_compared_against_committed_records_without_rerunning_them(
    site: Path, nano_policy: Path, tmp_path: Path
) -> None:
    """docs/contributing.md section 5 with a tiny budget: GRPO's runs are published as
    records; the contributor runs only the plugin's runs and renders both together."""
    import pandas as pd

    names, _ = install_walkthrough(site)
    suite = tmp_path / "tiny.yaml"
    suite.write_text(
        textwrap.dedent(
            f"""\
            methods: [grpo, {names[0]}]
            seeds: [0, 1]
            tasks:
              - name: chain
                options: {{steps: 2, train_size: 64, eval_size: 8}}
            settings:
              model.path: {str(nano_policy)!r}
              rollout.prompts_per_step: 2
              rollout.group_size: 4
              rollout.max_new_tokens: 16
              budget.eval_fractions: [0.0, 1.0]
              eval.n_problems: 4
              eval.k_samples: 1
            budget: {{unit: steps, amount: 2}}
            """
        )
    )
    published, mine = tmp_path / "published", tmp_path / "mine"
    common = ["--suite", str(suite), "--workers", "1", "--threads", "1"]
    result = run_cli("bench", *common, "--results", str(published), "--only", "*-grpo-*", site=site)
    assert result.returncode == 0, result.stdout + result.stderr
    records = published / "runs.csv"
    assert records.is_file()  # bench ends with the leaderboard, which writes the records
    only = f"*-{names[0]}-*"
    result = run_cli("bench", *common, "--results", str(mine), "--only", only, site=site)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not any(p.name.startswith("chain-grpo") for p in mine.iterdir())  # nothing re-run
    board = tmp_path / "board"
    result = run_cli("leaderboard", str(records), str(mine), "--out", str(board), site=site)
    assert result.returncode == 0, result.stdout + result.stderr
    runs = pd.read_csv(board / "runs.csv")
    runs = runs[runs["kind"] == "run"]
    assert sorted(runs["method"]) == sorted(["grpo", "grpo", names[0], names[0]])
    assert set(runs["setting"]) == {"default"}  # one config: compared as one setting
    page = (board / "leaderboard.md").read_text()
    assert f"| {names[0]} | 2 |" in page


def test_a_plugin_beside_the_repository_leaves_its_own_tests_green(site: Path) -> None:
    """The repository's tests that range over the registry (every method has a card, every
    method a replay fixture, every method passes conformance) hold with a plugin installed:
    they mean this package's methods; the plugin's own repository tests the plugin."""
    install_walkthrough(site)
    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_cards.py::test_every_registered_method_is_named_by_a_card",
            "tests/test_replay.py::test_every_registered_method_has_a_fixture",
        ],
        env={**os.environ, "PYTHONPATH": path},
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
