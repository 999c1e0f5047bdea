"""From character spans of a response to per-token masks: the step ground truth a trainer
attaches to a batch (``RolloutBatch.extras``, keys :data:`methods.contract.STEP_TRUTH_KEYS`).

The offsets of the tokens come from decoding, so that they match the text the task judged:
``text = tokenizer.decode(token_ids, skip_special_tokens=True)``. Special tokens (the end of
sequence) get empty spans.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from creditbench.harness.tasks.base import Span, StepCheck


def token_char_offsets(tokenizer: Any, token_ids: Sequence[int]) -> list[Span]:
    """``(start, end)`` of every token in the decoded text, decoding token by token.

    When decoding each token alone and concatenating gives the full text (character and most
    word-level tokenizers), that is used; otherwise (byte-level BPE, SentencePiece's leading
    spaces) token ``i`` ends where the decoded prefix ``token_ids[:i+1]`` ends, made monotone.
    """
    ids = [int(t) for t in token_ids]
    full = tokenizer.decode(ids, skip_special_tokens=True)
    distinct = sorted(set(ids))
    decoded = dict(
        zip(
            distinct,
            tokenizer.batch_decode([[t] for t in distinct], skip_special_tokens=True),
            strict=True,
        )
    )
    pieces = [decoded[t] for t in ids]
    if "".join(pieces) == full:
        ends = []
        total = 0
        for piece in pieces:
            total += len(piece)
            ends.append(total)
    else:
        ends, previous = [], 0
        for i in range(len(ids)):
            prefix = tokenizer.decode(ids[: i + 1], skip_special_tokens=True)
            # a partial multi-byte character decodes to a replacement char, then vanishes
            previous = min(max(previous, len(prefix.rstrip("\ufffd"))), len(full))
            ends.append(previous)
        if ends:
            ends[-1] = len(full)
    starts = [0, *ends[:-1]]
    return list(zip(starts, ends, strict=True))


def spans_to_token_mask(offsets: Sequence[Span], spans: Sequence[Span]) -> list[int]:
    """1 on every token whose characters overlap one of ``spans`` (empty spans mark nothing)."""
    mask = [0] * len(offsets)
    for s, e in spans:
        if s >= e:
            continue
        for i, (ts, te) in enumerate(offsets):
            if ts < e and te > s:
                mask[i] = 1
    return mask


def _stop_tokens(offsets: Sequence[Span], at: int) -> list[int]:
    """The empty (special) tokens at the end of the text: where a response stopped."""
    return [1 if ts == te >= at else 0 for ts, te in offsets]


def step_masks(check: StepCheck, offsets: Sequence[Span]) -> dict[str, list[int]]:
    """The four step masks of one response, each a 0/1 list as long as ``offsets``.

    - ``first_wrong_mask``: the tokens of the first wrong step. A response that stops early
      with no answer line has an empty span at the end of its text; then the end-of-sequence
      token(s) are marked, or nothing when the response was cut off.
    - ``after_wrong_mask``: every token after the first wrong step.
    - ``wrong_step_mask``: the tokens of every wrong step, also inside a correct answer.
    - ``filler_mask``: the filler words, which never affect the reward.

    ``check`` is what a step-checked task says about the response (``Task.check_steps``).
    """
    n = len(offsets)
    verdicts = check.wrong

    def mark(spans: list[Span]) -> list[int]:
        mask = spans_to_token_mask(offsets, spans)
        for s, e in spans:
            if s == e:
                mask = [max(a, b) for a, b in zip(mask, _stop_tokens(offsets, s), strict=True)]
        return mask

    if verdicts:
        first = verdicts[0]
        first_mask = mark([(first.char_start, first.char_end)])
        after = [
            1 if ts >= first.char_end and not f else 0
            for (ts, _), f in zip(offsets, first_mask, strict=True)
        ]
    else:
        first_mask, after = [0] * n, [0] * n
    return {
        "first_wrong_mask": first_mask,
        "after_wrong_mask": after,
        "wrong_step_mask": mark([(v.char_start, v.char_end) for v in verdicts]),
        "filler_mask": spans_to_token_mask(offsets, check.filler),
    }


def token_step_ids(offsets: Sequence[Span], step_spans: Sequence[Span]) -> list[int]:
    """The index of the step each token belongs to, -1 for none (``RolloutBatch.step_ids``)."""
    ids = [-1] * len(offsets)
    for k, (s, e) in enumerate(step_spans):
        for i, (ts, te) in enumerate(offsets):
            if ts < e and te > s:
                ids[i] = k
    return ids
