"""The chain task's own value of a state, V(s) = P_pi(R = 1 | s), from the policy's probability
of writing the rest of the chain right: the ``analytic`` estimator of the exact-credit oracle.

From a state (the prompt and the first lines of a response) the task knows the operations left
and the value the last line carried forward. The answer is right when every remaining line is,
except for what the task's cancelling operations wipe out:

- a later "times 0" makes every line before it irrelevant (the chain goes on from 0);
- a later "keep the last digit" (``%10``) makes the tens digits before it irrelevant, since
  ``+``, ``-`` and ``*`` mod 100 carry units digits to units digits.

Taking each line's chance of being right as independent of how the lines before it were
written (their fillers and forms), and continuing every state the same way (the first filler,
the direct form) whichever response reached it, so that V is a function of the state alone
and never of the action its credit judges,

    V(s) = prod_j  sum_{r right for line j}  P_pi(r | s, the lines before j written right)

over the remaining lines j that matter.

A rendering is a line's text after its filler (any connective is right), with its newline; the
answer line's is ``Answer: v`` and the end of the sequence. A multiplication has two correct
forms, direct and split. A tens digit that a later ``%10`` wipes out may be any digit: its
factor is the probability of all ten. From a state whose carried value cannot reach the answer
(a wrong step that no later operation cancels) V is 0: a second slip undoing the first is
neglected, as are a one-digit carried value written with two digits and renderings outside the two
forms. A one-digit result a later %10 wipes is also scored written with a tens digit, each of
1-9 a rendering. The estimate is validated against Monte-Carlo values (``creditbench values``).

:func:`value_probes` writes the texts the policy scores and where each rendering lies in them;
the harness scores them (:mod:`creditbench.harness.services.task_values`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from creditbench.harness.tasks.chain.grammar import (
    ANSWER_MARKER,
    MODULUS,
    Op,
    layout,
    number_spans,
    parse_step,
    render_step,
    running_values,
    walk,
)
from creditbench.harness.tasks.chain.traces import canonical_split, splittable

TIMES_ZERO: Op = ("*", 0)
LAST_DIGIT: Op = ("%", 10)


@dataclass(frozen=True)
class Rendering:
    """Characters ``[start, end)`` of text ``text``; ``end == len(text) + 1`` takes the end of
    sequence that follows the text."""

    text: int
    start: int
    end: int


@dataclass(frozen=True)
class ValueProbes:
    """What the policy scores for one state's value.

    Attributes:
        texts: whole responses: the state's lines, then a correct continuation (the first), or
            a continuation cut after one line written in its other form.
        free: per text, the positions of digits that may be any digit.
        lines: per remaining line that matters, its correct renderings.
    """

    texts: tuple[str, ...]
    free: tuple[frozenset[int], ...]
    lines: tuple[tuple[Rendering, ...], ...]


def _body(
    carried: int, op: Op, result: int, split: bool, wipe_carried: str, wipe_result: str
) -> tuple[str, set[int]]:
    """A line's text after its filler (:func:`.grammar.render_step`), newline included, and
    its free digit positions: every digit of a number wiped ``all``, the tens digit of a
    two-digit number wiped ``tens``."""
    parts = None
    if split:
        a, b = canonical_split(op[1])
        parts = (a, b, carried * a % MODULUS, carried * b % MODULUS)
    expr = render_step("", carried, op, result, parts)
    free: set[int] = set()
    for name, (start, end) in number_spans(expr).items():
        wiped = wipe_carried if name == "carried" else wipe_result
        if wiped == "all":
            free |= set(range(start, end))
        elif wiped == "tens" and end - start == 2:
            free.add(start)
    return expr + "\n", free


def _with_tens(body: str, result: int, tens: int) -> str:
    """A line's ``body`` with its one-digit ``result`` written with the tens digit ``tens``
    before it: a later %10 wipes it, so it is right, and a policy trained on outcomes writes
    it (``20-18=42`` before a ``%10``). Each tens digit is a rendering of its own, so the unit
    digit after it is scored in the context the policy wrote."""
    at = len(body) - len(str(result)) - 1  # the result, then the newline
    return body[:at] + str(tens) + body[at:]


def value_probes(
    start: int,
    ops: list[Op],
    answer: str,
    prefix: str,
    fillers: tuple[str, ...],
    split_rate: float,
) -> ValueProbes | None:
    """The probes of the state ``prefix`` (a response's first whole lines, each with its
    newline) of a problem, or None where its value is 0.

    The continuation is the same for every response that reached the state: the first filler
    and the direct form on every remaining line (both forms of each multiplication are scored).
    A continuation in the response's own later fillers and forms would make V(s_k) read the
    action at step k, the one its credit judges (measured: ``docs/methods/oracle.md``).
    """
    lay = layout(prefix)
    if lay.answer is not None:
        raise ValueError("prefix: a state ends before the answer line")
    parsed = [parse_step(prefix[s:e]) for s, e in lay.steps]
    expected, carried = 0, start
    for state in walk(start, ops, parsed):
        expected, carried = state.expected, state.carried
    if carried is None:  # after a malformed line the chain has no value to go on from
        return None
    values = running_values(carried, ops[expected:])
    if str(values[-1]) != answer:
        return None

    text = prefix
    free: set[int] = set()
    texts: list[str] = []  # the alternatives' texts; the main continuation is prepended
    frees: list[frozenset[int]] = []
    lines: list[tuple[Rendering, ...]] = []
    for offset, op in enumerate(ops[expected:]):
        i = expected + offset
        typical = random.Random(f"{start} {ops} {i}")  # the same for every state of the problem
        filler = typical.choice(fillers) + " "
        split = splittable(op) and typical.random() < split_rate
        carried, result = values[offset], values[offset + 1]
        later = ops[i + 1 :]
        if TIMES_ZERO in later:  # wiped out: written, not scored
            text += filler + _body(carried, op, result, split, "none", "none")[0]
            continue
        wipe_result = "tens" if LAST_DIGIT in later else "none"
        wipe_carried = "all" if op == TIMES_ZERO else "tens" if LAST_DIGIT in ops[i:] else "none"
        text += filler
        cut = len(text)
        body, positions = _body(carried, op, result, split, wipe_carried, wipe_result)
        renderings = [Rendering(0, cut, cut + len(body))]
        alternatives = []  # (body, free positions) of the other renderings, each cut after it
        if splittable(op):
            alternatives.append(_body(carried, op, result, not split, wipe_carried, wipe_result))
        if wipe_result == "tens" and result < 10:  # a tens digit the %10 wipes: any is right
            forms = [(body, positions), *alternatives]
            alternatives += [(_with_tens(b, result, d), f) for b, f in forms for d in range(1, 10)]
        for other, other_free in alternatives:
            texts.append(text + other)
            frees.append(frozenset(free | {cut + p for p in other_free}))
            renderings.append(Rendering(len(texts), cut, cut + len(other)))
        free |= {cut + p for p in positions}
        text += body
        lines.append(tuple(renderings))
    final = f"{ANSWER_MARKER} {values[-1]}"
    lines.append((Rendering(0, len(text), len(text) + len(final) + 1),))
    text += final
    return ValueProbes((text, *texts), (frozenset(free), *frees), tuple(lines))
