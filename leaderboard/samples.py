"""The equal-samples axis as the pages say it: one setting's table and its sentence.

The numbers are :func:`.board.summarize`'s (``samples_mean``, ``gain_samples``,
``samples_position``, ``samples_horizon``; :func:`.stats.with_samples_auc` says how they are
read): a run's mean accuracy over the first trained responses every measured run of its setting
reached, from its evaluations at counts of trained responses (``budget.eval_responses``) only.
A row whose runs have no such evaluations is *not measured*: the board never reads it off the
evaluations at budget fractions, which would credit a method with few steps by interpolating
its baseline's curve between points far apart.
"""

from __future__ import annotations

import pandas as pd

from .gains import MIN_PAIRS_FOR_A_CLAIM, ranked, ranked_without
from .stats import BASELINE, ORACLE
from .tables import fmt_gain, fmt_interval, fmt_position, missing
from .verdict import gain_text, holm_sentence

NOT_MEASURED = "not measured"
WHERE = "`budget.eval_responses`"


def measured(frame: pd.DataFrame) -> pd.Series:
    """Per row of ``frame`` (one setting's rows of ``summarize()["methods"]``): whether the
    equal-samples axis measured it."""
    if "samples_mean" not in frame:
        return pd.Series(False, index=frame.index)
    return frame["samples_mean"].notna()


def samples_table(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]] | None:
    """The setting's rows in the board's order: the AUC at equal samples, its gain over GRPO
    and its position, or "not measured"; None when no row is measured."""
    if not measured(frame).any():
        return None

    def cell(text):
        return lambda r, n: NOT_MEASURED if missing(r.get("samples_mean")) else text(r, n)

    columns = [
        ("method", lambda r, n: r["method"]),
        ("AUC at equal samples, mean", cell(lambda r, n: fmt_interval(r, "samples_mean", n))),
        ("gain over GRPO", cell(lambda r, n: fmt_gain(r, "gain_samples"))),
    ]
    others = frame[frame["method"] != BASELINE]
    if "samples_position" in others and others["samples_position"].notna().any():
        position = cell(lambda r, n: fmt_position(r, "samples_position"))
        columns.append(("position (GRPO 0, oracle 1)", position))
    rows = [
        [text(r, int(r["n_seeds"])) for _, text in columns] for _, r in ranked(frame).iterrows()
    ]
    return [h for h, _ in columns], rows


def _column(frame: pd.DataFrame, column: str, default) -> pd.Series:
    """``frame[column]``, or ``default`` in every row where the column is absent."""
    return frame[column] if column in frame else pd.Series(default, index=frame.index)


def _horizon(frame: pd.DataFrame) -> str:
    horizon = frame["samples_horizon"].dropna()
    return f"{int(horizon.iloc[0]):,}" if len(horizon) else "?"


def samples_sentence(frame: pd.DataFrame) -> str:
    """What the equal-samples axis says of one setting, by the claim rule of the compute axis
    (``frame``: its rows of ``summarize()["methods"]``)."""
    on = measured(frame)
    if not on.any():
        return (
            f"At equal samples: {NOT_MEASURED}. No run of this setting was evaluated at counts "
            f"of trained responses ({WHERE}), and the board does not interpolate them from its "
            "evaluations at budget fractions."
        )
    head = (
        f"At equal samples (the mean accuracy over the first {_horizon(frame)} trained "
        f"responses, read from the evaluations at counts of trained responses only, paired by "
        "seed with GRPO's)"
    )
    if not on[frame["method"] == BASELINE].any():
        return f"{head}: GRPO is {NOT_MEASURED}, so no gain over it can be read."
    others = ranked_without(frame[on], [BASELINE, ORACLE])
    pairs = _column(others, "gain_samples_pairs", 0).fillna(0)
    tested = others[pairs >= MIN_PAIRS_FOR_A_CLAIM]
    ahead = tested[_column(tested, "gain_samples_separates", False).fillna(False).astype(bool)]
    behind = tested[_column(tested, "gain_samples_reversed", False).fillna(False).astype(bool)]

    def names(rows: pd.DataFrame) -> str:
        gains = (f"{r['method']} ({gain_text(r, 'gain_samples')})" for _, r in rows.iterrows())
        return ", ".join(gains)

    parts = [f"ahead of GRPO: {names(ahead)}" if len(ahead) else "no method ahead of GRPO"]
    if len(behind):
        parts.append(f"behind it: {names(behind)}")
    level = len(tested) - len(ahead) - len(behind)
    if level:
        parts.append(f"{level} not told apart from GRPO")
    if len(tested) < len(others):
        few = ", ".join(others.loc[pairs < MIN_PAIRS_FOR_A_CLAIM, "method"])
        parts.append(f"fewer than {MIN_PAIRS_FOR_A_CLAIM} seed pairs: {few}")
    unmeasured = [m for m in frame.loc[~on, "method"] if m != BASELINE]
    if unmeasured:
        parts.append(f"{NOT_MEASURED}: {', '.join(unmeasured)}")
    oracle = frame[(frame["method"] == ORACLE) & on]
    if len(oracle):
        parts.append(f"oracle credit {gain_text(oracle.iloc[0], 'gain_samples')}")
    holm = holm_sentence(frame[on], "gain_samples")  # the compute axis's correction, this axis
    return f"{head}: {'; '.join(parts)}." + (f" {holm}" if holm else "")
