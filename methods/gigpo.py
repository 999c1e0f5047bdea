"""GiGPO: group-in-group policy optimization, a step-level advantage over the group's steps
taken in the same state, beside GRPO's episode-level one.

Paper: Feng, Xue, Liu and An, "Group-in-Group Policy Optimization for LLM Agent Training",
arXiv 2505.10978 (2025; code langfengQ/verl-agent). The abstract was read: GiGPO keeps GRPO's
critic-free, memory-light form and adds "a hierarchical structure": episode-level groups of
whole trajectories, and step-level groups built by "an anchor state grouping mechanism" that
"retroactively constructs step-level groups by identifying repeated environment states across
trajectories", so actions taken in the same state are compared with each other. The
equations were read in third-party notes on §3 and agree with that description.

Key equations (a group of trajectories τ_1..τ_N of one task; R(τ_i) the outcome; step k of τ_i
taken in state s_k^i with discounted return G_k^i = γ^{K_i - 1 - k} R(τ_i), K_i its steps):

    A^E(τ_i) = (R(τ_i) - mean_j R(τ_j)) / F_norm                 (episode level: GRPO's)
    G^S(s) = {(i, k): s_k^i = s}                                  (the anchor state's group)
    A^S(i, k) = (G_k^i - mean_{G^S(s)} G) / F_norm                (step level)
    A(i, k) = A^E(τ_i) + ω A^S(i, k)                              (every token of step k)

F_norm the group's std (+ε), ω = 1. A state only one step of the group was taken in has no
step-level advantage.

"The same state" is the task's (its ``state_keys``, through ``services.state_ids``): on the
testbed, the step's index and the running value carried into it, so two responses that reach
one value by different paths (a split multiplication or not, different fillers) share it.

Defaults: ω = 1, γ = 0.95, F_norm = std (third-party notes on the paper's §3; alibaba/ROLL's
port of GiGPO, ``step_reward_gamma: 0.95`` and weights 1:1); GRPO's loss otherwise.

Deviations:
    - Tokens outside every step (none on the testbed: its lines and answer line cover a
      response) get the episode-level advantage alone.
    - A task without states (no ``state_ids``) cannot run GiGPO: it refuses there, as a
      method asking for another missing capability does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import CreditMethod, Needs, check_fields
from .contract import Reduction, Services
from .core import RolloutBatch, broadcast_to_tokens, group_mean_std
from .grpo import GRPOConfig, grpo_scores
from .registry import register_method


def step_returns(state_ids: Tensor, rewards: Tensor, gamma: float) -> tuple[Tensor, Tensor, Tensor]:
    """Each response's steps as runs of equal state ids along its tokens ``[B, T]`` (-1 off
    any step): ``(rows [S], states [S], returns [S])``, one entry a step, with its discounted
    return ``γ^(steps after it) R`` (``rewards`` ``[B]``)."""
    rows, states, returns = [], [], []
    for row in range(state_ids.shape[0]):
        ids = state_ids[row]
        on = (ids >= 0).nonzero().squeeze(-1)
        if on.numel() == 0:
            continue
        starts = on[torch.cat([torch.tensor([True]), ids[on[1:]] != ids[on[:-1]]])]
        for k, start in enumerate(starts.tolist()):
            rows.append(row)
            states.append(int(ids[start]))
            returns.append(gamma ** (len(starts) - 1 - k) * float(rewards[row]))
    return (
        torch.tensor(rows, dtype=torch.long),
        torch.tensor(states, dtype=torch.long),
        torch.tensor(returns, dtype=torch.float64),
    )


def step_level_advantages(
    state_ids: Tensor, rewards: Tensor, group_ids: Tensor, *, gamma: float, eps: float = 1e-6
) -> Tensor:
    """``[B, T]`` A^S on the tokens of every step: its discounted return z-scored over the
    steps of its group taken in the same state (0 where that state holds one step); 0 off the
    steps. ``state_ids`` ``[B, T]``, ``rewards`` and ``group_ids`` ``[B]``."""
    out = torch.zeros(state_ids.shape, dtype=torch.float64)
    rows, states, returns = step_returns(state_ids, rewards, gamma)
    if rows.numel() == 0:
        return out
    _, anchor = torch.unique(
        torch.stack([group_ids[rows].long(), states]), dim=1, return_inverse=True
    )
    mean, std, count = group_mean_std(returns, anchor)
    scores = torch.where(count > 1, (returns - mean) / (std + eps), torch.zeros_like(returns))
    for row, state, score in zip(rows.tolist(), states.tolist(), scores.tolist(), strict=True):
        out[row, state_ids[row] == state] = score
    return out


def gigpo_advantages(
    episode_scores: Tensor, step_level: Tensor, response_mask: Tensor, omega: float
) -> Tensor:
    """``[B, T]`` ``A^E + ω A^S``: the episode scores ``[B]`` on every token, the step-level
    advantages ``[B, T]`` on their steps' tokens."""
    total = (
        broadcast_to_tokens(episode_scores.double(), response_mask.double()) + omega * step_level
    )
    return (total * response_mask).to(response_mask.dtype)


@dataclass
class GiGPOConfig(GRPOConfig):
    """GiGPO's settings beside GRPO's: ``omega`` (the step level's weight) and ``gamma``
    (the step returns' discount)."""

    omega: float = 1.0
    gamma: float = 0.95

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self,
            [
                ("omega", self.omega >= 0.0, "must be >= 0"),
                ("gamma", 0.0 < self.gamma <= 1.0, "must be in (0, 1]"),
            ],
        )


@register_method("gigpo")
class GiGPO(CreditMethod):
    summary = "GRPO's episode advantage plus a step-level one over steps taken in the same state"
    paper = "Group-in-Group Policy Optimization for LLM Agent Training (arXiv 2505.10978)"
    Config = GiGPOConfig
    needs = Needs(behaviour_logprobs=False)  # its rollout and advantages never read them
    reduces_to = (Reduction("grpo", {"omega": 0.0}, "§3: ω = 0 leaves the episode level alone"),)
    config: GiGPOConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        if services is None:
            raise ValueError("gigpo needs the step's services: the task's states")
        cfg = self.config
        state_ids = torch.where(
            batch.response_mask > 0,
            services.state_ids(batch),
            torch.full_like(batch.response_ids, -1),
        )
        step_level = step_level_advantages(
            state_ids, batch.rewards, batch.group_ids, gamma=cfg.gamma, eps=cfg.std_eps
        )
        shared = float((step_level != 0).any(-1).double().mean())
        services.report({"gigpo_rows_with_step_signal": shared})
        return gigpo_advantages(
            grpo_scores(batch.rewards, batch.group_ids, cfg),
            step_level,
            batch.response_mask,
            cfg.omega,
        )
