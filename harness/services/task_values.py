"""The task's own value of every state of a batch (``Services.task_values``): the policy scores
the texts a task's ``value_probes`` writes for each state (on the testbed,
:mod:`creditbench.harness.tasks.chain.values`), in one teacher-forced pass at the run's
temperature, and each state's value is the product over its lines of their renderings'
summed probabilities.

The states are those of :func:`creditbench.methods.values.state_starts` (the empty response,
then the start of every step), so the values are read exactly as Monte-Carlo values are.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from creditbench.harness.sampling.rollout import assemble_samples, encode, encode_prompts
from creditbench.harness.scoring.passes import ScoringPasses
from creditbench.harness.services.text import TaskText
from creditbench.harness.tasks.base import VALUES, require
from creditbench.harness.tasks.steps import token_char_offsets
from creditbench.methods.contract import PROBLEM_INDEX
from creditbench.methods.core import RolloutBatch
from creditbench.methods.values import state_prefixes

DIGITS = "0123456789"


def _score_texts(
    scoring: ScoringPasses, tokenizer: Any, prompts: list[str], texts: list[str]
) -> list[tuple[list[tuple[int, int]], list[float], list[float]]]:
    """Per text: its tokens' character spans, the log-prob of each token (the end of sequence
    last) and of "any digit" at each position (``[L + 1]`` each)."""
    eos = tokenizer.eos_token_id
    digit_ids = [encode(tokenizer, [d])[0] for d in DIGITS]
    rows = [[*tokens, eos] for tokens in encode(tokenizer, texts)]
    samples = assemble_samples(
        tokenizer,
        encode_prompts(tokenizer, prompts),
        rows,
        [False] * len(rows),
        [0] * len(rows),
        torch.arange(len(rows)),
    )
    batch = RolloutBatch(
        prompt_ids=samples.prompt_ids,
        prompt_mask=samples.prompt_mask,
        response_ids=samples.response_ids,
        response_mask=samples.response_mask,
        group_ids=samples.prompt_index,
        rewards=torch.zeros(len(rows)),
        old_logprobs=torch.zeros_like(samples.response_mask),
    )
    entries = [samples.response_ids.unsqueeze(-1)]
    if all(len(ids) == 1 for ids in digit_ids):  # a tokenizer with one token per digit
        digits = torch.tensor([ids[0] for ids in digit_ids])
        entries.append(digits.expand(*samples.response_ids.shape, len(DIGITS)))
    logprobs, _ = scoring.distribution(batch, indices=torch.cat(entries, -1))
    out = []
    for row, tokens in enumerate(rows):
        width = len(tokens)
        actual = logprobs[row, :width, 0]
        any_digit = logprobs[row, :width, 1:].logsumexp(-1) if logprobs.shape[-1] > 1 else actual
        offsets = token_char_offsets(tokenizer, tokens[:-1])
        out.append((offsets, actual.tolist(), any_digit.tolist()))
    return out


def _rendering_logprob(scored, free: frozenset[int], start: int, end: int, length: int) -> float:
    """log P of characters ``[start, end)`` of a scored text of ``length`` characters (the end
    of sequence when ``end > length``); a one-character token on a free position counts as any
    digit."""
    offsets, actual, any_digit = scored
    total = 0.0
    for i, (s, e) in enumerate(offsets):
        if start <= s < end:
            use_any = e == s + 1 and s in free
            total += any_digit[i] if use_any else actual[i]
    if end > length:
        total += actual[len(offsets)]
    return total


def task_state_values(
    batch: RolloutBatch,
    *,
    task: Any,
    text: TaskText,
    scoring: ScoringPasses,
    tokenizer: Any,
) -> tuple[Tensor, dict[str, float]]:
    """``([B, S] V(s_k), statistics)``: the task's value of every state of every row, NaN past
    a row's states (a function of the state alone: its problem and prefix); see
    ``Services.task_values``."""
    require(task, VALUES, "services.task_values")
    prefixes, valid = state_prefixes(batch)
    problems = text.problems(batch)
    index = batch.extra(PROBLEM_INDEX).tolist()
    probes: dict[tuple[int, str], Any] = {}
    where: list[tuple[int, int, tuple[int, str]]] = []  # (row, k, state)
    for row, k, tokens in prefixes:
        state = (int(index[row]), tokenizer.decode(list(tokens), skip_special_tokens=True))
        if state not in probes:
            probes[state] = task.value_probes(problems[row], state[1])
        where.append((row, k, state))
    distinct: dict[tuple[int, str], int] = {}
    prompt_of: dict[int, str] = {int(index[row]): problems[row].prompt for row, _, _ in where}
    for (problem, _), found in probes.items():
        for probe_text in found.texts if found is not None else ():
            distinct.setdefault((problem, probe_text), len(distinct))
    keys = list(distinct)
    scored = (
        _score_texts(scoring, tokenizer, [prompt_of[p] for p, _ in keys], [t for _, t in keys])
        if keys
        else []
    )
    value_of: dict[tuple[int, str], float] = {}
    for state, found in probes.items():
        if found is None:
            value_of[state] = 0.0
            continue
        value = 1.0
        for renderings in found.lines:
            mass = 0.0
            for r in renderings:
                probe_text = found.texts[r.text]
                one = scored[distinct[(state[0], probe_text)]]
                free = found.free[r.text]
                mass += math.exp(_rendering_logprob(one, free, r.start, r.end, len(probe_text)))
            value *= min(mass, 1.0)
        value_of[state] = value
    values = torch.full(valid.shape, float("nan"))
    for row, k, state in where:
        values[row, k] = value_of[state]
    return values, {"value_states": float(len(probes)), "value_texts": float(len(keys))}
