"""Pass@k training: advantages that optimise the chance that one of k responses passes.

Paper: Chen, Qin, Wu, Ling, Ye, Zhao and Shi, "Pass@k Training for Adaptively Balancing
Exploration and Exploitation of Large Reasoning Models", arXiv 2508.10751 (2025). The abstract
was read: the reward of a group of k responses is whether one of them passes (Pass@k
training), and an analytical solution of its advantage makes the training "efficient and
effective". The closed form below was read in third-party code that implements it and cites
the paper's Eq. 14-15, and agrees with the definitions the abstract gives.

Key equations (a group of N responses to one prompt, N_neg of them failed, k ≤ N; every
k-subset of the group is a "group" of Pass@k, rewarded 1 if one of its responses passes):

    R̄ = 1 - C(N_neg, k) / C(N, k)                      (the mean reward over k-subsets)
    σ = sqrt(R̄ (1 - R̄))
    Â_pos = (1 - R̄) / σ                                 (every token of a passed response)
    Â_neg = (1 - R̄ - C(N_neg - 1, k - 1) / C(N - 1, k - 1)) / σ      (of a failed one)

A failed response is blamed only in the subsets where no other response passes, so a group
with fewer than k failures carries no signal (R̄ = 1, σ = 0), and a rare pass is worth more
than GRPO gives it. With k = 1 the advantages are GRPO's with the population std.

Defaults: k = 4 (ours: half the testbed's group of 8; the paper's own k was not read);
GRPO's loss otherwise (seq-mean-token-mean, PPO-clip ε = 0.2, no KL).

Deviations:
    - A response passes when its reward is at least 1 (the verifier's pass); the paper's
      rewards are 0/1. A group smaller than k uses k = its size (ours), so a group of one
      gets 0.
    - ``estimator="max_minus_second"`` is verl's ``grpo_passk`` estimator
      (``verl/trainer/ppo/core_algos.py``, ``compute_grpo_passk_outcome_advantage``), which
      verl's docstring attributes to arXiv 2503.19595, another paper: only each group's best
      response gets an advantage, r_max - r_second, divided by the group's std (verl's
      default). verl raises on a group of one; here it gets 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import torch
from torch import Tensor

from .base import CreditMethod, LossConfig, Needs, check_fields
from .contract import Services
from .core import RolloutBatch, broadcast_to_tokens
from .registry import register_method

ESTIMATORS = ("analytic", "max_minus_second")


def passk_group_advantages(passed: list[bool], k: int) -> list[float]:
    """One group's analytic Pass@k advantages, one per response (``passed`` in group order):
    ``(1 - R̄) / σ`` for a pass and ``(1 - R̄ - C(N_neg-1, k-1)/C(N-1, k-1)) / σ`` for a failure,
    0 where σ = 0."""
    n, n_neg = len(passed), passed.count(False)
    k = min(k, n)
    fail_all = comb(n_neg, k) / comb(n, k)  # 1 - R̄: no response of a k-subset passes
    mean = 1.0 - fail_all
    std = (mean * (1.0 - mean)) ** 0.5
    if std == 0.0:
        return [0.0] * n
    blamed = comb(n_neg - 1, k - 1) / comb(n - 1, k - 1) if n_neg > 0 else 0.0
    return [fail_all / std if ok else (fail_all - blamed) / std for ok in passed]


def best_minus_second(rewards: Tensor, *, scale_by_std: bool = True, eps: float = 1e-6) -> Tensor:
    """``[N]`` verl's ``grpo_passk`` for one group: ``r_max - r_second`` on the first best
    response (divided by the group's unbiased std + eps), 0 elsewhere and for a group of one."""
    out = torch.zeros_like(rewards)
    if rewards.numel() < 2:
        return out
    top, where = torch.topk(rewards, 2)
    gap = top[0] - top[1]
    out[where[0]] = gap / (rewards.std() + eps) if scale_by_std else gap
    return out


def passk_advantages(
    rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    *,
    k: int = 4,
    estimator: str = "analytic",
) -> Tensor:
    """``[B, T]`` each response's Pass@k advantage on its tokens, 0 on padding; ``rewards``
    ``[B]``, ``response_mask`` ``[B, T]``, ``group_ids`` ``[B]``."""
    scores = torch.zeros_like(rewards, dtype=torch.float64)
    for group in torch.unique(group_ids):
        rows = (group_ids == group).nonzero().squeeze(-1)
        if estimator == "analytic":
            passed = [bool(r >= 1.0) for r in rewards[rows].tolist()]
            values = passk_group_advantages(passed, k)
            scores[rows] = torch.tensor(values, dtype=torch.float64)
        else:
            scores[rows] = best_minus_second(rewards[rows].double())
    return broadcast_to_tokens(scores.to(rewards.dtype), response_mask)


@dataclass
class PassKConfig(LossConfig):
    """Pass@k's settings: ``k`` (the subset size whose pass is rewarded) and ``estimator``
    (``analytic``, the paper's closed form; ``max_minus_second``, verl's ``grpo_passk``).
    Loss fields: GRPO's (seq-mean-token-mean, ε 0.2, no KL)."""

    aggregation: str = "seq-mean-token-mean"
    k: int = 4
    estimator: str = "analytic"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self,
            [
                ("k", isinstance(self.k, int) and self.k >= 1, "must be an integer >= 1"),
                (
                    "estimator",
                    self.estimator in ESTIMATORS,
                    f"must be one of {', '.join(ESTIMATORS)}",
                ),
            ],
        )


@register_method("passk")
class PassK(CreditMethod):
    summary = "the analytic advantage of rewarding a group of k responses if one of them passes"
    paper = (
        "Pass@k Training for Adaptively Balancing Exploration and Exploitation of Large "
        "Reasoning Models (arXiv 2508.10751)"
    )
    Config = PassKConfig
    needs = Needs(behaviour_logprobs=False)  # its rollout and advantages never read them
    config: PassKConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        return passk_advantages(
            batch.rewards,
            batch.response_mask,
            batch.group_ids,
            k=self.config.k,
            estimator=self.config.estimator,
        )
