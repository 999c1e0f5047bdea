"""The tests' short name for the batch strategies (``from strategies import build_batch``).

They live in the installed conformance suite, `creditbench.harness.conformance.strategies`,
so that ``creditbench conformance NAME`` can run them on a method outside this repository.
"""

from __future__ import annotations

from creditbench.harness.conformance.strategies import (
    PROMPT_WIDTH,
    VOCAB,
    build_batch,
    pad_more,
    permute_groups,
    permute_within_groups,
    perturb_group_rewards,
    rollout_batches,
    same_within_groups,
)

__all__ = [
    "PROMPT_WIDTH",
    "VOCAB",
    "build_batch",
    "pad_more",
    "permute_groups",
    "permute_within_groups",
    "perturb_group_rewards",
    "rollout_batches",
    "same_within_groups",
]
