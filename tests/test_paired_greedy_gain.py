"""The real-model rule's statistic (scripts/paired_greedy_gain.py): the mean per-problem gain
with paired bootstrap intervals, on made-up outcomes whose answer is known."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "paired_greedy_gain.py"
spec = importlib.util.spec_from_file_location("paired_greedy_gain", SCRIPT)
paired = importlib.util.module_from_spec(spec)
spec.loader.exec_module(paired)


def test_a_clear_gain_has_an_interval_above_zero():
    before = np.zeros(113)
    after = np.zeros(113)
    after[:20] = 1.0  # 20 problems solved after, none lost
    found = paired.paired_gain(before, after, resamples=2000)
    assert found["gain"] == 20 / 113
    for method in ("percentile", "BCa"):
        assert 0 < found[f"{method}_low"] < found["gain"] < found[f"{method}_high"]


def test_pairing_cancels_what_both_solve():
    # both solve the same 50 problems; after gains 3 and loses 3: no gain, an interval round 0
    before = np.zeros(113)
    before[:53] = 1.0
    after = before.copy()
    after[50:53] = 0.0
    after[60:63] = 1.0
    found = paired.paired_gain(before, after, resamples=2000)
    assert found["gain"] == 0.0
    assert found["percentile_low"] < 0 < found["percentile_high"]
    # unpaired, the 50 shared successes would widen it; paired, it spans only the 6 changes
    assert found["percentile_high"] - found["percentile_low"] < 0.1
