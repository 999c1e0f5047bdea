"""Step values and the exact credit of a step, shared by the exact-credit oracle and VinePPO.

With γ = 1 and the reward at the end, the state s_k of a response is its prompt and its first
k steps. The exact credit of a step is the change of the value it causes (VinePPO, Kazemnejad
et al., arXiv 2410.01679, §3-4):

    V(s_k) = E_π[R | s_k]            (P_π(R = 1 | s_k) for a 0/1 reward)
    A_k = V(s_{k+1}) - V(s_k)        the credit of chunk k,   V(s_n) := R
    sum_k A_k = R - V(s_0)

Chunk k of a response holds its tokens from the start of step k to the start of step k + 1
(the step's line and its newline; the last chunk runs to the end, end-of-sequence included),
so every token belongs to exactly one chunk, and each token of chunk k gets A_k: a step's
policy gradient is the sum of its tokens'. State s_0 is the empty response and chunk 0 starts
at its first token.

:func:`mc_state_values` estimates V(s_k) at every state of every response with ``M``
continuations from the state through ``Services.generate`` (VinePPO's estimator: the mean
reward of K rollouts). States that are the same token prefix of the same problem (a group's
shared s_0, identical prefixes) are one state with one set of continuations.

Imports torch only, like every file of ``methods/``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .contract import PROBLEM_INDEX, Services, method_extra
from .core import RolloutBatch, group_mean_std

STATE_VALUES = method_extra(
    "values",
    "state_values",
    "[B, S]",
    "V(s_k) at the start of each step of the row (s_0: the empty response); NaN past its steps",
)


def state_starts(step_ids: Tensor) -> tuple[Tensor, Tensor]:
    """Where each state's next chunk starts, from ``step_ids`` ``[B, T]`` (-1 outside steps).

    Returns:
        ``([B, S] start positions, [B, S] bool valid)``: ``starts[b, 0] = 0`` (state s_0),
        ``starts[b, k]`` the first token of step ``k`` (``k >= 1``); a row with ``n`` steps
        has ``max(n, 1)`` valid states. ``S`` is the largest count over rows.
    """
    steps = (step_ids.max(dim=-1).values + 1).clamp(min=1)
    width = int(steps.max()) if step_ids.numel() else 1
    k = torch.arange(width)
    later = step_ids.unsqueeze(1) >= k.view(1, -1, 1)  # [B, S, T]: tokens of step >= k
    first = later.float().argmax(-1)
    starts = torch.where(k.unsqueeze(0) == 0, 0, first)
    valid = k.unsqueeze(0) < steps.unsqueeze(-1)
    return torch.where(valid, starts, 0), valid


def state_prefixes(
    batch: RolloutBatch, only: Tensor | None = None
) -> tuple[list[tuple[int, int, tuple[int, ...]]], Tensor]:
    """``(row, k, prefix)`` of every state of the batch (``only`` ``[B, S]`` bool: of these
    alone), ``prefix`` the token ids of the row's response before state ``k``'s next chunk;
    and the ``[B, S]`` bool of the batch's states (:func:`state_starts`)."""
    if batch.step_ids is None:
        raise ValueError("state values need the batch's step_ids")
    starts, valid = state_starts(batch.step_ids)
    wanted = valid if only is None else valid & only
    prefixes = [
        (row, k, tuple(batch.response_ids[row, : int(starts[row, k])].tolist()))
        for row, k in wanted.nonzero().tolist()
    ]
    return prefixes, valid


def distinct_states(
    batch: RolloutBatch, only: Tensor | None = None
) -> tuple[list[tuple[int, tuple[int, ...]]], list[int], list[tuple[int, int, int]], Tensor]:
    """The batch's distinct states: states that are the same token prefix of the same problem
    (a group's shared s_0, identical prefixes) are one, estimated once.

    Returns:
        ``keys``: ``(problem, prefix)`` of each distinct state, in order of first appearance;
        ``rows``: the first row holding each; ``where``: ``(row, k, state)`` of every state of
        every row (of ``only``'s alone, when given); ``valid``: the ``[B, S]`` bool of the
        batch's states (:func:`state_prefixes`).
    """
    prefixes, valid = state_prefixes(batch, only)
    index = batch.extra(PROBLEM_INDEX).tolist()
    state_of: dict[tuple[int, tuple[int, ...]], int] = {}
    where: list[tuple[int, int, int]] = []
    for row, k, prefix in prefixes:
        state = state_of.setdefault((int(index[row]), prefix), len(state_of))
        where.append((row, k, state))
    first_row = {state: row for row, _, state in reversed(where)}
    return list(state_of), [first_row[s] for s in range(len(state_of))], where, valid


def chunk_ids(starts: Tensor, valid: Tensor, width: int) -> Tensor:
    """``[B, T]`` the chunk of every position: the last valid state start at or before it."""
    position = torch.arange(width).view(1, 1, -1)
    begun = (starts.unsqueeze(-1) <= position) & valid.unsqueeze(-1)
    return begun.long().sum(1) - 1


