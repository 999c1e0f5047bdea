"""Token-level Levenshtein alignment and the bilateral edit masks it gives (IBPO, IOP).

:func:`align` and :func:`edit_masks` are pure Python on sequences of hashable tokens (token
ids, characters); :func:`pair_edit_masks` applies them to the rows of a batch with torch.

An alignment of ``a`` and ``b`` is a list of operations ``(kind, i, j)`` that walks both
sequences left to right: ``MATCH`` (``a[i] == b[j]``), ``SUB`` (``a[i]`` replaced by ``b[j]``),
``DEL`` (``a[i]`` dropped, ``j = -1``) and ``INS`` (``b[j]`` added, ``i = -1``). With unit costs
the number of non-``MATCH`` operations is the edit distance.

Tie-break (several minimal alignments exist): the longest common prefix and suffix are matched
first, then the middle is backtraced from its end preferring a diagonal step (match or
substitution), then a deletion, then an insertion. Adding a common prefix or suffix to both
sequences therefore only shifts the masks.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

MATCH, SUB, DEL, INS = "match", "sub", "del", "ins"

Op = tuple[str, int, int]


def align(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[Op]:
    """A minimal-cost (unit Levenshtein) alignment of ``a`` and ``b``, in order."""
    n, m = len(a), len(b)
    head = 0
    while head < min(n, m) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(n, m) - head and a[n - 1 - tail] == b[m - 1 - tail]:
        tail += 1
    x, y = a[head : n - tail], b[head : m - tail]
    rows, cols = len(x), len(y)
    # cost[i][j]: edit distance of x[:i] and y[:j]
    cost = [list(range(cols + 1))]
    for i in range(1, rows + 1):
        row = [i] + [0] * cols
        above = cost[i - 1]
        for j in range(1, cols + 1):
            diagonal = above[j - 1] + (x[i - 1] != y[j - 1])
            row[j] = min(diagonal, above[j] + 1, row[j - 1] + 1)
        cost.append(row)
    middle: list[Op] = []
    i, j = rows, cols
    while i > 0 or j > 0:
        if i > 0 and j > 0 and cost[i][j] == cost[i - 1][j - 1] + (x[i - 1] != y[j - 1]):
            kind = MATCH if x[i - 1] == y[j - 1] else SUB
            middle.append((kind, head + i - 1, head + j - 1))
            i, j = i - 1, j - 1
        elif i > 0 and cost[i][j] == cost[i - 1][j] + 1:
            middle.append((DEL, head + i - 1, -1))
            i -= 1
        else:
            middle.append((INS, -1, head + j - 1))
            j -= 1
    prefix = [(MATCH, k, k) for k in range(head)]
    suffix = [(MATCH, n - tail + k, m - tail + k) for k in range(tail)]
    return prefix + middle[::-1] + suffix


def edit_distance(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """The unit-cost Levenshtein distance: substitutions, deletions and insertions."""
    return sum(kind != MATCH for kind, _, _ in align(a, b))


def edit_masks(
    a: Sequence[Hashable], b: Sequence[Hashable], max_edits: int = 0
) -> tuple[list[int], list[int]]:
    """Bilateral edit masks: 1 on the tokens of ``a`` deleted or substituted, and on the tokens
    of ``b`` inserted or substituted, by the alignment of :func:`align`.

    ``max_edits > 0`` keeps only the first ``max_edits`` edit operations (in the order of the
    alignment); a substitution is one operation that marks one token on each side.
    """
    if max_edits < 0:
        raise ValueError(f"max_edits: must be >= 0 (got {max_edits!r})")
    mask_a, mask_b = [0] * len(a), [0] * len(b)
    edits = 0
    for kind, i, j in align(a, b):
        if kind == MATCH:
            continue
        if max_edits and edits >= max_edits:
            break
        edits += 1
        if i >= 0:
            mask_a[i] = 1
        if j >= 0:
            mask_b[j] = 1
    return mask_a, mask_b


def pair_edit_masks(
    response_ids: Tensor,
    response_mask: Tensor,
    pair_ids: Tensor,
    is_repair: Tensor,
    max_edits: int = 0,
) -> Tensor:
    """The bilateral edit masks of every (failed, repair) pair of rows of a batch.

    Args:
        response_ids: ``[B, T]`` response tokens; those under ``response_mask`` are aligned.
        response_mask: ``[B, T]`` 1 on response tokens.
        pair_ids: ``[B]`` long, the same id ``>= 0`` on a failed row and its repair, -1 elsewhere.
        is_repair: ``[B]`` bool, which row of a pair is the repair.
        max_edits: keep the first ``max_edits`` edit operations (0: all), see :func:`edit_masks`.

    Returns:
        ``[B, T]`` float: 1 on the edited tokens of both rows of each pair, 0 elsewhere (also on
        the rows of a pair that lacks its other half).
    """
    out = torch.zeros_like(response_mask)
    rows: dict[int, dict[bool, int]] = {}
    for row, (label, side) in enumerate(zip(pair_ids.tolist(), is_repair.tolist(), strict=True)):
        if label >= 0:
            rows.setdefault(label, {})[bool(side)] = row
    for pair in rows.values():
        if len(pair) < 2:
            continue
        failed, repair = pair[False], pair[True]
        at_failed = (response_mask[failed] > 0).nonzero().squeeze(-1)
        at_repair = (response_mask[repair] > 0).nonzero().squeeze(-1)
        mask_failed, mask_repair = edit_masks(
            response_ids[failed, at_failed].tolist(),
            response_ids[repair, at_repair].tolist(),
            max_edits,
        )
        out[failed, at_failed] = torch.tensor(mask_failed, dtype=out.dtype)
        out[repair, at_repair] = torch.tensor(mask_repair, dtype=out.dtype)
    return out
