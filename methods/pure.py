"""PURE: min-form credit for process rewards, the value of a state the worst step still ahead.

Paper: Cheng, Xiong, Qiao, Li, Guo, Wang, Lv and Wang, "Stop Summation: Min-Form Credit
Assignment Is All Process Reward Model Needs for Reasoning", arXiv 2504.15275 (2025; code
CJReinforce/PURE). The abstract was read: a process reward model (PRM) used in RL invites
reward hacking because the usual value, the sum of future rewards, lets a few high-reward steps
carry a trajectory; PURE defines the value as "the minimum future rewards", which bounds it to
the PRM's range, and "when we incorporate 1/10th verifiable rewards" hacking falls further.
The transform that makes a sum compute a minimum was read in third-party notes.

Key equations (response i of steps k = 1..K with process rewards r_k; T the temperature):

    V(s_k) = min_{k' ≥ k} r_k'                                 (min-form, against Σ_{k'≥k} r_k')
    w_k = softmax(-r / T)_k,   r*_k = w_k r_k                  (the practical transform:
    G_k = Σ_{k' ≥ k} r*_k'                                      Σ r* → min r as T → 0)
    A_{i,t} = G_{k(t)} - mean_{j≠i} G^j_1  +  r_o(i) - mean_{j≠i} r_o(j)   (RLOO on both)

The process reward read on the testbed is PRIME's implicit PRM (methods/prime.py): a copy of
the initial policy trained online on the verifier's outcomes (its cross-entropy, Algorithm 1 of
arXiv 2502.01456), r_k = β Σ_{t ∈ step k} log π_φ / π_ref, trained and charged through the
harness's auxiliary-model service. It never reads the testbed's step checker.

Defaults: T = 0.1 and the verifiable outcome term on (third-party notes: the paper's best
model mixes in verifiable rewards); β = 0.05 and the PRM's training as PRIME's file has them.

Deviations:
    - The PRM is PRIME's implicit one (the issue's choice), not the paper's discriminative
      PRM trained offline on step labels: the testbed has no labelled PRM to load.
    - The step rewards are divided by the batch's largest |step reward| (ours, after PRIME's
      ``batch_norm``): β log-ratios are about 1e-3 here, so the process term would vanish.
    - Steps are the task's (``batch.step_ids``), or lines where a task has none; the
      outcome's RLOO term is added at every token (the paper's 1/10 mixture of verifiable
      rewards is in its data, not a weight: here every response has its verified outcome).
    - ``temperature: 0`` takes the exact minimum of the future step rewards (ours).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import CreditMethod, LossConfig, Needs, check_fields
from .contract import DIRECTION, Services
from .core import RolloutBatch
from .prime import implicit_process_rewards, leave_one_out, outcome_loss
from .registry import register_method


def step_sums(token_values: Tensor, step_ids: Tensor, steps: int) -> Tensor:
    """``[B, K]`` each step's sum of ``token_values`` ``[B, T]`` over its tokens (``step_ids``
    ``[B, T]``, -1 off any step); K = ``steps``."""
    out = torch.zeros(token_values.shape[0], steps, dtype=token_values.dtype)
    on = step_ids >= 0
    out.index_put_((on.nonzero()[:, 0], step_ids[on]), token_values[on], accumulate=True)
    return out


def min_form_returns(step_rewards: Tensor, present: Tensor, temperature: float) -> Tensor:
    """``[B, K]`` G_k of every step: with ``temperature`` > 0, the return-to-go of
    ``softmax(-r/T) r`` over each response's ``present`` steps (``[B, K]`` bool); with 0, the
    exact ``min_{k' ≥ k} r_k'``. 0 where a step is absent."""
    r = step_rewards.double()
    if temperature > 0:
        logits = torch.where(present, -r / temperature, torch.full_like(r, -torch.inf))
        weights = torch.nan_to_num(torch.softmax(logits, dim=-1))
        returns = (weights * r).flip(-1).cumsum(-1).flip(-1)
    else:
        big = torch.where(present, r, torch.full_like(r, torch.inf))
        returns = big.flip(-1).cummin(-1).values.flip(-1)
    return torch.where(present, returns, torch.zeros_like(returns))


def pure_advantages(
    step_rewards: Tensor,
    step_ids: Tensor,
    rewards: Tensor,
    group_ids: Tensor,
    response_mask: Tensor,
    *,
    temperature: float = 0.1,
    verifiable: bool = True,
) -> Tensor:
    """``[B, T]`` PURE's advantage on each token: its step's min-form return less the others'
    mean value of their first state, plus (``verifiable``) the outcome's leave-one-out term.
    ``step_rewards`` ``[B, K]``, ``step_ids`` ``[B, T]`` (-1 off any step), ``rewards`` and
    ``group_ids`` ``[B]``, ``response_mask`` ``[B, T]``."""
    steps = step_rewards.shape[1]
    present = step_sums(response_mask.double(), step_ids, steps) > 0
    returns = min_form_returns(step_rewards, present, temperature)
    first = returns.gather(1, present.double().argmax(-1, keepdim=True)).squeeze(-1)
    process = returns - leave_one_out(first, group_ids)[:, None]
    token = process.gather(1, step_ids.clamp(min=0)) * (step_ids >= 0)
    if verifiable:
        outcome = rewards.double() - leave_one_out(rewards.double(), group_ids)
        alone = leave_one_out(torch.ones_like(outcome), group_ids) == 0  # no one to compare
        token = token + torch.where(alone, torch.zeros_like(outcome), outcome)[:, None]
    return (token * response_mask).to(response_mask.dtype)


@dataclass
class PUREConfig(LossConfig):
    """PURE's settings: ``temperature`` of the min-form transform (0: the exact minimum),
    ``verifiable`` (add the outcome's RLOO term), and the implicit PRM's ``beta``,
    ``prm_lr_ratio`` and ``prm_grad_clip`` (PRIME's)."""

    temperature: float = 0.1
    verifiable: bool = True
    beta: float = 0.05
    prm_lr_ratio: float = 2.0
    prm_grad_clip: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self,
            [
                ("temperature", self.temperature >= 0.0, "must be >= 0"),
                ("verifiable", isinstance(self.verifiable, bool), "must be true or false"),
                ("beta", self.beta > 0.0, "must be > 0"),
                ("prm_lr_ratio", self.prm_lr_ratio > 0.0, "must be > 0"),
                (
                    "prm_grad_clip",
                    self.prm_grad_clip is None or self.prm_grad_clip > 0,
                    "must be > 0 or null (the policy's clip)",
                ),
            ],
        )


@register_method("pure")
class PURE(CreditMethod):
    summary = "min-form credit (the worst step ahead) on PRIME's implicit process rewards"
    paper = (
        "Stop Summation: Min-Form Credit Assignment Is All Process Reward Model Needs for "
        "Reasoning (arXiv 2504.15275)"
    )
    Config = PUREConfig
    opt_outs = {
        DIRECTION: "its process term is a trained reward model's min-form value, added to the "
        "outcome's at equal weight, so a failed response the model rates well can out-credit "
        "a passed one"
    }
    group_local = False  # the implicit PRM is trained on, and normalised over, the whole batch
    needs = Needs(behaviour_logprobs=False, reference_model=True)
    config: PUREConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        if services is None:
            raise ValueError("pure needs services: a reward model to train and a reference")
        cfg, mask = self.config, batch.response_mask
        ref = (
            batch.ref_logprobs
            if batch.ref_logprobs is not None
            else services.score(batch, model="reference")
        )

        def row_loss(logprobs: Tensor, rows: Tensor) -> Tensor:
            return outcome_loss(logprobs, ref[rows], mask[rows], batch.rewards[rows], cfg.beta)

        prm, stats = services.fit_auxiliary(
            batch, row_loss, lr_ratio=cfg.prm_lr_ratio, grad_clip=cfg.prm_grad_clip
        )
        token_rewards = implicit_process_rewards(prm, ref, mask, cfg.beta).double()
        if stats["aux_updates"] == 0:  # π_φ is π_ref: every process reward is 0 (PRIME §5.1)
            token_rewards = torch.zeros_like(token_rewards)
        step_ids = (
            batch.step_ids
            if batch.step_ids is not None
            else services.delimited_step_ids(batch, "\n")
        )
        step_ids = torch.where(mask > 0, step_ids, torch.full_like(step_ids, -1))
        steps = int(step_ids.max()) + 1 if bool((step_ids >= 0).any()) else 1
        raw = step_sums(token_rewards, step_ids, steps)
        scaled = raw / (raw.abs().max() + 1e-6)  # ours, after PRIME's batch_norm
        services.report({"prm_loss": stats["aux_loss"], "step_reward_abs": float(raw.abs().mean())})
        return pure_advantages(
            scaled,
            step_ids,
            batch.rewards,
            batch.group_ids,
            mask,
            temperature=cfg.temperature,
            verifiable=cfg.verifiable,
        )
