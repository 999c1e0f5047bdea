"""InT: the policy repairs its own failed attempts one step at a time, and is first trained to
write the repaired prefix (a short SFT "patch"), then by GRPO.

Paper: Yang, Bai, Wu, Yang, Setlur, Kumar, "InT: Self-Proposed Interventions Enable Credit
Assignment in LLM Reasoning", arXiv 2601.14209 (ICLR 2026); code
github.com/intervention-training/int (the data pipeline and the SFT launch; the RL stage is a
PipelineRL config). The paper's text past the abstract could not be read; the equations come
from the code and from third-party notes transcribing its Eq. 2 and tables (tagged on the docs
page).

Key equations (x a problem, y a failed attempt of the policy with steps y_1..y_n, y* the
reference solution, t* the first step of y that is wrong and never recovered from):

    (t*, ỹ_{t*}) = the policy's own proposal, shown x, y and y*: a replacement for the step
                   at t* that does not give the answer away                 (propose)
    keep it if  pass@N( continue(x, y_<t* ⊕ ỹ_{t*}) ) > 0                   (correctness filter)
    ∇J ≈ E_{r(x,y)=0} [ Σ_{t<t*} ∇log π(y_t | x, y_<t) + ∇log π(ỹ_{t*} | x, y_<t*) ]   (Eq. 2)

The last line is an NLL on the prefix the policy got right plus the one intervention step,
with no end-of-sequence target after it and nothing on the failed suffix. Then GRPO runs from
the patched policy. Here an intervention row gets the constant credit ``sft_credit`` on each of
its tokens: at ratio 1 the policy loss's gradient is exactly that NLL's.

Defaults: one proposal per failed attempt (the paper's code samples K = 4 and keeps the first
usable one; on the testbed the first was usable for 40 of 40 failures); failures taken from
problems the policy does not solve [paper: its hard pool]; the patch on the first 25% of the budget
(``sft_fraction``; inferred: 4 epochs of 2,213 rows at an effective batch of 64 make about 138
optimizer steps, against the 400 RL steps of the notes); GRPO's settings for the rest.

Deviations:
    - The paper collects interventions once, from the base model, on an offline hard pool; a
      method keeps no state across steps, so here each step of the patch phase collects them
      from the current policy's failures in its own batch (groups with no correct response,
      ``pool="unsolved"``), and trains on them at once. The sampled responses of a patch step
      are not trained on, as the paper's collection rollouts are not; a patch step that finds
      no intervention trains GRPO on its batch rather than waste it (ours). An intervention
      row's reward is NaN (it states no answer); the step's online accuracy is the sampled
      batch's, as for every method.
    - Proposal: the policy under the task's ``repair`` prompt (the failed attempt and the
      reference solution) writes a corrected solution, and the intervention is its first step
      that differs from the attempt: the location and the new step in one answer, as the
      paper's ``<intervention>{content, location}`` does. ``operator="task"`` takes the task's
      scripted repair instead (an ablation separating credit from localisation).
    - Leak filter: the paper drops an intervention whose text holds the answer string; on the
      testbed a one- or two-digit answer occurs in most steps by chance, so an intervention is
      dropped when it is the solution's last step, the one that states the answer.
    - Correctness filter: ``continuations`` = 4 continuations (the paper's 32), charged.
    - The patch trains with the run's optimizer and learning rate (the paper's SFT: 1e-6,
      cosine) through the policy loss; ``schedule="joint"`` instead adds the intervention
      rows to every GRPO batch, the reading "alongside the RL loss".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .base import CreditMethod, Needs, check_fields
from .contract import PROBLEM_INDEX, Services, method_extra
from .core import RolloutBatch, broadcast_to_tokens, concat_batches
from .grpo import GRPOConfig, grpo_scores
from .registry import register_method
from .rollouts import pad_extras_like, response_tokens, with_step_ids
from .values import state_starts

CORRECT = 0.5  # reward above which a response is correct (IBPO's threshold)
IS_INTERVENTION = method_extra(
    "int", "int_intervention", "[B]", "1 on an intervention row (SFT credit), 0 on a sampled row"
)
CHOICES = {"operator": ("policy", "task"), "pool": ("unsolved", "all"),
           "schedule": ("sequential", "joint")}  # fmt: skip


def int_advantages(
    scores: Tensor, response_mask: Tensor, is_intervention: Tensor, sft_credit: float
) -> Tensor:
    """``[B, T]``: GRPO's score ``scores`` ``[B]`` on every token of a sampled row and
    ``sft_credit`` on every token of an intervention row (``is_intervention`` ``[B]`` bool)."""
    per_row = torch.where(is_intervention, torch.full_like(scores, sft_credit), scores)
    return broadcast_to_tokens(per_row, response_mask)


def step_starts(step_ids: Tensor, length: int) -> list[int]:
    """Where each step of one row starts (the states of :func:`.values.state_starts`, from
    ``step_ids`` ``[T]`` of its first ``length`` tokens, -1 between steps), then the end of its
    last step: step k runs to the next step's first token, its delimiter included, and the last
    step to the row's last token of a step. ``[0]`` for a row with no step."""
    ids = step_ids[:length]
    in_steps = (ids >= 0).nonzero().flatten()
    if not in_steps.numel():
        return [0]
    starts, valid = state_starts(ids.unsqueeze(0))
    return [*starts[0][valid[0]].tolist(), int(in_steps[-1]) + 1]


