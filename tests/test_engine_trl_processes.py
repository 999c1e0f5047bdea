"""The TRL adapter on two processes (``torchrun``, CPU, gloo): every process runs the method on
the whole gathered batch, and each scores only its share of the rows; the shares, gathered,
equal one process scoring them all, and the processes agree on the advantages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engines

SCRIPT = Path(__file__).with_name("trl_processes.py")


@pytest.mark.parametrize("method", ["otb", "scapo"])  # behaviour statistics; prompt variants
def test_two_processes_split_every_scoring_pass_and_agree_on_the_credit(tmp_path, method):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    launch = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    command = [sys.executable, *launch]
    done = subprocess.run(
        [*command, str(SCRIPT), method, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = (json.loads((tmp_path / f"process-{k}.json").read_text()) for k in (0, 1))
    assert first["batch_size"] == second["batch_size"] == 8  # 4 completions from each process
    for record in (first, second):
        # the behaviour pass (and SCAPO's variant passes) took this process's 4 rows, not 8
        assert record["scored_rows"] and set(record["scored_rows"]) == {4}
        assert record["behaviour_gap"] < 1e-5 and record["variant_gap"] < 1e-5
        assert record.get("statistics_gap", 0.0) < 1e-5
    assert first["advantages"] == second["advantages"]
