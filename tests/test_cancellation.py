"""Token gradient cancellation on a tiny tabular softmax policy.

Every response of a group starts with the same token in the same context (context 0,
action 0); after it each response has contexts of its own. The group-relative advantages sum
to zero, so the shared token's gradient cancels exactly when every response gives that token
the same coefficient (notes on arXiv 2604.13088, §1.3 and §1.6):

- token-mean and the constant normaliser of Dr. GRPO cancel, on- and off-policy, as long as
  no clip is active;
- GRPO's 1/|o_i| does not cancel when lengths differ (it does when they are equal);
- GSPO's sequence ratio s_i differs between responses off-policy, so it does not cancel;
- an active clip keeps the gradient of only one sign of advantage, so it does not cancel.

:func:`tabular.shared_token_gradient` gives the gradient on the shared context's logits of
any loss built from a batch. The second half checks the harness's diagnostic
(:mod:`creditbench.harness.diagnostics.cancellation`), which reads the same quantity off the loss's
gradient on token log-probs, against it.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import Tensor

from creditbench.harness.diagnostics.cancellation import (
    CANCEL_KEYS,
    cancellation_diagnostics,
    logprob_gradient,
    loss_cancellation,
    prefix_classes,
)
from creditbench.methods.core import (
    ClipConfig,
    Normalizers,
    RolloutBatch,
    aggregate_loss,
    clipped_surrogate,
    importance_ratio,
)
from creditbench.methods.grpo import grpo_advantages
from creditbench.methods.registry import get_method, list_methods

from fakes import FakeServices
from strategies import rollout_batches
from tabular import VOCAB, LossBuilder, shared_token_gradient, tabular_group

DAPO_CLIP = ClipConfig(eps_low=0.2, eps_high=0.28)


def surrogate(
    aggregation: str,
    *,
    ratio_level: str = "token",
    clip: ClipConfig = DAPO_CLIP,
    scale_by_std: bool = True,
    horizon: float = 64.0,
) -> LossBuilder:
    """The PPO-clip loss with GRPO advantages, built from the core functions."""

    def build(logprobs: Tensor, batch: RolloutBatch) -> Tensor:
        mask = batch.response_mask
        adv = grpo_advantages(batch.rewards, mask, batch.group_ids, scale_by_std=scale_by_std)
        ratio = importance_ratio(logprobs, batch.old_logprobs, mask, ratio_level)  # type: ignore[arg-type]
        per_token, _ = clipped_surrogate(ratio, adv, clip)
        return aggregate_loss(per_token, mask, aggregation, Normalizers.of(mask, horizon))

    return build


UNEQUAL = [5, 9, 13, 20]
EQUAL = [10, 10, 10, 10]
REWARDS = [1.0, 0.0, 1.0, 0.0]
CANCELLING = ["token-mean", "seq-mean-token-sum-norm"]
SMALL_DRIFT = 0.05  # moves every ratio by a few percent: no clip is active
ZERO = 1e-6  # cancelled gradients are ~1e-16 in float64
NOT_ZERO = 1e-5  # uncancelled ones here are 3e-4 and up


def size_of(grad: Tensor) -> float:
    return float(grad.abs().max())


@pytest.mark.parametrize("aggregation", CANCELLING)
@pytest.mark.parametrize("drift", [0.0, SMALL_DRIFT])
@pytest.mark.parametrize("scale_by_std", [True, False])
def test_group_constant_normalisers_cancel(aggregation, drift, scale_by_std) -> None:
    for seed in range(3):
        loss = surrogate(aggregation, scale_by_std=scale_by_std)
        grad = shared_token_gradient(loss, UNEQUAL, REWARDS, drift=drift, seed=seed)
        assert size_of(grad) < ZERO


@pytest.mark.parametrize("drift", [0.0, SMALL_DRIFT])
def test_per_response_length_normaliser_does_not_cancel(drift) -> None:
    loss = surrogate("seq-mean-token-mean")
    assert size_of(shared_token_gradient(loss, UNEQUAL, REWARDS, drift=drift)) > NOT_ZERO


@pytest.mark.parametrize("drift", [0.0, SMALL_DRIFT])
def test_per_response_length_normaliser_cancels_when_lengths_are_equal(drift) -> None:
    loss = surrogate("seq-mean-token-mean")
    assert size_of(shared_token_gradient(loss, EQUAL, REWARDS, drift=drift)) < ZERO


def test_sequence_ratio_does_not_cancel_off_policy() -> None:
    # Equal lengths and wide clip bounds leave sequence coupling as the only cause.
    loss = surrogate("seq-mean-token-mean", ratio_level="sequence", clip=ClipConfig(0.9, 9.0))
    assert size_of(shared_token_gradient(loss, EQUAL, REWARDS)) < ZERO  # on-policy: s_i = 1
    assert size_of(shared_token_gradient(loss, EQUAL, REWARDS, drift=SMALL_DRIFT)) > NOT_ZERO


@pytest.mark.parametrize("aggregation", CANCELLING)
@pytest.mark.parametrize("push", [1.5, -1.5])
def test_active_clip_breaks_cancellation_with_the_predicted_sign(aggregation, push) -> None:
    clip = DAPO_CLIP
    inner = surrogate(aggregation, clip=clip)

    def loss(logprobs: Tensor, batch: RolloutBatch) -> Tensor:
        shared_ratio = (logprobs[:, 0] - batch.old_logprobs[:, 0]).exp()
        outside = shared_ratio > 1 + clip.eps_high if push > 0 else shared_ratio < 1 - clip.eps_low
        assert outside.all(), "the set-up must activate the clip at the shared token"
        return inner(logprobs, batch)

    grad = shared_token_gradient(loss, UNEQUAL, REWARDS, shared_drift=push)
    assert size_of(grad) > NOT_ZERO
    # Above 1 + eps_high only the negative-advantage responses keep their gradient, and
    # descent lowers the shared action's logit (loss gradient > 0); below 1 - eps_low only
    # the positive ones do, and descent raises it (§1.3).
    assert torch.sign(grad[0]) == (1 if push > 0 else -1)


def test_the_helper_takes_a_registered_method() -> None:
    """A method's own loss plugs in; DAPO-style token-mean in GRPO cancels, its default not."""
    grpo = get_method("grpo")

    def method_loss(**overrides) -> LossBuilder:
        method = grpo(**overrides)
        return lambda logprobs, batch: method.loss(logprobs, batch, method.advantages(batch))[0]

    token_mean = shared_token_gradient(method_loss(aggregation="token-mean"), UNEQUAL, REWARDS)
    default = shared_token_gradient(method_loss(), UNEQUAL, REWARDS)
    assert size_of(token_mean) < ZERO
    assert size_of(default) > NOT_ZERO


