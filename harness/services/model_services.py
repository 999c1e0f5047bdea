"""The part of the `Services` contract that runs on a model or reads the task's text, with no
sampling and no budget of its own: teacher-forced scoring under the batch's prompts or others
(:class:`~creditbench.harness.scoring.passes.ScoringPasses`), an auxiliary model's fit, the
task's problems, variants and answers of each row (:class:`~.text.TaskText`), per-step
generators and ``report``. The harness's services (:class:`~.harness_services.HarnessServices`)
and the TRL adapter's (``creditbench.integrations.trl_services``) share it: the same passes
given the builtin trainer's model or TRL's.

A subclass sets ``scoring`` (a `ScoringPasses`), ``text`` (a `TaskText`), ``seed``, ``step``
and ``stats``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from creditbench.harness.scoring.passes import ScoringPasses
from creditbench.harness.services.text import TaskText
from creditbench.methods.core import RolloutBatch


class ModelServices:
    """Scoring, the auxiliary model, the task's text, generators and reports (see the module)."""

    scoring: ScoringPasses
    text: TaskText
    seed: int
    step: int
    stats: dict[str, float]

    def generator(self, stream: int) -> torch.Generator:
        """A CPU generator seeded ``seed * stream + step`` (see ``Services.generator``)."""
        return torch.Generator().manual_seed(self.seed * stream + self.step)

    def report(self, stats: Mapping[str, float]) -> None:
        """Statistics for this step's metrics record (see ``Services.report``)."""
        self.stats.update({key: float(value) for key, value in stats.items()})

    # --- scoring (:class:`~creditbench.harness.scoring.passes.ScoringPasses`) ------------------

    def score(
        self, batch: RolloutBatch, prompts: Sequence[str] | None = None, model: str = "policy"
    ) -> Tensor:
        """Teacher-forced log-probs ``[B, T]``, charged as a forward of ``model``."""
        return self.scoring.score(batch, prompts, model)

    def distribution(
        self,
        batch: RolloutBatch,
        prompts: Sequence[str] | None = None,
        model: str = "policy",
        *,
        top_k: int | None = None,
        indices: Tensor | None = None,
        grad: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """Next-token log-probs ``[B, T, K]`` at chosen entries, and the entries."""
        return self.scoring.distribution(
            batch, prompts, model, top_k=top_k, indices=indices, grad=grad
        )

    def fit_auxiliary(
        self,
        batch: RolloutBatch,
        row_loss: Any,
        *,
        lr_ratio: float,
        grad_clip: float | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """One step of the trainable auxiliary model (see :meth:`ScoringPasses.fit_auxiliary`)."""
        return self.scoring.fit_auxiliary(batch, row_loss, lr_ratio=lr_ratio, grad_clip=grad_clip)

    # --- text and the task (:class:`.text.TaskText`; no model runs) ---------------------------

    def problems(self, batch: RolloutBatch) -> list:
        return self.text.problems(batch)

    def decode(self, batch: RolloutBatch) -> list[str]:
        return self.text.decode(batch)

    def variant(
        self, batch: RolloutBatch, kind: str, hints: Sequence[str] | None = None
    ) -> list[str]:
        return self.text.variant(batch, kind, hints)

    def answer_texts(self, batch: RolloutBatch) -> list[str]:
        return self.text.answer_texts(batch)
