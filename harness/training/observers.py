"""What watches a training step without taking part in it: its clock, its metrics record (the
batch's statistics, the update's, what the method reported, the credit diagnostics) and the
logger the records go to. The trainer's step reads as rollout, advantages, update; these say
what it cost and what it did.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from creditbench.harness.budget import BudgetMeter
from creditbench.harness.diagnostics.explain import response_samples
from creditbench.harness.diagnostics.step import (
    batch_statistics,
    drawn_statistics,
    step_diagnostics,
)
from creditbench.harness.records.rundir import MetricsLogger, RunDir
from creditbench.harness.records.summary import budget_fields
from creditbench.methods.base import CreditMethod
from creditbench.methods.core import RolloutBatch


class StepTimer:
    """The wall clock of a step's phases (``rollout``, ``advantages``, ``update``), with what
    the services spent inside them: the advantages' own passes (``advantage_passes``, which
    ``advantages`` excludes), generation and scoring, and the budget meter's clock."""

    def __init__(self, services: Any, meter: BudgetMeter) -> None:
        self.services, self.meter = services, meter
        self.services_before = dict(services.seconds)
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        inner, started = sum(self.services.seconds.values()), time.perf_counter()
        yield
        self.seconds[name] = time.perf_counter() - started
        if name == "advantages":  # the passes a method asked for are timed apart
            passes = sum(self.services.seconds.values()) - inner
            self.seconds["advantages"] -= passes
            self.seconds["advantage_passes"] = passes

    def record(self) -> dict[str, float]:
        """The step's ``"time"`` fields."""
        timing = dict(self.seconds)
        timing["step"] = sum(timing.values())
        for key in ("generation", "scoring"):
            timing[key] = self.services.seconds[key] - self.services_before[key]
        timing["budget_seconds"] = self.meter.seconds
        if self.meter.reference["flops"]:  # a reference method's uncharged passes, wall clock
            timing["reference_seconds"] = self.meter.reference["seconds"]
        return timing


def step_record(
    step: int,
    meter: BudgetMeter,
    services: Any,
    method: CreditMethod,
    batch: RolloutBatch,
    advantages: torch.Tensor,
    update: dict[str, Any],
) -> dict[str, Any]:
    """A step's metrics record, in the order a reader takes it: the budget, the batch, the
    update, what the method reported, then the credit diagnostics."""
    # per-optimizer-step lists (grad_norms, update_norms) stay lists
    update = {key: v if isinstance(v, list) else float(v) for key, v in update.items()}
    record: dict[str, Any] = {"step": step, **budget_fields(meter)}
    record.update(batch_statistics(batch, advantages))
    record.update(drawn_statistics(services.drawn_rewards))  # the online accuracy
    record.update(update)
    record.update(services.stats)  # what the method reported this step
    # A measurement, so a loss that runs a model pass of its own (SDPO's top-K) is not
    # charged for it here.
    with meter.outside_budget():
        record.update(
            step_diagnostics(
                batch,
                advantages,
                lambda logprobs: method.loss(logprobs, batch, advantages, services=services)[0],
            )
        )
    return record


class RecordLogger:
    """The run's metrics logger plus an optional callback (a progress bar)."""

    def __init__(
        self, logger: MetricsLogger, callback: Callable[[dict[str, Any]], None] | None
    ) -> None:
        self.logger, self.callback = logger, callback

    def log(self, record: dict[str, Any]) -> None:
        self.logger.log(record)
        if self.callback is not None:
            self.callback(record)

    def close(self) -> None:
        self.logger.close()


def log_responses(
    run_dir: RunDir,
    step: int,
    credit: tuple[RolloutBatch, torch.Tensor] | None,
    tokenizer: Any,
) -> None:
    """The responses of the batch just trained on, with their advantages, for ``explain``."""
    assert credit is not None, "logged after a training step only"
    batch, advantages = credit
    run_dir.append_responses(
        {"step": step, "responses": response_samples(batch, advantages, tokenizer)}
    )
