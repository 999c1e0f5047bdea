"""CCPO: counterfactual credit for a thinker and a solver played by one policy.

Paper: Li, Tian, Ban, Chen, Zhang, Liu, Zhuang, "Counterfactual Credit Policy Optimization for
Multi-Agent Collaboration", arXiv 2603.21563 (v1; v2 "Collaborative Credit Policy Optimization",
v3 "Counterfactual Credit for Policy Optimization"). The paper's equations could not be read;
the rules below are those of the authors' code (github.com/bhai114/ccpo).

The Think-Solve dyad, G samples per prompt x, one policy π in both roles:

    z_k ~ π(· | thinker(x))       the thinker's hint          (text only)
    a_k ~ π(· | solver(x, z̃_k))   the joint answer            R_joint,k
    b_k ~ π(· | x)                the solver alone (agent 1 removed, the counterfactual)  R_solo,k

with z̃_k the hint without a final \\boxed{...}, so the solver is not handed an answer to copy.

v3 code (credit="event", the default), outcomes read as ±1, b(x) = mean_k R_solo,k:

    bonus_k = 1[R_joint,k > 0, b(x) < 0] - 1[R_joint,k < 0, b(x) > 0]         (helped - hurt)
    r_think,k = R_joint,k + λ bonus_k,        r_solve,k = R_joint,k,        λ = 0.2
    credit="difference":  bonus_k = (R_joint,k - b(x)) / 2

v1 code (credit="running"), outcomes in {0, 1}, Δ_k = R_joint,k - R_solo,k, and running
statistics (μ, σ) of Δ, R_joint, R_solo over past batches (EMA, ρ = 0.99), the batch being
normalised with the statistics of the batches before it:

    r_think,k = tanh(α (Δ_k - μ_Δ) / (σ_Δ + ε))
    r_solve,k = g z_joint,k + (1 - g) z_solo,k,    g = sigmoid(η μ_Δ / (σ_Δ + ε)),   α = η = 1
    (Δ_k and R_joint,k unnormalised until one batch and min_samples outcomes have been seen)

Each role's rows are grouped by prompt:  A_k = r_k - mean_prompt(r)  on every token of the
role's response (v3: no std division). The roles train in turns of P = 10 steps, thinker first.
Loss: the v3 code's GSPO (sequence ratio, ε_low = 3e-4, ε_high = 4e-4, seq-mean-token-mean, no KL).

Deviations:
    - One policy plays both roles (``services`` has one model); the code trains two copies of
      the same checkpoint. Each role still trains only in its own turns (``train_roles``);
      ``both`` trains both every step.
    - ``credit`` defaults to v3's event bonus, the newest version of the paper, which needs no
      state across steps, so a resumed run computes the same credit. The running statistics
      of ``running`` live in the method object and start afresh when a run resumes.
    - ``solo_baseline="auto"`` is what each code does: the prompt's solo mean for event and
      difference (v3), the paired k-th solo answer for running (v1); both are selectable.
    - v3 maps the grader's reward to +1 when positive, else -1; v1 uses the grade as is.
    - The running variance averages the batch variances, as the v1 code does (ignoring
      between-batch mean shifts); population variance is our reading of "the batch variance".
    - Solo answers are generated every step but never trained on (both codes use them only
      as baselines); v1's format rewards (\\boxed) have no counterpart on the testbed.
    - The solver sees the thought without a final ``\\boxed{...}`` (``strip_final_boxed``),
      as the v3 code's ``_strip_final_boxed`` does; its pattern takes no nested braces, so it
      leaves ``\\boxed{\\frac{1}{2}}`` in place, which is stripped here too. The thinker still
      trains on what it wrote. On the testbed it changes nothing (its alphabet has no backslash).
    - A group of one gets advantage 0 (verl keeps the raw reward).
    - The voting topology of v1 and v3's SEPO allocator are not implemented.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .base import CreditMethod, LossConfig, check_fields
from .contract import Services, method_extra
from .core import Normalizers, RolloutBatch, broadcast_to_tokens, concat_batches, group_mean_std
from .core import group_normalized_scores as group_scores
from .registry import register_method
from .rollouts import hinted_rollout, pad_extras_like, turn_for_step

CREDITS = ("event", "difference", "running")
BASELINES = ("auto", "group_mean", "paired")
TRAIN_ROLES = ("alternate", "both", "thinker", "solver")
THINKER, SOLVER = 0, 1


def strip_final_boxed(text: str) -> str:
    """``text`` right-stripped and without a ``\\boxed{...}`` that ends it (braces matched):
    the thinker's text as the solver is shown it, so that a thought that gives away its
    answer cannot be copied (the v3 code's ``_strip_final_boxed``). A box followed by
    anything but whitespace stays."""
    body = text.rstrip()
    start = body.rfind("\\boxed{")
    if start < 0:
        return body
    depth = 0
    for end in range(start + len("\\boxed"), len(body)):
        depth += {"{": 1, "}": -1}.get(body[end], 0)
        if depth == 0:
            return body[:start].rstrip() if end == len(body) - 1 else body
    return body  # the box never closes


def signed_outcome(rewards: Tensor) -> Tensor:
    """v3's verifier outcome ``[B]``: +1 where the reward is positive, else -1."""
    return torch.where(rewards > 0, torch.ones_like(rewards), -torch.ones_like(rewards))


def solo_baseline(solo: Tensor, group_ids: Tensor, mode: str) -> Tensor:
    """``[B]``: the paired solo outcome, or the mean solo outcome of the row's prompt."""
    return solo if mode == "paired" else group_mean_std(solo, group_ids)[0]


def counterfactual_bonus(joint: Tensor, baseline: Tensor, rule: str = "event") -> Tensor:
    """The thinker's counterfactual credit ``[B]`` from ±1 outcomes.

    ``event``: +1 if the team is right where the solver alone is (on average) wrong, -1 the
    other way round, 0 otherwise. ``difference``: ``(R_joint - b) / 2``.
    """
    if rule == "difference":
        return (joint - baseline) / 2
    helped = ((joint > 0) & (baseline < 0)).to(joint.dtype)
    hurt = ((joint < 0) & (baseline > 0)).to(joint.dtype)
    return helped - hurt


@dataclass
class RunningStat:
    """v1's global-history statistics of one stream: EMA of batch means and variances."""

    decay: float = 0.99
    eps: float = 1e-6
    mean: float = 0.0
    m2: float = 0.0
    updates: int = 0
    seen: int = 0

    @property
    def std(self) -> float:
        return math.sqrt(self.m2) if self.m2 > self.eps else 1.0

    def normalize(self, values: Tensor) -> Tensor:
        return (values - self.mean) / (self.std + self.eps)

    def update(self, values: Tensor) -> None:
        mean, var = float(values.mean()), float(values.var(unbiased=False))
        if self.updates == 0:
            self.mean, self.m2 = mean, var
        else:
            self.mean = self.decay * self.mean + (1 - self.decay) * mean
            self.m2 = self.decay * self.m2 + (1 - self.decay) * var
        self.updates += 1
        self.seen += values.numel()


def running_rewards(
    delta: Tensor,
    joint: Tensor,
    solo: Tensor,
    stats: dict[str, RunningStat],
    *,
    alpha: float = 1.0,
    eta: float = 1.0,
    min_samples: int = 10,
) -> tuple[Tensor, Tensor, float]:
    """v1's role rewards ``(r_think [B], r_solve [B], gate)`` from the statistics *before* this
    batch; then folds the batch into ``stats`` (keys ``delta``, ``joint``, ``solo``)."""
    d = stats["delta"]
    if d.updates >= 1 and d.seen >= min_samples:
        r_think = torch.tanh(alpha * d.normalize(delta))
        # sigmoid via tanh: μ/σ is huge when σ is tiny, where 1 / (1 + exp(-x)) overflows
        gate = 0.5 * (1.0 + math.tanh(eta * d.mean / (d.std + d.eps) / 2))
        z_joint, z_solo = stats["joint"].normalize(joint), stats["solo"].normalize(solo)
        r_solve = gate * z_joint + (1 - gate) * z_solo
    else:
        r_think, r_solve, gate = delta.clone(), joint.clone(), 1.0
    for key, values in (("delta", delta), ("joint", joint), ("solo", solo)):
        stats[key].update(values)
    return r_think, r_solve, gate


def ccpo_advantages(
    rewards: Tensor, response_mask: Tensor, group_ids: Tensor, *, scale_by_std: bool = False
) -> Tensor:
    """``[B, T]``: each row's role reward minus its (role, prompt) group's mean, on its tokens."""
    return broadcast_to_tokens(
        group_scores(rewards, group_ids, scale_by_std=scale_by_std), response_mask
    )


def role_for_step(step: int, period: int, start_with: str = "thinker") -> int:
    """The role trained at 0-based ``step``: turns of ``period`` steps, ``start_with`` first."""
    return turn_for_step(step, period, THINKER if start_with == "thinker" else SOLVER)


@dataclass
class CCPOConfig(LossConfig):
    """CCPO settings (loss fields from `LossConfig`, defaults of the v3 code's GSPO run)."""

    eps_low: float = 3e-4
    eps_high: float = 4e-4
    ratio_level: str = "sequence"
    aggregation: str = "seq-mean-token-mean"
    credit: str = "event"
    solo_baseline: str = "auto"
    bonus_coef: float = 0.2
    train_roles: str = "alternate"
    alternate_period: int = 10
    start_with: str = "thinker"
    scale_by_std: bool = False
    thinker_max_new_tokens: int = 0
    ema_decay: float = 0.99
    alpha: float = 1.0
    eta: float = 1.0
    min_samples: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = [
            ("credit", self.credit in CREDITS, f"must be one of {CREDITS}"),
            ("solo_baseline", self.solo_baseline in BASELINES, f"must be one of {BASELINES}"),
            ("bonus_coef", self.bonus_coef >= 0, "must be >= 0"),
            ("train_roles", self.train_roles in TRAIN_ROLES, f"must be one of {TRAIN_ROLES}"),
            ("alternate_period", self.alternate_period >= 1, "must be >= 1"),
            ("start_with", self.start_with in ("thinker", "solver"), "must be thinker or solver"),
            ("thinker_max_new_tokens", self.thinker_max_new_tokens >= 0, "must be >= 0"),
            ("ema_decay", 0 <= self.ema_decay < 1, "must be in [0, 1)"),
            ("alpha", self.alpha > 0, "must be > 0"),
            ("eta", self.eta >= 0, "must be >= 0"),
            ("min_samples", self.min_samples >= 0, "must be >= 0"),
        ]
        check_fields(self, checks)


ROLE = method_extra("ccpo", "ccpo_role", "[B] long", "the row's role: 0 thinker, 1 solver")
ROLE_REWARD = method_extra("ccpo", "ccpo_reward", "[B]", "the reward the row's role is trained on")
BONUS = method_extra("ccpo", "ccpo_bonus", "[B]", "the counterfactual bonus of the row's team")
SOLO_REWARD = method_extra("ccpo", "ccpo_solo_reward", "[B]", "the paired solo solver's reward")


@register_method("ccpo")
class CCPO(CreditMethod):
    summary = "thinker-solver team of one policy; thinker credited against the solver alone"
    paper = (
        "Counterfactual Credit Policy Optimization for Multi-Agent Collaboration (arXiv 2603.21563)"
    )
    Config = CCPOConfig
    config: CCPOConfig

    def __init__(self, config: LossConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        decay = self.config.ema_decay  # type: ignore[attr-defined]
        self.stats = {key: RunningStat(decay) for key in ("delta", "joint", "solo")}

    def rollout(self, services: Services) -> RolloutBatch:
        cfg: CCPOConfig = self.config  # type: ignore[assignment]
        # solo: the counterfactual, the solver on the plain prompt; joint: the solver shown
        # the thinker's k-th hint, paired with the k-th solo answer
        solo, thinker, joint = hinted_rollout(
            services,
            "thinker",
            "solver",
            hint_max_new_tokens=cfg.thinker_max_new_tokens or None,
            hint_text=strip_final_boxed,
        )

        mode = cfg.solo_baseline
        if mode == "auto":
            mode = "paired" if cfg.credit == "running" else "group_mean"
        if cfg.credit == "running":
            base = solo_baseline(solo.rewards, joint.group_ids, mode)
            bonus = joint.rewards - base
            r_think, r_solve, _ = running_rewards(
                bonus, joint.rewards, solo.rewards, self.stats,
                alpha=cfg.alpha, eta=cfg.eta, min_samples=cfg.min_samples,
            )  # fmt: skip
        else:
            outcome = signed_outcome(joint.rewards)
            base = solo_baseline(signed_outcome(solo.rewards), joint.group_ids, mode)
            bonus = counterfactual_bonus(outcome, base, cfg.credit)
            r_think, r_solve = outcome + cfg.bonus_coef * bonus, outcome

        thinker.rewards = joint.rewards.clone()  # the team's outcome, for the run's metrics
        for batch, role, reward in ((thinker, THINKER, r_think), (joint, SOLVER, r_solve)):
            batch.extras = {
                **(batch.extras or {}),
                ROLE: torch.full((batch.size,), role, dtype=torch.long),
                ROLE_REWARD: reward.float(),
                BONUS: bonus.float(),
                SOLO_REWARD: solo.rewards.clone(),
            }
        pad_extras_like(thinker, joint)
        pad_extras_like(joint, thinker)
        if cfg.train_roles == "both":
            return concat_batches([thinker, joint])
        if cfg.train_roles == "alternate":
            role = role_for_step(services.step, cfg.alternate_period, cfg.start_with)
        else:
            role = THINKER if cfg.train_roles == "thinker" else SOLVER
        return thinker if role == THINKER else joint

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        cfg: CCPOConfig = self.config  # type: ignore[assignment]
        extras = batch.extras or {}
        # A batch from elsewhere (no role rewards) is read as solver rows rewarded by outcome.
        rewards = extras.get(ROLE_REWARD, batch.rewards)
        return ccpo_advantages(
            rewards, batch.response_mask, batch.group_ids, scale_by_std=cfg.scale_by_std
        )

    def loss(
        self,
        logprobs: Tensor,
        batch: RolloutBatch,
        advantages: Tensor,
        normalizers: Normalizers | None = None,
        services: Services | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        loss, stats = super().loss(logprobs, batch, advantages, normalizers, services)
        extras = batch.extras or {}
        for key, name in ((BONUS, "cf_bonus"), (SOLO_REWARD, "solo_reward")):
            if key in extras and extras[key].numel():
                stats[name] = float(extras[key].float().mean())
        return loss, stats
