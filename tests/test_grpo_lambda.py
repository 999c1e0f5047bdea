"""GRPO-λ (arXiv 2510.00194, reconstructed from its abstract): GRPO's advantage on each token
weighted by a critic-free eligibility trace."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.methods.grpo import GRPO
from creditbench.methods.grpo_lambda import GRPOLambda, GRPOLambdaConfig, trace_weights

from strategies import build_batch, rollout_batches


def backward_view(length: int, decay: float) -> list[float]:
    """The accumulating trace run token by token, e_t = decay e_{t-1} + (one-hot of token t),
    read at the last token where the only TD error is: each token's weight in Σ_t δ_t e_t."""
    trace = [0.0] * length
    for t in range(length):
        trace = [decay * x for x in trace]
        trace[t] += 1.0
    return trace


@given(length=st.integers(1, 40), decay=st.floats(0.5, 1.0))
def test_the_recent_weights_are_the_backward_trace_at_the_terminal_td_error(length, decay):
    mask = torch.ones(1, length)
    got = trace_weights(mask, decay, style="recent", normalize=False)[0].tolist()
    assert got == pytest.approx(backward_view(length, decay), rel=1e-9)


@given(
    batch=rollout_batches(), decay=st.floats(0.3, 1.0), style=st.sampled_from(["recent", "both"])
)
def test_a_responses_summed_credit_is_grpos(batch, decay, style):
    """Normalised weights have mean 1 on a response: the trace moves credit between its tokens
    and leaves the response's total where GRPO puts it."""
    ours = GRPOLambda(lam=decay, style=style).advantages(batch).double().sum(-1)
    grpo = GRPO().advantages(batch).double().sum(-1)
    torch.testing.assert_close(ours, grpo, rtol=1e-5, atol=1e-5)


def test_recent_credits_late_tokens_and_both_credits_the_two_ends():
    batch = build_batch([2], [10, 10], [1.0, 0.0])
    recent = GRPOLambda(lam=0.8, style="recent").advantages(batch)[0]
    both = GRPOLambda(lam=0.8, style="both").advantages(batch)[0]
    assert torch.all(recent[1:] > recent[:-1])  # rising to the last token
    assert float(both[0]) == pytest.approx(float(both[-1]))
    assert float(both[0]) > float(both[4]) and float(both[-1]) > float(both[5])
    assert torch.all(GRPOLambda(lam=0.8).advantages(batch)[1] < 0)  # a failure's sign kept


@given(batch=rollout_batches())
def test_lambda_one_is_grpo(batch):
    torch.testing.assert_close(GRPOLambda(lam=1.0).advantages(batch), GRPO().advantages(batch))


@pytest.mark.parametrize(
    "field,value", [("lam", 0.0), ("lam", 1.5), ("gamma", 0.0), ("style", "past"), ("normalize", 1)]
)
def test_a_bad_option_names_its_field(field, value):
    with pytest.raises(ValueError, match=field):
        GRPOLambdaConfig(**{field: value})
