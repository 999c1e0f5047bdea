"""DFPO: Drift Fixing Policy Optimization.

Paper: Ding, Zhang, Wang and Zeng, "Design Conditions for Intra-Group Learning of
Sequence-Level Rewards: Token Gradient Cancellation", arXiv 2604.13088 (v1, 2026).

The design condition (Eq. 2). A token a* in a context h* that every response of a group holds
gets the gradient (1/G) Σ_i Â_i ∇ω_i,t* = (1/G) Σ_i c_i Â_i ∇log π_θ(a*|h*). With Σ_i Â_i = 0
it cancels when the per-response coefficients c_i are equal ("gradient exchangeability").
Sequence-coupled weights (GSPO's s_i) and sign-dependent clipping break it (Cor. 3.3), and the
uncancelled part is reward-irrelevant drift on shared tokens.

DFPO keeps GSPO's sequence weight w_i = s_i(θ) = exp( 1/|y_i| Σ_t log ρ_i,t ) and transforms
the group's weights under stop-gradient before forming the gradient:

    Min-Replace (Eq. 17):     w̃_i = sg[ min_j w_j ]
    Adv-Orthogonal (Eq. 18):  w̃   = sg[ w - (Âᵀw / ||Â||²) Â ],   so  Σ_i Â_i w̃_i = 0

and trains the clip-free linear estimator (GSPO-token form with w̃ in place of sg[s_i]):

    L(θ) = - 1/N Σ_i Σ_t w̃_i Â_i π_θ(y_i,t) / sg[π_θ(y_i,t)]
    ∇L   = - 1/N Σ_i Σ_t w̃_i Â_i ∇log π_θ(y_i,t)

with Â_i = (R_i - mean R) / std R, the GRPO/GSPO group advantage.

Defaults: Min-Replace (the paper's main variant), token-mean (N = the batch's loss tokens),
no clip, no KL.

Deviations (the exact loss is not public; this is the reconstruction of the paper notes):
    - ``aggregation`` = token-mean. The normaliser is not recovered; cancellation needs it to
      be the same for every response of a group (GSPO's 1/|y_i| with Min-Replace does not
      cancel when lengths differ), so a group-constant one is the reading that keeps the
      paper's claim. ``seq-mean-token-sum-norm`` (Dr. GRPO's constant) is the other one.
    - ``weight_source`` = ``rollout``: w_i are taken when the advantages are computed, from the
      policy of that moment, over the whole group, and w̃_i Â_i becomes the advantage. The
      harness computes advantages with the behaviour policy itself, so w ≡ 1, both transforms
      return 1 and DFPO is the clip-free linear estimator, exactly what the paper's transforms
      give on-policy. Under several updates a batch (the frozen protocol's 4 minibatches) the
      later ones are off-policy and the transforms would act there, but not with this
      source: the leaderboard's DFPO row is the clip-free linear estimator. Weights
      under the policy being updated (``current``) couple the rows of a group inside the loss,
      so micro-batch losses stop adding up when a group is split; ``current`` transforms the
      weights over the group members present in each loss call and is exact when every call
      holds whole groups (``train.minibatches=1`` and ``train.micro_batch_size=0``, with
      ``train.ppo_epochs`` > 1 to go off-policy).
    - ``transform`` = ``none`` keeps the raw weights (unclipped GSPO-token), a control.
    - ``clip`` must stay off: the paper's estimator is clip-free, and a clip active for one
      sign of advantage is what breaks cancellation. A KL term (``kl_coef``) is offered, off;
      it is not advantage-weighted, so it is a separate force on shared tokens.
    - Adv-Orthogonal leaves a group with Â ≡ 0 as it is (it gets no gradient anyway).
    - std is unbiased plus 1e-6, a group of one gets Â = 0 (as ``grpo``); ``scale_by_std``
      = False gives Â_i = R_i - mean R. The sequence log-ratio is clamped at 10, as ``gspo``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import CreditMethod, LossConfig, kl_penalty, loss_normalizers
from .contract import Services
from .core import (
    Normalizers,
    RolloutBatch,
    aggregate_loss,
    broadcast_to_tokens,
    group_normalized_scores,
    masked_mean,
    sequence_log_ratio,
)
from .registry import register_method

TRANSFORMS = ("min_replace", "adv_orthogonal", "none")
WEIGHT_SOURCES = ("rollout", "current")


def group_min(values: Tensor, group_ids: Tensor) -> Tensor:
    """``[B]`` the minimum of ``values`` ``[B]`` over each row's group (Min-Replace, Eq. 17)."""
    _, inverse = torch.unique(group_ids, return_inverse=True)
    lowest = torch.full((int(inverse.max()) + 1,), float("inf"), dtype=values.dtype)
    lowest = lowest.scatter_reduce(0, inverse, values, reduce="amin")
    return lowest[inverse]


