"""The training loop: rollouts, advantages, PPO-style updates, evaluation, checkpoints.

One step::

    batch = method.rollout(services)           # G responses per prompt, behaviour log-probs
    adv = method.advantages(batch, services)   # [B, T]; extra passes are charged by services
    for epoch, minibatch, micro-batch:         # PPO update, global normalizers per minibatch
        loss = method.loss(logprobs, micro, adv, normalizers); loss.backward()
        clip gradients; AdamW step

until the budget meter says the budget is spent; evaluations at fixed fractions of the budget
and, where the config asks, at counts of trained responses (``budget.eval_responses``).

Determinism: every random draw is seeded from ``(run seed, step, ...)`` (prompts, sampling,
minibatch order), so the same config and seed give the same ``metrics.jsonl`` and a resumed run
continues exactly as an uninterrupted one; wall-clock fields live under ``"time"``. The model
stays in eval mode (no dropout), so the training pass and the scoring pass agree and the first
epoch's importance ratio is exactly 1. Beside the loop: what watches a step (``observers.py``:
its clock, its record), the evaluations it logs (``evaluation.py``), its checkpoints.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from creditbench.harness.budget import crossed_marks
from creditbench.harness.config import ConfigError, RunConfig, from_dict, resolve_run, to_dict
from creditbench.harness.records.rundir import (
    MetricsLogger,
    RunDir,
    capture_environment,
    check_creatable,
    check_not_inside_a_run,
)
from creditbench.harness.records.summary import default_run_name, run_summary
from creditbench.harness.sampling.rollout import derive_seed, sequence_lengths
from creditbench.harness.services.step_plan import StepPlan
from creditbench.harness.training.checkpoints import restore, save_checkpoint
from creditbench.harness.training.evaluation import log_evaluations
from creditbench.harness.training.observers import (
    RecordLogger,
    StepTimer,
    log_responses,
    step_record,
)
from creditbench.harness.training.ppo import NonFiniteError, check_advantages, ppo_update
from creditbench.harness.training.setup import build_models, check_run, load_task, resolve_device
from creditbench.methods.base import CreditMethod
from creditbench.methods.core import RolloutBatch

__all__ = ["NonFiniteError", "Trainer", "default_run_name", "run_path"]


def run_path(config: RunConfig) -> Path:
    return Path(config.output_dir) / default_run_name(config)


class Trainer:
    """Trains one method on one task under one budget. See the module docstring.

    ``Trainer(config)`` resolves the config once (:func:`~creditbench.harness.config.resolve_run`)
    and validates everything a user can get wrong (method, its options, the task, the extras the
    method needs), raising :class:`ConfigError` before anything is written; :meth:`train` then
    builds the models (:meth:`build`) and runs.
    """

    def __init__(self, config: RunConfig, run_dir: RunDir | str | Path | None = None) -> None:
        resolved = resolve_run(config)
        self.config = resolved.config
        self.device = resolve_device(self.config.device)
        self.task = load_task(self.config)
        check_run(self.config, resolved.method_cls, self.task)
        self.method: CreditMethod = resolved.method_cls(resolved.method_config)
        if isinstance(run_dir, RunDir):
            self.run_dir = run_dir
        else:
            self.run_dir = RunDir(run_dir if run_dir is not None else run_path(self.config))
        check_creatable(self.run_dir.path, "output_dir")
        check_not_inside_a_run(self.run_dir.path, "output_dir")
        self.run_dir.check_config(to_dict(self.config))  # a finished run of another config too
        self.run_dir.check_no_links()  # before the first write, not at it

    # The evaluation at budget fraction 0 grades the base policy, the same for every method at
    # a seed: taken from the cache when an identical one ran before (False: always computed,
    # as `creditbench perf --phases` does for the path before the cache)
    reuse_initial_evaluation = True

    @classmethod
    def resume(cls, run_dir: RunDir | str | Path) -> Trainer:
        """A trainer for the run in ``run_dir``, with the config saved there."""
        run_dir = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
        if not run_dir.exists():
            raise ConfigError(f"--resume: {run_dir.path} holds no run (no config.yaml)")
        return cls(from_dict(RunConfig, run_dir.config()), run_dir)

    def build(self) -> None:
        """Load the models and services (:func:`~creditbench.harness.training.setup.build_models`)
        and start at step 0."""
        models = build_models(self.config, self.task, self.device, self.method)
        self.policy, self.tokenizer = models.policy, models.tokenizer
        self.optimizer, self.meter = models.optimizer, models.meter
        self.services, self.micro_batch_size = models.services, models.micro_batch_size
        self.step = 0
        self.responses_trained = 0  # the steps' trained responses so far (budget.eval_responses)
        self.evals: list[dict[str, Any]] = []  # the evaluations at budget fractions
        self.last_credit: tuple[RolloutBatch, torch.Tensor] | None = None  # for responses.jsonl

    # --- the loop ---------------------------------------------------------------------------

    def train(self, on_record: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Run (or continue) to the end of the budget; returns the summary.

        ``on_record`` is called with every metrics record written (for progress bars). The
        run's writer lock is held throughout: a second writer of the same run directory gets
        `RunLockedError` naming this one.
        """
        if (summary := self.run_dir.read_summary()) is not None:
            return summary
        # the highest folder this run creates: removed again when the run fails before its
        # first record (a model that cannot be loaded), so a refused run leaves nothing behind
        created = self.run_dir.path.absolute()
        while not created.parent.exists():
            created = created.parent
        fresh = not created.exists()
        try:
            with self.run_dir.lock():
                return self._train(on_record)
        except BaseException:
            if fresh and not self.run_dir.metrics_path.exists():
                shutil.rmtree(created, ignore_errors=True)
            raise

    def _train(self, on_record: Callable[[dict[str, Any]], None] | None) -> dict[str, Any]:
        """:meth:`train` under the writer lock."""
        if (summary := self.run_dir.read_summary()) is not None:  # finished while we waited
            return summary
        started = time.perf_counter()
        self.run_dir.create(to_dict(self.config), capture_environment())
        self.build()
        restore(self)
        logger = RecordLogger(MetricsLogger(self.run_dir, purge_step=self.step + 1), on_record)
        try:
            fractions = list(self.config.budget.eval_fractions)
            counts = list(self.config.budget.eval_responses)
            if self.step == 0 and not self.evals:
                log_evaluations(self, logger, self.meter.fraction_crossed(None, fractions))
            while not self.meter.exhausted():
                before, responses_before = self.meter.fraction(), self.responses_trained
                try:
                    record = self.train_step()
                except NonFiniteError as err:
                    self.run_dir.write_summary(
                        self._summary(started, status="non-finite", error=str(err))
                    )
                    raise
                logger.log(record)
                self.responses_trained += int(record["responses"])
                due = self.meter.fraction_crossed(before, fractions)
                if self.meter.exhausted() and not due:
                    due = [1.0]  # the step that spends the budget is always evaluated
                passed = crossed_marks(responses_before, self.responses_trained, counts)
                if log_evaluations(self, logger, due, [int(n) for n in passed]):
                    log_responses(self.run_dir, self.step, self.last_credit, self.tokenizer)
                if self.step % self.config.checkpoint_every == 0 or self.meter.exhausted():
                    save_checkpoint(self)
            summary = self._summary(started)
            self.run_dir.write_summary(summary)
        finally:
            logger.close()
        return summary

    def train_step(self, method: CreditMethod | None = None) -> dict[str, Any]:
        """One step (rollout, advantages, update) and its metrics record. ``method`` runs
        another method's step on the same models (``creditbench perf``); default the run's."""
        method = method or self.method
        services = self.services
        plan = self._begin_step(method)
        timer = StepTimer(services, self.meter)
        with self.meter.clock():
            with timer.phase("rollout"):
                batch = method.rollout(services)
            with timer.phase("advantages"):
                advantages = method.advantages(batch, services)
            with timer.phase("update"):
                check_advantages(method, batch, advantages, self.step + 1)
                self.last_credit = (batch, advantages)
                stats = self.update(method, batch, advantages, plan)
                # once per rollout step, after its last optimizer step: the EMA teacher moves as
                # SDPO's code moves it (once per update_policy), and a vLLM sampler gets the
                # weights it next generates with
                services.on_policy_updated()
                services.end_step()
        self.step += 1
        record = step_record(self.step, self.meter, services, method, batch, advantages, stats)
        record["time"] = timer.record()
        return record

    def credit_step(self, method: CreditMethod | None = None) -> tuple[RolloutBatch, torch.Tensor]:
        """The rollout and advantages of the next step, with no update (``creditbench
        explain``): what ``method`` (default the run's) would train on and with what credit."""
        method = method or self.method
        self._begin_step(method)
        batch = method.rollout(self.services)
        advantages = method.advantages(batch, self.services)
        check_advantages(method, batch, advantages, self.step + 1)
        return batch, advantages

    def _begin_step(self, method: CreditMethod) -> StepPlan:
        """The step's plan (which passes its batches get), handed to the services."""
        plan = StepPlan.for_method(self.step, method, self.config.train)
        self.services.begin_step(plan)
        return plan

    def update(
        self,
        method: CreditMethod,
        batch: RolloutBatch,
        advantages: torch.Tensor,
        plan: StepPlan | None = None,
    ) -> dict[str, Any]:
        """The PPO-style update of ``method``'s loss on one batch (:func:`ppo_update`)."""
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        lengths = batch.prompt_mask.sum(-1).long() + sequence_lengths(batch.response_ids, eos, pad)
        return ppo_update(
            self.policy,
            self.optimizer,
            method,
            batch,
            advantages,
            train=self.config.train,
            micro_batch_size=self.micro_batch_size,
            temperature=self.config.rollout.temperature,
            meter=self.meter,
            lengths=lengths,
            seed=derive_seed(self.config.seed, "minibatch", self.step),
            step=self.step + 1,
            services=self.services,
            behaviour_from_update=plan is not None and plan.behaviour_from_update,
        )

    def _summary(self, started: float, *, status: str = "finished", error: str | None = None):
        seconds = time.perf_counter() - started
        return run_summary(self.config, steps=self.step, meter=self.meter, evals=self.evals,
                           wall_seconds=seconds, status=status, error=error)  # fmt: skip
