"""T-SPMO: token-level prefix matching, the credit of a token from the responses that share it.

Paper: Lee and Tong, "Token-Efficient RL for LLM Reasoning" (v1: "Reinforcement Learning for LLM
Reasoning Under Memory Constraints"), arXiv 2504.20834 (2025). The abstract introduces T-SPMO
(Token-Specific Prefix Matching Optimization), "a token-level prefix matching approach for
fine-grained credit assignment", critic-free, "building on early policy gradient methods with
baseline subtraction" and operating "on a small, informative subset of output tokens"; with
LoRA on Qwen2-1.5B it raised SVAMP accuracy from 46% to over 70% and did well on multi-digit
multiplication, where full-token GRPO did not improve on the base model.

Key equations (reconstructed: the paper's body could not be read). A token v after a prefix p
(the prompt and the tokens before it) is matched across the group: the responses through p,
and among them those that continue with v. Its credit is the mean reward of the second set
against the first, a baseline subtracted per prefix:

    A(p, v) = mean{ r_j : j passes through (p, v) } - mean{ r_j : j passes through p }

and the loss counts each distinct (p, v) pair of the group once:

    L = - 1/N Σ_(p, v) A(p, v) · log π(v | p),   N = the number of pairs with A(p, v) != 0

A(p, v) is zero wherever every response through p continues with v, so on a prefix the whole
group shares each token's value is the group's mean reward and its credit is 0; only the tokens
where the group parts get credit (the "small, informative subset").

Deviations:
    - The definition above is ours, built from the abstract's words (prefix matching, a
      baseline subtracted, a small subset of tokens); the paper's equations, its defaults and
      any resampling scheme it adds were not read. Rewards are raw (no division by std).
    - A pair shared by n responses appears in n rows; each row's token gets A(p, v) / n, so
      the sum over rows is the sum over pairs (the rows' log-probs of a shared pair are equal),
      and the loss averages over the tokens that carry credit (the loss mask), which counts a
      shared pair n times in N.
    - The policy loss is this harness's clipped surrogate at the token level (ratio 1 on the
      first minibatch of a step, as in a plain policy gradient).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from .base import CreditMethod, LossConfig, Needs
from .contract import Services
from .core import RolloutBatch
from .prefix_tree import class_sizes, node_values, response_tree
from .registry import register_method


def prefix_matching_credit(
    rewards: Tensor, response_ids: Tensor, response_mask: Tensor, group_ids: Tensor
) -> Tensor:
    """``[B, T]`` T-SPMO's credit: ``A(p, v)`` of each row's (prefix, token) pair divided by the
    number of rows that share the pair, 0 off the response.

    Args:
        rewards: ``[B]`` raw outcome rewards.
        response_ids: ``[B, T]``.
        response_mask: ``[B, T]`` 1 on response tokens.
        group_ids: ``[B]``.
    """
    classes, parents = response_tree(response_ids, response_mask, group_ids)
    before, after = node_values(rewards, classes, parents)
    rows_per_pair = class_sizes(classes).to(rewards.dtype)
    return (after - before) / rows_per_pair * response_mask


@dataclass
class TSPMOConfig(LossConfig):
    """The shared loss settings, with a token-level mean over the tokens that carry credit."""

    aggregation: str = "token-mean"


@register_method("tspmo")
class TSPMO(CreditMethod):
    summary = "credit only where the group parts: mean reward after a token minus before it"
    paper = "Token-Efficient RL for LLM Reasoning (arXiv 2504.20834)"
    Config = TSPMOConfig
    needs = Needs(behaviour_logprobs=False)  # its advantages never read them
    config: TSPMOConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        return prefix_matching_credit(
            batch.rewards, batch.response_ids, batch.response_mask, batch.group_ids
        )

    def loss_mask(self, batch: RolloutBatch) -> Tensor:
        """The tokens whose pair has non-zero credit: the loss averages over them."""
        credit = self.advantages(batch)
        return batch.response_mask * (credit != 0).to(batch.response_mask.dtype)
