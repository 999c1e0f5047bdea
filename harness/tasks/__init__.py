"""Tasks: the synthetic testbed and real math data behind one registry (:mod:`.registry`).

``get_task("chain", steps=12)`` builds the testbed (options go to :class:`ChainConfig`);
``get_task("gsm8k")``, ``"math"`` and ``"math500"`` load real data (options go to
:class:`harness.tasks.math_data.MathTask`). A task of one's own registers a builder with
`register_task`, or as a plugin through the ``creditbench.tasks`` entry point, as a method does.
"""

from __future__ import annotations

from .registry import (
    ENTRY_POINT_GROUP,
    UnknownTaskError,
    get_task,
    list_tasks,
    register_task,
    task_origin,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "UnknownTaskError",
    "get_task",
    "list_tasks",
    "register_task",
    "task_origin",
]
