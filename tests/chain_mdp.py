"""A tabular chain MDP whose values are known exactly, for the exact-credit tests.

A response has ``K`` steps of two tokens each: a filler token (2 or 3, uniform, irrelevant to
the reward) and an action (0 right, 1 wrong). Step ``k`` is right with probability
``sigmoid(theta[k])`` whatever came before, and the reward is 1 when every step is right, so

    V(s_k) = prod_{j >= k} p_j   when the first k steps are right, else 0.

:class:`ChainServices` continues any prefix under this policy through the ``generate``
signature of ``Services``, so :func:`methods.values.mc_state_values` runs on it unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from torch import Tensor

from creditbench.methods.contract import FILLER_MASK, PROBLEM_INDEX
from creditbench.methods.core import RolloutBatch

RIGHT, WRONG = 0, 1


def exact_values(theta: Tensor, actions: Tensor) -> Tensor:
    """``[B, K]`` V(s_k) of each response's states s_0..s_{K-1} (``actions`` ``[B, K]``)."""
    p = torch.sigmoid(theta)
    # tail[k] = prod_{j >= k} p_j
    tail = torch.flip(torch.cumprod(torch.flip(p, [0]), 0), [0])
    right_so_far = torch.cumprod(
        torch.cat([torch.ones_like(actions[:, :1]), (actions[:, :-1] == RIGHT).long()], -1), -1
    )
    return tail.unsqueeze(0) * right_so_far


def sample_actions(theta: Tensor, rows: int, gen: torch.Generator) -> Tensor:
    """``[rows, K]`` actions drawn from the policy."""
    p = torch.sigmoid(theta)
    return (torch.rand(rows, len(theta), generator=gen, dtype=theta.dtype) >= p).long()


def chain_batch(actions: Tensor, fillers: Tensor, group_size: int) -> RolloutBatch:
    """The responses as a batch: tokens ``[f_0, a_0, f_1, a_1, ...]``, step ids, fillers."""
    rows, steps = actions.shape
    tokens = torch.stack([fillers, actions], -1).reshape(rows, 2 * steps)
    mask = torch.ones(rows, 2 * steps)
    rewards = (actions == RIGHT).all(-1).float()
    filler = torch.zeros(rows, 2 * steps)
    filler[:, 0::2] = 1.0
    groups = torch.arange(rows) // group_size
    return RolloutBatch(
        prompt_ids=torch.ones(rows, 1, dtype=torch.long),
        prompt_mask=torch.ones(rows, 1),
        response_ids=tokens,
        response_mask=mask,
        group_ids=groups,
        rewards=rewards,
        old_logprobs=torch.zeros(rows, 2 * steps),
        step_ids=torch.arange(2 * steps).div(2, rounding_mode="floor").expand(rows, -1).clone(),
        extras={FILLER_MASK: filler, PROBLEM_INDEX: groups},
    )


@dataclass
class ChainServices:
    """Continues prefixes of chain responses under ``theta`` (``Services.generate``)."""

    theta: Tensor
    seed: int = 0
    calls: list[str] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def max_new_tokens(self) -> int:
        return 2 * len(self.theta)

    def problems(self, batch: RolloutBatch) -> list:
        return [SimpleNamespace(prompt="chain", answer="") for _ in range(batch.size)]

    def report(self, stats) -> None:
        self.stats.update({k: float(v) for k, v in stats.items()})

    def generate(self, prompts, n=1, prefixes=None, *, problem_index=None, **options):
        self.calls.append(f"generate:{len(prompts)}x{n}:{options}")
        gen = torch.Generator().manual_seed(self.seed + len(self.calls))
        width = 2 * len(self.theta)
        rows, rewards = [], []
        for prefix in prefixes:
            done = len(prefix) // 2
            for _ in range(n):
                rest = sample_actions(self.theta[done:], 1, gen)[0]
                fill = torch.randint(2, 4, (len(rest),), generator=gen)
                tail = torch.stack([fill, rest], -1).reshape(-1).tolist()
                tokens = list(prefix) + tail
                ok = all(t == RIGHT for t in tokens[1::2])
                rows.append(tokens)
                rewards.append(float(ok))
        count = len(rows)
        return RolloutBatch(
            prompt_ids=torch.ones(count, 1, dtype=torch.long),
            prompt_mask=torch.ones(count, 1),
            response_ids=torch.tensor(rows, dtype=torch.long).reshape(count, width),
            response_mask=torch.ones(count, width),
            group_ids=torch.arange(len(prefixes)).repeat_interleave(n),
            rewards=torch.tensor(rewards),
            old_logprobs=torch.full((count, width), float("nan")),
        )
