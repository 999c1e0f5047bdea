"""Each paper's claims checked against the standard suite's records, on the claim's own axis and
in every setting of the board.

A card's ``claims`` (``creditbench.reference.cards``) say "row A is ahead of row B at equal X",
with the paper's own number and X, the claim's axis: compute, samples, steps or wall-clock. On
the testbed a claim is read as the gain of A over B on that axis, in each of the standard
suite's settings (:data:`~creditbench.reference.cards.CLAIM_SETTINGS`), paired by seed (seed
``s`` of every method starts from the same base, draws the same first prompts and is evaluated
on the same problems), with the claim rule of :mod:`creditbench.leaderboard.gains`. The verdict
words are :data:`VERDICTS`, the one table every page and doc takes them from:

- *holds on the testbed*: A ahead of B, both intervals (bootstrap and t) above 0 over at least
  :data:`~creditbench.leaderboard.gains.MIN_PAIRS_FOR_A_CLAIM` seed pairs;
- *reversed on the testbed*: A behind B, both intervals below 0, as many pairs;
- *not resolved*: anything else, with the reason (too few pairs, the intervals straddle 0, runs
  missing, or the claim's axis not measured by the records: a claim made at equal steps is
  never read on the compute axis);
- *not testable here*: the testbed cannot make the comparison the claim is about (a claim made
  only under LoRA, only on a mixture-of-experts model or only for a two-agent team: the card's
  caveats), with the reason; the gain is shown where its axis is measured, and judges nothing.

Each verdict carries the claim's caveats (the card's, such as "mechanism inert here" with the
method page's reason) and, where the baseline row is itself behind GRPO in that setting by the
claim rule, says so: a method ahead of a baseline that lost to GRPO has beaten a weak row.

How each axis is read (:func:`axis_reading`): the compute axis is the board's AUC (accuracy
over the fraction of the FLOP budget spent); the samples axis the board's equal-samples AUC
(:func:`~creditbench.leaderboard.stats.with_samples_auc`: accuracy over the first trained
responses every measured run of the setting reached, from evaluations at those counts only);
the steps axis the same, for two rows that train as many responses an optimizer step (within
:data:`SAME_PACE`; every method but IBPO and InT trains the batch's 32), where equal samples is
equal steps; the wall-clock axis is not measured. A claim whose axis the records do not measure
is *not resolved* (:data:`AXIS_NOT_MEASURED`). The paper's number and ours come from
different models, data and budgets; only the direction is tested, never the size.

A run is found by its name, which the bench writes as ``<task>-<label>-<options>-<row>-s<seed>``
(``chain-hard-steps=10-...-oppo_teacher-s3``): the label is the setting's, the row the card's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

import pandas as pd

from creditbench.reference.cards import AXES, CLAIM_SETTINGS, Card, Claim

from .gains import MIN_PAIRS_FOR_A_CLAIM, Gain, gain
from .stats import BASELINE, SAMPLES_AUC, accuracy_columns, with_samples_auc

TASK = "chain"  # the standard suite's task (tools/suites/standard.yaml): the default world
TASK_NAME = r"[a-z][a-z0-9_]*"  # a run name's first part (task names hold no "-")

# The verdict words and what each means: the claims page prints this table, the tally counts
# these words, and the docs that name them are checked against it (tests/test_claims_axes.py).
HOLDS = "holds on the testbed"
REVERSED = "reversed on the testbed"
NOT_RESOLVED = "not resolved"
NOT_TESTABLE = "not testable here"
VERDICTS = {
    HOLDS: (
        "the method is ahead of its baseline on the claim's axis: both 95% intervals "
        f"(bootstrap and t) above 0 over at least {MIN_PAIRS_FOR_A_CLAIM} seed pairs"
    ),
    REVERSED: "the method is behind its baseline: both intervals below 0, as many pairs",
    NOT_RESOLVED: (
        "anything else, with the reason: too few seed pairs, an interval across 0, runs "
        "missing, or the claim's axis not measured yet"
    ),
    NOT_TESTABLE: (
        "the testbed cannot make the comparison the claim is about (a LoRA-only, MoE-only or "
        "two-agent claim), with the reason"
    ),
}
AXIS_NOT_MEASURED = "its axis is not measured yet"

COMPUTE, SAMPLES, STEPS, WALL_CLOCK = AXES
# How far apart two rows' trained responses a step may be for equal samples to stand for equal
# steps (ours): the records' paces are exact (32 a step) but for rows that add or drop responses
SAME_PACE = 0.01


@dataclass(frozen=True)
class Verdict:
    """A claim read in one setting: its paired gain on the claim's axis (None: not read), the
    verdict (one of :data:`VERDICTS`), why where the verdict needs a reason, and a note when
    the baseline row is itself behind GRPO there."""

    card: str
    claim: Claim
    setting: str
    gain: Gain | None
    verdict: str
    why: str = ""
    weak_baseline: str = ""
    reading: str = ""  # how the axis was read where it is not the claim's own measure


def row_seeds(table: pd.DataFrame, label: str, row: str, column: str) -> pd.Series:
    """``{seed: column}`` of a card row's finished runs in the setting ``label``, read from the
    run names of a collected table of one task (module doc; :func:`world_table`)."""
    pattern = re.compile(rf"{TASK_NAME}-{re.escape(label)}(?:-.+)?-{re.escape(row)}-s(\d+)")
    runs = _runs(table)
    values = {}
    for name, value in zip(runs["run"], runs.get(column, pd.Series(dtype=float)), strict=False):
        match = pattern.fullmatch(PurePosixPath(str(name)).name)
        if match and pd.notna(value):
            values[int(match.group(1))] = float(value)
    return pd.Series(values, dtype=float).sort_index()


def _runs(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["kind"] == "run"] if "kind" in table else table


def auc_column(table: pd.DataFrame) -> str:
    """The AUC column the board reads (sampled accuracy where every run has it)."""
    return accuracy_columns(_runs(table))[2]


def setting_runs(table: pd.DataFrame, setting: str) -> pd.DataFrame:
    """The run rows of the setting ``setting`` of a table of one task, by run name (module
    doc)."""
    runs = _runs(table)
    names = runs["run"].map(lambda name: PurePosixPath(str(name)).name)
    return runs[names.str.match(rf"{TASK_NAME}-{re.escape(setting)}-")]


def world_table(table: pd.DataFrame, task: str = TASK) -> pd.DataFrame:
    """The rows of ``table`` of one task (its world): a claim is read within one world."""
    return table[table["task"] == task] if "task" in table else table


def axis_reading(table: pd.DataFrame, setting: str, axis: str) -> tuple[pd.DataFrame, str] | None:
    """``(run rows, column)``: where the claims of ``setting`` on ``axis`` are read (module
    doc); None where the records do not measure the axis there."""
    if axis == COMPUTE:
        return _runs(table), auc_column(table)
    if axis not in (SAMPLES, STEPS):
        return None
    from .collect import SAMPLES_EVAL

    runs = setting_runs(table, setting)
    if runs.empty or "kind" not in table:
        return None
    runs = with_samples_auc(runs, table[table["kind"] == SAMPLES_EVAL])
    return (runs, SAMPLES_AUC) if runs[SAMPLES_AUC].notna().any() else None


def responses_per_step(table: pd.DataFrame, setting: str, row: str) -> float:
    """A card row's trained responses per optimizer step in ``setting``: the mean over its runs
    of the responses trained by its last evaluation over that evaluation's step; NaN unknown."""
    if "kind" not in table or "responses_trained" not in table:
        return math.nan
    evals = table[(table["kind"] == "eval") & (table["step"] > 0)]
    last = evals.sort_values("budget_fraction").groupby("run").last()
    paces = (last["responses_trained"] / last["step"]).rename("pace").reset_index()
    mine = row_seeds(paces.assign(kind="run"), setting, row, "pace")
    return float(mine.mean()) if len(mine) else math.nan


