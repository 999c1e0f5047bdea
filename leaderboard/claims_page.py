"""The claims page: every paper card's claims, read by :mod:`creditbench.leaderboard.claims` on
the records, as the page ``creditbench claims`` writes (``docs/results/claims.md``) and the
reproduction report's table: how a claim is read, the verdict words, the tally and Holm's line
per setting, and one table row a claim with its verdict in every setting and its caveats."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath

import pandas as pd

from creditbench.reference.cards import CLAIM_SETTINGS, Card, Claim

from .claims import (
    AXIS_NOT_MEASURED,
    HOLDS,
    NOT_RESOLVED,
    NOT_TESTABLE,
    REVERSED,
    SAMPLES,
    VERDICTS,
    Verdict,
    axis_reading,
    by_claim,
    gain_text,
    judge_cards,
)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def verdict_text(verdict: Verdict) -> str:
    """One setting's cell: the verdict (and why), the gain on the claim's axis, and the note on
    a baseline behind GRPO."""
    text = f"{verdict.verdict} ({verdict.why})" if verdict.why else verdict.verdict
    if verdict.gain is not None:
        text += f": {gain_text(verdict.gain)}"
    if verdict.reading:
        text += f" ({verdict.reading})"
    if verdict.weak_baseline:
        text += f"; {verdict.weak_baseline}"
    return text


def axis_text(claim: Claim) -> str:
    """``steps (inferred; not stated ...)``: the axis and where it was read."""
    axis = claim.axis
    unverified = ", unverified" if not axis.verified else ""
    return f"{axis.value} ({axis.tag}{unverified}; {axis.source})"


def caveats_text(claim: Claim) -> str:
    """Every caveat of the claim, its words and why; an empty string without any."""
    return "; ".join(f"{c.label}: {c.note}" for c in claim.caveats)


def claims_table(verdicts: Sequence[Verdict], *, with_card: bool = True) -> str:
    """The claims as a Markdown table, one row a claim: the claim, its axis, the paper's number,
    a column a setting (the verdict, the gain on the claim's axis [bootstrap] t [t interval]
    with k of n seeds ahead, a baseline behind GRPO) and the caveats."""
    settings = list(dict.fromkeys(v.setting for v in verdicts))
    header = ["claim", "axis", "paper's number (where)", *settings, "caveats"]
    if with_card:
        header.insert(0, "card")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for group in by_claim(verdicts):
        claim = group[0].claim
        paper = f"{claim.paper} ({claim.source}; {claim.tag}"
        paper += ", unverified)" if not claim.verified else ")"
        by_setting = {v.setting: verdict_text(v) for v in group}
        cells = [
            claim.claim,
            axis_text(claim),
            paper,
            *(by_setting.get(s, "") for s in settings),
            caveats_text(claim) or "none",
        ]
        if with_card:
            cells.insert(0, group[0].card)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def tally(verdicts: Sequence[Verdict]) -> str:
    """Per setting, ``hard: k holds on the testbed, k reversed on the testbed, k not resolved,
    k not testable here of n claims``, the settings joined by ``; ``."""
    parts = []
    for setting in dict.fromkeys(v.setting for v in verdicts):
        mine = [v for v in verdicts if v.setting == setting]
        counts = ", ".join(f"{sum(v.verdict == word for v in mine)} {word}" for word in VERDICTS)
        parts.append(f"{setting}: {counts} of {len(mine)} claims")
    return "; ".join(parts)


def holm_line(verdicts: Sequence[Verdict], setting: str) -> str:
    """Which of the setting's "holds" and "reversed" verdicts survive Holm's correction over
    every claim read there (a measured gain; "not testable here" judges nothing and is left
    out), each claim's p-value the paired t test's; empty without such a verdict."""
    from .verdict import holm_text, t_test_p

    read = [v for v in verdicts if v.setting == setting and v.gain and v.verdict != NOT_TESTABLE]
    p_values = {_claim_name(v): t_test_p(v.gain.columns("gain"), "gain") for v in read if v.gain}
    called = [_claim_name(v) for v in read if v.verdict in (HOLDS, REVERSED)]
    family = f"claims read in the {setting} setting"
    text = holm_text(p_values, called, family, where="in the table below")
    return f"{setting}: {text}" if text else ""


def _claim_name(verdict: Verdict) -> str:
    return f"{verdict.claim.claim} ({verdict.card})"


def verdict_legend() -> str:
    """The verdict words and their meaning, as the claims page lists them."""
    return "\n".join(f"- *{word}*: {meaning}." for word, meaning in VERDICTS.items())


def claims_page(
    cards: Sequence[Card], sources: Sequence[str], *, reps: int = 2000, refuse_empty: bool = False
) -> str:
    """The claims page: how a claim is read, the verdict words, the tally per setting and the
    table, from the records in ``sources`` (folders or ``runs.csv`` files,
    :func:`~.collect.collect_runs`). With ``refuse_empty``, sources that hold no finished run
    are a ``RunFormatError``, as the leaderboard refuses them (the command line's ``claims``);
    without, a page of no verdicts (a campaign's, before its first run finishes)."""
    from .collect import collect_runs, refuse_no_runs
    from .suite_manifests import manifest_folders, suite_coverage

    table, warnings = collect_runs(list(sources))
    if refuse_empty:
        refuse_no_runs(table, warnings, sources)
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
            Verdict(card.id, claim, setting, None, NOT_RESOLVED, "no records")
            for card in cards
            for claim in card.claims
            for setting in CLAIM_SETTINGS
        ]
    )
    commits = sorted({str(c)[:7] for c in table.get("commit", pd.Series(dtype=str)).dropna()})
    if len(commits) > 6:  # a folder gathered over many campaigns
        commits = [f"{len(commits)} commits"]
    names = ", ".join(f"`{PurePosixPath(str(s)).as_posix()}`" for s in sources)
    samples = [st for st in CLAIM_SETTINGS if not table.empty and axis_reading(table, st, SAMPLES)]
    where = f"measured in the {' and '.join(samples)} setting" if samples else "not measured"
    lines = [
        "# The papers' claims on the testbed",
        "",
        "Each paper card lists the claims of its paper the testbed can test: one method ahead "
        "of another, at equal compute (FLOPs or GPU hours), samples (trained responses or "
        "prompts), steps (optimizer steps) or wall-clock, the claim's axis, as its paper makes "
        "it (where a paper does not say, its training curve is read per step: steps, tagged "
        "inferred). A claim is read on its own axis and in every setting of the board, as the "
        "gain of the method over its baseline paired by seed, with the 95% bootstrap and t "
        "intervals and k of n seeds ahead. The verdicts:",
        "",
        verdict_legend(),
        "",
        "How the records measure each axis: compute, by the board's AUC (accuracy over the "
        "fraction of the FLOP budget spent); samples, by the AUC over the first trained "
        "responses every measured run of the setting reached, from evaluations at those counts "
        f"only ({where} by these records); steps, as samples where the claim's two rows train "
        "as many responses an optimizer step (every method but IBPO and InT trains the batch's "
        "32), so that equal samples is equal steps; wall-clock, not at all. A claim whose axis "
        f"is not measured is *{NOT_RESOLVED}* ({AXIS_NOT_MEASURED}), never read on the compute "
        "axis instead. Each verdict carries the claim's caveats from its card (the method page's "
        "reason where its mechanism is inert here; a claim inferred from an abstract), and "
        "says so where the claim's baseline row is itself behind GRPO in that setting. The "
        "paper's number comes from its own model, data and budget: only the direction is "
        "tested, never the size.",
        "",
        f"Records: {names}"
        + (f" (commits {', '.join(commits)})" if commits else " (no finished runs yet)")
        + ". "
        "Made by `creditbench claims " + " ".join(str(s) for s in sources) + "`.",
        "",
        *([" ".join(coverage), ""] if coverage else []),
        f"**{tally(verdicts)}.**",
        "",
        *[f"{line}\n" for line in (holm_line(verdicts, s) for s in CLAIM_SETTINGS) if line],
        claims_table(verdicts),
        "",
    ]
    return "\n".join(lines)
