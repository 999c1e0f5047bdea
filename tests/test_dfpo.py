"""DFPO (arXiv 2604.13088): the weight transforms, and token gradient cancellation where GSPO's
sequence weights and sign-dependent clipping break it.

The cancellation checks run on the tabular group of :mod:`tabular` (every response starts with
the same token in the same context) and read the exact gradient on the shared context, and the
harness's diagnostic (:mod:`creditbench.harness.diagnostics.cancellation`) beside it.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import Tensor

from creditbench.harness.diagnostics.cancellation import loss_cancellation
from creditbench.methods.core import Normalizers, RolloutBatch
from creditbench.methods.dfpo import (
    DFPOConfig,
    adv_orthogonal,
    dfpo_weights,
    group_min,
    sequence_weights,
)
from creditbench.methods.grpo import grpo_advantages
from creditbench.methods.registry import get_method

from fakes import FakeServices
from strategies import rollout_batches
from tabular import LossBuilder, shared_token_gradient, tabular_group

DFPO = get_method("dfpo")
UNEQUAL = [5, 9, 13, 20]
EQUAL = [10, 10, 10, 10]
REWARDS = [1.0, 0.0, 1.0, 0.0]
DRIFT = 0.05
ZERO = 1e-9  # cancelled gradients are ~1e-16 in float64
NOT_ZERO = 1e-5


def loss_of(name: str, **overrides) -> LossBuilder:
    method = get_method(name)(**overrides)
    return lambda logprobs, batch: method.loss(logprobs, batch, method.advantages(batch))[0]


def shared(build: LossBuilder, lengths=UNEQUAL, **kw) -> float:
    return float(shared_token_gradient(build, lengths, REWARDS, **kw).abs().max())


def residual(build: LossBuilder, lengths=UNEQUAL, **kw) -> float:
    group = tabular_group(lengths, REWARDS, **kw)
    b = group.batch
    diag = loss_cancellation(
        lambda lp: build(lp, b),
        group.token_logprobs().detach(),
        grpo_advantages(b.rewards, b.response_mask, b.group_ids),
        b.response_ids,
        b.response_mask,
        b.group_ids,
    )
    return diag["cancel_residual"]


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [("transform", "orth"), ("weight_source", "stale"), ("clip", True), ("eps_low", 1.5)],
)
def test_bad_config_names_the_field(field, value) -> None:
    with pytest.raises(ValueError, match=rf"^{field}: .*\(got {value!r}\)"):
        DFPOConfig(**{field: value})


# --------------------------------------------------------------------------------------------
# The transforms (Eq. 17, Eq. 18)
# --------------------------------------------------------------------------------------------

groups = st.lists(st.integers(0, 3), min_size=1, max_size=10)


@given(labels=groups, seed=st.integers(0, 2**31 - 1))
def test_transforms(labels, seed) -> None:
    gen = torch.Generator().manual_seed(seed)
    group_ids = torch.tensor(labels) * 7  # ids are names, not indices
    w = torch.exp(0.3 * torch.randn(len(labels), generator=gen, dtype=torch.float64))
    a = torch.randn(len(labels), generator=gen, dtype=torch.float64)
    a[torch.rand(len(labels), generator=gen) < 0.2] = 0.0

    low = group_min(w, group_ids)
    orth = adv_orthogonal(w, a, group_ids)
    for label in group_ids.unique():
        rows = group_ids == label
        assert (low[rows] == w[rows].min()).all(), "Min-Replace: the group minimum everywhere"
        assert float((a[rows] * orth[rows]).sum()) == pytest.approx(0.0, abs=1e-10)
        if (a[rows] == 0).all():
            assert torch.equal(orth[rows], w[rows]), "no advantage: weights kept"
    # The projection moves weights along the advantages only, and a second one does nothing.
    torch.testing.assert_close(adv_orthogonal(orth, a, group_ids), orth)
    moved = orth - w
    for label in group_ids.unique():
        rows = group_ids == label
        if (a[rows] != 0).any():
            scale = moved[rows] @ a[rows] / (a[rows] @ a[rows])
            torch.testing.assert_close(moved[rows], scale * a[rows])
    assert torch.equal(dfpo_weights(w, a, group_ids, "none"), w)


@pytest.mark.parametrize("transform", ["min_replace", "adv_orthogonal", "none"])
def test_weights_carry_no_gradient(transform) -> None:
    """The stop-gradient: the loss's gradient is -w~ A grad log pi / N and nothing else."""
    group = tabular_group(UNEQUAL, REWARDS, drift=DRIFT)
    b = group.batch
    method = DFPO(transform=transform, weight_source="current")
    logprobs = group.token_logprobs().detach().requires_grad_(True)
    weights = dfpo_weights(
        sequence_weights(logprobs, b.old_logprobs, b.response_mask),
        grpo_advantages(b.rewards, b.response_mask, b.group_ids)[:, 0],
        b.group_ids,
        transform,
    )
    assert not weights.requires_grad
    adv = method.advantages(b)
    loss, stats = method.loss(logprobs, b, adv)
    (grad,) = torch.autograd.grad(loss, logprobs)
    expected = -adv * weights.unsqueeze(-1) * b.response_mask / b.response_mask.sum()
    torch.testing.assert_close(grad, expected)
    assert stats["dfpo_weight"] == pytest.approx(float(weights.mean()))
    if transform == "min_replace":
        assert (weights == weights[0]).all() and (weights < 1).any()


