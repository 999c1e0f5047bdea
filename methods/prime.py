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
Before the baselines, the code divides the process rewards by the largest |return| in the
batch (``prime_norm: batch_norm``, PRIME-RL/PRIME ``training/verl/workers/actor/dp_prime.py``
and verl's PRIME recipe ``prime_dp_rm.py``), so the process term weighs as much as the outcome
term however small β·log-ratio is. At the start π_φ = π_ref, every process reward is 0 and
PRIME is RLOO on the outcome (§5.1).

Deviations:
    - Single forward (§5.3, the code's default): the process rewards come from the reward
      model's pass before its update, the pass whose gradient updates it; one AdamW step of
      the whole batch a policy step, where the code takes the PPO mini-batches.
    - The process rewards for the policy are normalised by the batch's largest |return|, as
      both codes do (``process_norm="batch_norm"``); ``process_norm="none"`` keeps Eq. 3's
      β·log-ratio, whose returns on the testbed are about 0.003 a token, so PRIME is then
      RLOO in all but name. The reward model's own loss always uses the raw β·log-ratio.
    - The reward model's first pass is the reference itself, so its process rewards are set
      to 0 (§5.1), as two passes of one model computed alike give them (the code scores
      the reward model and the reference alike; inferred). Here the two passes are
      batched differently and their log-ratio is float noise of about 1e-9, which the batch
      norm (its largest |return| far below its 1e-6 floor) would raise to a few percent of
      the outcome term, differently on each CPU.
    - The leave-one-out baseline of Eq. 5 (the others' mean process reward); the code adds
      (r_t - m_i)/(K-1) to it (``compute_rloo_returns``). A group of one gets no baseline.
    - The prompt filter (group accuracy in [0.2, 0.8], §3.3 and the code's run script) is not
      applied: every group is trained on, as for every other method here.
    - The reward model is trained as the policy is (the run's optimizer and its settings) at
      twice the policy's learning rate (``prm_lr_ratio``: the paper's 1e-6 to 5e-7, §4.2),
      and clipped as the policy is; the code clips it at 10 against the actor's 1.0, which
      under the testbed's fixed-step SGD would make its step 10^4 times the policy's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .base import CreditMethod, LossConfig, Needs, check_fields
from .contract import DIRECTION, Services
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


def batch_normalized(process_rewards: Tensor, eps: float = 1e-6) -> Tensor:
    """``[B, T]`` the process rewards divided by the largest |return| Σ_{s>=t} r_s over every
    token of the batch (+ ``eps``): PRIME's ``prime_norm: batch_norm``. Rewards off the
    response must be 0 already."""
    returns = process_rewards.flip(-1).cumsum(-1).flip(-1)
    return process_rewards / (returns.abs().max() + eps)


def leave_one_out(values: Tensor, group_ids: Tensor) -> Tensor:
    """``[B]`` the mean of ``values`` over the other members of each row's group (0 in a
    group of one)."""
    mean, _, count = group_mean_std(values, group_ids)
    others = (mean * count - values) / (count - 1).clamp(min=1)
    return torch.where(count > 1, others, torch.zeros_like(values))


def prime_token_rewards(
    process_rewards: Tensor, rewards: Tensor, response_mask: Tensor, group_ids: Tensor
) -> tuple[Tensor, Tensor]:
    """The two terms of Eq. 5 as token rewards ``[B, T]``, before their returns: each process
    reward less the others' mean process reward per token, and the outcome less the others'
    mean outcome, on the last response token (0 in a group of one).

    Args:
        process_rewards: ``[B, T]`` r_φ(y_t) (normalised or not), 0 off the response.
        rewards: ``[B]`` outcome rewards r_o.
        response_mask: ``[B, T]``.
        group_ids: ``[B]``.
    """
    mask = response_mask.to(process_rewards.dtype)
    per_token = masked_mean(process_rewards, mask, dim=-1)  # r_φ(y^j) / |y^j|
    process = (process_rewards - leave_one_out(per_token, group_ids).unsqueeze(-1)) * mask
    outcome = rewards.to(process.dtype) - leave_one_out(rewards.to(process.dtype), group_ids)
    count = group_mean_std(rewards.to(process.dtype), group_ids)[2]
    outcome = torch.where(count > 1, outcome, torch.zeros_like(outcome))  # no baseline alone
    return process, outcome_token_rewards(outcome, mask)


def term_weight(process: Tensor, outcome: Tensor, response_mask: Tensor) -> float:
    """The mean |return| of the process term over the mean |return| of the outcome term, on
    response tokens (γ = 1): how much the process rewards move the advantages (0: PRIME is
    RLOO). NaN on a batch without a mixed group, whose outcome term is 0: the ratio is
    undefined there, and a tiny floor would put a 1e10 into the run's mean.
    ``process``, ``outcome``: ``[B, T]`` token rewards of `prime_token_rewards`."""
    mask = response_mask.to(process.dtype)

    def mean_abs_return(token_rewards: Tensor) -> Tensor:
        return masked_mean(token_rewards.flip(-1).cumsum(-1).flip(-1).abs(), mask)

    outcome_size = float(mean_abs_return(outcome))
    if outcome_size == 0.0:
        return float("nan")
    return float(mean_abs_return(process)) / outcome_size


def prime_advantages(
    process_rewards: Tensor,
    rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    gamma: float = 1.0,
) -> Tensor:
    """PRIME's advantage ``[B, T]`` (Eq. 5), whitened over the batch: the return of
    `prime_token_rewards`' process and outcome terms with discount ``gamma``, whitened over
    every response token of the batch. Arguments as `prime_token_rewards`."""
    process, outcome = prime_token_rewards(process_rewards, rewards, response_mask, group_ids)
    mask = response_mask.to(process.dtype)
    return reinforce_pp_advantages(process + outcome, mask, gamma)  # returns, whitened


@dataclass
class PRIMEConfig(LossConfig):
    """PRIME's settings: the reward model's β and optimizer, and the returns' discount."""

    aggregation: str = "token-mean"
    beta: float = 0.05
    process_norm: str = "batch_norm"
    prm_lr_ratio: float = 2.0
    prm_grad_clip: float | None = None
    gamma: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        positive = lambda v: isinstance(v, (int, float)) and v > 0  # noqa: E731
        check_fields(
            self,
            [
                ("beta", positive(self.beta), "must be a number > 0"),
                (
                    "process_norm",
                    self.process_norm in ("batch_norm", "none"),
                    "must be batch_norm or none",
                ),
                ("prm_lr_ratio", positive(self.prm_lr_ratio), "must be a number > 0"),
                (
                    "prm_grad_clip",
                    self.prm_grad_clip is None or positive(self.prm_grad_clip),
                    "must be a number > 0 or null (the policy's clip)",
                ),
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
    opt_outs = {
        DIRECTION: "the implicit reward model's process returns are added to the outcome's at "
        "equal weight (normalised by the batch's largest |return|, as both codes do), so a "
        "failed response the reward model rates well can out-credit a passed one (Eq. 5)"
    }
    group_local = False  # the advantages are whitened over the whole batch
    # its advantages never read the behaviour log-probs; its implicit PRM scores the reference
    needs = Needs(behaviour_logprobs=False, reference_model=True)
    config: PRIMEConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        if services is None:
            raise ValueError("prime needs services: a reward model to train and a reference")
        cfg, mask = self.config, batch.response_mask
        ref = batch.ref_logprobs  # the run keeps a reference, so its batches come scored
        if ref is None:
            ref = services.score(batch, model="reference")

        def row_loss(logprobs: Tensor, rows: Tensor) -> Tensor:
            return outcome_loss(logprobs, ref[rows], mask[rows], batch.rewards[rows], cfg.beta)

        prm, stats = services.fit_auxiliary(
            batch, row_loss, lr_ratio=cfg.prm_lr_ratio, grad_clip=cfg.prm_grad_clip
        )
        raw = implicit_process_rewards(prm, ref, mask, cfg.beta)
        if stats["aux_updates"] == 0:  # π_φ is π_ref: every process reward is 0 (§5.1)
            raw = torch.zeros_like(raw)
        process = batch_normalized(raw) if cfg.process_norm == "batch_norm" else raw
        terms = prime_token_rewards(process, batch.rewards, mask, batch.group_ids)
        report = {
            "prm_loss": stats["aux_loss"],
            "prm_grad_norm": stats["aux_grad_norm"],
            "process_reward_abs": float(masked_mean(raw.abs(), mask)),
        }
        weight = term_weight(*terms, mask)
        if math.isfinite(weight):  # left out of a step without a mixed group (undefined)
            report["process_to_outcome"] = weight
        services.report(report)
        return prime_advantages(process, batch.rewards, mask, batch.group_ids, cfg.gamma)
