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
epoch's importance ratio is exactly 1.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from creditbench.harness.budget import crossed_marks
from creditbench.harness.config import ConfigError, RunConfig, from_dict, resolve_run, to_dict
from creditbench.harness.diagnostics.explain import response_samples
from creditbench.harness.diagnostics.step import (
    batch_statistics,
    drawn_statistics,
    step_diagnostics,
)
from creditbench.harness.records.rundir import (
    MetricsLogger,
    RunDir,
    RunDirError,
    capture_environment,
    check_creatable,
    check_not_inside_a_run,
    config_differences,
    restore_rng_state,
)
from creditbench.harness.records.summary import budget_fields, default_run_name, run_summary
from creditbench.harness.sampling.rollout import derive_seed, sequence_lengths
from creditbench.harness.services.step_plan import StepPlan
from creditbench.harness.training.evaluation import (
    evaluate,
    evaluation_settings,
    initial_evaluation_material,
    reuse_initial_evaluation,
)
from creditbench.harness.training.ppo import NonFiniteError, check_finite, ppo_update
from creditbench.harness.training.setup import (
    build_models,
    check_run,
    load_task,
    resolve_device,
)
from creditbench.methods.base import CreditMethod
from creditbench.methods.core import RolloutBatch

__all__ = ["NonFiniteError", "Trainer", "default_run_name", "run_path"]


def run_path(config: RunConfig) -> Path:
    return Path(config.output_dir) / default_run_name(config)


