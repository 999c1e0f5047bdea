"""The GPU check script (``scripts/gpu_check.sh``): what a CPU can check of it. Without a GPU,
its CUDA checks say so and it exits 1; with ``--device cpu`` every check (SmolLM2 written as a
transformers folder, two builtin GRPO steps on GSM8K, two steps of the TRL adapter with tempo)
passes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_unknown_checks_are_a_usage_error():
    with pytest.raises(SystemExit) as exit_info:
        _module().main(["--only", "model,nosuch"])
    assert exit_info.value.code == 2


def test_the_vllm_check_is_cuda_only():
    with pytest.raises(SystemExit) as exit_info:
        _module().main(["--device", "cpu", "--only", "vllm"])
    assert exit_info.value.code == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_without_a_gpu_the_cuda_checks_are_skipped_with_the_reason(tmp_path, capsys):
    assert _module().main(["--only", "builtin,trl,vllm", "--out", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[1:]] == [
        ["SKIP", "builtin"],
        ["SKIP", "trl"],
        ["SKIP", "vllm"],
    ]
    assert all("no CUDA GPU" in line for line in lines[1:])


@pytest.mark.slow
def test_every_check_passes_on_the_cpu(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    lines = [line for line in done.stdout.splitlines() if line[:4] in ("PASS", "FAIL", "SKIP")]
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert [line.split()[:2] for line in lines] == [
        ["PASS", "model"],
        ["PASS", "builtin"],
        ["PASS", "trl"],
    ]
    assert (tmp_path / "smollm2" / "model.safetensors").is_file()
