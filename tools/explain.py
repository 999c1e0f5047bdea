"""Several methods' credit on the same responses, for ``creditbench explain --methods``.

:func:`explain_methods` builds each method's trainer on one config and seed and takes its first
step's rollout and advantages without an update (:meth:`Trainer.credit_step`). The base policy
and the seed are shared, so methods that sample their batch the plain way draw the same
responses; a method whose rollout differs (resets, refills) has its own, and the picture says so
(:func:`leaderboard.explain.side_by_side`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from creditbench.harness.config import RunConfig
from creditbench.harness.diagnostics.explain import response_samples
from creditbench.harness.training.trainer import Trainer


def explain_methods(config: RunConfig, methods: list[str]) -> dict[str, list[dict[str, Any]]]:
    """``{method: samples of every response of its first batch}`` for each of ``methods``, all
    on ``config`` (its task, base policy, batch shape and seed); see the module docstring."""
    out = {}
    for name in methods:
        trainer = Trainer(replace(config, method=name, method_options={}))
        trainer.build()
        batch, advantages = trainer.credit_step()
        rows = list(range(batch.size))
        out[name] = response_samples(batch, advantages, trainer.tokenizer, rows=rows)
    return out
