"""Properties specific to the GRPO-family baselines (the contract every method keeps is in
``test_conformance.py``).

Rewards are dyadic (multiples of 1/4) so that a group of equal rewards is exactly equal and
group sums are exact; advantages are computed in float64 where a property is an equality.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from torch import Tensor

from creditbench.methods.core import (
    RolloutBatch,
    concat_batches,
    importance_ratio,
    masked_mean,
    rows_of_mixed_groups,
)
from creditbench.methods.dapo import (
    DAPO,
    DAPOConfig,
    dapo_advantages,
    overlong_penalty,
)
from creditbench.methods.drgrpo import DrGRPO, drgrpo_advantages
from creditbench.methods.grpo import grpo_advantages
from creditbench.methods.gspo import gspo_advantages, gspo_sequence_ratio
from creditbench.methods.reinforce_pp import (
    outcome_token_rewards,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
)
from creditbench.methods.rloo import rloo_advantages

from fakes import FakeServices
from strategies import build_batch

dyadic = st.integers(-8, 8).map(lambda k: k / 4)


@st.composite
def grouped(draw, min_size: int = 1, max_size: int = 5, max_groups: int = 4, max_len: int = 5):
    """``(rewards [B] float64, mask [B, T], group_ids [B])``: interleaved groups of arbitrary
    labels, right-padded masks with at least one token a row."""
    sizes = draw(st.lists(st.integers(min_size, max_size), min_size=1, max_size=max_groups))
    labels = draw(
        st.lists(st.integers(-50, 50), min_size=len(sizes), max_size=len(sizes), unique=True)
    )
    group_ids = torch.tensor(
        [label for label, n in zip(labels, sizes, strict=True) for _ in range(n)]
    )
    order = torch.tensor(draw(st.permutations(range(len(group_ids)))), dtype=torch.long)
    group_ids = group_ids[order]
    size = len(group_ids)
    rewards = torch.tensor(
        draw(st.lists(dyadic, min_size=size, max_size=size)), dtype=torch.float64
    )
    lengths = torch.tensor(draw(st.lists(st.integers(1, max_len), min_size=size, max_size=size)))
    width = int(lengths.max()) + draw(st.integers(0, 2))
    mask = (torch.arange(width) < lengths.unsqueeze(-1)).to(torch.float64)
    return rewards, mask, group_ids


def dapo_plain(rewards: Tensor, mask: Tensor, group_ids: Tensor) -> Tensor:
    lengths = mask.sum(-1)
    return dapo_advantages(
        rewards, mask, group_ids, lengths, max_length=8, cache_length=2, overlong_shaping=False
    )


GROUP_RELATIVE = {
    "grpo": grpo_advantages,
    "drgrpo": drgrpo_advantages,
    "dapo": dapo_plain,
    "gspo": gspo_advantages,
    "rloo": rloo_advantages,
}
Z_SCORED = ("grpo", "dapo", "gspo")
MEAN_CENTRED = ("drgrpo", "rloo")


def per_response(adv: Tensor) -> Tensor:
    """The one advantage of each response (every row's first token is a response token)."""
    return adv[:, 0]


# --------------------------------------------------------------------------------------------
# Group-relative advantages
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(GROUP_RELATIVE))
@given(batch=grouped())
def test_advantages_sum_to_zero_in_each_group(name, batch) -> None:
    rewards, mask, group_ids = batch
    scores = per_response(GROUP_RELATIVE[name](rewards, mask, group_ids))
    for label in group_ids.unique():
        assert abs(float(scores[group_ids == label].sum())) < 1e-9
    # one advantage for every token of a response, none on padding
    adv = GROUP_RELATIVE[name](rewards, mask, group_ids)
    torch.testing.assert_close(adv, scores.unsqueeze(-1) * mask)


@pytest.mark.parametrize("name", list(GROUP_RELATIVE))
@given(batch=grouped(), shift=dyadic)
def test_shift_invariance(name, batch, shift) -> None:
    rewards, mask, group_ids = batch
    fn = GROUP_RELATIVE[name]
    torch.testing.assert_close(fn(rewards + shift, mask, group_ids), fn(rewards, mask, group_ids))


