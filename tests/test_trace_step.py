"""The step trace of ``scripts/trace_step.py`` (docs/harness.md, "One step, traced") counts what
it says: the reader's path reads each function once in the order of first call, a hop is a move
to another file along it, a return a hop into a file already left."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "trace_step.py"


def _module():
    spec = importlib.util.spec_from_file_location("trace_step", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hops_and_returns_along_the_readers_path():
    trace = _module().StepTrace()
    for where, name in [
        ("a.py", "f"),
        ("a.py", "g"),  # same file: no hop
        ("b.py", "h"),
        ("a.py", "i"),  # back into a.py, left once: a return
        ("c.py", "j"),
        ("b.py", "k"),  # back into b.py: a return
    ]:
        trace.functions.setdefault((where, name), None)
    assert trace.path == ["a.py", "b.py", "a.py", "c.py", "b.py"]
    assert trace.figures() == {"functions": 6, "files": 3, "hops": 4, "returns": 2}


def test_only_the_projects_own_files_count():
    module = _module()
    assert module.project_file(str(module.PACKAGE / "harness" / "budget.py")) == "harness/budget.py"
    assert module.project_file(str(module.PACKAGE / "tests" / "x.py")) is None
    assert module.project_file(torch_file := __import__("torch").__file__) is None, torch_file


def test_a_traced_call_records_each_project_function_once_in_first_call_order():
    module = _module()
    import torch

    from creditbench.methods.core import masked_mean

    trace = module.StepTrace()
    trace.run(lambda: [masked_mean(torch.ones(2, 3), torch.ones(2, 3)) for _ in range(3)])
    names = [name for _, name in trace.functions]
    assert "masked_mean" in names and len(names) == len(set(names))
    assert {where for where, _ in trace.functions} == {"methods/core.py"}


@pytest.mark.slow
def test_the_docs_quote_the_measured_step_and_it_meets_the_bar():
    """The last row of docs/harness.md's table is what the script measures on this code, and a
    reader's path returns to an already-left file at most 35 times (the redesign's bar)."""
    figures = _module().traced_step("grpo").figures()
    assert quoted_figures("### One step, traced") == [figures[k] for k in FIGURES]
    assert figures["returns"] <= 35


FIGURES = ("functions", "files", "hops", "returns")


def quoted_figures(heading: str) -> list[int]:
    """The last row of the first table under ``heading`` in docs/harness.md, as numbers."""
    text = (SCRIPT.parents[1] / "docs" / "harness.md").read_text(encoding="utf-8")
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    table = section.split("\n\n|", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines() if re.match(r"\|[^|]*(\| \d+ ){4}\|", line)]
    return [int(cell) for cell in rows[-1].strip("|").split("|")[1:]]


@pytest.mark.slow
def test_the_docs_quote_the_measured_setup():
    """docs/harness.md's "The setup, traced" quotes what ``--setup`` measures on this code: the
    path of ``creditbench train`` from the command line to the first step."""
    # in a process of its own, as the script runs it: this one has met the first look-ups
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--setup"], capture_output=True, text=True, check=True
    )
    figures = dict(line.split(": ") for line in done.stdout.splitlines())
    assert quoted_figures("### The setup, traced") == [int(figures[k]) for k in FIGURES]
