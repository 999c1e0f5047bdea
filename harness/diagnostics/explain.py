"""Credit you can read: a batch's responses as text pieces with each token's advantage.

:func:`response_samples` turns a batch and its ``[B, T]`` advantages into JSON-safe records, one
per response: the prompt, the response as one text piece per token, the token advantages, the
reward, and where the step checker puts the first wrong step (token indices; empty for a
response without one). The trainer appends the samples of the batch it trained on just before
each evaluation to the run's ``responses.jsonl`` (:meth:`RunDir.append_responses`), and
``creditbench explain RUN --step N`` draws them; ``tools.explain`` puts several
methods side by side on one fresh batch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from creditbench.methods.contract import FIRST_WRONG_MASK
from creditbench.methods.core import RolloutBatch

LOGGED_RESPONSES = 8
"""Responses of the batch before each evaluation that a run logs: one group of the default
size (a group with both a passed and a failed response first, when there is one)."""


def _order(batch: RolloutBatch) -> list[int]:
    """Row indices, group by group, groups with both outcomes first, then the rest in order."""
    groups: dict[int, list[int]] = {}
    for row, group in enumerate(batch.group_ids.tolist()):
        groups.setdefault(int(group), []).append(row)
    passed = batch.rewards > 0.5

    def mixed(rows: list[int]) -> bool:
        outcomes = {bool(passed[r]) for r in rows}
        return len(outcomes) == 2

    ordered = sorted(groups.values(), key=lambda rows: not mixed(rows))
    return [row for rows in ordered for row in rows]


def response_samples(
    batch: RolloutBatch,
    advantages: Tensor,
    tokenizer: Any,
    *,
    limit: int = LOGGED_RESPONSES,
    rows: list[int] | None = None,
) -> list[dict[str, Any]]:
    """Up to ``limit`` responses of ``batch`` (``rows``, or whole groups, mixed groups first)
    as records: ``prompt``, ``tokens`` (one decoded piece per loss-carrying token), ``advantages``
    (``[T]`` as floats), ``reward``, ``group`` and ``first_wrong`` (indices into ``tokens``)."""
    chosen = rows if rows is not None else _order(batch)[:limit]
    first_wrong = (batch.extras or {}).get(FIRST_WRONG_MASK)
    out = []
    for row in chosen:
        keep = batch.response_mask[row].bool()
        ids = batch.response_ids[row][keep].tolist()
        prompt_ids = batch.prompt_ids[row][batch.prompt_mask[row].bool()].tolist()
        wrong = first_wrong[row][keep] if first_wrong is not None else torch.zeros(len(ids))
        out.append(
            {
                "group": int(batch.group_ids[row]),
                "reward": float(batch.rewards[row]),
                "prompt": tokenizer.decode(prompt_ids),
                "tokens": [tokenizer.decode([i]) for i in ids],
                "advantages": [round(float(a), 6) for a in advantages[row][keep]],
                "first_wrong": [i for i, w in enumerate(wrong.tolist()) if w],
            }
        )
    return out