@pytest.mark.parametrize("name", Z_SCORED)
@given(batch=grouped(), scale=st.sampled_from([0.5, 2.0, 3.0, 8.0]))
def test_z_scored_advantages_ignore_positive_scale(name, batch, scale) -> None:
    rewards, mask, group_ids = batch
    fn = GROUP_RELATIVE[name]
    # the 1e-6 added to the std is the only thing that sees the scale
    torch.testing.assert_close(
        fn(rewards * scale, mask, group_ids), fn(rewards, mask, group_ids), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("name", MEAN_CENTRED)
@given(batch=grouped(), scale=st.sampled_from([-2.0, 0.5, 2.0, 3.0]))
def test_mean_centred_advantages_scale_linearly(name, batch, scale) -> None:
    rewards, mask, group_ids = batch
    fn = GROUP_RELATIVE[name]
    torch.testing.assert_close(
        fn(rewards * scale, mask, group_ids), scale * fn(rewards, mask, group_ids)
    )


@pytest.mark.parametrize("name", [*GROUP_RELATIVE, "reinforce_pp_baseline"])
@given(batch=grouped(), value=dyadic)
def test_equal_rewards_give_zero_advantage(name, batch, value) -> None:
    _, mask, group_ids = batch
    rewards = torch.full((len(group_ids),), value, dtype=torch.float64)
    fn = GROUP_RELATIVE.get(name, reinforce_pp_baseline_advantages)
    assert (fn(rewards, mask, group_ids) == 0).all()


@given(batch=grouped())
def test_rloo_is_dr_grpo_times_g_over_g_minus_1(batch) -> None:
    rewards, mask, group_ids = batch
    _, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    g = counts[inverse].to(torch.float64)
    factor = torch.where(g > 1, g / (g - 1).clamp(min=1), torch.zeros_like(g))
    expected = factor.unsqueeze(-1) * drgrpo_advantages(rewards, mask, group_ids)
    torch.testing.assert_close(rloo_advantages(rewards, mask, group_ids), expected)


@given(batch=grouped(min_size=2))
def test_rloo_leaves_each_response_out_of_its_own_baseline(batch) -> None:
    rewards, mask, group_ids = batch
    scores = per_response(rloo_advantages(rewards, mask, group_ids))
    for i in range(len(rewards)):
        others = (group_ids == group_ids[i]) & (torch.arange(len(rewards)) != i)
        assert abs(float(scores[i] - (rewards[i] - rewards[others].mean()))) < 1e-9


# --------------------------------------------------------------------------------------------
# DAPO
# --------------------------------------------------------------------------------------------


def penalty_by_cases(length: float, max_length: int, cache: int) -> float:
    """The paper's three-piece R_length, written out."""
    if length <= max_length - cache:
        return 0.0
    if length <= max_length:
        return ((max_length - cache) - length) / cache
    return -1.0


@given(max_length=st.integers(1, 64), data=st.data())
def test_overlong_penalty_matches_the_three_cases(max_length, data) -> None:
    cache = data.draw(st.integers(1, max_length))
    lengths = torch.arange(0, max_length + 5)
    got = overlong_penalty(lengths, max_length, cache)
    want = torch.tensor([penalty_by_cases(float(n), max_length, cache) for n in lengths])
    torch.testing.assert_close(got, want)
    assert (got[1:] <= got[:-1]).all(), "the penalty must not grow with length"


@given(max_length=st.integers(2, 64), data=st.data(), delta=st.sampled_from([1e-3, 1e-6]))
def test_overlong_penalty_is_continuous_at_both_ends(max_length, data, delta) -> None:
    cache = data.draw(st.integers(1, max_length))
    soft_start = float(max_length - cache)
    at = torch.tensor(
        [
            soft_start,
            soft_start + delta,
            float(max_length) - delta,
            float(max_length),
            max_length + delta,
        ],
        dtype=torch.float64,
    )
    p = overlong_penalty(at, max_length, cache)
    assert p[0] == 0 and p[3] == -1 and p[4] == -1
    assert abs(float(p[1] - p[0])) <= 2 * delta / cache
    assert abs(float(p[3] - p[2])) <= 2 * delta / cache


def test_overlong_penalty_rejects_a_cache_longer_than_the_limit() -> None:
    with pytest.raises(ValueError, match="cache_length"):
        overlong_penalty(torch.tensor([3]), 4, 5)


@given(batch=grouped())
def test_rows_of_mixed_groupss_exactly_the_groups_with_unequal_rewards(batch) -> None:
    rewards, _, group_ids = batch
    keep = rows_of_mixed_groups(rewards, group_ids)
    for i in range(len(rewards)):
        mates = rewards[group_ids == group_ids[i]].tolist()
        assert bool(keep[i]) == (len(set(mates)) > 1)


@given(batch=grouped(), shift=dyadic)
def test_dapo_length_shaping_only_moves_responses_in_the_soft_zone(batch, shift) -> None:
    rewards, mask, group_ids = batch
    lengths = mask.sum(-1)
    short = torch.ones_like(lengths)  # all far below L_max - L_cache: no penalty anywhere
    shaped = dapo_advantages(rewards, mask, group_ids, short, max_length=20, cache_length=4)
    torch.testing.assert_close(shaped, dapo_plain(rewards, mask, group_ids))
    # shaping is a reward change: equal rewards and equal lengths still give zero
    flat = torch.full_like(rewards, shift)
    same = torch.full_like(lengths, 19.0)
    assert (dapo_advantages(flat, mask, group_ids, same, max_length=20, cache_length=4) == 0).all()


def test_dapo_takes_l_max_from_the_generation_limit_not_from_the_batch() -> None:
    """Every response far below L_max - L_cache (160 - 32) gets no penalty: DAPO's advantage is
    then the plain z-score. Taking L_max from the batch's longest response (5 tokens) would give
    that response the full -1 and move every advantage of its group."""
    batch = build_batch([4, 2], [1, 2, 3, 5, 4, 4], [1.0, 0.0, 1.0, 1.0, 0.0, 1.0], seed=1)
    batch.truncated = torch.zeros(batch.size, dtype=torch.bool)
    got = DAPO(dynamic_sampling=False).advantages(batch, FakeServices(max_new_tokens=160))
    want = dapo_plain(batch.rewards, batch.response_mask, batch.group_ids)
    torch.testing.assert_close(got, want)
    lengths = batch.response_lengths
    from_batch = dapo_advantages(
        batch.rewards, batch.response_mask, batch.group_ids, lengths, max_length=5, cache_length=1
    )
    assert not torch.allclose(from_batch, want), "the old batch-statistic default would differ"
    # a response that does reach the limit is shaped: L_max is the limit, not a constant
    at_limit = DAPO(dynamic_sampling=False).advantages(batch, FakeServices(max_new_tokens=5))
    torch.testing.assert_close(at_limit, from_batch)


def test_dapo_without_services_needs_an_explicit_l_max() -> None:
    batch = build_batch([2], [2, 3], [1.0, 0.0])
    with pytest.raises(ValueError, match="max_response_length"):
        DAPO().advantages(batch)
    DAPO(max_response_length=16).advantages(batch)  # an explicit L_max needs no services


class ScriptedServices:
    """Hands out the given batches in order."""

    def __init__(self, batches: list[RolloutBatch]) -> None:
        self.batches = list(batches)
        self.step = 0
        self.calls = 0
        self.max_new_tokens = 16

    def sample_batch(self) -> RolloutBatch:
        batch = self.batches[self.calls]
        self.calls += 1
        return batch


def round_batch(round_index: int, group_rewards: list[list[float]], length: int) -> RolloutBatch:
    """A batch whose groups carry the given rewards; ``extras["round"]`` marks its origin."""
    sizes = [len(r) for r in group_rewards]
    rewards = [r for group in group_rewards for r in group]
    batch = build_batch(
        sizes, [length] * len(rewards), rewards, seed=round_index, with_extras=False
    )
    batch.extras = {"round": torch.full((len(rewards),), round_index)}
    batch.truncated = torch.zeros(len(rewards), dtype=torch.bool)  # none reaches the limit
    return batch


zero_one_groups = st.lists(st.sampled_from([0.0, 1.0]), min_size=2, max_size=4)


@given(rounds=st.lists(st.lists(zero_one_groups, min_size=3, max_size=3), min_size=1, max_size=4))
def test_dapo_rollout_refills_with_the_first_informative_groups(rounds) -> None:
    batches = [round_batch(i, groups, length=2 + i) for i, groups in enumerate(rounds)]
    services = ScriptedServices(batches)
    method = DAPO(max_sampling_rounds=len(rounds))
    out = method.rollout(services)

    informative, calls = [], len(rounds)
    for i, groups in enumerate(rounds):
        informative += [(i, r) for r in groups if len(set(r)) > 1]
        if len(informative) >= 3:
            calls = i + 1
            break
    assert services.calls == calls, "sampling must stop as soon as the batch is full"
    if not informative:  # nothing to learn from: the last batch, a step with zero advantage
        assert out is batches[-1]
        assert (method.advantages(out, services) == 0).all()
        return
    kept = []
    for label in out.group_ids.unique():  # ascending ids: the order the groups were drawn in
        rows = out.group_ids == label
        origin = out.extras["round"][rows].unique()
        assert len(origin) == 1, "a group mixes responses of different rounds"
        kept.append((int(origin), out.rewards[rows].tolist()))
    assert kept == informative[:3]
    assert (method.advantages(out, services)[out.response_mask > 0] != 0).any()


def test_dapo_rollout_keeps_group_ids_of_rounds_apart() -> None:
    # every round labels its groups 0, 1, 2, and only its group 1 is informative
    first = round_batch(0, [[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]], length=3)
    second = round_batch(1, [[1.0, 1.0], [1.0, 0.0, 1.0], [0.0, 0.0]], length=5)
    third = round_batch(2, [[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]], length=2)
    services = ScriptedServices([first, second, third])
    out = DAPO().rollout(services)
    assert services.calls == 3
    assert out.extras["round"].tolist() == [0, 0, 1, 1, 1, 2, 2]
    assert len(out.group_ids.unique()) == 3, "groups of different rounds merged"
    assert out.response_mask.shape[-1] == 5
    assert out.response_mask.sum(-1).tolist() == [3, 3, 5, 5, 5, 2, 2]


def test_dapo_overlong_filtering_masks_truncated_responses() -> None:
    batch = round_batch(0, [[0.0, 1.0, 1.0]], length=4)
    batch.truncated = torch.tensor([False, True, False])
    method = DAPO(overlong_filtering=True, dynamic_sampling=False, max_response_length=4)
    out = method.rollout(ScriptedServices([batch]))
    assert out.response_mask[1].sum() == 0 and out.response_mask[0].sum() == 4
    assert (method.advantages(out)[1] == 0).all()
    assert batch.response_mask[1].sum() == 4, "the sampled batch itself is left alone"


@pytest.mark.parametrize(
    "field, value",
    [("max_sampling_rounds", 0), ("overlong_cache_length", -1), ("max_response_length", -3)],
)
def test_dapo_config_names_the_bad_field(field, value) -> None:
    with pytest.raises(ValueError, match=field):
        DAPOConfig(**{field: value})
    with pytest.raises(ValueError, match="overlong_cache_length"):
        DAPOConfig(max_response_length=8, overlong_cache_length=9)


# --------------------------------------------------------------------------------------------
# concat_batches
# --------------------------------------------------------------------------------------------


def test_concat_batches_pads_and_keeps_groups_apart() -> None:
    a = build_batch([2, 1], [3, 1, 2], [1.0, 0.0, 0.5], seed=1, group_labels=[4, 9])
    b = build_batch([2], [5, 4], [0.0, 1.0], seed=2, width=6, group_labels=[4])
    b.prompt_ids, b.prompt_mask = b.prompt_ids[:, 1:], b.prompt_mask[:, 1:]  # a narrower prompt
    out = concat_batches([a, b])
    assert out.size == 5
    assert out.response_ids.shape == (5, 6) and out.prompt_ids.shape == (5, a.prompt_ids.shape[1])
    # responses: originals on the left, zeros (and -1 step ids) on the right
    assert torch.equal(out.response_ids[:3, :3], a.response_ids)
    assert (out.response_ids[:3, 3:] == 0).all() and (out.response_mask[:3, 3:] == 0).all()
    assert (out.step_ids[:3, 3:] == -1).all()
    assert torch.equal(out.response_mask[3:], b.response_mask)
    for key, value in a.extras.items():  # [B, T] masks padded, [B] extras (problem_index) kept
        kept = out.extras[key][:3, :3] if value.dim() == 2 else out.extras[key][:3]
        assert torch.equal(kept, value)
    # prompts: originals on the right, zeros on the left
    assert torch.equal(out.prompt_ids[3:, 1:], b.prompt_ids)
    assert (out.prompt_ids[3:, 0] == 0).all() and (out.prompt_mask[3:, 0] == 0).all()
    # the second batch's group 4 is not the first batch's group 4
    assert torch.equal(out.group_ids[:3], a.group_ids)
    assert len(out.group_ids.unique()) == 3
    assert torch.equal(out.rewards, torch.cat([a.rewards, b.rewards]))
    assert concat_batches([a]) is a


def test_concat_batches_rejects_mismatched_optional_fields() -> None:
    a = build_batch([2], [2, 2], [1.0, 0.0], with_ref=True)
    b = build_batch([2], [2, 2], [1.0, 0.0], with_ref=False)
    with pytest.raises(ValueError, match="ref_logprobs"):
        concat_batches([a, b])


# --------------------------------------------------------------------------------------------
# GSPO
# --------------------------------------------------------------------------------------------


@given(seed=st.integers(0, 2**31 - 1), rows=st.integers(1, 4), width=st.integers(1, 6))
def test_gspo_ratio_is_the_geometric_mean_and_its_gradient_is_s_times_the_score(
    seed, rows, width
) -> None:
    gen = torch.Generator().manual_seed(seed)
    old = -4 * torch.rand(rows, width, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    mask = (torch.arange(width) < lengths.unsqueeze(-1)).to(torch.float64)
    new = old + 0.5 * torch.randn(rows, width, generator=gen, dtype=torch.float64)
    new.requires_grad_(True)

    s = gspo_sequence_ratio(new, old, mask)
    by_hand = torch.stack(
        [torch.exp(((new - old)[i, : int(lengths[i])]).mean()) for i in range(rows)]
    )
    torch.testing.assert_close(s, by_hand)
    per_token = importance_ratio(new, old, mask, "sequence")
    torch.testing.assert_close(per_token, s.unsqueeze(-1).expand(rows, width))

    # d s_it / d log pi_it' = s_i [t = t'] : the token's score carried by s_i
    weights = torch.randn(rows, width, generator=gen, dtype=torch.float64) * mask
    (grad,) = torch.autograd.grad((per_token * weights).sum(), new)
    torch.testing.assert_close(grad, s.detach().unsqueeze(-1) * weights)
    # so averaging the token form over a response gives the gradient of s_i itself
    per_token = importance_ratio(new, old, mask, "sequence")
    (grad_tokens,) = torch.autograd.grad(masked_mean(per_token, mask, dim=-1).sum(), new)
    (grad_seq,) = torch.autograd.grad(gspo_sequence_ratio(new, old, mask).sum(), new)
    torch.testing.assert_close(grad_tokens * mask, grad_seq)


# --------------------------------------------------------------------------------------------
# REINFORCE++
# --------------------------------------------------------------------------------------------


masks_with_holes = st.lists(
    st.lists(st.sampled_from([0.0, 1.0]), min_size=4, max_size=4), min_size=2, max_size=5
)


def returns_by_hand(token_rewards: list[list[float]], mask: list[list[float]], gamma: float):
    out = []
    for rewards_row, mask_row in zip(token_rewards, mask, strict=True):
        running, row = 0.0, [0.0] * len(rewards_row)
        for t in range(len(rewards_row) - 1, -1, -1):
            if mask_row[t]:
                running = rewards_row[t] + gamma * running
                row[t] = running
        out.append(row)
    return out


def whiten_by_hand(values: list[list[float]], mask: list[list[float]]):
    kept = [
        v for vr, mr in zip(values, mask, strict=True) for v, m in zip(vr, mr, strict=True) if m
    ]
    mean = sum(kept) / max(len(kept), 1)
    var = sum((v - mean) ** 2 for v in kept) / max(len(kept) - 1, 1)
    return [
        [(v - mean) / (var + 1e-8) ** 0.5 if m else 0.0 for v, m in zip(vr, mr, strict=True)]
        for vr, mr in zip(values, mask, strict=True)
    ]


@given(mask=masks_with_holes, data=st.data(), gamma=st.sampled_from([1.0, 0.9, 0.5]))
def test_reinforce_pp_return_to_go_matches_a_plain_loop(mask, data, gamma) -> None:
    rows, width = len(mask), len(mask[0])
    rewards = data.draw(
        st.lists(st.lists(dyadic, min_size=width, max_size=width), min_size=rows, max_size=rows)
    )
    rewards = [
        [r * m for r, m in zip(rr, mr, strict=True)] for rr, mr in zip(rewards, mask, strict=True)
    ]
    want = whiten_by_hand(returns_by_hand(rewards, mask, gamma), mask)
    got = reinforce_pp_advantages(
        torch.tensor(rewards, dtype=torch.float64), torch.tensor(mask, dtype=torch.float64), gamma
    )
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))