def steps_as_samples(table: pd.DataFrame, claim: Claim, setting: str) -> tuple[bool, str]:
    """``(True, how)`` where the claim's two rows train as many responses a step, so that
    equal samples is equal steps (:data:`SAME_PACE`); ``(False, why not)`` otherwise."""
    mine = responses_per_step(table, setting, claim.method)
    theirs = responses_per_step(table, setting, claim.baseline)
    if not (math.isfinite(mine) and math.isfinite(theirs)):
        return False, f"{AXIS_NOT_MEASURED}: the records do not say the responses a step"
    if abs(mine - theirs) > SAME_PACE * max(mine, theirs):
        return False, (
            f"{AXIS_NOT_MEASURED}: equal samples is not equal steps here, {claim.method} "
            f"training {mine:.1f} responses a step and {claim.baseline} {theirs:.1f}"
        )
    return True, f"read at equal samples: both train {mine:.0f} responses a step"


def paired_gain(
    runs: pd.DataFrame,
    column: str,
    setting: str,
    row: str,
    baseline: str,
    reps: int,
    *,
    only: Sequence[int] = (),
) -> tuple[Gain | None, str]:
    """``(gain of row over baseline in ``column`` of ``runs``, paired by seed, "")``, or
    ``(None, why)`` without a seed pair in ``setting``; on the seeds of ``only`` where given
    (a set several readings share), else on every seed the two rows share."""
    mine = row_seeds(runs, setting, row, column)
    theirs = row_seeds(runs, setting, baseline, column)
    seeds = mine.index.intersection(theirs.index)
    if len(only):
        seeds = seeds.intersection(pd.Index(only))
    if len(seeds) == 0:
        missing = [r for r, s in ((row, mine), (baseline, theirs)) if s.empty]
        why = "no runs of " + " and ".join(missing) if missing else "no seed in common"
        return None, f"{why} in the {setting} setting"
    return gain((mine.loc[seeds] - theirs.loc[seeds]).to_numpy(), reps=reps), ""


