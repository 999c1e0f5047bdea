"""MIG: each reasoning step's gain in the reference answer's likelihood above the watermark,
as process credit on the reasoning tokens, beside GRPO's outcome credit on every token."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.methods.contract import PROBLEM_INDEX
from creditbench.methods.core import broadcast_to_tokens, group_normalized_scores
from creditbench.methods.grpo import GRPO
from creditbench.methods.mig import (
    LIKELIHOODS,
    MIG,
    MIGConfig,
    mig_advantages,
    reasoning_mask,
    watermark_gains,
)
from creditbench.methods.registry import get_method

from fakes import FakeServices
from strategies import rollout_batches


def test_registered_with_its_defaults():
    cls = get_method("mig")
    assert cls is MIG and cls.group_local and not cls.reference
    cfg = MIGConfig()
    assert (cfg.alpha, cfg.beta, cfg.sft_coef, cfg.process_credit) == (1.0, 1.0, 0.1, "response")
    for field, value in [("alpha", -1.0), ("sft_coef", -0.1), ("process_credit", "token")]:
        with pytest.raises(ValueError, match=f"^{field}:"):
            MIGConfig(**{field: value})


def test_the_watermark_by_hand():
    """ℓ = (-5, -6, -4, -4.5, -2): the fall to -6 earns nothing, the climb back to -5 nothing
    either (it only regains the watermark), -4 earns 1, -2 earns 2."""
    likelihoods = torch.tensor([[-5.0, -6.0, -5.0, -4.0, -4.5, -2.0]])
    torch.testing.assert_close(
        watermark_gains(likelihoods), torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0, 2.0]])
    )


@given(
    rows=st.lists(
        st.lists(st.floats(-20, 0, allow_nan=False), min_size=1, max_size=8), min_size=1, max_size=5
    )
)
def test_gains_are_non_negative_and_sum_to_the_best_likelihood_over_the_first(rows):
    width = max(len(r) for r in rows)
    likelihoods = torch.tensor(
        [r + [math.nan] * (width - len(r)) for r in rows], dtype=torch.float64
    )
    gains = watermark_gains(likelihoods)
    assert torch.all(gains >= 0)
    for i, row in enumerate(rows):
        assert float(gains[i].sum()) == pytest.approx(max(row) - row[0], abs=1e-9)
        assert torch.all(gains[i, len(row) :] == 0)


def test_the_reasoning_tokens_are_every_step_but_the_last():
    step_ids = torch.tensor([[0, 0, 1, 1, 2, -1], [0, 0, 0, -1, -1, -1]])
    expected = torch.tensor([[1.0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]])
    torch.testing.assert_close(reasoning_mask(step_ids), expected)


def likelihoods_for(batch, generator):
    width = int(batch.step_ids.max()) + 1
    values = -10 * torch.rand(batch.size, width, generator=generator)
    steps = batch.step_ids.max(-1).values + 1
    return torch.where(torch.arange(width) < steps.unsqueeze(-1), values, math.nan)


@given(batch=rollout_batches(extras=True), seed=st.integers(0, 1000))
def test_process_credit_sits_on_the_reasoning_tokens_one_value_a_response(batch, seed):
    likelihoods = likelihoods_for(batch, torch.Generator().manual_seed(seed))
    both = mig_advantages(batch, likelihoods, alpha=1.0, beta=1.0)
    outcome = mig_advantages(batch, likelihoods, alpha=0.0, beta=1.0)
    process = both - outcome
    reasoning = reasoning_mask(batch.step_ids) * batch.response_mask > 0
    assert torch.all(process[~reasoning] == 0)
    scores = group_normalized_scores(watermark_gains(likelihoods).sum(-1), batch.group_ids)
    torch.testing.assert_close(process, broadcast_to_tokens(scores, reasoning.float()))
    # without process credit it is GRPO's advantage
    torch.testing.assert_close(outcome, GRPO().advantages(batch))


@given(batch=rollout_batches(extras=True), seed=st.integers(0, 1000))
def test_step_credit_gives_each_step_its_own_gain(batch, seed):
    likelihoods = likelihoods_for(batch, torch.Generator().manual_seed(seed))
    both = mig_advantages(batch, likelihoods, alpha=1.0, beta=0.0, process_credit="step")
    reasoning = reasoning_mask(batch.step_ids) * batch.response_mask > 0
    assert torch.all(both[~reasoning] == 0)
    gains = watermark_gains(likelihoods)
    for row in range(batch.size):
        for step in batch.step_ids[row][reasoning[row]].unique().tolist():
            on = both[row][(batch.step_ids[row] == step) & reasoning[row]]
            assert torch.all(on == on[0])  # one value a step
        for a in range(batch.size):  # within a group, a larger gain never gets less credit
            if batch.group_ids[a] != batch.group_ids[row]:
                continue
            for sa in batch.step_ids[a][reasoning[a]].unique().tolist():
                for sr in batch.step_ids[row][reasoning[row]].unique().tolist():
                    if gains[a, sa + 1] > gains[row, sr + 1] + 1e-9:
                        credit_a = both[a][batch.step_ids[a] == sa][0]
                        credit_r = both[row][batch.step_ids[row] == sr][0]
                        assert credit_a >= credit_r - 1e-6


class ScoringServices(FakeServices):
    """The fake services, whose answer likelihood grows with the prompt's length, and which
    record the prompts the answer was scored under."""

    def score(self, batch, prompts=None, model="policy"):  # type: ignore[override]
        if prompts is None:
            return super().score(batch, prompts, model)
        self.scored_under = list(prompts)
        lengths = torch.tensor([float(len(p)) for p in prompts]).unsqueeze(-1)
        return -10.0 / (1.0 + lengths) * batch.response_mask


def test_the_rollout_scores_the_answer_once_per_distinct_prefix():
    services = ScoringServices(seed=3)
    batch = MIG().rollout(services)
    likelihoods = batch.extras[LIKELIHOODS]
    steps = batch.step_ids.max(-1).values + 1
    problems = batch.extra(PROBLEM_INDEX).tolist()
    distinct = set()
    for row in range(batch.size):
        starts = [0] + [
            int((batch.step_ids[row] == k).float().argmax()) for k in range(1, int(steps[row]))
        ]
        for start in starts:
            distinct.add((problems[row], tuple(batch.response_ids[row, :start].tolist())))
        assert not likelihoods[row, : int(steps[row])].isnan().any()
        assert likelihoods[row, int(steps[row]) :].isnan().all()
    assert services.stats["mig_states"] == len(distinct) == len(services.scored_under)
    assert all(p.startswith("problem ") for p in services.scored_under)
    # a longer prefix raises this fake's likelihood: every step gains
    for row in range(batch.size):
        row_values = likelihoods[row, : int(steps[row])]
        assert torch.all(row_values[1:] >= row_values[:-1])


@given(batch=rollout_batches(extras=True), seed=st.integers(0, 1000))
def test_the_sft_term_trains_the_gated_responses_alone(batch, seed):
    batch.extras[LIKELIHOODS] = likelihoods_for(batch, torch.Generator().manual_seed(seed))
    advantages = torch.zeros_like(batch.response_mask)
    logprobs = batch.old_logprobs.clone().requires_grad_()
    loss, stats = MIG(sft_coef=0.5).loss(logprobs, batch, advantages)
    loss.backward()
    gated = (batch.rewards > 0) & (watermark_gains(batch.extras[LIKELIHOODS]).sum(-1) > 0)
    mask = batch.response_mask > 0
    assert torch.all(logprobs.grad[~gated] == 0)
    assert torch.all(logprobs.grad[gated][mask[gated]] < 0)  # the NLL pulls them up
    plain, _ = MIG(sft_coef=0.0).loss(batch.old_logprobs, batch, advantages)
    assert float(plain) == pytest.approx(0.0, abs=1e-7)
    assert "sft_nll" in stats
