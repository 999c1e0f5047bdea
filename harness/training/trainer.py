"""The training loop: rollouts, advantages, PPO-style updates, evaluation, checkpoints.

One step::

    batch = method.rollout(services)           # G responses per prompt, behaviour log-probs
    adv = method.advantages(batch, services)   # [B, T]; extra passes are charged by services
    for epoch, minibatch, micro-batch:         # PPO update, global normalizers per minibatch
        loss = method.loss(logprobs, micro, adv, normalizers); loss.backward()
        clip gradients; AdamW step

until the budget meter says the budget is spent; evaluations at fixed fractions of the budget.

Determinism: every random draw is seeded from ``(run seed, step, ...)`` (prompts, sampling,
minibatch order), so the same config and seed give the same ``metrics.jsonl`` and a resumed run
continues exactly as an uninterrupted one; wall-clock fields live under ``"time"``. The model
stays in eval mode (no dropout), so the training pass and the scoring pass agree and the first
epoch's importance ratio is exactly 1.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from creditbench.harness.budget import BudgetMeter
from creditbench.harness.config import (
    ConfigError,
    RunConfig,
    build_method_config,
    from_dict,
    resolve_method_options,
    to_dict,
)
from creditbench.harness.diagnostics.cancellation import loss_cancellation
from creditbench.harness.diagnostics.credit import credit_diagnostics
from creditbench.harness.records.rundir import (
    MetricsLogger,
    RunDir,
    capture_environment,
    restore_rng_state,
)
from creditbench.harness.sampling.rollout import derive_seed
from creditbench.harness.services import HarnessServices, sequence_lengths
from creditbench.harness.training.evaluation import evaluate
from creditbench.harness.training.ppo import NonFiniteError, check_finite, ppo_update
from creditbench.methods.contract import STEP_TRUTH_KEYS
from creditbench.methods.core import RolloutBatch, masked_mean
from creditbench.methods.registry import get_method

# The budget of a run whose config leaves budget.amount at 0, per unit: the quick suite's.
# 1.2e12 FLOPs is about 8 steps of 8 prompts x 8 responses on the 8-step chain task with the
# "tiny" base policy; in the validation sweep GRPO gained 9.5 to 22 points of sampled accuracy
# by 1.5e12 at that batch size (`creditbench validate`, docs/testbed.md).
DEFAULT_BUDGET = {"flops": 1.2e12, "tokens": 6.0e4, "steps": 8.0}


def default_run_name(config: RunConfig) -> str:
    return config.run_name or f"{config.method}-{config.task}-s{config.seed}"


def run_path(config: RunConfig) -> Path:
    return Path(config.output_dir) / default_run_name(config)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def trapezoid(xs: list[float], ys: list[float]) -> float:
    """Area under a piecewise-linear curve through ``(xs, ys)``."""
    return sum(
        (x1 - x0) * (y0 + y1) / 2 for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:], strict=False)
    )


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

    ``Trainer(config)`` validates everything a user can get wrong (method, its options, the
    task, the extras the method needs) and raises :class:`ConfigError` before anything is
    written; :meth:`train` then builds the models and runs.
    """

    def __init__(self, config: RunConfig, run_dir: RunDir | str | Path | None = None) -> None:
        from creditbench.harness.tasks import get_task

        if config.budget.amount <= 0:
            if config.budget.unit not in DEFAULT_BUDGET:
                raise ConfigError(f"budget.amount: must be set for unit {config.budget.unit!r}")
            budget = dataclasses.replace(config.budget, amount=DEFAULT_BUDGET[config.budget.unit])
            config = dataclasses.replace(config, budget=budget)
        self.config = resolve_method_options(config)
        self.method_cls = get_method(config.method)
        try:
            self.task = get_task(config.task, **config.task_options)
        except (KeyError, TypeError, ValueError) as err:
            message = err.args[0] if err.args else str(err)
            raise ConfigError(f"task: {message}") from None
        supplies = set(STEP_TRUTH_KEYS) if hasattr(self.task, "first_wrong_step") else set()
        missing = [key for key in self.method_cls.requires_extras if key not in supplies]
        if missing:
            raise ConfigError(
                f"method: {config.method!r} needs step ground truth ({', '.join(missing)}) "
                f"that task {config.task!r} cannot supply"
            )
        self.method = self.method_cls(
            build_method_config(self.method_cls, self.config.method_options)
        )
        if self.config.model.path is None:
            self._check_bootstrap_options()
        if not isinstance(run_dir, RunDir):
            run_dir = RunDir(run_dir if run_dir is not None else run_path(self.config))
        self.run_dir = run_dir
        self.device = resolve_device(self.config.device)

    @classmethod
    def resume(cls, run_dir: RunDir | str | Path) -> Trainer:
        """A trainer for the run in ``run_dir``, with the config saved there."""
        run_dir = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
        if not run_dir.exists():
            raise ConfigError(f"--resume: {run_dir.path} holds no run (no config.yaml)")
        return cls(from_dict(RunConfig, run_dir.config()), run_dir)

    def _check_bootstrap_options(self) -> None:
        from creditbench.harness.models.bootstrap import as_bootstrap_config, task_alphabet

        try:
            task_alphabet(self.task)
        except ValueError:
            raise ConfigError(
                f"model.path: task {self.config.task!r} has no built-in base policy; "
                "give a Hugging Face model directory"
            ) from None
        try:
            as_bootstrap_config(self.config)
        except ValueError as err:
            raise ConfigError(str(err)) from None

    # --- building ---------------------------------------------------------------------------

    def _load_base_policy(self):
        from creditbench.harness.models.modeling import load_policy

        cfg = self.config.model
        dtype = torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32
        if cfg.path is not None:
            path = Path(cfg.path)
        else:
            from creditbench.harness.models.bootstrap import ensure_base_policy

            path = ensure_base_policy(self.config.task, self.config.task_options, self.config)
        self.base_path = path
        return load_policy(path, dtype=dtype, device=self.device, gguf_file=cfg.gguf_file)

    def _teacher(self):
        from creditbench.harness.models.bootstrap import ensure_teacher_policy
        from creditbench.harness.models.modeling import load_policy

        path = ensure_teacher_policy(self.config.task, self.config.task_options, self.config)
        model, _ = load_policy(path, device=self.device)
        return model.requires_grad_(False)

    def needs_reference(self) -> bool:
        """A frozen reference model is loaded when asked for, or when a KL weight is on.

        Any method option named ``kl_coef*`` (the loss's ``kl_coef``, REINFORCE++'s
        ``kl_coef_reward``) that is positive needs reference log-probs.
        """
        options = self.config.method_options
        kl_on = any(
            key.startswith("kl_coef") and isinstance(value, (int, float)) and value > 0
            for key, value in options.items()
        )
        return self.config.train.reference_model or kl_on

    def _build(self) -> None:
        cfg = self.config
        self.policy, self.tokenizer = self._load_base_policy()
        self.policy.eval()
        self.reference = None
        if self.needs_reference():
            self.reference = copy.deepcopy(self.policy).requires_grad_(False)
        self.meter = BudgetMeter.for_model(
            self.policy, unit=cfg.budget.unit, amount=cfg.budget.amount
        )
        self.optimizer = torch.optim.AdamW(
            self.policy.parameters(),
            lr=cfg.train.lr,
            betas=tuple(cfg.train.adam_betas),
            weight_decay=cfg.train.weight_decay,
        )
        sampler = None
        if cfg.rollout.backend == "vllm":
            from creditbench.harness.sampling.rollout import VLLMBackend

            sampler = VLLMBackend(self.base_path, self.tokenizer, seed=cfg.seed)
        micro = cfg.train.micro_batch_size or cfg.rollout.prompts_per_step * cfg.rollout.group_size
        self.micro_batch_size = micro
        self.services = HarnessServices(
            task=self.task,
            policy=self.policy,
            tokenizer=self.tokenizer,
            meter=self.meter,
            rollout=cfg.rollout,
            micro_batch_size=micro,
            seed=cfg.seed,
            reference=self.reference,
            teacher_loader=self._teacher if hasattr(self.task, "first_wrong_step") else None,
            sampler=sampler,
        )
        self.step = 0
        self.evals: list[dict[str, Any]] = []

    # --- the loop ---------------------------------------------------------------------------

    def train(self, on_record: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Run (or continue) to the end of the budget; returns the summary.

        ``on_record`` is called with every metrics record written (for progress bars).
        """
        summary = self.run_dir.read_summary()
        if summary is not None:
            return summary
        started = time.perf_counter()
        self.run_dir.create(to_dict(self.config), capture_environment())
        self._build()
        self._restore()
        logger = _Logger(MetricsLogger(self.run_dir, purge_step=self.step + 1), on_record)
        try:
            fractions = list(self.config.budget.eval_fractions)
            if self.step == 0 and not self.evals:
                self._evaluate(logger, self.meter.fraction_crossed(None, fractions))
            while not self.meter.exhausted():
                before = self.meter.fraction()
                try:
                    record = self._train_step()
                except NonFiniteError as err:
                    self.run_dir.write_summary(
                        self._summary(started, status="non-finite", error=str(err))
                    )
                    raise
                logger.log(record)
                self._evaluate(logger, self.meter.fraction_crossed(before, fractions))
                if self.meter.exhausted() and (
                    not self.evals or self.evals[-1]["step"] != self.step
                ):
                    self._evaluate(logger, [1.0])
                if self.step % self.config.checkpoint_every == 0 or self.meter.exhausted():
                    self._checkpoint()
            summary = self._summary(started)
            self.run_dir.write_summary(summary)
        finally:
            logger.close()
        return summary

    def _train_step(self) -> dict[str, Any]:
        services, meter, method = self.services, self.meter, self.method
        services.begin_step(self.step)
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
            name = method.name or type(method).__name__
            if advantages.shape != batch.response_mask.shape:
                raise ValueError(
                    f"method {name!r}: advantages have shape {tuple(advantages.shape)}, "
                    f"expected {tuple(batch.response_mask.shape)}"
                )
            check_finite(advantages, "advantage tensor", name, self.step + 1)
            stats = self._update(batch, advantages)
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
        return self._step_record(batch, advantages, stats, timing)

    def _update(self, batch: RolloutBatch, advantages: torch.Tensor) -> dict[str, float]:
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        lengths = batch.prompt_mask.sum(-1).long() + sequence_lengths(batch.response_ids, eos, pad)
        return ppo_update(
            self.policy,
            self.optimizer,
            self.method,
            batch,
            advantages,
            train=self.config.train,
            micro_batch_size=self.micro_batch_size,
            temperature=self.config.rollout.temperature,
            meter=self.meter,
            lengths=lengths,
            seed=derive_seed(self.config.seed, "minibatch", self.step),
            step=self.step + 1,
            after_optimizer_step=self.services.on_policy_updated,
            services=self.services,
        )

    def _step_record(self, batch, advantages, stats, timing) -> dict[str, Any]:
        mask = batch.response_mask
        adv_mean = masked_mean(advantages, mask)
        adv_std = masked_mean((advantages - adv_mean) ** 2, mask).sqrt()
        rewards = batch.rewards[torch.isfinite(batch.rewards)]
        record: dict[str, Any] = {"step": self.step}
        record.update(self._budget_fields())
        record.update(
            {
                "reward_mean": float(rewards.mean()) if rewards.numel() else float("nan"),
                "accuracy": float((rewards > 0.5).float().mean()) if rewards.numel() else 0.0,
                "responses": batch.size,
                "response_length": float(mask.sum(-1).mean()),
                "truncated_frac": float(batch.truncated.float().mean())
                if batch.truncated is not None
                else 0.0,
                "adv_mean": float(adv_mean),
                "adv_std": float(adv_std),
                "adv_abs_mean": float(masked_mean(advantages.abs(), mask)),
            }
        )
        record.update({key: float(value) for key, value in stats.items()})
        record.update(self.services.stats)  # what the method reported this step
        diagnostics: dict[str, float] = {}
        first_wrong = batch.extras.get("first_wrong_mask")
        if first_wrong is not None:  # step ground truth: does the method blame the right tokens?
            diagnostics.update(credit_diagnostics(advantages, mask, first_wrong, batch.rewards))
        # Token gradient cancellation of the step's first update, at the behaviour policy (the
        # loss's gradient on token log-probs): harness.diagnostics.cancellation. A measurement, so a
        # loss that runs a model pass of its own (SDPO's top-K) is not charged for it here.
        with self.meter.outside_budget():
            cancel = loss_cancellation(
                lambda logprobs: self.method.loss(
                    logprobs, batch, advantages, services=self.services
                )[0],
                batch.old_logprobs,
                advantages,
                batch.response_ids,
                mask,
                batch.group_ids,
                batch.prompt_ids,
                batch.prompt_mask,
            )
        diagnostics.update(cancel)
        # JSON has no NaN: an undefined diagnostic (no failed response, no shared token) is null
        record.update({k: None if math.isnan(v) else v for k, v in diagnostics.items()})
        record["time"] = timing
        return record

    def _budget_fields(self) -> dict[str, Any]:
        m = self.meter
        return {
            "budget_fraction": m.fraction() if m.unit != "seconds" else None,
            "flops": m.flops,
            "generated_tokens": m.generated_tokens,
            "forward_tokens": m.forward_tokens,
            "trained_tokens": m.trained_tokens,
            "optimizer_steps": m.optimizer_steps,
        }

    # --- evaluation, checkpoints, summary -----------------------------------------------------

    def _evaluate(self, logger: _Logger, fractions: list[float]) -> None:
        if not fractions:
            return
        ev = self.config.eval
        started = time.perf_counter()
        with self.meter.outside_budget():
            result = evaluate(
                self.policy,
                self.tokenizer,
                self.task,
                n_problems=ev.n_problems,
                k_samples=ev.k_samples,
                greedy=ev.greedy,
                temperature=ev.temperature,
                batch_size=ev.batch_size,
                max_new_tokens=self.config.rollout.max_new_tokens,
                seed=self.config.seed,
            )
        seconds = time.perf_counter() - started
        for fraction in fractions:
            entry = {"fraction": fraction, **self._budget_fields(), **result}
            entry["step"] = self.step
            self.evals.append(entry)
            logger.log({"step": self.step, "eval": entry, "time": {"eval": seconds}})

    def _trainer_state(self) -> dict[str, Any]:
        return {"step": self.step, "meter": self.meter.state_dict(), "evals": self.evals}

    def _checkpoint(self) -> None:
        self.run_dir.save_checkpoint(
            self.step,
            model=self.policy,
            tokenizer=self.tokenizer,
            optimizer_state=self.optimizer.state_dict(),
            trainer_state=self._trainer_state(),
        )

    def _restore(self) -> None:
        """Continue from the latest complete checkpoint, or start over if there is none."""
        latest = self.run_dir.latest_checkpoint()
        if latest is None:
            self.run_dir.truncate_metrics(-1)
            return
        saved = self.run_dir.load_checkpoint(latest)
        from safetensors.torch import load_model

        load_model(
            self.policy, str(Path(saved["path"]) / "model.safetensors"), device=str(self.device)
        )
        self.optimizer.load_state_dict(saved["optimizer_state"])
        state = saved["trainer_state"]
        self.step = int(state["step"])
        self.meter.load_state_dict(state["meter"])
        self.evals = list(state["evals"])
        self.run_dir.truncate_metrics(self.step)
        self.services.on_policy_updated()
        restore_rng_state(saved["rng_state"])

    def _summary(self, started: float, *, status: str = "finished", error: str | None = None):
        cfg = self.config
        evals = self.evals
        summary: dict[str, Any] = {
            "status": status,
            "method": cfg.method,
            "task": cfg.task,
            "task_options": cfg.task_options,
            "seed": cfg.seed,
            "run_name": default_run_name(cfg),
            "steps": self.step,
            "budget": {
                "unit": cfg.budget.unit,
                "amount": cfg.budget.amount,
                **self._budget_fields(),
            },
        }
        if error is not None:
            summary["error"] = error
        if evals:
            summary["initial_eval"] = evals[0]
            summary["final_eval"] = evals[-1]
            key = "sampled_accuracy" if "sampled_accuracy" in evals[-1] else "greedy_accuracy"
            summary["best_eval"] = max(evals, key=lambda e: e.get(key, 0.0))
            summary["improvement"] = evals[-1].get(key, 0.0) - evals[0].get(key, 0.0)
            xs = [min(e["fraction"], 1.0) for e in evals]
            summary["auc"] = {
                metric: trapezoid(xs, [e[metric] for e in evals])
                for metric in ("sampled_accuracy", "greedy_accuracy")
                if all(metric in e for e in evals)
            }
        summary["time"] = {
            "wall_seconds": time.perf_counter() - started,
            "budget_seconds": self.meter.seconds,
        }
        return summary
