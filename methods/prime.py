"""PRIME: process rewards from an implicit reward model trained online on the outcome labels.

Paper: Cui et al., "Process Reinforcement through Implicit Rewards", arXiv 2502.01456 (2025).
A causal LM π_φ, started from the SFT policy, scores every token against a frozen reference;
the log-ratio is a process reward whose sum is a sequence reward, and that sum is trained to
predict the verifier's outcome by cross-entropy, online, on each step's rollouts. The process
rewards and the outcome rewards each get a leave-one-out baseline and their returns are added.
On Qwen2.5-Math-7B it averaged 41.0 over seven benchmarks at 240 steps against 36.9 for RLOO
with the outcome verifier alone (Table 2).

Key equations (response y of a group of K, π_ref the frozen SFT model, β = 0.05):

    r_φ(y_t) = β log π_φ(y_t | y_<t) / π_ref(y_t | y_<t),   r_φ(y) = Σ_t r_φ(y_t)      (Eq. 3)

    L_CE(φ) = -E[ r_o log σ(r_φ(y)) + (1 - r_o) log(1 - σ(r_φ(y))) ]                  (Alg. 1)

    A^i_t = Σ_{s>=t} γ^{s-t} [ r_φ(y^i_s) - 1/(K-1) Σ_{j≠i} r_φ(y^j)/|y^j| ]
            + r_o(y^i) - 1/(K-1) Σ_{j≠i} r_o(y^j)                                       (Eq. 5)

then whitened over the batch (the code's ``masked_whiten``) and used in PPO's clipped surrogate.
At the start π_φ = π_ref, every process reward is 0 and PRIME is RLOO on the outcome (§5.1).

Deviations:
    - Single forward (§5.3, the code's default): the process rewards come from the reward
      model's pass before its update, the pass whose gradient updates it; one AdamW step of
      the whole batch a policy step, where the code takes the PPO mini-batches.
    - The process rewards are β·log-ratio, as in Eq. 3; the code divides them by their
      largest return in the batch instead (``prime_norm=batch_norm``), which the verl port
      leaves out.
    - The leave-one-out baseline of Eq. 5 (the others' mean process reward); the code adds
      (r_t - m_i)/(K-1) to it (``compute_rloo_returns``). A group of one gets no baseline.
    - The prompt filter (group accuracy in [0.2, 0.8], §3.3 and the code's run script) is not
      applied: every group is trained on, as for every other method here.
    - The reward model's learning rate is twice the testbed's policy lr (the paper's ratio,
      1e-6 to 5e-7, §4.2), not its value.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import CreditMethod, LossConfig, check_fields
from .contract import Services
from .core import RolloutBatch, group_mean_std, masked_mean
from .registry import register_method
from .reinforce_pp import outcome_token_rewards, reinforce_pp_advantages


def implicit_process_rewards(
    prm_logprobs: Tensor, ref_logprobs: Tensor, response_mask: Tensor, beta: float
) -> Tensor:
    """``[B, T]`` r_φ(y_t) = β (log π_φ - log π_ref) on response tokens, 0 elsewhere (Eq. 3)."""
    return beta * (prm_logprobs - ref_logprobs) * response_mask


def outcome_loss(
    prm_logprobs: Tensor,
    ref_logprobs: Tensor,
    response_mask: Tensor,
    rewards: Tensor,
    beta: float,
) -> Tensor:
    """``[B]`` each response's cross-entropy between σ(r_φ(y)) and its outcome label: the
    reward model's loss (Algorithm 1), whose mean over the batch is minimised.

    Args:
        prm_logprobs: ``[B, T]`` the reward model's log-probs, with gradient.
        ref_logprobs: ``[B, T]`` the reference's.
        response_mask: ``[B, T]``.
        rewards: ``[B]`` outcome labels in [0, 1].
        beta: β.
    """
    sequence = implicit_process_rewards(prm_logprobs, ref_logprobs, response_mask, beta).sum(-1)
    labels = rewards.to(sequence.dtype).clamp(0.0, 1.0)
    return torch.nn.functional.binary_cross_entropy_with_logits(sequence, labels, reduction="none")


def leave_one_out(values: Tensor, group_ids: Tensor) -> Tensor:
    """``[B]`` the mean of ``values`` over the other members of each row's group (0 in a
    group of one)."""
    mean, _, count = group_mean_std(values, group_ids)
    others = (mean * count - values) / (count - 1).clamp(min=1)
    return torch.where(count > 1, others, torch.zeros_like(values))


def prime_advantages(
    process_rewards: Tensor,
    rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    gamma: float = 1.0,
) -> Tensor:
    """PRIME's advantage ``[B, T]`` (Eq. 5), whitened over the batch.

    Args:
        process_rewards: ``[B, T]`` r_φ(y_t), 0 off the response.
        rewards: ``[B]`` outcome rewards r_o.
        response_mask: ``[B, T]``.
        group_ids: ``[B]``.
        gamma: the discount of both returns.

    Returns:
        ``[B, T]``: the return of the process rewards less the others' mean process reward,
        plus the return of the outcome less the others' mean outcome (placed on the last
        token), whitened over every response token of the batch.
    """
    mask = response_mask.to(process_rewards.dtype)
    per_token = masked_mean(process_rewards, mask, dim=-1)  # r_φ(y^j) / |y^j|
    process = (process_rewards - leave_one_out(per_token, group_ids).unsqueeze(-1)) * mask
    outcome = rewards.to(process.dtype) - leave_one_out(rewards.to(process.dtype), group_ids)
    count = group_mean_std(rewards.to(process.dtype), group_ids)[2]
    outcome = torch.where(count > 1, outcome, torch.zeros_like(outcome))  # no baseline alone
    token_rewards = process + outcome_token_rewards(outcome, mask)
    return reinforce_pp_advantages(token_rewards, mask, gamma)  # returns, whitened


@dataclass
class PRIMEConfig(LossConfig):
    """PRIME's settings: the reward model's β and optimizer, and the returns' discount."""

    aggregation: str = "token-mean"
    beta: float = 0.05
    prm_lr: float = 4.0e-4
    prm_grad_clip: float = 10.0
    gamma: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        positive = lambda v: isinstance(v, (int, float)) and v > 0  # noqa: E731
        check_fields(
            self,
            [
                ("beta", positive(self.beta), "must be a number > 0"),
                ("prm_lr", positive(self.prm_lr), "must be a number > 0"),
                ("prm_grad_clip", positive(self.prm_grad_clip), "must be a number > 0"),
                (
                    "gamma",
                    isinstance(self.gamma, (int, float)) and 0.0 <= self.gamma <= 1.0,
                    "must be in [0, 1]",
                ),
            ],
        )


