"""A small deterministic stand-in for the harness services, for methods whose ``advantages``
asks the harness for more (scoring under other prompts, a teacher, fresh samples).

Its scores depend only on the token id, its position and which model/prompt was asked, so
they move with the rows when a batch is permuted and ignore padding added on the right:
every conformance invariant that holds for a method holds with these services too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from creditbench.methods.core import RolloutBatch

from strategies import build_batch


@dataclass
class FakeServices:
    """Deterministic services. ``calls`` records what was asked, in order."""

    step: int = 0
    seed: int = 0
    calls: list[str] = field(default_factory=list)

    def sample_batch(self) -> RolloutBatch:
        """Three groups (sizes 4, 4, 1) of 0/1-rewarded responses, fixed by ``seed + step``."""
        self.calls.append("sample_batch")
        gen = torch.Generator().manual_seed(self.seed + self.step)
        sizes = [4, 4, 1]
        lengths = torch.randint(1, 9, (sum(sizes),), generator=gen).tolist()
        rewards = (torch.rand(sum(sizes), generator=gen) < 0.5).float().tolist()
        return build_batch(sizes, lengths, rewards, seed=self.seed + self.step)

    def score(self, batch: RolloutBatch, prompts: Any = None, model: str = "policy") -> Tensor:
        """Per-token log-probs ``[B, T]`` of the batch's responses, 0 where the mask is 0.

        A function of (token id, position, model, whether other prompts were given) only.
        """
        self.calls.append(f"score:{model}")
        offset = sum(map(ord, model)) + (11 if prompts is not None else 0)
        position = torch.arange(batch.response_ids.shape[-1])
        code = (batch.response_ids * 31 + position * 17 + offset) % 97
        return -(0.05 + code.float() / 40.0) * batch.response_mask
