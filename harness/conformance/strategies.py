"""Random but valid rollout batches for property tests, and the transformations the invariants
are stated in (permutations, extra padding, changed rewards).

The structure of a batch (groups, group sizes, lengths, rewards, which step goes wrong) is
drawn by Hypothesis so that it shrinks to small counterexamples; the bulk floats (log-probs,
token ids) come from a seeded ``torch.Generator`` so that drawing a batch stays cheap.

Padding is filled with finite garbage on purpose: a method that reads a padded position
shows up as a broken invariant instead of hiding behind zeros.

Part of the installed conformance suite, so that an outside method's own tests can draw the
same batches: ``from creditbench.harness.conformance.strategies import rollout_batches``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from hypothesis import strategies as st
from torch import Tensor

from creditbench.methods.contract import (
    BEHAVIOUR_ENTROPY,
    BEHAVIOUR_STATISTICS,
    BEHAVIOUR_SUM_PI_SQUARED,
    PROBLEM_INDEX,
    STEP_TRUTH_KEYS,
)
from creditbench.methods.core import RolloutBatch

VOCAB = 32
PROMPT_WIDTH = 4


# --------------------------------------------------------------------------------------------
# A batch from an explicit structure
# --------------------------------------------------------------------------------------------


def _step_ground_truth(
    lengths: Tensor, failed: Tensor, width: int, gen: torch.Generator
) -> tuple[Tensor, dict[str, Tensor]]:
    """``step_ids`` ``[B, T]`` and the :data:`STEP_TRUTH_KEYS` masks ``[B, T]`` of a batch.

    Each response's tokens are cut into 1-4 contiguous steps. A failed response gets a first
    wrong step; its tokens form ``first_wrong_mask``, the tokens of later steps
    ``after_wrong_mask``, and ``wrong_step_mask`` holds the first wrong step plus some later
    ones. A correct response may still hold a wrong step (``wrong_step_mask`` only). A few
    tokens anywhere in a response are filler.
    """
    size = len(lengths)
    position = torch.arange(width)
    in_response = position < lengths.unsqueeze(-1)
    max_steps = lengths.clamp(max=4)
    num_steps = 1 + (torch.rand(size, generator=gen) * max_steps).long()
    # A step starts at num_steps - 1 distinct random positions in 1..length-1.
    can_cut = in_response & (position > 0)
    scores = torch.rand(size, width, generator=gen).masked_fill(~can_cut, 2.0)
    rank = scores.argsort(-1).argsort(-1)
    cuts = can_cut & (rank < (num_steps - 1).unsqueeze(-1))
    step = cuts.long().cumsum(-1)
    step_ids = step.masked_fill(~in_response, -1)

    picked = (torch.rand(size, generator=gen) * num_steps).long().unsqueeze(-1)
    failed = failed.unsqueeze(-1) & in_response
    also_wrong = (torch.rand(size, 4, generator=gen) < 0.5).gather(-1, step.clamp(max=3))
    slipped = (torch.rand(size, 1, generator=gen) < 0.3) & ~failed & in_response
    first_wrong = failed & (step == picked)
    after_wrong = failed & (step > picked)
    wrong = first_wrong | (after_wrong & also_wrong) | (slipped & (step == picked))
    filler = in_response & (torch.rand(size, width, generator=gen) < 0.15)
    masks = {
        "first_wrong_mask": first_wrong.float(),
        "after_wrong_mask": after_wrong.float(),
        "wrong_step_mask": wrong.float(),
        "filler_mask": filler.float(),
    }
    assert set(masks) == set(STEP_TRUTH_KEYS), (
        "keep the fake ground truth in step with STEP_TRUTH_KEYS"
    )
    return step_ids, masks


def build_batch(
    group_sizes: Sequence[int],
    lengths: Sequence[int],
    rewards: Sequence[float],
    *,
    seed: int = 0,
    width: int | None = None,
    group_labels: Sequence[int] | None = None,
    with_ref: bool = True,
    with_steps: bool = True,
    with_extras: bool = True,
    statistics: Sequence[str] = (),
    shuffle_rows: bool = False,
    vocab: int = VOCAB,
) -> RolloutBatch:
    """A valid :class:`RolloutBatch` with the given structure.

    Args:
        group_sizes: responses per prompt, e.g. ``[4, 1, 3]``.
        lengths: ``[B]`` response lengths, each ``>= 1``; ``B = sum(group_sizes)``.
        rewards: ``[B]`` outcome rewards; a response with reward < 1 counts as failed.
        seed: seeds every float and token id.
        width: padded width ``T`` (default: the longest response).
        group_labels: one id per group (default ``0, 1, ...``).
        statistics: behaviour statistics to add to the extras (of :data:`BEHAVIOUR_STATISTICS`):
            an entropy in quarters in [0, 3), so that some tie; a Σπ² that the row's own
            token's probability could have (between π² and π² + (1 - π)²).
        shuffle_rows: interleave the groups instead of keeping each group's rows adjacent.
        vocab: response token ids are drawn from ``1..vocab - 1``; a small one (3) makes the
            responses of a group share prefixes and part often, as a prefix tree needs.
    """
    size = sum(group_sizes)
    if len(lengths) != size or len(rewards) != size or min(lengths) < 1:
        raise ValueError("need one length >= 1 and one reward per response")
    width = max(lengths) if width is None else width
    if width < max(lengths):
        raise ValueError(f"width {width} is shorter than the longest response")
    labels = list(range(len(group_sizes))) if group_labels is None else list(group_labels)
    gen = torch.Generator().manual_seed(seed)

    group_ids = torch.tensor(
        [label for label, n in zip(labels, group_sizes, strict=True) for _ in range(n)]
    )
    length = torch.tensor(lengths)
    response_mask = (torch.arange(width) < length.unsqueeze(-1)).float()
    # One prompt per group, left-padded, shared by the group's responses.
    prompt_len = torch.randint(1, PROMPT_WIDTH + 1, (len(group_sizes),), generator=gen)
    prompt_mask = (torch.arange(PROMPT_WIDTH) >= PROMPT_WIDTH - prompt_len.unsqueeze(-1)).float()
    prompt_ids = torch.randint(1, VOCAB, (len(group_sizes), PROMPT_WIDTH), generator=gen)
    prompt_ids = prompt_ids * prompt_mask.long()
    per_group = torch.repeat_interleave(torch.arange(len(group_sizes)), torch.tensor(group_sizes))
    # Padded positions hold finite garbage, never zeros a method could lean on.
    response_ids = torch.randint(1, vocab, (size, width), generator=gen)
    old_logprobs = -0.01 - 4.0 * torch.rand(size, width, generator=gen)
    ref_logprobs = (old_logprobs + 0.1 * torch.randn(size, width, generator=gen)).clamp(max=-1e-3)

    step_ids, extras = None, None
    if with_steps or with_extras:
        failed = torch.tensor(rewards) < 1.0
        all_step_ids, masks = _step_ground_truth(length, failed, width, gen)
        step_ids = all_step_ids if with_steps else None
        extras = masks if with_extras else None
    if extras is not None:  # as a graded batch carries it: the problem of each row's group
        extras[PROBLEM_INDEX] = per_group.clone()
    unknown = [key for key in statistics if key not in BEHAVIOUR_STATISTICS]
    if unknown:
        raise ValueError(f"statistics: not behaviour statistics: {unknown}")
    if BEHAVIOUR_ENTROPY in statistics:
        own = torch.Generator().manual_seed(seed + 1)  # leaves every other draw as it was
        entropy = torch.randint(0, 12, (size, width), generator=own) / 4.0
        extras = {**(extras or {}), BEHAVIOUR_ENTROPY: entropy * response_mask}
    if BEHAVIOUR_SUM_PI_SQUARED in statistics:
        own = torch.Generator().manual_seed(seed + 2)
        chosen = old_logprobs.exp()  # the rest of the mass, 1 - π, lies on the other tokens
        rest = torch.rand(size, width, generator=own) * (1.0 - chosen).square()
        extras = {
            **(extras or {}),
            BEHAVIOUR_SUM_PI_SQUARED: (chosen.square() + rest) * response_mask,
        }

    batch = RolloutBatch(
        prompt_ids=prompt_ids[per_group],
        prompt_mask=prompt_mask[per_group],
        response_ids=response_ids,
        response_mask=response_mask,
        group_ids=group_ids,
        rewards=torch.tensor(rewards, dtype=torch.float32),
        old_logprobs=old_logprobs,
        ref_logprobs=ref_logprobs if with_ref else None,
        step_ids=step_ids,
        truncated=torch.rand(size, generator=gen) < 0.2,
        extras=extras,
    )
    return batch.select(torch.randperm(size, generator=gen)) if shuffle_rows else batch


# --------------------------------------------------------------------------------------------
# The Hypothesis strategy
# --------------------------------------------------------------------------------------------


_BIT = st.integers(0, 1)
_DYADIC = st.integers(-8, 8)


@st.composite
def rollout_batches(
    draw: st.DrawFn,
    *,
    min_groups: int = 1,
    max_groups: int = 3,
    max_group_size: int = 4,
    max_len: int = 6,
    extras: bool | None = None,
    statistics: Sequence[str] = (),
    vocab: int = VOCAB,
    binary: bool = False,
) -> RolloutBatch:
    """Random valid batches: groups of one and unequal sizes, unequal lengths (>= 1 token),
    0/1 or dyadic rewards (0/1 only with ``binary``: passed or failed, a verifier's
    outcome), optional reference log-probs and step ids, and the step ground truth of
    :data:`STEP_TRUTH_KEYS` (always with ``extras=True``, never with ``False``, either way
    with ``None``); the behaviour ``statistics`` named too; response ids from
    ``1..vocab - 1`` (see :func:`build_batch`)."""
    num_groups = draw(st.integers(min_groups, max_groups))
    group_size, length = st.integers(1, max_group_size), st.integers(1, max_len)
    sizes = [draw(group_size) for _ in range(num_groups)]
    lengths = [draw(length) for _ in range(sum(sizes))]
    if binary or draw(st.booleans()):
        rewards = [float(draw(_BIT)) for _ in lengths]
    else:  # dyadic values: sums and means of a few of them are exact in float32
        rewards = [draw(_DYADIC) / 4 for _ in lengths]
    seed = draw(st.integers(0, 2**31 - 1))
    # Arbitrary distinct labels, not 0..n-1: a group id is a name, never an index.
    labels = torch.randperm(1000, generator=torch.Generator().manual_seed(seed))[:num_groups]
    with_extras = draw(st.booleans()) if extras is None else extras
    return build_batch(
        sizes,
        lengths,
        rewards,
        seed=seed,
        width=max(lengths) + draw(st.integers(0, 2)),
        group_labels=labels.tolist(),
        with_ref=draw(st.booleans()),
        with_steps=with_extras or draw(st.booleans()),
        with_extras=with_extras,
        statistics=statistics,
        shuffle_rows=draw(st.booleans()),
        vocab=vocab,
    )


# --------------------------------------------------------------------------------------------
# Transformations: each returns the new batch and, where rows move, the index of the old row
# that sits at each new position (``new = old.select(index)``).
# --------------------------------------------------------------------------------------------


def same_within_groups(batch: RolloutBatch) -> RolloutBatch:
    """Give every response of a group the tokens and the mask of its first: a group whose
    prefix tree never branches (rewards are left as they were)."""
    for label in batch.group_ids.unique():
        rows = (batch.group_ids == label).nonzero().squeeze(-1)
        batch.response_ids[rows] = batch.response_ids[rows[0]].clone()
        batch.response_mask[rows] = batch.response_mask[rows[0]].clone()
    return batch


def permute_within_groups(batch: RolloutBatch, seed: int) -> tuple[RolloutBatch, Tensor]:
    """Shuffle the responses of each group among that group's row positions."""
    gen = torch.Generator().manual_seed(seed)
    index = torch.arange(batch.size)
    for label in batch.group_ids.unique():
        rows = (batch.group_ids == label).nonzero().squeeze(-1)
        index[rows] = rows[torch.randperm(len(rows), generator=gen)]
    return batch.select(index), index


