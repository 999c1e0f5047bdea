"""The shared core every method builds on: the rollout batch, group statistics, loss
aggregation, the PPO-clip surrogate (token or sequence ratio), and the KL estimators.

Everything here is a plain function on tensors and imports nothing beyond torch, so a method
file (which imports only this module) can be copied into any trainer.

Shapes: ``B`` responses in the batch, ``T`` padded response length. Masks are ``{0, 1}`` floats.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Literal

import torch
from torch import Tensor

StdKind = Literal["unbiased", "population"]
AggMode = Literal[
    "token-mean",
    "token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
]
AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)


# --------------------------------------------------------------------------------------------
# The batch
# --------------------------------------------------------------------------------------------


@dataclass
class RolloutBatch:
    """A set of sampled responses, G per prompt.

    Attributes:
        prompt_ids: ``[B, P]`` prompt token ids, left-padded.
        prompt_mask: ``[B, P]`` 1 on real prompt tokens.
        response_ids: ``[B, T]`` response token ids, right-padded.
        response_mask: ``[B, T]`` 1 on tokens that carry loss. Usually the response's own
            tokens; a method may zero a prefix (tokens kept as context but not trained on).
        group_ids: ``[B]`` int64; responses to the same prompt share a group id.
        rewards: ``[B]`` float, the scalar outcome reward of each response.
        old_logprobs: ``[B, T]`` log-probabilities of the response tokens under the behaviour
            policy that sampled them.
        ref_logprobs: ``[B, T]`` under the frozen reference policy, or ``None``.
        step_ids: ``[B, T]`` int64 index of the reasoning step each token belongs to
            (``-1`` where none), or ``None``.
        truncated: ``[B]`` bool, the response hit the length limit, or ``None``.
        extras: method-specific tensors (for example teacher log-probs), each ``[B, ...]``.
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    response_ids: Tensor
    response_mask: Tensor
    group_ids: Tensor
    rewards: Tensor
    old_logprobs: Tensor
    ref_logprobs: Tensor | None = None
    step_ids: Tensor | None = None
    truncated: Tensor | None = None
    extras: dict[str, Tensor] | None = None

    @property
    def size(self) -> int:
        return int(self.response_ids.shape[0])

    def extra(self, key: str) -> Tensor:
        """The ``extras`` tensor ``key`` (see ``methods.contract``); KeyError if absent."""
        if self.extras is None or key not in self.extras:
            raise KeyError(f"the batch carries no extras[{key!r}]")
        return self.extras[key]

    @property
    def response_lengths(self) -> Tensor:
        """``[B]`` number of loss-carrying tokens per response."""
        return self.response_mask.sum(dim=-1)

    def select(self, index: Tensor) -> RolloutBatch:
        """The rows ``index`` (a ``[B']`` long tensor or ``[B]`` bool mask) of every field."""

        def take(value: Any) -> Any:
            if value is None:
                return None
            if isinstance(value, dict):
                return {key: take(item) for key, item in value.items()}
            return value[index]

        return replace(self, **{f.name: take(getattr(self, f.name)) for f in fields(self)})


def _pad_width(value: Tensor, width: int, fill: float | int, *, left: bool = False) -> Tensor:
    """Pad dim 1 of ``value`` ``[B, W, ...]`` with ``fill`` up to ``width``."""
    missing = width - value.shape[1]
    if missing <= 0:
        return value
    pad = value.new_full((value.shape[0], missing, *value.shape[2:]), fill)
    return torch.cat([pad, value] if left else [value, pad], dim=1)