def intervention(
    attempt: list[int],
    attempt_steps: list[int],
    repair: list[int],
    repair_steps: list[int],
    leak_filter: bool = True,
) -> list[int] | None:
    """The attempt's prefix before the first step where the repair departs from it, then the
    repair's step there: token ids, no end of sequence. None when the repair departs nowhere
    inside the attempt, or (``leak_filter``) only at its last step, the answer."""

    def steps(tokens: list[int], starts: list[int]) -> list[list[int]]:
        return [tokens[a:b] for a, b in zip(starts, starts[1:], strict=False)]

    mine, theirs = steps(attempt, attempt_steps), steps(repair, repair_steps)
    k = next((j for j, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b), None)
    if k is None or (leak_filter and k == len(theirs) - 1):
        return None
    return attempt[: attempt_steps[k]] + theirs[k]


@dataclass
class InTConfig(GRPOConfig):
    """InT settings (GRPO's fields and the loss fields of `LossConfig`)."""

    operator: str = "policy"
    proposals: int = 1
    pool: str = "unsolved"
    leak_filter: bool = True
    continuations: int = 4
    sft_credit: float = 1.0
    schedule: str = "sequential"
    sft_fraction: float = 0.25

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = [(name, getattr(self, name) in allowed, f"must be one of {', '.join(allowed)}")
                  for name, allowed in CHOICES.items()]  # fmt: skip
        checks += [
            ("proposals", isinstance(self.proposals, int) and self.proposals >= 1,
             "must be an integer >= 1"),
            ("continuations", isinstance(self.continuations, int) and self.continuations >= 0,
             "must be an integer >= 0"),
            ("sft_credit", self.sft_credit >= 0.0, "must be >= 0"),
            ("sft_fraction", 0.0 <= self.sft_fraction <= 1.0, "must be in [0, 1]"),
        ]  # fmt: skip
        check_fields(self, checks)


def marked(batch: RolloutBatch, intervention: bool) -> RolloutBatch:
    """``batch`` with :data:`IS_INTERVENTION` set on every row; an intervention row's reward is
    NaN: a prefix with no answer is not an outcome, and stays out of the step's accuracy."""
    flag = torch.full((batch.size,), float(intervention))
    rewards = torch.full_like(batch.rewards, float("nan")) if intervention else batch.rewards
    return replace(batch, rewards=rewards, extras={**(batch.extras or {}), IS_INTERVENTION: flag})