def returns_with_reset(token_rewards: list[list[float]], mask: list[list[float]], gamma: float):
    """verl's return before its PR #7300: the running return resets at every masked position."""
    out = []
    for rewards_row, mask_row in zip(token_rewards, mask, strict=True):
        running, row = 0.0, [0.0] * len(rewards_row)
        for t in range(len(rewards_row) - 1, -1, -1):
            running = rewards_row[t] + gamma * running
            row[t] = running * mask_row[t]
            running *= mask_row[t]
        out.append(row)
    return out


@given(batch=grouped(), gamma=st.sampled_from([1.0, 0.9, 0.5]))
def test_reinforce_pp_on_right_padded_responses_equals_the_reset_rule(batch, gamma) -> None:
    """Carrying the return through masked positions (verl since PR #7300, and here) and
    resetting it there (verl before) agree when every masked position follows the last action."""
    rewards, mask, _ = batch
    token_rewards = outcome_token_rewards(rewards, mask)
    reset = returns_with_reset(token_rewards.tolist(), mask.tolist(), gamma)
    want = whiten_by_hand(reset, mask.tolist())
    got = reinforce_pp_advantages(token_rewards, mask, gamma)
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))


def test_reinforce_pp_carries_the_return_across_a_masked_span() -> None:
    """A reward after a masked span (a tool's output) reaches the actions before it, which the
    reset rule would cut off (verl issue #7278)."""
    mask = [[1.0, 1.0, 0.0, 0.0, 1.0, 1.0]]
    token_rewards = [[0.0, 0.0, 0.0, 0.0, 0.0, 1.0]]
    assert returns_by_hand(token_rewards, mask, 1.0) == [[1.0, 1.0, 0.0, 0.0, 1.0, 1.0]]
    assert returns_with_reset(token_rewards, mask, 1.0) == [[0.0, 0.0, 0.0, 0.0, 1.0, 1.0]]


