"""scripts/line_accuracy.py: the share of a base's step lines the task's checker finds right
(the ledger page's measurement of why its first base misses the window), on written texts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from creditbench.harness.tasks import get_task

ROOT = Path(__file__).resolve().parents[1]


def script():
    path = ROOT / "scripts" / "line_accuracy.py"
    spec = importlib.util.spec_from_file_location("line_accuracy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_right_wrong_and_corrected_lines_are_counted_as_the_model_wrote_them():
    line_accuracy = script().line_accuracy
    task = get_task("ledger")
    problem = task.problems("eval")[2]  # start 69: +28, +48, -17 (97, 45, 28)
    clean = "so 69+28=97\nso 97+48=45\nso 45-17=28\nAnswer: 28"
    slipped = "so 69+28=97\nso 97+48=46\nso 46-17=29\nAnswer: 29"  # one wrong line, carried on
    fixed = "so 69+28=97\nso 97+48=46\nfix 97+48=45\nso 45-17=28\nAnswer: 28"
    assert line_accuracy(task, [clean], [problem]) == (1.0, 3, 1.0)
    assert line_accuracy(task, [slipped], [problem]) == pytest.approx((2 / 3, 3, 0.0))
    # the corrected slip was written wrong (3 of 4 lines right), though the answer is right
    assert line_accuracy(task, [fixed], [problem]) == pytest.approx((3 / 4, 4, 1.0))
    together = line_accuracy(task, [clean, slipped], [problem, problem])
    assert together == pytest.approx((5 / 6, 6, 0.5))