# --------------------------------------------------------------------------------------------
# Token gradient cancellation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("transform", ["min_replace", "adv_orthogonal"])
@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("lengths", [UNEQUAL, EQUAL])
def test_dfpo_cancels_off_policy_where_raw_sequence_weights_do_not(
    transform, aggregation, lengths
) -> None:
    for seed in range(3):
        kw = dict(drift=DRIFT, seed=seed)
        options = dict(weight_source="current", aggregation=aggregation)
        dfpo = loss_of("dfpo", transform=transform, **options)
        assert shared(dfpo, lengths, **kw) < ZERO
        assert residual(dfpo, lengths, **kw) < ZERO
        raw = loss_of("dfpo", transform="none", **options)
        assert shared(raw, lengths, **kw) > NOT_ZERO
        assert residual(raw, lengths, **kw) > NOT_ZERO


def test_gspo_breaks_cancellation_off_policy_where_dfpo_keeps_it() -> None:
    gspo = loss_of("gspo", eps_low=0.9, eps_high=9.0)  # wide clip: coupling alone
    dfpo = loss_of("dfpo", weight_source="current", aggregation="seq-mean-token-mean")
    # Equal lengths: GSPO's 1/|y_i| is group-constant, so sequence coupling is the only cause.
    assert shared(gspo, EQUAL) < ZERO
    assert shared(gspo, EQUAL, drift=DRIFT) > NOT_ZERO
    assert shared(dfpo, EQUAL, drift=DRIFT) < ZERO


def test_min_replace_needs_a_group_constant_normaliser() -> None:
    """With GSPO's 1/|y_i| and unequal lengths the coefficient differs again (notes §1.6)."""
    per_length = loss_of("dfpo", weight_source="current", aggregation="seq-mean-token-mean")
    assert shared(per_length, UNEQUAL, drift=DRIFT) > NOT_ZERO
    assert residual(per_length, UNEQUAL, drift=DRIFT) > NOT_ZERO


@pytest.mark.parametrize("weight_source", ["rollout", "current"])
@pytest.mark.parametrize("push", [1.5, -1.5])
def test_clip_free_dfpo_cancels_where_a_sign_dependent_clip_does_not(weight_source, push) -> None:
    dapo_like = loss_of("grpo", aggregation="token-mean", eps_high=0.28)
    assert shared(dapo_like, shared_drift=push) > NOT_ZERO
    dfpo = loss_of("dfpo", weight_source=weight_source)
    assert shared(dfpo, shared_drift=push, drift=DRIFT) < ZERO
    assert residual(dfpo, shared_drift=push, drift=DRIFT) < ZERO


