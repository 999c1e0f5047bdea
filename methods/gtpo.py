"""GTPO: each token's reward weighted by its entropy against the group's at the same position.

Paper: Tan et al., "GTPO and GRPO-S: Token and Sequence-Level Reward Shaping with Policy
Entropy", arXiv 2508.04349 (v6, 2026), §2.1-2.3, Eq. 3-11, §3.1. High entropy in a reasoning
path is read as "cognitive effort at pivotal junctures": a passed response's uncertain tokens
get more reward, a failed response's confident tokens more blame. On Qwen2.5-7B it reached
34.23 Mean@32 on AIME'24 against DAPO's 21.2 and DAPO with forking tokens' 30.77 (Table 1).

Key equations (group of G responses, O+ the n passed ones, O- the m failed ones, H_{i,t} the
behaviour policy's full-vocabulary entropy at token t of response i, Eq. 4; d_t and h_t the
passed and failed responses still running at position t; a response that has ended counts 0):

    r+_{i,t} = α1 + α2 · H_{i,t} / (Σ_{k∈O+} H_{k,t} / d_t)                 o_i ∈ O+   (Eq. 3)
    r-_{j,t} = -α1 - α2 · (1/H_{j,t}) / (Σ_{k∈O-} (1/H_{k,t}) / h_t)        o_j ∈ O-   (Eq. 5)
    Â_{i,t}  = (r_{i,t} - mean(R)) / std(R),   R every shaped token reward of the group (Eq. 6)

α1 = 1, α2 = 0.1 (§3.1). GRPO-S (``level="sequence"``) weighs whole responses by their mean
entropy Ĥ_i (Eq. 8-9) and normalises over the G responses (Eq. 46). Both use DAPO's loss:
token-mean, clip-higher ε_low 0.2 / ε_high 0.28 (§3.1), no KL (Eq. 7).

Deviations:
    - Eq. 6 normalises over R⁺ ∪ R⁻ together (ours, inferred): read literally, each set is
      z-scored apart, which subtracts ±α1 away and leaves no pass/fail signal at all; the
      sign-preserving joint reading matches GRPO-S's Eq. 46 and App. B.2.
    - Per prompt group, as the equations are written; §4 says the authors' implementation
      compares entropies across the whole batch.
    - The entropy is the behaviour policy's, from the scoring pass (``BEHAVIOUR_ENTROPY``), as
      Eq. 4 says (π_θold); ε = 1e-6 is added to every denominator (Remark 2.1 gives none).
    - Passed means a reward of at least 1 (the verifier's verdict on the testbed).
    - No length shaping: the paper replaces DAPO's overlong punishment by its GROP (App. D),
      which is not implemented here, so ``overlong_shaping`` is off. DAPO's dynamic sampling
      is kept (the paper is silent; its baseline is DAPO); unkept groups get no credit.
    - GRPO-S keeps the token-level loss: its sequence-level ratio (Eq. 10-11) is not built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from .base import Needs, Services
from .contract import BEHAVIOUR_ENTROPY, Reduction
from .core import RolloutBatch
from .dapo import DAPO, DAPOConfig
from .registry import register_method

LEVELS = ("token", "sequence")


def _relative(values: Tensor, active: Tensor, eps: float) -> Tensor:
    """Each active entry over the mean of the active entries of its column, ``[n, T]``."""
    values = torch.where(active, values, torch.zeros_like(values))  # ended: 0, not 0/0
    count = active.sum(0, keepdim=True)
    mean = values.sum(0, keepdim=True) / count.clamp(min=1)
    ratio = values / (mean + eps)
    return torch.where(active, ratio, torch.zeros_like(ratio))


def gtpo_token_rewards(
    entropy: Tensor,
    response_mask: Tensor,
    passed: Tensor,
    group_ids: Tensor,
    alpha1: float,
    alpha2: float,
    eps: float = 1e-6,
) -> Tensor:
    """Eq. 3 and 5: ``[B, T]`` shaped token rewards from the entropies ``[B, T]``, the mask
    ``[B, T]``, ``passed`` ``[B]`` (bool) and ``group_ids`` ``[B]``; 0 off the mask."""
    mask = response_mask > 0
    rewards = torch.zeros_like(entropy, dtype=torch.float64)
    h = entropy.to(torch.float64)
    for group in torch.unique(group_ids):
        rows = group_ids == group
        good, bad = rows & passed, rows & ~passed
        if good.any():
            weight = _relative(h[good], mask[good], eps)
            rewards[good] = (alpha1 + alpha2 * weight) * mask[good]
        if bad.any():
            weight = _relative(1.0 / (h[bad] + eps), mask[bad], eps)
            rewards[bad] = -(alpha1 + alpha2 * weight) * mask[bad]
    return rewards


def grpo_s_rewards(
    entropy: Tensor, response_mask: Tensor, passed: Tensor, group_ids: Tensor, beta1: float,
    beta2: float, eps: float = 1e-6,
) -> Tensor:  # fmt: skip
    """Eq. 8-9: ``[B]`` shaped response rewards from each response's mean entropy."""
    mean_h = ((entropy * response_mask).sum(-1) / response_mask.sum(-1).clamp(min=1)).double()
    rewards = torch.zeros_like(mean_h)
    for group in torch.unique(group_ids):
        rows = group_ids == group
        for members, sign, value in ((rows & passed, 1.0, mean_h), (rows & ~passed, -1.0, None)):
            if members.any():
                x = mean_h[members] if value is not None else 1.0 / (mean_h[members] + eps)
                rewards[members] = sign * (beta1 + beta2 * x / (x.mean() + eps))
    return rewards


