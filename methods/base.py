"""What a method is to the harness: a small class that turns a rollout batch into token
advantages and a loss, plus the services it may call.

A method subclasses `CreditMethod`, declares its hyper-parameters as a dataclass
``Config`` (subclassing `LossConfig`, whose fields set the policy loss), and is
registered with `methods.registry.register_method`. The harness never learns method
names: it calls `CreditMethod.rollout`, `CreditMethod.advantages` and
`CreditMethod.loss`, each with the step's :class:`~methods.contract.Services`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch
from torch import Tensor

from .contract import (
    ALL_GROUPS,
    BEHAVIOUR_STATISTICS,
    STEP_TRUTH_KEYS,
    GroupFilter,
    Reduction,
    Services,
)
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
from .field_checks import check_fields, check_finite_numbers

__all__ = [
    "SINGLETON_RULES",
    "loss_normalizers",
    "CreditMethod",
    "LossConfig",
    "Services",
    "check_fields",
    "kl_penalty",
]

SINGLETON_RULES = ("zero", "raw")  # a group of one: advantage 0 (TRL), or its raw reward (verl)


def loss_normalizers(
    cfg: LossConfig,
    mask: Tensor,
    normalizers: Normalizers | None,
    services: Services | None,
) -> Normalizers:
    """The counts a loss aggregates with: the whole optimisation batch's (``normalizers``) or
    the micro-batch's own, with the constant L of ``seq-mean-token-sum-norm`` set to ``horizon``,
    else to the run's generation limit."""
    horizon = cfg.horizon or (services.max_new_tokens if services is not None else 0)
    if normalizers is None:
        return Normalizers.of(mask, horizon or None)
    return replace(normalizers, horizon=horizon) if horizon else normalizers


def kl_penalty(
    cfg: LossConfig,
    logprobs: Tensor,
    batch: RolloutBatch,
    normalizers: Normalizers | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor | None, dict[str, float]]:
    """The loss's KL-to-reference term ``kl_coef · cfg.kl_loss(KL)`` over ``mask`` (default
    the response mask), or None when it is off (no weight or no reference log-probs), and its
    statistic ``kl_ref``. The harness gives every batch reference log-probs when the weight
    is on (`LossConfig.needs_reference_logprobs`); a trainer of one's own must too."""
    if cfg.kl_coef <= 0 or batch.ref_logprobs is None:
        return None, {}
    kl = kl_estimate(logprobs, batch.ref_logprobs, cfg.kl_kind)  # type: ignore[arg-type]
    mask = batch.response_mask if mask is None else mask
    kl_loss = cfg.kl_loss(kl, mask, normalizers)
    return cfg.kl_coef * kl_loss, {"kl_ref": float(kl_loss.detach())}


