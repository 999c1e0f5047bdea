"""OTB: the optimal token baseline, one baseline per position weighted by path variance.

Paper: Li, Xu et al., "The Optimal Token Baseline: Variance Reduction for Long-Horizon
LLM-RL", arXiv 2602.07078 (2026). The abstract states the principle: a gradient update is
weighted inversely to its cumulative gradient norm, and the norm is approximated by a
"Logit-Gradient Proxy" from forward-pass probabilities only; OTB at N = 4 responses a prompt
matches the group baseline at N = 32 and stops the gradient-norm surges that end long runs
(§1, Fig. 1). Only the abstract and §1 could be read; the equations below are those of verl's
registered estimator ``optimal_token_baseline`` (volcengine/verl,
``verl/trainer/ppo/core_algos.py``, ``compute_optimal_token_baseline_advantage``, and
``docs/algo/otb.md``), which the paper's authors contributed.

Key equations (a group of N responses to one prompt; π_j the behaviour policy's probability
of the sampled token at position j, Σπ²_j its whole next-token distribution's; only the
responses still running at position t take part at t):

    ||s_j||² = 1 - 2 π_j + Σπ²_j           (= ||e_token - π||², the log-prob's logit gradient)
    W_t = Σ_{j ≤ t} ||s_j||²                (the path variance up to t)
    B_t = Σ_i G_t^i W_t^i / (Σ_i W_t^i + ε)
    A_t = G_t - B_t                         (G_t = R, the outcome reward, at every token)

No division by a standard deviation. Loss: PPO-clip with ε = 0.2, token-mean aggregation,
no KL (verl's actor defaults, which the estimator's example runs keep).

Deviations:
    - The equations are verl's code and documentation, not read in the paper (inferred to be
      the paper's: verl's docs cite it and its authors wrote the estimator).
    - The zero tail is on (``zero_tail``, verl's default since verl PR #5380, "aligned with the
      latest papers"): past the second-longest response of a group only the longest runs, its
      baseline would equal its own return (advantage 0), so it gets no baseline there.
    - π and Σπ² are of the tempered behaviour distribution from the scoring pass
      (``BEHAVIOUR_SUM_PI_SQUARED``), as verl's actor computes both after dividing the logits
      by the temperature. verl's importance-sampling weighting (ρ̄² on each term, with rollout
      correction) and its multi-turn variant are not built: the testbed's rollouts are the
      policy's own and single-turn.
    - A group of one gets baseline 0 (its advantage is its reward), as in verl.
    - verl's vanilla loss always applies a dual clip (c = 3); it is off here, as GRPO's, so the
      two differ by the baseline alone (``dual_clip=3`` matches verl).
    - ``weighting="uniform"`` (ours, an ablation; default ``"path_variance"``, the method): W_t = 1
      for every running response, so B_t is the plain mean return of the group's responses
      still running at t. It keeps everything else of OTB (no std division, token-mean, the zero
      tail) and leaves out the path-variance weights, so a row run with it tells how much of
      OTB's gain is its weights and how much the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import CreditMethod, LossConfig, Needs, check_fields
from .contract import BEHAVIOUR_SUM_PI_SQUARED, Services
from .core import RolloutBatch
from .registry import register_method


def logit_gradient_proxy(old_logprobs: Tensor, sum_pi_squared: Tensor, mask: Tensor) -> Tensor:
    """``[B, T]`` ``1 - 2π + Σπ²`` at each response token, 0 off ``mask``: the squared norm of
    the sampled token's log-prob gradient with respect to the logits (never negative: it is
    ``(1 - π)² + Σ_{v ≠ token} π_v²``)."""
    proxy = 1.0 - 2.0 * old_logprobs.exp() + sum_pi_squared
    return proxy.clamp(min=0.0) * mask  # rounding can leave -1e-8 where π is 1


def optimal_token_baselines(
    returns: Tensor,
    weights: Tensor,
    mask: Tensor,
    group_ids: Tensor,
    *,
    zero_tail: bool = True,
    eps: float = 1e-8,
) -> Tensor:
    """``[B, T]`` each group's weighted mean return at each position, ``B_t = Σ G W / Σ W``
    over the group's responses still running there; ``returns``, ``weights`` (``W_t``) and
    ``mask`` ``[B, T]``, ``group_ids`` ``[B]``. 0 for a group of one and, with ``zero_tail``,
    on the part of a group's only longest response past its second-longest."""
    baselines = torch.zeros_like(returns)
    lengths = mask.sum(-1)
    for group in torch.unique(group_ids):
        rows = (group_ids == group).nonzero().squeeze(-1)
        if rows.numel() < 2:
            continue
        m, w = mask[rows], weights[rows]
        numerator = (returns[rows] * w * m).sum(0)
        denominator = (w * m).sum(0) + eps
        baselines[rows] = (numerator / denominator).expand(rows.numel(), -1).clone()
        if zero_tail:
            ordered = lengths[rows].sort().values
            longest, second = ordered[-1], ordered[-2]
            if longest > second:  # one response alone is longest
                alone = rows[lengths[rows] == longest]
                baselines[alone, int(second) :] = 0.0
    return baselines * mask