# --------------------------------------------------------------------------------------------
# The harness's diagnostic (harness.diagnostics.cancellation) against the tabular ground truth
# --------------------------------------------------------------------------------------------


def method_loss(name: str, **overrides) -> LossBuilder:
    """A registered method's own advantages and loss, as a loss builder."""
    method = get_method(name)(**overrides)
    return lambda logprobs, batch: method.loss(logprobs, batch, method.advantages(batch))[0]


def diagnostic(build: LossBuilder, lengths, rewards, **kw) -> dict[str, float]:
    """The harness diagnostic of ``build`` on a tabular group at its current policy."""
    group = tabular_group(lengths, rewards, **kw)
    b = group.batch
    adv = grpo_advantages(b.rewards, b.response_mask, b.group_ids)
    current = group.token_logprobs().detach()
    return loss_cancellation(
        lambda lp: build(lp, b), current, adv, b.response_ids, b.response_mask, b.group_ids
    )


LOSSES = {
    "token-mean": surrogate("token-mean"),
    "seq-mean-token-mean": surrogate("seq-mean-token-mean"),
    "gspo": surrogate("seq-mean-token-mean", ratio_level="sequence", clip=ClipConfig(0.9, 9.0)),
    "clipped": surrogate("token-mean"),
}


@pytest.mark.parametrize("name", list(LOSSES))
@pytest.mark.parametrize("drift", [0.0, SMALL_DRIFT])
def test_log_prob_coefficients_give_the_parameter_gradient(name, drift) -> None:
    """Sum_i g_i0 times the shared token's score function is the exact gradient on context 0."""
    build = LOSSES[name]
    shared_drift = 1.5 if name == "clipped" else 0.0
    group = tabular_group(UNEQUAL, REWARDS, drift=drift, shared_drift=shared_drift)
    b = group.batch
    g = logprob_gradient(lambda lp: build(lp, b), group.token_logprobs().detach())
    probs = group.logits.detach()[0].softmax(-1)
    score = torch.nn.functional.one_hot(torch.tensor(0), VOCAB).double() - probs
    expected = g[:, 0].sum() * score
    actual = shared_token_gradient(build, UNEQUAL, REWARDS, drift=drift, shared_drift=shared_drift)
    torch.testing.assert_close(actual, expected, rtol=1e-9, atol=1e-12)
    diag = diagnostic(build, UNEQUAL, REWARDS, drift=drift, shared_drift=shared_drift)
    residual = float(g[:, 0].sum().abs() / g[:, 0].abs().sum())
    assert diag["cancel_residual"] == pytest.approx(residual)
    assert diag["cancel_shared_frac"] == pytest.approx(len(UNEQUAL) / sum(UNEQUAL))