def group_zscore(values: Tensor, mask: Tensor, group_ids: Tensor, eps: float = 1e-6) -> Tensor:
    """``(x - mean) / (std + eps)`` over the masked entries of each group (unbiased std);
    ``values`` and ``mask`` ``[B, T]`` (or ``[B, 1]`` for one value a response)."""
    v, m = values.to(torch.float64), (mask > 0).to(torch.float64)
    out = torch.zeros_like(v)
    for group in torch.unique(group_ids):
        rows = group_ids == group
        n = m[rows].sum()
        mean = (v[rows] * m[rows]).sum() / n.clamp(min=1)
        var = (((v[rows] - mean) ** 2) * m[rows]).sum() / (n - 1).clamp(min=1)
        out[rows] = (v[rows] - mean) / (var.sqrt() + eps) * m[rows]
    return out


@dataclass
class GTPOConfig(DAPOConfig):
    """DAPO's settings with GTPO's: ``alpha1``, ``alpha2`` (α1, α2; β1, β2 for GRPO-S) and
    ``level`` (``token``: GTPO; ``sequence``: GRPO-S). No overlong shaping (Deviations)."""

    alpha1: float = 1.0  # §3.1
    alpha2: float = 0.1  # §3.1
    level: str = "token"
    overlong_shaping: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.level not in LEVELS:
            raise ValueError(f"level: one of {', '.join(LEVELS)} (got {self.level!r})")
        for name in ("alpha1", "alpha2"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value >= 0):
                raise ValueError(f"{name}: must be >= 0 (got {value!r})")


@register_method("gtpo")
class GTPO(DAPO):
    summary = "DAPO with each token's reward weighted by its entropy against the group's"
    paper = (
        "GTPO and GRPO-S: Token and Sequence-Level Reward Shaping with Policy Entropy "
        "(arXiv 2508.04349)"
    )
    Config = GTPOConfig
    # α2 = 0 leaves ±α1 z-scored over tokens, which weighs a response by its length: not
    # DAPO's per-response score, so no reduction is declared (and DAPO's is not inherited)
    reduces_to: ClassVar[tuple[Reduction, ...]] = ()
    needs = Needs(behaviour_logprobs=False, behaviour_statistics=(BEHAVIOUR_ENTROPY,))
    config: GTPOConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        if BEHAVIOUR_ENTROPY not in (batch.extras or {}):
            raise ValueError("gtpo needs the behaviour entropy; the batch lacks it")
        cfg = self.config
        entropy = batch.extra(BEHAVIOUR_ENTROPY)
        mask = self._filter_overlong(batch).response_mask  # DAPO's overlong_filtering option
        passed = batch.rewards >= 1.0
        if cfg.level == "token":
            shaped = gtpo_token_rewards(
                entropy, mask, passed, batch.group_ids, cfg.alpha1, cfg.alpha2
            )
            adv = group_zscore(shaped, mask, batch.group_ids)
        else:
            shaped = grpo_s_rewards(entropy, mask, passed, batch.group_ids, cfg.alpha1, cfg.alpha2)
            ones = torch.ones_like(shaped).unsqueeze(-1)
            adv = group_zscore(shaped.unsqueeze(-1), ones, batch.group_ids) * mask
        trained = self.trained_responses(batch).to(mask.dtype).unsqueeze(-1)
        return (adv.to(mask.dtype) * mask * trained).to(mask.dtype)
