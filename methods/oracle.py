"""Oracle credit: the exact credit of every step, or GRPO's advantage with a failure's blame on
its first wrong step.

Reference method, not from a paper: the upper bound every credit-assignment method is measured
against on the testbed ("perfect credit at GRPO's sample budget").

``mode="exact"`` (default). With γ = 1, the reward at the end and s_k the prompt plus the first
k steps (see :mod:`methods.values`):

    V(s_k) = P_π(R = 1 | s_k),   A_k = V(s_{k+1}) - V(s_k),   V(s_n) := R,   sum_k A_k = R - V(s_0)

Every token of step k gets A_k; the filler tokens (ground truth ``filler_mask``: their value
change is 0) get exactly 0. V(s_k) is the task's own value (``estimator="analytic"``, the
default: ``services.task_values``, the policy's probability of writing every remaining step
right, on the testbed; checked against Monte Carlo with ``creditbench values``), or is
estimated under the behaviour policy with ``value_samples`` continuations from every distinct
state (``estimator="mc"``: VinePPO's Monte-Carlo estimator,
arXiv 2410.01679; with ``pool_correct`` the states whose steps are all right so far share
one estimate per problem and step count), inside ``services.reference_passes()``: the value
passes are counted in the run's ``reference_*`` records and not charged to its budget.
Unlike GRPO this credit is non-zero in all-fail groups (a first wrong step lowers V) and
all-pass groups.

``mode="first_wrong"`` / ``"suffix"``: the blame rules, with A_i GRPO's group advantage and W_i
the blamed tokens of o_i (the first wrong step; with ``suffix`` also all that follows):

    failed (A_i < 0, W_i non-empty):   A_it = A_i · |o_i| / |W_i|  for t in W_i,  0 elsewhere
    otherwise:                         A_it = A_i                  for every t

With ``redistribute=False`` the blamed tokens get plain A_i (GRPO's credit, masked). With
``penalize_wrong_in_success`` a successful response (A_i > 0) keeps A_i on its right tokens and
gets -A_i on the tokens of its wrong steps (slips a later step cancelled). Redistributing keeps
every response's total credit sum_t A_it = A_i·|o_i| as GRPO gives it, so the two differ only in
*where* a failure's credit lands.

Deviations:
    - exact, analytic: each line's chance is taken as independent of how the lines before it
      were written; a second slip undoing the first is neglected (the values are slightly low:
      a mean difference of -0.011 from 256-continuation Monte Carlo on 240 states).
    - exact, mc: the values are estimates (standard error sqrt(V(1 - V)/M) each); a continuation
      that runs past the generation limit, counted from the response's start, scores 0;
      pooled states (``pool_correct``) differ in fillers and written forms, which are taken
      not to change the value.
    - blame: a failed response with no detectable wrong step (an empty mask, for example a
      response cut off by the length limit) falls back to GRPO's uniform credit;
      ``redistribute`` applies to failed responses only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import CreditMethod, Needs
from .contract import (
    AFTER_WRONG_MASK,
    DIRECTION,
    FILLER_MASK,
    FIRST_WRONG_MASK,
    PROBLEM_INDEX,
    WRONG_STEP_MASK,
    Services,
)
from .core import RolloutBatch, masked_whiten
from .grpo import GRPOConfig, grpo_scores
from .registry import register_method
from .rollouts import true_first_wrong
from .values import STATE_VALUES, exact_advantages, mc_state_values, state_starts

BLAME_MODES = ("first_wrong", "suffix")
MODES = ("exact", *BLAME_MODES)
ESTIMATORS = ("mc", "analytic")


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
    if mode not in BLAME_MODES:
        raise ValueError(f"mode: must be one of {', '.join(BLAME_MODES)} (got {mode!r})")
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


def correct_prefix_pools(batch: RolloutBatch) -> Tensor:
    """``[B, S]`` pool ids for :func:`mc_state_values`: the states whose steps are all right
    so far (the ground truth's first wrong step lies ahead) share one pool per problem and
    step count, ``problem * S + k``; every other state keeps its own estimate (-1).

    Such prefixes hold the same running values and differ only in fillers and written forms,
    so their values are taken as one; pooling their continuations divides the estimate's
    variance by the pool's size at no extra rollout."""
    step_ids = batch.step_ids
    if step_ids is None:  # one step: only the empty response is a state
        step_ids = torch.zeros_like(batch.response_ids)
    _, valid = state_starts(step_ids)
    first = true_first_wrong(step_ids, batch.extra(FIRST_WRONG_MASK))  # -1: none
    k = torch.arange(valid.shape[1]).unsqueeze(0)
    right_so_far = (first.unsqueeze(-1) < 0) | (k <= first.unsqueeze(-1))
    problem = batch.extra(PROBLEM_INDEX).unsqueeze(-1)
    return torch.where(valid & right_so_far, problem * valid.shape[1] + k, -1)


@dataclass
class OracleConfig(GRPOConfig):
    """Oracle credit settings (GRPO's fields, loss fields from :class:`LossConfig`).

    ``estimator`` and ``whiten`` are read by ``mode="exact"``, ``value_samples`` and
    ``pool_correct`` by its ``mc`` estimator;
    ``redistribute`` and ``penalize_wrong_in_success`` by the blame modes.
    """

    mode: str = "exact"
    estimator: str = "analytic"
    value_samples: int = 16
    pool_correct: bool = True
    whiten: bool = False
    redistribute: bool = True
    penalize_wrong_in_success: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mode not in MODES:
            raise ValueError(f"mode: must be one of {', '.join(MODES)} (got {self.mode!r})")
        if self.estimator not in ESTIMATORS:
            raise ValueError(
                f"estimator: must be one of {', '.join(ESTIMATORS)} (got {self.estimator!r})"
            )
        if not (isinstance(self.value_samples, int) and self.value_samples >= 1):
            raise ValueError(f"value_samples: must be an integer >= 1 (got {self.value_samples!r})")


@register_method("oracle")
class Oracle(CreditMethod):
    summary = "exact step credit V(s_k+1) - V(s_k) from uncharged value estimates (reference)"
    paper = "none of its own: exact step credit with VinePPO's estimator (arXiv 2410.01679)"
    Config = OracleConfig
    # Its credit is per step and every token of a step carries it, so a response's token sum
    # weighs its steps by their lengths (the per-step sum is R - V(s_0), ordered by R).
    opt_outs = {
        DIRECTION: "every token of a step gets the step's value change, so a failed response "
        "whose right steps are long can sum to more than a short passed one; its step sums "
        "R - V(s_0) are ordered by R (tests/test_oracle.py)"
    }
    # its rollout and advantages never read the behaviour log-probs; they read the step truth
    needs = Needs(
        behaviour_logprobs=False,
        step_truth=(FIRST_WRONG_MASK, AFTER_WRONG_MASK, WRONG_STEP_MASK, FILLER_MASK),
    )
    config: OracleConfig
    reference = True

    def rollout(self, services: Services) -> RolloutBatch:
        batch = services.sample_batch()
        if self.config.mode == "exact":
            batch.extras = {**(batch.extras or {}), STATE_VALUES: self.values(batch, services)}
        return batch

    def values(self, batch: RolloutBatch, services: Services) -> Tensor:
        """``[B, S]`` the value of every state of the batch, by the configured estimator,
        counted and not charged (:meth:`Services.reference_passes`)."""
        cfg = self.config
        with services.reference_passes():
            if cfg.estimator == "analytic":
                return services.task_values(batch)
            pools = correct_prefix_pools(batch) if cfg.pool_correct else None
            return mc_state_values(services, batch, cfg.value_samples, pools)

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        cfg = self.config
        extras = batch.extras or {}
        if cfg.mode == "exact":
            if FILLER_MASK not in extras:
                raise ValueError("oracle needs the step ground truth; the batch lacks filler_mask")
            values = extras.get(STATE_VALUES)
            if values is None:  # a batch from elsewhere (explain's shared batch): value it here
                if services is None:  # a reference never falls back to a weaker credit
                    raise ValueError(
                        f"oracle: the batch lacks {STATE_VALUES} and no services can value it"
                    )
                values = self.values(batch, services)
            filler = extras[FILLER_MASK]
            advantages = exact_advantages(batch, values, filler)
            if cfg.whiten:  # over the tokens that carry credit: fillers stay 0
                advantages = masked_whiten(advantages, batch.response_mask * (1.0 - filler))
            return advantages
        missing = [key for key in self.needs.step_truth if key not in extras]
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