@pytest.mark.parametrize("drift", [0.0, SMALL_DRIFT])
def test_diagnostic_is_zero_for_token_mean_and_not_for_one_over_length(drift) -> None:
    for seed in range(3):
        kw = dict(drift=drift, seed=seed)
        for build in (method_loss("grpo", aggregation="token-mean"), method_loss("drgrpo")):
            diag = diagnostic(build, UNEQUAL, REWARDS, **kw)
            assert diag["cancel_residual"] < ZERO
            assert diag["cancel_ratio"] < ZERO
        diag = diagnostic(method_loss("grpo"), UNEQUAL, REWARDS, **kw)
        assert diag["cancel_residual"] > NOT_ZERO
        assert diag["cancel_ratio"] > NOT_ZERO


def test_diagnostic_sees_gspo_sequence_coupling_off_policy() -> None:
    wide = dict(eps_low=0.9, eps_high=9.0)  # no clip active: coupling is the only cause
    on = diagnostic(method_loss("gspo", **wide), EQUAL, REWARDS)
    off = diagnostic(method_loss("gspo", **wide), EQUAL, REWARDS, drift=SMALL_DRIFT)
    assert on["cancel_residual"] < ZERO
    assert off["cancel_residual"] > NOT_ZERO
    default = diagnostic(method_loss("gspo"), EQUAL, REWARDS, drift=SMALL_DRIFT)
    assert default["cancel_residual"] > NOT_ZERO


def with_shared_prefix(batch: RolloutBatch, length: int, share: float = 1.0) -> RolloutBatch:
    """The batch with the first ``length`` response tokens of each group's first row copied
    into its other rows, each with probability ``share`` (seeded by the batch)."""
    ids = batch.response_ids.clone()
    gen = torch.Generator().manual_seed(int(ids.sum()))
    for label in batch.group_ids.unique():
        rows = (batch.group_ids == label).nonzero().squeeze(-1)
        take = rows[torch.rand(len(rows), generator=gen) < share]
        ids[take, :length] = ids[rows[0], :length].clone()
    return RolloutBatch(**{**vars(batch), "response_ids": ids})


def reinforce_token_mean(logprobs: Tensor, batch: RolloutBatch) -> Tensor:
    """-A log pi with group advantages and one normaliser for the batch: equal weights."""
    adv = grpo_advantages(batch.rewards, batch.response_mask, batch.group_ids)
    return aggregate_loss(-adv * logprobs, batch.response_mask, "token-mean")


def args_of(batch: RolloutBatch) -> tuple:
    return (batch.response_ids, batch.response_mask, batch.group_ids)