@register_method("prime")
class PRIME(CreditMethod):
    summary = "process rewards from an implicit reward model trained online on the outcomes"
    paper = "Process Reinforcement through Implicit Rewards (arXiv 2502.01456)"
    Config = PRIMEConfig
    group_local = False  # the advantages are whitened over the whole batch
    needs_behaviour_logprobs = False  # its advantages never read them
    needs_reference_model = True
    config: PRIMEConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        if services is None:
            raise ValueError("prime needs services: a reward model to train and a reference")
        cfg, mask = self.config, batch.response_mask
        ref = services.score(batch, model="reference")

        def row_loss(logprobs: Tensor, rows: Tensor) -> Tensor:
            return outcome_loss(logprobs, ref[rows], mask[rows], batch.rewards[rows], cfg.beta)

        prm, stats = services.fit_auxiliary(
            batch, row_loss, lr=cfg.prm_lr, grad_clip=cfg.prm_grad_clip
        )
        process = implicit_process_rewards(prm, ref, mask, cfg.beta)
        services.report(
            {
                "prm_loss": stats["aux_loss"],
                "prm_grad_norm": stats["aux_grad_norm"],
                "process_reward_abs": float(masked_mean(process.abs(), mask)),
            }
        )
        return prime_advantages(process, batch.rewards, mask, batch.group_ids, cfg.gamma)
