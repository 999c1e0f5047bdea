"""SPO-chain: segments cut at low-probability tokens, Monte-Carlo values at their boundaries.

Paper: Guo, Xu, Liu, Ye, Qiu, "Segment Policy Optimization: Effective Segment-Level Credit
Assignment in RL for Large Language Models", arXiv 2505.23564 (NeurIPS 2025), §3-4 and §6.
Code: AIFrameResearch/SPO (a fork of VinePPO's treetune), the chain variant in
``episode_generators/math_episode_generator_with_mc_advantages.py``
(``_create_value_estimation_requests``, ``_compute_token_advantages``) and the actor loss in
``trainers/ppo_trainer.py``.

Key equations (γ = 1, the 0/1 reward at the end; p_t = π_old(y_t | s_t), the behaviour
policy's probability of the sampled token at the sampling temperature):

    U = { t : p_t < ρ }                              the cutpoints, ρ = 0.9  (§4(1))
    b_1 < b_2 < ...   every m-th cutpoint (the 1st, (m+1)-th, ...), m = 5   (§6, "int5")
    seg_k = [b_k, b_{k+1})                           a boundary sits just before its cutpoint
    V̂(s_{b_k}) = 1/N Σ_j R(τ_j),  τ_j ~ π(· | s_{b_k})                    (§4(2), N = 9)
    Â_k = V̂(s_{b_{k+1}}) - V̂(s_{b_k}),   V̂ after the last segment := R      (Eq. 2)
    M_t = 1[p_t < ρ]                                  the probability mask    (§4(3))
    L = -1/Σ_t M_t · Σ_t M_t · min(r_t Â_t, clip(r_t, 1-ε, 1+ε) Â_t),  ε = 0.2  (Eq. 4)

so a segment's advantage reaches only its low-probability tokens. In the code the mask also
bounds the advantages' whitening and the KL term (k3, 1e-4, each sequence's sum averaged over
sequences): here too. The tokens before the first cutpoint (all of probability >= ρ) get no
credit and no rollouts; a response without a cutpoint gets none at all, as in the code.
The continuations are bought through ``Services.generate`` and charged to the budget, as
VinePPO's are (:func:`methods.values.mc_state_values`, which also shares identical states).

Deviations:
    - Only the chain variant (SPO-chain, the paper's short chain-of-thought method). SPO-tree
      (§5: fixed-length segments in 6-6-6 trees, an 8-iteration replay buffer of off-policy
      edges) needs state across steps this harness does not keep.
    - The paper states the partition as "a fixed segment count K, cutpoints spread evenly"
      (§4(1)); its experiments and the code fix the interval instead (every 5th cutpoint),
      which is what runs here.
    - The code clamps the log-ratio to ±10 and skips a micro-batch whose mean ratio passes 10;
      those are trainer safeguards, not the method, and are not reproduced.
    - The code's sampling temperature 0.6, top-p 0.9 and learning rate are run settings
      here; ρ is read at the run's sampling temperature, as the code reads it at its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .base import CreditMethod, LossConfig, check_fields
from .contract import DIRECTION, Services
from .core import AGG_MODES, Normalizers, RolloutBatch, aggregate_loss, masked_whiten
from .registry import register_method
from .values import (
    STATE_VALUES,
    exact_advantages,
    mc_state_values,
    state_starts,
    uninformed_values,
)


def low_probability_tokens(behaviour_logprobs: Tensor, response_mask: Tensor, rho: float) -> Tensor:
    """``[B, T]`` bool M_t: the response tokens the behaviour policy sampled with probability
    below ``rho`` (the cutpoints, and the tokens the loss trains on)."""
    return (behaviour_logprobs.exp() < rho) & (response_mask > 0)


def segment_ids(cutpoints: Tensor, interval: int) -> Tensor:
    """``[B, T]`` the segment of every position, a segment starting at every ``interval``-th
    cutpoint of its row (the 1st, the (interval + 1)-th, ...). Segment 0 starts at position 0:
    it holds the tokens before the first cutpoint, or, when the first token is one, the first
    cut segment itself.

    Args:
        cutpoints: ``[B, T]`` bool, the low-probability tokens.
        interval: cutpoints per segment, >= 1.
    """
    rank = cutpoints.long().cumsum(-1) - 1  # each cutpoint's index among its row's cutpoints
    starts = cutpoints & (rank % interval == 0)
    segments = starts.long().cumsum(-1)
    return segments - starts[:, :1].long()


def spo_advantages(batch: RolloutBatch, values: Tensor, mask: Tensor, *, whiten: bool) -> Tensor:
    """``[B, T]`` Â_k on the masked tokens of segment k, 0 elsewhere; whitened over the
    batch's masked tokens when ``whiten``.

    Args:
        batch: a batch whose ``step_ids`` ``[B, T]`` are the segments (:func:`segment_ids`).
        values: ``[B, S]`` V̂ at each segment start (:data:`STATE_VALUES`); the first state of
            a row that starts before its first cutpoint may be NaN (never estimated).
        mask: ``[B, T]`` bool, the probability mask M_t.
    """
    _, valid = state_starts(batch.step_ids)  # type: ignore[arg-type]
    rewards = batch.rewards.to(values.dtype)
    following = rewards if values.shape[1] == 1 else torch.where(valid[:, 1], values[:, 1], rewards)
    values = values.clone()  # an unestimated first state takes the next value: no credit there
    values[:, 0] = torch.where(values[:, 0].isnan(), following, values[:, 0])
    advantages = exact_advantages(batch, values) * mask
    return masked_whiten(advantages, mask) if whiten else advantages


@dataclass
class SPOConfig(LossConfig):
    """SPO-chain hyper-parameters (loss fields inherited from `LossConfig`)."""

    aggregation: str = "token-mean"
    kl_coef: float = 1e-4
    kl_aggregation: str = "seq-mean-token-sum"
    rho: float = 0.9
    cutpoint_interval: int = 5
    rollouts_per_state: int = 9
    whiten: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self,
            [
                ("rho", 0.0 < self.rho <= 1.0, "must be in (0, 1]"),
                (
                    "cutpoint_interval",
                    isinstance(self.cutpoint_interval, int) and self.cutpoint_interval >= 1,
                    "must be an integer >= 1",
                ),
                (
                    "rollouts_per_state",
                    isinstance(self.rollouts_per_state, int) and self.rollouts_per_state >= 1,
                    "must be an integer >= 1",
                ),
                ("kl_aggregation", self.kl_aggregation in AGG_MODES, f"one of {AGG_MODES}"),
            ],
        )

    def kl_loss(self, kl: Tensor, mask: Tensor, normalizers: Normalizers | None) -> Tensor:
        """The code's KL term: each sequence's sum over the masked tokens, averaged over
        sequences (``kl_aggregation``)."""
        return aggregate_loss(kl, mask, self.kl_aggregation, normalizers)


@register_method("spo")
class SPO(CreditMethod):
    summary = "segments cut at low-probability tokens, Monte-Carlo values at their boundaries"
    paper = "Segment Policy Optimization (arXiv 2505.23564)"
    Config = SPOConfig
    group_local = False  # whitening over the batch mixes groups
    # A segment's advantage reaches each of its low-probability tokens, so a response's token
    # sum weighs its segments by their counts of such tokens (and whitening shifts it by that
    # count); the per-segment advantages telescope to R - V(first boundary) (tests/test_spo.py).
    opt_outs = {
        DIRECTION: "a segment's advantage reaches each of its low-probability tokens, so a "
        "passed response whose falling segment holds many of them sums below a failed one "
        "without a cutpoint (which gets 0); its segment advantages sum to R - V(first "
        "boundary), ordered by R (tests/test_spo.py)"
    }
    config: SPOConfig

    def segmented(self, batch: RolloutBatch) -> RolloutBatch:
        """The batch with its segments as ``step_ids`` (the task's own are left on ``batch``)."""
        cutpoints = low_probability_tokens(batch.old_logprobs, batch.response_mask, self.config.rho)
        segments = segment_ids(cutpoints, self.config.cutpoint_interval)
        return replace(batch, step_ids=torch.where(batch.response_mask > 0, segments, -1))

    def rollout(self, services: Services) -> RolloutBatch:
        batch = services.sample_batch()
        segmented = self.segmented(batch)
        # A row's first state is a boundary only when its first token is a cutpoint: before
        # the first cutpoint no token is trained, so no value is bought there.
        _, wanted = state_starts(segmented.step_ids)  # type: ignore[arg-type]
        wanted[:, 0] = self.loss_mask(batch)[:, 0] > 0
        values = mc_state_values(services, segmented, self.config.rollouts_per_state, only=wanted)
        batch.extras = {**(batch.extras or {}), STATE_VALUES: values}
        return batch

    def loss_mask(self, batch: RolloutBatch) -> Tensor:
        mask = low_probability_tokens(batch.old_logprobs, batch.response_mask, self.config.rho)
        return mask.to(batch.response_mask.dtype)

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        segmented = self.segmented(batch)
        values = (batch.extras or {}).get(STATE_VALUES)
        if values is None:  # a batch from elsewhere: every state at its group's mean reward
            values = uninformed_values(batch, state_starts(segmented.step_ids)[1])  # type: ignore[arg-type]
        return spo_advantages(segmented, values, self.loss_mask(batch), whiten=self.config.whiten)

    def loss(
        self,
        logprobs: Tensor,
        batch: RolloutBatch,
        advantages: Tensor,
        normalizers: Normalizers | None = None,
        services: Services | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        # The code ANDs the mask into the action mask: the surrogate, its statistics and the
        # KL term all run over the low-probability tokens alone.
        masked = replace(batch, response_mask=self.loss_mask(batch))
        return super().loss(logprobs, masked, advantages, normalizers, services)
