"""DAPO: Decoupled Clip and Dynamic sAmpling Policy Optimization.

Paper: Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
arXiv 2503.14476 (2025), §3.

Key equations (G responses o_1..o_G to a question q with answer a):

    J(θ) = E[ 1/Σ_i|o_i| Σ_i Σ_t min( r_it Â_it, clip(r_it, 1-ε_low, 1+ε_high) Â_it ) ]
    subject to  0 < |{o_i : is_equivalent(a, o_i)}| < G                 (dynamic sampling)

    Â_it = (R_i - mean(R_1..R_G)) / std(R_1..R_G)

and the soft overlong punishment added to the correctness reward (§3.4):

    R_length(y) = 0                               if |y| <= L_max - L_cache
                  ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max
                  -1                              if |y| > L_max

Clip-higher (§3.1: ε_high > ε_low lets low-probability tokens grow), dynamic sampling
(§3.2: all-right or all-wrong groups have zero advantage and are replaced), the token-level
loss (§3.3: every token weighs the same whatever its response's length), overlong reward
shaping (§3.4). No KL term.

Defaults from the paper (§4.1): ε_low = 0.2, ε_high = 0.28, token-mean, no KL, L_max = 20480
with L_cache = 4096, overlong shaping on. Overlong filtering (truncated responses masked out
of the loss; an ablation in Table 1) is offered, off.

Deviations:
    - ``max_response_length`` = 0 (the default) takes L_max from the run's generation limit,
      ``services.max_new_tokens`` (``rollout.max_new_tokens``): the paper's L_max is the
      generation limit too (20480). Never a batch statistic, which would give the longest
      response of every batch the full -1. ``overlong_cache_length`` = 0 uses L_max / 5, the
      paper's ratio 4096 / 20480; L_cache is capped at L_max.
    - A truncated response (``batch.truncated``) counts as longer than L_max (penalty -1).
    - Dynamic sampling keeps groups whose task rewards (before length shaping: the paper's
      condition is on correctness) are not all equal, and ``advantages`` gives 0 to any other
      group. The paper oversamples without bound; here at most ``max_sampling_rounds``
      batches are drawn. If they run out, the step trains on the groups found, or, with
      none, on the last batch, whose advantages are then all 0 (a no-op step). Groups beyond
      one batch's worth are dropped.
    - When those rounds run out, verl's DAPO trainer stops the run instead: with fewer
      groups than ``train_batch_size`` after ``max_num_gen_batches`` (> 0) generation
      batches it raises ValueError ("Generated too many. Please check if your data are too
      difficult."; ``recipe/dapo/dapo_ray_trainer.py``, e.g. at commit 9d77200, before the
      recipes moved to verl-recipe; the check is quoted in verl's ``docs/algo/dapo.md``).
      Here the step trains on the groups it found (above), so a hard batch ends no run.
    - The paper's rewards are +1/-1; the task's rewards are used as they are (0/1 on the
      testbed), so the length penalty weighs twice as much against correctness.
    - std is unbiased plus 1e-6, and a group of one gets advantage 0, as in ``grpo``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import torch
from torch import Tensor

from .base import CreditMethod, LossConfig, Needs, Services
from .contract import ALL_GROUPS, MIXED_GROUPS, GroupFilter, Reduction
from .core import (
    RolloutBatch,
    broadcast_to_tokens,
    concat_batches,
    group_normalized_scores,
    rows_of_mixed_groups,
)
from .registry import register_method


def overlong_penalty(lengths: Tensor, max_length: int, cache_length: int) -> Tensor:
    """DAPO's soft overlong punishment R_length, ``[B]`` lengths to ``[B]`` penalties: 0 up to
    ``max_length - cache_length`` tokens, falling linearly to -1 at ``max_length``, -1 beyond
    (the clamp is the three-piece formula in one line)."""
    if not 0 < cache_length <= max_length:
        raise ValueError(f"cache_length: must be in (0, {max_length}] (got {cache_length})")
    lengths = lengths if lengths.is_floating_point() else lengths.to(torch.get_default_dtype())
    return ((max_length - cache_length - lengths) / cache_length).clamp(min=-1.0, max=0.0)


def shaped_rewards(
    rewards: Tensor, lengths: Tensor, max_length: int, cache_length: int, shaping: bool = True
) -> Tensor:
    """``[B]`` R = r + R_length(|y|) from rewards and lengths ``[B]`` (r alone without shaping)."""
    if not shaping:
        return rewards
    return rewards + overlong_penalty(lengths, max_length, cache_length).to(rewards.dtype)


def dapo_advantages(
    rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    lengths: Tensor,
    *,
    max_length: int,
    cache_length: int,
    overlong_shaping: bool = True,
) -> Tensor:
    """DAPO's advantage ``[B, T]``: ``(R_i - mean_g) / (std_g + 1e-6)`` on the tokens of
    response i, with ``R_i = r_i + R_length(|y_i|)`` (``r_i`` alone without shaping).

    ``rewards``, ``lengths`` (|y| in tokens) and ``group_ids`` are ``[B]``, ``response_mask``
    ``[B, T]``; ``max_length`` is L_max and ``cache_length`` L_cache.
    """
    shaped = shaped_rewards(rewards, lengths, max_length, cache_length, overlong_shaping)
    return broadcast_to_tokens(group_normalized_scores(shaped, group_ids), response_mask)


@dataclass
class DAPOConfig(LossConfig):
    """DAPO hyper-parameters (loss fields inherited from `LossConfig`).

    Attributes:
        overlong_shaping: add the soft overlong punishment to the reward.
        max_response_length: L_max in tokens; 0 means the run's generation limit.
        overlong_cache_length: L_cache in tokens; 0 means L_max / 5 (the paper's ratio).
        overlong_filtering: mask truncated responses out of the loss.
        dynamic_sampling: drop groups whose rewards are all equal and refill the batch.
        max_sampling_rounds: the most batches drawn per step to refill it.
    """

    eps_high: float = 0.28
    aggregation: str = "token-mean"
    overlong_shaping: bool = True
    max_response_length: int = 0
    overlong_cache_length: int = 0
    overlong_filtering: bool = False
    dynamic_sampling: bool = True
    max_sampling_rounds: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        minimums = {"max_response_length": 0, "overlong_cache_length": 0, "max_sampling_rounds": 1}
        for name, low in minimums.items():
            if getattr(self, name) < low:
                raise ValueError(f"{name}: must be >= {low} (got {getattr(self, name)!r})")
        if self.max_response_length and self.overlong_cache_length > self.max_response_length:
            raise ValueError(
                f"overlong_cache_length: must be <= max_response_length "
                f"({self.max_response_length}) (got {self.overlong_cache_length})"
            )


@register_method("dapo")
class DAPO(CreditMethod):
    summary = "clip-higher, token-mean loss, dynamic sampling and soft overlong punishment"
    paper = "DAPO: An Open-Source LLM Reinforcement Learning System at Scale (arXiv 2503.14476)"
    Config = DAPOConfig
    # Without the overlong punishment DAPO's advantage is GRPO's group score (its other parts
    # act on the rollout and the loss): §3.1-3.4 of the paper
    reduces_to: ClassVar[tuple[Reduction, ...]] = (
        Reduction("grpo", {"overlong_shaping": False}, "DAPO §3: Eq. 8's advantage"),
    )
    needs = Needs(behaviour_logprobs=False)  # its rollout and advantages never read them
    config: DAPOConfig

    def rollout(self, services: Services) -> RolloutBatch:
        cfg = self.config
        batch = services.sample_batch()
        if not cfg.dynamic_sampling:
            return self._filter_overlong(batch)
        target = len(torch.unique(batch.group_ids))
        kept: list[RolloutBatch] = []
        for round_index in range(cfg.max_sampling_rounds):
            if round_index > 0:
                batch = services.sample_batch()
            keep = rows_of_mixed_groups(batch.rewards, batch.group_ids)
            if bool(keep.any()):
                kept.append(batch.select(keep))
            if sum(len(torch.unique(b.group_ids)) for b in kept) >= target:
                break
        if not kept:
            return self._filter_overlong(batch)
        merged = concat_batches(kept)
        # concat_batches gives later rounds larger ids, so this keeps the earliest groups.
        first = torch.unique(merged.group_ids)[:target]
        return self._filter_overlong(merged.select(torch.isin(merged.group_ids, first)))

    def group_filter(self) -> GroupFilter | None:
        """Dynamic sampling keeps mixed groups of plain batches; overlong filtering edits the
        batch's masks, which a filter of whole groups cannot."""
        if self.config.overlong_filtering:
            return None
        if not self.config.dynamic_sampling:
            return GroupFilter(ALL_GROUPS, max_batches=1)
        return GroupFilter(MIXED_GROUPS, max_batches=self.config.max_sampling_rounds)

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        lengths, max_length, cache_length = self._length_limits(batch, services)
        advantages = dapo_advantages(
            batch.rewards,
            self._filter_overlong(batch).response_mask,
            batch.group_ids,
            lengths,
            max_length=max_length,
            cache_length=cache_length,
            overlong_shaping=self.config.overlong_shaping,
        )
        return advantages * self.trained_responses(batch).unsqueeze(-1).to(advantages.dtype)

    def outcome_rewards(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        """The task's rewards plus the soft overlong punishment (when shaping is on)."""
        if not self.config.overlong_shaping:
            return batch.rewards
        lengths, max_length, cache_length = self._length_limits(batch, services)
        return shaped_rewards(batch.rewards, lengths, max_length, cache_length)

    def trained_responses(self, batch: RolloutBatch) -> Tensor:
        """With dynamic sampling, the responses of groups whose task rewards differ: a batch
        that ran out of rounds still holds all-equal groups, and they train on nothing."""
        if not self.config.dynamic_sampling:
            return super().trained_responses(batch)
        return rows_of_mixed_groups(batch.rewards, batch.group_ids)

    def _length_limits(
        self, batch: RolloutBatch, services: Services | None
    ) -> tuple[Tensor, int, int]:
        """(|y| ``[B]`` with truncated responses past L_max, L_max, L_cache)."""
        cfg = self.config
        max_length = cfg.max_response_length
        if not max_length:
            if services is None:
                raise ValueError("max_response_length: 0 takes the generation limit from services")
            max_length = services.max_new_tokens
        # capped: with L_max taken from the run, a fixed L_cache may exceed it
        cache_length = min(cfg.overlong_cache_length or round(max_length / 5) or 1, max_length)
        lengths = batch.response_lengths
        if batch.truncated is not None:
            beyond = torch.full_like(lengths, max_length + 1)
            lengths = torch.where(batch.truncated, beyond, lengths)
        return lengths, max_length, cache_length

    def _filter_overlong(self, batch: RolloutBatch) -> RolloutBatch:
        """With ``overlong_filtering``, zero the loss mask of truncated responses."""
        if not self.config.overlong_filtering or batch.truncated is None:
            return batch
        keep = (~batch.truncated).unsqueeze(-1).to(batch.response_mask.dtype)
        return replace(batch, response_mask=batch.response_mask * keep)