def step_credit(values: Tensor, valid: Tensor, rewards: Tensor) -> Tensor:
    """``[B, S]`` A_k = V(s_{k+1}) - V(s_k) with V(s_n) := R; 0 where not valid.

    Args:
        values: ``[B, S]`` V(s_k) of each state (any value where not valid).
        valid: ``[B, S]`` bool, the row's states (a prefix of each row).
        rewards: ``[B]`` the outcome R of each response.
    """
    values = torch.where(valid, values, 0.0)
    count = valid.sum(-1, keepdim=True)
    following = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], dim=-1)
    last = torch.arange(values.shape[1]).unsqueeze(0) == count - 1
    following = torch.where(last, rewards.to(values.dtype).unsqueeze(-1), following)
    return torch.where(valid, following - values, 0.0)


def credit_to_tokens(
    credit: Tensor, chunks: Tensor, response_mask: Tensor, zero_mask: Tensor | None = None
) -> Tensor:
    """``[B, T]`` every token's chunk credit, 0 off ``response_mask`` and on ``zero_mask``
    (filler tokens, whose value change is 0)."""
    advantages = credit.gather(-1, chunks.clamp(min=0)) * response_mask
    if zero_mask is not None:
        advantages = advantages * (1.0 - zero_mask.to(advantages.dtype))
    return advantages


def uninformed_values(batch: RolloutBatch, valid: Tensor) -> Tensor:
    """``[B, S]`` every state valued at its group's mean reward: what a batch without value
    estimates (from elsewhere) is read as. The whole credit R - mean then sits on the last
    chunk."""
    mean, _, _ = group_mean_std(batch.rewards, batch.group_ids)
    return mean.unsqueeze(-1).expand(valid.shape).clone()


def exact_advantages(
    batch: RolloutBatch, values: Tensor | None, zero_mask: Tensor | None = None
) -> Tensor:
    """``[B, T]`` exact step credit of a batch from ``values`` ``[B, S]`` (:data:`STATE_VALUES`;
    None reads it as :func:`uninformed_values`). A batch without ``step_ids`` is one step.
    Values of another shape than the batch's states raise ValueError: they belong to another
    batch or another cut of the steps, and credit from them would be wrong without a word."""
    step_ids = batch.step_ids
    if step_ids is None:
        step_ids = torch.zeros_like(batch.response_ids)
    starts, valid = state_starts(step_ids)
    if values is None:
        values = uninformed_values(batch, valid)
    elif values.shape != valid.shape:
        raise ValueError(
            f"values: shape {tuple(values.shape)} does not match the batch's states "
            f"{tuple(valid.shape)} (rows x states of its step_ids)"
        )
    credit = step_credit(values, valid, batch.rewards)
    chunks = chunk_ids(starts, valid, batch.response_ids.shape[1])
    return credit_to_tokens(credit, chunks, batch.response_mask, zero_mask)


def mc_state_values(
    services: Services,
    batch: RolloutBatch,
    samples: int,
    pools: Tensor | None = None,
    only: Tensor | None = None,
) -> Tensor:
    """``[B, S]`` Monte-Carlo V(s_k): the mean reward of ``samples`` continuations of each
    distinct state (problem, response prefix), NaN past a row's states.

    ``pools`` ``[B, S]`` long, optional: states with the same id >= 0 are taken to have one
    value, and each gets the mean over the continuations of all distinct states of its pool
    (the same rollouts, a pool's worth less noise); -1 keeps a state's own estimate.
    ``only`` ``[B, S]`` bool, optional: estimate these states alone (NaN elsewhere).

    A continuation that runs past the run's generation limit counted from the start of the
    response (``services.max_new_tokens``) is scored 0, as a response cut off there would be.
    Reports ``value_states`` and ``value_rollouts`` (continuations sampled) for the step.
    """
    if samples < 1:
        raise ValueError(f"samples: must be >= 1 (got {samples})")
    keys, rows, where, valid = distinct_states(batch, only)
    prompts = [problem.prompt for problem in services.problems(batch)]
    values = torch.full(valid.shape, float("nan"))
    if not keys:
        return values
    out = services.generate(
        [prompts[row] for row in rows],
        samples,
        [list(prefix) for _, prefix in keys],
        problem_index=[problem for problem, _ in keys],
        rewards_only=True,
    )
    rewards = out.rewards.clone()
    rewards[out.response_mask.sum(-1) > services.max_new_tokens] = 0.0
    means = rewards.view(len(keys), samples).mean(-1)
    if pools is not None:  # a pool's value: the mean over its distinct states
        pool_of = {state: int(pools[row, k]) for row, k, state in where}
        members: dict[int, list[int]] = {}
        for state, pool in pool_of.items():
            if pool >= 0:
                members.setdefault(pool, []).append(state)
        pooled = means.clone()
        for states in members.values():
            pooled[states] = means[states].mean()
        means = pooled
    for row, k, state in where:
        values[row, k] = means[state]
    services.report({"value_states": len(keys), "value_rollouts": len(keys) * samples})
    return values