@given(
    batch=rollout_batches(max_group_size=5),
    length=st.integers(0, 3),
    share=st.sampled_from([0.5, 1.0]),
    seed=st.integers(0, 99),
)
def test_diagnostic_properties_on_random_batches(batch, length, share, seed) -> None:
    batch = with_shared_prefix(batch, length, share)
    mask = batch.response_mask
    prompts = (batch.prompt_ids, batch.prompt_mask)
    classes, depth = prefix_classes(batch.response_ids, batch.group_ids, *prompts)
    for t in range(batch.response_ids.shape[1]):
        for i in range(batch.size):
            for j in range(i + 1, batch.size):
                same = (
                    bool(batch.group_ids[i] == batch.group_ids[j])
                    and torch.equal(batch.prompt_ids[i], batch.prompt_ids[j])
                    and torch.equal(batch.response_ids[i, : t + 1], batch.response_ids[j, : t + 1])
                )
                assert same == bool(classes[i, t] == classes[j, t]), (i, j, t)
                assert not (same and t >= depth)

    adv = grpo_advantages(batch.rewards, mask, batch.group_ids)
    gen = torch.Generator().manual_seed(seed)
    grad = torch.randn(mask.shape, generator=gen)
    diag = cancellation_diagnostics(grad, adv, *args_of(batch), *prompts)
    assert set(diag) == set(CANCEL_KEYS)
    any_shared = diag["cancel_shared_frac"] > 0
    if any_shared:
        assert 0.0 <= diag["cancel_residual"] <= 2.0 + 1e-9
        scaled = cancellation_diagnostics(3.0 * grad, adv, *args_of(batch), *prompts)
        # float32 sums of nearly cancelling terms: a relative tolerance, plus an absolute floor
        assert scaled["cancel_residual"] == pytest.approx(
            diag["cancel_residual"], rel=1e-3, abs=1e-6
        )
    else:
        assert diag["cancel_residual"] != diag["cancel_residual"]  # NaN: no shared token
    # Equal weights (g = c a) leave no excess on any shared set, whole group or not.
    logprobs = batch.old_logprobs + 0.1 * torch.randn(mask.shape, generator=gen)
    equal = loss_cancellation(
        lambda lp: reinforce_token_mean(lp, batch), logprobs, adv, *args_of(batch), *prompts
    )
    assert not equal["cancel_residual"] > 1e-6  # zero, or NaN without shared tokens or signal
    assert equal["cancel_shared_frac"] == diag["cancel_shared_frac"]
    # A permutation of the rows changes nothing the diagnostic reports.
    index = torch.randperm(batch.size, generator=gen)
    moved = batch.select(index)
    again = cancellation_diagnostics(
        grad[index], adv[index], *args_of(moved), moved.prompt_ids, moved.prompt_mask
    )
    for key in CANCEL_KEYS:
        assert again[key] == pytest.approx(diag[key], nan_ok=True)


def test_a_subset_sharing_a_prefix_may_move_but_not_through_unequal_weights() -> None:
    """Responses 0 and 1 share three tokens. Their advantages do not sum to zero, so even
    equal weights push the shared tokens (rightly: their rewards say so); only GRPO's
    unequal 1/|o_i| weights leave an excess."""
    # On-policy: the table's contexts after position 0 differ even where the ids are made
    # equal, and only on-policy do their ratios agree (all 1) as a real shared context's do.
    group = tabular_group(UNEQUAL, REWARDS)
    b = group.batch
    b.response_ids[1, :3] = b.response_ids[0, :3]
    b.rewards = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    adv = grpo_advantages(b.rewards, b.response_mask, b.group_ids)
    current = group.token_logprobs().detach()
    token_mean = method_loss("grpo", aggregation="token-mean")
    g = logprob_gradient(lambda lp: token_mean(lp, b), current)
    assert float(g[:2, 1:3].sum(0).abs().min()) > NOT_ZERO, "the pair is pushed"
    diag = loss_cancellation(lambda lp: token_mean(lp, b), current, adv, *args_of(b))
    assert diag["cancel_residual"] < ZERO
    assert diag["cancel_shared_frac"] == pytest.approx((4 + 2 * 2) / sum(UNEQUAL))
    per_length = loss_cancellation(lambda lp: method_loss("grpo")(lp, b), current, adv, *args_of(b))
    assert per_length["cancel_residual"] > NOT_ZERO


