"""Shared test settings: Hypothesis profiles, one torch thread, a fixed seed per test.

Profiles: ``ci`` (200 examples per property, the same examples on every run, no example
database, no deadline) and ``dev`` (50, no deadline: shared CPUs make timings noisy).
``HYPOTHESIS_PROFILE`` picks one; otherwise ``ci`` when ``CI`` is set, ``dev`` when not.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)

# Tiny tensors: more threads only add contention on shared cores.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _fixed_torch_seed() -> None:
    torch.manual_seed(0)
