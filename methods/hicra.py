"""HICRA: hierarchy-aware credit assignment, GRPO's advantage amplified on planning tokens.

Paper: Wang, Xu, Liu, Wu, Lin and Chen, "Emergent Hierarchical Reasoning in LLMs through
Reinforcement Learning", arXiv 2509.03646 (2025). The abstract was read: RL first
consolidates low-level procedural skill, then its gains come from "exploration and mastery of
high-level strategic planning"; GRPO "appl[ies] optimization pressure agnostically and
dilute[s] the learning signal across all tokens", and HICRA "concentrates optimization efforts
on high-impact planning tokens". The paper identifies planning tokens by Strategic Grams,
n-grams of 3-5 words that steer a solution ("let's try a different approach", "but the problem
mentions") [third-party summaries]. No code was found.

Key equations (Â_{i,t} GRPO's advantage of token t of response i; S_i its planning tokens):

    Â^HICRA_{i,t} = Â_{i,t} + α |Â_{i,t}| 1[t ∈ S_i]

A planning token of a passed response gets (1 + α) Â, of a failed one (1 - α) Â: the plan of a
success is reinforced more, the plan of a failure blamed less, than its execution.

Planning tokens on the testbed (ours): a chain step states what it does (the carried value,
the operation, whether a multiplication is split into partial products) before its first
"=", and executes it after (the arithmetic results). The statement is the plan, the results
the execution; a line without "=" (the answer line) is execution. The method finds them
through the task-neutral service ``delimited_step_ids`` with two delimiters, the line end and
``planning_delimiter``.

Defaults: α = 0.2 (the value third-party notes give for the paper's runs; not read in the
paper itself); GRPO's loss and advantage otherwise (the paper builds HICRA on GRPO).

Deviations:
    - Strategic Grams are not mined: the testbed's steps have one grammar, whose plan part is
      known (above). On a task whose lines have no ``planning_delimiter`` no token is a
      planning token and the method is GRPO.
    - Without services (a bare batch) no planning token is known: the method refuses.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import CreditMethod, Needs, check_fields
from .contract import Services
from .core import RolloutBatch, broadcast_to_tokens
from .grpo import GRPOConfig, grpo_scores
from .registry import register_method


def planning_mask(line_ids: Tensor, segment_ids: Tensor) -> Tensor:
    """``[B, T]`` 1.0 on the planning tokens: the tokens of a line up to and with its first
    delimiter, on lines that hold one. ``line_ids`` and ``segment_ids`` ``[B, T]`` are the step
    indices of each token with the line end and with the planning delimiter as the step's end
    (-1 off the response). A line holds a delimiter where its tokens span more than one
    segment; its plan is the tokens still in the segment its first token is in."""
    planning = torch.zeros(line_ids.shape, dtype=torch.float32)
    for row in range(line_ids.shape[0]):
        lines, segments = line_ids[row], segment_ids[row]
        for line in torch.unique(lines[lines >= 0]):
            at = (lines == line).nonzero().squeeze(-1)
            first, seen = segments[at[0]], segments[at]
            if bool((seen != first).any()):
                planning[row, at[seen == first]] = 1.0
    return planning


def hicra_advantages(
    scores: Tensor, response_mask: Tensor, planning: Tensor, alpha: float
) -> Tensor:
    """``[B, T]`` ``Â + α |Â| 1[planning]`` with Â the response ``scores`` ``[B]`` on every
    token of ``response_mask`` ``[B, T]``; ``planning`` ``[B, T]`` in {0, 1}."""
    base = broadcast_to_tokens(scores, response_mask)
    return base + alpha * base.abs() * planning * response_mask


@dataclass
class HICRAConfig(GRPOConfig):
    """HICRA's settings beside GRPO's: ``alpha`` (the amplification on planning tokens) and
    ``planning_delimiter`` (the text that ends a step's plan)."""

    alpha: float = 0.2
    planning_delimiter: str = "="

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self,
            [
                ("alpha", 0.0 <= self.alpha < 1.0, "must be in [0, 1)"),
                (
                    "planning_delimiter",
                    isinstance(self.planning_delimiter, str) and self.planning_delimiter != "",
                    "must be a non-empty string",
                ),
            ],
        )


@register_method("hicra")
class HICRA(CreditMethod):
    summary = "GRPO's advantage raised by α|A| on the planning tokens (a step's statement)"
    paper = (
        "Emergent Hierarchical Reasoning in LLMs through Reinforcement Learning (arXiv 2509.03646)"
    )
    Config = HICRAConfig
    needs = Needs(behaviour_logprobs=False)  # its rollout and advantages never read them
    config: HICRAConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        if services is None:
            raise ValueError("hicra needs the step's services to find the planning tokens")
        cfg = self.config
        lines = services.delimited_step_ids(batch, "\n")
        segments = services.delimited_step_ids(batch, cfg.planning_delimiter)
        planning = planning_mask(lines, segments).to(batch.response_mask.dtype)
        mask = batch.response_mask
        services.report(
            {"hicra_planning_frac": float((planning * mask).sum() / mask.sum().clamp(min=1))}
        )
        scores = grpo_scores(batch.rewards, batch.group_ids, cfg)
        return hicra_advantages(scores, mask, planning, cfg.alpha)
