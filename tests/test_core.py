"""Properties of the shared core (``methods/core.py``), each checked against the formula
written out by hand here, on random inputs."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import Tensor

from creditbench.methods.core import (
    AGG_MODES,
    ClipConfig,
    Normalizers,
    aggregate_loss,
    clipped_surrogate,
    group_mean_std,
    group_normalized_scores,
    importance_ratio,
    kl_estimate,
    masked_whiten,
)

seeds = st.integers(0, 2**31 - 1)
small_floats = st.floats(-10, 10, allow_nan=False, width=32)


@st.composite
def grouped_values(draw: st.DrawFn, *, max_size: int = 12) -> tuple[list[float], list[int]]:
    """Values with arbitrary, interleaved group labels (groups of one included)."""
    size = draw(st.integers(1, max_size))
    labels = [draw(st.integers(0, 4)) * 10 + 3 for _ in range(size)]
    values = [draw(small_floats) for _ in range(size)]
    return values, labels


def random_mask(gen: torch.Generator, size: int, width: int) -> Tensor:
    """``[B, T]`` 0/1 mask with holes anywhere and some empty rows."""
    density = torch.rand(size, 1, generator=gen)
    return (torch.rand(size, width, generator=gen) < density).float()


# --------------------------------------------------------------------------------------------
# Group statistics
# --------------------------------------------------------------------------------------------


@given(grouped_values(), st.sampled_from(["unbiased", "population"]))
def test_group_mean_std_matches_a_hand_loop(data, std_kind) -> None:
    values, labels = data
    mean, std, count = group_mean_std(torch.tensor(values), torch.tensor(labels), std_kind=std_kind)
    for i, label in enumerate(labels):
        members = [
            float(torch.tensor(v)) for v, g in zip(values, labels, strict=True) if g == label
        ]
        n = len(members)
        mu = sum(members) / n
        dof = n - 1 if std_kind == "unbiased" else n
        sigma = math.sqrt(sum((x - mu) ** 2 for x in members) / dof) if dof > 0 else 0.0
        assert count[i] == n
        assert mean[i].item() == pytest.approx(mu, rel=1e-5, abs=1e-5)
        assert std[i].item() == pytest.approx(sigma, rel=1e-5, abs=1e-5)


@given(grouped_values(), st.booleans(), st.sampled_from(["zero", "raw"]))
def test_group_normalized_scores_follow_the_formula(data, scale_by_std, singleton) -> None:
    values, labels = data
    rewards, group_ids = torch.tensor(values), torch.tensor(labels)
    eps = 1e-6
    scores = group_normalized_scores(
        rewards, group_ids, scale_by_std=scale_by_std, eps=eps, singleton=singleton
    )
    mean, std, count = group_mean_std(rewards, group_ids)
    for i in range(len(values)):
        if count[i] == 1:
            raw = rewards[i] / (1 + eps) if scale_by_std else rewards[i]
            expected = raw if singleton == "raw" else torch.tensor(0.0)
        else:
            centred = rewards[i] - mean[i]
            expected = centred / (std[i] + eps) if scale_by_std else centred
        torch.testing.assert_close(scores[i], expected, rtol=1e-5, atol=1e-4)
    # Scores of a group of two or more sum to zero.
    for label in set(labels):
        members = group_ids == label
        if members.sum() > 1:
            assert abs(scores[members].sum().item()) < 1e-3 * max(1.0, scores.abs().max().item())


@given(
    st.lists(st.tuples(st.integers(1, 5), small_floats), min_size=1, max_size=5),
    st.booleans(),
    st.sampled_from(["unbiased", "population"]),
)
def test_all_equal_groups_and_singletons_score_exactly_zero(groups, scale_by_std, std_kind):
    sizes = [n for n, _ in groups]
    rewards = torch.tensor([value for n, value in groups for _ in range(n)])
    group_ids = torch.repeat_interleave(torch.arange(len(groups)), torch.tensor(sizes))
    scores = group_normalized_scores(
        rewards, group_ids, scale_by_std=scale_by_std, std_kind=std_kind
    )
    assert (scores == 0).all()


# --------------------------------------------------------------------------------------------
# Loss aggregation
# --------------------------------------------------------------------------------------------


def aggregate_by_hand(loss: Tensor, mask: Tensor, mode: str, horizon: float) -> float:
    rows = [
        (sum(float(x) for x, m in zip(xs, ms, strict=True) if m), int(ms.sum()))
        for xs, ms in zip(loss, mask, strict=True)
    ]
    num_tokens = sum(n for _, n in rows)
    num_seq = sum(1 for _, n in rows if n > 0)
    total = sum(s for s, _ in rows)
    if mode == "token-mean":
        return total / max(num_tokens, 1)
    if mode == "token-sum":
        return total
    if mode == "seq-mean-token-mean":
        return sum(s / n for s, n in rows if n > 0) / max(num_seq, 1)
    if mode == "seq-mean-token-sum":
        return total / max(num_seq, 1)
    assert mode == "seq-mean-token-sum-norm"
    return total / (max(num_seq, 1) * horizon)


@given(
    st.sampled_from(AGG_MODES),
    st.integers(1, 6),
    st.integers(1, 7),
    seeds,
    st.one_of(st.none(), st.integers(1, 64)),
)
def test_aggregation_modes_match_their_formulas(mode, size, width, seed, horizon) -> None:
    gen = torch.Generator().manual_seed(seed)
    loss = torch.randn(size, width, generator=gen, dtype=torch.float64)
    mask = random_mask(gen, size, width).double()
    normalizers = None if horizon is None else Normalizers.of(mask, horizon)
    value = aggregate_loss(loss, mask, mode, normalizers)
    expected = aggregate_by_hand(loss, mask, mode, width if horizon is None else horizon)
    assert value.item() == pytest.approx(expected, rel=1e-9, abs=1e-12)


@given(st.sampled_from(AGG_MODES), st.data(), seeds, st.one_of(st.none(), st.integers(1, 64)))
def test_aggregation_is_invariant_to_micro_batch_splits(mode, data, seed, horizon) -> None:
    size = data.draw(st.integers(1, 8))
    width = data.draw(st.integers(1, 7))
    parts = data.draw(st.lists(st.integers(0, 3), min_size=size, max_size=size))
    gen = torch.Generator().manual_seed(seed)
    loss = torch.randn(size, width, generator=gen, dtype=torch.float64)
    mask = random_mask(gen, size, width).double()
    normalizers = Normalizers.of(mask, horizon)
    full = aggregate_loss(loss, mask, mode, normalizers)
    part_of = torch.tensor(parts)
    split = sum(
        aggregate_loss(loss[part_of == p], mask[part_of == p], mode, normalizers)
        for p in set(parts)
    )
    assert split.item() == pytest.approx(full.item(), rel=1e-9, abs=1e-12)


def test_unknown_names_are_refused_with_the_known_ones() -> None:
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="token-mean"):
        aggregate_loss(x, x, "mean")
    with pytest.raises(ValueError, match="sequence"):
        importance_ratio(x, x, x, "segment")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k3"):
        kl_estimate(x, x, "k4")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Importance ratio and the clipped surrogate
# --------------------------------------------------------------------------------------------

clip_configs = st.builds(
    ClipConfig,
    eps_low=st.floats(0.05, 0.5),
    eps_high=st.floats(0.05, 0.5),
    dual_clip=st.one_of(st.none(), st.floats(1.5, 5.0)),
)
advantages = st.one_of(st.just(0.0), st.integers(-8, 8).map(lambda k: k / 4))


@given(clip_configs, st.lists(st.tuples(st.floats(-2.0, 2.0), advantages), min_size=1, max_size=20))
def test_clip_gradient_is_zero_exactly_where_the_trust_region_says(clip, tokens) -> None:
    bounds = [1 - clip.eps_low, 1 + clip.eps_high] + ([clip.dual_clip] if clip.dual_clip else [])
    # Keep away from the bounds themselves, where the one-sided derivatives disagree.
    tokens = [(r, a) for r, a in tokens if all(abs(math.exp(r) - b) > 1e-6 for b in bounds)]
    log_ratio = torch.tensor([r for r, _ in tokens], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([a for _, a in tokens], dtype=torch.float64)
    ratio = importance_ratio(log_ratio, torch.zeros_like(log_ratio), torch.ones_like(adv))
    loss, was_clipped = clipped_surrogate(ratio, adv, clip)
    (grad,) = torch.autograd.grad(loss.sum(), log_ratio)

    r = ratio.detach()
    outside = ((adv > 0) & (r > 1 + clip.eps_high)) | ((adv < 0) & (r < 1 - clip.eps_low))
    if clip.dual_clip is not None:
        outside |= (adv < 0) & (r > clip.dual_clip)
    zero = outside | (adv == 0)
    assert (grad[zero] == 0).all()
    # Inside the trust region the gradient is the plain -A * rho d(log rho).
    torch.testing.assert_close(grad[~zero], (-adv * r)[~zero])
    assert (grad[~zero] != 0).all()
    assert torch.equal(was_clipped.bool(), outside & (adv != 0))


@given(
    st.sampled_from(AGG_MODES),
    st.sampled_from(["token", "sequence"]),
    clip_configs,
    st.integers(1, 5),
    st.integers(1, 6),
    seeds,
)
def test_on_policy_clip_gradient_is_the_plain_policy_gradient(
    mode, level, clip, size, width, seed
) -> None:
    gen = torch.Generator().manual_seed(seed)
    old = -4.0 * torch.rand(size, width, generator=gen, dtype=torch.float64)
    adv = torch.randn(size, width, generator=gen, dtype=torch.float64)
    mask = random_mask(gen, size, width).double()
    normalizers = Normalizers.of(mask)

    logprobs = old.clone().requires_grad_(True)
    ratio = importance_ratio(logprobs, old, mask, level)
    clipped_loss = aggregate_loss(clipped_surrogate(ratio, adv, clip)[0], mask, mode, normalizers)
    (grad,) = torch.autograd.grad(clipped_loss, logprobs)

    plain = logprobs.detach().clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(aggregate_loss(-adv * plain, mask, mode, normalizers), plain)
    torch.testing.assert_close(grad, expected)


@given(st.integers(1, 5), st.integers(1, 6), seeds)
def test_sequence_ratio_is_exp_of_mean_log_ratio(size, width, seed) -> None:
    gen = torch.Generator().manual_seed(seed)
    old = -4.0 * torch.rand(size, width, generator=gen, dtype=torch.float64)
    logprobs = old + 0.3 * torch.randn(size, width, generator=gen, dtype=torch.float64)
    logprobs.requires_grad_(True)
    mask = random_mask(gen, size, width).double()
    ratio = importance_ratio(logprobs, old, mask, "sequence")

    delta = (logprobs - old).detach()
    for i in range(size):
        n = int(mask[i].sum())
        mean_log_ratio = sum(float(d) for d, m in zip(delta[i], mask[i], strict=True) if m) / max(
            n, 1
        )
        expected = torch.full((width,), math.exp(mean_log_ratio), dtype=torch.float64)
        torch.testing.assert_close(ratio[i].detach(), expected)
    # Its gradient is s_i times each token's own score function (GSPO-token).
    weights = torch.randn(size, width, generator=gen, dtype=torch.float64)
    (grad,) = torch.autograd.grad((ratio * weights).sum(), logprobs)
    torch.testing.assert_close(grad, weights * ratio.detach())

    token = importance_ratio(logprobs, old, mask, "token")
    torch.testing.assert_close(token.detach(), delta.exp())


# --------------------------------------------------------------------------------------------
# KL estimators and whitening
# --------------------------------------------------------------------------------------------


@given(
    st.integers(2, 6).flatmap(
        lambda v: st.tuples(
            st.lists(st.floats(-0.6, 0.6), min_size=v, max_size=v),
            st.lists(st.floats(-0.6, 0.6), min_size=v, max_size=v),
        )
    )
)
def test_k1_and_k3_are_unbiased_and_k3_k2_never_negative(logits) -> None:
    log_p = torch.log_softmax(torch.tensor(logits[0], dtype=torch.float64), -1)
    log_q = torch.log_softmax(torch.tensor(logits[1], dtype=torch.float64), -1)
    p = log_p.exp()
    # Logits within +-0.6 keep |log p - log q| < 2.4, below where verl's clamp of k3 at 10 bites.
    exact = float((p * (log_p - log_q)).sum())  # KL(p || q), sampling from p
    k1, k2, k3 = (kl_estimate(log_p, log_q, kind) for kind in ("k1", "k2", "k3"))
    assert float((p * k1).sum()) == pytest.approx(exact, abs=1e-9)
    assert float((p * k3).sum()) == pytest.approx(exact, abs=1e-9)
    assert exact >= -1e-12
    assert (k3 >= 0).all() and (k2 >= 0).all()
    torch.testing.assert_close(k1, log_p - log_q)
    torch.testing.assert_close(k2, 0.5 * (log_p - log_q) ** 2)


@given(st.lists(st.floats(-5, 5, width=32), min_size=1, max_size=30), st.sampled_from([32, 64]))
def test_k3_is_zero_iff_the_policies_agree(log_ratios, bits) -> None:
    dtype = torch.float32 if bits == 32 else torch.float64
    log_ratio = torch.tensor(log_ratios, dtype=dtype)
    ref = -torch.rand(len(log_ratios), dtype=dtype)
    k3 = kl_estimate(ref + log_ratio, ref, "k3")
    assert (k3 >= 0).all(), "k3 must never be negative, also in float32"
    assert (k3[log_ratio == 0] == 0).all()
    assert (k3[log_ratio.abs() > 1e-3] > 0).all()


@given(st.integers(1, 6), st.integers(2, 8), seeds, st.floats(0.1, 100.0))
def test_masked_whiten_gives_mean_zero_and_unit_unbiased_variance(size, width, seed, scale):
    gen = torch.Generator().manual_seed(seed)
    values = scale * torch.randn(size, width, generator=gen, dtype=torch.float64) + 3.0
    mask = random_mask(gen, size, width).double()
    mask.view(-1)[:2] = 1.0  # at least two positions, or variance is undefined
    white = masked_whiten(values, mask)
    picked = white[mask.bool()]
    assert picked.mean().item() == pytest.approx(0.0, abs=1e-9)
    # var / (var + eps): 1 unless the picked values nearly agree (two draws 0.01 apart give a
    # variance of 5e-5, whitened to 0.9998), which a fixed 1e-4 tolerance failed on
    spread = values[mask.bool()].var(unbiased=True).item()
    assert picked.var(unbiased=True).item() == pytest.approx(spread / (spread + 1e-8), rel=1e-9)
    assert (white[~mask.bool()] == 0).all()
