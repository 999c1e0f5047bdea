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
N0 = 20% of training (120 of 600 policy steps at 4B, 200 of 1,000 at 1.7B), ε_low = 0.2,
ε_high = 0.28, token-mean, no KL, GRPO std unbiased + 1e-6 (EasyR1).

Deviations:
    - ``rewrites``: the task's four rule-based rewrite kinds (template, typo, framing, suffix)
      stand in for the paper's offline GPT-written paraphrase / typo / scenario / irrelevant-
      context rewrites; each keeps every number and the answer.
    - N0 is ``n0_fraction`` = 0.2 of the run's budget (the paper's 120 of 600 and 200 of
      1,000 policy steps): a step gets the penalty while the budget spent before it,
      ``services.budget_fraction``, is below 0.2, so every suite and budget gets the paper's
      share without a step count. The fraction is in the run's budget unit: with
      ``budget.unit=steps`` (optimizer steps) it is the paper's count of policy steps; under a
      FLOP or wall-clock budget the early steps, which pay K extra passes, are dearer than
      later ones, so the first 20% of the budget holds somewhat fewer than 20% of the steps
      (the paper measured the passes at 1.8% of its runtime, Fig. 5). ``n0_steps`` (default
      null) overrides it with a count of trainer steps, one optimizer step each under the
      default ``train.minibatches=1``.
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
from .contract import Reduction
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


def scapo_lambda(lambda0: float, progress: float, n0: float) -> float:
    """λ of a step: λ0 during the first N0 of training, 0 afterwards, i.e. λ0 while the
    step's ``progress`` is below ``n0``. Either both are shares of the run's budget (the
    fraction spent before the step, and N0 = 0.2: with a budget of T policy steps, steps
    n = 1..0.2·T get λ0), or both count steps (the 0-based step index, and N0 in steps)."""
    return lambda0 if progress < n0 else 0.0


@dataclass
class SCAPOConfig(GRPOConfig):
    """SCAPO hyper-parameters (GRPO's advantage fields, loss fields from `LossConfig`).

    Attributes:
        lambda0: weight λ0 of the instability penalty.
        n0_fraction: N0 as the share of the run's budget that gets it (steps starting below
            it); plain GRPO afterwards.
        n0_steps: N0 as a count of trainer steps instead, overriding ``n0_fraction``; null
            (the default) uses the fraction.
        rewrites: the task's prompt variants scored as semifactual rewrites, one pass each.
        zscore_eps: ε of both group z-scores.
        zscore_std: ``population`` or ``unbiased`` std in the group z-scores.
        sign: ``negative`` (the paper), ``all`` or ``positive`` (its ablations).
        zero_variance_groups: ``apply`` the penalty to groups of equal rewards, or ``skip`` them.
    """

    eps_high: float = 0.28
    aggregation: str = "token-mean"
    lambda0: float = 0.01
    n0_fraction: float = 0.2
    n0_steps: int | None = None
    rewrites: tuple[str, ...] = REWRITES
    zscore_eps: float = 1e-6
    zscore_std: str = "population"
    sign: str = "negative"
    zero_variance_groups: str = "apply"

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = [
            ("lambda0", self.lambda0 >= 0.0, "must be >= 0"),
            ("n0_fraction", 0.0 <= self.n0_fraction <= 1.0, "must be in [0, 1]"),
            ("n0_steps", self.n0_steps is None or self.n0_steps >= 0, "must be >= 0 or null"),
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
    # Ã = A + λ·sg(u⁻): λ0 = 0 leaves GRPO's A (the paper's ablation without the penalty)
    reduces_to = (Reduction("grpo", {"lambda0": 0.0}, "SCAPO's Ã with λ0 = 0, §3"),)
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
        if cfg.n0_steps is None:  # N0 as a share of the run's budget (the paper's 20%)
            progress, n0 = services.budget_fraction, cfg.n0_fraction
        else:  # N0 as a count of steps
            progress, n0 = float(services.step), float(cfg.n0_steps)
        lam = scapo_lambda(cfg.lambda0, progress, n0)
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
