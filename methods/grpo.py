"""GRPO: Group Relative Policy Optimization.

Paper: Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open
Language Models", arXiv 2402.03300 (2024), §4.1.

Key equations (outcome supervision, G responses o_1..o_G to one question q):

    A_i = (r_i - mean(r_1..r_G)) / std(r_1..r_G)              (every token t of o_i gets A_i)

    J(θ) = E[ 1/G Σ_i 1/|o_i| Σ_t min( ρ_it A_i, clip(ρ_it, 1-ε, 1+ε) A_i ) - β KL(π_θ || π_ref) ]
    ρ_it = π_θ(o_it | q, o_i,<t) / π_θ_old(o_it | q, o_i,<t)

Defaults from the paper: ε = 0.2, β = 0.04 (k3 estimator), seq-mean-token-mean aggregation.

Deviations:
    - std is the unbiased sample standard deviation plus ε_std = 1e-6 (verl's convention; the
      paper does not say which). ``std_kind="population"`` is offered.
    - A group of one gets advantage 0 (``singleton="raw"`` gives verl's raw-reward rule).
    - β defaults to 0 here: the testbed has no reference model worth anchoring to, and most
      2025-26 recipes drop the KL term; set ``kl_coef=0.04`` for the paper's setting.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from .base import CreditMethod, LossConfig, Needs, check_fields
from .contract import Services
from .core import RolloutBatch, broadcast_to_tokens, group_normalized_scores
from .registry import register_method


def grpo_advantages(
    rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    *,
    scale_by_std: bool = True,
    std_kind: str = "unbiased",
    eps: float = 1e-6,
    singleton: str = "zero",
) -> Tensor:
    """GRPO's outcome advantage on every response token.

    Args:
        rewards: ``[B]`` scalar rewards.
        response_mask: ``[B, T]``.
        group_ids: ``[B]``.

    Returns:
        ``[B, T]``: ``(r_i - mean_g) / (std_g + eps)`` on the tokens of response i.
    """
    scores = group_normalized_scores(
        rewards,
        group_ids,
        scale_by_std=scale_by_std,
        std_kind=std_kind,  # type: ignore[arg-type]
        eps=eps,
        singleton=singleton,  # type: ignore[arg-type]
    )
    return broadcast_to_tokens(scores, response_mask)


@dataclass
class GRPOConfig(LossConfig):
    """GRPO hyper-parameters (loss fields inherited from `LossConfig`)."""

    aggregation: str = "seq-mean-token-mean"
    std_kind: str = "unbiased"
    std_eps: float = 1e-6
    singleton: str = "zero"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self,
            [
                (
                    "std_kind",
                    self.std_kind in ("unbiased", "population"),
                    "must be unbiased or population",
                ),
                ("singleton", self.singleton in ("zero", "raw"), "must be zero or raw"),
                # a negative one flips the sign of a group's advantages where std < -eps; 0 is
                # safe (a group of equal rewards scores 0) and RRPO's convention
                ("std_eps", self.std_eps >= 0.0, "must be >= 0"),
            ],
        )


def grpo_scores(rewards: Tensor, group_ids: Tensor, cfg: GRPOConfig) -> Tensor:
    """``[B]`` GRPO's z-scored reward of every response, with ``cfg``'s std, eps and singleton
    rule: the outcome score that methods built on GRPO start from."""
    return group_normalized_scores(
        rewards,
        group_ids,
        std_kind=cfg.std_kind,  # type: ignore[arg-type]
        eps=cfg.std_eps,
        singleton=cfg.singleton,  # type: ignore[arg-type]
    )


@register_method("grpo")
class GRPO(CreditMethod):
    summary = "one z-scored group advantage for every token of a response"
    paper = "DeepSeekMath: Pushing the Limits of Mathematical Reasoning (arXiv 2402.03300)"
    Config = GRPOConfig
    needs = Needs(behaviour_logprobs=False)  # its rollout and advantages never read them
    config: GRPOConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        cfg = self.config
        return grpo_advantages(
            batch.rewards,
            batch.response_mask,
            batch.group_ids,
            std_kind=cfg.std_kind,
            eps=cfg.std_eps,
            singleton=cfg.singleton,
        )