def test_groups_with_different_prompts_or_one_member_share_nothing() -> None:
    group = tabular_group(UNEQUAL, REWARDS)
    b = group.batch
    grad = torch.ones_like(b.response_mask)
    adv = grpo_advantages(b.rewards, b.response_mask, b.group_ids)
    prompts = torch.arange(b.size).unsqueeze(-1)  # four different prompts
    diag = cancellation_diagnostics(grad, adv, *args_of(b), prompts, b.prompt_mask)
    assert diag["cancel_shared_frac"] == 0.0
    lone = cancellation_diagnostics(
        grad, adv, b.response_ids, b.response_mask, torch.arange(b.size), b.prompt_ids
    )
    assert lone["cancel_shared_frac"] == 0.0
    counted = cancellation_diagnostics(grad, adv, *args_of(b), b.prompt_ids, b.prompt_mask)
    assert counted["cancel_residual"] == pytest.approx(1.0)  # one sign: nothing cancels


def test_a_loss_that_ignores_the_log_probs_has_zero_coefficients() -> None:
    logprobs = torch.randn(3, 4)
    assert (logprob_gradient(lambda lp: torch.tensor(2.0), logprobs) == 0).all()
    assert (logprob_gradient(lambda lp: lp[:, 0].sum(), logprobs)[:, 1:] == 0).all()


@pytest.mark.parametrize("name", sorted(list_methods()))
def test_every_registered_method_gets_the_diagnostic_as_the_trainer_computes_it(name) -> None:
    """The trainer's call, on a batch whose groups share a prefix: defined and in range."""
    batch = with_shared_prefix(FakeServices().sample_batch(), 2)
    method, services = get_method(name)(), FakeServices()
    advantages = method.advantages(batch, services)
    diag = loss_cancellation(
        lambda lp: method.loss(lp, batch, advantages, services=services)[0],
        batch.old_logprobs,
        advantages,
        *args_of(batch),
        batch.prompt_ids,
        batch.prompt_mask,
    )
    assert diag["cancel_shared_frac"] > 0
    for key in ("cancel_residual", "cancel_ratio"):
        value = diag[key]
        assert value != value or value >= 0.0  # NaN only when the loss has no signal there
    assert not diag["cancel_residual"] > 2.0 + 1e-9


def test_the_leaderboard_shows_the_cancellation_ratio_with_its_interval() -> None:
    import importlib

    import pandas as pd

    from creditbench.leaderboard.board import summarize

    rows = [
        {"run": f"{m}{s}", "method": m, "task": "chain", "options": "default",
         "setting": "default", "seed": s, "kind": "run", "accuracy_metric": "sampled_accuracy",
         "final_sampled_accuracy": 0.5, "auc_sampled_accuracy": 0.4,
         "cancel_ratio": value + 0.01 * s}
        for m, value in (("grpo", 0.2), ("dfpo", 0.0))
        for s in range(3)
    ]  # fmt: skip
    evals = [
        {**{k: r[k] for k in ("run", "method", "task", "options", "setting", "seed")},
         "kind": "eval", "budget_fraction": 1.0, "sampled_accuracy": 0.5}
        for r in rows
    ]  # fmt: skip
    methods = summarize(pd.DataFrame(rows + evals), reps=200)["methods"]
    tables = importlib.import_module("creditbench.leaderboard.tables")
    headers, table = tables.credit_table(methods)
    column = headers.index("shared-prefix gradient, net / rest")
    cells = {row[0]: row[column] for row in table}
    assert cells["grpo"].startswith("0.210 [") and cells["dfpo"].startswith("0.010 [")
