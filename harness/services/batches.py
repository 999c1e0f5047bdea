"""Graded batches: sampled (or given) responses turned into a :class:`RolloutBatch` with
rewards from the task's grader, behaviour (and reference) log-probs from a scoring pass, on a
task with steps (capability ``STEPS``, :mod:`creditbench.harness.tasks.base`) the ``step_ids`` of
its ``step_spans``, and on a step-checked task (``STEP_CHECK``) the step ground truth
(:data:`STEP_TRUTH_KEYS`) from its ``check_steps``.

Rows of every graded batch carry ``extras[PROBLEM_INDEX]`` (``[B]`` long), the index of their
problem in the task's train split; the services use it to grade, to build prompt variants and
to decode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from creditbench.harness.sampling.rollout import (
    Samples,
    assemble_samples,
    cut_at_eos,
    encode,
    encode_prompts,
)
from creditbench.harness.scoring.passes import ScoringPasses
from creditbench.harness.services.step_plan import StepPlan
from creditbench.methods.contract import PROBLEM_INDEX, STEP_TRUTH_KEYS
from creditbench.methods.core import RolloutBatch


class GradedBatches:
    """Builds graded, scored batches for one run.

    Args:
        task: grades responses (and, when ``step_checked``, locates their first wrong step).
        tokenizer: the policy's tokenizer.
        train_problems: the task's train split, indexed by ``problem_index``.
        scoring: the run's scoring passes (behaviour log-probs are a policy forward).
        with_reference: also score every batch under the frozen reference model.
        step_checked: attach the step ground truth (and ``step_ids``).
        stepped: attach ``step_ids`` from the task's ``step_spans`` (a task with steps and no
            step checker: GSM8K, MATH).
    """

    def __init__(
        self,
        task: Any,
        tokenizer: Any,
        train_problems: Sequence[Any],
        scoring: ScoringPasses,
        *,
        with_reference: bool,
        step_checked: bool,
        stepped: bool = False,
    ) -> None:
        self.task, self.tokenizer, self.train_problems = task, tokenizer, train_problems
        self.scoring = scoring
        self.with_reference, self.step_checked = with_reference, step_checked
        self.stepped = stepped or step_checked
        # The step's plan (set by the services at each step): whether the update gives the
        # behaviour log-probs (no scoring pass) and which statistics the scoring pass computes.
        self.plan = StepPlan(0)

    def from_samples(
        self,
        samples: Samples,
        problem_index: Tensor | None,
        *,
        group_offset: int,
        rewards_only: bool = False,
    ) -> RolloutBatch:
        """Grade, score and annotate sampled responses; ``rewards_only`` grades them and
        nothing more (no scoring pass, no step ground truth, behaviour log-probs NaN)."""
        extras: dict[str, Tensor] = {}
        if problem_index is not None:
            problems = [self.train_problems[i] for i in problem_index.tolist()]
            rewards = torch.tensor(
                [
                    self.task.grade(p, t).reward
                    for p, t in zip(problems, samples.texts, strict=True)
                ],
                dtype=torch.float32,
            )
            extras[PROBLEM_INDEX] = problem_index
        else:
            problems = None
            rewards = torch.full((len(samples.texts),), float("nan"))
        batch = RolloutBatch(
            prompt_ids=samples.prompt_ids,
            prompt_mask=samples.prompt_mask,
            response_ids=samples.response_ids,
            response_mask=samples.response_mask,
            group_ids=samples.prompt_index + group_offset,
            rewards=rewards,
            old_logprobs=torch.zeros_like(samples.response_mask),
            truncated=samples.truncated,
            extras=extras,
        )
        if rewards_only:
            batch.old_logprobs = torch.full_like(samples.response_mask, float("nan"))
            return batch
        if self.plan.behaviour_from_update:  # NaN until the update fills them: a reader would show
            batch.old_logprobs = torch.full_like(samples.response_mask, float("nan"))
        elif self.plan.behaviour_statistics:
            batch.old_logprobs, statistics = self.scoring.score_with_statistics(
                batch, self.plan.behaviour_statistics
            )
            extras.update(statistics)
        else:
            batch.old_logprobs = self.scoring.score(batch)
        if self.with_reference:
            batch.ref_logprobs = self.scoring.score(batch, model="reference")
        if problems is not None and self.stepped:
            step_ids, step_extras = self._step_ground_truth(problems, samples)
            batch.step_ids = step_ids
            extras.update(step_extras)
        return batch

    def _step_ground_truth(self, problems, samples: Samples) -> tuple[Tensor, dict[str, Tensor]]:
        """``step_ids`` ``[B, T]`` from the task's step spans and, on a step-checked task, the
        :data:`STEP_TRUTH_KEYS` masks from its step checker (none otherwise)."""
        from creditbench.harness.tasks.steps import step_masks, token_char_offsets, token_step_ids

        width = samples.response_ids.shape[1]
        step_ids = torch.full((len(problems), width), -1, dtype=torch.long)
        checked = STEP_TRUTH_KEYS if self.step_checked else ()
        masks = {key: torch.zeros((len(problems), width)) for key in checked}
        lengths = samples.response_mask.sum(-1).long().tolist()
        for row, (problem, text) in enumerate(zip(problems, samples.texts, strict=True)):
            # the task reads the text once; the spans it returns become token masks here
            check = self.task.check_steps(problem, text) if checked else None
            spans = check.steps if check is not None else self.task.step_spans(text)
            tokens = samples.response_ids[row, : lengths[row]].tolist()
            offsets = token_char_offsets(self.tokenizer, tokens)
            truth = step_masks(check, offsets) if check is not None else {}
            for key, values in truth.items():
                if key in masks and values:
                    masks[key][row, : len(values)] = torch.tensor(values, dtype=torch.float32)
            ids = token_step_ids(offsets, spans)
            if ids:
                step_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        return step_ids, masks

    def from_responses(
        self,
        problem_index: Sequence[int] | Tensor,
        responses: Sequence[str | Sequence[int] | Tensor],
    ) -> RolloutBatch:
        """Given responses to train-split problems as a graded, scored batch, without sampling.

        Each response is a text (encoded, EOS appended) or the token ids of the response alone
        (cut after the first EOS). Every row gets its problem's plain prompt, is graded against
        it, and its behaviour log-probs are the policy's teacher-forced under that prompt: a
        forward pass charged to the budget (and one of the reference model, if the run has
        one). Nothing is generated. Group ids are the row positions. Used to train on a
        response the policy did not sample under the plain prompt (IBPO's repairs).
        """
        index = torch.as_tensor(problem_index, dtype=torch.long).reshape(-1)
        if len(responses) != index.numel() or index.numel() == 0:
            raise ValueError(
                f"responses: need one per problem_index, at least one "
                f"(got {len(responses)} for {index.numel()})"
            )
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        prompts = encode_prompts(
            self.tokenizer, [self.train_problems[i].prompt for i in index.tolist()]
        )
        rows, truncated = [], []
        for response in responses:
            if isinstance(response, str):
                tokens = [*encode(self.tokenizer, [response])[0], eos]
            else:
                tokens = [int(t) for t in response]
            tokens, cut = cut_at_eos(tokens, eos, pad)
            rows.append(tokens)
            truncated.append(cut)
        samples = assemble_samples(  # nothing generated: no new tokens to charge
            self.tokenizer, prompts, rows, truncated, [0] * len(rows), torch.arange(len(rows))
        )
        return self.from_samples(samples, index, group_offset=0)
