"""The countdown task's own value of a state, exact: V(s) = P_pi(R = 1 | s) under the policy.

The format is strict (:mod:`.grammar`), so the responses the grader accepts from a state can
be listed: every sequence of right lines through live states down to the target, then the
answer line, then either the end of the sequence or a newline (after which the grader reads
nothing). V(s) is the sum of the policy's probabilities of these continuations, with no
approximation of ours; a state after a wrong step or a dead end has V = 0.

Each continuation is one text the policy scores, in the contract of the chain's values
(:class:`creditbench.harness.tasks.chain.values.ValueProbes`: texts, and per line that
matters the renderings whose probabilities add up). Here there is a single "line", the whole
continuation, whose renderings are all the successful continuations. Every text is a whole
successful response of the problem, so the states of one problem share their texts: a step
scores at most twice the problem's number of solutions.
"""

from __future__ import annotations

from creditbench.harness.tasks.chain.values import Rendering, ValueProbes
from creditbench.harness.tasks.countdown.grammar import (
    ANSWER_MARKER,
    after_move,
    layout,
    parse_step,
    render_step,
    walk,
)
from creditbench.harness.tasks.countdown.traces import live_moves


def continuations(numbers: tuple[int, ...], target: int, max_value: int) -> list[str]:
    """Every successful continuation from a live state ``numbers``: its step lines, each
    with its newline, then the answer line (no newline), in a fixed order; empty when dead."""
    if len(numbers) == 1:
        return [f"{ANSWER_MARKER} {target}"] if numbers[0] == target else []
    out = []
    for a, op, b, result in live_moves(numbers, target, max_value):
        rest = after_move(numbers, a, b, result)
        assert rest is not None
        line = render_step(a, op, b, result, rest) + "\n"
        out += [line + tail for tail in continuations(rest, target, max_value)]
    return out


def solution_count(numbers: tuple[int, ...], target: int, max_value: int) -> int:
    """How many responses solve the problem (distinct texts up to the answer line)."""
    return len(continuations(tuple(numbers), target, max_value))


def state_numbers(
    numbers: tuple[int, ...], target: int, prefix: str, max_value: int
) -> tuple[int, ...] | None:
    """The numbers left at the state ``prefix`` (whole step lines, each with its newline), or
    None where the state is dead (a wrong step, a dead end, a line that is not a step)."""
    lay = layout(prefix)
    if lay.answer is not None:
        raise ValueError("prefix: a state ends before the answer line")
    if prefix and not prefix.endswith("\n"):
        raise ValueError("prefix: a state ends after a whole line (with its newline)")
    parsed = [parse_step(prefix[s:e]) for s, e in lay.steps]
    current: tuple[int, ...] | None = tuple(numbers)
    for state in walk(tuple(numbers), target, parsed, max_value):
        if not state.live:
            return None
        current = state.numbers
    return current


def value_probes(
    numbers: tuple[int, ...], target: int, prefix: str, max_value: int
) -> ValueProbes | None:
    """The probes of the state ``prefix``, or None where its value is 0."""
    current = state_numbers(numbers, target, prefix, max_value)
    if current is None:
        return None
    found = continuations(current, target, max_value)
    if not found:  # the problem itself has no solution
        return None
    texts: list[str] = []
    renderings: list[Rendering] = []
    cut = len(prefix)
    for tail in found:
        ended = prefix + tail
        renderings.append(Rendering(len(texts), cut, len(ended) + 1))  # then the end of sequence
        texts.append(ended)
        renderings.append(Rendering(len(texts), cut, len(ended) + 1))  # then a newline
        texts.append(ended + "\n")
    free: tuple[frozenset[int], ...] = tuple(frozenset() for _ in texts)
    return ValueProbes(tuple(texts), free, (tuple(renderings),))
