"""The line format of the ledger task and its step checker.

A problem is a start balance and a list of items (``+K`` or ``-K``), everything mod 100. A
solution writes one line per item, may redo its last item with a ``fix`` line, and ends with an
answer line::

    so 37+25=62
    then 62-48=14
    next 14+9=33        <- a slip
    fix 14+9=23         <- the same item, redone from the value before it
    Answer: 23

Item lines are the chain's simple lines (:mod:`creditbench.harness.tasks.chain.grammar`, whose
parser, layout and answer reader this module reuses); a ``fix`` line is an item line whose
filler is the word ``fix``. Every line is judged *locally*, as on the chain. A wrong line of an
item is **corrected** when a right ``fix`` of the same item follows before the next item line;
the step truth is the wrong lines left uncorrected (:func:`judge`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from creditbench.harness.tasks.base import StepVerdict
from creditbench.harness.tasks.chain.grammar import (
    Op,
    StepLine,
    layout,
    parse_answer,
    parse_step,
)

FIX = "fix "  # the filler that makes a line a correction of the last item

# the wrong lines a right fix can correct: a wrong value, operand or form of the fixed item
CORRECTABLE = ("arithmetic", "carried value", "operand", "malformed")


def is_fix(text: str) -> bool:
    """Whether a line (well-formed or not) is a correction line."""
    return text.startswith(FIX.strip())


@dataclass(frozen=True)
class Target:
    """The item a ``fix`` line redoes: its index and the value it should start from (None
    where an earlier malformed line left no value)."""

    item: int
    before: int | None


@dataclass(frozen=True)
class LineState:
    """Where :func:`walk` stands after step line ``line``.

    Attributes:
        verdict: what is wrong with the line, None when right.
        fix: whether it is a ``fix`` line.
        expected: the item the next item line should write.
        carried: the running value the line leaves (None after a malformed line).
        target: what a ``fix`` on the next line would redo (None: nothing to fix).
    """

    line: int
    verdict: str | None
    fix: bool
    expected: int
    carried: int | None
    target: Target | None


def _judge_fix(line: StepLine, items: list[Op], target: Target) -> str | None:
    if line.op != items[target.item]:
        return "operand"
    if target.before is not None and line.carried != target.before:
        return "carried value"
    return None if line.arithmetic_ok() else "arithmetic"


def walk(start: int, items: list[Op], texts: list[str]) -> Iterator[LineState]:
    """The step lines (their texts) read in order against the items; the chain's alignment of
    item lines (a skipped or inserted item moves it), plus ``fix`` lines."""
    lines = [parse_step(t) for t in texts]
    expected, target = 0, None
    carried: int | None = start
    for i, (text, line) in enumerate(zip(texts, lines, strict=True)):
        verdict: str | None = None
        fix = is_fix(text)
        if fix and target is None:
            verdict = "extra step"  # nothing to fix: it replaces no value
        elif fix:
            assert target is not None
            verdict = "malformed" if line is None else _judge_fix(line, items, target)
            carried = line.result if line is not None else None
        else:
            before = carried
            if expected >= len(items):
                verdict, target = "extra step", None
            elif line is None:
                verdict, target, expected = "malformed", Target(expected, before), expected + 1
            elif line.op == items[expected]:
                if before is not None and line.carried != before:
                    verdict = "carried value"
                elif not line.arithmetic_ok():
                    verdict = "arithmetic"
                target, expected = Target(expected, before), expected + 1
            elif expected + 1 < len(items) and line.op == items[expected + 1]:
                # the skipped item stays missing whatever follows: a fix redoes only this one
                verdict, target = "missing step", Target(expected + 1, before)
                expected += 2
            elif _next_writes(texts, lines, i, items[expected]):
                verdict, target = "extra step", None
            else:
                verdict, target, expected = "operand", Target(expected, before), expected + 1
            carried = line.result if line is not None else None
        yield LineState(i, verdict, fix, expected, carried, target)


def _next_writes(texts: list[str], lines: list[StepLine | None], i: int, op: Op) -> bool:
    """Whether the next line is an item line that writes ``op`` (so line ``i`` is inserted)."""
    if i + 1 >= len(lines) or is_fix(texts[i + 1]):
        return False
    following = lines[i + 1]
    return following is not None and following.op == op


@dataclass(frozen=True)
class Reading:
    """What :func:`read` finds in a response.

    Attributes:
        wrong: the wrong steps not later corrected, in order (the step truth).
        corrected: the wrong lines a later right ``fix`` of the same item corrected.
        pending: the wrong lines of the last item not yet closed or corrected (a state's
            view: in a whole response they are closed by the answer line, and in ``wrong``).
        end: where the walk stands after the last step line (None: no step line).
    """

    wrong: list[StepVerdict]
    corrected: list[StepVerdict]
    pending: list[StepVerdict]
    end: LineState | None


def read(start: int, items: list[Op], text: str, *, whole: bool = True) -> Reading:
    """Every wrong step of ``text``, corrected or not.

    ``step`` indexes :attr:`Layout.spans` (the step lines, then the answer line). With
    ``whole`` the response is complete: its answer line (or its end) closes the last item and
    is judged as the chain's (early stop, malformed, carried value). Without it, ``text`` is a
    state (whole lines, no answer line) and the last item's wrong lines stay ``pending``.
    """
    lay = layout(text)
    texts = [text[s:e] for s, e in lay.steps]
    wrong: list[StepVerdict] = []
    corrected: list[StepVerdict] = []
    pending: list[StepVerdict] = []
    state: LineState | None = None
    for state in walk(start, items, texts):
        verdict = (
            StepVerdict(state.line, state.verdict, *lay.steps[state.line])
            if state.verdict
            else None
        )
        if not state.fix:  # an item line closes the item before it
            wrong += pending
            pending = []
        if state.fix and state.target is not None and verdict is None:
            corrected += pending  # a right fix: the item's wrong lines no longer count
            pending = []
        elif verdict is not None and state.target is not None and state.verdict in CORRECTABLE:
            pending.append(verdict)
        elif verdict is not None:
            wrong.append(verdict)
    if not whole:
        return Reading(sorted(wrong, key=_at), sorted(corrected, key=_at), pending, state)
    wrong += pending
    stop = len(lay.steps)
    end_span = lay.answer or (lay.length, lay.length)
    expected = state.expected if state else 0
    carried = state.carried if state else start
    if expected < len(items) or lay.answer is None:
        wrong.append(StepVerdict(stop, "early stop", *end_span))
    else:
        status, value = parse_answer(text)
        if status != "ok":
            wrong.append(StepVerdict(stop, "malformed", *end_span))
        elif carried is not None and value != carried:
            wrong.append(StepVerdict(stop, "carried value", *end_span))
    return Reading(sorted(wrong, key=_at), sorted(corrected, key=_at), [], state)


def _at(verdict: StepVerdict) -> int:
    return verdict.step


def filler_spans(text: str) -> list[tuple[int, int]]:
    """Spans of the connective word of every well-formed item line; the word ``fix`` is not
    filler (it changes which value counts)."""
    spans = []
    for s, e in layout(text).steps:
        line = parse_step(text[s:e])
        if line is not None and line.filler and not is_fix(text[s:e]):
            spans.append((s, s + len(line.filler)))
    return spans
