"""Record the metrics of a short run of every registered method, for `tests/test_replay.py`.

A refactor of the harness must not change what a run computes. Each fixture is the
``metrics.jsonl`` of a two-step run on the chain testbed with the shipped "tiny" base policy,
with the wall-clock fields (``"time"``) removed; the replay test runs the same config on the
code under test and asks for the same records (counts exactly, floats to a tolerance: see
``tests/test_replay.py``).

PyTorch picks its vectorised kernels (and MKL its matmul paths) by the instruction set of the
machine, and AVX-512 kernels sum in another order than AVX2 ones (the update's loss and
gradient norm then differ in the eighth digit). So the fixture runs are recorded and replayed
in a child process pinned to the AVX2 kernels (:data:`PINNED_KERNELS`), which every x86-64
machine these tests run on has; that makes most records bit for bit across machines.

Regenerate only when a change is *meant* to alter what runs compute, and say so in the commit:

    python tests/replay_fixtures/make_replay_fixtures.py [method ...]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).parent

# Small enough for the test suite (a few seconds a method), big enough that every method's
# mechanism acts: failed and correct responses in most groups, two training steps of
# four optimizer steps each (two epochs over two minibatches: the ratio leaves 1 and clipping
# can act; the budget counts optimizer steps).
OVERRIDES = [
    "model.preset=tiny",
    "device=cpu",
    "rollout.prompts_per_step=4",
    "rollout.group_size=4",
    "train.ppo_epochs=2",
    "train.minibatches=2",
    "budget.unit=steps",
    "budget.amount=8",
    "budget.eval_fractions=[0.0, 1.0]",
    "eval.n_problems=8",
    "eval.k_samples=1",
    "eval.batch_size=16",
    "checkpoint_every=100",
]


# A method whose defaults would leave its mechanism idle in so short a run: InT repairs only
# the failures of unsolved groups, and the testbed's first batches have none.
METHOD_OVERRIDES = {"int": ["method_options.pool=all"]}
# Environment of the child process that runs a fixture run: ATen's and MKL's AVX2 kernels.
PINNED_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}
RECORDS = "replay_records.jsonl"  # what the child leaves in the work folder


def replay_records(method: str, workdir: Path) -> list[dict]:
    """The metrics of the fixture run of ``method`` in ``workdir``, without wall-clock fields,
    run in a child process on :data:`PINNED_KERNELS`."""
    child = subprocess.run(
        [sys.executable, __file__, "--records", method, str(workdir)],
        env={**os.environ, **PINNED_KERNELS},
        capture_output=True,
        text=True,
        check=False,
    )
    if child.returncode != 0:
        raise RuntimeError(f"fixture run of {method} failed:\n{child.stderr[-4000:]}")
    return [json.loads(line) for line in (workdir / RECORDS).read_text().splitlines()]


def _records_here(method: str, workdir: Path) -> list[dict]:
    """The fixture run itself, in this process."""
    from creditbench.harness.config import load_config
    from creditbench.harness.training.trainer import Trainer

    torch.set_num_threads(1)
    config = load_config(
        None,
        [
            f"method={method}",
            f"output_dir={workdir}",
            *OVERRIDES,
            *METHOD_OVERRIDES.get(method, []),
        ],
    )
    trainer = Trainer(config)
    trainer.train()
    lines = (trainer.run_dir.path / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    for record in records:
        record.pop("time", None)
    return records


def fixture_path(method: str) -> Path:
    return HERE / f"{method}.jsonl"


def main(methods: list[str]) -> None:
    from creditbench.methods.registry import list_methods

    for method in methods or list(list_methods()):
        with tempfile.TemporaryDirectory() as workdir:
            records = replay_records(method, Path(workdir))
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
        fixture_path(method).write_text(text)
        print(f"{method}: {len(records)} records")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--records"]:
        workdir = Path(sys.argv[3])
        records = _records_here(sys.argv[2], workdir)
        (workdir / RECORDS).write_text("".join(json.dumps(r) + "\n" for r in records))
    else:
        main(sys.argv[1:])
