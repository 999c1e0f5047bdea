"""Which rows of the standard suite run easy seeds 5-9: the rule of docs/testbed.md, "The easy
setting's seeds 5-9", applied to the records of easy seeds 0-4.

:func:`chosen` gives GRPO and the oracle, then every method whose easy AUC gain over GRPO at
seeds 0-4 the claim rule leaves undecided (its bootstrap or its t interval contains 0), and
refuses while a method it is asked about lacks one of its easy seeds 0-4: the rule reads all of
them at once. A campaign's ``rule: easy-seeds`` phase runs the rows it chooses
(:mod:`.run`), and ``python scripts/easy_seeds.py`` prints them.

:func:`campaign_manifest` is the campaign's plan as a suite manifest (the board's
``suite-standard.json``): the suite's runs less the easy seeds 5-9 of the rows the rule has not
chosen. GRPO's and the oracle's are always in; the rule chooses among the rows whose easy seeds
0-4 are all in, so a row still running its first five has none of 5-9 planned yet. The board's
coverage sentence counts against it, so a finished campaign reads as finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from creditbench.leaderboard.board import summarize
from creditbench.leaderboard.collect import collect_runs
from creditbench.leaderboard.headline import setting_rows
from creditbench.leaderboard.stats import BASELINE, ORACLE

FIRST_SEEDS = range(5)


def undecided(frame: pd.DataFrame) -> list[str]:
    """The methods of ``frame`` (one setting's rows of ``summarize()["methods"]``) whose AUC
    gain over GRPO is neither ahead nor behind by the claim rule, best first."""
    rows = frame[~frame["method"].isin([BASELINE, ORACLE])]
    decided = rows["gain_auc_separates"].fillna(False).astype(bool) | rows[
        "gain_auc_reversed"
    ].fillna(False).astype(bool)
    return [str(m) for m in rows.loc[~decided].sort_values("gain_auc", ascending=False)["method"]]


def first_seeds(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """The easy setting's rows of seeds 0-4 (runs and their evaluations) in ``table`` (as
    ``collect_runs`` gives it), and each method's count of finished runs among them (none in
    a table of no runs, a campaign's before its first)."""
    if table.empty:
        return table, pd.Series(dtype=int)
    easy = setting_rows(table, "easy")
    first = easy[easy["seed"].isin(FIRST_SEEDS)]
    return first, first.loc[first["kind"] == "run", "method"].value_counts()


def chosen(table: pd.DataFrame, methods: Sequence[str]) -> list[str]:
    """GRPO, the oracle and the undecided methods; ValueError naming the missing runs."""
    first, counts = first_seeds(table)
    missing = [m for m in methods if counts.get(m, 0) < len(FIRST_SEEDS)]
    if missing:
        raise ValueError(f"easy seeds 0-4 missing for: {', '.join(missing)}")
    frame = summarize(first)["methods"]
    frame = frame[frame["method"].isin(methods)]
    return [BASELINE, ORACLE, *undecided(frame)]


def easy_seeds(records: str, methods: Sequence[str]) -> list[str]:
    """:func:`chosen` for the records in ``records`` (a results folder or a runs.csv)."""
    return chosen(collect_runs([records])[0], methods)


PLAN = (
    "the campaign's plan: hard seeds 0-9, easy seeds 0-4, easy seeds 5-9 of GRPO, the oracle "
    "and the rows whose first five leave their verdict open (docs/testbed.md)"
)


def campaign_manifest(
    records: str | Path, runs: Sequence | None = None, suite: str = "standard"
) -> dict:
    """The campaign's plan (module doc) as the manifest of ``suite``: ``runs`` (:class:`Run` of
    ``creditbench.tools.suite``; default: the standard suite's) less the easy seeds 5-9 of the
    rows the rule has not chosen. ``records``: a folder of runs or a ``runs.csv``."""
    from creditbench.tools.suite import expand_suite, load_suite, suite_manifest, suite_path

    if runs is None:
        path = suite_path("standard")
        runs = expand_suite(load_suite(path), path)
    easy = [run for run in runs if "-easy-" in f"-{run.label}-"]
    table, _ = collect_runs([records])
    _, counts = first_seeds(table)
    complete = sorted({r.entry for r in easy if counts.get(r.entry, 0) == len(FIRST_SEEDS)})
    picked = {BASELINE, ORACLE}
    if {BASELINE, ORACLE} <= set(complete):  # the rule reads every row against GRPO's seeds
        picked |= set(chosen(table, complete))
    later = {run.name for run in easy if run.seed not in FIRST_SEEDS and run.entry not in picked}
    kept = [(run.name, run.label) for run in runs if run.name not in later]
    return suite_manifest(suite, kept, PLAN)
