"""Oracle credit: GRPO's advantage, with a failed response's blame put on its first wrong step.

Reference method, not from a paper: the upper bound every credit-assignment method is measured
against on the testbed. It reads the step ground truth (``first_wrong_mask`` and friends, see
:data:`methods.contract.STEP_TRUTH_KEYS`) that only a synthetic task with a step checker can supply.

Key equations (G responses o_1..o_G to one prompt, W_i the blamed tokens of o_i):

    A_i = (r_i - mean(r_1..r_G)) / std(r_1..r_G)                     (GRPO, shared by all)

    failed (A_i < 0, W_i non-empty):   A_it = A_i · |o_i| / |W_i|  for t in W_i,  0 elsewhere
    otherwise:                         A_it = A_i                  for every t

    W_i = the first wrong step                      (mode="first_wrong", default)
    W_i = the first wrong step and all that follows  (mode="suffix")

With ``redistribute=False`` the blamed tokens get plain A_i (GRPO's credit, masked).
With ``penalize_wrong_in_success`` a successful response (A_i > 0) keeps A_i on its right
tokens and gets -A_i on the tokens of its wrong steps (slips a later step cancelled).

Why redistribute by default: masking alone shrinks a failed response's total negative credit
from A_i·|o_i| to A_i·|W_i|, a tenth or less on the testbed, so "oracle" would also mean "far
less push-down on failures than GRPO", and a comparison would mix the placement of credit with
its amount. Redistributing keeps every response's total credit sum_t A_it = A_i·|o_i| exactly
as GRPO gives it, and the balance of positive and negative credit in a group with it: oracle
and GRPO differ only in *where* a failure's credit lands, which is what the bound is about.

Deviations:
    - A failed response with no detectable wrong step (an empty mask, for example a response
      cut off by the length limit) falls back to GRPO's uniform credit.
    - ``redistribute`` applies to failed responses only; a success's wrong steps get -A_i
      without rescaling.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import CreditMethod
from .contract import AFTER_WRONG_MASK, FIRST_WRONG_MASK, WRONG_STEP_MASK, Services
from .core import RolloutBatch
from .grpo import GRPOConfig, grpo_scores
from .registry import register_method

MODES = ("first_wrong", "suffix")


def oracle_advantages(
    scores: Tensor,
    response_mask: Tensor,
    first_wrong_mask: Tensor,
    after_wrong_mask: Tensor,
    wrong_step_mask: Tensor,
    *,
    mode: str = "first_wrong",
    redistribute: bool = True,
    penalize_wrong_in_success: bool = False,
) -> Tensor:
    """Token advantages from GRPO's per-response scores and the step ground truth.

    Args:
        scores: ``[B]`` the group-normalised outcome advantage A_i of each response.
        response_mask: ``[B, T]``.
        first_wrong_mask, after_wrong_mask, wrong_step_mask: ``[B, T]`` step masks.
        mode: ``"first_wrong"`` or ``"suffix"`` (which tokens a failure blames).
        redistribute: scale a failure's blame so its total equals ``A_i · |o_i|``.
        penalize_wrong_in_success: negative credit on wrong steps inside successes.

    Returns:
        ``[B, T]`` advantages, zero where ``response_mask`` is 0.
    """
    if mode not in MODES:
        raise ValueError(f"mode: must be one of {', '.join(MODES)} (got {mode!r})")
    mask = response_mask
    uniform = scores.unsqueeze(-1).to(mask.dtype) * mask
    blame = (
        first_wrong_mask
        if mode == "first_wrong"
        else torch.maximum(first_wrong_mask, after_wrong_mask)
    )
    blame = blame.to(mask.dtype) * mask
    blamed = blame.sum(-1)
    failed = (scores < 0) & (blamed > 0)
    scale = mask.sum(-1) / blamed.clamp(min=1) if redistribute else torch.ones_like(blamed)
    focused = (scores * scale).unsqueeze(-1).to(mask.dtype) * blame
    advantages = torch.where(failed.unsqueeze(-1), focused, uniform)
    if penalize_wrong_in_success:
        wrong = (wrong_step_mask * mask) > 0
        advantages = torch.where((scores > 0).unsqueeze(-1) & wrong, -uniform, advantages)
    return advantages


@dataclass
class OracleConfig(GRPOConfig):
    """Oracle credit settings (GRPO's fields, loss fields from :class:`LossConfig`)."""

    mode: str = "first_wrong"
    redistribute: bool = True
    penalize_wrong_in_success: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mode not in MODES:
            raise ValueError(f"mode: must be one of {', '.join(MODES)} (got {self.mode!r})")


@register_method("oracle")
class Oracle(CreditMethod):
    summary = "GRPO's advantage, a failure's blame only on its first wrong step (ground truth)"
    paper = (
        "none of its own: GRPO's advantage (DeepSeekMath, arXiv 2402.03300) placed by ground truth"
    )
    Config = OracleConfig
    needs_behaviour_logprobs = False  # its rollout and advantages never read them
    config: OracleConfig
    reference = True
    requires_extras = (FIRST_WRONG_MASK, AFTER_WRONG_MASK, WRONG_STEP_MASK)

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        cfg = self.config
        extras = batch.extras or {}
        missing = [key for key in self.requires_extras if key not in extras]
        if missing:
            raise ValueError(
                f"oracle needs the step ground truth; the batch lacks {', '.join(missing)}"
            )
        scores = grpo_scores(batch.rewards, batch.group_ids, cfg)
        return oracle_advantages(
            scores,
            batch.response_mask,
            batch.extra(FIRST_WRONG_MASK),
            batch.extra(AFTER_WRONG_MASK),
            batch.extra(WRONG_STEP_MASK),
            mode=cfg.mode,
            redistribute=cfg.redistribute,
            penalize_wrong_in_success=cfg.penalize_wrong_in_success,
        )
