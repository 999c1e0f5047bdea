"""IBPO: credit only on the tokens a minimal repair of a failed response had to change.

Paper: Ding, Zhang, Peng, Wang, Zhou, Zeng, "Reducing Credit Assignment Variance via
Counterfactual Reasoning Paths", arXiv 2605.16302 (2026). The method section could not be read;
this file implements the reconstruction of ``papers/ibpo.md`` §6 (the authors' page: "compares an
incorrect trajectory with a reference, generates a corrected trajectory, and assigns token-level
credit only to the edited tokens"; the repair-and-diff machinery of their sibling paper IOP,
arXiv 2605.05226).

Key equations (group of G responses y_1..y_G, GRPO's Â_i; ℰ failed, 𝒞 correct responses):

    ȳ_i = C(x, y_i, y_ref)     compare-and-correct: a verified-correct, minimally edited y_i,
                               guided by a correct sibling y_ref ∈ 𝒞 (i ∈ ℰ)
    d⁻_i, d⁺_i                 Levenshtein edit masks of y_i (deleted or substituted tokens)
                               and of ȳ_i (inserted or substituted tokens)
    failed y_i:   A_{i,t} = −α_i · d⁻_{i,t}        α_i = |Â_i|
    repair ȳ_i:   A_{ī,t} = +α_i · d⁺_{i,t}        ȳ_i trained as if sampled from π_old(·|x)
    correct y_j:  A_{j,t} = Â_j
    blend:        A ← β · A^GRPO + (1 − β) · A      (β = 1: GRPO; repairs then get 0)

Defaults: β = 0, α = |Â_i|, the policy itself as the repair operator (the task's ``repair``
prompt variant, 2 candidates), a random correct sibling as reference, all edits kept, repairs
trained, GRPO's credit for failures without an accepted repair, GRPO's loss settings.

Deviations (the paper's equations, operator and hyper-parameters were not recovered):
    - ``operator="policy"``: the policy under the task's repair prompt (failed response and
      reference) samples ``repair_candidates`` repairs; among those graded correct, the one of
      smallest normalised edit distance is kept (IOP's selection, without its audit model and
      repair-mode SFT; the testbed's base policy learned the repair variant in its SFT mix).
      ``operator="task"`` uses the task's scripted repair (the first wrong step fixed, the rest
      recomputed): an ablation that separates credit assignment from repair quality.
    - A response is failed at reward <= 0.5 and correct above (IOP's τ_r = 0.5); only failures
      with a correct sibling are repaired. ``reference="random"`` (seeded) or ``most_similar``.
    - ``magnitude``: ``abs`` (α = |Â_i|), ``unit`` (α = 1), or ``redistribute`` (α = |Â_i|·|y|/|d|,
      each row's total credit equals GRPO's).
    - ``correct_credit="grpo"`` keeps Â_j on correct responses ("integrates with GRPO"); IOP
      trains on them not at all (``zero``). ``unrepaired="grpo"`` gives a failure without an
      accepted repair GRPO's uniform credit; ``zero`` drops it as IOP's gate would.
    - ``max_edits=0`` keeps every edit; K > 0 keeps the first K edit operations (IOP's
      verification-based adaptive K* is not implemented).
    - A repair joins its failed response's group but not its group statistics. Its behaviour
      log-probs are teacher-forced under the plain prompt (token-level PPO ratio, not IOP's
      gated sequence ratio); no repair-mode loss (IOP's J_rep). ``train_repairs=False`` drops
      the repairs from the batch after their masks are taken.
    - Loss: GRPO's (seq-mean-token-mean, no KL), not an active-token mean.
    - Ties of the alignment are broken as in `methods.alignment`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .alignment import edit_distance, pair_edit_masks
from .base import CreditMethod
from .contract import PROBLEM_INDEX, Services, method_extra
from .core import RolloutBatch, broadcast_to_tokens, concat_batches
from .grpo import GRPOConfig, grpo_scores
from .registry import register_method
from .rollouts import response_tokens, verified_responses

CORRECT = 0.5  # reward above which a response is correct (IOP's τ_r)
RNG_STREAM = 100_003  # services.generator stream of the reference draws (ours)
PAIR = method_extra("ibpo", "ibpo_pair", "[B] long", "pair id of a failure and its repair, else -1")
IS_REPAIR = method_extra("ibpo", "ibpo_repair", "[B]", "1 on repair rows")
EDITS = method_extra("ibpo", "ibpo_edit_mask", "[B, T]", "1 on the tokens a repair edited")
CHOICES = {
    "operator": ("policy", "task"),
    "reference": ("random", "most_similar"),
    "magnitude": ("abs", "unit", "redistribute"),
    "correct_credit": ("grpo", "zero"),
    "unrepaired": ("grpo", "zero"),
}


def ibpo_advantages(
    scores: Tensor,
    response_mask: Tensor,
    edit_mask: Tensor,
    pair_ids: Tensor,
    is_repair: Tensor,
    *,
    magnitude: str = "abs",
    beta: float = 0.0,
    correct_credit: str = "grpo",
    unrepaired: str = "grpo",
) -> Tensor:
    """IBPO's token advantages.

    Args:
        scores: ``[B]`` GRPO's Â_i of sampled rows (0 on repair rows).
        response_mask: ``[B, T]`` 1 on response tokens.
        edit_mask: ``[B, T]`` d⁻ on failed rows, d⁺ on repairs.
        pair_ids: ``[B]`` the same id on a failed row and its repair, -1 on other rows.
        is_repair: ``[B]`` bool.

    Returns:
        ``[B, T]``, zero where ``response_mask`` is 0.
    """
    mask, sampled = response_mask, ~is_repair
    paired = pair_ids >= 0
    _, slot = torch.unique(pair_ids, return_inverse=True)
    failed = paired & sampled
    alpha_of_slot = torch.zeros(int(slot.max()) + 1 if slot.numel() else 0, dtype=scores.dtype)
    alpha_of_slot.index_add_(0, slot[failed], scores[failed].abs())
    alpha = torch.where(paired, alpha_of_slot[slot], torch.zeros_like(scores))
    edits = edit_mask * mask
    if magnitude == "unit":
        alpha = (alpha > 0).to(scores.dtype)
    elif magnitude == "redistribute":
        alpha = alpha * mask.sum(-1) / edits.sum(-1).clamp(min=1)
    elif magnitude != "abs":
        raise ValueError(f"magnitude: must be one of {CHOICES['magnitude']} (got {magnitude!r})")
    signed = torch.where(is_repair, alpha, -alpha)
    keep = torch.where(scores > 0, correct_credit == "grpo", unrepaired == "grpo")
    sequence = broadcast_to_tokens(scores * (keep & sampled & ~paired), mask)
    ibpo = torch.where(paired.unsqueeze(-1), signed.unsqueeze(-1) * edits, sequence)
    if beta == 0:
        return ibpo
    return beta * broadcast_to_tokens(scores * sampled, mask) + (1 - beta) * ibpo


@dataclass
class IBPOConfig(GRPOConfig):
    """IBPO settings (GRPO's fields and the loss fields of `LossConfig`)."""

    operator: str = "policy"
    repair_candidates: int = 2
    reference: str = "random"
    magnitude: str = "abs"
    beta: float = 0.0
    max_edits: int = 0
    train_repairs: bool = True
    correct_credit: str = "grpo"
    unrepaired: str = "grpo"

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: must be one of {allowed} (got {getattr(self, name)!r})")
        if not 0.0 <= self.beta <= 1.0:
            raise ValueError(f"beta: must be in [0, 1] (got {self.beta!r})")
        if self.repair_candidates < 1:
            raise ValueError(f"repair_candidates: must be >= 1 (got {self.repair_candidates!r})")
        if self.max_edits < 0:
            raise ValueError(f"max_edits: must be >= 0 (got {self.max_edits!r})")


def _join(
    batch: RolloutBatch, fixed: RolloutBatch | None, rows: Tensor, max_edits: int
) -> tuple[RolloutBatch, Tensor]:
    """``batch`` and the repairs ``fixed`` of its ``rows`` in one batch, each repair in its failed
    row's group; ``extras`` gain the pairing and the edit masks. Returns it and ``is_repair``."""
    n = len(rows)
    both = concat_batches([batch, fixed]) if fixed is not None and n else batch
    pair_ids = torch.full((batch.size,), -1, dtype=torch.long)
    pair_ids[rows] = torch.arange(n)
    pair_ids = torch.cat([pair_ids, torch.arange(n)])
    is_repair = torch.arange(both.size) >= batch.size
    edits = pair_edit_masks(both.response_ids, both.response_mask, pair_ids, is_repair, max_edits)
    extras = {**(both.extras or {}), PAIR: pair_ids, IS_REPAIR: is_repair.float(), EDITS: edits}
    group_ids = torch.cat([batch.group_ids, batch.group_ids[rows]])
    return replace(both, group_ids=group_ids, extras=extras), is_repair


@register_method("ibpo")
class IBPO(CreditMethod):
    summary = "repairs each failed response; credit only on the tokens the repair edited"
    paper = (
        "Reducing Credit Assignment Variance via Counterfactual Reasoning Paths (arXiv 2605.16302)"
    )
    Config = IBPOConfig
    config: IBPOConfig

    def _plan(self, batch: RolloutBatch, services: Services) -> list[tuple[int, int]]:
        """(failed row, reference row) for every failure that has a correct sibling."""
        gen = services.generator(RNG_STREAM)
        groups, rewards = batch.group_ids.tolist(), batch.rewards.tolist()
        plan = []
        for row, (group, reward) in enumerate(zip(groups, rewards, strict=True)):
            refs = [r for r, g in enumerate(groups) if g == group and rewards[r] > CORRECT]
            if reward > CORRECT or not refs:
                continue
            if self.config.reference == "most_similar":
                mine = response_tokens(batch, row)
                ref = min(refs, key=lambda r: edit_distance(mine, response_tokens(batch, r)))
            else:
                ref = refs[int(torch.randint(len(refs), (1,), generator=gen))]
            plan.append((row, ref))
        return plan

    def _repairs(
        self, batch: RolloutBatch, plan: list[tuple[int, int]], services: Services
    ) -> list[tuple[int, list[int] | str]]:
        """(failed row, repair) for every failure the operator repaired."""
        failed = batch.select(torch.tensor([f for f, _ in plan]))
        if self.config.operator == "task":
            return [
                (f, text) for (f, _), text in zip(plan, services.task_repair(failed), strict=True)
            ]
        texts = services.decode(batch)
        prompts = services.variant(failed, "repair", hints=[texts[r] for _, r in plan])
        index = failed.extra(PROBLEM_INDEX)
        out = services.generate(prompts, self.config.repair_candidates, problem_index=index)
        picked: list[tuple[int, list[int] | str]] = []
        for k, (f, _) in enumerate(plan):
            mine = response_tokens(batch, f)
            best = None
            for row in (out.group_ids == k).nonzero().flatten().tolist():
                cand = response_tokens(out, row)
                cost = edit_distance(mine, cand) / max(len(mine), len(cand), 1)
                if out.rewards[row] > CORRECT and cand != mine and (best is None or cost < best[0]):
                    best = (cost, cand)
            if best is not None:
                picked.append((f, best[1]))
        return picked

    def rollout(self, services: Services) -> RolloutBatch:
        cfg = self.config
        batch = services.sample_batch()
        plan = self._plan(batch, services) if cfg.beta < 1 else []
        repairs = self._repairs(batch, plan, services) if plan else []
        repair_rate = 0.0
        rows, fixed = torch.tensor([f for f, _ in repairs], dtype=torch.long), None
        if repairs:
            index = batch.extra(PROBLEM_INDEX)[rows]
            originals = [response_tokens(batch, f) for f, _ in repairs]
            fixed, ok = verified_responses(
                services, index, [r for _, r in repairs], originals, CORRECT
            )
            repair_rate = float(ok.sum()) / len(plan)
            rows, fixed = rows[ok], fixed.select(ok)
        services.report({"repair_attempts": float(len(plan)), "repair_rate": repair_rate})
        both, is_repair = _join(batch, fixed, rows, cfg.max_edits)
        return both if cfg.train_repairs else both.select(~is_repair)

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        cfg = self.config
        extras = batch.extras or {}
        mask = batch.response_mask
        is_repair = extras.get(IS_REPAIR, torch.zeros(batch.size)) > 0
        pair_ids = extras.get(PAIR, torch.full((batch.size,), -1, dtype=torch.long))
        edit_mask = extras.get(EDITS, torch.zeros_like(mask))
        scores = torch.zeros_like(batch.rewards)
        sampled = ~is_repair
        if sampled.any():
            scores[sampled] = grpo_scores(batch.rewards[sampled], batch.group_ids[sampled], cfg)
        paired = (pair_ids >= 0).unsqueeze(-1) * mask
        if services is not None:
            edit_frac = (edit_mask * paired).sum() / paired.sum().clamp(min=1)
            services.report({"edit_frac": float(edit_frac)})
        return ibpo_advantages(
            scores,
            mask,
            edit_mask,
            pair_ids,
            is_repair,
            magnitude=cfg.magnitude,
            beta=cfg.beta,
            correct_credit=cfg.correct_credit,
            unrepaired=cfg.unrepaired,
        )
