"""The metrics record of one training step: rewards, advantage statistics, the update's
statistics, what the method reported, and the diagnostics of credit placement and cancellation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from creditbench.harness.diagnostics.cancellation import loss_cancellation
from creditbench.harness.diagnostics.credit import credit_diagnostics
from creditbench.methods.contract import FIRST_WRONG_MASK
from creditbench.methods.core import RolloutBatch, masked_mean


def outcome_statistics(rewards: Tensor) -> dict[str, float]:
    """``reward_mean`` and ``accuracy`` (reward > 0.5) of the finite ``rewards`` (a row with no
    outcome is NaN); NaN and 0 when none is finite."""
    rewards = rewards[torch.isfinite(rewards)]
    return {
        "reward_mean": float(rewards.mean()) if rewards.numel() else float("nan"),
        "accuracy": float((rewards > 0.5).float().mean()) if rewards.numel() else 0.0,
    }


def batch_statistics(batch: RolloutBatch, advantages: Tensor) -> dict[str, Any]:
    """Reward, accuracy, length and advantage statistics of the step's batch."""
    mask = batch.response_mask
    adv_mean = masked_mean(advantages, mask)
    adv_std = masked_mean((advantages - adv_mean) ** 2, mask).sqrt()
    truncated = batch.truncated
    all_fail, mixed = group_outcome_shares(batch.rewards, batch.group_ids)
    return {
        **outcome_statistics(batch.rewards),
        "responses": batch.size,
        "response_length": float(mask.sum(-1).mean()),
        "truncated_frac": float(truncated.float().mean()) if truncated is not None else 0.0,
        "adv_mean": float(adv_mean),
        "adv_std": float(adv_std),
        "adv_abs_mean": float(masked_mean(advantages.abs(), mask)),
        "all_fail_frac": all_fail,
        "mixed_frac": mixed,
    }


def drawn_statistics(drawn: list[Tensor]) -> dict[str, float]:
    """``reward_mean`` and ``accuracy`` over every plain batch a step drew
    (``Services.sample_batch``), whatever the method then trained on: the policy's accuracy on
    fresh problems (the online accuracy) even when a method filters its batch (DAPO's mixed
    groups) or extends it (repairs, continuations, interventions). Empty when the step drew
    none (a method with a rollout of its own)."""
    rewards = torch.cat(drawn) if drawn else torch.empty(0)
    return outcome_statistics(rewards) if torch.isfinite(rewards).any() else {}


def group_outcomes(rewards: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Each row's group index ``[B]``, and per group its responses and passed responses
    (reward > 0.5) ``[G]``."""
    passed = (rewards > 0.5).float()
    _, inverse = torch.unique(group_ids, return_inverse=True)
    groups = int(inverse.max()) + 1 if inverse.numel() else 0
    size = torch.zeros(groups).index_add_(0, inverse, torch.ones_like(passed))
    wins = torch.zeros(groups).index_add_(0, inverse, passed)
    return inverse, size, wins


def rows_in_mixed_groups(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """``[B]`` bool: the row's group (of two or more responses) has both passed and failed
    responses. Outcome credit (GRPO's) is exactly 0 on every other row."""
    inverse, size, wins = group_outcomes(rewards, group_ids)
    return ((wins > 0) & (wins < size))[inverse]


def group_outcome_shares(rewards: Tensor, group_ids: Tensor) -> tuple[float, float]:
    """The shares of the batch's groups (of two or more responses) in which every response
    fails (reward <= 0.5; outcome credit is zero there) and in which outcomes are mixed."""
    _, size, wins = group_outcomes(rewards, group_ids)
    real = size >= 2  # a group of one has no outcome contrast to lose
    if not real.any():
        return 0.0, 0.0
    count = int(real.sum())
    all_fail = int(((wins == 0) & real).sum()) / count
    mixed = int(((wins > 0) & (wins < size) & real).sum()) / count
    return all_fail, mixed


def step_diagnostics(
    batch: RolloutBatch, advantages: Tensor, loss_of: Callable[[Tensor], Tensor]
) -> dict[str, float | None]:
    """Credit placement against the step ground truth (when the batch has it) and the token
    gradient cancellation of the step's first update at the behaviour policy (the gradient of
    ``loss_of`` on token log-probs). Undefined values are None: JSON has no NaN."""
    mask = batch.response_mask
    out: dict[str, float] = {}
    first_wrong = (batch.extras or {}).get(FIRST_WRONG_MASK)
    if first_wrong is not None:  # does the method blame the right tokens?
        out.update(credit_diagnostics(advantages, mask, first_wrong, batch.rewards))
    out.update(
        loss_cancellation(
            loss_of,
            batch.old_logprobs,
            advantages,
            batch.response_ids,
            mask,
            batch.group_ids,
            batch.prompt_ids,
            batch.prompt_mask,
        )
    )
    return {key: None if math.isnan(value) else value for key, value in out.items()}
