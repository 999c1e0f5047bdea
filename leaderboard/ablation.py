"""Where a method's gain over GRPO comes from: a ladder of rows from GRPO to the method, each
rung one change away from the rung before, read rung by rung (docs/testbed.md, "OTB's ablation
rows").

A ladder's rungs are rows of the records (a run is found by its name, as the claims find theirs:
:func:`~creditbench.leaderboard.claims.row_seeds`). In each setting and on each axis the board
reads, a rung's **step** is its gain over the rung before it, paired by seed, with the board's
95% bootstrap and t intervals and k of n (:func:`~creditbench.leaderboard.gains.gain`); the
steps add up to the top rung's gain over the bottom one. A step **carries part of the gain**
where it holds by the claim rule (both intervals above 0 over at least five pairs), **takes
part of it away** where both lie below 0, and is **not told apart from 0** otherwise.

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

from .claims import COMPUTE, SAMPLES, axis_reading, gain_text, paired_gain, world_table
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
    """One row of a ladder: its name in the records, what changes from the rung before, and how
    an inner rung runs: its registered method and the options it sets on top of the top rung's
    chosen configuration (the bottom and top rungs are the board's own rows)."""

    row: str
    change: str
    method: str = ""
    options: dict[str, Any] = field(default_factory=dict)


# OTB's ladder (docs/testbed.md, "OTB's ablation rows"): GRPO, its normalisation, its baseline,
# its weights
OTB_LADDER = (
    Rung("grpo", "the board's GRPO"),
    Rung(
        "otb_norm",
        "the normalisation: no division by the group's std, token-mean aggregation",
        "drgrpo",
        {"aggregation": "token-mean"},
    ),
    Rung(
        "otb_uniform",
        "the baseline: the mean return of the responses still running at each position",
        "otb",
        {"weighting": "uniform"},
    ),
    Rung("otb", "the weights W_t (OTB itself)"),
)
BESIDE = ("otb", "drgrpo")  # read beside the ladder: OTB over the board's Dr. GRPO row


@dataclass(frozen=True)
class Step:
    """One rung read against the rung before it in one setting and on one axis."""

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


def ladder_steps(
    table: pd.DataFrame, ladder: Sequence[Rung], setting: str, axis: str, *, reps: int = 2000
) -> list[Step] | None:
    """Each rung above the first read against the one below it; None where the records do not
    measure ``axis`` in ``setting``."""
    reading = axis_reading(table, setting, axis)
    if reading is None:
        return None
    runs, column = reading
    steps = []
    for below, rung in zip(ladder, ladder[1:], strict=False):
        measured, why = paired_gain(runs, column, setting, rung.row, below.row, reps)
        steps.append(Step(rung, below.row, measured, why))
    return steps


def _cell(step: Step, words: dict[str, str] | None = None) -> str:
    """A step's gain and its word (``words`` renames the words: the total's are its own)."""
    if step.gain is None:
        return f"not read: {step.why}"
    return f"{gain_text(step.gain)}: {(words or {}).get(step.word, step.word)}"


TOTAL_WORDS = {CARRIES: "ahead", TAKES_AWAY: "behind", NOT_TOLD_APART: "not told apart"}


def summary(setting: str, axis: str, steps: Sequence[Step], total: Step) -> str:
    """One sentence: the top rung's gain in words, and which rungs carry it or take from it."""
    if total.gain is None or any(step.gain is None for step in steps):
        return ""
    lead = f"{total.rung.row} {TOTAL_WORDS[total.word]} of {total.below}"
    where = f"In the {setting} setting at equal {axis}, {lead} ({gain_text(total.gain)})"
    named = {
        word: [step.rung.change.split(":")[0] for step in steps if step.word == word]
        for word in (CARRIES, TAKES_AWAY, NOT_TOLD_APART)
    }
    parts = [
        f"{' and '.join(rungs)} {'carry' if len(rungs) > 1 else 'carries'} part of it"
        for rungs in [named[CARRIES]]
        if rungs
    ]
    parts += [
        f"{' and '.join(rungs)} {'take' if len(rungs) > 1 else 'takes'} part of it away"
        for rungs in [named[TAKES_AWAY]]
        if rungs
    ]
    parts += [
        f"{' and '.join(rungs)} {'are' if len(rungs) > 1 else 'is'} not told apart from 0"
        for rungs in [named[NOT_TOLD_APART]]
        if rungs
    ]
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
    header = [f"`{rung.row}`: {rung.change}" for rung in ladder[1:]]
    header.append(f"total: `{top}` − `{bottom}`")
    if beside:
        header.append(f"beside: `{beside[0]}` − `{beside[1]}`")
    lines = [
        START,
        "",
        f"**Where {top}'s gain over {bottom} comes from**, rung by rung: each column's row is "
        "one change from the column before it, and its cell is its gain over that row, paired "
        "by seed (mean [95% bootstrap] t [95% t], k of n seeds ahead). A rung carries part of "
        "the gain where both intervals lie above 0 over at least five seed pairs, takes part "
        "of it away where both lie below, and is not told apart from 0 otherwise; the rungs "
        "add up to the total." + (f" Records: {sources}." if sources else ""),
        "",
        "| setting · axis | " + " | ".join(header) + " |",
        "|---" * (len(header) + 1) + "|",
    ]
    sentences = []
    for setting in SETTINGS:
        for axis in (COMPUTE, SAMPLES):
            label = f"{setting} · {AXIS_WORDS[axis]}"
            steps = ladder_steps(table, ladder, setting, axis, reps=reps)
            reading = axis_reading(table, setting, axis)
            if steps is None or reading is None:
                lines.append(f"| {label} |" + " axis not measured |" * len(header))
                continue
            runs, column = reading
            total = Step(ladder[-1], bottom, *paired_gain(runs, column, setting, top, bottom, reps))
            cells = [_cell(step) for step in steps] + [_cell(total, TOTAL_WORDS)]
            if beside:
                side = paired_gain(runs, column, setting, beside[0], beside[1], reps)
                cells.append(_cell(Step(Rung(beside[0], ""), beside[1], *side), TOTAL_WORDS))
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
            sentences.append(summary(setting, axis, steps, total))
    told = [s for s in sentences if s]
    lines += ["", *(told or ["No setting has every rung's runs yet."]), "", END]
    return "\n".join(lines)