@given(mask=masks_with_holes, data=st.data(), kl_coef=st.sampled_from([0.0, 0.5, 2.0]))
def test_outcome_reward_sits_on_the_last_response_token(mask, data, kl_coef) -> None:
    rows, width = len(mask), len(mask[0])
    outcome = data.draw(st.lists(dyadic, min_size=rows, max_size=rows))
    kl = data.draw(
        st.lists(st.lists(dyadic, min_size=width, max_size=width), min_size=rows, max_size=rows)
    )
    want = []
    for r, kl_row, mask_row in zip(outcome, kl, mask, strict=True):
        row = [-kl_coef * k * m for k, m in zip(kl_row, mask_row, strict=True)]
        last = max((t for t in range(width) if mask_row[t]), default=None)
        if last is not None:
            row[last] += r
        want.append(row)
    got = outcome_token_rewards(
        torch.tensor(outcome, dtype=torch.float64),
        torch.tensor(mask, dtype=torch.float64),
        torch.tensor(kl, dtype=torch.float64),
        kl_coef,
    )
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))


def assert_whitened(adv: Tensor, mask: Tensor) -> None:
    kept = adv[mask > 0]
    assert abs(float(kept.mean())) < 1e-6
    assert abs(float(kept.var(unbiased=True)) - 1.0) < 1e-4
    assert (adv[mask == 0] == 0).all()


