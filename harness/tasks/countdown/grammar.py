"""The line format of the countdown task, its exact reachability, and its step checker.

A problem is a list of small numbers and a target. A solution combines two of the numbers
still left in each line, until one number is left, and ends with an answer line::

    8-3=5 left 7 2 5            <- the numbers left: the line's two removed, its result added
    7*5=35 left 2 35
    35-2=33 left 33
    Answer: 33

A step line is ``A<op>B=C left N1 N2 ...`` with ``A >= B``, op one of ``+ - * /``, ``C`` the
exact result (a division must come out whole) and at most ``max_value``, and the numbers left
written in a fixed order: the previous list with the first ``A`` and the first ``B`` removed,
then ``C``. Numbers have no leading zeros. Every choice a line makes is in its first
characters (which two numbers, which operation); the rest of the line is determined by them.
The answer line is ``Answer: N``, ending at a newline or the end of the text; lines after it
are ignored. Any other text is malformed: the format is strict so that the successful
responses from a state can be listed exactly (:mod:`.values`).

**The step truth is reachability.** A state (the numbers left) is *live* when the target can
be made from exactly those numbers (each used once, every intermediate a whole number in
``0..max_value``), computed exactly by :func:`reachable`. A line that is well formed and
right but turns a live state into a dead one is a **dead end**: the response can no longer
succeed, however well it goes on. The checker judges every line; after a dead end or a wrong
line the later lines are judged only for being right (the chain's rule: a slip's consequence
is not a new error).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from creditbench.harness.tasks.base import StepVerdict

ANSWER_MARKER = "Answer:"
OPS = "+-*/"
ERROR_KINDS = (
    "dead end",  # right, but the target can no longer be made
    "operand",  # uses a number that is not left
    "arithmetic",  # the result is not A op B (or the division is not whole, or too large)
    "numbers left",  # the list of numbers left is not the one the line leaves
    "malformed",  # not a step line (or A < B)
    "extra step",  # a step line after one number is left
    "early stop",  # the answer line (or the end) before one number is left
    "wrong answer",  # the answer line does not state the one number left
)

# Every character a prompt or a solution of the task can contain.
ALPHABET = "\n .:/*+-=0123456789Aaefgkmnortlsw"

_NUM = r"(0|[1-9]\d{0,5})"  # no leading zeros: one text per number, as the values need
_STEP = re.compile(rf"{_NUM}([+\-*/]){_NUM}={_NUM} left((?: {_NUM})+)")
_ANSWER = re.compile(rf"{ANSWER_MARKER} {_NUM}")


def apply_move(a: int, op: str, b: int, max_value: int) -> int | None:
    """``a op b`` for ``a >= b``, or None where the move is not allowed (a division that is not
    whole, a result above ``max_value``)."""
    if op == "+":
        result = a + b
    elif op == "-":
        result = a - b
    elif op == "*":
        result = a * b
    elif b == 0 or a % b:
        return None
    else:
        result = a // b
    return result if result <= max_value else None


def after_move(numbers: tuple[int, ...], a: int, b: int, result: int) -> tuple[int, ...] | None:
    """The numbers left after a line combines ``a`` and ``b`` into ``result``: the first ``a``
    and the first ``b`` removed, ``result`` appended; None when ``a`` or ``b`` is not left."""
    rest = list(numbers)
    for used in (a, b):
        if used not in rest:
            return None
        rest.remove(used)
    return (*rest, result)


def moves(numbers: tuple[int, ...], max_value: int) -> list[tuple[int, str, int, int]]:
    """Every allowed line from ``numbers``: ``(a, op, b, result)``, each once (distinct by its
    text), in a fixed order."""
    out = []
    seen = set()
    for i in range(len(numbers)):
        for j in range(len(numbers)):
            a, b = numbers[i], numbers[j]
            if i == j or a < b or (a, b) in seen:
                continue
            seen.add((a, b))
            for op in OPS:
                result = apply_move(a, op, b, max_value)
                if result is not None:
                    out.append((a, op, b, result))
    return out


@lru_cache(maxsize=1 << 18)
def _made(key: tuple[int, ...], max_value: int) -> frozenset[int]:
    if len(key) == 1:
        return frozenset(key)
    out: set[int] = set()
    for a, _, b, result in moves(key, max_value):
        rest = after_move(key, a, b, result)
        assert rest is not None
        out |= _made(tuple(sorted(rest)), max_value)
    return frozenset(out)


def makeable(numbers: tuple[int, ...], max_value: int) -> frozenset[int]:
    """Every value that can be made from exactly ``numbers`` (memoised on the multiset)."""
    return _made(tuple(sorted(numbers)), max_value)


def reachable(numbers: tuple[int, ...], target: int, max_value: int) -> bool:
    """Whether ``target`` can be made from exactly ``numbers``: the state is live."""
    return target in makeable(numbers, max_value)


def render_step(a: int, op: str, b: int, result: int, left: tuple[int, ...]) -> str:
    """The inverse of :func:`parse_step`."""
    return f"{a}{op}{b}={result} left " + " ".join(map(str, left))


@dataclass(frozen=True)
class StepLine:
    a: int
    op: str
    b: int
    result: int
    left: tuple[int, ...]


def parse_step(line: str) -> StepLine | None:
    """One step line, or None when it is not in the format (``A < B`` included)."""
    match = _STEP.fullmatch(line)
    if match is None:
        return None
    a, op, b, result = int(match[1]), match[2], int(match[3]), int(match[4])
    if a < b:
        return None
    return StepLine(a, op, b, result, tuple(int(x) for x in match[5].split()))


@dataclass(frozen=True)
class Layout:
    """Where the lines of a response are: the step lines, then the answer line (if any)."""

    steps: list[tuple[int, int]]
    answer: tuple[int, int] | None
    length: int

    @property
    def spans(self) -> list[tuple[int, int]]:
        return self.steps + ([self.answer] if self.answer else [])


def layout(text: str) -> Layout:
    """Split ``text`` into step lines and the answer line. A newline ending the text does not
    start another line; lines after the answer line are not part of the solution."""
    steps: list[tuple[int, int]] = []
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        if text.startswith(ANSWER_MARKER, start):
            return Layout(steps, (start, end), len(text))
        steps.append((start, end))
        start = end + 1
    return Layout(steps, None, len(text))


@dataclass(frozen=True)
class Walked:
    """Where :func:`walk` stands after step line ``line``: its verdict (None when right), the
    numbers left (None after a line that cannot be followed) and whether the target can
    still be made (``live``: no wrong step so far and the state reachable)."""

    line: int
    verdict: str | None
    numbers: tuple[int, ...] | None
    live: bool


def judge_line(
    numbers: tuple[int, ...] | None, line: StepLine | None, max_value: int
) -> tuple[str | None, tuple[int, ...] | None]:
    """The verdict on one step line from ``numbers`` (None: unknown, after a malformed line),
    reachability aside, and the numbers the next line starts from."""
    if numbers is not None and len(numbers) <= 1:
        return "extra step", numbers
    if line is None:
        return "malformed", None
    if numbers is not None and after_move(numbers, line.a, line.b, line.result) is None:
        return "operand", line.left
    if apply_move(line.a, line.op, line.b, max_value) != line.result:
        return "arithmetic", line.left
    if numbers is not None and after_move(numbers, line.a, line.b, line.result) != line.left:
        return "numbers left", line.left
    return None, line.left


def walk(
    numbers: tuple[int, ...], target: int, lines: list[StepLine | None], max_value: int
) -> Iterator[Walked]:
    """The step lines judged in order from the problem's ``numbers``."""
    current: tuple[int, ...] | None = numbers
    live = reachable(numbers, target, max_value)
    for i, line in enumerate(lines):
        verdict, current = judge_line(current, line, max_value)
        if verdict is None and live and current is not None:
            if not reachable(current, target, max_value):
                verdict = "dead end"
        live = live and verdict is None
        yield Walked(i, verdict, current, live)