@dataclass
class LossConfig:
    """The policy-loss settings every method carries; a method's ``Config`` overrides defaults.

    Attributes:
        eps_low: lower clip of the importance ratio.
        eps_high: upper clip (DAPO's clip-higher raises it).
        dual_clip: dual-clip constant ``c > 1`` for negative advantages, or None.
        ratio_level: ``token`` (PPO) or ``sequence`` (GSPO).
        aggregation: one of `methods.core.AGG_MODES`.
        horizon: constant normaliser L of ``seq-mean-token-sum-norm``; 0 means the run's
            generation limit (``services.max_new_tokens``, Dr. GRPO's generation budget), or
            the padded width on a bare batch without services.
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
        check_finite_numbers(self)
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
        check_fields(self, checks)

    @property
    def clip_config(self) -> ClipConfig:
        return ClipConfig(self.eps_low, self.eps_high, self.dual_clip)

    @property
    def needs_reference_logprobs(self) -> bool:
        """A term of this configuration reads the frozen reference's log-probs (a positive KL
        weight): the harness then keeps a reference model and scores every batch with it. A
        Config with a KL weight of its own (REINFORCE++'s in the reward) extends this."""
        return self.kl_coef > 0

    def kl_loss(self, kl: Tensor, mask: Tensor, normalizers: Normalizers | None) -> Tensor:
        """The per-token KL estimate ``[B, T]`` reduced to the loss's KL term (before
        ``kl_coef``): with the loss's own aggregation, unless a method's paper reduces it
        otherwise (VinePPO: a sum over each sequence)."""
        return aggregate_loss(kl, mask, self.aggregation, normalizers)


@dataclass(frozen=True)
class Needs:
    """What a method needs from the harness beyond a plain batch of sampled, graded responses.

    One record that the step's plan, the run setup, the engine rule, the TRL adapter and
    ``creditbench perf`` read; a method sets ``needs = Needs(...)`` with what differs from the
    defaults. A subclass's record replaces its parent's whole: one that changes a field keeps
    the others with ``dataclasses.replace(Parent.needs, ...)`` or states them.

    Attributes:
        behaviour_logprobs: `rollout` or `advantages` read ``batch.old_logprobs``. When False
            and the update is exactly on-policy (one epoch, one minibatch), the harness skips
            the scoring pass and takes the behaviour log-probs from the update's own first
            forward, as TRL does; until then ``old_logprobs`` hold NaN. The conformance suite
            checks a method that says False.
        behaviour_statistics: the statistics of the behaviour policy's next-token distribution
            that `rollout`, `advantages` or `loss_mask` read from ``batch.extras`` (of
            `methods.contract.BEHAVIOUR_STATISTICS`: its entropy, its Σπ²); the harness then
            computes them with the behaviour log-probs, in the same scoring pass (which it
            never skips for such a method).
        reference_model: `advantages` scores with ``model="reference"`` (the frozen initial
            policy); the harness then keeps one, whatever ``train.reference_model`` says.
        step_truth: the step ground-truth keys of ``RolloutBatch.extras`` the method reads (of
            `methods.contract.STEP_TRUTH_KEYS`); the harness refuses a task that cannot supply
            them (only the testbed can).
    """

    behaviour_logprobs: bool = True
    behaviour_statistics: tuple[str, ...] = ()
    reference_model: bool = False
    step_truth: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [key for key in self.step_truth if key not in STEP_TRUTH_KEYS]
        if unknown:
            raise ValueError(f"step_truth: not step ground truth: {', '.join(unknown)}")
        unknown = [key for key in self.behaviour_statistics if key not in BEHAVIOUR_STATISTICS]
        if unknown:
            raise ValueError(f"behaviour_statistics: not one the harness computes: {unknown}")

    @property
    def reads_behaviour(self) -> bool:
        """Its rollout, advantages or loss mask read the behaviour log-probs or statistics of the
        behaviour distribution: every batch it trains on needs a scoring pass before them."""
        return self.behaviour_logprobs or bool(self.behaviour_statistics)


class CreditMethod:
    """Base class of every method.

    Class attributes a method sets:
        name: registry name (set by the decorator).
        summary: one line for ``creditbench methods``.
        paper: "Title (arXiv id)".
        Config: the hyper-parameter dataclass.
        group_local: advantages of a group depend on that group alone (False for methods
            that whiten over the whole batch, like REINFORCE++).
        needs: what the method needs from the harness (`Needs`): behaviour log-probs and
            statistics, a reference model, step ground truth.
        reference: the method is a reference point of the board, not a contender: the exact
            credit the testbed alone can compute (the oracle), the 1 of the GRPO(0) -> oracle(1)
            scale.
        decoding_variants: the prompt variants a training-free decoding rule of the method's
            paper compares with the plain prompt (SCAPO's drift filter), or empty when it has
            none; the rule itself is `decoding_mask`. ``creditbench eval --decode-with NAME``.
        reduces_to: the options under which the method's advantages are another method's
            (`methods.contract.Reduction`); the conformance suite checks each.
        opt_outs: ``{check: why}`` for a meaning check of the conformance suite the method
            cannot promise (``"direction"``: a passed response never gets less summed credit
            than a failed one of its group), with the reason, shown when the check is skipped.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    Config: ClassVar[type[Any]] = LossConfig
    needs: ClassVar[Needs] = Needs()
    group_local: ClassVar[bool] = True
    reference: ClassVar[bool] = False
    decoding_variants: ClassVar[tuple[str, ...]] = ()
    reduces_to: ClassVar[tuple[Reduction, ...]] = ()
    opt_outs: ClassVar[Mapping[str, str]] = {}

    # the method's Config: a LossConfig for a method whose loss is this class's (a rule hosted
    # on another method keeps its host's loss settings in the host, `methods.compose`)
    config: Any

    def __init__(self, config: Any = None, **overrides: Any) -> None:
        self.config = config if config is not None else self.Config(**overrides)

    @property
    def needs_reference(self) -> bool:
        """A frozen reference model is needed: the method scores with it
        (``Needs.reference_model``), or its Config has a term that reads reference log-probs
        (``LossConfig.needs_reference_logprobs``)."""
        return self.needs.reference_model or self.config.needs_reference_logprobs

    def decoding_mask(self, logp0: Tensor, logpk: Tensor, eos_id: int, threshold: float) -> Tensor:
        """The tokens the method's decoding rule masks, bool ``[R, V]``, from next-token
        log-probs under the plain prompt ``[R, V]`` and under each variant ``[K, R, V]``."""
        raise NotImplementedError(f"method {self.name!r} has no decoding rule")

    def loss_mask(self, batch: RolloutBatch) -> Tensor:
        """``[B, T]`` the tokens the loss averages over, which the trainer's normalisers count:
        the response mask, unless the method trains on fewer (SDPO: the distilled rows)."""
        return batch.response_mask

    def rollout(self, services: Services) -> RolloutBatch:
        """Sample this step's batch. Override for dynamic sampling, resets or several roles."""
        return services.sample_batch()

    def group_filter(self) -> GroupFilter | None:
        """The `GroupFilter` this method's `rollout` amounts to with this config: keeping every
        group of one plain batch for the default rollout; for a rollout of its own, the rule by
        which it keeps whole groups of plain sampled batches (DAPO's dynamic sampling), or None
        when it does more (continuations, resets, several roles), which is the default for an
        overridden `rollout`. An engine adapter runs the method only where the engine applies
        that filter itself; the conformance suite checks the claim."""
        if type(self).rollout is CreditMethod.rollout:
            return GroupFilter(ALL_GROUPS, max_batches=1)
        return None

    def outcome_rewards(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        """``[B]`` the outcome each response is scored by: the task's reward, after the
        method's reward shaping (DAPO's overlong punishment). A credit rule hosted on this
        method (`methods.compose`) starts from it."""
        return batch.rewards

    def trained_responses(self, batch: RolloutBatch) -> Tensor:
        """``[B]`` bool: the responses whose advantages may be non-zero (all, unless a filter
        such as DAPO's dynamic sampling excludes some that were kept in the batch)."""
        return torch.ones_like(batch.rewards, dtype=torch.bool)

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        """Token advantages ``[B, T]``, zero where ``batch.response_mask`` is 0."""
        raise NotImplementedError

    def loss(
        self,
        logprobs: Tensor,
        batch: RolloutBatch,
        advantages: Tensor,
        normalizers: Normalizers | None = None,
        services: Services | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """The policy loss of a (micro-)batch and its statistics.

        ``logprobs`` ``[B, T]`` are the current policy's, with gradient. ``normalizers``
        carry the counts of the whole optimisation batch, so micro-batch losses add up.
        ``services`` are the step's, for a loss that runs a model pass of its own (SDPO's
        top-K distillation); statistics of the step that are not the loss's go through
        ``services.report``, never through state kept on the method.
        """
        cfg: LossConfig = self.config
        mask = batch.response_mask
        # Averaged over the loss mask's tokens; a token outside it has zero advantage, so the
        # sum over the response mask is the same (and a micro-batch's sum is its share).
        normalizers = loss_normalizers(cfg, self.loss_mask(batch), normalizers, services)
        clip = cfg.clip_config
        kl_term, kl_stats = kl_penalty(cfg, logprobs, batch, normalizers)
        level = cfg.ratio_level
        ratio = importance_ratio(logprobs, batch.old_logprobs, mask, level)  # type: ignore[arg-type]
        if cfg.clip:
            per_token, clipped = clipped_surrogate(ratio, advantages, clip)
        else:
            per_token, clipped = -advantages * ratio, torch.zeros_like(ratio)
        loss = aggregate_loss(per_token, mask, cfg.aggregation, normalizers)
        stats = {
            "pg_loss": float(loss.detach()),
            "clip_frac": float(masked_mean(clipped, mask)),
            "approx_kl": float(masked_mean((batch.old_logprobs - logprobs).detach(), mask)),
        }
        if kl_term is not None:
            loss = loss + kl_term
            stats.update(kl_stats)
        return loss, stats
