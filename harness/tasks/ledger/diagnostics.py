"""Where each mechanism class has something to act on in a set of ledger responses: the
figures the world's page and the method pages quote (``docs/worlds/ledger.md``).

- **resets and first-wrong blame** (RRPO, SRPO, the oracle's ``first_wrong`` mode): the share
  of failures whose first locally wrong line was later corrected, so that a reset or a blame at
  the first wrong line misses the cause of the failure;
- **exact and counterfactual credit** (the oracle, IBPO, CCPO, OPPO): the share of successes
  holding a corrected slip, whose whole-response credit rewards a wrong line, and the share of
  characters in ``fix`` lines;
- **length normalisation** (Dr. GRPO, DAPO): how widely lengths vary, and how much more often
  the longest third of the responses fails than the shortest.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from creditbench.harness.tasks.chain.grammar import layout

from .grammar import is_fix


def where_mechanisms_act(
    task: Any, problems: Sequence[Any], texts: Sequence[str]
) -> dict[str, float]:
    """The figures over responses ``texts[i]`` to ``problems[i]`` (at least three)."""
    if len(texts) != len(problems) or len(texts) < 3:
        raise ValueError("texts: one response per problem, at least three")
    rewards = [task.grade(p, t).reward for p, t in zip(problems, texts, strict=True)]
    failed = [i for i, r in enumerate(rewards) if r < 1.0]
    passed = [i for i, r in enumerate(rewards) if r >= 1.0]

    def first_line_corrected(i: int) -> bool:
        corrected = task.corrected_steps(problems[i], texts[i])
        wrong = task.wrong_steps(problems[i], texts[i])
        return bool(corrected) and (not wrong or corrected[0].step < wrong[0].step)

    fix_chars = sum(e - s for t in texts for s, e in layout(t).steps if is_fix(t[s:e]))
    lengths = [len(t) for t in texts]
    by_length = sorted(range(len(texts)), key=lengths.__getitem__)
    third = len(texts) // 3
    short, long = by_length[:third], by_length[-third:]
    deciles = statistics.quantiles(lengths, n=10)
    return {
        "accuracy": len(passed) / len(texts),
        "failures_first_wrong_line_corrected": _share(failed, first_line_corrected),
        "successes_with_corrected_slip": _share(
            passed, lambda i: bool(task.corrected_steps(problems[i], texts[i]))
        ),
        "fix_character_share": fix_chars / max(sum(lengths), 1),
        "length_p90_over_p10": deciles[-1] / max(deciles[0], 1.0),
        "failure_rate_shortest_third": _share(short, lambda i: rewards[i] < 1.0),
        "failure_rate_longest_third": _share(long, lambda i: rewards[i] < 1.0),
    }


def _share(rows: list[int], holds: Any) -> float:
    return sum(bool(holds(i)) for i in rows) / len(rows) if rows else float("nan")