@given(batch=grouped(min_size=2))
def test_reinforce_pp_baseline_is_whitened_over_the_batch(batch) -> None:
    rewards, mask, group_ids = batch
    adv = reinforce_pp_baseline_advantages(rewards, mask, group_ids)
    centred = per_response(drgrpo_advantages(rewards, mask, group_ids))
    assume(float((centred.unsqueeze(-1) * mask)[mask > 0].var()) > 1e-3)
    assert_whitened(adv, mask)
    # whitening is one affine map for the whole batch: the ordering of responses survives
    first = per_response(adv)
    assert (
        (first.unsqueeze(0) - first.unsqueeze(1)) * (centred.unsqueeze(0) - centred.unsqueeze(1))
        >= -1e-9
    ).all()


@given(batch=grouped(), gamma=st.sampled_from([1.0, 0.9]))
def test_reinforce_pp_is_whitened_over_the_batch(batch, gamma) -> None:
    rewards, mask, _ = batch
    token_rewards = outcome_token_rewards(rewards, mask)
    adv = reinforce_pp_advantages(token_rewards, mask, gamma)
    assume(int(mask.sum()) >= 2)
    returns = torch.tensor(returns_by_hand(token_rewards.tolist(), mask.tolist(), gamma))
    assume(float(returns[mask > 0].var()) > 1e-3)
    assert_whitened(adv, mask)


