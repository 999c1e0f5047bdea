"""What a method is to the harness: a small class that turns a rollout batch into token
advantages and a loss, plus the services it may call.

A method subclasses `CreditMethod`, declares its hyper-parameters as a dataclass
``Config`` (subclassing `LossConfig`, whose fields set the policy loss), and is
registered with `methods.registry.register_method`. The harness never learns method
names: it calls `CreditMethod.rollout`, `CreditMethod.advantages` and
`CreditMethod.loss`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol

import torch
from torch import Tensor

from .core import (
    AGG_MODES,
    ClipConfig,
    Normalizers,
    RolloutBatch,
    aggregate_loss,
    clipped_surrogate,
    importance_ratio,
    kl_estimate,
    masked_mean,
)


@dataclass
class LossConfig:
    """The policy-loss settings every method carries; a method's ``Config`` overrides defaults.

    Attributes:
        eps_low: lower clip of the importance ratio.
        eps_high: upper clip (DAPO's clip-higher raises it).
        dual_clip: dual-clip constant ``c > 1`` for negative advantages, or None.
        ratio_level: ``token`` (PPO) or ``sequence`` (GSPO).
        aggregation: one of `methods.core.AGG_MODES`.
        horizon: constant normaliser L of ``seq-mean-token-sum-norm``; 0 means the padded width.
        kl_coef: weight of the KL-to-reference term in the loss (0 turns it off).
        kl_kind: KL estimator, ``k1``, ``k2`` or ``k3``.
        clip: False gives the plain (unclipped) importance-weighted policy gradient.
    """

    eps_low: float = 0.2
    eps_high: float = 0.2
    dual_clip: float | None = None
    ratio_level: str = "token"
    aggregation: str = "token-mean"
    horizon: float = 0.0
    kl_coef: float = 0.0
    kl_kind: str = "k3"
    clip: bool = True

    def __post_init__(self) -> None:
        checks = [
            ("eps_low", 0.0 <= self.eps_low < 1.0, "must be in [0, 1)"),
            ("eps_high", self.eps_high >= 0.0, "must be >= 0"),
            ("dual_clip", self.dual_clip is None or self.dual_clip > 1.0, "must be > 1 or null"),
            ("ratio_level", self.ratio_level in ("token", "sequence"), "must be token or sequence"),
            ("aggregation", self.aggregation in AGG_MODES, f"must be one of {AGG_MODES}"),
            ("horizon", self.horizon >= 0.0, "must be >= 0"),
            ("kl_coef", self.kl_coef >= 0.0, "must be >= 0"),
            ("kl_kind", self.kl_kind in ("k1", "k2", "k3"), "must be k1, k2 or k3"),
        ]
        for field_name, ok, rule in checks:
            if not ok:
                raise ValueError(f"{field_name}: {rule} (got {getattr(self, field_name)!r})")

    @property
    def clip_config(self) -> ClipConfig:
        return ClipConfig(self.eps_low, self.eps_high, self.dual_clip)


EXTRA_KEYS = {
    "first_wrong_mask": "[B, T] 1 on the tokens of the first wrong step of the response",
    "after_wrong_mask": "[B, T] 1 on the tokens after the first wrong step",
    "wrong_step_mask": "[B, T] 1 on the tokens of every wrong step (also inside correct answers)",
    "filler_mask": "[B, T] 1 on reward-irrelevant filler tokens",
}
"""Step ground truth the testbed attaches to every batch (``RolloutBatch.extras``)."""


class Services(Protocol):
    """What the harness offers a method. Every pass it runs is charged to the budget meter.

    Later methods need more (scoring under other prompts, generation from a prefix, prompt
    variants); the harness's implementation documents each. The defaults below are all that
    the GRPO family uses.
    """

    step: int

    def sample_batch(self) -> RolloutBatch:
        """The default rollout: the next prompts of the task, G responses each."""
        ...

    def score(self, batch: RolloutBatch, prompts: Any = None, model: str = "policy") -> Tensor:
        """Teacher-forced log-probs ``[B, T]`` of the batch's responses, under other prompts
        (one text per row) or another model; see ``HarnessServices.score``."""
        ...

    def variant(self, batch: RolloutBatch, kind: str, hints: Any = None) -> list[str]:
        """The task's ``kind`` prompt variant for every row; see ``HarnessServices.variant``."""
        ...


class CreditMethod:
    """Base class of every method.

    Class attributes a method sets:
        name: registry name (set by the decorator).
        summary: one line for ``creditbench methods``.
        paper: "Title (arXiv id)".
        Config: the hyper-parameter dataclass.
        group_local: advantages of a group depend on that group alone (False for methods
            that whiten over the whole batch, like REINFORCE++).
        reference: needs ground truth that real tasks do not have (oracle credit).
        requires_extras: keys of ``RolloutBatch.extras`` the method reads; the harness
            refuses a task that cannot supply them. Known keys: see `EXTRA_KEYS`.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    Config: ClassVar[type[LossConfig]] = LossConfig
    group_local: ClassVar[bool] = True
    reference: ClassVar[bool] = False
    requires_extras: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: LossConfig | None = None, **overrides: Any) -> None:
        self.config = config if config is not None else self.Config(**overrides)

    def rollout(self, services: Services) -> RolloutBatch:
        """Sample this step's batch. Override for dynamic sampling, resets or several roles."""
        return services.sample_batch()

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        """Token advantages ``[B, T]``, zero where ``batch.response_mask`` is 0."""
        raise NotImplementedError

    def loss(
        self,
        logprobs: Tensor,
        batch: RolloutBatch,
        advantages: Tensor,
        normalizers: Normalizers | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """The policy loss of a (micro-)batch and its statistics.

        ``logprobs`` ``[B, T]`` are the current policy's, with gradient. ``normalizers``
        carry the counts of the whole optimisation batch, so micro-batch losses add up.
        """
        cfg = self.config
        mask = batch.response_mask
        if normalizers is None:
            normalizers = Normalizers.of(mask, cfg.horizon or None)
        elif cfg.horizon:
            normalizers = replace(normalizers, horizon=cfg.horizon)
        level = cfg.ratio_level
        ratio = importance_ratio(logprobs, batch.old_logprobs, mask, level)  # type: ignore[arg-type]
        if cfg.clip:
            per_token, clipped = clipped_surrogate(ratio, advantages, cfg.clip_config)
        else:
            per_token, clipped = -advantages * ratio, torch.zeros_like(ratio)
        loss = aggregate_loss(per_token, mask, cfg.aggregation, normalizers)
        stats = {
            "pg_loss": float(loss.detach()),
            "clip_frac": float(masked_mean(clipped, mask)),
            "approx_kl": float(masked_mean((batch.old_logprobs - logprobs).detach(), mask)),
        }
        if cfg.kl_coef > 0 and batch.ref_logprobs is not None:
            kl = kl_estimate(logprobs, batch.ref_logprobs, cfg.kl_kind)  # type: ignore[arg-type]
            kl_loss = aggregate_loss(kl, mask, cfg.aggregation, normalizers)
            loss = loss + cfg.kl_coef * kl_loss
            stats["kl_ref"] = float(kl_loss.detach())
        return loss, stats