def claim_reading(
    table: pd.DataFrame, claim: Claim, setting: str
) -> tuple[tuple[pd.DataFrame, str] | None, str]:
    """``((run rows, column), how)`` where the claim's axis is measured in ``setting`` (``how``
    says how a claim on steps was read at equal samples; empty otherwise), or ``(None, why
    not)``."""
    reading = axis_reading(table, setting, claim.axis.value)
    if reading is None:
        return None, AXIS_NOT_MEASURED
    if claim.axis.value == STEPS:
        same, how = steps_as_samples(table, claim, setting)
        return (reading if same else None), how
    return reading, ""


def weak_baseline(
    table: pd.DataFrame,
    claim: Claim,
    setting: str,
    reading: tuple[pd.DataFrame, str] | None,
    reps: int,
) -> str:
    """A note when the claim's baseline row is behind GRPO in ``setting`` by the claim rule, on
    the claim's axis (on the board's compute axis where that is not measured); empty
    otherwise."""
    if claim.baseline == BASELINE:
        return ""
    where = ""
    if reading is None:
        reading, where = (_runs(table), auc_column(table)), " on the compute axis"
    measured, _ = paired_gain(*reading, setting, claim.baseline, BASELINE, reps)
    if measured is None or not measured.reversed:
        return ""
    return f"its baseline, {claim.baseline}, is itself behind GRPO{where}: {gain_text(measured)}"


def judge(
    card: str, claim: Claim, table: pd.DataFrame, setting: str, *, reps: int = 2000
) -> Verdict:
    """The :class:`Verdict` of one claim in one setting of a collected runs table."""
    reading, how = claim_reading(table, claim, setting)
    weak = weak_baseline(table, claim, setting, reading, reps)
    untestable = "; ".join(f"{c.label}: {c.note}" for c in claim.untestable)
    if reading is None:
        measured, why, how = None, how, ""
    else:
        measured, why = paired_gain(*reading, setting, claim.method, claim.baseline, reps)

    def verdict(word: str, why: str = "") -> Verdict:
        return Verdict(card, claim, setting, measured, word, why, weak, how)

    if untestable:
        return verdict(NOT_TESTABLE, untestable)
    if measured is None:
        return verdict(NOT_RESOLVED, why)
    if measured.separates:
        return verdict(HOLDS)
    if measured.reversed:
        return verdict(REVERSED)
    if measured.pairs < MIN_PAIRS_FOR_A_CLAIM:
        return verdict(
            NOT_RESOLVED, f"{measured.pairs} seed pairs, fewer than {MIN_PAIRS_FOR_A_CLAIM}"
        )
    return verdict(NOT_RESOLVED, "the intervals include 0")


def judge_claim(
    card: str,
    claim: Claim,
    table: pd.DataFrame,
    settings: Sequence[str] = CLAIM_SETTINGS,
    *,
    reps: int = 2000,
) -> list[Verdict]:
    """One :class:`Verdict` of ``claim`` per setting, in ``settings`` order."""
    return [judge(card, claim, table, setting, reps=reps) for setting in settings]


def judge_cards(
    cards: Iterable[Card], table: pd.DataFrame, *, reps: int = 2000, task: str = TASK
) -> list[Verdict]:
    """Every claim of ``cards`` in every setting of the world ``task``: card, claim, then
    setting order."""
    table = world_table(table, task)
    return [
        verdict
        for card in cards
        for claim in card.claims
        for verdict in judge_claim(card.id, claim, table, reps=reps)
    ]


def gain_text(measured: Gain | None) -> str:
    """``+0.028 [+0.012, +0.045] t [+0.007, +0.048], 9/10``; ``n/a`` without a gain."""
    if measured is None:
        return "n/a"
    return (
        f"{measured.point:+.3f} [{measured.low:+.3f}, {measured.high:+.3f}] "
        f"t [{measured.t_low:+.3f}, {measured.t_high:+.3f}], {measured.ahead}/{measured.pairs}"
    )


def by_claim(verdicts: Sequence[Verdict]) -> list[list[Verdict]]:
    """The verdicts grouped by claim (each claim's settings together), in first-seen order."""
    groups: dict[tuple[str, Claim], list[Verdict]] = {}
    for verdict in verdicts:
        groups.setdefault((verdict.card, verdict.claim), []).append(verdict)
    return list(groups.values())
