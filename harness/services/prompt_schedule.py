"""The prompt schedule: which train-split problems each sampling call of a step draws.

The first call of a step takes the next ``prompts_per_step`` problems of a seeded shuffle of the
split (reshuffled every pass); further calls in the same step (dynamic sampling) draw
``prompts_per_step`` distinct problems at random. Both depend only on ``(seed, step, call)``,
so a resumed run draws exactly what an uninterrupted one draws.
"""

from __future__ import annotations

import torch

from creditbench.harness.sampling.rollout import derive_seed


class PromptSchedule:
    """Counts the sampling calls of each step and says which problems each one draws."""

    def __init__(self, n_train: int, prompts_per_step: int, seed: int) -> None:
        self.n_train, self.prompts_per_step, self.seed = n_train, prompts_per_step, seed
        self._calls_step = -1
        self._calls = 0
        self._order_cache: tuple[int, list[int]] = (-1, [])

    def next_call(self, step: int) -> int:
        """The 0-based number of this sampling call within ``step``."""
        if self._calls_step != step:
            self._calls_step, self._calls = step, 0
        self._calls += 1
        return self._calls - 1

    def indices(self, step: int, call: int = 0) -> list[int]:
        """The train-split indices sampling call ``call`` of ``step`` draws."""
        n_train, per_step = self.n_train, self.prompts_per_step
        if call > 0:
            gen = torch.Generator().manual_seed(derive_seed(self.seed, "extra-prompts", step, call))
            return torch.randperm(n_train, generator=gen)[: min(per_step, n_train)].tolist()
        out = []
        for position in range(step * per_step, (step + 1) * per_step):
            epoch, offset = divmod(position, n_train)
            out.append(self._order(epoch)[offset])
        return out

    def _order(self, epoch: int) -> list[int]:
        """The seeded shuffle of the train split for one pass over it."""
        if self._order_cache[0] != epoch:
            gen = torch.Generator().manual_seed(derive_seed(self.seed, "order", epoch))
            self._order_cache = (epoch, torch.randperm(self.n_train, generator=gen).tolist())
        return self._order_cache[1]
