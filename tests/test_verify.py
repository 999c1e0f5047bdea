"""`creditbench verify`: the comparison of a run's records with its re-run, the CPU fields of
environment.json it reads, and the verb's refusals."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from creditbench.harness.records.provenance import capture_environment

# --- environment.json ---------------------------------------------------------------------------


def test_environment_records_the_cpu_and_its_kernels(monkeypatch):
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.setenv("MKL_CBWR", "AVX2")
    env = capture_environment()
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert env["kernel_pins"] == {"MKL_CBWR": "AVX2"}
    cpuinfo = Path("/proc/cpuinfo")
    names = [
        line.partition(":")[2].strip()
        for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
        if line.partition(":")[0].strip() == "model name"
    ]
    if names:
        assert env["cpu_model"] == names[0]
    json.dumps(env)
