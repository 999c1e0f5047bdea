"""Solutions of the ledger task: the SFT traces, with slips and corrections at set rates, their
minimal repairs, and the thinker's plans.

A trace writes each result wrong at ``slip_rate`` (one digit changed: the chain's
:func:`creditbench.harness.tasks.chain.traces.slip`). After a wrong line it writes a ``fix`` at
``fix_rate``; a fix slips at ``slip_rate`` too and may itself be fixed, at most
:data:`MAX_FIXES` in a row. A slip left unfixed is carried forward correctly by the later
lines, so it is the response's first uncorrected wrong step.
"""

from __future__ import annotations

import random
import re
from typing import TYPE_CHECKING

from creditbench.harness.tasks.chain.grammar import (
    ANSWER_MARKER,
    Op,
    apply_op,
    layout,
    parse_step,
    render_step,
    running_values,
)
from creditbench.harness.tasks.chain.traces import slip

from .grammar import FIX, is_fix

if TYPE_CHECKING:
    from .task import LedgerConfig

MAX_FIXES = 3  # fixes of one item in a row (ours: keeps a trace's length bounded)


def render(lines: list[str], value: int) -> str:
    return "\n".join([*lines, f"{ANSWER_MARKER} {value}"])


def sample_solution(
    start: int,
    items: list[Op],
    config: LedgerConfig,
    rng: random.Random,
    *,
    slips: bool = True,
    force_slip_at: int | None = None,
) -> str:
    """One trace with random fillers, slips at ``slip_rate`` and fixes at ``fix_rate`` when
    ``slips``. ``force_slip_at`` makes that item's line slip and leaves it unfixed."""
    rate = config.slip_rate if slips else 0.0
    lines, value = [], start
    for i, op in enumerate(items):
        right = apply_op(op, value)
        forced = force_slip_at == i
        result = slip(right, rng) if forced or rng.random() < rate else right
        lines.append(render_step(rng.choice(config.fillers) + " ", value, op, result))
        fixes = 0
        while (
            result != right and not forced and fixes < MAX_FIXES and rng.random() < config.fix_rate
        ):
            result = slip(right, rng) if rng.random() < rate else right
            lines.append(render_step(FIX, value, op, result))
            fixes += 1
        value = result
    return render(lines, value)


def repair_solution(start: int, items: list[Op], response: str, fillers: tuple[str, ...]) -> str:
    """The smallest edit of ``response`` into a correct solution without fixes: the item line
    ``i`` keeps the connective of the response's ``i``-th item line where it is well-formed,
    every value is recomputed and the ``fix`` lines are dropped (IBPO's oracle repair)."""
    item_lines = [response[s:e] for s, e in layout(response).steps]
    parsed = [parse_step(t) for t in item_lines if not is_fix(t)]
    values = running_values(start, items)
    lines = []
    for i, op in enumerate(items):
        old = parsed[i] if i < len(parsed) else None
        filler = old.filler if old is not None and old.filler else fillers[0] + " "
        lines.append(render_step(filler, values[i], op, values[i + 1]))
    return render(lines, values[-1])


def plan_text(items: list[Op]) -> str:
    """The thinker's plan (CCPO's roles): how many items there are, so that the solver knows
    when to stop."""
    return f"plan: {len(items)} items."


def parse_plan(text: str) -> int | None:
    """The item count a plan states, or None when ``text`` is not a plan."""
    match = re.search(r"plan: (\d{1,2}) items\.", text)
    return int(match.group(1)) if match else None
