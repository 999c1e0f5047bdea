"""The prefix tree of a group: which responses share each token, and the mean score under it.

The G responses to one prompt, sampled independently, often start alike and part somewhere.
Read as a tree, a node is a prefix (the prompt and the first tokens of a response) and its
children are the tokens that follow it in the group. Two readers of the same tree live here:
the token-gradient cancellation diagnostic (which responses share a token) and TEMPO's values
(the mean outcome of the responses under a node).
"""

from __future__ import annotations

import torch
from torch import Tensor

ENDED = -1  # the id of every position after a response's end: an end is a child of its node


def prefix_classes(
    response_ids: Tensor,
    group_ids: Tensor,
    prompt_ids: Tensor | None = None,
    prompt_mask: Tensor | None = None,
) -> tuple[Tensor, int]:
    """Which rows share each token, and how deep any sharing goes.

    Args:
        response_ids: ``[B, T]`` token ids (give padding its own id, such as -1, for a row's
            end to count as a branch).
        group_ids: ``[B]``; rows of different groups never share.
        prompt_ids, prompt_mask: ``[B, P]``; when given, rows with different prompts never
            share.

    Returns:
        ``(classes, depth)``: ``classes`` ``[B, T]`` long, two rows hold the same class at
        position t exactly when they are in one group, have the same prompt (when given) and
        the same token ids at positions 0..t; from position ``depth`` on every row is alone.
    """
    rows, width = response_ids.shape
    key = group_ids.unsqueeze(-1)
    if prompt_ids is not None and prompt_mask is not None:
        key = torch.cat([key, prompt_ids * (prompt_mask > 0), (prompt_mask > 0).long()], -1)
    _, cls = torch.unique(key, dim=0, return_inverse=True)
    out = torch.arange(rows, device=response_ids.device).unsqueeze(-1).expand(rows, width).clone()
    for t in range(width):
        pair = torch.stack([cls, response_ids[:, t]], -1)
        labels, cls = torch.unique(pair, dim=0, return_inverse=True)
        if labels.shape[0] == rows:  # every row alone: prefixes only grow apart
            return out, t
        out[:, t] = cls
    return out, width


def class_means(scores: Tensor, classes: Tensor) -> Tensor:
    """``[B, T]`` the mean of ``scores`` over the rows of each row's class, position by position.

    Args:
        scores: ``[B]`` one score per row.
        classes: ``[B, T]`` long class labels (:func:`prefix_classes`), numbered 0..B-1 or
            below at each position.
    """
    rows, width = classes.shape
    sums = torch.zeros(rows, width, dtype=scores.dtype, device=scores.device)
    counts = torch.zeros_like(sums)
    sums.scatter_add_(0, classes, scores.unsqueeze(-1).expand(rows, width).contiguous())
    counts.scatter_add_(0, classes, torch.ones_like(sums))
    return sums.gather(0, classes) / counts.gather(0, classes)


def child_counts(classes: Tensor, parents: Tensor) -> Tensor:
    """``[B, T]`` how many distinct children the node before each token has: the number of
    classes at position t among the rows that share the parent node ``parents[:, t]``.

    Args:
        classes: ``[B, T]`` the node after token t (:func:`prefix_classes`).
        parents: ``[B, T]`` the node before token t, numbered like ``classes`` (its column t
            is the class of position t - 1, or the group at t = 0).
    """
    rows, width = classes.shape
    present = torch.zeros(rows, width, dtype=torch.long, device=classes.device)
    present.scatter_(0, classes, 1)  # [class, T] 1 where the class exists at t
    parent_of = torch.zeros_like(present)
    parent_of.scatter_(0, classes, parents)  # every row of a class has the same parent
    children = torch.zeros_like(present)
    children.scatter_add_(0, parent_of, present)  # absent classes add 0
    return children.gather(0, parents)


def response_tree(
    response_ids: Tensor, response_mask: Tensor, group_ids: Tensor
) -> tuple[Tensor, Tensor]:
    """The tree of each group's responses: ``(classes, parents)``, both ``[B, T]`` long, the
    node after token t (:func:`prefix_classes`) and the node before it (the group's prompt
    node at t = 0). Positions off the response get the id :data:`ENDED`, so a response's end
    is a child of its last node."""
    ids = response_ids.masked_fill(response_mask <= 0, ENDED)
    classes, _ = prefix_classes(ids, group_ids)
    _, groups = torch.unique(group_ids, return_inverse=True)
    return classes, torch.cat([groups.unsqueeze(-1), classes[:, :-1]], dim=1)


def node_values(scores: Tensor, classes: Tensor, parents: Tensor) -> tuple[Tensor, Tensor]:
    """``(before, after)``, both ``[B, T]``: the mean of ``scores`` ``[B]`` over the rows
    through the node before each token and through the node after it."""
    after = class_means(scores, classes)
    root = class_means(scores, parents[:, :1])  # the prompt node's value
    return torch.cat([root, after[:, :-1]], dim=1), after


def class_sizes(classes: Tensor) -> Tensor:
    """``[B, T]`` how many rows hold each row's class at each position."""
    counts = torch.zeros_like(classes)
    counts.scatter_add_(0, classes, torch.ones_like(classes))
    return counts.gather(0, classes)
