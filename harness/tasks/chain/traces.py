"""Solutions of the chain task: sampled ones with the slips of an imperfect solver, corrupted
ones with one error of a chosen kind, minimally repaired ones, and the thinker's plans.

The sampled solutions are the SFT traces that make the base policy imperfect in a controlled
way. A slip changes one digit of a result, and the later lines carry the wrong value forward
correctly, so the first wrong step is the slip. Slip rates depend on the step:

- a multiplication written directly (``14*7=98``) slips at ``direct_slip_rate``, the split form
  (``14*(3+4)=42+56=98``) at ``slip_rate`` per written result: the choice between the two is a
  decision point where one continuation is riskier than the other;
- the operation kind ``weak_op`` slips at ``weak_slip_rate``: a systematic weakness;
- every other result slips at ``slip_rate``.
"""

from __future__ import annotations

import random
import re
from typing import TYPE_CHECKING

from creditbench.harness.tasks.chain.grammar import (
    ANSWER_MARKER,
    MODULUS,
    Op,
    apply_op,
    layout,
    parse_step,
    render_step,
    running_values,
)

if TYPE_CHECKING:
    from creditbench.harness.tasks.chain.task import ChainConfig

OP_KINDS = {"+": "add", "-": "sub", "*": "mul", "%": "mod"}


def op_kind(op: Op) -> str:
    return OP_KINDS[op[0]]


def splittable(op: Op) -> bool:
    """A multiplication by ``k >= 2`` may be written in the split form."""
    return op[0] == "*" and op[1] >= 2


def canonical_split(k: int) -> tuple[int, int]:
    return k // 2, k - k // 2


def slip(value: int, rng: random.Random) -> int:
    """``value`` with one digit changed: the kind of mistake a character-level solver makes.
    A slip in the tens digit is cancelled by a later "keep the last digit"."""
    if value < 10:
        choices = [d for d in range(10) if d != value] + [10 * t + value for t in range(1, 10)]
        return rng.choice(choices)
    tens, units = divmod(value, 10)
    if rng.random() < 0.5:
        return 10 * tens + rng.choice([d for d in range(10) if d != units])
    return 10 * rng.choice([d for d in range(10) if d != tens]) + units


def _slip_rate(config: ChainConfig, op: Op, split: bool) -> float:
    weak = config.weak_slip_rate if op_kind(op) == config.weak_op else config.slip_rate
    if splittable(op) and not split:
        return max(config.direct_slip_rate, weak)
    return weak


def _render(lines: list[str], value: int) -> str:
    return "\n".join([*lines, f"{ANSWER_MARKER} {value}"])


def sample_solution(
    start: int,
    ops: list[Op],
    config: ChainConfig,
    rng: random.Random,
    *,
    slips: bool = True,
    split_ks: set[int] | None = None,
    force_slip_at: int | None = None,
) -> str:
    """One solution with random fillers and random split choices (``split_ks`` fixes them:
    a multiplication by ``k`` is split iff ``k`` is in it), and slips at the configured rates
    when ``slips``. ``force_slip_at`` makes the result of that step slip in any case."""
    lines, value = [], start
    for i, op in enumerate(ops):
        filler = rng.choice(config.fillers) + " "
        if splittable(op):
            split = op[1] in split_ks if split_ks is not None else rng.random() < config.split_rate
        else:
            split = False
        rate = _slip_rate(config, op, split) if slips else 0.0
        parts = None
        if split:
            a, b = canonical_split(op[1])
            p, q = value * a % MODULUS, value * b % MODULUS
            p = slip(p, rng) if rng.random() < rate else p
            q = slip(q, rng) if rng.random() < rate else q
            parts = (a, b, p, q)
            result = (p + q) % MODULUS
        else:
            result = apply_op(op, value)
        if rng.random() < rate or force_slip_at == i:
            result = slip(result, rng)
        lines.append(render_step(filler, value, op, result, parts))
        value = result
    return _render(lines, value)


