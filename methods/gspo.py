"""GSPO: Group Sequence Policy Optimization.

Paper: Zheng et al., "Group Sequence Policy Optimization", arXiv 2507.18071 (2025), §4.

Key equations (G responses y_1..y_G to a query x):

    s_i(θ) = ( π_θ(y_i | x) / π_θold(y_i | x) )^(1/|y_i|)
           = exp( 1/|y_i| Σ_t log( π_θ(y_it | x, y_i,<t) / π_θold(y_it | x, y_i,<t) ) )

    J(θ) = E[ 1/G Σ_i min( s_i(θ) Â_i, clip(s_i(θ), 1-ε_low, 1+ε_high) Â_i ) ]

    Â_i = (r_i - mean(r_1..r_G)) / std(r_1..r_G)

The importance ratio is the length-normalised likelihood ratio of the whole response, so
the trust region is on sequences, the unit the reward is given to, and one noisy token
cannot swing its own weight. GSPO-token (§4.3) writes the same objective per token with

    s_it(θ) = sg[s_i(θ)] · π_θ(y_it | ...) / sg[π_θ(y_it | ...)],

whose value is s_i on every token and whose gradient is s_i times the token's score; with
one advantage per response it equals GSPO exactly. The loss here is GSPO-token
(``core.importance_ratio(..., level="sequence")``) with ``seq-mean-token-mean`` aggregation,
which is the 1/G Σ_i of the objective above.

Defaults from the paper (§5.1): ε_low = 3e-4, ε_high = 4e-4 ("the left and right clipping
ranges in Eq. (5)"); no KL term; no dual clip.

Deviations:
    - std is unbiased plus 1e-6, and a group of one gets advantage 0, as in ``grpo``.
    - The sequence log-ratio is clamped at 10 before the exponential (verl does the same), so
      a response far off-policy cannot overflow.
    - No dual clip (``dual_clip=None``), as Eq. (5) has none and neither has verl's ``gspo``
      loss (verl 0.9.1, ``compute_policy_loss_gspo``), which never reads ``clip_ratio_c``;
      with one, every negative-advantage token of a response whose ratio s_i exceeds c would
      lose its gradient. Inside verl, ``creditbench_gspo`` ignores ``clip_ratio_c`` likewise
      (verl's default c = 3 is its token-ratio loss's); ``dual_clip=c`` turns it on.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import CreditMethod, LossConfig, Needs
from .contract import Services
from .core import RolloutBatch, broadcast_to_tokens, group_normalized_scores, sequence_log_ratio
from .registry import register_method


def gspo_advantages(rewards: Tensor, response_mask: Tensor, group_ids: Tensor) -> Tensor:
    """GSPO's advantage, the same z-scored group advantage as GRPO, ``[B, T]``."""
    return broadcast_to_tokens(group_normalized_scores(rewards, group_ids), response_mask)


def gspo_sequence_ratio(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor) -> Tensor:
    """The sequence importance ratio ``s_i = exp(mean_t log ρ_it)``, ``[B]``, with gradient.

    For reading and logging. The loss uses the per-token form
    ``core.importance_ratio(..., level="sequence")``, whose value on every token of response
    i is this ``s_i`` (up to the clamp of the log-ratio at 10).
    """
    return torch.exp(sequence_log_ratio(logprobs, old_logprobs, mask))


@dataclass
class GSPOConfig(LossConfig):
    """GSPO hyper-parameters (loss fields inherited from `LossConfig`)."""

    eps_low: float = 3e-4
    eps_high: float = 4e-4
    ratio_level: str = "sequence"
    aggregation: str = "seq-mean-token-mean"


@register_method("gspo")
class GSPO(CreditMethod):
    summary = "group advantage with a clipped, length-normalised sequence importance ratio"
    paper = "Group Sequence Policy Optimization (arXiv 2507.18071)"
    Config = GSPOConfig
    needs = Needs(behaviour_logprobs=False)  # its rollout and advantages never read them
    config: GSPOConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        return gspo_advantages(batch.rewards, batch.response_mask, batch.group_ids)