def parse_answer(text: str) -> tuple[str, int | None]:
    """``(status, value)`` of the answer line: ``("ok", v)``, ``("missing", None)`` or
    ``("malformed", None)``. The grader and the checker both read the answer through this."""
    answer = layout(text).answer
    if answer is None:
        return "missing", None
    match = _ANSWER.fullmatch(text, answer[0], answer[1])
    if match is None:
        return "malformed", None
    return "ok", int(match[1])


def judge(
    numbers: tuple[int, ...], target: int, text: str, max_value: int
) -> Iterator[StepVerdict]:
    """Every wrong step of ``text``, in order. ``step`` indexes :attr:`Layout.spans` (the step
    lines, then the answer line); a response that stops before one number is left is wrong at
    its answer line or, with none, at the empty span at the end of the text (``step`` is then
    ``len(spans)``). The answer line is wrong when it does not state the one number left
    (stating it is right even when it is not the target: the dead end was the error). On a
    problem whose target can be made, a response is correct exactly when this yields
    nothing."""
    lay = layout(text)
    parsed = [parse_step(text[s:e]) for s, e in lay.steps]
    current: tuple[int, ...] | None = numbers
    for state in walk(numbers, target, parsed, max_value):
        current = state.numbers
        if state.verdict:
            yield StepVerdict(state.line, state.verdict, *lay.steps[state.line])
    stop = len(lay.steps)
    end_span = lay.answer or (lay.length, lay.length)
    if lay.answer is None or (current is not None and len(current) > 1):
        yield StepVerdict(stop, "early stop", *end_span)
        return
    status, value = parse_answer(text)
    if status != "ok":
        yield StepVerdict(stop, "malformed", *end_span)
    elif current is not None and (value,) != current:
        yield StepVerdict(stop, "wrong answer", *end_span)
