"""TEMPO: GRPO's credit plus branch-gated TD corrections from the group's prefix tree."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from creditbench.methods.core import RolloutBatch
from creditbench.methods.grpo import GRPO, grpo_scores
from creditbench.methods.tempo import TEMPO, TEMPOConfig, tree_values

from strategies import rollout_batches, same_within_groups

# three token ids: a group's responses share prefixes and part often
branching_batches = rollout_batches(max_group_size=6, vocab=3)


def scores_of(batch: RolloutBatch) -> torch.Tensor:
    return grpo_scores(batch.rewards, batch.group_ids, TEMPO().config)


@given(batch=branching_batches)
def test_a_group_that_never_branches_gets_grpos_credit(batch):
    batch = same_within_groups(batch)  # every response of a group the same tokens
    torch.testing.assert_close(TEMPO().advantages(batch), GRPO().advantages(batch))


@given(batch=branching_batches)
def test_credit_differs_from_grpo_only_at_branching_tokens(batch):
    before, after, branches = tree_values(
        scores_of(batch), batch.response_ids, batch.response_mask, batch.group_ids
    )
    valid = batch.response_mask > 0
    difference = TEMPO().advantages(batch) - GRPO().advantages(batch)
    assert (difference[~(branches & valid)] == 0).all()
    # the gate only says what the tree says: a node with one child keeps its value
    torch.testing.assert_close(after[valid & ~branches], before[valid & ~branches])


@given(batch=branching_batches)
def test_a_nodes_value_is_the_mean_score_of_the_responses_through_it(batch):
    scores = scores_of(batch)
    _, after, _ = tree_values(scores, batch.response_ids, batch.response_mask, batch.group_ids)
    ids = batch.response_ids.masked_fill(batch.response_mask <= 0, -1)
    for i in range(batch.size):
        for t in range(ids.shape[1]):
            through = (batch.group_ids == batch.group_ids[i]) & (
                ids[:, : t + 1] == ids[i, : t + 1]
            ).all(-1)
            assert after[i, t].item() == pytest.approx(scores[through].mean().item(), abs=1e-5)


@given(batch=branching_batches)
def test_the_corrections_of_a_response_telescope(batch):
    """Σ_t δ_it = V(after its last token) - V(prompt); the root's value is the group's mean
    z-score, 0 wherever the rewards differ."""
    scores = scores_of(batch)
    before, after, _ = tree_values(scores, batch.response_ids, batch.response_mask, batch.group_ids)
    corrections = TEMPO().advantages(batch) - scores.unsqueeze(-1) * batch.response_mask
    last = batch.response_mask.sum(-1).long() - 1  # the masks are contiguous from 0
    expected = after.gather(1, last.unsqueeze(-1)).squeeze(-1) - before[:, 0]
    torch.testing.assert_close(corrections.sum(-1), expected, atol=1e-5, rtol=0)
    assert before[:, 0].abs().max() < 1e-5


def test_a_worked_group():
    """Four responses over two branch points: the correction at a branch is the child's value
    minus the parent's."""
    ids = torch.tensor([[1, 2, 3], [1, 2, 4], [1, 3, 3], [1, 3, 3]])
    batch = RolloutBatch(
        prompt_ids=torch.ones(4, 1, dtype=torch.long),
        prompt_mask=torch.ones(4, 1),
        response_ids=ids,
        response_mask=torch.ones(4, 3),
        group_ids=torch.zeros(4, dtype=torch.long),
        rewards=torch.tensor([1.0, 0.0, 1.0, 1.0]),
        old_logprobs=torch.zeros(4, 3),
    )
    r = scores_of(batch)  # [0.5, -1.5, 0.5, 0.5]
    torch.testing.assert_close(r, torch.tensor([0.5, -1.5, 0.5, 0.5]))
    got = TEMPO().advantages(batch)
    # t = 1: the node "1" parts into "1 2" (value -0.5) and "1 3" (value 0.5), its value is 0
    # t = 2: the node "1 2" parts into "1 2 3" (0.5) and "1 2 4" (-1.5)
    expected = torch.tensor(
        [
            [0.5, 0.5 - 0.5, 0.5 + 1.0],
            [-1.5, -1.5 - 0.5, -1.5 - 1.0],
            [0.5, 0.5 + 0.5, 0.5],
            [0.5, 0.5 + 0.5, 0.5],
        ]
    )
    torch.testing.assert_close(got, expected)


@given(batch=branching_batches)
def test_td_weight_zero_is_grpo(batch):
    torch.testing.assert_close(TEMPO(td_weight=0.0).advantages(batch), GRPO().advantages(batch))


def test_a_negative_td_weight_is_refused():
    with pytest.raises(ValueError, match="td_weight"):
        TEMPOConfig(td_weight=-1.0)
