"""Replay: a short run of each method computes what it computed when its fixture was recorded.

The fixtures (``tests/replay_fixtures/<method>.jsonl``, made by ``make_replay_fixtures.py``
there) are the metrics of a two-step run on the chain testbed with the shipped base policy.
Every eval accuracy, reward, advantage statistic, loss statistic and budget count must come
back bit for bit: a change to the harness that alters what a run computes fails here, and
one that is meant to must regenerate the fixtures and say so.

GRPO replays in the default suite; every other method in the slow step (about 45 s each).
The runs go on PyTorch's AVX2 kernels, whatever the machine's best (``PINNED_KERNELS``).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

FIXTURES = Path(__file__).parent / "replay_fixtures"
sys.path.insert(0, str(FIXTURES))

from make_replay_fixtures import fixture_path, replay_records  # noqa: E402

# Statistics a method reports once per step (services.report) that were once logged as the
# token-weighted mean of a constant over micro-batches: equal up to that mean's rounding.
REPORTED_ONCE = {
    "repair_attempts",
    "repair_rate",
    "edit_frac",
    "reset_fallback_frac",
    "fresh_per_prompt",
    "reset_position",
    "reset_hits_first_wrong",
    "reset_clean_frac",
    "localize_parsed_frac",
}
METHODS = sorted(path.stem for path in FIXTURES.glob("*.jsonl"))


def differences(expected: dict, got: dict, where: str = "") -> list[str]:
    """Paths at which two metrics records differ (exactly, except :data:`REPORTED_ONCE`)."""
    out = []
    for key in sorted(set(expected) | set(got)):
        path = f"{where}.{key}" if where else key
        if key not in got or key not in expected:
            out.append(f"{path}: only in {'fixture' if key in expected else 'this run'}")
            continue
        a, b = expected[key], got[key]
        if isinstance(a, dict) and isinstance(b, dict):
            out.extend(differences(a, b, path))
        elif key in REPORTED_ONCE and isinstance(a, float) and isinstance(b, float):
            if not math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15):
                out.append(f"{path}: {a!r} != {b!r}")
        elif a != b:
            out.append(f"{path}: {a!r} != {b!r}")
    return out


def check_replay(method: str, tmp_path: Path) -> None:
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("the fixtures were recorded on x86-64 AVX2 kernels, which this CPU lacks")
    expected = [json.loads(line) for line in fixture_path(method).read_text().splitlines()]
    got = replay_records(method, tmp_path)
    assert len(got) == len(expected), f"{method}: {len(got)} records, fixture has {len(expected)}"
    for index, (a, b) in enumerate(zip(expected, got, strict=True)):
        assert not differences(a, b), f"{method} record {index}: {differences(a, b)[:8]}"


def test_every_registered_method_has_a_fixture():
    from creditbench.methods.registry import list_methods

    assert sorted(list_methods()) == METHODS


def test_differences_sees_a_changed_value_and_a_missing_key():
    record = {"step": 1, "loss": 0.5, "time": {"eval": 1.0}, "repair_rate": 0.25}
    assert differences(record, dict(record)) == []
    assert differences(record, {**record, "loss": 0.5000001}) == ["loss: 0.5 != 0.5000001"]
    assert differences(record, {**record, "repair_rate": 0.25 + 1e-17}) == []
    assert differences(record, {k: v for k, v in record.items() if k != "loss"}) == [
        "loss: only in fixture"
    ]


def test_grpo_replays_bit_for_bit(tmp_path):
    check_replay("grpo", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("method", [m for m in METHODS if m != "grpo"])
def test_method_replays_bit_for_bit(method, tmp_path):
    check_replay(method, tmp_path)
