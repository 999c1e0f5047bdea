"""OPPO: token credit from a Bayesian value recursion on oracle-conditioned evidence.

Paper: Li, Miao, Lan, Qi, "OPPO: Bayesian Value Recursion for Token-Level Credit Assignment
in LLM Reasoning", arXiv 2605.21851 (2026). OPPO, Oracle-Prompted Policy Optimization, in its
self-oracle and teacher-oracle forms.

Key equations (response y_1..y_T to prompt x, reference answer y*, reward R, group mean r̄):

    δ_t = log π̂(y_t | x ⊕ y*, y_<t) − log π̂(y_t | x, y_<t)        evidence, clipped to [−c, c]
    ℓ_0 = logit clamp(r̄, ε, 1 − ε),   ℓ_t = ℓ_0 + Σ_{s≤t} γ^{t−s} δ_s          (log-odds)
    V_t = σ(ℓ_t),   A_t = V_t − V_{t−1}  ≈  V_{t−1}(1 − V_{t−1}) δ_t             (state weight)
    V_T := R  (the verified outcome is the last observation), so Σ_t A_t = R − V_0
    Â_t = sign(R − r̄) · |A_t|                                        (direction anchoring)

π̂ is the current policy without gradient (``oracle="self"``: one extra pass under the task's
``oracle_hint`` prompt; the denominator is the behaviour log-prob already in the batch) or a
frozen stronger model (``oracle="teacher"``: the teacher scores both the plain and the hinted
prompt). Â replaces the host recipe's advantage inside the host's sampling and loss: the
paper's rows are "GRPO + OPPO" and "DAPO + OPPO", OPPO run as verl's advantage estimator in
verl's GRPO or DAPO trainer. ``base`` names the host (`methods.compose`): ``grpo`` (the
default; GRPO's clip 0.2 and ``seq-mean-token-mean``) or ``dapo`` (DAPO's defaults:
clip-higher 0.28, ``token-mean``, dynamic sampling, overlong shaping); ``host`` holds the host's
own options (``{base: dapo, host: {overlong_shaping: false}}``).

Defaults: ε = 1e-4, γ = 1, no whitening (the ``OppoConfig`` of a verl fork that is probably the
authors'); c = 3.

Deviations (the paper leaves these open; each is an option):
    - ``terminal="outcome"``: the last response token gets A_T = R − V_{T−1}, the reading in
      which the paper's identity Σ_t A_t = R − V_0 holds exactly. ``"spread"`` adds
      (R − V_T)/|y| to every token instead; ``"none"`` keeps Σ_t A_t = V_T − V_0.
    - ``anchoring="sign"``: sign from the verifier, magnitude from OPPO (the RLSD rule the name
      points to). ``"mask"`` zeroes tokens whose sign disagrees; ``"none"`` turns it off.
    - ``evidence_clip`` c = 3 (a likelihood ratio of e³ ≈ 20 per token), symmetric; the paper's
      bound is not known. ``None`` turns clipping off.
    - V_0 is the group's mean reward (rewards are taken to lie in [0, 1]); no min-max fallback.
    - The teacher's denominator is the teacher's own plain-prompt score
      (``teacher_denominator="teacher"``); ``"policy"`` uses the behaviour log-probs, one pass
      cheaper.
    - The decayed sum skips loss-free positions (a masked prefix keeps ℓ, it does not decay).
    - ``base_mix`` λ: Â ← λ A_base + (1 − λ) Â, A_base the host's own advantage (0 = the
      paper's replacement). ``whiten`` whitens Â over the batch (then advantages are no longer
      group-local).
    - On a host that shapes rewards (DAPO's overlong punishment), R and r̄ are the shaped
      reward, as verl's DAPO reward manager (``verl/workers/reward_manager/dapo.py``) adds
      the penalty to the reward every estimator reads; ``host: {overlong_shaping: false}``
      gives the task reward. Responses the host trains on nothing (DAPO's all-equal groups when the
      refill rounds ran out) get Â = 0.
    - The contrastive "R = 0 oracle" denominator (a wrong answer in the prompt) is not offered:
      the tasks have no prompt variant carrying a wrong answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from .base import CreditMethod, check_fields
from .compose import HostedConfig, HostedCredit
from .contract import Reduction, Services
from .core import RolloutBatch, group_mean_std, masked_whiten
from .dapo import DAPO
from .grpo import GRPO
from .registry import register_method

ORACLES = ("self", "teacher")
DENOMINATORS = ("teacher", "policy")
TERMINALS = ("outcome", "spread", "none")
ANCHORINGS = ("sign", "mask", "none")


def evidence(hinted: Tensor, plain: Tensor, mask: Tensor, clip: float | None = None) -> Tensor:
    """δ ``[B, T]``: hinted minus plain log-probs ``[B, T]``, clipped to [−c, c], 0 off mask."""
    delta = torch.where(mask > 0, hinted - plain, torch.zeros_like(hinted))
    return delta if clip is None else delta.clamp(-clip, clip)


def log_odds(prior_logit: Tensor, delta: Tensor, mask: Tensor, decay: float = 1.0) -> Tensor:
    """ℓ_t ``[B, T]`` (after token t) from ℓ_0 ``[B]`` and evidence δ ``[B, T]``, in float64.

    ``c_t = γ c_{t−1} + δ_t`` on loss-carrying tokens; elsewhere ℓ stays where it was.
    """
    d = delta.to(torch.float64) * mask
    if decay == 1.0:
        summed = d.cumsum(-1)
    else:
        keep = torch.where(mask > 0, torch.full_like(d, decay), torch.ones_like(d))
        summed, acc = torch.empty_like(d), torch.zeros_like(d[:, 0])
        for t in range(d.shape[-1]):  # γ^{-t} overflows for long responses: no closed form
            acc = keep[:, t] * acc + d[:, t]
            summed[:, t] = acc
    return prior_logit.to(torch.float64).unsqueeze(-1) + summed


def value_advantages(
    prior_logit: Tensor,
    ell: Tensor,
    mask: Tensor,
    rewards: Tensor | None = None,
    terminal: str = "outcome",
) -> Tensor:
    """A_t = σ(ℓ_t) − σ(ℓ_{t−1}) ``[B, T]`` (float64), with the terminal rule.

    ``outcome``: the last loss-carrying token gets R − V_{T−1}; ``spread``: every token gets
    (R − V_T)/n more; ``none``: plain differences. ``rewards`` ``[B]`` needed unless none.
    """
    if terminal not in TERMINALS:
        raise ValueError(f"terminal: must be one of {', '.join(TERMINALS)} (got {terminal!r})")
    m = mask.to(torch.float64)
    prev = torch.cat([prior_logit.to(torch.float64).unsqueeze(-1), ell[:, :-1]], dim=-1)
    v, v_prev = torch.sigmoid(ell), torch.sigmoid(prev)
    adv = (v - v_prev) * m
    if terminal == "none":
        return adv
    if rewards is None:
        raise ValueError(f"terminal: {terminal!r} needs the rewards")
    r = rewards.to(torch.float64)
    has = m.sum(-1) > 0
    last = (m * torch.arange(1, m.shape[-1] + 1, dtype=torch.float64)).argmax(-1, keepdim=True)
    if terminal == "outcome":
        final = (r.unsqueeze(-1) - v_prev.gather(-1, last)) * has.unsqueeze(-1)
        return adv.scatter(-1, last, final.to(adv.dtype))
    residual = r - v.gather(-1, last).squeeze(-1)
    return adv + (residual / m.sum(-1).clamp(min=1)).unsqueeze(-1) * m


def anchor(advantages: Tensor, direction: Tensor, mode: str = "sign") -> Tensor:
    """Direction anchoring of ``[B, T]`` advantages by ``direction`` ``[B]`` (R − r̄)."""
    if mode not in ANCHORINGS:
        raise ValueError(f"anchoring: must be one of {', '.join(ANCHORINGS)} (got {mode!r})")
    sign = torch.sign(direction).to(advantages.dtype).unsqueeze(-1)
    if mode == "sign":
        return sign * advantages.abs()
    if mode == "mask":
        return torch.where(advantages * sign > 0, advantages, torch.zeros_like(advantages))
    return advantages


def oppo_advantages(
    delta: Tensor,
    rewards: Tensor,
    group_ids: Tensor,
    mask: Tensor,
    *,
    prior_eps: float = 1e-4,
    decay: float = 1.0,
    terminal: str = "outcome",
    anchoring: str = "sign",
) -> Tensor:
    """OPPO's token advantages ``[B, T]`` from clipped evidence δ ``[B, T]`` and rewards ``[B]``."""
    mean, _, _ = group_mean_std(rewards, group_ids)
    prior = torch.logit(mean.to(torch.float64).clamp(prior_eps, 1 - prior_eps))
    ell = log_odds(prior, delta, mask, decay)
    adv = value_advantages(prior, ell, mask, rewards, terminal)
    return anchor(adv, rewards - mean, anchoring).to(delta.dtype) * mask


