"""TEMPO: GRPO's outcome credit plus temporal-difference corrections where the group branches.

Paper: Tran, Yao and Yu, "Exploiting Tree Structure for Credit Assignment in RL Training of
LLMs", arXiv 2509.18314 (2025). The G responses to a prompt form a prefix tree (Prefix-to-Tree,
P2T); the value of a node is the mean outcome of the responses through it; TEMPO (Tree-Estimated
Mean Prefix Value for Policy Optimization) adds to GRPO's group-relative signal a
temporal-difference term at the tokens where the tree branches, which is zero elsewhere, "so
TEMPO reduces to GRPO" there (the abstract). No value network, no extra pass.

Key equations (response i, token t, s_it = the prompt and o_i,<t; D(s) = the responses of the
group whose prefix is s). Only their structure could be read (the abstract; a summary and the
reviews of the paper for the normalised rewards); the exact form is reconstructed:

    r~_i   = (r_i - mean_G r) / std_G r                       GRPO's z-scored reward
    V(s)   = mean_{j in D(s)} r~_j                            P2T's value of a node
    δ_it   = V(s_i,t+1) - V(s_it)                              the TD error of token t
    A_it   = r~_i + λ · 1[s_it has >= 2 children] · δ_it       branch-gated, λ = 1

At a node with one child D(s_i,t+1) = D(s_it), so δ_it = 0 and the gate only says so. Along a
response the corrections telescope: Σ_t δ_it = V(leaf) - V(root) = r~_i - 0.

Deviations:
    - The combination A = r~ + λ·gate·δ, λ = 1, and V over z-scored rewards are reconstructed
      (the paper's text and code could not be read; a summary says V is the "average
      normalized reward" of a node's descendants and a review that the TD error is divided by
      std(r)). ``td_weight`` (λ) is offered; 0 is GRPO.
    - The prompt node counts as a branch when the group's first tokens differ; then the first
      token's correction is V of its child (the root's value is 0).
    - A response's end is a child of its last node (so a response that stops where a sibling
      goes on branches there); tokens are matched by id, so prefixes that differ in token ids
      only (the same text tokenised two ways) are different nodes.
    - Everything else is this harness's GRPO (ratio, clip, seq-mean-token-mean, no KL).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import check_fields
from .contract import Reduction, Services
from .core import RolloutBatch
from .grpo import GRPO, GRPOConfig, grpo_scores
from .prefix_tree import child_counts, node_values, response_tree
from .registry import register_method


def tree_values(
    scores: Tensor, response_ids: Tensor, response_mask: Tensor, group_ids: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """P2T's values before and after every token, and where the tree branches.

    Args:
        scores: ``[B]`` each response's outcome score r~_i.
        response_ids: ``[B, T]``.
        response_mask: ``[B, T]`` 1 on response tokens.
        group_ids: ``[B]``.

    Returns:
        ``(before, after, branches)``, each ``[B, T]``: V(s_it), V(s_i,t+1), and True where
        the node before token t has two or more children.
    """
    classes, parents = response_tree(response_ids, response_mask, group_ids)
    before, after = node_values(scores, classes, parents)
    return before, after, child_counts(classes, parents) >= 2


def tempo_advantages(
    scores: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    td_weight: float = 1.0,
) -> Tensor:
    """``[B, T]`` TEMPO's credit: ``r~_i + λ · 1[branch] · (V(s_i,t+1) - V(s_it))`` on response
    tokens, 0 elsewhere.

    Args:
        scores: ``[B]`` r~_i, GRPO's z-scored rewards.
        response_ids: ``[B, T]``.
        response_mask: ``[B, T]``.
        group_ids: ``[B]``.
        td_weight: λ, the weight of the TD corrections.
    """
    before, after, branches = tree_values(scores, response_ids, response_mask, group_ids)
    corrections = torch.where(branches, after - before, torch.zeros_like(after))
    return (scores.unsqueeze(-1) + td_weight * corrections) * response_mask


@dataclass
class TEMPOConfig(GRPOConfig):
    """GRPO's settings and ``td_weight``, the weight λ of the branch-gated TD corrections."""

    td_weight: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self,
            [
                (
                    "td_weight",
                    isinstance(self.td_weight, (int, float)) and self.td_weight >= 0,
                    "must be a number >= 0",
                )
            ],
        )


@register_method("tempo")
class TEMPO(GRPO):
    summary = "GRPO plus TD corrections at the tokens where the group's prefix tree branches"
    paper = (
        "Exploiting Tree Structure for Credit Assignment in RL Training of LLMs (arXiv 2509.18314)"
    )
    Config = TEMPOConfig
    config: TEMPOConfig
    # Eq. of the module doc: A = GRPO's score + λ·(TD corrections), so λ = 0 leaves GRPO's
    reduces_to = (Reduction("grpo", {"td_weight": 0.0}, "TEMPO's advantage with λ = 0"),)

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        scores = grpo_scores(batch.rewards, batch.group_ids, self.config)
        return tempo_advantages(
            scores,
            batch.response_ids,
            batch.response_mask,
            batch.group_ids,
            td_weight=self.config.td_weight,
        )
