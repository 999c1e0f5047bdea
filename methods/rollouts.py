"""Rollout building blocks that several methods share, written on the services contract.

A method whose rollout is more than ``services.sample_batch()`` (resets, repairs, two roles)
composes these, so its own file keeps the paper's logic and none of the plumbing:

- :func:`continue_prefixes`: continuations from a state inside earlier responses (RRPO/SRPO);
- :func:`own_tokens_only`: a continuation trains on what it sampled, not on its prefix;
- :func:`with_step_ids`: a batch's steps, from the task's own spans or a delimiter, and the step
  arithmetic on them (:func:`num_steps`, :func:`prefix_lengths` of a reset state,
  :func:`true_first_wrong` from the ground truth);
- :func:`verified_responses`: given texts or token ids as a graded batch, and which of them
  are correct and new (IBPO's repairs);
- :func:`adjacent_groups`: the first row and size of each group of a ``sample_batch`` batch;
- :func:`hinted_rollout`: one policy in two roles, a hint writer and an answerer (CCPO);
- :func:`pad_extras_like`: give two batches from different calls the same extras, to stack;
- :func:`turn_for_step`: which of two roles trains at a step (CCPO's alternation).

Imports torch only, like every file of ``methods/``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from .contract import PREFIX_MASK, PROBLEM_INDEX, Services
from .core import RolloutBatch

STEP_DELIMITERS = {"blank_line": "\n\n", "thought": "</thought>", "line": "\n"}
STEP_MODES = ("auto", "task", *STEP_DELIMITERS)


def continue_prefixes(
    services: Services,
    prompts: Sequence[str],
    problem_index: Tensor,
    parents: RolloutBatch,
    prefix_lengths: Sequence[int],
    n: int,
) -> RolloutBatch:
    """``n`` graded continuations of each parent row's first ``prefix_lengths[i]`` response
    tokens, under ``prompts[i]``; the prefix is marked by ``PREFIX_MASK``."""
    prefixes = [parents.response_ids[i, : prefix_lengths[i]].tolist() for i in range(parents.size)]
    return services.generate(prompts, n, prefixes, problem_index=problem_index)


def own_tokens_only(batch: RolloutBatch) -> RolloutBatch:
    """``batch`` with no loss on the prefix each row continued: ``response_mask`` and the
    behaviour (and reference) log-probs zeroed there, the prefix kept as context. Rows without
    a prefix get an all-zero ``PREFIX_MASK``, so batches of both kinds stack."""
    extras = batch.extras = batch.extras or {}
    keep = 1.0 - extras.setdefault(PREFIX_MASK, torch.zeros_like(batch.response_mask))
    batch.response_mask = batch.response_mask * keep
    batch.old_logprobs = batch.old_logprobs * keep
    if batch.ref_logprobs is not None:
        batch.ref_logprobs = batch.ref_logprobs * keep
    return batch


def with_step_ids(batch: RolloutBatch, services: Services, mode: str = "auto") -> RolloutBatch:
    """``batch`` with ``step_ids``: the task's step spans (``auto``, ``task``), else steps cut
    after each delimiter of ``mode`` (``auto`` falls back to a blank line)."""
    if mode in ("auto", "task") and batch.step_ids is not None:
        return batch
    if mode == "task":
        raise ValueError("steps: the task has no step spans; use blank_line, thought or line")
    delimiter = STEP_DELIMITERS.get(mode, STEP_DELIMITERS["blank_line"])
    batch.step_ids = services.delimited_step_ids(batch, delimiter)
    return batch


def step_ids_of(batch: RolloutBatch) -> Tensor:
    """``batch.step_ids``, or ValueError when the batch has none (see :func:`with_step_ids`)."""
    if batch.step_ids is None:
        raise ValueError("steps: the batch has no step_ids")
    return batch.step_ids


def num_steps(step_ids: Tensor) -> Tensor:
    """``[B]`` steps of each response from ``step_ids`` ``[B, T]`` (-1 outside steps)."""
    return step_ids.max(dim=-1).values.clamp(min=-1) + 1


def prefix_lengths(step_ids: Tensor, k: Tensor) -> Tensor:
    """``[B]`` tokens before step ``k`` (1-based, ``[B]``): the reset state keeps steps 1..k-1."""
    later = step_ids >= (k - 1).unsqueeze(-1)
    first = torch.where(later.any(-1), later.float().argmax(-1), step_ids.shape[-1])
    return torch.where(k <= 1, 0, first)


def true_first_wrong(step_ids: Tensor, first_wrong_mask: Tensor) -> Tensor:
    """``[B]`` 0-based first wrong step from the ground truth; ``n`` when it is a missing line
    past the last step, -1 when none is marked."""
    marked = first_wrong_mask > 0
    big = step_ids.shape[-1] + 1
    first = torch.where(marked & (step_ids >= 0), step_ids, big).min(-1).values
    return torch.where(marked.any(-1), torch.where(first == big, num_steps(step_ids), first), -1)


def response_tokens(batch: RolloutBatch, row: int) -> list[int]:
    """The loss-carrying token ids of one row."""
    return batch.response_ids[row][batch.response_mask[row] > 0].tolist()


def verified_responses(
    services: Services,
    problem_index: Tensor,
    responses: Sequence[str | Sequence[int]],
    originals: Sequence[Sequence[int]],
    correct_above: float,
) -> tuple[RolloutBatch, Tensor]:
    """The ``responses`` (to train-split problems ``problem_index``) as a graded, scored batch,
    and ``[R]`` bool: which are correct (reward above ``correct_above``) and differ from the
    token ids ``originals[k]`` they replace."""
    batch = services.batch_from_responses(problem_index, list(responses))
    ok = [
        bool(batch.rewards[k] > correct_above) and response_tokens(batch, k) != list(original)
        for k, original in enumerate(originals)
    ]
    return batch, torch.tensor(ok, dtype=torch.bool)


def adjacent_groups(batch: RolloutBatch) -> tuple[Tensor, int]:
    """``([P] first row of each group, group size)`` of a batch whose groups are adjacent and of
    one size, as ``services.sample_batch`` lays them out; ValueError otherwise."""
    ids = batch.group_ids
    starts = torch.ones_like(ids, dtype=torch.bool)
    starts[1:] = ids[1:] != ids[:-1]
    first = starts.nonzero().squeeze(-1)
    size = batch.size // max(len(first), 1)
    even = torch.equal(first, torch.arange(0, batch.size, max(size, 1)))
    if size * len(first) != batch.size or not even:
        raise ValueError("the rollout must hold adjacent groups of equal size")
    return first, size


def hinted_rollout(
    services: Services,
    hint_variant: str,
    answer_variant: str,
    *,
    hint_max_new_tokens: int | None = None,
    hint_text: Callable[[str], str] | None = None,
) -> tuple[RolloutBatch, RolloutBatch, RolloutBatch]:
    """One policy in two roles, as three batches of the step's prompts:

    - ``solo``: the default rollout, G answers per prompt with no hint (the counterfactual);
    - ``hints``: G texts per prompt under its ``hint_variant`` prompt, not graded, carrying
      ``PROBLEM_INDEX``;
    - ``answers``: one graded answer per hint under the ``answer_variant`` prompt that shows
      it, in the hints' groups, so the k-th answer pairs with the k-th hint and solo answer.

    ``hint_text`` maps each decoded hint to the text the answerer is shown (CCPO strips a
    final ``\\boxed{}``); the ``hints`` batch keeps what was sampled.
    """
    solo = services.sample_batch()
    first, size = adjacent_groups(solo)
    problems = solo.extra(PROBLEM_INDEX)[first].repeat_interleave(size)
    hints = services.generate(
        services.variant(solo.select(first), hint_variant),
        n=size,
        max_new_tokens=hint_max_new_tokens,
    )
    hints.extras = {**(hints.extras or {}), PROBLEM_INDEX: problems}
    texts = services.decode(hints)
    if hint_text is not None:
        texts = [hint_text(text) for text in texts]
    prompts = services.variant(hints, answer_variant, hints=texts)
    answers = services.generate(prompts, n=1, problem_index=problems)
    answers.group_ids = hints.group_ids.clone()
    return solo, hints, answers


def pad_extras_like(batch: RolloutBatch, like: RolloutBatch) -> None:
    """Give ``batch`` zeros for the extras ``like`` has and it lacks (and -1 ``step_ids``), so
    the two can be stacked with ``concat_batches``."""
    extras = batch.extras if batch.extras is not None else {}
    for key, value in (like.extras or {}).items():
        if key not in extras:
            shape = (batch.size, *batch.response_ids.shape[1:2], *value.shape[2:])
            extras[key] = value.new_zeros(shape if value.dim() >= 2 else (batch.size,))
    batch.extras = extras
    if like.step_ids is not None and batch.step_ids is None:
        batch.step_ids = torch.full_like(batch.response_ids, -1)


def turn_for_step(step: int, period: int, first: int) -> int:
    """The role (0 or 1) that trains at 0-based ``step``: turns of ``period`` steps, ``first``
    first."""
    return first if (step // period) % 2 == 0 else 1 - first
