"""Solutions of the countdown task: the SFT traces of an imperfect searcher, the reference
solution, and solutions with one error of a chosen kind.

A trace plays the game forward without backtracking. At each line the imperfect searcher
takes, with probability ``blunder_rate``, a move drawn uniformly from every allowed move
(reachability ignored: most of them are dead ends), and otherwise one drawn uniformly from the
moves that keep the target reachable. Once the state is dead every move is drawn uniformly.
With probability ``slip_rate`` a line's result slips by one digit (its numbers left carry the
slipped value, so the later lines are right from it). The base policy imitates these traces,
so its failures are mostly decisions, located at a dead end.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from creditbench.harness.tasks.countdown.grammar import (
    ANSWER_MARKER,
    after_move,
    moves,
    reachable,
    render_step,
)

if TYPE_CHECKING:
    from creditbench.harness.tasks.countdown.task import CountdownConfig

Move = tuple[int, str, int, int]  # (a, op, b, result)


def live_moves(numbers: tuple[int, ...], target: int, max_value: int) -> list[Move]:
    """The allowed moves from ``numbers`` after which ``target`` can still be made."""
    out = []
    for move in moves(numbers, max_value):
        rest = after_move(numbers, move[0], move[2], move[3])
        if rest is not None and reachable(rest, target, max_value):
            out.append(move)
    return out


def dead_moves(numbers: tuple[int, ...], target: int, max_value: int) -> list[Move]:
    """The allowed moves from ``numbers`` after which ``target`` cannot be made."""
    live = set(live_moves(numbers, target, max_value))
    return [m for m in moves(numbers, max_value) if m not in live]


def slip(value: int, rng: random.Random) -> int:
    """``value`` with one digit changed (a one-digit value may gain a tens digit)."""
    digits = str(value)
    i = rng.randrange(len(digits))
    choices = [
        d for d in "0123456789" if d != digits[i] and not (i == 0 and d == "0" and len(digits) > 1)
    ]
    return int(digits[:i] + rng.choice(choices) + digits[i + 1 :])


def _lines_text(lines: list[str], final: int) -> str:
    return "\n".join([*lines, f"{ANSWER_MARKER} {final}"])


def play(
    numbers: tuple[int, ...],
    target: int,
    config: CountdownConfig,
    rng: random.Random,
    *,
    blunders: bool = True,
    slips: bool = True,
) -> str:
    """One trace of the imperfect searcher (see the module's docstring)."""
    current, lines = tuple(numbers), []
    while len(current) > 1:
        live = live_moves(current, target, config.max_value)
        blunder = blunders and rng.random() < config.blunder_rate
        a, op, b, result = rng.choice(
            live if live and not blunder else moves(current, config.max_value)
        )
        if slips and rng.random() < config.slip_rate:
            result = slip(result, rng)
        rest = after_move(current, a, b, result)
        assert rest is not None
        lines.append(render_step(a, op, b, result, rest))
        current = rest
    return _lines_text(lines, current[0])


def reference_solution(numbers: tuple[int, ...], target: int, max_value: int) -> str:
    """The first live move at every line (in :func:`.grammar.moves`'s order)."""
    current, lines = tuple(numbers), []
    while len(current) > 1:
        a, op, b, result = live_moves(current, target, max_value)[0]
        rest = after_move(current, a, b, result)
        assert rest is not None
        lines.append(render_step(a, op, b, result, rest))
        current = rest
    return _lines_text(lines, current[0])


def corrupt_solution(
    numbers: tuple[int, ...],
    target: int,
    config: CountdownConfig,
    rng: random.Random,
    kind: str,
    step: int,
) -> str:
    """A solution with one error of ``kind`` at line ``step`` (0-based), every other line right
    and, before the error, live: ``dead end`` (a right move that makes the target unreachable;
    needs a state with one), ``arithmetic`` (the result slips, the numbers left carry it),
    ``numbers left`` (the list in another order), ``early stop`` (the answer line at ``step``)."""
    n = len(numbers) - 1
    if not 0 <= step < n:
        raise ValueError(f"step: needs 0 <= step < {n} (got {step})")
    current = tuple(numbers)
    lines: list[str] = []
    for i in range(n):
        live = live_moves(current, target, config.max_value)
        if i == step and kind == "early stop":
            return _lines_text(lines, current[-1])
        if i == step and kind == "dead end":
            dead = dead_moves(current, target, config.max_value)
            if not dead:
                raise ValueError(f"step: line {step} has no dead end to take")
            a, op, b, result = rng.choice(dead)
        else:
            a, op, b, result = rng.choice(live or moves(current, config.max_value))
        if i == step and kind == "arithmetic":
            result = slip(result, rng)
        rest = after_move(current, a, b, result)
        assert rest is not None
        shown = rest
        if i == step and kind == "numbers left":
            if len(set(rest)) < 2:
                raise ValueError(f"step: line {step} leaves no list to reorder")
            while shown == rest:
                shown = tuple(rng.sample(rest, len(rest)))
        elif i == step and kind not in ("dead end", "arithmetic"):
            raise ValueError(f"kind: unknown error kind {kind!r}")
        lines.append(render_step(a, op, b, result, shown))
        current = rest
    return _lines_text(lines, current[0])
