"""KTAE (key-token advantage estimation): a bonus per token id from the group's statistics."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.methods.grpo import GRPO
from creditbench.methods.ktae import (
    KTAE,
    KTAEConfig,
    fisher_two_sided,
    information_gain,
    key_token_values,
)

from strategies import build_batch, rollout_batches

scipy_stats = pytest.importorskip("scipy.stats")  # the leaderboard extra, in the test install

tables = st.tuples(*[st.integers(0, 9)] * 4).filter(lambda t: sum(t) > 0)


@given(table=tables)
def test_fisher_matches_scipys_two_sided_exact_test(table):
    a, b, c, d = table
    expected = scipy_stats.fisher_exact([[a, b], [c, d]], alternative="two-sided").pvalue
    got = fisher_two_sided(*(torch.tensor([float(x)]) for x in table))
    assert math.isclose(float(got), expected, rel_tol=1e-9, abs_tol=1e-12)


def test_information_gain_is_one_bit_for_a_token_that_separates_and_zero_for_one_that_does_not():
    ig = information_gain(
        *(torch.tensor(x, dtype=torch.float64) for x in ([2, 2], [0, 2], [0, 0], [2, 0]))
    )
    assert math.isclose(float(ig[0]), 1.0, rel_tol=1e-12)  # present exactly in the correct ones
    assert math.isclose(float(ig[1]), 0.0, abs_tol=1e-12)  # in every rollout: says nothing


def key_value_written_out(ids, lengths, correct, token, k1=2.0, b=0.5) -> float:
    """K of one token id, from the formulas of the method's docstring, scalar by scalar."""
    rows = [ids[i][: lengths[i]] for i in range(len(ids))]
    pairs = list(zip(rows, correct, strict=True))
    a = sum(1 for r, ok in pairs if ok and token in r)
    bb = sum(1 for r, ok in pairs if not ok and token in r)
    c, d = sum(correct) - a, (len(rows) - sum(correct)) - bb
    p = scipy_stats.fisher_exact([[a, bb], [c, d]]).pvalue
    f = math.exp(-2 * p) if p < 1 - 1e-9 else 0.0

    def h(x):
        return 0.0 if x in (0.0, 1.0) else -(x * math.log2(x) + (1 - x) * math.log2(1 - x))

    n = a + bb + c + d
    ig = h((a + c) / n) - (a + bb) / n * h(a / max(a + bb, 1)) - (c + d) / n * h(c / max(c + d, 1))
    x = math.asin(math.sqrt(max(a / (a + c), 1e-10))) - math.asin(
        math.sqrt(max(bb / (bb + d), 1e-10))
    )
    n_t = sum(len(r) for r, ok in pairs if ok)
    n_f = sum(len(r) for r, ok in pairs if not ok)
    avg = (n_t + n_f) / 2
    f_t = sum(r.count(token) for r, ok in pairs if ok) / n_t
    f_f = sum(r.count(token) for r, ok in pairs if not ok) / n_f
    tf_t = f_t * (k1 + 1) / (f_t + k1 * (1 - b + b * n_t / avg))
    tf_f = f_f * (k1 + 1) / (f_f + k1 * (1 - b + b * n_f / avg))
    x += tf_t / (tf_f + 1e-5) - tf_f / (tf_t + 1e-5)
    s = (f + ig) * x / 2
    return math.tanh(s / 2)  # = 2 sigmoid(s) - 1


@given(
    seed=st.integers(0, 10_000),
    size=st.integers(2, 6),
    vocab=st.integers(2, 6),
)
def test_each_token_value_is_the_formula_written_out(seed, size, vocab):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 7, (size,), generator=gen).tolist()
    ids = torch.randint(0, vocab, (size, 6), generator=gen)
    mask = (torch.arange(6) < torch.tensor(lengths).unsqueeze(-1)).float()
    correct = torch.rand(size, generator=gen) < 0.5
    correct[0], correct[1] = True, False  # both outcomes present
    values = key_token_values(ids, mask, correct, vocab_size=vocab)
    for token in range(vocab):
        used = any(token in ids[i, : lengths[i]].tolist() for i in range(size))
        expected = (
            key_value_written_out(ids.tolist(), lengths, correct.tolist(), token) if used else 0.0
        )
        assert math.isclose(float(values[token]), expected, rel_tol=1e-6, abs_tol=1e-9), token


def test_a_token_of_the_correct_rollouts_only_is_rewarded_and_of_the_wrong_only_blamed():
    ids = torch.tensor([[1, 3, 0], [1, 3, 0], [2, 3, 0], [2, 3, 0]])
    mask = torch.tensor([[1.0, 1, 0]] * 4)
    values = key_token_values(ids, mask, torch.tensor([True, True, False, False]), vocab_size=4)
    assert values[1] > 0.5 and values[2] < -0.5
    assert values[3] == 0.0  # in every rollout: no Fisher score, no information
    assert values[0] == 0.0  # only where the mask is 0: never used


@given(batch=rollout_batches(binary=True))
def test_values_are_bounded_by_top_and_flip_with_the_outcomes(batch):
    for group in torch.unique(batch.group_ids):
        rows = batch.group_ids == group
        ids, mask = batch.response_ids[rows], batch.response_mask[rows]
        correct = batch.rewards[rows] > 0
        vocab = int(batch.response_ids.max()) + 1
        values = key_token_values(ids, mask, correct, vocab_size=vocab, top=0.7)
        assert bool((values.abs() <= 0.7).all())  # a one-sided token's TF ratio saturates
        flipped = key_token_values(ids, mask, ~correct, vocab_size=vocab, top=0.7)
        torch.testing.assert_close(flipped, -values)


def test_the_advantage_is_grpos_plus_the_value_of_each_token():
    batch = build_batch([4, 3], [3, 2, 4, 1, 2, 3, 2], [1, 0, 1, 0, 1, 1, 1], seed=5, vocab=4)
    adv = KTAE().advantages(batch)
    grpo = GRPO().advantages(batch)
    mask = batch.response_mask > 0
    first = batch.group_ids == batch.group_ids[0]
    values = key_token_values(
        batch.response_ids[first], batch.response_mask[first], batch.rewards[first] > 0,
        vocab_size=int(batch.response_ids.max()) + 1,
    )  # fmt: skip
    expected = grpo[first] + values[batch.response_ids[first]].float() * mask[first]
    torch.testing.assert_close(adv[first], expected)
    torch.testing.assert_close(adv[~first], grpo[~first])  # all correct: K = 0 and GRPO's 0
    assert adv[~mask].abs().sum() == 0


def test_the_config_refuses_bad_values():
    with pytest.raises(ValueError, match="^alpha:"):
        KTAEConfig(alpha=0.0, beta=0.0)
    with pytest.raises(ValueError, match="^bm25_b:"):
        KTAEConfig(bm25_b=1.5)
    assert KTAEConfig().aggregation == "token-mean"
