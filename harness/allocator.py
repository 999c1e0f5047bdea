"""Keep freed memory in the process instead of handing it back to the OS after every step.

Sampling with a growing key/value cache allocates and frees tensors of a hundred MB and more per
generated token at evaluation batch sizes (256 prompts x 4 samples). glibc's malloc gives that
memory back to the OS and takes it again at the next token, paying a page fault for every page.
A 1 GiB top pad (``mallopt(M_TOP_PAD)``) keeps it in the heap; the sampled tokens do not change.
PyTorch's CPU tuning advice reaches for jemalloc or tcmalloc for the same reason; this needs
no extra library. Figures: docs/harness.md#performance.

Every ``creditbench`` command calls :func:`keep_freed_memory` first. It leaves the allocator
alone on anything but glibc, and when the environment already tunes it (any ``MALLOC_*``
variable, or ``LD_PRELOAD`` for another allocator): set ``MALLOC_TOP_PAD_=131072`` to get
glibc's default back.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TOP_PAD = -2  # mallopt parameter, from glibc's malloc.h
TOP_PAD_BYTES = 1 << 30

_setting = "default"


def keep_freed_memory() -> str:
    """Set glibc's top pad to 1 GiB where allowed; returns the setting now in force."""
    global _setting
    if not sys.platform.startswith("linux"):
        return _setting
    if "LD_PRELOAD" in os.environ or any(k.startswith("MALLOC_") for k in os.environ):
        return _setting
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (musl, ...)
        return _setting
    if mallopt(M_TOP_PAD, TOP_PAD_BYTES) == 1:
        _setting = f"glibc M_TOP_PAD {TOP_PAD_BYTES >> 20} MiB"
    return _setting


def allocator_setting() -> str:
    """What :func:`keep_freed_memory` did in this process ("default" when nothing)."""
    return _setting
