"""SCAPO: Semifactual Credit-Augmented Policy Optimization.

Paper: Pan et al., "Semifactual Credit-Augmented Policy Optimization", arXiv 2609.40360 (2026),
§3 (Eq. 1-11).

Key equations (G responses y_1..y_G to a prompt x^(0), K semifactual rewrites x^(1..K) that keep
the problem and its answer, π_old the behaviour policy):

    p_it^(k) = π_old(y_it | x^(k), y_i,<t)                          (teacher-forced, k = 0..K)
    d_it^(k) = |p^(0) - p^(k)| / ((p^(0) + p^(k)) / 2) = 2 tanh(|log p^(0) - log p^(k)| / 2)

    z_x(v)   = (v - mean_x(v)) / (std_x(v) + ε)     x = every valid token of the prompt's group
    u        = z_x( (1/K) Σ_k z_x(-d^(k)) )         u⁻ = min(u, 0)   (relatively unstable tokens)

    Ã_it     = A_i + λ(n) · sg(u⁻_it)               λ(n) = λ0 for policy steps n ≤ N0, else 0
    J(θ)     = 1/Σ_i|y_i| Σ_i Σ_t min(r_it Ã_it, clip(r_it, 1-ε_low, 1+ε_high) Ã_it)

A_i is GRPO's group z-scored reward, r_it the token ratio under the original prompt. Stability
is never rewarded: Ã ≤ A on every token, with equality where u ≥ 0 and after N0 steps, when
SCAPO is plain GRPO and makes no extra passes.

Defaults from the paper (§4.1, App. E.1): K = 4 rewrites (one of each kind), λ0 = 0.01,
ε_low = 0.2, ε_high = 0.28, token-mean, no KL, GRPO std unbiased + 1e-6 (EasyR1).

Deviations:
    - ``rewrites``: the task's four rule-based rewrite kinds (template, typo, framing, suffix)
      stand in for the paper's offline GPT-written paraphrase / typo / scenario / irrelevant-
      context rewrites; each keeps every number and the answer.
    - ``n0_steps`` = 2: the paper's N0 is 20% of training (120 of 600, 200 of 1,000 policy
      steps); 2 is about a third of the 6 steps SCAPO gets in the quick suite (its extra
      passes buy fewer steps than GRPO's 8); use about 15 under the standard suite's 10x
      budget. It counts trainer steps, one optimizer step each under the default
      ``train.minibatches=1``; the paper's two mini-batches per rollout step make its N0 even,
      so its switch also falls on a rollout-step boundary.
    - ``zscore_std`` = population, ``zscore_eps`` = 1e-6 (the paper gives neither); the group
      statistics are taken in float64 so that an exactly constant drift scores exactly 0.
    - ``zero_variance_groups`` = apply: Eq. 9 read literally, so all-right or all-wrong groups
      (A = 0) still get Ã = λu⁻ ≤ 0; ``skip`` leaves them at GRPO's zero.
    - ``sign`` = negative (the paper's); ``all`` (A + λu) and ``positive`` (A + λ max(u, 0))
      are its Table 2 ablations. The "random shuffle" ablation is not offered.
    - ``dual_clip`` stays off: the paper's value cell is unreadable (likely 10.0, which bounds
      only ratios above 10); set ``dual_clip=10.0`` to add it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import CreditMethod, Services, check_fields
from .core import RolloutBatch, broadcast_to_tokens, group_mean_std
from .grpo import GRPOConfig, grpo_scores
from .registry import register_method

REWRITES = ("rewrite_template", "rewrite_typo", "rewrite_framing", "rewrite_suffix")
SIGNS = ("negative", "all", "positive")
STD_KINDS = ("population", "unbiased")
ZERO_VARIANCE = ("apply", "skip")


def token_drift(logp0: Tensor, logpk: Tensor) -> Tensor:
    """Bounded symmetric drift ``2 tanh(|log p0 - log pk| / 2)`` in [0, 2), any shape.

    The tanh form equals ``|p0 - pk| / ((p0 + pk) / 2)`` without underflow; 0 where both
    probabilities are 0 (the 0/0 case the paper leaves open).
    """
    gap = (logp0 - logpk).abs()
    return torch.nan_to_num(2.0 * torch.tanh(gap / 2.0), nan=0.0)


def drift_mask(logp0: Tensor, logpk: Tensor, eos_id: int, threshold: float = 0.8) -> Tensor:
    """The drift filter's masked set M, bool ``[R, V]``, from log p0 ``[R, V]`` and log pk
    ``[K, R, V]`` (§2, App. C): the longest run of highest-drift non-EOS tokens whose p0 mass
    stays <= ``threshold``. Ties keep vocabulary order; EOS is never masked."""
    drift = token_drift(logp0.unsqueeze(0), logpk).mean(0)
    drift[:, eos_id] = -torch.inf  # sorted last and never taken
    order = torch.sort(drift, dim=-1, descending=True, stable=True).indices
    mass = logp0.exp().gather(-1, order).cumsum(-1)
    take = mass <= threshold
    mask = torch.zeros_like(take).scatter(-1, order, take)
    mask[:, eos_id] = False
    return mask


def group_token_zscore(
    values: Tensor,
    mask: Tensor,
    group_ids: Tensor,
    *,
    eps: float = 1e-6,
    std_kind: str = "population",
) -> Tensor:
    """``(v - mean_g) / (std_g + eps)`` with mean and std pooled over every valid token of the
    response's group. ``values``, ``mask`` ``[B, T]``, ``group_ids`` ``[B]``; 0 off the mask."""
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    m = mask.to(torch.float64)
    v = torch.where(mask > 0, values.to(torch.float64), torch.zeros_like(m))

    def per_group(rows: Tensor) -> Tensor:
        return torch.zeros(num_groups, dtype=torch.float64, device=v.device).index_add_(
            0, inverse, rows
        )

    count = per_group(m.sum(-1))
    mean = per_group(v.sum(-1)) / count.clamp(min=1)
    centred = (v - mean[inverse].unsqueeze(-1)) * m
    dof = count - 1 if std_kind == "unbiased" else count
    var = torch.where(dof > 0, per_group((centred**2).sum(-1)) / dof.clamp(min=1), 0.0)
    return (centred / (var.sqrt()[inverse].unsqueeze(-1) + eps)).to(values.dtype)


