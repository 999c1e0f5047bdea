"""The verdict of a setting in one or two sentences, computed from its numbers.

The ranking statistic is the gain in AUC over GRPO (the area under accuracy against budget
fraction, mean over seeds, minus GRPO's; :func:`leaderboard.stats.summarize` gives its 95%
bootstrap interval). A method is *ahead* of GRPO when that interval lies entirely above zero,
*behind* when it lies entirely below, and otherwise not told apart from it. Oracle credit, the
reference, is reported on its own: whether credit can matter in the setting at all.
"""

from __future__ import annotations

import math

import pandas as pd

from .stats import BASELINE, ORACLE


def signed(value: float, digits: int = 3) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:+.{digits}f}"


def gain_text(row) -> str:
    """``+0.023 [+0.011, +0.036]``, or the point alone when there is no interval."""
    point, low, high = (row.get(f"gain_auc{s}") for s in ("", "_low", "_high"))
    if int(row.get("n_seeds", 1)) < 2 or low == high:
        return signed(point)
    return f"{signed(point)} [{signed(low)}, {signed(high)}]"


def _names(rows: pd.DataFrame) -> str:
    return ", ".join(f"{r['method']} ({gain_text(r)})" for _, r in rows.iterrows())


def by_gain(frame: pd.DataFrame) -> pd.DataFrame:
    """The methods of one setting, best AUC gain first (GRPO's is 0; a missing gain last)."""
    gain = frame["gain_auc"] if "gain_auc" in frame else pd.Series(math.nan, index=frame.index)
    gain = gain.where(frame["method"] != BASELINE, 0.0).fillna(-math.inf)
    keyed = frame.assign(_gain=-gain, _auc=-frame["auc_iqm"])
    return keyed.sort_values(["_gain", "_auc", "method"]).drop(columns=["_gain", "_auc"])


def setting_verdict(frame: pd.DataFrame) -> str:
    """What the numbers of one setting say (``frame``: its rows of ``summarize()["methods"]``)."""
    methods = set(frame["method"])
    if BASELINE not in methods or "gain_auc" not in frame:
        return "No GRPO runs in this setting: there is no gain over GRPO to report."
    others = by_gain(frame[~frame["method"].isin([BASELINE, ORACLE])])
    grpo_seeds = int(frame.loc[frame["method"] == BASELINE, "n_seeds"].iloc[0])
    if grpo_seeds < 2 or (not others.empty and (others["n_seeds"] < 2).all()):
        if others.empty:
            return "One seed: no intervals, and no method besides GRPO and the reference."
        best, worst = others.iloc[0], others.iloc[-1]
        return (
            "One seed per method: no intervals, so no method is called ahead of GRPO or behind "
            f"it. By point estimate the AUC gain over GRPO runs from {best['method']} "
            f"({signed(best['gain_auc'])}) to {worst['method']} ({signed(worst['gain_auc'])})."
        )
    parts = []
    untested = others[others["n_seeds"] < 2]  # one seed: no interval to call it either way
    others = others[others["n_seeds"] >= 2]
    if not others.empty:
        ahead = others[others["gain_auc_low"] > 0]
        behind = others[others["gain_auc_high"] < 0]
        level = len(others) - len(ahead) - len(behind)
        if len(ahead):
            parts.append(f"Ahead of GRPO in AUC (95% interval above zero): {_names(ahead)}.")
        else:
            parts.append("No method is ahead of GRPO in AUC beyond its 95% interval.")
        if len(behind):
            parts.append(f"Behind it: {_names(behind)}.")
        if level:
            parts.append(f"{level} not told apart from GRPO.")
    if not untested.empty:
        names = ", ".join(untested["method"])
        parts.append(f"One seed, so not tested: {names}.")
    if ORACLE in methods:
        oracle = frame[frame["method"] == ORACLE].iloc[0]
        if oracle["n_seeds"] >= 2 and oracle["gain_auc_low"] > 0:
            where = f"ahead of GRPO by {gain_text(oracle)}: credit can pay here"
        elif oracle["n_seeds"] >= 2 and oracle["gain_auc_high"] < 0:
            where = f"behind GRPO by {gain_text(oracle)}: the reference loses to outcome credit"
        else:
            where = (
                f"not told apart from GRPO ({gain_text(oracle)}), so this setting cannot show "
                "what better credit buys"
            )
        parts.append(f"Oracle credit, the reference, is {where}.")
    return " ".join(parts) or "Only GRPO ran in this setting."