# --------------------------------------------------------------------------------------------
# The default (weights at the rollout) and micro-batches
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("transform", ["min_replace", "adv_orthogonal", "none"])
@given(batch=rollout_batches())
def test_rollout_weights_are_one_and_the_advantage_is_grpos(transform, batch) -> None:
    adv = DFPO(transform=transform).advantages(batch, FakeServices())
    expected = grpo_advantages(batch.rewards, batch.response_mask, batch.group_ids)
    torch.testing.assert_close(adv, expected, rtol=1e-5, atol=1e-6)


@given(batch=rollout_batches(), seed=st.integers(0, 2**31 - 1))
def test_current_weights_on_policy_equal_the_default(batch, seed) -> None:
    rollout, current = DFPO(), DFPO(weight_source="current")
    logprobs = batch.old_logprobs.clone().requires_grad_(True)
    adv = rollout.advantages(batch)
    loss_a, _ = rollout.loss(logprobs, batch, adv)
    loss_b, _ = current.loss(logprobs, batch, current.advantages(batch))
    (grad_a,) = torch.autograd.grad(loss_a, logprobs)
    (grad_b,) = torch.autograd.grad(loss_b, logprobs)
    torch.testing.assert_close(grad_b, grad_a, rtol=1e-5, atol=1e-7)


def split_whole_groups(batch: RolloutBatch, pick: list[bool]) -> Tensor:
    labels = batch.group_ids.unique()
    chosen = labels[torch.tensor(pick[: len(labels)] + [False] * (len(labels) - len(pick)))]
    return torch.isin(batch.group_ids, chosen)


@pytest.mark.parametrize("transform", ["min_replace", "adv_orthogonal"])
@given(batch=rollout_batches(), pick=st.lists(st.booleans(), max_size=3), seed=st.integers(0, 99))
def test_current_weights_add_up_over_micro_batches_of_whole_groups(
    transform, batch, pick, seed
) -> None:
    method = DFPO(transform=transform, weight_source="current")
    gen = torch.Generator().manual_seed(seed)
    drift = 0.1 * torch.randn(batch.old_logprobs.shape, generator=gen)
    logprobs = (batch.old_logprobs + drift).requires_grad_(True)
    adv = method.advantages(batch)
    whole, _ = method.loss(logprobs, batch, adv)
    (grad_whole,) = torch.autograd.grad(whole, logprobs)
    first = split_whole_groups(batch, pick)
    normalizers = Normalizers.of(batch.response_mask)
    total, grad_parts = torch.zeros(()), torch.zeros_like(logprobs)
    for part in (first, ~first):
        if part.any():
            loss, _ = method.loss(logprobs[part], batch.select(part), adv[part], normalizers)
            total = total + loss.detach()
            grad_parts += torch.autograd.grad(loss, logprobs)[0]
    torch.testing.assert_close(total, whole.detach(), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(grad_parts, grad_whole, rtol=1e-4, atol=1e-7)


def test_kl_term_is_added_when_asked() -> None:
    group = tabular_group(UNEQUAL, REWARDS, drift=DRIFT)
    b = group.batch
    b.ref_logprobs = b.old_logprobs - 0.1 * b.response_mask
    logprobs = group.token_logprobs().detach()
    plain, _ = DFPO().loss(logprobs, b, DFPO().advantages(b))
    with_kl, stats = DFPO(kl_coef=0.5).loss(logprobs, b, DFPO().advantages(b))
    assert stats["kl_ref"] > 0
    assert float(with_kl) == pytest.approx(float(plain) + 0.5 * stats["kl_ref"])
