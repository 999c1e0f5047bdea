"""PPPO: the policy gradient on each response's prefix alone, the prefix rewarded by its
continuations, the kept share growing over training.

Paper: Sun, Zhao, Wei, Zhang, Gong, "Well Begun, Half Done: Reinforcement Learning with Prefix
Optimization for LLM Reasoning", arXiv 2512.15274 (AAAI 2026). No code was released. Only the
abstract could be read; the equations and defaults below come from two independent notes that
transcribe the paper's method section, Algorithm 1 and Tables 1-3 and agree with each other (tagged
[summary] on the docs page), and the rest is inferred.

Key equations (group of N responses o_i to one question, η the retention ratio):

    H(j, o_i) = 1[j <= floor(η |o_i|)]                   the prefix b_i: the first tokens of o_i
    R_i = Σ_{c=1..G} 1[ŷ(c_j) = a] + 1[ŷ(o_i) = a]       G continuations of b_i, plus o_i itself
    Â_i = (R_i - mean_g R) / (std_g R + eps)             on the prefix tokens, 0 after them
    J = 1/Σ_k|o_k| Σ_i Σ_j H(j, o_i) min(r_ij Â_i, clip(r_ij, 1-ε_low, 1+ε_high) Â_i)

with G = 8, ε_low = 0.2, ε_high = 0.28 (DAPO's), and η rising 15% -> 35% in steps of 5% while
training ("Progressive Prefix Retention"). The continuations only score the prefix; their
tokens are not trained on. They are bought through ``Services.generate`` and charged to the
budget; identical prefixes of one problem share their continuations
(:func:`methods.values.mc_state_values`).

Deviations:
    - The paper raises η by 5% when the validation accuracy stops improving (patience not
      given); a method here keeps no state between steps and sees no validation set, so η
      climbs the same staircase over the budget instead: 15% in the first fifth, 20% in the
      second, ..., 35% in the last (``eta_start``, ``eta_step``, ``eta_max``).
    - The advantage, a group z-score of R_i broadcast to the prefix tokens, is inferred: the
      notes say only that PPPO puts its mask on the GRPO/DAPO objective. GRPO's z-score
      (unbiased std, eps 1e-6) is used.
    - The normaliser is every response token (Σ_k |o_k|), as both notes transcribe it; a mean
      over the kept tokens would weigh each kept token 1/η more.
    - DAPO's dynamic sampling and overlong shaping are not stated for PPPO and are not run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .base import CreditMethod, LossConfig, Needs, check_fields
from .contract import Reduction, Services, method_extra
from .core import RolloutBatch, broadcast_to_tokens, group_normalized_scores
from .registry import register_method
from .values import mc_state_values

PREFIX = method_extra("pppo", "pppo_prefix", "[B, T]", "1 on the response's kept prefix tokens")
CONTINUATION_REWARD = method_extra(
    "pppo", "pppo_continuations", "[B]", "the summed reward of the prefix's G continuations"
)


def retention(budget_fraction: float, start: float, step: float, maximum: float) -> float:
    """η at this point of training: ``start``, raised by ``step`` each fifth of the budget
    while it stays at or below ``maximum``."""
    raised = start + step * math.floor(5 * min(max(budget_fraction, 0.0), 0.999999))
    return min(raised, maximum)


def prefix_mask(response_mask: Tensor, eta: float) -> Tensor:
    """``[B, T]`` H(j, o_i): 1 on the first floor(η |o_i|) tokens of each response."""
    lengths = response_mask.sum(-1)
    kept = torch.floor(eta * lengths + 1e-6)  # η |o| exact at η = 1 despite float rounding
    position = torch.arange(response_mask.shape[-1]).unsqueeze(0)
    return (position < kept.unsqueeze(-1)).to(response_mask.dtype) * response_mask


def pppo_advantages(
    rewards: Tensor,
    continuation_rewards: Tensor,
    prefix: Tensor,
    group_ids: Tensor,
    eps: float = 1e-6,
) -> Tensor:
    """``[B, T]`` Â_i on the prefix tokens of response i, 0 elsewhere.

    Args:
        rewards: ``[B]`` each response's own outcome.
        continuation_rewards: ``[B]`` the summed outcomes of its prefix's continuations.
        prefix: ``[B, T]`` H, the kept prefix tokens.
        group_ids: ``[B]``.
    """
    accumulated = rewards + continuation_rewards
    scores = group_normalized_scores(accumulated, group_ids, eps=eps)
    return broadcast_to_tokens(scores, prefix)


@dataclass
class PPPOConfig(LossConfig):
    """PPPO hyper-parameters (loss fields inherited from `LossConfig`)."""

    eps_high: float = 0.28
    aggregation: str = "token-mean"
    continuations: int = 8
    eta_start: float = 0.15
    eta_step: float = 0.05
    eta_max: float = 0.35
    std_eps: float = 1e-6

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self,
            [
                (
                    "continuations",
                    isinstance(self.continuations, int) and self.continuations >= 0,
                    "must be an integer >= 0",
                ),
                ("eta_start", 0.0 < self.eta_start <= 1.0, "must be in (0, 1]"),
                ("eta_step", 0.0 <= self.eta_step <= 1.0, "must be in [0, 1]"),
                ("eta_max", self.eta_start <= self.eta_max <= 1.0, "must be in [eta_start, 1]"),
                ("std_eps", self.std_eps >= 0, "must be >= 0"),
            ],
        )


@register_method("pppo")
class PPPO(CreditMethod):
    summary = "the gradient on each response's prefix alone, rewarded by its continuations"
    paper = (
        "Well Begun, Half Done: Reinforcement Learning with Prefix Optimization (arXiv 2512.15274)"
    )
    Config = PPPOConfig
    needs = Needs(behaviour_logprobs=False)  # its rollout and advantages never read them
    reduces_to = (
        Reduction(
            "grpo",
            {"continuations": 0, "eta_start": 1.0, "eta_max": 1.0},
            "the whole response kept and no continuation: R_i is o_i's own outcome (ours)",
        ),
    )
    config: PPPOConfig

    def rollout(self, services: Services) -> RolloutBatch:
        cfg = self.config
        batch = services.sample_batch()
        eta = retention(services.budget_fraction, cfg.eta_start, cfg.eta_step, cfg.eta_max)
        prefix = prefix_mask(batch.response_mask, eta)
        continuation_rewards = torch.zeros_like(batch.rewards)
        kept = prefix.sum(-1)
        # The state after the prefix, as a two-step cut of the response; a prefix that is the
        # whole response (or empty) has nothing to continue.
        wanted = (kept > 0) & (kept < batch.response_mask.sum(-1))
        if cfg.continuations > 0 and bool(wanted.any()):
            cut = torch.where(batch.response_mask > 0, torch.where(prefix > 0, 0, 1), -1)
            at_prefix = torch.stack([torch.zeros_like(wanted), wanted], dim=-1)
            values = mc_state_values(
                services, replace(batch, step_ids=cut), cfg.continuations, only=at_prefix
            )
            continuation_rewards = torch.where(wanted, cfg.continuations * values[:, 1], 0.0)
        services.report({"pppo_eta": eta})
        batch.extras = {
            **(batch.extras or {}),
            PREFIX: prefix,
            CONTINUATION_REWARD: continuation_rewards,
        }
        return batch

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        extras = batch.extras or {}
        cfg = self.config
        prefix = extras.get(PREFIX)
        if prefix is None:  # a batch from elsewhere: the first prefix, no continuations
            prefix = prefix_mask(batch.response_mask, cfg.eta_start)
        continuation_rewards = extras.get(CONTINUATION_REWARD, torch.zeros_like(batch.rewards))
        return pppo_advantages(
            batch.rewards, continuation_rewards, prefix, batch.group_ids, cfg.std_eps
        )