def adv_orthogonal(weights: Tensor, scores: Tensor, group_ids: Tensor) -> Tensor:
    """``w - (Âᵀw / ||Â||²) Â`` within each group, ``[B]`` (Adv-Orthogonal, Eq. 18).

    ``weights`` and ``scores`` (Â) are ``[B]``; afterwards Σ_i Â_i w̃_i = 0 in every group.
    A group with Â ≡ 0 keeps its weights. Sums in float64.
    """
    _, inverse = torch.unique(group_ids, return_inverse=True)
    w, a = weights.to(torch.float64), scores.to(torch.float64)
    size = int(inverse.max()) + 1
    dot = torch.zeros(size, dtype=torch.float64).index_add_(0, inverse, a * w)
    norm = torch.zeros(size, dtype=torch.float64).index_add_(0, inverse, a * a)
    coef = torch.where(norm > 0, dot / norm.clamp(min=1e-300), torch.zeros_like(norm))
    return (w - coef[inverse] * a).to(weights.dtype)


def dfpo_weights(weights: Tensor, scores: Tensor, group_ids: Tensor, transform: str) -> Tensor:
    """The transformed, stop-gradient sequence weights w̃ ``[B]``.

    Args:
        weights: ``[B]`` base weights w_i (GSPO's s_i).
        scores: ``[B]`` group advantages Â_i.
        group_ids: ``[B]``.
        transform: ``min_replace``, ``adv_orthogonal`` or ``none``.
    """
    w = weights.detach()
    if w.numel() == 0 or transform == "none":
        return w
    if transform == "min_replace":
        return group_min(w, group_ids)
    if transform == "adv_orthogonal":
        return adv_orthogonal(w, scores.detach(), group_ids)
    raise ValueError(f"transform: must be one of {', '.join(TRANSFORMS)} (got {transform!r})")


def sequence_weights(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor) -> Tensor:
    """GSPO's ``s_i = exp(mean_t log ρ_i,t)``, ``[B]``, the log-ratio clamped at 10."""
    return torch.exp(sequence_log_ratio(logprobs, old_logprobs, mask).clamp(max=10.0))


@dataclass
class DFPOConfig(LossConfig):
    """DFPO hyper-parameters (loss fields inherited from `LossConfig`; ``clip`` must be off,
    and the clip and ratio fields are not used)."""

    clip: bool = False
    transform: str = "min_replace"
    weight_source: str = "rollout"
    scale_by_std: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.clip:
            raise ValueError(f"clip: must be false, DFPO is clip-free (got {self.clip})")
        if self.transform not in TRANSFORMS:
            raise ValueError(
                f"transform: must be one of {', '.join(TRANSFORMS)} (got {self.transform!r})"
            )
        if self.weight_source not in WEIGHT_SOURCES:
            raise ValueError(
                f"weight_source: must be one of {', '.join(WEIGHT_SOURCES)} "
                f"(got {self.weight_source!r})"
            )


@register_method("dfpo")
class DFPO(CreditMethod):
    summary = "clip-free sequence-weighted update whose group weights make shared tokens cancel"
    paper = (
        "Design Conditions for Intra-Group Learning of Sequence-Level Rewards: "
        "Token Gradient Cancellation (arXiv 2604.13088)"
    )
    Config = DFPOConfig
    config: DFPOConfig

    def _transformed(self, logprobs: Tensor, batch: RolloutBatch, scores: Tensor) -> Tensor:
        w = sequence_weights(logprobs, batch.old_logprobs, batch.response_mask)
        return dfpo_weights(w, scores, batch.group_ids, self.config.transform)

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        cfg = self.config
        mask = batch.response_mask
        scores = group_normalized_scores(
            batch.rewards, batch.group_ids, scale_by_std=cfg.scale_by_std
        )
        if cfg.weight_source == "rollout":
            # Here the policy computing advantages is the behaviour policy, so w = 1; an
            # asynchronous trainer would score the batch under its newer policy instead.
            scores = scores * self._transformed(batch.old_logprobs, batch, scores)
        return broadcast_to_tokens(scores, mask)

    def loss(
        self,
        logprobs: Tensor,
        batch: RolloutBatch,
        advantages: Tensor,
        normalizers: Normalizers | None = None,
        services: Services | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        cfg = self.config
        mask = batch.response_mask
        normalizers = loss_normalizers(cfg, mask, normalizers, services)
        stats: dict[str, float] = {}
        if cfg.weight_source == "current" and batch.size:
            scores = masked_mean(advantages, mask, dim=-1)
            weights = self._transformed(logprobs, batch, scores)
            advantages = advantages * weights.unsqueeze(-1).to(advantages.dtype)
            stats["dfpo_weight"] = float(weights.mean())
        # Value w̃·Â on every token, gradient w̃·Â·∇log π: the weight rides outside the graph.
        per_token = -advantages * torch.exp(logprobs - logprobs.detach())
        loss = aggregate_loss(per_token, mask, cfg.aggregation, normalizers)
        stats["pg_loss"] = float(loss.detach())
        stats["approx_kl"] = float(masked_mean((batch.old_logprobs - logprobs).detach(), mask))
        kl_term, kl_stats = kl_penalty(cfg, logprobs, batch, normalizers)
        if kl_term is not None:
            loss, stats = loss + kl_term, {**stats, **kl_stats}
        return loss, stats
