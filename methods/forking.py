"""Forking tokens: DAPO's policy gradient on the top-ρ share of tokens by entropy, no others.

Paper: Wang et al., "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective
Reinforcement Learning for LLM Reasoning", arXiv 2506.01939 (2025), §2.1 and §5.1. About a
fifth of a chain of thought's tokens have high entropy; they are where the reasoning forks.
Training on them alone, with DAPO on everything else unchanged, matched or beat training on
every token (Qwen3-32B: AIME'24 55.83 -> 63.54, AIME'25 45.63 -> 56.67, Table 2).

Key equations (token t of response o_i, the training policy's next-token distribution p_t):

    H_t = -sum_j p_t,j log p_t,j,   p_t = softmax(z_t / T)                                (Eq. 1)

    J(θ) = E[ 1/Σ_i Σ_t I[H_it >= τ_ρ]  Σ_i Σ_t I[H_it >= τ_ρ] min(r_it Â_it, clip(r_it, 1-ε_low,
              1+ε_high) Â_it) ]                                                           (Eq. 6)

τ_ρ is the entropy above which lie the top ρ of the batch's response tokens (ρ = 0.2, §5.1);
ρ = 1 is DAPO (Fig. 7). Here the credit of an unselected token is 0 and the loss averages
over the selected tokens (:meth:`ForkingTokens.loss_mask`), which is Eq. 6 on DAPO's
advantage Â_it.

Deviations:
    - The entropy is the behaviour policy's, from the scoring pass (``BEHAVIOUR_ENTROPY``); the
      paper computes it with the policy being trained (§2.1), the code per micro-batch of the
      update's forward (``dp_actor.py``). They are the same policy at the first minibatch.
    - τ_ρ is taken over the whole batch, as the paper says (§5.1), not per micro-batch as the
      code does; ties at τ_ρ are all kept (``I[H >= τ_ρ]``, Eq. 6), where the code's ``topk``
      keeps exactly ceil(ρN) tokens and breaks ties by position.
    - Everything else is this harness's DAPO (its deviations apply): dynamic sampling,
      clip-higher, the token-mean loss and the soft overlong punishment; the code recipe's
      dual clip (c = 10) is not set, as DAPO's paper has none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .base import Needs, Services
from .contract import BEHAVIOUR_ENTROPY, Reduction
from .core import RolloutBatch
from .dapo import DAPO, DAPOConfig
from .registry import register_method


def forking_mask(entropy: Tensor, response_mask: Tensor, rho: float) -> Tensor:
    """``[B, T]`` 1 on the forking tokens, 0 elsewhere: the response tokens whose entropy is
    at least τ_ρ, the ceil(ρN)-th largest entropy of the N response tokens of the batch (every
    token tied with it is kept too).

    Args:
        entropy: ``[B, T]`` each token's entropy H_t.
        response_mask: ``[B, T]``.
        rho: the share of tokens to keep, in (0, 1].
    """
    valid = response_mask > 0
    count = int(valid.sum())
    if count == 0:
        return torch.zeros_like(response_mask)
    keep = min(count, max(1, math.ceil(rho * count - 1e-9)))  # 1e-9: 0.1 * 30 is 3.0000000004
    threshold = entropy[valid].topk(keep).values.min()
    return ((entropy >= threshold) & valid).to(response_mask.dtype)


@dataclass
class ForkingConfig(DAPOConfig):
    """DAPO's settings and ``rho``, the share of the batch's tokens that get credit."""

    rho: float = 0.2

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.rho, (int, float)) and 0.0 < self.rho <= 1.0):
            raise ValueError(f"rho: must be in (0, 1] (got {self.rho!r})")


@register_method("forking")
class ForkingTokens(DAPO):
    summary = "DAPO's gradient on the 20% highest-entropy (forking) tokens of the batch only"
    paper = (
        "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective Reinforcement "
        "Learning for LLM Reasoning (arXiv 2506.01939)"
    )
    Config = ForkingConfig
    # ρ = 1 keeps every token's credit: DAPO on all tokens, the paper's baseline (Table 2)
    reduces_to = (Reduction("dapo", {"rho": 1.0}, "the 100% row of the paper's Table 2"),)
    group_local = False  # τ_ρ is a quantile of the whole batch's entropies
    needs = Needs(behaviour_logprobs=False, behaviour_statistics=(BEHAVIOUR_ENTROPY,))
    config: ForkingConfig

    def forking(self, batch: RolloutBatch) -> Tensor:
        """``[B, T]`` the batch's forking tokens (:func:`forking_mask`)."""
        if BEHAVIOUR_ENTROPY not in (batch.extras or {}):
            raise ValueError("forking needs the behaviour entropy; the batch lacks it")
        trained = self.trained_responses(batch).to(batch.response_mask.dtype)  # DAPO's kept groups
        mask = batch.response_mask * trained.unsqueeze(-1)
        return forking_mask(batch.extra(BEHAVIOUR_ENTROPY), mask, self.config.rho)

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        return super().advantages(batch, services) * self.forking(batch)

    def loss_mask(self, batch: RolloutBatch) -> Tensor:
        """The forking tokens: Eq. 6 averages over them alone."""
        return batch.response_mask * self.forking(batch)
