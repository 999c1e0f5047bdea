"""T-SPMO: the credit of a (prefix, token) pair is the mean reward after it minus before it."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.methods.tempo import tree_values
from creditbench.methods.tspmo import TSPMO, prefix_matching_credit

from strategies import rollout_batches, same_within_groups

branching_batches = rollout_batches(max_group_size=6, vocab=3)  # groups that part often


def brute_force_pair_credit(batch, i: int, t: int) -> tuple[float, int]:
    """``A(p, v)`` of row i's pair at position t, and how many rows share the pair."""
    ids = batch.response_ids.masked_fill(batch.response_mask <= 0, -1)
    group = batch.group_ids == batch.group_ids[i]
    through_p = group & (ids[:, :t] == ids[i, :t]).all(-1)
    through_pv = through_p & (ids[:, t] == ids[i, t])
    credit = batch.rewards[through_pv].mean() - batch.rewards[through_p].mean()
    return float(credit), int(through_pv.sum())


@given(batch=branching_batches)
def test_each_rows_share_of_its_pairs_credit(batch):
    got = TSPMO().advantages(batch)
    for i in range(batch.size):
        for t in range(batch.response_ids.shape[1]):
            if batch.response_mask[i, t] == 0:
                assert got[i, t] == 0
                continue
            credit, rows = brute_force_pair_credit(batch, i, t)
            assert got[i, t].item() == pytest.approx(credit / rows, abs=1e-5)


@given(batch=branching_batches)
def test_a_prefix_the_whole_group_shares_gets_no_credit(batch):
    batch = same_within_groups(batch)  # every response of a group the same tokens
    # every token's value is the group's mean reward, before it and after it
    before, after, _ = tree_values(
        batch.rewards, batch.response_ids, batch.response_mask, batch.group_ids
    )
    group_mean = torch.stack([batch.rewards[batch.group_ids == g].mean() for g in batch.group_ids])
    valid = batch.response_mask > 0
    means = group_mean.unsqueeze(-1).expand_as(after)
    torch.testing.assert_close(after[valid], means[valid])
    torch.testing.assert_close(before[valid], means[valid])
    assert (TSPMO().advantages(batch) == 0).all()
    assert TSPMO().loss_mask(batch).sum() == 0


@given(batch=branching_batches)
def test_credit_only_where_the_group_parts_and_the_loss_counts_those_tokens(batch):
    _, _, branches = tree_values(
        batch.rewards, batch.response_ids, batch.response_mask, batch.group_ids
    )
    method = TSPMO()
    credit = method.advantages(batch)
    assert (credit[~branches] == 0).all()
    torch.testing.assert_close(method.loss_mask(batch), batch.response_mask * (credit != 0))


@given(batch=branching_batches, shift=st.sampled_from([-1.0, 0.5, 3.0]))
def test_a_constant_added_to_every_reward_changes_nothing(batch, shift):
    """The baseline is the mean reward through the prefix: a shift cancels."""
    moved = prefix_matching_credit(
        batch.rewards + shift, batch.response_ids, batch.response_mask, batch.group_ids
    )
    torch.testing.assert_close(moved, TSPMO().advantages(batch), atol=1e-5, rtol=0)
