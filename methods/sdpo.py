"""SDPO: the policy, shown a successful sibling, is its own token-level teacher.

Paper: Hübotter et al., "Reinforcement Learning via Self-Distillation", arXiv 2601.20802
(2026), Eq. 1, Prop. 2.1, App. A-B.

Key equations. For response y ~ π_θ(·|x) and feedback f (a successful rollout of the same
group, shown as the solution), the self-teacher is q = π_θ'(·|x, f, y_<t), scored on y by
teacher forcing, θ' an EMA of θ (θ' ← (1 − r)θ' + rθ after each update, r = 0.05):

    L_SDPO(θ) = Σ_t KL( π_θ(·|x, y_<t) ‖ sg q(·|x, f, y_<t) )                 (Eq. 1)
    ∇L = −E Σ_t E_ŷ~π_θ [ A_t(ŷ) ∇log π_θ(ŷ|x, y_<t) ],
    A_t(ŷ) = log q(ŷ|x, f, y_<t) − log π_θ(ŷ|x, y_<t)                          (Prop. 2.1)

``distill="token"`` takes ŷ = y_t (one sample of the inner expectation): the per-token loss
is −A_t(y_t)·w_t·log π_θ(y_t), w_t = sg min(π_θ/π_old, is_clip). With f the reference answer
this A_t is OPPO's self-oracle evidence δ_t. ``distill="topk"`` distils the distribution over
the student's top-K tokens plus a tail bucket log(1 − Σ_topK p) (App. A.3), divergence by
α: 0 KL(q‖π), 1 KL(π‖q), else (1−α)KL(π‖M) + αKL(q‖M) with M = (1−α)π + αq; same weight w.
Rollouts without a successful sibling get no teacher and no loss. Aggregation token-mean.

Defaults: teacher EMA, rate 0.05; success threshold 0.5; the sample's own success never its
own demonstration; is_clip 2; top_k 100, α 0.5 (JSD) for ``topk`` (Table 12).

Deviations:
    - ``distill="topk"`` (the default, the paper's main runs) pays an extra policy forward with
      gradient per micro-batch (charged), since the trainer hands a loss the sampled token's
      log-prob only, and one for the top-K indices, which come from the rollout policy, not
      the updated one. K = ``top_k`` = 100 reads every entry of a smaller vocabulary (the
      testbed's), i.e. K = min(100, vocab). ``distill="token"`` keeps the one-sample reading.
    - ``reprompt="solution"`` (the default, the paper's template: the task's
      ``solution_hint`` variant) shows the teacher a successful sibling's full attempt.
      ``reprompt="hint"`` shows the task's oracle-hint prompt instead (the sibling's answer,
      which the graded-correct sibling shares with the reference answer); with
      ``distill="token"`` its advantage is OPPO's self-oracle evidence.
    - No environment feedback: the harness's graders return a verdict only (the paper's
      no-rich-feedback setting), so only rollouts with a sibling are distilled.
    - The token-mean divides by the distilled tokens, those of rows that have a teacher (the
      paper's ``self_distillation_mask``, through ``loss_mask``); with ``grpo_weight`` > 0 every
      row carries GRPO's advantage, so every response token counts.
    - ``grpo_weight`` λ mixes in GRPO's r − mean(r) (Eq. 3; ``token`` only); ``adv_clip``
      bounds |A_t| (the paper's test-time setting uses 5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .base import CreditMethod, LossConfig, check_fields, kl_penalty, loss_normalizers
from .contract import DIRECTION, Services, method_extra
from .core import (
    Normalizers,
    RolloutBatch,
    aggregate_loss,
    broadcast_to_tokens,
    group_normalized_scores,
    masked_mean,
)
from .registry import register_method


def sibling_index(
    rewards: Tensor, group_ids: Tensor, threshold: float = 0.5, include_self: bool = False
) -> Tensor:
    """``[B]`` long: the first row of the same group with reward >= threshold (other than the
    row itself unless ``include_self``), -1 where there is none."""
    ok = (group_ids.unsqueeze(-1) == group_ids.unsqueeze(0)) & (rewards >= threshold).unsqueeze(0)
    if not include_self:
        ok &= ~torch.eye(len(rewards), dtype=torch.bool)
    return torch.where(ok.any(-1), ok.float().argmax(-1), torch.full_like(group_ids, -1))


def sdpo_token_advantages(
    teacher_logprobs: Tensor, student_logprobs: Tensor, response_mask: Tensor, clip: float | None
) -> Tensor:
    """``[B, T]`` A_t = log q(y_t) − log π(y_t) on the response tokens, clamped to ±clip."""
    adv = (teacher_logprobs - student_logprobs) * response_mask
    return adv if clip is None else adv.clamp(-clip, clip)


def with_tail(logprobs: Tensor, tail: bool = True) -> Tensor:
    """Top-K log-probs ``[..., K]`` plus the tail bucket log(1 − Σ p) ``[..., K+1]``, or,
    without a tail, renormalised within the K entries ``[..., K]``."""
    total = torch.logsumexp(logprobs, dim=-1, keepdim=True)
    if not tail:
        return logprobs - total
    rest = torch.log((-torch.expm1(total.clamp(max=0.0))).clamp(min=1e-10))
    return torch.cat([logprobs, rest], dim=-1)


def _kl(logp: Tensor, logq: Tensor) -> Tensor:
    return (logp.exp() * (logp - logq)).sum(-1)


def divergence(student: Tensor, teacher: Tensor, alpha: float) -> Tensor:
    """Per-position divergence ``[...]`` of log-distributions ``[..., K]`` (see module doc)."""
    if alpha == 0.0:
        return _kl(teacher, student)
    if alpha == 1.0:
        return _kl(student, teacher)
    mix = torch.logsumexp(
        torch.stack([student + math.log(1 - alpha), teacher + math.log(alpha)]), dim=0
    )
    return (1 - alpha) * _kl(student, mix) + alpha * _kl(teacher, mix)


def capped_weight(logprobs: Tensor, old_logprobs: Tensor, cap: float) -> Tensor:
    """``[B, T]`` detached importance weight min(π/π_old, cap)."""
    return torch.exp((logprobs - old_logprobs).clamp(-20.0, 20.0)).clamp(max=cap).detach()


TEACHERS, REPROMPTS, DISTILLS = ("ema", "policy"), ("hint", "solution"), ("token", "topk")


@dataclass
class SDPOConfig(LossConfig):
    """SDPO settings; of the loss fields only ``aggregation`` and ``kl_coef``/``kl_kind`` apply."""

    teacher: str = "ema"
    ema_rate: float = 0.05
    reprompt: str = "solution"
    success_threshold: float = 0.5
    reprompt_on_self: bool = False
    distill: str = "topk"
    top_k: int = 100
    tail: bool = True
    alpha: float = 0.5
    is_clip: float = 2.0
    adv_clip: float | None = None
    grpo_weight: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = [
            ("teacher", self.teacher in TEACHERS, "must be ema or policy"),
            ("ema_rate", 0.0 <= self.ema_rate <= 1.0, "must be in [0, 1]"),
            ("reprompt", self.reprompt in REPROMPTS, "must be hint or solution"),
            ("distill", self.distill in DISTILLS, "must be token or topk"),
            ("top_k", self.top_k >= 1, "must be >= 1"),
            ("alpha", 0.0 <= self.alpha <= 1.0, "must be in [0, 1]"),
            ("is_clip", self.is_clip > 0.0, "must be > 0"),
            ("adv_clip", self.adv_clip is None or self.adv_clip > 0.0, "must be > 0 or null"),
            ("grpo_weight", 0.0 <= self.grpo_weight <= 1.0, "must be in [0, 1]"),
            ("grpo_weight", self.grpo_weight == 0 or self.distill == "token", "needs token"),
        ]
        check_fields(self, checks)


# The top-K distillation's teacher, stored by advantages() for the loss's own forward pass.
TOPK_INDEX = method_extra("sdpo", "sdpo_topk_index", "[B, T, K] long", "the student's top-K ids")
TEACHER_TOPK = method_extra(
    "sdpo", "sdpo_teacher_topk", "[B, T, K]", "the teacher's log-probs at those ids"
)
DISTILLED = method_extra("sdpo", "sdpo_mask", "[B]", "1 on rows that have a teacher")


@register_method("sdpo")
class SDPO(CreditMethod):
    summary = "self-distillation: the policy shown a successful sibling is the token teacher"
    paper = "Reinforcement Learning via Self-Distillation (arXiv 2601.20802)"
    Config = SDPOConfig
    opt_outs = {
        DIRECTION: "its advantage is the self-teacher's log-ratio on the responses that have a "
        "successful sibling (Prop. 2.1), a distillation target rather than a push along the "
        "reward: a failed response's tokens the teacher agrees with get positive credit, and "
        "a passed response without another successful sibling gets none"
    }
    config: SDPOConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        cfg = self.config
        if services is None:
            raise ValueError("sdpo: needs the harness services to score the self-teacher")
        sibling = sibling_index(
            batch.rewards, batch.group_ids, cfg.success_threshold, cfg.reprompt_on_self
        )
        rows = (sibling >= 0).nonzero().squeeze(-1)
        adv = torch.zeros_like(batch.response_mask)
        batch.extras = batch.extras if batch.extras is not None else {}
        batch.extras[DISTILLED] = (sibling >= 0).to(batch.response_mask.dtype)
        if rows.numel():
            sub = batch.select(rows)
            if cfg.reprompt == "hint":
                prompts = services.variant(sub, "oracle_hint")
            else:
                texts = services.decode(batch)
                hints = [texts[j] for j in sibling[rows].tolist()]
                prompts = services.variant(sub, "solution_hint", hints=hints)
            model = cfg.teacher
            if model == "ema":
                services.track_ema(cfg.ema_rate)
            if cfg.distill == "token":
                teacher = services.score(sub, prompts, model=model)
            else:
                teacher = self._store_topk(batch, sub, rows, prompts, model, services)
            adv[rows] = sdpo_token_advantages(
                teacher, sub.old_logprobs, sub.response_mask, cfg.adv_clip
            )
        if cfg.grpo_weight > 0:
            grpo = group_normalized_scores(batch.rewards, batch.group_ids, scale_by_std=False)
            mixed = broadcast_to_tokens(grpo, batch.response_mask)
            adv = cfg.grpo_weight * mixed + (1 - cfg.grpo_weight) * adv
        return adv

    def _store_topk(
        self,
        batch: RolloutBatch,
        sub: RolloutBatch,
        rows: Tensor,
        prompts: list[str],
        model: str,
        services: Services,
    ) -> Tensor:
        """Teacher log-probs at the student's top-K tokens (and the sampled one) into extras."""
        _, index = services.distribution(sub, top_k=self.config.top_k)
        both = torch.cat([index, sub.response_ids.unsqueeze(-1)], dim=-1)
        teacher, _ = services.distribution(sub, prompts, model=model, indices=both)
        shape = (*batch.response_mask.shape, index.shape[-1])
        extras = batch.extras if batch.extras is not None else {}
        extras[TOPK_INDEX] = torch.zeros(shape, dtype=torch.long)
        extras[TEACHER_TOPK] = torch.zeros(shape)
        extras[TOPK_INDEX][rows] = index
        extras[TEACHER_TOPK][rows] = teacher[..., :-1]
        batch.extras = extras
        return teacher[..., -1]

    def loss_mask(self, batch: RolloutBatch) -> Tensor:
        """The distilled tokens (rows with a teacher), or every response token when GRPO's
        advantage is mixed in or the batch was not through ``advantages``."""
        distilled = (batch.extras or {}).get(DISTILLED)
        if distilled is None or self.config.grpo_weight > 0:
            return batch.response_mask
        return batch.response_mask * distilled.unsqueeze(-1)

    def loss(
        self,
        logprobs: Tensor,
        batch: RolloutBatch,
        advantages: Tensor,
        normalizers: Normalizers | None = None,
        services: Services | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        cfg, mask = self.config, self.loss_mask(batch)
        weight = capped_weight(logprobs, batch.old_logprobs, cfg.is_clip)
        if cfg.distill == "token" or not bool(mask.any()):  # no teacher: nothing to distil
            per_token = -advantages * weight * logprobs
        else:
            if services is None or TOPK_INDEX not in (batch.extras or {}):
                raise ValueError("distill: topk needs advantages() and the loss the services")
            student, _ = services.distribution(batch, indices=batch.extra(TOPK_INDEX), grad=True)
            teacher = batch.extra(TEACHER_TOPK)
            div = divergence(with_tail(student, cfg.tail), with_tail(teacher, cfg.tail), cfg.alpha)
            per_token = div * weight
        normalizers = loss_normalizers(cfg, mask, normalizers, services)
        loss = aggregate_loss(per_token, mask, cfg.aggregation, normalizers)
        stats = {
            "pg_loss": float(loss.detach()),
            "is_capped_frac": float(masked_mean((weight >= cfg.is_clip).float(), mask)),
            "approx_kl": float(masked_mean((batch.old_logprobs - logprobs).detach(), mask)),
        }
        kl_term, kl_stats = kl_penalty(cfg, logprobs, batch, normalizers, mask)
        if kl_term is not None:
            loss, stats = loss + kl_term, {**stats, **kl_stats}
        return loss, stats
