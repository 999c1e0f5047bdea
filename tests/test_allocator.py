"""The allocator setting every ``creditbench`` command applies: glibc's top pad, unless the
environment already tunes malloc; it is recorded in each run's environment."""

from __future__ import annotations

import os
import sys

import pytest

from creditbench.harness import allocator
from creditbench.harness.records.provenance import capture_environment

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")


def test_top_pad_is_set_on_glibc_and_recorded_in_the_run_environment(monkeypatch):
    monkeypatch.setattr(allocator, "_setting", "default")
    for key in os.environ:
        if key.startswith("MALLOC_") or key == "LD_PRELOAD":
            monkeypatch.delenv(key)
    assert allocator.keep_freed_memory() == "glibc M_TOP_PAD 1024 MiB"
    assert allocator.allocator_setting() == "glibc M_TOP_PAD 1024 MiB"
    assert capture_environment()["allocator"] == "glibc M_TOP_PAD 1024 MiB"


@pytest.mark.parametrize("variable", ["MALLOC_TOP_PAD_", "MALLOC_ARENA_MAX", "LD_PRELOAD"])
def test_an_environment_that_tunes_malloc_is_left_alone(monkeypatch, variable):
    monkeypatch.setattr(allocator, "_setting", "default")
    monkeypatch.setenv(variable, "131072" if variable.startswith("MALLOC") else "")
    assert allocator.keep_freed_memory() == "default"
    assert capture_environment()["allocator"] == "default"
