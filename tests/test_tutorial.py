"""docs/tutorial.md is a walk a reader can run: every Python block, in order, in one session."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.M | re.S)


def blocks() -> list[str]:
    found = BLOCK.findall(TUTORIAL.read_text(encoding="utf-8"))
    assert len(found) >= 6, f"{TUTORIAL}: expected the tutorial's Python blocks"
    return found


def test_every_python_block_of_the_tutorial_runs_in_order(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the blocks write runs/ and credit.html where they run
    namespace: dict = {"__name__": "tutorial"}
    for number, code in enumerate(blocks(), start=1):
        try:
            exec(compile(code, f"{TUTORIAL.name} block {number}", "exec"), namespace)
        except Exception as err:  # name the block, so the page can be fixed
            pytest.fail(f"{TUTORIAL.name}, Python block {number} raised {err!r}:\n{code}")
    captured = capsys.readouterr()
    out = captured.out
    assert "credit precision" in out and "first wrong step" in out
    # the page's output is its own: no library's loading bars (transformers drew one a load)
    assert "Loading weights" not in captured.err and "it/s]" not in captured.err
    page = (tmp_path / "credit.html").read_text()
    assert "<h4>grpo</h4>" in page and "<h4>oracle</h4>" in page
    # the section 7 claim: GRPO's blame is uniform, the oracle's sits on the wrong step
    lines = [line for line in out.splitlines() if "mean advantage on the first wrong step" in line]
    grpo = [line for line in lines if line.strip().startswith("grpo")]
    assert grpo and all(
        line.split("step ")[1].split(",")[0] == line.split("elsewhere ")[1] for line in grpo
    )
