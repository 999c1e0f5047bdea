"""Credit diagnostics: does a method blame the tokens that went wrong?

On the testbed the step checker marks, for every failed response, the tokens of its first wrong
step (``first_wrong_mask``, see ``methods.contract.STEP_TRUTH_KEYS``). Given one step's token
advantages, :func:`credit_diagnostics` measures how a method's negative credit lines up with that
label.

Definitions (all over the *scored* responses: failed, ``reward <= 0.5``, with at least one
first-wrong token; only tokens with ``response_mask = 1`` count; ``neg_t = max(-A_t, 0)``):

    credit_precision = sum_t neg_t · first_wrong_t / sum_t neg_t
        the share of the negative credit mass that falls on first-wrong-step tokens;
        NaN when the scored responses carry no negative credit at all.

    credit_auroc = P(-A_t > -A_u) + 1/2 · P(-A_t = -A_u),
        t a first-wrong token and u any other token of a scored response, pooled over the
        batch: the Mann-Whitney U statistic over n_pos · n_neg, with tied scores given their
        average rank. 1 = every first-wrong token is blamed more than every other token,
        0.5 = no information (GRPO's uniform credit scores exactly 0.5), NaN when one class
        is empty.

    credit_chance = sum_t first_wrong_t / sum_t 1
        the precision a uniform spread of blame over the pooled tokens would get: the level
        to read ``credit_precision`` against.

Torch only, so the trainer can call it every step on the batch it already holds.
"""

from __future__ import annotations

import torch
from torch import Tensor

CREDIT_KEYS = ("credit_precision", "credit_auroc", "credit_chance", "credit_responses")
"""The keys :func:`credit_diagnostics` returns (and the trainer logs per step)."""


def auroc(scores: Tensor, labels: Tensor) -> float:
    """Rank-based AUROC of ``scores`` [N] against boolean ``labels`` [N]; ties count one half.

    NaN when all labels are equal.
    """
    scores = scores.detach().to(torch.float64).flatten()
    labels = labels.detach().bool().flatten()
    n_pos = int(labels.sum())
    n_neg = labels.numel() - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = torch.unique(scores, sorted=True, return_inverse=True, return_counts=True)
    last_rank = counts.cumsum(0).to(torch.float64)  # 1-based rank of each value's last copy
    average_rank = last_rank - (counts.to(torch.float64) - 1) / 2
    ranks = average_rank[inverse]
    u_statistic = float(ranks[labels].sum()) - n_pos * (n_pos + 1) / 2
    return u_statistic / (n_pos * n_neg)


def credit_diagnostics(
    advantages: Tensor,
    response_mask: Tensor,
    first_wrong_mask: Tensor,
    rewards: Tensor,
) -> dict[str, float]:
    """Credit precision and AUROC of one batch; see the module docstring for the definitions.

    Args:
        advantages: ``[B, T]`` token advantages.
        response_mask: ``[B, T]`` 1 on response tokens.
        first_wrong_mask: ``[B, T]`` 1 on the tokens of the response's first wrong step.
        rewards: ``[B]`` outcome rewards; a response with ``reward <= 0.5`` has failed.

    Returns:
        ``credit_precision``, ``credit_auroc``, ``credit_chance`` (floats, NaN when undefined)
        and ``credit_responses`` (how many responses were scored).
    """
    mask = response_mask.detach().bool()
    first_wrong = first_wrong_mask.detach().bool() & mask
    failed = ~(rewards.detach() > 0.5) & torch.isfinite(rewards.detach())
    scored = failed & first_wrong.any(-1)
    tokens = mask & scored[:, None]
    label = first_wrong[tokens]
    blame = (-advantages.detach().to(torch.float64))[tokens]
    negative = blame.clamp(min=0.0)
    total = float(negative.sum())
    n_tokens = int(tokens.sum())
    return {
        "credit_precision": float(negative[label].sum()) / total if total > 0 else float("nan"),
        "credit_auroc": auroc(blame, label),
        "credit_chance": float(label.sum()) / n_tokens if n_tokens else float("nan"),
        "credit_responses": float(scored.sum()),
    }