def concat_batches(batches: list[RolloutBatch]) -> RolloutBatch:
    """Stack several rollout batches into one (DAPO's refill of a filtered batch).

    Prompts are left-padded and response tensors right-padded to the widest batch (ids and
    masks with 0, ``step_ids`` with -1). The group ids of each batch after the first are
    shifted past every id seen so far, so groups from different batches never merge. Extras
    must carry the same keys in every batch; those of two or more dimensions are taken to be
    response-aligned ``[B, T, ...]`` and right-padded with 0. ``truncated`` missing from some
    batches reads as False there.
    """
    if not batches:
        raise ValueError("concat_batches: needs at least one batch")
    if len(batches) == 1:
        return batches[0]
    prompt_width = max(b.prompt_ids.shape[1] for b in batches)
    width = max(b.response_ids.shape[1] for b in batches)

    def stack(name: str, fill: float | int, left: bool = False) -> Tensor:
        values = [getattr(b, name) for b in batches]
        target = prompt_width if left else width
        return torch.cat([_pad_width(v, target, fill, left=left) for v in values])

    def stack_optional(name: str, fill: float | int) -> Tensor | None:
        present = [getattr(b, name) is not None for b in batches]
        if not any(present):
            return None
        if not all(present):
            raise ValueError(f"concat_batches: {name} is set in some batches and not in others")
        return stack(name, fill)

    group_ids, next_free = [], 0
    for index, b in enumerate(batches):
        ids = b.group_ids
        if index > 0 and ids.numel():
            ids = ids - ids.min() + next_free
        if ids.numel():
            next_free = max(next_free, int(ids.max()) + 1)
        group_ids.append(ids)

    truncated = None
    if any(b.truncated is not None for b in batches):
        truncated = torch.cat(
            [
                b.truncated
                if b.truncated is not None
                else torch.zeros(b.size, dtype=torch.bool, device=b.rewards.device)
                for b in batches
            ]
        )

    extras = None
    if any(b.extras for b in batches):
        keys = set(batches[0].extras or {})
        if any(set(b.extras or {}) != keys for b in batches):
            raise ValueError("concat_batches: every batch must carry the same extras keys")
        extras = {
            key: torch.cat(
                [
                    _pad_width(v, width, 0) if v.dim() >= 2 else v
                    for v in (b.extras[key] for b in batches)  # type: ignore[index]
                ]
            )
            for key in sorted(keys)
        }

    return RolloutBatch(
        prompt_ids=stack("prompt_ids", 0, left=True),
        prompt_mask=stack("prompt_mask", 0, left=True),
        response_ids=stack("response_ids", 0),
        response_mask=stack("response_mask", 0),
        group_ids=torch.cat(group_ids),
        rewards=torch.cat([b.rewards for b in batches]),
        old_logprobs=stack("old_logprobs", 0.0),
        ref_logprobs=stack_optional("ref_logprobs", 0.0),
        step_ids=stack_optional("step_ids", -1),
        truncated=truncated,
        extras=extras,
    )


# --------------------------------------------------------------------------------------------
# Group statistics
# --------------------------------------------------------------------------------------------


def group_mean_std(
    values: Tensor,
    group_ids: Tensor,
    *,
    std_kind: StdKind = "unbiased",
) -> tuple[Tensor, Tensor, Tensor]:
    """Mean, standard deviation and size of each response's group, broadcast back to ``[B]``.

    Args:
        values: ``[B]`` one scalar per response (usually the reward).
        group_ids: ``[B]`` integer group labels; members need not be adjacent.
        std_kind: ``"unbiased"`` divides by ``n - 1`` (``torch.std``, verl, TRL);
            ``"population"`` by ``n``. A group of one has standard deviation 0 under both.

    Returns:
        ``(mean, std, count)``, each ``[B]``. Computed in float64 and cast back, so that a
        group of equal values has a standard deviation of exactly zero.
    """
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    v = values.to(torch.float64)
    count = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, inverse, torch.ones_like(v))
    total = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, inverse, v)
    mean = total / count
    centred = v - mean[inverse]
    sq = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, inverse, centred**2)
    dof = count - 1 if std_kind == "unbiased" else count
    var = torch.where(dof > 0, sq / dof.clamp(min=1), torch.zeros_like(sq))
    std = var.sqrt()
    dtype = values.dtype if values.is_floating_point() else torch.float32
    return mean[inverse].to(dtype), std[inverse].to(dtype), count[inverse].to(dtype)


