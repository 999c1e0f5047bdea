"""Provenance of a run: the software environment it ran in, and its random-number state.

:func:`capture_environment` goes into ``environment.json``; :func:`capture_rng_state` and
:func:`restore_rng_state` put every RNG stream (python, numpy, torch CPU and CUDA, and any named
``torch.Generator``) into a checkpoint and back, so a resumed run draws the same numbers.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import random
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from creditbench.harness.allocator import allocator_setting


def _git_state(package_dir: Path) -> tuple[str | None, bool | None]:
    """(commit, uncommitted changes?) of the source tree this package runs from; None if unknown."""

    def git(*args: str) -> str:
        result = subprocess.run(
            ["git", "-C", str(package_dir), *args], capture_output=True, text=True, timeout=10
        )
        if result.returncode != 0:
            raise OSError(result.stderr)
        return result.stdout.strip()

    try:
        top = Path(git("rev-parse", "--show-toplevel")).resolve()
        # Installed inside somebody else's repository (a venv in a project) is not our commit.
        if not (top / "pyproject.toml").exists() or package_dir.resolve().parent != top:
            return None, None
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, dirty


def method_plugins() -> dict[str, str]:
    """``{distribution: version}`` of every installed distribution that declares a
    ``creditbench.methods`` entry point: the outside methods a run could have used."""
    out = {}
    for entry_point in importlib.metadata.entry_points(group="creditbench.methods"):
        dist = entry_point.dist
        if dist is not None:
            out[dist.name] = dist.version
    return dict(sorted(out.items()))


# The environment variables that pin the CPU kernels a run computes with: ATen's vectorised
# kernels and MKL's matmul paths otherwise follow the machine's best instruction set, and sum in
# another order on another CPU (the replay tests pin them: tests/replay_fixtures).
KERNEL_PIN_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR")


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo`` where the system has one, else what the
    platform reports), None when neither says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def kernel_pins() -> dict[str, str]:
    """The kernel-pinning variables set in this process's environment (none by default)."""
    return {name: os.environ[name] for name in KERNEL_PIN_VARIABLES if name in os.environ}


def capture_environment() -> dict[str, Any]:
    """Versions, git commit, device, threads and CPU kernels: what a reader needs to rerun a
    run and to know why its float statistics may differ in the last digits on another CPU
    (``cpu_capability`` is the instruction set torch's CPU kernels use, ``kernel_pins`` the
    variables that chose it, if any)."""
    packages: dict[str, str | None] = {}
    for name in ("creditbench", "torch", "transformers", "tokenizers", "datasets", "numpy"):
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            packages[name] = None
    cuda = torch.cuda.is_available()
    commit, dirty = _git_state(Path(__file__).parents[1])  # harness/, a room of the checkout
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": packages,
        "method_plugins": method_plugins(),
        "git_commit": commit,
        "git_dirty": dirty,
        "device": torch.cuda.get_device_name(0) if cuda else (platform.processor() or "cpu"),
        "cuda": torch.version.cuda if cuda else None,
        "torch_threads": torch.get_num_threads(),
        "allocator": allocator_setting(),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "kernel_pins": kernel_pins(),
    }


def capture_rng_state(generators: Mapping[str, torch.Generator] | None = None) -> dict[str, Any]:
    """Python, numpy, torch CPU and CUDA RNG states, plus any named ``torch.Generator``."""
    version, internal, gauss = random.getstate()
    numpy_state: dict[str, Any] = np.random.get_state(legacy=False)  # type: ignore[assignment]
    numpy_state["state"]["key"] = numpy_state["state"]["key"].tolist()
    return {
        "python": [version, list(internal), gauss],
        "numpy": numpy_state,
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "generators": {name: g.get_state() for name, g in (generators or {}).items()},
    }


def restore_rng_state(
    state: dict[str, Any], generators: Mapping[str, torch.Generator] | None = None
) -> None:
    """Inverse of :func:`capture_rng_state`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy_state = dict(state["numpy"])
    numpy_state["state"] = dict(numpy_state["state"])
    numpy_state["state"]["key"] = np.asarray(numpy_state["state"]["key"], dtype=np.uint32)
    np.random.set_state(numpy_state)
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    for name, g in (generators or {}).items():
        if name not in state.get("generators", {}):
            raise KeyError(f"no saved RNG state for generator {name!r}")
        g.set_state(state["generators"][name])