@register_method("int")
class InT(CreditMethod):
    summary = "SFT on the policy's own one-step repairs of failed attempts, then GRPO"
    paper = "InT: Self-Proposed Interventions Enable Credit Assignment (arXiv 2601.14209)"
    Config = InTConfig
    needs = Needs(behaviour_logprobs=False)  # its rollout and advantages never read them
    config: InTConfig

    def rollout(self, services: Services) -> RolloutBatch:
        cfg = self.config
        batch = services.sample_batch()
        patching = cfg.schedule == "joint" or services.budget_fraction < cfg.sft_fraction
        rows = self.intervention_rows(batch, services) if patching else None
        sampled = marked(batch, intervention=False)
        if rows is None:  # the GRPO phase, or a patch step that found no intervention
            return sampled
        rows = marked(rows, intervention=True)
        if cfg.schedule == "sequential":
            return rows
        pad_extras_like(rows, sampled)
        pad_extras_like(sampled, rows)
        return concat_batches([sampled, rows])

    def failures(self, batch: RolloutBatch) -> list[int]:
        """The failed rows to repair: of unsolved groups (``pool="unsolved"``) or all."""
        failed = batch.rewards <= CORRECT
        if self.config.pool == "unsolved":
            solved = {int(g) for g in batch.group_ids[~failed].tolist()}
            failed &= torch.tensor([int(g) not in solved for g in batch.group_ids.tolist()])
        return failed.nonzero().flatten().tolist()

    def proposals(self, attempts: RolloutBatch, services: Services) -> RolloutBatch:
        """Repaired solutions of the ``attempts``, their group id the attempt's position."""
        cfg = self.config
        index = attempts.extra(PROBLEM_INDEX)
        if cfg.operator == "task":
            return services.batch_from_responses(index, services.task_repair(attempts))
        prompts = services.variant(attempts, "repair")  # the reference solution as the hint
        return services.generate(prompts, cfg.proposals, problem_index=index)

    def intervention_rows(self, batch: RolloutBatch, services: Services) -> RolloutBatch | None:
        """The step's intervention rows (prefix ⊕ intervention, kept by the correctness
        filter) as a scored batch under the plain prompts, or None when there are none."""
        cfg = self.config
        failed = self.failures(batch)
        stats = {"int_failures": float(len(failed)), "int_proposed": 0.0, "int_kept": 0.0}
        if not failed:
            services.report(stats)
            return None
        attempts = with_step_ids(batch.select(torch.tensor(failed)), services)
        repairs = with_step_ids(self.proposals(attempts, services), services)
        candidates: list[tuple[int, list[int]]] = []
        for pos in range(attempts.size):
            mine = response_tokens(attempts, pos)
            mine_steps = step_starts(attempts.step_ids[pos], len(mine))  # type: ignore[index]
            for row in (repairs.group_ids == pos).nonzero().flatten().tolist():
                theirs = response_tokens(repairs, row)
                steps = step_starts(repairs.step_ids[row], len(theirs))  # type: ignore[index]
                found = intervention(mine, mine_steps, theirs, steps, cfg.leak_filter)
                if found is not None:
                    candidates.append((pos, found))
                    break
        stats["int_proposed"] = float(len(candidates))
        if candidates and cfg.continuations > 0:
            candidates = self.correct_continuations(attempts, candidates, services)
        stats["int_kept"] = float(len(candidates))
        services.report(stats)
        if not candidates:
            return None
        index = attempts.extra(PROBLEM_INDEX)[torch.tensor([pos for pos, _ in candidates])]
        return services.batch_from_responses(index, [tokens for _, tokens in candidates])

    def correct_continuations(
        self, attempts: RolloutBatch, candidates: list[tuple[int, list[int]]], services: Services
    ) -> list[tuple[int, list[int]]]:
        """The candidates of which at least one of ``continuations`` continuations is correct."""
        n = self.config.continuations
        chosen = attempts.select(torch.tensor([pos for pos, _ in candidates]))
        prompts = [problem.prompt for problem in services.problems(chosen)]
        out = services.generate(
            prompts,
            n,
            [tokens for _, tokens in candidates],
            problem_index=chosen.extra(PROBLEM_INDEX),
            rewards_only=True,
        )
        solved = (out.rewards.reshape(len(candidates), n) > CORRECT).any(-1).tolist()
        return [candidate for candidate, ok in zip(candidates, solved, strict=True) if ok]

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        cfg = self.config
        flag = (batch.extras or {}).get(IS_INTERVENTION, torch.zeros(batch.size))
        sampled = flag == 0
        scores = torch.zeros_like(batch.rewards)
        if sampled.any():
            scores[sampled] = grpo_scores(batch.rewards[sampled], batch.group_ids[sampled], cfg)
        return int_advantages(scores, batch.response_mask, ~sampled, cfg.sft_credit)
