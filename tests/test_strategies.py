"""The test batches themselves are valid, and the transformations do what they say: the
other property tests are only as good as these."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.methods.contract import PROBLEM_INDEX, STEP_TRUTH_KEYS
from creditbench.methods.core import RolloutBatch

from strategies import (
    pad_more,
    permute_groups,
    permute_within_groups,
    perturb_group_rewards,
    rollout_batches,
)


@given(rollout_batches(extras=True))
def test_batches_are_valid_and_their_step_ground_truth_consistent(batch: RolloutBatch) -> None:
    mask = batch.response_mask
    lengths = mask.sum(-1)
    assert (lengths >= 1).all()
    # Right padding: the mask is a prefix of ones.
    assert torch.equal(mask, (torch.arange(mask.shape[-1]) < lengths.unsqueeze(-1)).float())
    assert (batch.old_logprobs < 0).all()
    assert set(batch.extras) == {*STEP_TRUTH_KEYS, PROBLEM_INDEX}
    # one problem per group, as a graded batch carries it
    index = batch.extras[PROBLEM_INDEX]
    for label in batch.group_ids.unique():
        assert len(index[batch.group_ids == label].unique()) == 1
    first, after = batch.extras["first_wrong_mask"], batch.extras["after_wrong_mask"]
    wrong, filler = batch.extras["wrong_step_mask"], batch.extras["filler_mask"]
    for key in STEP_TRUTH_KEYS:
        extra = batch.extras[key]
        assert ((extra == 0) | (mask == 1)).all(), "ground truth outside the response"
    steps = batch.step_ids
    assert torch.equal(steps < 0, mask == 0)
    for i in range(batch.size):
        n = int(lengths[i])
        row = steps[i, :n]
        assert row[0] == 0 and ((row.diff() == 0) | (row.diff() == 1)).all()
        assert ((wrong[i] == 1) | (first[i] == 0)).all(), "first wrong step not marked wrong"
        if batch.rewards[i] < 1:
            on_first = first[i, :n].nonzero().squeeze(-1)
            assert len(on_first) > 0, "failed response without a first wrong step"
            assert len(row[on_first].unique()) == 1, "first wrong mask spans two steps"
            beyond = torch.arange(n) > on_first.max()
            assert torch.equal(after[i, :n].bool(), beyond)
        else:
            assert first[i].sum() == 0 and after[i].sum() == 0
    assert filler.sum() <= mask.sum()


@given(rollout_batches(), st.integers(0, 2**31 - 1), st.integers(1, 3))
def test_transformations_move_whole_rows(batch: RolloutBatch, seed: int, extra: int) -> None:
    within, index = permute_within_groups(batch, seed)
    assert torch.equal(within.group_ids, batch.group_ids), "rows left their group's positions"
    assert torch.equal(within.response_ids, batch.response_ids[index])
    assert sorted(index.tolist()) == list(range(batch.size))

    moved, index = permute_groups(batch, seed, relabel=True)
    assert torch.equal(moved.old_logprobs, batch.old_logprobs[index])
    # Each group's rows are adjacent, and relabelled groups are still told apart.
    changes = (moved.group_ids.diff() != 0).sum()
    assert changes + 1 == len(batch.group_ids.unique()) == len(moved.group_ids.unique())
    assert torch.equal(
        moved.group_ids.unique(return_counts=True)[1].sort().values,
        batch.group_ids.unique(return_counts=True)[1].sort().values,
    )

    padded = pad_more(batch, extra, seed)
    width = batch.response_mask.shape[-1]
    assert padded.response_mask.shape[-1] == width + extra
    assert padded.response_mask[:, width:].sum() == 0
    assert torch.equal(padded.old_logprobs[:, :width], batch.old_logprobs)

    group = int(batch.group_ids[0])
    changed = perturb_group_rewards(batch, group)
    same = batch.group_ids != group
    assert torch.equal(changed.rewards[same], batch.rewards[same])
    assert torch.equal(changed.rewards[~same], 1 - batch.rewards[~same])