def permute_groups(
    batch: RolloutBatch, seed: int, *, relabel: bool = False
) -> tuple[RolloutBatch, Tensor]:
    """Reorder the rows so that the groups come in a random order, each group's rows adjacent
    and in their old relative order. ``relabel=True`` also renames the groups with a random
    bijection of their ids (a group id is a name, not a quantity)."""
    gen = torch.Generator().manual_seed(seed)
    labels = batch.group_ids.unique()
    order = labels[torch.randperm(len(labels), generator=gen)]
    index = torch.cat([(batch.group_ids == label).nonzero().squeeze(-1) for label in order])
    moved = batch.select(index)
    if relabel:
        new_names = labels[torch.randperm(len(labels), generator=gen)] * 7 + 3
        position = torch.searchsorted(labels, moved.group_ids)
        moved.group_ids = new_names[position]
    return moved, index


def pad_more(batch: RolloutBatch, extra: int, seed: int = 0) -> RolloutBatch:
    """Append ``extra`` padding columns to every ``[B, T]`` field: masks 0, step ids -1, and
    finite garbage in token ids and log-probs."""
    gen = torch.Generator().manual_seed(seed)
    size = batch.size

    def widen(value: Tensor | None, fill: Tensor) -> Tensor | None:
        return None if value is None else torch.cat([value, fill.to(value.dtype)], dim=-1)

    garbage = -0.01 - 4.0 * torch.rand(size, extra, generator=gen)
    zeros = torch.zeros(size, extra)
    extras = None
    if batch.extras is not None:
        extras = {
            key: widen(value, zeros) if value.dim() == 2 else value
            for key, value in batch.extras.items()
        }
    return RolloutBatch(
        prompt_ids=batch.prompt_ids,
        prompt_mask=batch.prompt_mask,
        response_ids=widen(
            batch.response_ids, torch.randint(1, VOCAB, (size, extra), generator=gen)
        ),
        response_mask=widen(batch.response_mask, zeros),
        group_ids=batch.group_ids,
        rewards=batch.rewards,
        old_logprobs=widen(batch.old_logprobs, garbage),
        ref_logprobs=widen(batch.ref_logprobs, garbage - 0.05),
        step_ids=widen(batch.step_ids, torch.full((size, extra), -1)),
        truncated=batch.truncated,
        extras=extras,
    )


def perturb_group_rewards(
    batch: RolloutBatch, group: int, new_rewards: Sequence[float] | None = None
) -> RolloutBatch:
    """The same batch with the rewards of group id ``group`` replaced (default: ``1 - r``)."""
    rows = batch.group_ids == group
    rewards = batch.rewards.clone()
    if new_rewards is None:
        rewards[rows] = 1.0 - rewards[rows]
    else:
        rewards[rows] = torch.tensor(list(new_rewards), dtype=rewards.dtype)
    return RolloutBatch(**{**vars(batch), "rewards": rewards})
