"""GPG: group policy gradient, the plain policy gradient on a group baseline, without a
surrogate, a reference model or a KL term.

Paper: Chu, Huang, Zhang, Wei and Wang, "GPG: A Simple and Strong Reinforcement Learning
Baseline for Model Reasoning", arXiv 2504.02546 (2025). The abstract was read: GPG "directly
optimize[s] the original RL objective, thus obviating the need for surrogate loss functions",
drops the critic and the reference model and the KL constraint, and addresses "the advantage
and gradient estimation bias". The method's equations were read in third-party summaries of
the paper and in verl's registered ``gpg`` estimator and loss (volcengine/verl,
``verl/trainer/ppo/core_algos.py``: ``compute_gpg_outcome_advantage``,
``compute_policy_loss_gpg``), which the authors' repository (AMAP-ML/GPG) points to.

Key equations (a batch of B responses in groups of G; r_i the reward of o_i):

    Â_i = α (r_i - mean(r_group)) / F_norm,   F_norm = 1        (every token of o_i gets Â_i)
    α = B / (B - M)         M = responses of groups whose rewards are all equal (no gradient)
    J(θ) = 1/Σ_i |o_i| Σ_i Σ_t Â_i log π_θ(o_i,t | q, o_i,<t)   (the plain policy gradient)

α is the paper's "accurate gradient estimation": the mean over the batch divides by all B
responses, of which M give no gradient, so the batch's gradient is scaled back up.

Defaults: F_norm = 1 (verl's ``f_norm=1.0``), token-mean aggregation, no clip, no KL.

Deviations:
    - The loss is this package's unclipped importance-weighted gradient (``clip=False``):
      on an exactly on-policy update its gradient is GPG's ``-Â ∇ log π``; over the protocol's
      several minibatches the ratio keeps it the gradient of the sampled batch's objective
      where verl's ``gpg`` loss drops it.
    - ``alpha="valid"`` (the default) is B / (B - M) as the paper's summaries state it;
      ``alpha="nonzero"`` is verl's code, B over the responses whose reward is not 0 (the two
      differ: verl counts non-zero rewards, not responses of mixed groups), and ``alpha="one"``
      drops the correction (ours, an ablation: Dr. GRPO's advantage with GPG's loss).
    - The paper resamples when the share of mixed-group responses falls below a threshold
      β_th; not built here (the harness's batch is the batch), so α carries the correction
      alone.
    - A group of one gets mean 0 (its advantage is α r), as verl gives it
      (``singleton="raw"``); ``singleton="zero"`` gives it 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import SINGLETON_RULES, CreditMethod, LossConfig, Needs, check_fields
from .contract import Reduction, Services
from .core import RolloutBatch, broadcast_to_tokens, group_normalized_scores, rows_of_mixed_groups
from .registry import register_method

ALPHA_RULES = ("valid", "nonzero", "one")


def gpg_alpha(rewards: Tensor, group_ids: Tensor, rule: str = "valid") -> Tensor:
    """The batch's scalar α: ``B / (B - M)`` with M the responses of groups whose rewards are
    all equal (``"valid"``), ``B / #{r != 0}`` (``"nonzero"``, verl's code) or 1 (``"one"``);
    ``rewards`` and ``group_ids`` ``[B]``. A batch with nothing to count gets α = B (a count of
    at least 1, as verl clamps it): its advantages are 0 there anyway under ``"valid"``."""
    size = torch.tensor(float(rewards.numel()), dtype=torch.float64)
    if rule == "one":
        return torch.ones((), dtype=torch.float64)
    if rule == "nonzero":
        counted = (rewards != 0).sum()
    else:
        counted = rows_of_mixed_groups(rewards, group_ids).sum()
    return size / counted.double().clamp(min=1.0)


def gpg_advantages(
    rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    *,
    alpha: str = "valid",
    singleton: str = "raw",
) -> Tensor:
    """``[B, T]`` ``α (r_i - mean_g)`` on the tokens of response i, 0 on padding; ``rewards``
    ``[B]``, ``response_mask`` ``[B, T]``, ``group_ids`` ``[B]``."""
    centred = group_normalized_scores(
        rewards.double(),
        group_ids,
        scale_by_std=False,
        singleton=singleton,  # type: ignore[arg-type]
    )
    scores = gpg_alpha(rewards, group_ids, alpha) * centred
    return broadcast_to_tokens(scores.to(rewards.dtype), response_mask)


@dataclass
class GPGConfig(LossConfig):
    """GPG's settings: ``alpha`` (the batch's correction: ``valid``, the paper's; ``nonzero``,
    verl's code; ``one``, none) and ``singleton`` (a group of one keeps α r, verl's rule, or
    gets 0). Loss fields: no clip (the plain policy gradient), token-mean, no KL."""

    clip: bool = False
    alpha: str = "valid"
    singleton: str = "raw"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self,
            [
                ("alpha", self.alpha in ALPHA_RULES, f"must be one of {', '.join(ALPHA_RULES)}"),
                ("singleton", self.singleton in SINGLETON_RULES, "must be zero or raw"),
            ],
        )


@register_method("gpg")
class GPG(CreditMethod):
    summary = (
        "the plain policy gradient on r - mean, scaled up by the batch's share of mixed groups"
    )
    paper = (
        "GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning"
        " (arXiv 2504.02546)"
    )
    Config = GPGConfig
    needs = Needs(behaviour_logprobs=False)  # its rollout and advantages never read them
    group_local = False  # α counts the whole batch's mixed groups
    # without α the advantage is Dr. GRPO's r - mean (the loss differs, the advantage does not)
    reduces_to = (
        Reduction("drgrpo", {"alpha": "one", "singleton": "zero"}, "ours: α = 1, F_norm = 1"),
    )
    config: GPGConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        return gpg_advantages(
            batch.rewards,
            batch.response_mask,
            batch.group_ids,
            alpha=self.config.alpha,
            singleton=self.config.singleton,
        )
