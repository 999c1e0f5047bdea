"""The line format of the chain task and its step checker.

A problem is a start value and a list of operations on a running value, everything mod 100.
A solution writes one operation per line and ends with an answer line::

    so 37+25=62
    then 62*(3+4)=86+48=34      <- a multiplication "split" into two easier products
    next 34%10=4                <- "keep the last digit": cancels a slip in the tens digit
    Answer: 4

Each step line is ``<filler><expression>``. The filler is everything before the first digit (a
connective word such as "so" and a space); it never affects correctness. The expression is
either ``A<op>K=R`` (op one of ``+ - * %``) or the split form ``A*(a+b)=P+Q=R`` of a
multiplication by ``K = a + b``. The answer line is the first line that starts with
``Answer:``; everything after it is ignored by the grader and by the checker.

The checker judges every line *locally*: a line is right when it applies the operation it stands
for, to the value the previous line produced, without an arithmetic slip. A slip therefore makes
one wrong step, and the later lines that carry the wrong value forward correctly are right. The
first wrong line is where credit belongs. Lines are aligned to operations as they go, so that a
skipped or inserted step does not make every later line wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from creditbench.harness.tasks.base import StepVerdict

MODULUS = 100
ANSWER_MARKER = "Answer:"
ERROR_KINDS = (
    "arithmetic",
    "carried value",
    "operand",
    "missing step",
    "extra step",
    "early stop",
    "malformed",
)

# Every character a prompt, a variant or a solution of the task can contain (prompts and
# rewrites use only lowercase words; "A" and "S" start the answer line and the localisation
# answer "Step: N").
ALPHABET = "\n !'(),.:?AS[]%*+-=0123456789abcdefghijklmnopqrstuvwxyz"

# Numbers are capped at 6 digits so that no response can make int() parse a huge string.
_NUM = r"(\d{1,6})"
_SIMPLE = re.compile(rf"{_NUM}([+\-*%]){_NUM}={_NUM}")
_SPLIT = re.compile(rf"{_NUM}\*\({_NUM}\+{_NUM}\)={_NUM}\+{_NUM}={_NUM}")
_FIRST_DIGIT = re.compile(r"\d")
_ANSWER_VALUE = re.compile(r"\s*(\d{1,6})\s*")

Op = tuple[str, int]  # ("+", 25), ("-", 48), ("*", 7), ("*", 0), ("%", 10)


def apply_op(op: Op, value: int) -> int:
    symbol, k = op
    if symbol == "+":
        return (value + k) % MODULUS
    if symbol == "-":
        return (value - k) % MODULUS
    if symbol == "*":
        return (value * k) % MODULUS
    if symbol == "%":
        return value % k
    raise ValueError(f"unknown operation {symbol!r}")


def parse_op(text: str) -> Op:
    """``"+25"`` -> ``("+", 25)`` (the form ops are stored in ``Problem.metadata["ops"]``)."""
    return text[0], int(text[1:])


def running_values(start: int, ops: list[Op]) -> list[int]:
    """``[v_0, v_1, ..., v_n]``: the value before the first operation and after each one."""
    values = [start]
    for op in ops:
        values.append(apply_op(op, values[-1]))
    return values


@dataclass(frozen=True)
class StepLine:
    """One parsed step line. ``parts`` is ``(a, b, P, Q)`` for the split form, else None."""

    filler: str
    carried: int
    op: Op
    result: int
    parts: tuple[int, int, int, int] | None = None

    def arithmetic_ok(self) -> bool:
        if self.parts is None:
            return self.result == apply_op(self.op, self.carried)
        a, b, p, q = self.parts
        return (
            p == self.carried * a % MODULUS
            and q == self.carried * b % MODULUS
            and self.result == (p + q) % MODULUS
        )


def parse_step(line: str) -> StepLine | None:
    """Parse one step line; None when its expression is not in the format."""
    match = _FIRST_DIGIT.search(line)
    if match is None:
        return None
    filler, expr = line[: match.start()], line[match.start() :]
    split = _SPLIT.fullmatch(expr)
    if split:
        carried, a, b, p, q, result = (int(g) for g in split.groups())
        return StepLine(filler, carried, ("*", a + b), result, (a, b, p, q))
    simple = _SIMPLE.fullmatch(expr)
    if simple:
        carried_text, symbol, k, result_text = simple.groups()
        return StepLine(filler, int(carried_text), (symbol, int(k)), int(result_text))
    return None


def number_spans(expr: str) -> dict[str, tuple[int, int]]:
    """Where the numbers of a step's expression (a line after its filler) lie: ``carried`` and
    ``result``, and in the split form ``p`` and ``q``, as character spans; empty when ``expr``
    is not in the format."""
    split = _SPLIT.fullmatch(expr)
    if split:
        spans = zip(("carried", "p", "q", "result"), (1, 4, 5, 6), strict=True)
        return {name: split.span(group) for name, group in spans}
    simple = _SIMPLE.fullmatch(expr)
    return {"carried": simple.span(1), "result": simple.span(4)} if simple else {}


def render_step(filler: str, carried: int, op: Op, result: int, parts=None) -> str:
    """The inverse of :func:`parse_step` (``filler`` includes its trailing space)."""
    if parts is None:
        return f"{filler}{carried}{op[0]}{op[1]}={result}"
    a, b, p, q = parts
    return f"{filler}{carried}*({a}+{b})={p}+{q}={result}"


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
    start another (empty) line; lines after the answer line are not part of the solution."""
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


