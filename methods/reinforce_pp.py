"""REINFORCE++ and REINFORCE++-baseline: critic-free policy gradient with global normalisation.

Paper: Hu et al., "REINFORCE++: Stabilizing Critic-Free Policy Optimization with Global
Normalization", arXiv 2501.03262 (2025; the baseline variant as named in v9).

Key equations (REINFORCE++; a response o_1..o_T to a prompt q with outcome reward r(q, o)):

    r_t = 1[t = T] · r(q, o) - β KL(t),   KL(t) = log( π_θold(o_t | q, o_<t) / π_SFT(o_t | ...) )

    A_t = Σ_{s >= t} γ^(s-t) r_s          (γ = 1: A_t = r(q, o) - β Σ_{s >= t} KL(s))

    A_t^norm = (A_t - mean_batch(A)) / std_batch(A)      over every token of the global batch

REINFORCE++-baseline (G responses per prompt, for reasoning tasks):

    A_i = r_i - mean(r_1..r_G),   A_it^norm = (A_i - mean_batch) / std_batch,
    with the KL to the reference in the loss instead of the reward.

Both losses are PPO-clip on the token ratio. Normalising over the whole batch instead of
each prompt's group is the paper's point: a group's std computed from the same few rewards
it divides makes the estimate biased and over-weights nearly solved prompts, while the batch
statistics are almost constant. The price is that a response's advantage depends on the
rest of the batch, so both classes set ``group_local = False``.

Defaults: γ = 1, ε = 0.2, token-mean, the k1 estimator for the KL in the reward.
Unverified against the paper's text: β (``kl_coef_reward`` = 1e-3 here), the baseline
variant's KL weight and estimator (``kl_coef`` = 1e-3, ``kl_kind`` = k2 here); ε and the
aggregation follow the note's reading of the paper.

Deviations:
    - The KL-in-reward is computed once, before the update, from the behaviour log-probs
      (``batch.old_logprobs``, the paper's π_θold) and ``batch.ref_logprobs``; without
      reference log-probs it is left out.
    - The outcome reward sits on the last loss-carrying token. Tokens with mask 0 inside a
      response (context, not actions: a tool's output, a reset's prefix) get no reward and
      advantage 0, and the running return is carried through them undiscounted, as verl does
      since PR #7300 (merged 2026-08, fixing verl issue #7278). verl before it reset the
      running return at every masked position (``running_return *= response_mask[:, t]``),
      which drops an outcome reward before a masked span; on right-padded responses, whose
      masked positions all follow the last action, the two rules give the same returns.
    - Whitening is over the tokens of the batch given to ``advantages`` with the unbiased
      variance and 1e-8 inside the square root (verl's ``masked_whiten``; OpenRLHF uses the
      biased variance).
    - In the baseline variant a group of one gets a centred reward of 0 before whitening
      (verl: its raw reward).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import SINGLETON_RULES, CreditMethod, LossConfig, check_fields
from .contract import Services
from .core import (
    RolloutBatch,
    broadcast_to_tokens,
    group_normalized_scores,
    kl_estimate,
    masked_whiten,
)
from .registry import register_method


def outcome_token_rewards(
    rewards: Tensor,
    response_mask: Tensor,
    kl: Tensor | None = None,
    kl_coef: float = 0.0,
) -> Tensor:
    """Token rewards ``[B, T]``: ``R`` on the last loss-carrying token, ``-kl_coef * kl`` on
    every loss-carrying token, 0 where the mask is 0. A row with an empty mask gets none.

    Args:
        rewards: ``[B]`` outcome rewards.
        response_mask: ``[B, T]``.
        kl: ``[B, T]`` per-token KL estimate, or None.
        kl_coef: β.
    """
    mask = response_mask
    positions = torch.arange(mask.shape[-1], device=mask.device)
    last = (positions * (mask > 0)).argmax(dim=-1)
    has_tokens = (mask > 0).any(dim=-1)
    token_rewards = torch.zeros_like(mask, dtype=rewards.dtype)
    rows = torch.arange(mask.shape[0], device=mask.device)
    token_rewards[rows, last] = torch.where(has_tokens, rewards, torch.zeros_like(rewards))
    if kl is not None and kl_coef:
        token_rewards = token_rewards - kl_coef * kl.to(rewards.dtype) * mask
    return token_rewards


def reinforce_pp_advantages(
    token_rewards: Tensor, response_mask: Tensor, gamma: float = 1.0
) -> Tensor:
    """REINFORCE++ advantages ``[B, T]``: the return-to-go, whitened over the whole batch.

    ``G_t = r_t + γ G_{t+1}`` on loss-carrying tokens; where the mask is 0 the return is 0
    and the running return passes through unchanged. Then ``core.masked_whiten`` over every
    masked token of the batch.
    """
    mask = response_mask.to(token_rewards.dtype)
    returns = torch.zeros_like(token_rewards)
    running = torch.zeros_like(token_rewards[:, 0])
    for t in reversed(range(token_rewards.shape[-1])):
        here = mask[:, t] > 0
        running = torch.where(here, token_rewards[:, t] + gamma * running, running)
        returns[:, t] = torch.where(here, running, torch.zeros_like(running))
    return masked_whiten(returns, mask)


def reinforce_pp_baseline_advantages(
    rewards: Tensor, response_mask: Tensor, group_ids: Tensor, *, singleton: str = "zero"
) -> Tensor:
    """REINFORCE++-baseline advantages ``[B, T]``: ``r - mean_group`` on every token, then
    ``core.masked_whiten`` over the whole batch. ``singleton="raw"``: verl's rule, a group of
    one keeps its raw reward before whitening."""
    centred = group_normalized_scores(
        rewards,
        group_ids,
        scale_by_std=False,
        singleton=singleton,  # type: ignore[arg-type]
    )
    mask = response_mask.to(centred.dtype)
    return masked_whiten(broadcast_to_tokens(centred, mask), mask)


@dataclass
class ReinforcePPConfig(LossConfig):
    """REINFORCE++ hyper-parameters (loss fields inherited from `LossConfig`).

    Attributes:
        kl_coef_reward: β of the KL penalty in the token rewards (unverified default).
        gamma: discount of the return-to-go.
    """

    kl_coef_reward: float = 1e-3
    gamma: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.kl_coef_reward < 0:
            raise ValueError(f"kl_coef_reward: must be >= 0 (got {self.kl_coef_reward!r})")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma: must be in [0, 1] (got {self.gamma!r})")

    @property
    def needs_reference_logprobs(self) -> bool:
        """The KL in the token rewards reads the reference too."""
        return super().needs_reference_logprobs or self.kl_coef_reward > 0


@dataclass
class ReinforcePPBaselineConfig(LossConfig):
    """REINFORCE++-baseline hyper-parameters: KL in the loss (unverified defaults)."""

    kl_coef: float = 1e-3
    kl_kind: str = "k2"
    singleton: str = "zero"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self, [("singleton", self.singleton in SINGLETON_RULES, "must be zero or raw")]
        )


@register_method("reinforce_pp")
class ReinforcePP(CreditMethod):
    summary = "return-to-go with KL in the reward, whitened over the whole batch"
    paper = "REINFORCE++: Stabilizing Critic-Free Policy Optimization (arXiv 2501.03262)"
    Config = ReinforcePPConfig
    config: ReinforcePPConfig
    group_local = False  # the batch-wide whitening couples every response

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        cfg = self.config
        kl = None
        if batch.ref_logprobs is not None and cfg.kl_coef_reward > 0:
            kl = kl_estimate(batch.old_logprobs, batch.ref_logprobs, "k1")
        token_rewards = outcome_token_rewards(
            batch.rewards, batch.response_mask, kl, cfg.kl_coef_reward
        )
        return reinforce_pp_advantages(token_rewards, batch.response_mask, cfg.gamma)


@register_method("reinforce_pp_baseline")
class ReinforcePPBaseline(CreditMethod):
    summary = "group-mean baseline, whitened over the whole batch, KL in the loss"
    paper = "REINFORCE++: Stabilizing Critic-Free Policy Optimization (arXiv 2501.03262)"
    Config = ReinforcePPBaselineConfig
    config: ReinforcePPBaselineConfig
    group_local = False  # the batch-wide whitening couples every response

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        return reinforce_pp_baseline_advantages(
            batch.rewards, batch.response_mask, batch.group_ids, singleton=self.config.singleton
        )