def rows_of_mixed_groups(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """``[B]`` bool: True where the group's rewards are not all equal (the ``mixed_groups``
    rule of `contract.GroupFilter`, DAPO's dynamic sampling). A group of equal rewards (a group
    of one too) has zero advantage, so no gradient; DAPO drops it. The spread is computed in
    float64: equal rewards give exactly 0."""
    _, std, _ = group_mean_std(rewards, group_ids, std_kind="population")
    return std > 0


def group_normalized_scores(
    rewards: Tensor,
    group_ids: Tensor,
    *,
    scale_by_std: bool = True,
    std_kind: StdKind = "unbiased",
    eps: float = 1e-6,
    singleton: Literal["zero", "raw"] = "zero",
) -> Tensor:
    """Group-relative score ``(r - mean_g) / (std_g + eps)``, or ``r - mean_g`` unscaled. ``[B]``.

    A group whose rewards are all equal scores exactly 0. A group of one scores 0 by default
    (there is nothing to compare with; TRL's convention). ``singleton="raw"`` reproduces
    verl's convention, where a lone response keeps its raw reward ``r / (1 + eps)``.
    """
    mean, std, count = group_mean_std(rewards, group_ids, std_kind=std_kind)
    centred = rewards - mean
    scores = centred / (std + eps) if scale_by_std else centred
    if singleton == "raw":
        lone = rewards / (1 + eps) if scale_by_std else rewards
        scores = torch.where(count == 1, lone, scores)
    else:
        scores = torch.where(count == 1, torch.zeros_like(scores), scores)
    return scores


def broadcast_to_tokens(scores: Tensor, mask: Tensor) -> Tensor:
    """Give every response token its response's score: ``[B]`` and ``[B, T]`` mask to ``[B, T]``."""
    return scores.unsqueeze(-1).to(mask.dtype) * mask


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``values`` over positions where ``mask`` is 1 (0 where the mask is empty)."""
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp(min=1)
    return (values * mask).sum(dim) / mask.sum(dim).clamp(min=1)


def masked_whiten(values: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """``(x - mean) / sqrt(var + eps)`` over the masked positions of the whole batch, unbiased
    variance (verl's ``masked_whiten``); masked positions come out 0.

    Computed in float64 and cast back: when the values barely vary around a large mean, the
    division by their small spread would otherwise turn float32 rounding, which depends on
    the order of the rows, into visible differences.
    """
    v, m = values.to(torch.float64), mask.to(torch.float64)
    n = m.sum()
    mean = (v * m).sum() / n.clamp(min=1)
    var = (((v - mean) ** 2) * m).sum() / (n - 1).clamp(min=1)
    return ((v - mean) * torch.rsqrt(var + eps) * m).to(values.dtype)


# --------------------------------------------------------------------------------------------
# Loss aggregation
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Normalizers:
    """Global counts for loss aggregation, taken over the whole optimisation batch.

    Passing the counts of the whole batch to every micro-batch makes the sum of the
    micro-batch losses equal to the loss of the whole batch, however it is split.

    Attributes:
        num_tokens: loss-carrying tokens in the batch (token-mean).
        num_sequences: responses with at least one loss-carrying token (seq-mean-*).
        horizon: the constant normaliser of ``seq-mean-token-sum-norm`` (Dr. GRPO's L_max).
    """

    num_tokens: float
    num_sequences: float
    horizon: float

    @staticmethod
    def of(mask: Tensor, horizon: float | None = None) -> Normalizers:
        """The counts of ``mask`` ``[B, T]``; ``horizon`` defaults to its padded width T."""
        return Normalizers(
            num_tokens=float(mask.sum()),
            num_sequences=float((mask.sum(-1) > 0).sum()),
            horizon=float(mask.shape[-1] if horizon is None else horizon),
        )


def aggregate_loss(
    loss: Tensor, mask: Tensor, mode: str, normalizers: Normalizers | None = None
) -> Tensor:
    """Reduce a per-token loss ``[B, T]`` to a scalar.

    With ``S_i = sum_t m_it l_it`` and ``n_i = sum_t m_it``:

    - ``token-mean``: ``sum_i S_i / N_tokens`` (DAPO)
    - ``token-sum``: ``sum_i S_i``
    - ``seq-mean-token-mean``: ``sum_i (S_i / n_i) / N_seq`` (GRPO as published)
    - ``seq-mean-token-sum``: ``sum_i S_i / N_seq``
    - ``seq-mean-token-sum-norm``: ``sum_i S_i / (N_seq * L)`` with a constant ``L`` (Dr. GRPO)

    ``N_tokens``, ``N_seq`` and ``L`` come from ``normalizers`` (the whole batch) or, when it
    is None, from ``mask`` itself.
    """
    if normalizers is None:
        normalizers = Normalizers.of(mask)
    per_seq = (loss * mask).sum(-1)
    if mode == "token-mean":
        return per_seq.sum() / max(normalizers.num_tokens, 1.0)
    if mode == "token-sum":
        return per_seq.sum()
    num_seq = max(normalizers.num_sequences, 1.0)
    if mode == "seq-mean-token-mean":
        lengths = mask.sum(-1)
        return (per_seq / lengths.clamp(min=1)).sum() / num_seq
    if mode == "seq-mean-token-sum":
        return per_seq.sum() / num_seq
    if mode == "seq-mean-token-sum-norm":
        return per_seq.sum() / (num_seq * normalizers.horizon)
    raise ValueError(f"unknown loss aggregation mode {mode!r}; known: {', '.join(AGG_MODES)}")


# --------------------------------------------------------------------------------------------
# Importance ratios and the clipped surrogate
# --------------------------------------------------------------------------------------------


def sequence_log_ratio(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor) -> Tensor:
    """GSPO's per-sequence log-ratio ``(1/|y_i|) sum_t (log pi - log pi_old)``, ``[B]``."""
    return masked_mean(logprobs - old_logprobs, mask, dim=-1)


def importance_ratio(
    logprobs: Tensor,
    old_logprobs: Tensor,
    mask: Tensor,
    level: Literal["token", "sequence"] = "token",
) -> Tensor:
    """The importance ratio for every token, ``[B, T]``.

    ``token``: ``rho_it = pi(y_it) / pi_old(y_it)``.
    ``sequence`` (GSPO-token): ``s_it = sg[s_i] * pi(y_it) / sg[pi(y_it)]`` with
    ``s_i = exp(mean_t log rho_it)``. Its value is ``s_i`` on every token, and its gradient
    is ``s_i`` times the token's score function, so a per-token advantage can ride on it.
    """
    if level == "token":
        return torch.exp((logprobs - old_logprobs).clamp(-20.0, 20.0))
    if level == "sequence":
        seq = sequence_log_ratio(logprobs, old_logprobs, mask).clamp(max=10.0)
        return torch.exp(seq.detach().unsqueeze(-1) + logprobs - logprobs.detach())
    raise ValueError(f"unknown ratio level {level!r}; known: token, sequence")


@dataclass(frozen=True)
class ClipConfig:
    """Trust region of the clipped surrogate.

    Attributes:
        eps_low: lower clip, ratio floor ``1 - eps_low``.
        eps_high: upper clip, ratio ceiling ``1 + eps_high`` (DAPO's clip-higher: 0.28).
        dual_clip: ``c > 1`` bounds the loss of negative-advantage tokens at ``-c * A``
            (Ye et al., 2020); None turns it off.
    """

    eps_low: float = 0.2
    eps_high: float = 0.2
    dual_clip: float | None = None


def clipped_surrogate(ratio: Tensor, advantages: Tensor, clip: ClipConfig) -> tuple[Tensor, Tensor]:
    """Per-token PPO-clip loss (to minimise) and the clipped indicator, both ``[B, T]``.

    ``L = max(-A * rho, -A * clip(rho, 1 - eps_low, 1 + eps_high))``, and with dual-clip
    ``L = min(L, -c * A)`` where ``A < 0``.
    """
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip.eps_low, 1.0 + clip.eps_high)
    loss = torch.maximum(unclipped, clipped)
    was_clipped = (clipped > unclipped).to(ratio.dtype)
    if clip.dual_clip is not None:
        floor = -advantages * clip.dual_clip
        dual = (advantages < 0) & (loss > floor)
        loss = torch.where(advantages < 0, torch.minimum(loss, floor), loss)
        was_clipped = torch.maximum(was_clipped, dual.to(ratio.dtype))
    return loss, was_clipped


# --------------------------------------------------------------------------------------------
# KL to a reference policy
# --------------------------------------------------------------------------------------------


def kl_estimate(
    logprobs: Tensor, ref_logprobs: Tensor, kind: Literal["k1", "k2", "k3"] = "k3"
) -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi, ``[B, T]`` (Schulman, 2020).

    ``k1 = log pi - log pi_ref``; ``k2 = (log pi - log pi_ref)^2 / 2``;
    ``k3 = exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1``, unbiased and never negative
    (the "low-variance KL" of GRPO); clamped to [-10, 10] as verl does.
    """
    log_ratio = logprobs - ref_logprobs
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return 0.5 * log_ratio**2
    if kind == "k3":
        neg = (-log_ratio).clamp(-20.0, 20.0)
        # expm1: exp(x) - 1 - x in float32 rounds to small negatives for |x| < 1e-3.
        return (torch.expm1(neg) - neg).clamp(-10.0, 10.0)
    raise ValueError(f"unknown KL estimator {kind!r}; known: k1, k2, k3")
