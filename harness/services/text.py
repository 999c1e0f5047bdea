"""The task's side of the services: each row's problem, response text, steps by delimiter, and
the task's prompt variants and scripted repairs. No model runs here; nothing is charged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from creditbench.harness.sampling.rollout import sequence_lengths
from creditbench.harness.tasks.base import STATES, VARIANTS, require
from creditbench.methods.contract import PROBLEM_INDEX
from creditbench.methods.core import RolloutBatch

NEEDS_RESPONSE = ("localize", "repair")  # prompt variants built around a response


class TaskText:
    """Text helpers over one task's train split and the policy's tokenizer."""

    def __init__(self, task: Any, tokenizer: Any, train_problems: Sequence[Any]) -> None:
        self.task, self.tokenizer, self.train_problems = task, tokenizer, train_problems

    def lengths(self, batch: RolloutBatch) -> Tensor:
        """``[B]`` real tokens of each response (:func:`sequence_lengths`)."""
        tok = self.tokenizer
        return sequence_lengths(batch.response_ids, tok.eos_token_id, tok.pad_token_id)

    def _require_task(self) -> None:
        if self.task is None:  # an engine's services without a creditbench task
            raise ValueError(
                f"task: the rows' problems ({PROBLEM_INDEX}) need the creditbench task the "
                "training set comes from (CreditGRPOTrainer's task=)"
            )

    def problems(self, batch: RolloutBatch) -> list:
        """The :class:`Problem` of every row."""
        self._require_task()
        return [self.train_problems[i] for i in batch.extra(PROBLEM_INDEX).tolist()]

    def decode(self, batch: RolloutBatch) -> list[str]:
        """The text of every response (prefix included, EOS excluded)."""
        out = []
        eos = self.tokenizer.eos_token_id
        for row, length in zip(
            batch.response_ids.tolist(), self.lengths(batch).tolist(), strict=True
        ):
            tokens = [t for t in row[:length] if t != eos]
            out.append(self.tokenizer.decode(tokens, skip_special_tokens=True))
        return out

    def delimited_step_ids(self, batch: RolloutBatch, delimiter: str) -> Tensor:
        """``[B, T]`` step index of every response token, a step being the text up to and
        including each ``delimiter`` (a blank line, ``</thought>``), the rest the last step;
        ``-1`` on the end-of-sequence token and padding. Steps for tasks without their own
        (``step_spans``)."""
        from creditbench.harness.tasks.steps import token_char_offsets, token_step_ids

        out = torch.full(batch.response_ids.shape, -1, dtype=torch.long)
        for row, length in enumerate(self.lengths(batch).tolist()):
            tokens = batch.response_ids[row, :length].tolist()
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            spans, start = [], 0
            while start < len(text):
                found = text.find(delimiter, start)
                end = len(text) if found < 0 else found + len(delimiter)
                spans.append((start, end))
                start = end
            ids = token_step_ids(token_char_offsets(self.tokenizer, tokens), spans)
            if ids:
                out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        return out

    def state_ids(self, batch: RolloutBatch) -> Tensor:
        """``[B, T]`` the id of the state each response token's step was taken in (the task's
        ``state_keys`` of its ``step_spans``), equal for equal keys of one problem; -1 off the
        steps, on EOS and padding, and where a key is None."""
        from creditbench.harness.tasks.steps import token_char_offsets, token_step_ids

        require(self.task, STATES, "a method's state_ids")
        out = torch.full(batch.response_ids.shape, -1, dtype=torch.long)
        known: dict[tuple[str, str], int] = {}
        problems = self.problems(batch)
        for row, length in enumerate(self.lengths(batch).tolist()):
            tokens = batch.response_ids[row, :length].tolist()
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            spans = self.task.step_spans(text)
            keys = self.task.state_keys(problems[row], text)
            ids = [
                -1 if key is None else known.setdefault((problems[row].id, key), len(known))
                for key in keys
            ]
            steps = token_step_ids(token_char_offsets(self.tokenizer, tokens), spans)
            for t, step in enumerate(steps):
                if 0 <= step < len(ids):
                    out[row, t] = ids[step]
        return out

    def variant(
        self, batch: RolloutBatch, kind: str, hints: Sequence[str] | None = None
    ) -> list[str]:
        """The task's ``kind`` prompt variant for every row (:data:`PROMPT_VARIANTS`).

        ``localize`` and ``repair`` are built around the row's response; ``solver`` needs
        ``hints``, one per row.
        """
        self._require_task()
        require(self.task, VARIANTS, f"the {kind!r} prompt variant")
        texts = self.decode(batch) if kind in NEEDS_RESPONSE else None
        out = []
        for row, problem in enumerate(self.problems(batch)):
            options: dict[str, Any] = {}
            if texts is not None:
                options["response"] = texts[row]
            if hints is not None:
                options["hint"] = hints[row]
            out.append(self.task.variant(problem, kind, **options))
        return out

    def answer_texts(self, batch: RolloutBatch) -> list[str]:
        """The reference answer of every row as the task's responses state it
        (``answer_text``). Runs no model, costs nothing."""
        self._require_task()
        return [self.task.answer_text(problem) for problem in self.problems(batch)]

    def task_repair(self, batch: RolloutBatch) -> list[str]:
        """The task's scripted minimal repair of every row's response (on the chain task: the
        first wrong step fixed and every later value recomputed). Runs no model, costs nothing.
        """
        self._require_task()
        require(self.task, VARIANTS, "the scripted repair (task_repair)")
        texts = self.decode(batch)
        return [
            self.task.repair_solution(problem, text)
            for problem, text in zip(self.problems(batch), texts, strict=True)
        ]