def stability_scores(
    drifts: Tensor,
    mask: Tensor,
    group_ids: Tensor,
    *,
    eps: float = 1e-6,
    std_kind: str = "population",
) -> Tensor:
    """SCAPO's u ``[B, T]`` from the drifts ``[K, B, T]`` under K rewrites: each kind's -d
    z-scored within the group, averaged over kinds, z-scored again. Higher is more stable."""
    per_kind = [group_token_zscore(-d, mask, group_ids, eps=eps, std_kind=std_kind) for d in drifts]
    return group_token_zscore(
        torch.stack(per_kind).mean(0), mask, group_ids, eps=eps, std_kind=std_kind
    )


def scapo_advantages(
    advantages: Tensor, stability: Tensor, mask: Tensor, lam: float, *, sign: str = "negative"
) -> Tensor:
    """``Ã = A + λ sg(u⁻)`` ``[B, T]`` from GRPO's ``A`` and the stability ``u`` (both ``[B, T]``).

    ``sign``: ``negative`` adds min(u, 0) (the paper), ``all`` u, ``positive`` max(u, 0).
    """
    if sign not in SIGNS:
        raise ValueError(f"sign: must be one of {', '.join(SIGNS)} (got {sign!r})")
    u = stability.detach()
    part = u.clamp(max=0.0) if sign == "negative" else u.clamp(min=0.0) if sign == "positive" else u
    return (advantages + lam * part) * mask