@dataclass
class OPPOConfig(HostedConfig):
    """OPPO's own fields, on the host recipe ``base`` names with the host's own options in
    ``host`` (`methods.compose`): "GRPO + OPPO" by default, "DAPO + OPPO" with ``base: dapo``."""

    hosts: ClassVar[dict[str, type[CreditMethod]]] = {"grpo": GRPO, "dapo": DAPO}

    base: str = "grpo"
    oracle: str = "self"
    teacher_denominator: str = "teacher"
    prior_eps: float = 1e-4
    decay: float = 1.0
    evidence_clip: float | None = 3.0
    terminal: str = "outcome"
    anchoring: str = "sign"
    whiten: bool = False
    base_mix: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        clip, denominator = self.evidence_clip, self.teacher_denominator
        checks = [
            ("oracle", self.oracle in ORACLES, f"must be one of {', '.join(ORACLES)}"),
            ("teacher_denominator", denominator in DENOMINATORS, "must be teacher or policy"),
            ("prior_eps", 0.0 < self.prior_eps < 0.5, "must be in (0, 0.5)"),
            ("decay", 0.0 <= self.decay <= 1.0, "must be in [0, 1]"),
            ("evidence_clip", clip is None or clip > 0, "must be > 0 or null"),
            ("terminal", self.terminal in TERMINALS, f"must be one of {', '.join(TERMINALS)}"),
            ("anchoring", self.anchoring in ANCHORINGS, f"must be one of {', '.join(ANCHORINGS)}"),
            ("base_mix", 0.0 <= self.base_mix <= 1.0, "must be in [0, 1]"),
        ]
        check_fields(self, checks)


