"""The processes of this machine a test looks for (``from processes import processes_mentioning``):
a command that must stop its children is checked by what is still running."""

from __future__ import annotations

from pathlib import Path


def processes_mentioning(text: str) -> list[int]:
    """The ids of the processes whose command line contains ``text`` (from ``/proc``)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids
