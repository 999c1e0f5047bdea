"""The board across worlds: every method placed on each world's own GRPO (0) -> oracle (1)
scale, its positions aggregated over the worlds and settings where that scale exists, and each
paper's claim counted by the worlds in which it holds, is reversed or is not resolved.

A *world* is a task family with its hard and easy settings: the chain testbed, countdown and
the ledger (``docs/worlds/``). Its records are its board's ``runs.csv`` and, for the claims,
the claims' own rows beside them (:data:`RECORDS`); a world without records has no runs yet.

**Positions, per seed.** In one world and setting, a method's AUC gap over GRPO at seed ``s``
divided by the oracle's mean gap over GRPO there: the world's scale, held fixed as rliable
normalises a task's scores by fixed reference scores. A world and setting has a scale only
where the oracle is ahead of GRPO by the claim rule (the condition of
:func:`.gains.scale_position`); elsewhere its runs place no method. Seeds count where the
method, GRPO and the oracle all ran.

**The aggregate.** A method's per-seed positions pooled over the worlds and settings that place
it: their interquartile mean (IQM) with a 95% stratified bootstrap interval, the seeds resampled
within each world and setting (:func:`.stats.stratified_interval`), as rliable aggregates
normalised scores over tasks and runs.

**World counts** (the rule, written before any world but the chain has runs): a claim *holds*
in a world where it holds in at least one of the world's settings and is reversed in none; it
is *reversed* there where it is reversed in at least one and holds in none; *not testable* where
it is not testable in every setting; *not resolved* otherwise (the intervals include 0 or the
runs are missing everywhere, or it holds in one setting and is reversed in another). A world
without records is counted apart, as *no runs yet*.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from creditbench.reference.cards import CLAIM_SETTINGS, Card

from .claims import (
    HOLDS,
    NOT_RESOLVED,
    NOT_TESTABLE,
    REVERSED,
    by_claim,
    judge_cards,
    setting_runs,
    world_table,
)
from .gains import MIN_PAIRS_FOR_A_CLAIM, gain, paired_gaps
from .stats import BASELINE, ORACLE, accuracy_columns, stratified_interval

# Each world's records, relative to the docs folder: its board, then the claims' own rows
RECORDS: dict[str, tuple[str, ...]] = {
    "chain": ("results/standard/runs.csv", "results/claims-rows/runs.csv"),
    "countdown": ("results/countdown/runs.csv",),
    "ledger": ("results/ledger/runs.csv",),
}
NO_RUNS = "no runs yet"
START = "<!-- worlds: computed from the records; do not edit -->"
END = "<!-- /worlds -->"


@dataclass
class World:
    """One world's records: its board's runs table and the claims' (board plus the claims'
    own rows); both None where the world has no records yet."""

    name: str
    board: pd.DataFrame | None
    claims: pd.DataFrame | None


def read_worlds(docs: str | Path, records: dict[str, tuple[str, ...]] = RECORDS) -> list[World]:
    """Every world of ``records``, its files read where they exist (relative to ``docs``)."""
    from .collect import collect_runs

    worlds = []
    for name, files in records.items():
        present = [str(Path(docs) / f) for f in files if (Path(docs) / f).is_file()]
        if not present or present[0] != str(Path(docs) / files[0]):  # no board: no runs yet
            worlds.append(World(name, None, None))
            continue
        worlds.append(World(name, collect_runs(present[:1])[0], collect_runs(present)[0]))
    return worlds


def oracle_gaps(runs: pd.DataFrame) -> pd.Series | None:
    """``{seed: oracle - GRPO AUC}`` in one world and setting's run rows, where the oracle is
    ahead of GRPO by the claim rule and so sets the scale; None elsewhere (module doc)."""
    oracle = paired_gaps(runs, ORACLE, accuracy_columns(runs)[2])
    if len(oracle) < MIN_PAIRS_FOR_A_CLAIM or not gain(oracle.to_numpy()).separates:
        return None
    return oracle


def positions_on(runs: pd.DataFrame, method: str, oracle: pd.Series) -> pd.Series:
    """``{seed: position}`` of ``method`` on the scale of ``oracle`` (:func:`oracle_gaps`)."""
    if method == BASELINE:
        return pd.Series(0.0, index=oracle.index)
    mine = paired_gaps(runs, method, accuracy_columns(runs)[2])
    seeds = mine.index.intersection(oracle.index)
    return mine.loc[seeds] / float(oracle.mean())


def seed_positions(runs: pd.DataFrame, method: str) -> pd.Series | None:
    """``{seed: position}`` of ``method`` in one world and setting's run rows; None where the
    oracle does not set a scale there (module doc)."""
    oracle = oracle_gaps(runs)
    return None if oracle is None else positions_on(runs, method, oracle)


def aggregate_positions(worlds: Sequence[World], *, reps: int = 2000) -> pd.DataFrame:
    """Per method: the worlds and settings that place it, its seeds, and the IQM of its
    positions with the stratified bootstrap interval; best first."""
    strata: dict[str, dict[str, np.ndarray]] = {}
    for world in worlds:
        if world.board is None:
            continue
        for label in CLAIM_SETTINGS:
            runs = setting_runs(world_table(world.board, world.name), label)
            oracle = oracle_gaps(runs)  # the setting's scale, once for all its methods
            if oracle is None:
                continue
            for method in sorted(set(runs["method"])):
                positions = positions_on(runs, method, oracle)
                if len(positions):
                    where = f"{world.name} · {label}"
                    strata.setdefault(method, {})[where] = positions.to_numpy(dtype=float)
    rows = []
    for method, mine in strata.items():
        interval = stratified_interval(list(mine.values()), "iqm", reps=reps)
        rows.append(
            {
                "method": method,
                "where": ", ".join(mine),
                "seeds": interval.n,
                "iqm": interval.point,
                "low": interval.low,
                "high": interval.high,
            }
        )
    columns = ["method", "where", "seeds", "iqm", "low", "high"]
    return pd.DataFrame(rows, columns=columns).sort_values("iqm", ascending=False, kind="stable")


def world_verdict(words: Sequence[str]) -> str:
    """A claim's verdict in one world from its settings' verdicts (module doc)."""
    if words and all(w == NOT_TESTABLE for w in words):
        return NOT_TESTABLE
    if HOLDS in words and REVERSED not in words:
        return HOLDS
    if REVERSED in words and HOLDS not in words:
        return REVERSED
    return NOT_RESOLVED


COUNTED = (HOLDS, REVERSED, NOT_RESOLVED, NOT_TESTABLE, NO_RUNS)


def claim_world_counts(
    worlds: Sequence[World], cards: Sequence[Card], *, reps: int = 2000
) -> pd.DataFrame:
    """One row a claim: its card and words, then how many worlds give each of :data:`COUNTED`."""
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for card in cards:
        for claim in card.claims:
            counts[(card.id, claim.claim)] = dict.fromkeys(COUNTED, 0)
    for world in worlds:
        if world.claims is None:
            for tally in counts.values():
                tally[NO_RUNS] += 1
            continue
        verdicts = judge_cards(cards, world.claims, reps=reps, task=world.name)
        for group in by_claim(verdicts):
            word = world_verdict([v.verdict for v in group])
            counts[(group[0].card, group[0].claim.claim)][word] += 1
    rows = [{"card": card, "claim": claim, **tally} for (card, claim), tally in counts.items()]
    return pd.DataFrame(rows, columns=["card", "claim", *COUNTED])


def worlds_block(worlds: Sequence[World], cards: Sequence[Card], *, reps: int = 2000) -> str:
    """The home page's block: which worlds have runs, the aggregate of positions, and the
    claims' world counts (the claims any world resolves listed; the rest counted)."""
    measured = [w.name for w in worlds if w.board is not None]
    waiting = [w.name for w in worlds if w.board is None]
    lines = [
        START,
        "",
        f"**Across worlds.** Measured: {', '.join(measured) or 'none'}"
        + (f"; {NO_RUNS}: {', '.join(waiting)}" if waiting else "")
        + ". A method's place in each world and setting is its per-seed AUC gain over GRPO on "
        "that world's own GRPO (0) → oracle (1) scale; across them, the interquartile mean "
        "(IQM) of those positions, with a 95% stratified bootstrap interval over worlds, "
        "settings and seeds (`leaderboard/worlds.py` gives the rule).",
        "",
    ]
    positions = aggregate_positions(worlds, reps=reps)
    if positions.empty:
        lines.append("No world places a method yet: no oracle is ahead of GRPO beyond noise.")
    else:
        lines += [
            "| method | placed in | seeds | IQM position [95% interval] |",
            "|---|---|---|---|",
        ]
        for _, r in positions.iterrows():
            iqm = f"{r['iqm']:+.2f} [{r['low']:+.2f}, {r['high']:+.2f}]"
            lines.append(f"| {r['method']} | {r['where']} | {r['seeds']} | {iqm} |")
    counts = claim_world_counts(worlds, cards, reps=reps)
    resolved = counts[(counts[HOLDS] > 0) | (counts[REVERSED] > 0)]
    header = "| card | claim | " + " | ".join(f"worlds: {w}" for w in COUNTED) + " |"
    lines += [
        "",
        f"**The papers' claims, world by world** ({len(worlds)} worlds; a claim holds in a world "
        "where it holds in one of its settings and is reversed in none, and conversely). "
        f"{len(resolved)} of {len(counts)} claims hold or are reversed in some world:",
        "",
    ]
    if resolved.empty:
        lines.append("none yet.")
    else:
        lines += [header, "|" + "---|" * (2 + len(COUNTED))]
        for _, r in resolved.iterrows():
            cells = [r["card"], r["claim"], *(str(r[w]) for w in COUNTED)]
            lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    rest = counts.drop(resolved.index)
    if len(rest):
        untestable = int((rest[NOT_TESTABLE] == len(measured)).sum()) if measured else 0
        lines += [
            "",
            f"The other {len(rest)} claims hold in no world and are reversed in none: "
            f"{untestable} are not testable in any world measured, the rest not resolved.",
        ]
    return "\n".join([*lines, "", END])