def scapo_lambda(step: int, lambda0: float, n0_steps: int) -> float:
    """λ of the step with 0-based index ``step`` (policy step n = step + 1): λ0 while n ≤ N0."""
    return lambda0 if step < n0_steps else 0.0


@dataclass
class SCAPOConfig(GRPOConfig):
    """SCAPO hyper-parameters (GRPO's advantage fields, loss fields from `LossConfig`).

    Attributes:
        lambda0: weight λ0 of the instability penalty.
        n0_steps: N0, the policy steps that get it; plain GRPO afterwards.
        rewrites: the task's prompt variants scored as semifactual rewrites, one pass each.
        zscore_eps: ε of both group z-scores.
        zscore_std: ``population`` or ``unbiased`` std in the group z-scores.
        sign: ``negative`` (the paper), ``all`` or ``positive`` (its ablations).
        zero_variance_groups: ``apply`` the penalty to groups of equal rewards, or ``skip`` them.
    """

    eps_high: float = 0.28
    aggregation: str = "token-mean"
    lambda0: float = 0.01
    n0_steps: int = 2
    rewrites: tuple[str, ...] = REWRITES
    zscore_eps: float = 1e-6
    zscore_std: str = "population"
    sign: str = "negative"
    zero_variance_groups: str = "apply"

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = [
            ("lambda0", self.lambda0 >= 0.0, "must be >= 0"),
            ("n0_steps", self.n0_steps >= 0, "must be >= 0"),
            ("rewrites", len(self.rewrites) >= 1, "must name at least one prompt variant"),
            ("rewrites", len(set(self.rewrites)) == len(self.rewrites), "must not repeat"),
            ("zscore_eps", self.zscore_eps > 0.0, "must be > 0"),
            ("zscore_std", self.zscore_std in STD_KINDS, "must be population or unbiased"),
            ("sign", self.sign in SIGNS, f"must be one of {', '.join(SIGNS)}"),
            (
                "zero_variance_groups",
                self.zero_variance_groups in ZERO_VARIANCE,
                "must be apply or skip",
            ),
        ]
        check_fields(self, checks)


@register_method("scapo")
class SCAPO(CreditMethod):
    summary = "GRPO minus a small penalty on tokens whose probability drifts under prompt rewrites"
    paper = "Semifactual Credit-Augmented Policy Optimization (arXiv 2609.40360)"
    Config = SCAPOConfig
    config: SCAPOConfig
    decoding_variants = REWRITES  # the drift filter of §2 (``creditbench eval --decode-with``)

    def decoding_mask(self, logp0: Tensor, logpk: Tensor, eos_id: int, threshold: float) -> Tensor:
        return drift_mask(logp0, logpk, eos_id, threshold)

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        cfg = self.config
        mask = batch.response_mask
        scores = grpo_scores(batch.rewards, batch.group_ids, cfg)
        base = broadcast_to_tokens(scores, mask)
        if services is None:
            raise ValueError("scapo: needs the harness services (scoring under the rewrites)")
        lam = scapo_lambda(services.step, cfg.lambda0, cfg.n0_steps)
        if lam == 0.0:
            return base
        # p0 is the behaviour policy's own pass; each rewrite costs one teacher-forced pass.
        drifts = torch.stack(
            [
                token_drift(batch.old_logprobs, services.score(batch, services.variant(batch, k)))
                for k in cfg.rewrites
            ]
        )
        u = stability_scores(
            drifts, mask, batch.group_ids, eps=cfg.zscore_eps, std_kind=cfg.zscore_std
        )
        if cfg.zero_variance_groups == "skip":
            _, spread, _ = group_mean_std(batch.rewards, batch.group_ids, std_kind="population")
            u = u * (spread > 0).unsqueeze(-1).to(u.dtype)
        return scapo_advantages(base, u, mask, lam, sign=cfg.sign)