def otb_advantages(
    rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    old_logprobs: Tensor,
    sum_pi_squared: Tensor,
    *,
    zero_tail: bool = True,
    eps: float = 1e-8,
    uniform: bool = False,
) -> Tensor:
    """``[B, T]`` ``A_t = R - B_t`` on the response tokens: ``rewards`` ``[B]``, the
    behaviour log-probs and Σπ² ``[B, T]``, the mask ``[B, T]``, ``group_ids`` ``[B]``.
    ``uniform``: W_t = 1 (the ablation without the path-variance weights)."""
    mask = response_mask.to(torch.float64)
    returns = rewards.to(torch.float64).unsqueeze(-1) * mask  # an outcome reward: G_t = R
    if uniform:
        weights = torch.ones_like(mask)
    else:
        proxy = logit_gradient_proxy(old_logprobs.double(), sum_pi_squared.double(), mask)
        weights = proxy.cumsum(-1)  # W_t: the path variance up to and with position t
    baselines = optimal_token_baselines(
        returns, weights, mask, group_ids, zero_tail=zero_tail, eps=eps
    )
    return ((returns - baselines) * mask).to(response_mask.dtype)


WEIGHTINGS = ("path_variance", "uniform")


@dataclass
class OTBConfig(LossConfig):
    """OTB's settings: ``zero_tail`` (no baseline on a group's only longest response past its
    second-longest; verl's default), ``eps`` (added to the denominator of B_t; verl's 1e-8)
    and ``weighting`` (``path_variance``, the method; ``uniform``, the ablation without its
    weights). Loss fields: `LossConfig`'s defaults (ε 0.2, token-mean, no KL), verl's actor's."""

    zero_tail: bool = True
    eps: float = 1e-8
    weighting: str = "path_variance"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self,
            [
                ("zero_tail", isinstance(self.zero_tail, bool), "must be true or false"),
                ("eps", self.eps > 0.0, "must be > 0"),
                (
                    "weighting",
                    self.weighting in WEIGHTINGS,
                    f"must be one of {', '.join(WEIGHTINGS)}",
                ),
            ],
        )


@register_method("otb")
class OTB(CreditMethod):
    summary = "a baseline per position: the group's returns weighted by each path's variance"
    paper = (
        "The Optimal Token Baseline: Variance Reduction for Long-Horizon LLM-RL (arXiv 2602.07078)"
    )
    Config = OTBConfig
    needs = Needs(behaviour_statistics=(BEHAVIOUR_SUM_PI_SQUARED,))
    config: OTBConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        if BEHAVIOUR_SUM_PI_SQUARED not in (batch.extras or {}):
            raise ValueError("otb needs the behaviour policy's sum of squared probabilities")
        return otb_advantages(
            batch.rewards,
            batch.response_mask,
            batch.group_ids,
            batch.old_logprobs,
            batch.extra(BEHAVIOUR_SUM_PI_SQUARED),
            zero_tail=self.config.zero_tail,
            eps=self.config.eps,
            uniform=self.config.weighting == "uniform",
        )
