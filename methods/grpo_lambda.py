"""GRPO-λ: GRPO's outcome advantage spread over a response's tokens by a critic-free
eligibility trace.

Paper: Parthasarathi, Reymond, Chen, Cui and Chandar, "GRPO-λ: Credit Assignment improves
LLM Reasoning", arXiv 2510.00194 (2025). Only the abstract could be read: GRPO-λ
"approximate[s] learning from λ-return with a reformulation of eligibility traces using
token-level log-probabilities applied after each sequence generation, and a novel critic-free
approximation of the temporal-difference error", with "a few variations for the weighting of
the λ-return"; third-party summaries add that the decay styles propagate the reward to earlier
tokens and that a "both" style balances early and late tokens. No code is public. The
equations below are this file's reconstruction from those sentences, not the paper's.

Key equations (reconstructed; response i of T_i tokens, Â_i GRPO's z-scored reward):

    δ_t = 0 for t < T_i - 1,  δ_{T_i-1} = Â_i      (the critic-free TD error: GRPO's baseline
                                                   V(s_t) = the group mean at every token)
    e_t = Σ_{k ≤ t} (γλ)^{t-k} ∇ log π(o_k)       (the accumulating trace, applied after the
                                                   sequence is generated)
    Σ_t δ_t e_t = Â_i Σ_k (γλ)^{T_i-1-k} ∇ log π(o_k)   → token k weighted w_k = (γλ)^{T_i-1-k}

    A_{i,k} = Â_i · w_k / mean_k(w_k)              (the "recent" style)
    w_k = max((γλ)^{T_i-1-k}, (γλ)^k)             (the "both" style: first and last tokens)

With λ = 1 every weight is 1 and the advantages are GRPO's (the conformance suite checks it).

Defaults: λ = 0.99, γ = 1, style ``both`` (ours: the paper's values were not read; 0.99^150 ≈
0.22 spreads the weight over a testbed response of about 150 tokens). GRPO's loss otherwise.

Deviations:
    - Everything past the abstract is reconstructed (above); the page lists each choice.
    - The weights are divided by their mean over the response (ours, ``normalize``): the
      response's summed credit stays GRPO's, so λ reshapes credit without rescaling the step.
    - The negative-advantage clamping third-party summaries mention is not built (its form
      was not read).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import CreditMethod, Needs, check_fields
from .contract import Reduction, Services
from .core import RolloutBatch
from .grpo import GRPOConfig, grpo_scores
from .registry import register_method

STYLES = ("recent", "both")


def trace_weights(
    mask: Tensor, decay: float, *, style: str = "both", normalize: bool = True
) -> Tensor:
    """``[B, T]`` each token's eligibility weight from ``mask`` ``[B, T]``: ``decay^(tokens
    after it)`` (``recent``), or the larger of that and ``decay^(tokens before it)``
    (``both``); divided by the response's mean weight when ``normalize``; 0 off the mask."""
    m = mask.double()
    before = m.cumsum(-1) - m  # response tokens before position t
    after = m.flip(-1).cumsum(-1).flip(-1) - m  # response tokens after it
    weights = torch.pow(torch.tensor(decay, dtype=torch.float64), after)
    if style == "both":
        weights = torch.maximum(
            weights, torch.pow(torch.tensor(decay, dtype=torch.float64), before)
        )
    weights = weights * m
    if normalize:
        weights = weights / (weights.sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1))
    return torch.nan_to_num(weights * m)


def grpo_lambda_advantages(scores: Tensor, mask: Tensor, decay: float, **options: object) -> Tensor:
    """``[B, T]`` ``Â_i w_t``: the response scores ``[B]`` (GRPO's) on the eligibility weights
    of ``mask`` ``[B, T]`` (`trace_weights`, with ``options``)."""
    weights = trace_weights(mask, decay, **options)  # type: ignore[arg-type]
    return (scores.double()[:, None] * weights).to(mask.dtype)


@dataclass
class GRPOLambdaConfig(GRPOConfig):
    """GRPO-λ's settings beside GRPO's: ``lam`` and ``gamma`` (the trace decays by γλ a token),
    ``style`` (``recent`` or ``both``) and ``normalize`` (weights of mean 1 a response)."""

    lam: float = 0.99
    gamma: float = 1.0
    style: str = "both"
    normalize: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self,
            [
                ("lam", 0.0 < self.lam <= 1.0, "must be in (0, 1]"),
                ("gamma", 0.0 < self.gamma <= 1.0, "must be in (0, 1]"),
                ("style", self.style in STYLES, f"must be one of {', '.join(STYLES)}"),
                ("normalize", isinstance(self.normalize, bool), "must be true or false"),
            ],
        )


@register_method("grpo_lambda")
class GRPOLambda(CreditMethod):
    summary = "GRPO's advantage on each token weighted by a critic-free eligibility trace"
    paper = "GRPO-λ: Credit Assignment improves LLM Reasoning (arXiv 2510.00194)"
    Config = GRPOLambdaConfig
    needs = Needs(behaviour_logprobs=False)  # its rollout and advantages never read them
    reduces_to = (Reduction("grpo", {"lam": 1.0}, "ours: every trace weight is 1 at γλ = 1"),)
    config: GRPOLambdaConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        cfg = self.config
        scores = grpo_scores(batch.rewards, batch.group_ids, cfg)
        return grpo_lambda_advantages(
            scores,
            batch.response_mask,
            cfg.gamma * cfg.lam,
            style=cfg.style,
            normalize=cfg.normalize,
        )