class _Logger:
    """The run's metrics logger plus an optional callback."""

    def __init__(self, logger: MetricsLogger, callback) -> None:
        self.logger, self.callback = logger, callback

    def log(self, record: dict[str, Any]) -> None:
        self.logger.log(record)
        if self.callback is not None:
            self.callback(record)

    def close(self) -> None:
        self.logger.close()


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
        self.task = load_task(self.config)
        check_run(self.config, resolved.method_cls, self.task)
        self.method: CreditMethod = resolved.method_cls(resolved.method_config)
        if not isinstance(run_dir, RunDir):
            run_dir = RunDir(run_dir if run_dir is not None else run_path(self.config))
        self.run_dir = run_dir
        check_creatable(run_dir.path, "output_dir")
        check_not_inside_a_run(run_dir.path, "output_dir")
        run_dir.check_config(to_dict(self.config))  # a finished run of another config too
        run_dir.check_no_links()  # before the first write, not at it
        self.device = resolve_device(self.config.device)

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
        models = build_models(self.config, self.task, self.device)
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
        self._restore()
        logger = _Logger(MetricsLogger(self.run_dir, purge_step=self.step + 1), on_record)
        try:
            fractions = list(self.config.budget.eval_fractions)
            counts = list(self.config.budget.eval_responses)
            if self.step == 0 and not self.evals:
                self._evaluate(logger, self.meter.fraction_crossed(None, fractions))
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
                if self._evaluate(logger, due, [int(n) for n in passed]):
                    self._log_responses()
                if self.step % self.config.checkpoint_every == 0 or self.meter.exhausted():
                    self._checkpoint()
            summary = self._summary(started)
            self.run_dir.write_summary(summary)
        finally:
            logger.close()
        return summary

    def train_step(self, method: CreditMethod | None = None) -> dict[str, Any]:
        """One step (rollout, advantages, update) and its metrics record. ``method`` runs
        another method's step on the same models (``creditbench perf``); default the run's."""
        method = method or self.method
        services, meter = self.services, self.meter
        plan = self._begin_step(method)
        seconds_before = dict(services.seconds)
        timing: dict[str, float] = {}
        with meter.clock():
            t0 = time.perf_counter()
            batch = method.rollout(services)
            t1 = time.perf_counter()
            inner = sum(services.seconds.values())
            advantages = method.advantages(batch, services)
            t2 = time.perf_counter()
            extra_passes = sum(services.seconds.values()) - inner
            self._check_advantages(method, batch, advantages)
            self.last_credit = (batch, advantages)
            stats = self.update(method, batch, advantages, plan)
            # once per rollout step, after its last optimizer step: the EMA teacher moves as
            # SDPO's code moves it (once per update_policy), and a vLLM sampler gets the weights
            # it next generates with
            services.on_policy_updated()
            services.end_step()
            t3 = time.perf_counter()
        self.step += 1
        timing = {
            "rollout": t1 - t0,
            "advantages": t2 - t1 - extra_passes,
            "advantage_passes": extra_passes,
            "update": t3 - t2,
            "step": t3 - t0,
        }
        for key in ("generation", "scoring"):
            timing[key] = services.seconds[key] - seconds_before[key]
        timing["budget_seconds"] = meter.seconds
        if meter.reference["flops"]:  # a reference method's uncharged passes, wall clock
            timing["reference_seconds"] = meter.reference["seconds"]
        return self._step_record(method, batch, advantages, stats, timing)

    def credit_step(self, method: CreditMethod | None = None) -> tuple[RolloutBatch, torch.Tensor]:
        """The rollout and advantages of the next step, with no update (``creditbench
        explain``): what ``method`` (default the run's) would train on and with what credit."""
        method = method or self.method
        self._begin_step(method)
        batch = method.rollout(self.services)
        advantages = method.advantages(batch, self.services)
        self._check_advantages(method, batch, advantages)
        return batch, advantages

    def _begin_step(self, method: CreditMethod) -> StepPlan:
        """The step's plan (which passes its batches get), handed to the services."""
        plan = StepPlan.for_method(self.step, method, self.config.train)
        self.services.begin_step(plan)
        return plan

    def _check_advantages(self, method: CreditMethod, batch: RolloutBatch, advantages) -> None:
        name = method.name or type(method).__name__
        if advantages.shape != batch.response_mask.shape:
            raise ValueError(
                f"method {name!r}: advantages have shape {tuple(advantages.shape)}, "
                f"expected {tuple(batch.response_mask.shape)}"
            )
        check_finite(advantages, "advantage tensor", name, self.step + 1)

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

    def _step_record(self, method, batch, advantages, stats, timing) -> dict[str, Any]:
        # per-optimizer-step lists (grad_norms, update_norms) stay lists
        update = {key: v if isinstance(v, list) else float(v) for key, v in stats.items()}
        record: dict[str, Any] = {"step": self.step, **budget_fields(self.meter)}
        record.update(batch_statistics(batch, advantages))
        record.update(drawn_statistics(self.services.drawn_rewards))  # the online accuracy
        record.update(update)
        record.update(self.services.stats)  # what the method reported this step
        # A measurement, so a loss that runs a model pass of its own (SDPO's top-K) is not
        # charged for it here.
        with self.meter.outside_budget():
            record.update(
                step_diagnostics(
                    batch,
                    advantages,
                    lambda logprobs: method.loss(
                        logprobs, batch, advantages, services=self.services
                    )[0],
                )
            )
        record["time"] = timing
        return record

    # --- evaluation, checkpoints, summary -----------------------------------------------------

    def _evaluate(
        self, logger: _Logger, fractions: list[float], counts: Sequence[int] = ()
    ) -> bool:
        """Evaluate the policy once and log it as the evaluation at each budget fraction in
        ``fractions`` (``"fraction"``, kept in :attr:`evals`) and at each count of trained
        responses in ``counts`` (``"responses"``: the leaderboard tells the two apart by it);
        whether anything was due."""
        if not fractions and not counts:
            return False
        engine = self.config.rollout.backend if self.services.sampler is None else "auto"
        settings = evaluation_settings(self.config, engine)
        started = time.perf_counter()

        def compute() -> dict[str, Any]:
            with self.meter.outside_budget():
                return evaluate(self.policy, self.tokenizer, self.task, **settings)

        material = None
        if self.reuse_initial_evaluation and self.meter.counters()["flops"] == 0:
            # the base policy, as every method's run at this seed grades it: computed once
            material = initial_evaluation_material(
                self.policy, self.tokenizer, self.task, settings, capture_environment()
            )
        result, reused = reuse_initial_evaluation(material, compute)
        timing: dict[str, Any] = {"eval": time.perf_counter() - started}
        if reused:
            timing["eval_reused"] = True
        for fraction in fractions:
            entry = {"fraction": fraction, **budget_fields(self.meter), **result}
            entry["step"] = self.step
            self.evals.append(entry)
            logger.log({"step": self.step, "eval": entry, "time": timing})
        for count in counts:
            entry = {"responses": count, **budget_fields(self.meter), **result}
            entry["step"] = self.step
            logger.log({"step": self.step, "eval": entry, "time": timing})
        return True

    def _log_responses(self) -> None:
        """The responses of the batch just trained on, with their advantages, for ``explain``."""
        assert self.last_credit is not None, "logged after a training step only"
        batch, advantages = self.last_credit
        samples = response_samples(batch, advantages, self.tokenizer)
        self.run_dir.append_responses({"step": self.step, "responses": samples})

    def _trainer_state(self) -> dict[str, Any]:
        # the config the checkpoint was trained under: a resume refuses a config.yaml edited
        # since (a run that silently mixed two learning rates is no run of either)
        config = json.loads(json.dumps(to_dict(self.config)))
        return {"step": self.step, "meter": self.meter.state_dict(), "evals": self.evals,
                "responses_trained": self.responses_trained, "config": config}  # fmt: skip

    def _checkpoint(self) -> None:
        self.run_dir.save_checkpoint(
            self.step,
            model=self.policy,
            tokenizer=self.tokenizer,
            optimizer_state=self.optimizer.state_dict(),
            trainer_state=self._trainer_state(),
            auxiliary_state=self.services.scorers.auxiliary_state(),
        )

    def _restore(self) -> None:
        """Continue from the latest complete checkpoint, or start over if there is none."""
        latest = self.run_dir.latest_checkpoint()
        if latest is None:
            self.run_dir.truncate_metrics(-1)
            return
        saved = self.run_dir.load_checkpoint(latest)
        state = saved.get("trainer_state")
        self._check_unchanged(state.get("config") if isinstance(state, dict) else None, latest)
        from safetensors import SafetensorError
        from safetensors.torch import load_model

        try:
            load_model(
                self.policy, str(Path(saved["path"]) / "model.safetensors"), device=str(self.device)
            )
            self.optimizer.load_state_dict(saved["optimizer_state"])
            self.services.scorers.load_auxiliary_state(saved["auxiliary_state"])
            state = saved["trainer_state"]
            self.step = int(state["step"])
            self.meter.load_state_dict(state["meter"])
            self.evals = list(state["evals"])
            self.responses_trained = int(state["responses_trained"])
        except (SafetensorError, OSError, KeyError, TypeError, ValueError, RuntimeError) as err:
            # a checkpoint damaged after it was marked complete (a truncated copy, an edit)
            missing = f"missing {err}" if isinstance(err, KeyError) else str(err).splitlines()[0]
            raise RunDirError(
                f"{latest}: cannot resume from this checkpoint ({missing}); move it away to "
                "resume from the one before"
            ) from None
        self.run_dir.truncate_metrics(self.step)
        self.services.on_policy_updated()
        restore_rng_state(saved["rng_state"])

    def _check_unchanged(self, trained_under: dict[str, Any] | None, checkpoint: Path) -> None:
        """`RunDirError` naming the fields when the run's config differs from the one
        ``checkpoint`` was trained under (checkpoints older than this check carry none)."""
        if trained_under is None:
            return
        now = json.loads(json.dumps(to_dict(self.config)))
        differ = config_differences(trained_under, now)
        if differ:
            raise RunDirError(
                f"{self.run_dir.config_path}: changed since {checkpoint.name} was written "
                f"(differs in {', '.join(differ[:5])}); put the old values back to resume, or "
                "start a new run"
            )

    def _summary(self, started: float, *, status: str = "finished", error: str | None = None):
        return run_summary(
            self.config,
            steps=self.step,
            meter=self.meter,
            evals=self.evals,
            wall_seconds=time.perf_counter() - started,
            status=status,
            error=error,
        )