@register_method("oppo")
class OPPO(HostedCredit):
    summary = "value recursion on oracle-hint evidence: A_t = V_t - V_{t-1}, anchored by the reward"
    paper = (
        "OPPO: Bayesian Value Recursion for Token-Level Credit Assignment in LLM Reasoning "
        "(arXiv 2605.21851)"
    )
    Config = OPPOConfig
    # base_mix = 1 keeps the host's own advantage only (ours: the option's end point)
    reduces_to = (
        Reduction("grpo", {"base_mix": 1.0}, "ours: Â = 1·A_base + 0·Â"),
        Reduction("dapo", {"base": "dapo", "base_mix": 1.0}, "ours: on DAPO, DAPO's A_base"),
    )
    config: OPPOConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        cfg = self.config
        if services is None:
            raise ValueError("oppo needs services: it scores responses under the oracle prompt")
        hinted_prompts = services.variant(batch, "oracle_hint")
        scorer = "policy" if cfg.oracle == "self" else "teacher"
        hinted = services.score(batch, hinted_prompts, model=scorer)
        plain = batch.old_logprobs
        if cfg.oracle == "teacher" and cfg.teacher_denominator == "teacher":
            plain = services.score(batch, model="teacher")
        mask = batch.response_mask
        delta = evidence(hinted, plain, mask, cfg.evidence_clip)
        adv = oppo_advantages(
            delta,
            self.outcome_rewards(batch, services),
            batch.group_ids,
            mask,
            prior_eps=cfg.prior_eps,
            decay=cfg.decay,
            terminal=cfg.terminal,
            anchoring=cfg.anchoring,
        )
        if cfg.whiten:
            adv = masked_whiten(adv, mask)
        if cfg.base_mix > 0:
            own = self.host.advantages(batch, services)
            adv = cfg.base_mix * own + (1 - cfg.base_mix) * adv
        trained = self.trained_responses(batch)
        if not bool(trained.all()):
            adv = adv * trained.unsqueeze(-1).to(adv.dtype)
        return adv