def _other_op(op: Op, avoid: list[Op], rng: random.Random) -> Op:
    low, high = (2, 9) if op[0] in "*%" else (2, 99)
    while True:
        candidate = (op[0], rng.randint(low, high))
        if candidate != op and candidate not in avoid:
            return candidate


def corrupt_solution(
    start: int, ops: list[Op], config: ChainConfig, rng: random.Random, kind: str, step: int
) -> str:
    """A solution with exactly one error of ``kind`` (see :data:`.grammar.ERROR_KINDS`) at
    line ``step``; the other lines are right (they carry a wrong value forward correctly).

    Valid steps: ``0..n-1``, except ``missing step`` (``0..n-2``: skipping the last step is an
    early stop) and ``extra step`` (``0..n``: a line inserted before step ``step``).
    """
    n = len(ops)
    high = {"missing step": n - 2, "extra step": n}.get(kind, n - 1)
    if not 0 <= step <= high:
        raise ValueError(f"step: {kind!r} needs 0 <= step <= {high} (got {step})")
    lines, value = [], start

    def add(op: Op, carried: int, result: int | None = None) -> int:
        result = apply_op(op, carried) if result is None else result
        lines.append(render_step(rng.choice(config.fillers) + " ", carried, op, result))
        return result

    for i, op in enumerate(ops):
        if i != step:
            value = add(op, value)
        elif kind == "arithmetic":
            value = add(op, value, slip(apply_op(op, value), rng))
        elif kind == "carried value":
            value = add(op, slip(value, rng))
        elif kind == "operand":
            value = add(_other_op(op, ops[i : i + 2], rng), value)
        elif kind == "missing step":
            continue
        elif kind == "extra step":
            value = add(_other_op(op, ops[i : i + 2], rng), value)
            value = add(op, value)
        elif kind == "early stop":
            break
        elif kind == "malformed":
            lines.append(f"{rng.choice(config.fillers)} {value}{op[0]}{op[1]}")
            value = apply_op(op, value)
        else:
            raise ValueError(f"kind: unknown error kind {kind!r}")
    if kind == "extra step" and step == n:
        value = add(_other_op(ops[-1], ops[-1:], rng), value)
    return _render(lines, value)


def repair_solution(start: int, ops: list[Op], response: str, config: ChainConfig) -> str:
    """The smallest edit of ``response`` into a correct solution: line ``i`` keeps the filler and
    the split choice of the response's line ``i`` where that line is well-formed, and every
    value is recomputed. Missing lines get the first filler and the direct form."""
    text_lines = [response[s:e] for s, e in layout(response).steps]
    parsed = [parse_step(line) for line in text_lines]
    values = running_values(start, ops)
    lines = []
    for i, op in enumerate(ops):
        old = parsed[i] if i < len(parsed) else None
        filler = old.filler if old is not None and old.filler else config.fillers[0] + " "
        parts = None
        if splittable(op) and old is not None and old.parts is not None:
            a, b = old.parts[:2] if old.op == op else canonical_split(op[1])
            parts = (a, b, values[i] * a % MODULUS, values[i] * b % MODULUS)
        lines.append(render_step(filler, values[i], op, values[i + 1], parts))
    return _render(lines, values[-1])


def plan_text(split_ks: list[int]) -> str:
    """The thinker's plan: which multiplications to split."""
    if not split_ks:
        return "plan: no split."
    return "plan: split " + ", ".join(str(k) for k in split_ks) + "."


def parse_plan(text: str) -> set[int] | None:
    """The multipliers a plan says to split, or None when ``text`` is not a plan."""
    match = re.search(r"plan: (no split|split (\d{1,2}(?:, \d{1,2})*))\.", text)
    if match is None:
        return None
    return set() if match.group(2) is None else {int(k) for k in match.group(2).split(", ")}
