"""Each paper's claims checked against the standard suite's records.

A card's ``claims`` (``creditbench.reference.cards``) say "row A is ahead of row B" with the
paper's own number. On the testbed a claim is read as the AUC gain of A over B in the
standard suite's setting the claim names, paired by seed (seed ``s`` of every method starts
from the same base, draws the same first prompts and is evaluated on the same problems), with
the claim rule of :mod:`creditbench.leaderboard.gains`:

- *reproduced*: A ahead of B, both intervals (bootstrap and t) above 0 over at least
  :data:`~creditbench.leaderboard.gains.MIN_PAIRS_FOR_A_CLAIM` seed pairs;
- *contradicted*: A behind B, both intervals below 0, as many pairs;
- *not resolved*: anything else, with the reason (too few pairs, the intervals straddle 0,
  or runs missing).

The paper's number and ours come from different models, data and budgets; only the direction
is tested, never the size.

A run is found by its name, which the bench writes as ``<task>-<label>-<options>-<row>-s<seed>``
(``chain-hard-steps=10-...-oppo_teacher-s3``): the label is the setting's, the row the card's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

import pandas as pd

from creditbench.reference.cards import Card, Claim

from .gains import MIN_PAIRS_FOR_A_CLAIM, Gain, gain
from .stats import accuracy_columns

TASK = "chain"  # the standard suite's task (tools/suites/standard.yaml)
REPRODUCED, CONTRADICTED, NOT_RESOLVED = "reproduced", "contradicted", "not resolved"


@dataclass(frozen=True)
class Verdict:
    """A claim, its paired AUC gain on the testbed (None: no seed pair) and the verdict."""

    card: str
    claim: Claim
    gain: Gain | None
    verdict: str
    why: str = ""


def row_seeds(table: pd.DataFrame, label: str, row: str, column: str) -> pd.Series:
    """``{seed: column}`` of a card row's finished runs in the setting ``label`` of the
    standard suite, read from the run names of a collected table (module doc)."""
    pattern = re.compile(rf"{TASK}-{re.escape(label)}(?:-.+)?-{re.escape(row)}-s(\d+)")
    runs = table[table["kind"] == "run"] if "kind" in table else table
    values = {}
    for name, value in zip(runs["run"], runs.get(column, pd.Series(dtype=float)), strict=False):
        match = pattern.fullmatch(PurePosixPath(str(name)).name)
        if match and pd.notna(value):
            values[int(match.group(1))] = float(value)
    return pd.Series(values, dtype=float).sort_index()


def auc_column(table: pd.DataFrame) -> str:
    """The AUC column the board reads (sampled accuracy where every run has it)."""
    runs = table[table["kind"] == "run"] if "kind" in table else table
    return accuracy_columns(runs)[2]


def judge(card: str, claim: Claim, table: pd.DataFrame, *, reps: int = 2000) -> Verdict:
    """The :class:`Verdict` of one claim on a collected runs table (module doc)."""
    column = auc_column(table)
    mine = row_seeds(table, claim.setting, claim.method, column)
    theirs = row_seeds(table, claim.setting, claim.baseline, column)
    seeds = mine.index.intersection(theirs.index)
    if len(seeds) == 0:
        missing = [r for r, s in ((claim.method, mine), (claim.baseline, theirs)) if s.empty]
        why = "no runs of " + " and ".join(missing) if missing else "no seed in common"
        return Verdict(card, claim, None, NOT_RESOLVED, f"{why} in the {claim.setting} setting")
    measured = gain((mine.loc[seeds] - theirs.loc[seeds]).to_numpy(), reps=reps)
    if measured.separates:
        return Verdict(card, claim, measured, REPRODUCED)
    if measured.reversed:
        return Verdict(card, claim, measured, CONTRADICTED)
    if measured.pairs < MIN_PAIRS_FOR_A_CLAIM:
        why = f"{measured.pairs} seed pairs, fewer than {MIN_PAIRS_FOR_A_CLAIM}"
    else:
        why = "the intervals include 0"
    return Verdict(card, claim, measured, NOT_RESOLVED, why)


def judge_cards(cards: Iterable[Card], table: pd.DataFrame, *, reps: int = 2000) -> list[Verdict]:
    """Every claim of ``cards``, in card and claim order."""
    return [judge(card.id, claim, table, reps=reps) for card in cards for claim in card.claims]


def _gain_text(measured: Gain | None) -> str:
    if measured is None:
        return "n/a"
    return (
        f"{measured.point:+.3f} [{measured.low:+.3f}, {measured.high:+.3f}] "
        f"t [{measured.t_low:+.3f}, {measured.t_high:+.3f}], {measured.ahead}/{measured.pairs}"
    )


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def claims_table(verdicts: Sequence[Verdict], *, with_card: bool = True) -> str:
    """The claims as a Markdown table: claim, the paper's number, the testbed's AUC gain
    [bootstrap] t [t interval] with k of n seeds ahead, and the verdict."""
    header = ["claim", "setting", "paper's number (where)", "testbed AUC gain", "verdict"]
    if with_card:
        header.insert(0, "card")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for v in verdicts:
        paper = f"{v.claim.paper} ({v.claim.source}; {v.claim.tag}"
        paper += ", unverified)" if not v.claim.verified else ")"
        verdict = f"{v.verdict} ({v.why})" if v.why else v.verdict
        cells = [v.claim.claim, v.claim.setting, paper, _gain_text(v.gain), verdict]
        if with_card:
            cells.insert(0, v.card)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def tally(verdicts: Sequence[Verdict]) -> str:
    """ "k reproduced, k contradicted, k not resolved of n claims"."""
    counts = {
        name: sum(v.verdict == name for v in verdicts)
        for name in (REPRODUCED, CONTRADICTED, NOT_RESOLVED)
    }
    parts = ", ".join(f"{n} {name}" for name, n in counts.items())
    return f"{parts} of {len(verdicts)} claims"


def claims_page(cards: Sequence[Card], sources: Sequence[str], *, reps: int = 2000) -> str:
    """The claims page: how a claim is read, the tally and the table, from the records in
    ``sources`` (folders or ``runs.csv`` files, :func:`~.collect.collect_runs`)."""
    from .collect import collect_runs, manifest_folders, suite_coverage

    table, _ = collect_runs(list(sources))
    finished = set(table.loc[table["kind"] == "run", "run"]) if not table.empty else set()
    coverage = suite_coverage(
        manifest_folders(sources),
        finished,
        "its intervals use only the seeds present. A verdict can change as the missing seeds "
        "finish.",
    )
    verdicts = (
        judge_cards(cards, table, reps=reps)
        if not table.empty
        else [
            Verdict(card.id, claim, None, NOT_RESOLVED, "no records")
            for card in cards
            for claim in card.claims
        ]
    )
    commits = sorted({str(c)[:7] for c in table.get("commit", pd.Series(dtype=str)).dropna()})
    if len(commits) > 6:  # a folder gathered over many campaigns
        commits = [f"{len(commits)} commits"]
    names = ", ".join(f"`{PurePosixPath(str(s)).as_posix()}`" for s in sources)
    lines = [
        "# The papers' claims on the testbed",
        "",
        "Each paper card lists the claims of its paper the testbed can test: one method ahead "
        "of another. A claim is read as the AUC gain (the area under the accuracy-versus-budget "
        "curve) of the method over its baseline in the standard suite's setting, paired by seed, "
        "with the 95% bootstrap and t intervals and k of n seeds ahead. *Reproduced*: both "
        f"intervals above 0 over at least {MIN_PAIRS_FOR_A_CLAIM} seed pairs; *contradicted*: "
        "both below 0; *not resolved*: anything else, with the reason. The paper's number comes "
        "from its own model, data and budget: only the direction is tested, never the size.",
        "",
        f"Records: {names}"
        + (f" (commits {', '.join(commits)})" if commits else " (no finished runs yet)")
        + ". "
        "Made by `creditbench claims " + " ".join(str(s) for s in sources) + "`.",
        "",
        *([" ".join(coverage), ""] if coverage else []),
        f"**{tally(verdicts)}.**",
        "",
        claims_table(verdicts),
        "",
    ]
    return "\n".join(lines)
