"""RLOO: REINFORCE Leave-One-Out.

Paper: Ahmadian et al., "Back to Basics: Revisiting REINFORCE Style Optimization for
Learning from Human Feedback in LLMs", arXiv 2402.14740 (2024); the estimator is Kool et
al.'s "Buy 4 REINFORCE samples, get a baseline for free!" (2019).

Key equations (k responses y_1..y_k to a prompt x, the whole response is one action):

    A_i = R(y_i, x) - 1/(k-1) Σ_{j≠i} R(y_j, x)  =  k/(k-1) · (R(y_i, x) - mean_j R(y_j, x))

    ∇J(θ) = 1/k Σ_i A_i ∇ log π_θ(y_i | x),   log π_θ(y_i | x) = Σ_t log π_θ(y_it | x, y_i,<t)

Each response is judged against the mean of the others, which does not depend on it, so the
baseline leaves the gradient unbiased. RLOO is Dr. GRPO's advantage times k/(k-1).

Defaults: k ∈ {2, 4} in the paper (the group size is the harness's setting); aggregation
``seq-mean-token-sum``, the sum over tokens of the sequence log-probability averaged over
responses, as in the gradient above; no KL term (see Deviations).

Deviations:
    - The paper's update is plain on-policy REINFORCE, with no ratio and no clip. Here the
      loss is PPO-clip with ε = 0.2 (``clip=True``, as verl and OpenRLHF run RLOO). On-policy
      (one update per batch) ρ = 1, nothing is clipped and the gradient is the paper's
      exactly. With several updates per batch an unclipped ratio is unbounded, so the
      paper's reading would not train stably; ``clip=False`` gives it (the plain
      importance-weighted gradient) for single-update runs.
    - The paper puts a KL penalty to the SFT model into the RLHF reward; with a verifiable
      reward and no reward model to over-optimise, the default has none (``kl_coef`` adds
      one to the loss).
    - A group of one gets advantage 0: there is no one to leave out. verl's loop version
      leaves the raw score there, and its vectorised twin gives 0; ``singleton="raw"`` gives
      the loop's rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import SINGLETON_RULES, CreditMethod, LossConfig, Needs, check_fields
from .contract import Services
from .core import RolloutBatch, broadcast_to_tokens, group_mean_std
from .registry import register_method


def rloo_advantages(
    rewards: Tensor, response_mask: Tensor, group_ids: Tensor, *, singleton: str = "zero"
) -> Tensor:
    """The leave-one-out advantage on every response token.

    Args:
        rewards: ``[B]`` scalar rewards.
        response_mask: ``[B, T]``.
        group_ids: ``[B]``.
        singleton: ``"zero"`` (a group of one gets 0) or ``"raw"`` (it keeps its reward).

    Returns:
        ``[B, T]``: ``r_i - mean_{j≠i} r_j = G/(G-1) (r_i - mean_g)`` on the tokens of i.
    """
    if singleton not in ("zero", "raw"):
        raise ValueError(f"singleton: must be zero or raw (got {singleton!r})")
    mean, _, count = group_mean_std(rewards, group_ids)
    leave_one_out = (rewards - mean) * count / (count - 1).clamp(min=1)
    lone = rewards if singleton == "raw" else torch.zeros_like(rewards)
    return broadcast_to_tokens(torch.where(count > 1, leave_one_out, lone), response_mask)


@dataclass
class RLOOConfig(LossConfig):
    """RLOO hyper-parameters (loss fields inherited from `LossConfig`)."""

    aggregation: str = "seq-mean-token-sum"
    singleton: str = "zero"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self, [("singleton", self.singleton in SINGLETON_RULES, "must be zero or raw")]
        )


@register_method("rloo")
class RLOO(CreditMethod):
    summary = "REINFORCE with the mean reward of the other responses as baseline"
    paper = "Back to Basics: Revisiting REINFORCE Style Optimization for RLHF (arXiv 2402.14740)"
    Config = RLOOConfig
    needs = Needs(behaviour_logprobs=False)  # its rollout and advantages never read them
    config: RLOOConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        return rloo_advantages(
            batch.rewards, batch.response_mask, batch.group_ids, singleton=self.config.singleton
        )
