"""The ledger task's own value of a state, V(s) = P_pi(R = 1 | s): the texts the policy scores,
in the chain's form (:class:`creditbench.harness.tasks.chain.values.ValueProbes`, scored by
``harness/services/task_values.py``).

From a state (the prompt and the first whole lines of a response) the continuation is one
typical trace, the same for every response that reached the state:

- if the last item has a wrong line not yet corrected, the right ``fix`` line first, scored
  with its word ``fix`` (a fix changes which value counts, so the word is part of the step);
- then every remaining item line in its typical connective (not scored, as on the chain) and
  the answer line, each line's rendering its text after the connective, newline included.

V(s) is the product of the lines' probabilities, and 0 where the running value (after the
pending fix) cannot reach the answer: an uncorrected wrong step of a closed item.

Deviation: a remaining line written wrong and then fixed is a path to success left out, so V is
low by about the policy's chance of slipping-and-fixing per remaining line (on the chain the
neglected path, a second slip undoing the first, is rare; here it is common by design).
"""

from __future__ import annotations

import random

from creditbench.harness.tasks.chain.grammar import ANSWER_MARKER, Op, layout, render_step
from creditbench.harness.tasks.chain.grammar import running_values as _running_values
from creditbench.harness.tasks.chain.values import Rendering, ValueProbes

from .grammar import FIX, read


def value_probes(
    start: int, items: list[Op], answer: str, prefix: str, fillers: tuple[str, ...]
) -> ValueProbes | None:
    """The probes of the state ``prefix`` of a problem, or None where its value is 0."""
    if layout(prefix).answer is not None:
        raise ValueError("prefix: a state ends before the answer line")
    reading = read(start, items, prefix, whole=False)
    end = reading.end
    expected = end.expected if end is not None else 0
    carried = end.carried if end is not None else start
    text = prefix
    lines: list[tuple[Rendering, ...]] = []
    if reading.pending:
        assert end is not None and end.target is not None  # pending lines have an item
        target = end.target
        if target.before is None:
            return None  # an earlier malformed line: no value to redo the item from
        carried = _running_values(target.before, [items[target.item]])[-1]
        fix_line = render_step(FIX, target.before, items[target.item], carried) + "\n"
        lines.append((Rendering(0, len(text), len(text) + len(fix_line)),))
        text += fix_line
    if carried is None:
        return None
    values = _running_values(carried, items[expected:])
    if str(values[-1]) != answer:
        return None
    for offset, op in enumerate(items[expected:]):
        typical = random.Random(f"{start} {items} {expected + offset}")
        text += typical.choice(fillers) + " "
        body = render_step("", values[offset], op, values[offset + 1]) + "\n"
        lines.append((Rendering(0, len(text), len(text) + len(body)),))
        text += body
    final = f"{ANSWER_MARKER} {values[-1]}"
    lines.append((Rendering(0, len(text), len(text) + len(final) + 1),))
    text += final
    return ValueProbes((text,), (frozenset(),), tuple(lines))
