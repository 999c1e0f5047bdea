"""The per-step statistics that say how much signal outcome credit has: all-fail and mixed
groups."""

from __future__ import annotations

import torch

from creditbench.harness.diagnostics.step import group_outcome_shares


def test_all_fail_and_mixed_shares_count_groups_of_two_or_more():
    rewards = torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    groups = torch.tensor([5, 5, 9, 9, 2, 2, 7])  # group 7 has one response: not counted
    all_fail, mixed = group_outcome_shares(rewards, groups)
    assert all_fail == 1 / 3 and mixed == 1 / 3
    assert group_outcome_shares(torch.tensor([1.0]), torch.tensor([0])) == (0.0, 0.0)
    # interleaved rows and a reward just above the pass line
    rewards = torch.tensor([0.0, 0.6, 0.0, 0.0])
    assert group_outcome_shares(rewards, torch.tensor([0, 1, 1, 0])) == (0.5, 0.5)