def parse_answer(text: str) -> tuple[str, int | None]:
    """``(status, value)`` of the answer line: ``("ok", v)``, ``("missing", None)`` or
    ``("malformed", None)``. The grader and the checker both read the answer through this."""
    answer = layout(text).answer
    if answer is None:
        return "missing", None
    match = _ANSWER_VALUE.fullmatch(text, answer[0] + len(ANSWER_MARKER), answer[1])
    if match is None:
        return "malformed", None
    return "ok", int(match.group(1))


def walk(start: int, ops: list[Op], lines: list[StepLine | None]) -> Iterator[Alignment]:
    """The step lines read in order against the operations: after each line, its verdict
    (None when right), the operation the next line should apply and the value it applies it to
    (None after a malformed line). Lines are aligned to operations as they go (a skipped or
    inserted step moves the alignment), which :func:`judge` and the task's state values share.
    """
    expected = 0  # the op the next line should apply, and to which value
    carried: int | None = start
    for i, line in enumerate(lines):
        verdict = None
        if expected >= len(ops):
            verdict = "extra step"
        elif line is None:
            verdict, expected = "malformed", expected + 1
        elif line.op == ops[expected]:
            if carried is not None and line.carried != carried:
                verdict = "carried value"
            elif not line.arithmetic_ok():
                verdict = "arithmetic"
            expected += 1
        elif expected + 1 < len(ops) and line.op == ops[expected + 1]:
            verdict, expected = "missing step", expected + 2
        elif i + 1 < len(lines) and (after := lines[i + 1]) and after.op == ops[expected]:
            verdict = "extra step"
        else:
            verdict, expected = "operand", expected + 1
        carried = line.result if line is not None else None
        yield Alignment(i, verdict, expected, carried)


@dataclass(frozen=True)
class Alignment:
    """Where :func:`walk` stands after step line ``line``."""

    line: int
    verdict: str | None
    expected: int
    carried: int | None


def judge(start: int, ops: list[Op], text: str) -> Iterator[StepVerdict]:
    """Every wrong step of ``text``, in order, as :class:`StepVerdict` s.

    ``step`` indexes :attr:`Layout.spans` (the step lines, then the answer line). A response
    that stops before the chain is done is wrong at the line where it stopped (its answer line),
    or, with no answer line, at the empty span at the end of the text (``step`` is then
    ``len(spans)``).
    """
    lay = layout(text)
    parsed = [parse_step(text[s:e]) for s, e in lay.steps]
    expected = 0
    carried: int | None = start
    for state in walk(start, ops, parsed):
        expected, carried = state.expected, state.carried
        if state.verdict:
            yield StepVerdict(state.line, state.verdict, *lay.steps[state.line])
    stop = len(lay.steps)
    end_span = lay.answer or (lay.length, lay.length)
    if expected < len(ops) or lay.answer is None:
        yield StepVerdict(stop, "early stop", *end_span)
        return
    status, value = parse_answer(text)
    if status != "ok":
        yield StepVerdict(stop, "malformed", *end_span)
    elif carried is not None and value != carried:
        yield StepVerdict(stop, "carried value", *end_span)


def filler_spans(text: str) -> list[tuple[int, int]]:
    """Spans of the filler (the text before the expression) of every well-formed step line."""
    spans = []
    for s, e in layout(text).steps:
        line = parse_step(text[s:e])
        if line is not None and line.filler:
            spans.append((s, s + len(line.filler)))
    return spans
