"""Tasks: the synthetic testbed and real math data behind one registry.

``get_task("chain", steps=12)`` builds the testbed (options go to :class:`ChainConfig`);
``get_task("gsm8k")``, ``"math"`` and ``"math500"`` load real data (options go to
:class:`harness.tasks.math_data.MathTask`).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any


class UnknownTaskError(KeyError):
    """A task name nobody registered; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


def _chain(**options: Any):
    from creditbench.harness.tasks.chain import ChainConfig, ChainTask

    known = {f.name for f in fields(ChainConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(
            f"{unknown[0]}: unknown option of task chain; known: {', '.join(sorted(known))}"
        )
    return ChainTask(ChainConfig(**options))


def _math(name: str):
    def build(**options: Any):
        from creditbench.harness.tasks.math_data import MathTask

        known = ("source", "hub_config", "prompt_template", "limit", "timeout_s")
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(
                f"{unknown[0]}: unknown option of task {name}; known: {', '.join(known)}"
            )
        return MathTask(name, **options)

    return build


_TASKS = {
    "chain": (
        "synthetic multi-step arithmetic chains with step ground truth (the testbed)",
        _chain,
    ),
    "gsm8k": ("GSM8K grade-school word problems, train and test, answers '#### N'", _math("gsm8k")),
    "math": ("MATH competition problems, train and test, answers in \\boxed{}", _math("math")),
    "math500": ("MATH-500, the 500-problem test subset of MATH", _math("math500")),
}


def list_tasks() -> dict[str, str]:
    """Every task name with a one-line description."""
    return {name: description for name, (description, _) in _TASKS.items()}


def get_task(name: str, **options: Any):
    """The task ``name`` built with ``options``.

    Raises:
        UnknownTaskError: ``name`` is not registered.
        ValueError: an option is unknown or invalid (the message names it).
        MissingPackageError: a package the data source needs is not installed.
    """
    if name not in _TASKS:
        raise UnknownTaskError(f"unknown task {name!r}; known tasks: {', '.join(_TASKS)}")
    return _TASKS[name][1](**options)
