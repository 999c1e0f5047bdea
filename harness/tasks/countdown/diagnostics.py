"""Where each mechanism class acts in the countdown world, measured on a batch.

The world was chosen so that entropy, fork, key-token and tree credit have something to act on
(``docs/worlds/countdown.md``). :func:`mechanism_shares` says how much: of a batch's response
tokens, which are decisions (a step line's characters before its ``=``: the two numbers and
the operation), where the group's prefix tree branches and whether those are decisions, whether
the highest-entropy tokens are decisions, how long a prefix responses share, and how often a
failure is a dead end. The method pages quote its figures; the chain's equivalents are on the
TEMPO and forking pages (2.2% of tokens below a branching node there, 79% of them fillers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from creditbench.harness.tasks.countdown.grammar import layout
from creditbench.methods.prefix_tree import child_counts, response_tree


def decision_spans(text: str) -> list[tuple[int, int]]:
    """The decision characters of every step line: from its start to its first ``=`` (the
    whole line when it has none)."""
    spans = []
    for start, end in layout(text).steps:
        equals = text.find("=", start, end)
        spans.append((start, equals if equals >= 0 else end))
    return spans


def decision_mask(
    texts: Sequence[str], offsets: Sequence[Sequence[tuple[int, int]]], width: int
) -> Tensor:
    """``[B, T]`` 1 on the tokens that overlap a decision span of their response's text."""
    mask = torch.zeros(len(texts), width)
    for row, (text, spans) in enumerate(zip(texts, offsets, strict=True)):
        decisions = decision_spans(text)
        for t, (s, e) in enumerate(spans[:width]):
            if any(s < de and ds < e for ds, de in decisions):
                mask[row, t] = 1.0
    return mask


def top_entropy_mask(entropy: Tensor, response_mask: Tensor, rho: float) -> Tensor:
    """``[B, T]`` 1 on the batch's top ``rho`` share of response tokens by entropy (ties
    kept): the 80/20 rule's selection (arXiv 2506.01939, §5.1), as `forking` makes it."""
    valid = response_mask > 0
    keep = min(int(valid.sum()), max(1, math.ceil(rho * int(valid.sum()) - 1e-9)))
    threshold = entropy[valid].topk(keep).values.min()
    return ((entropy >= threshold) & valid).float()


def mechanism_shares(
    *,
    texts: Sequence[str],
    offsets: Sequence[Sequence[tuple[int, int]]],
    response_ids: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    entropy: Tensor,
    first_wrong_kinds: Sequence[str | None],
    rho: float = 0.2,
) -> dict[str, float]:
    """The shares of one batch (``[B, T]`` tensors, ``texts`` the decoded responses and
    ``offsets`` their tokens' character spans, ``first_wrong_kinds`` each response's first
    wrong step's kind, None where it is right).

    Returns:
        ``decision_tokens``: share of response tokens that are decisions;
        ``branch_tokens``: share of response tokens whose prefix node has two or more children
        in the group's tree (TEMPO's and T-SPMO's branching tokens);
        ``branch_decisions``: share of those that are decisions;
        ``groups_parting_at_first_token``: share of groups whose tree branches at token 0;
        ``shared_prefix``: mean over responses of the share of its tokens shared with another
        response of its group (the tree's depth over it);
        ``entropy_decisions``: share of the top ``rho`` tokens by entropy that are decisions;
        ``failures_at_dead_end``: share of failed responses whose first wrong step is a dead
        end (NaN when none failed).
    """
    mask = response_mask > 0
    decisions = decision_mask(texts, offsets, response_ids.shape[1]) * response_mask
    ids = torch.where(mask, response_ids, torch.full_like(response_ids, -1))
    classes, parents = response_tree(ids, response_mask, group_ids)
    branches = (child_counts(classes, parents) >= 2) & mask
    shared = torch.zeros_like(response_mask)
    for t in range(classes.shape[1]):
        column = classes[:, t]
        shared[:, t] = (column.unsqueeze(0) == column.unsqueeze(1)).sum(0) > 1
    shared = shared * response_mask
    top = top_entropy_mask(entropy, response_mask, rho)
    groups = group_ids.unique()
    first_branch = [bool(branches[group_ids == g, 0].any()) for g in groups]
    failed = [kind for kind in first_wrong_kinds if kind is not None]
    total = float(response_mask.sum())
    return {
        "decision_tokens": float(decisions.sum()) / total,
        "branch_tokens": float(branches.sum()) / total,
        "branch_decisions": float((decisions * branches).sum()) / max(1.0, float(branches.sum())),
        "groups_parting_at_first_token": sum(first_branch) / len(first_branch),
        "shared_prefix": float((shared.sum(-1) / response_mask.sum(-1).clamp(min=1)).mean()),
        "entropy_decisions": float((decisions * top).sum()) / float(top.sum()),
        "failures_at_dead_end": (
            sum(kind == "dead end" for kind in failed) / len(failed) if failed else math.nan
        ),
    }


def measure(services: Any, batches: int, rho: float = 0.2) -> dict[str, float]:
    """:func:`mechanism_shares` averaged over ``batches`` of the default rollout, drawn with
    the harness ``services`` of a countdown run (its behaviour entropies from one scoring
    pass)."""
    from creditbench.harness.tasks.steps import token_char_offsets
    from creditbench.methods.contract import BEHAVIOUR_ENTROPY

    rows: list[dict[str, float]] = []
    for _ in range(batches):
        batch = services.sample_batch()
        _, statistics = services.scoring.score_with_statistics(batch, [BEHAVIOUR_ENTROPY])
        tokenizer = services.tokenizer
        texts, offsets, kinds = [], [], []
        problems = services.problems(batch)
        for row in range(batch.response_ids.shape[0]):
            ids = batch.response_ids[row][batch.response_mask[row] > 0].tolist()
            text = tokenizer.decode(ids, skip_special_tokens=True)
            texts.append(text)
            offsets.append(token_char_offsets(tokenizer, ids))
            wrong = services.task.check_steps(problems[row], text).wrong
            kinds.append(wrong[0].kind if wrong else None)
        rows.append(
            mechanism_shares(
                texts=texts,
                offsets=offsets,
                response_ids=batch.response_ids,
                response_mask=batch.response_mask,
                group_ids=batch.group_ids,
                entropy=statistics[BEHAVIOUR_ENTROPY],
                first_wrong_kinds=kinds,
                rho=rho,
            )
        )
    return {key: sum(r[key] for r in rows) / len(rows) for key in rows[0]}
