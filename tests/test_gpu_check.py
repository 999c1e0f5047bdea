"""The GPU check script (``scripts/gpu_check.sh``): what a CPU can check of it. Without a GPU,
its CUDA checks say so and it exits 1; with ``--device cpu`` every check a CPU can run (SmolLM2
written as a transformers folder, two builtin GRPO steps on GSM8K, two steps of the TRL adapter
with tempo, greedy samples that change after an update) passes, and the CUDA-only one (TRL with
vLLM colocated) is listed as skipped with the reason."""

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


def test_trl_with_vllm_is_cuda_only():
    with pytest.raises(SystemExit) as exit_info:
        _module().main(["--device", "cpu", "--only", "trl_vllm"])
    assert exit_info.value.code == 2


def _status_lines(text: str) -> list[list[str]]:
    return [line.split()[:2] for line in text.splitlines() if line[:4] in ("PASS", "FAIL", "SKIP")]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_without_a_gpu_the_cuda_checks_are_skipped_with_the_reason(tmp_path, capsys):
    only = "builtin,trl,cycle,trl_vllm"
    assert _module().main(["--only", only, "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert _status_lines(out) == [["SKIP", name] for name in only.split(",")]
    assert all("no CUDA GPU" in line for line in out.splitlines()[2:])
    # the versions it runs with, before the checks
    assert out.splitlines()[1].startswith("versions: torch ")
    assert f"torch {torch.__version__}" in out


@pytest.mark.slow
def test_every_check_passes_on_the_cpu(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert _status_lines(done.stdout) == [
        ["PASS", "model"],
        ["PASS", "builtin"],
        ["PASS", "trl"],
        ["PASS", "cycle"],
        ["SKIP", "trl_vllm"],  # listed with the reason, not a failure on a CPU
    ]
    assert "vLLM runs on a CUDA GPU only" in done.stdout
    assert "greedy samples differ after" in done.stdout
    assert " s)" in done.stdout  # step times
    assert (tmp_path / "smollm2" / "model.safetensors").is_file()