# --------------------------------------------------------------------------------------------
# Dr. GRPO's constant normaliser
# --------------------------------------------------------------------------------------------


def test_dr_grpo_default_constant_is_the_generation_limit() -> None:
    """horizon 0 divides by services.max_new_tokens (Dr. GRPO's generation budget), whatever
    the batch's padded width; without services, by the padded width."""
    batch = build_batch([3, 2], [2, 5, 3, 1, 4], [1.0, 0.0, 0.5, 1.0, 0.0], seed=3)
    method = DrGRPO()
    adv = method.advantages(batch)
    logprobs = batch.old_logprobs.clone()
    loss, _ = method.loss(logprobs, batch, adv, services=FakeServices(max_new_tokens=32))
    want = -(adv * batch.response_mask).sum() / (batch.size * 32)
    torch.testing.assert_close(loss, want)
    bare, _ = method.loss(logprobs, batch, adv)
    width = batch.response_mask.shape[-1]
    torch.testing.assert_close(bare, -(adv * batch.response_mask).sum() / (batch.size * width))
    explicit, _ = DrGRPO(horizon=8.0).loss(logprobs, batch, adv, services=FakeServices())
    torch.testing.assert_close(explicit, -(adv * batch.response_mask).sum() / (batch.size * 8))


@given(extra=st.integers(1, 4), horizon=st.sampled_from([8.0, 16.0]))
def test_dr_grpo_loss_divides_by_the_constant_horizon(extra, horizon) -> None:
    batch = build_batch([3, 2], [2, 5, 3, 1, 4], [1.0, 0.0, 0.5, 1.0, 0.0], seed=3)
    method = DrGRPO(horizon=horizon)
    adv = method.advantages(batch)
    loss, _ = method.loss(batch.old_logprobs.clone(), batch, adv)  # on-policy: ratio 1
    want = -(adv * batch.response_mask).sum() / (batch.size * horizon)
    torch.testing.assert_close(loss, want)
    # the same responses padded wider give the same loss: the normaliser is not the width
    wider = replace(
        batch,
        response_mask=torch.nn.functional.pad(batch.response_mask, (0, extra)),
        old_logprobs=torch.nn.functional.pad(batch.old_logprobs, (0, extra), value=-1.0),
    )
    wider_loss, _ = method.loss(wider.old_logprobs.clone(), wider, method.advantages(wider))
    torch.testing.assert_close(wider_loss, loss)
