"""Where a method's gain over GRPO comes from: a ladder of rows from GRPO to the method, each
rung one change away from the rung before, read rung by rung (docs/testbed.md, "OTB's ablation
rows").

A ladder's rungs are rows of the records (a run is found by its name, as the claims find theirs:
:func:`~creditbench.leaderboard.claims.row_seeds`). In each setting and on each axis the board
reads, a rung's **step** is its gain over the rung before it, paired by seed, with the board's
95% bootstrap and t intervals and k of n (:func:`~creditbench.leaderboard.gains.gain`). Every
step and the total are read on the seeds all rungs share, so that the steps' means add up to
the top rung's mean gain over the bottom one; where some rung has no run at a seed, each cell
reads its own two rows' seeds and nothing adds up. By the claim rule (at least five pairs), a
step **carries part of the gain** where both intervals lie above 0, **takes part of it away**
where both lie below, and is **not told apart from 0** otherwise; where the top rung is not
ahead of the bottom one, the sentence says instead whether each rung is ahead of the one before
it.

The ablation rows are not rows of the board: they explain one row of it, and never enter its
ranking, its verdicts or its Holm family. The ladder also says how each inner rung runs (its
registered method and the options it changes), so the suite that runs it
(``tools/campaign/tuning.py``) and this reading share one definition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .claims import COMPUTE, SAMPLES, axis_reading, gain_text, paired_gain, row_seeds, world_table
from .gains import Gain

START = "<!-- ablation: computed from the records; do not edit -->"
END = "<!-- /ablation -->"
CARRIES = "carries part of the gain"
TAKES_AWAY = "takes part of it away"
NOT_TOLD_APART = "not told apart from 0"
AXIS_WORDS = {
    COMPUTE: "compute (AUC over the FLOP budget)",
    SAMPLES: "samples (AUC over trained responses)",
}
SETTINGS = ("hard", "easy")


@dataclass(frozen=True)
class Rung:
    """One row of a ladder: its name in the records, what changes from the rung before (a short
    ``label``, grammatically ``plural`` or not, and the ``change`` in full), and how an inner
    rung runs: its registered method and the options it sets on top of the top rung's chosen
    configuration (the bottom and top rungs are the board's own rows)."""

    row: str
    label: str
    change: str
    plural: bool = False
    method: str = ""
    options: dict[str, Any] = field(default_factory=dict)


# OTB's ladder (docs/testbed.md, "OTB's ablation rows"): GRPO, its normalisation, its baseline,
# its weights
OTB_LADDER = (
    Rung("grpo", "GRPO", "the board's GRPO"),
    Rung(
        "otb_norm",
        "the normalisation",
        "no division by the group's std, token-mean aggregation",
        method="drgrpo",
        options={"aggregation": "token-mean"},
    ),
    Rung(
        "otb_uniform",
        "the baseline",
        "the mean return of the responses still running at each position",
        method="otb",
        options={"weighting": "uniform"},
    ),
    Rung("otb", "the weights", "the weights W_t (OTB itself)", plural=True),
)
BESIDE = ("otb", "drgrpo")  # read beside the ladder: OTB over the board's Dr. GRPO row


@dataclass(frozen=True)
class Step:
    """A row read against another in one setting and on one axis: a rung against the rung
    before it, or the ladder's total."""

    rung: Rung
    below: str
    gain: Gain | None
    why: str  # why there is no gain ("" when there is one)

    @property
    def word(self) -> str:
        if self.gain is None:
            return "not read"
        if self.gain.separates:
            return CARRIES
        if self.gain.reversed:
            return TAKES_AWAY
        return NOT_TOLD_APART


def _shared_seeds(runs: pd.DataFrame, column: str, setting: str, rows: Sequence[str]) -> list[int]:
    """The seeds at which every row of ``rows`` has a finished run in ``setting``."""
    seeds: set[int] | None = None
    for row in rows:
        mine = set(row_seeds(runs, setting, row, column).index)
        seeds = mine if seeds is None else seeds & mine
    return sorted(seeds or ())


def _steps(
    runs: pd.DataFrame, column: str, ladder: Sequence[Rung], setting: str, reps: int
) -> tuple[list[Step], Step, int]:
    """:func:`ladder_steps` on one axis's reading (``runs``, ``column``)."""
    seeds = _shared_seeds(runs, column, setting, [rung.row for rung in ladder])

    def step(rung: Rung, below: str) -> Step:
        return Step(
            rung, below, *paired_gain(runs, column, setting, rung.row, below, reps, only=seeds)
        )

    steps = [step(rung, below.row) for below, rung in zip(ladder, ladder[1:], strict=False)]
    return steps, step(ladder[-1], ladder[0].row), len(seeds)


def ladder_steps(
    table: pd.DataFrame, ladder: Sequence[Rung], setting: str, axis: str, *, reps: int = 2000
) -> tuple[list[Step], Step, int] | None:
    """Each rung above the first read against the one below it, the total (top over bottom),
    and how many seeds every rung shares (0: each cell read on its own pairs); None where the
    records do not measure ``axis`` in ``setting``."""
    reading = axis_reading(table, setting, axis)
    return None if reading is None else _steps(*reading, ladder, setting, reps)


def _cell(step: Step, words: dict[str, str] | None = None) -> str:
    """A step's gain and its word (``words`` renames the words: the total's are its own)."""
    if step.gain is None:
        return f"not read: {step.why}"
    return f"{gain_text(step.gain)}: {(words or {}).get(step.word, step.word)}"


TOTAL_WORDS = {CARRIES: "ahead", TAKES_AWAY: "behind", NOT_TOLD_APART: "not told apart"}
TOTAL_PHRASES = {
    CARRIES: "is ahead of",
    TAKES_AWAY: "is behind",
    NOT_TOLD_APART: "is not told apart from",
}
# what a rung did, in a sentence: where the total is ahead, in the rule's words; otherwise
# against the rung before it. Each as (singular, plural).
SHARE_VERBS = {
    CARRIES: ("carries part of it", "carry part of it"),
    TAKES_AWAY: ("takes part of it away", "take part of it away"),
    NOT_TOLD_APART: ("is not told apart from 0", "are not told apart from 0"),
}
STEP_VERBS = {
    CARRIES: ("is ahead of the rung before it", "are ahead of the rung before them"),
    TAKES_AWAY: ("is behind the rung before it", "are behind the rung before them"),
    NOT_TOLD_APART: (
        "is not told apart from the rung before it",
        "are not told apart from the rung before them",
    ),
}


def _listed(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def summary(setting: str, axis: str, steps: Sequence[Step], total: Step) -> str:
    """One sentence: the top rung against the bottom one, and what each rung did (module doc);
    empty where a step or the total is not read."""
    if total.gain is None or any(step.gain is None for step in steps):
        return ""
    where = (
        f"In the {setting} setting at equal {axis}, {total.rung.row} {TOTAL_PHRASES[total.word]} "
        f"{total.below} ({gain_text(total.gain)})"
    )
    verbs = SHARE_VERBS if total.word == CARRIES else STEP_VERBS
    parts = []
    for word in (CARRIES, TAKES_AWAY, NOT_TOLD_APART):
        rungs = [step.rung for step in steps if step.word == word]
        if rungs:
            plural = len(rungs) > 1 or rungs[0].plural
            parts.append(f"{_listed([r.label for r in rungs])} {verbs[word][plural]}")
    return f"{where}: {'; '.join(parts)}."


def ladder_block(
    table: pd.DataFrame,
    ladder: Sequence[Rung] = OTB_LADDER,
    *,
    sources: str = "",
    beside: tuple[str, str] | None = BESIDE,
    reps: int = 2000,
) -> str:
    """The markdown block (markers included): per setting and axis, each rung's step, the total
    and the row read beside the ladder; under the table, a sentence per setting and axis where
    every step is read."""
    table = world_table(table)
    top, bottom = ladder[-1].row, ladder[0].row
    header = [f"`{rung.row}`: {rung.label}, {rung.change}" for rung in ladder[1:-1]]
    header.append(f"`{top}`: {ladder[-1].change}")
    header.append(f"total: `{top}` − `{bottom}`")
    if beside:
        header.append(f"beside: `{beside[0]}` − `{beside[1]}`")
    lines = [
        START,
        "",
        f"**Where {top}'s gain over {bottom} comes from**, rung by rung: each column's row is "
        "one change from the column before it, and its cell is its gain over that row, paired "
        "by seed (mean [95% bootstrap] t [95% t], k of n seeds ahead). By the claim rule (at "
        "least five seed pairs), a rung carries part of the gain where both intervals lie above "
        "0, takes part of it away where both lie below, and is not told apart from 0 otherwise. "
        "Where every rung has runs at some seeds, every cell of the row is read on those seeds, "
        "and the rungs' means add up to the total's; otherwise each cell reads its own two "
        "rows' seeds." + (f" Records: {sources}." if sources else ""),
        "",
        "| setting · axis | " + " | ".join(header) + " |",
        "|---" * (len(header) + 1) + "|",
    ]
    sentences = []
    for setting in SETTINGS:
        for axis in (COMPUTE, SAMPLES):
            label = f"{setting} · {AXIS_WORDS[axis]}"
            reading = axis_reading(table, setting, axis)
            if reading is None:
                lines.append(f"| {label} |" + " axis not measured |" * len(header))
                continue
            runs, column = reading
            steps, total, shared = _steps(runs, column, ladder, setting, reps)
            if shared:
                label += f", the {shared} seeds every rung shares"
            cells = [_cell(step) for step in steps] + [_cell(total, TOTAL_WORDS)]
            if beside:
                side = paired_gain(runs, column, setting, beside[0], beside[1], reps)
                cells.append(_cell(Step(ladder[-1], beside[1], *side), TOTAL_WORDS))
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
            sentences.append(summary(setting, axis, steps, total))
    told = [s for s in sentences if s]
    lines += ["", *(told or ["No setting has every rung's runs yet."]), "", END]
    return "\n".join(lines)
