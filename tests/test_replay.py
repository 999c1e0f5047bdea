"""Replay: a short run of each method computes what it computed when its fixture was recorded.

The fixtures (``tests/replay_fixtures/<method>.jsonl``, made by ``make_replay_fixtures.py``
there) are the metrics of a two-step run on the chain testbed with the shipped base policy.
Every count and every sampled outcome must come back exactly, and every floating-point
statistic (eval accuracy, reward, advantage and loss statistics) to :data:`REL_TOL` relative:
a change to the harness that alters what a run computes fails here, and one that is meant to
must regenerate the fixtures and say so.

Why not bit for bit: the runs go on PyTorch's AVX2 kernels whatever the machine's best
(``PINNED_KERNELS``), and GRPO's records then come back bit for bit on an AVX-512 machine too;
but eight methods' (those with more passes: continuations, a teacher, a reward model) still
differed in the 5th to 9th significant digit between the fixtures' AVX2 machine and an AMD
EPYC one (largest: 5.6e-5 relative, 1e-5 absolute), and no sampled token, count or accuracy
did. A behaviour change moves a statistic far more than that.

GRPO replays in the default suite; every other method in the slow step (about 30 s each on
one core). The slow step starts the selected methods' child runs two at a time when its first
replay test runs (:func:`replays`): the runs are single-threaded, so two of them use both of
CI's cores and the step takes about half as long.
"""

from __future__ import annotations

import json
import math
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

FIXTURES = Path(__file__).parent / "replay_fixtures"
sys.path.insert(0, str(FIXTURES))

from make_replay_fixtures import fixture_path, replay_records  # noqa: E402

from creditbench.tools.verify import CROSS_CPU_ABS_TOL, CROSS_CPU_REL_TOL  # noqa: E402

# How far a float statistic may move across CPUs (see the module doc): relative, and absolute
# for the statistics that are means near 0 (adv_mean of a centred advantage); creditbench verify
# reads a re-run's differences against the same tolerances.
REL_TOL, ABS_TOL = CROSS_CPU_REL_TOL, CROSS_CPU_ABS_TOL
METHODS = sorted(path.stem for path in FIXTURES.glob("*.jsonl"))
PARALLEL_REPLAYS = 2  # child runs at once: each is one torch thread (CI has two cores)


def differences(expected: dict, got: dict, where: str = "") -> list[str]:
    """Paths at which two metrics records differ: exactly, floats beyond :data:`REL_TOL` /
    :data:`ABS_TOL`."""
    out = []
    for key in sorted(set(expected) | set(got)):
        path = f"{where}.{key}" if where else key
        if key not in got or key not in expected:
            out.append(f"{path}: only in {'fixture' if key in expected else 'this run'}")
            continue
        a, b = expected[key], got[key]
        if isinstance(a, dict) and isinstance(b, dict):
            out.extend(differences(a, b, path))
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            # per-minibatch statistics (grad_norms, update_norms): element by element
            items = {str(i): x for i, x in enumerate(a)}, {str(i): y for i, y in enumerate(b)}
            out.extend(differences(*items, path))
        elif isinstance(a, float) and isinstance(b, float):
            both_nan = math.isnan(a) and math.isnan(b)  # a step with no outcome (InT's patch)
            if not both_nan and not math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL):
                out.append(f"{path}: {a!r} != {b!r}")
        elif a != b:
            out.append(f"{path}: {a!r} != {b!r}")
    return out


def check_replay(method: str, replayed: Future | Path) -> None:
    """Compare the fixture of ``method`` with a replay: one run now in the folder ``replayed``,
    or the records of one already started (a future of :func:`replays`)."""
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("the fixtures were recorded on x86-64 AVX2 kernels, which this CPU lacks")
    expected = [json.loads(line) for line in fixture_path(method).read_text().splitlines()]
    if isinstance(replayed, Path):
        got = replay_records(method, replayed)
    else:
        got = replayed.result()
    assert len(got) == len(expected), f"{method}: {len(got)} records, fixture has {len(expected)}"
    for index, (a, b) in enumerate(zip(expected, got, strict=True)):
        assert not differences(a, b), f"{method} record {index}: {differences(a, b)[:8]}"


def test_every_registered_method_has_a_fixture():
    """Every method of this package has a fixture; a plugin installed beside it need not (its
    own repository keeps its fixtures), so it is left out."""
    from creditbench.methods.registry import list_methods, method_origin

    builtin = [name for name in list_methods() if method_origin(name).kind == "builtin"]
    assert sorted(builtin) == METHODS


def test_differences_sees_a_changed_value_and_a_missing_key():
    record = {"step": 1, "loss": 0.5, "time": {"eval": 1.0}, "adv_mean": 1e-8, "count": 64}
    assert differences(record, dict(record)) == []
    assert differences(record, {**record, "loss": 0.5001}) == ["loss: 0.5 != 0.5001"]
    assert differences(record, {**record, "loss": 0.500001, "adv_mean": -1e-8}) == []
    assert differences(record, {**record, "count": 65}) == ["count: 64 != 65"]
    assert differences(record, {**record, "time": {"eval": 1.1}}) == ["time.eval: 1.0 != 1.1"]
    assert differences(record, {k: v for k, v in record.items() if k != "loss"}) == [
        "loss: only in fixture"
    ]
    nan = {**record, "loss": math.nan}  # a step with no outcome records NaN: NaN matches only NaN
    assert differences(nan, dict(nan)) == []
    assert differences(nan, record) == ["loss: nan != 0.5"]
    # a list of per-minibatch floats is read element by element, by the same tolerance
    norms = {**record, "grad_norms": [0.2258211076, 0.1359195709]}
    assert differences(norms, {**norms, "grad_norms": [0.2258210629, 0.1359196156]}) == []
    assert differences(norms, {**norms, "grad_norms": [0.2258211076, 0.14]}) == [
        "grad_norms.1: 0.1359195709 != 0.14"
    ]
    assert differences(norms, {**norms, "grad_norms": [0.2258211076]}) != []


def test_grpo_replays(tmp_path):
    check_replay("grpo", tmp_path)


@pytest.fixture(scope="module")
def replays(request, tmp_path_factory):
    """The replay runs of the methods this session selected for :func:`test_method_replays`,
    started :data:`PARALLEL_REPLAYS` at a time in the order the tests will ask for them; each
    test waits for its own. Leaving the module cancels the runs not yet started."""
    selected = [
        item.callspec.params["method"]
        for item in request.session.items
        if item.originalname == "test_method_replays"
    ]
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        selected = []  # each test skips (check_replay): nothing to run
    pool = ThreadPoolExecutor(max_workers=PARALLEL_REPLAYS)
    futures = {
        method: pool.submit(replay_records, method, tmp_path_factory.mktemp(f"replay-{method}"))
        for method in selected
    }
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.slow
@pytest.mark.parametrize("method", [m for m in METHODS if m != "grpo"])
def test_method_replays(method, replays):
    check_replay(method, replays[method])
