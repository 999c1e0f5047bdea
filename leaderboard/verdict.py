"""The verdict of a setting in one or two sentences, computed from its numbers.

The ranking statistic is the gain in AUC over GRPO (the area under accuracy against budget
fraction), paired by seed (:mod:`leaderboard.gains`). A method is *ahead* of GRPO when the
claim rule says so (its bootstrap and t 95% intervals both above zero, over at least 5 seeds),
*behind* when both lie below, and otherwise not told apart from it. Oracle credit, the
reference, is reported on its own: whether credit can matter in the setting at all.
"""

from __future__ import annotations

import math

import pandas as pd

from .gains import MIN_PAIRS_FOR_A_CLAIM, ranked_without
from .stats import BASELINE, ORACLE


def signed(value: float, digits: int = 3) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:+.{digits}f}"


def gain_text(row, name: str = "gain_auc") -> str:
    """``+0.054 [+0.037, +0.067] t [+0.030, +0.078] 5/5``: the paired gain, its bootstrap and t
    intervals and k of n seeds ahead; the point alone over fewer than two pairs."""
    point = row.get(name)
    pairs = row.get(f"{name}_pairs")
    if pairs is None or not math.isfinite(pairs) or int(pairs) < 2:
        return signed(point)
    get = lambda key: signed(row.get(f"{name}_{key}"))  # noqa: E731
    return (
        f"{signed(point)} [{get('low')}, {get('high')}] t [{get('t_low')}, {get('t_high')}] "
        f"{int(row.get(f'{name}_ahead'))}/{int(pairs)}"
    )


def _names(rows: pd.DataFrame) -> str:
    return ", ".join(f"{r['method']} ({gain_text(r)})" for _, r in rows.iterrows())


def _flag(frame: pd.DataFrame, column: str) -> pd.Series:
    """A claim-rule column as booleans (False where absent)."""
    if column not in frame:
        return pd.Series(False, index=frame.index)
    return frame[column].fillna(False).astype(bool)


def setting_verdict(frame: pd.DataFrame) -> str:
    """What the numbers of one setting say (``frame``: its rows of ``summarize()["methods"]``)."""
    methods = set(frame["method"])
    if BASELINE not in methods or "gain_auc" not in frame:
        return "No GRPO runs in this setting: there is no gain over GRPO to report."
    others = ranked_without(frame, [BASELINE, ORACLE])
    grpo_seeds = int(frame.loc[frame["method"] == BASELINE, "n_seeds"].iloc[0])
    if grpo_seeds < 2 or (not others.empty and (others["n_seeds"] < 2).all()):
        if others.empty:
            return "One seed: no intervals, and no method besides GRPO and the reference."
        best, worst = others.iloc[0], others.iloc[-1]
        # GRPO's one seed pairs with one seed of each method, however many the method has
        everyone = (others["n_seeds"] < 2).all()
        one = "One seed per method" if everyone else "GRPO has one seed"
        return (
            f"{one}: no intervals, so no method is called ahead of GRPO or behind "
            f"it. By point estimate the AUC gain over GRPO runs from {best['method']} "
            f"({signed(best['gain_auc'])}) to {worst['method']} ({signed(worst['gain_auc'])})."
        )
    parts = []
    # fewer seed pairs than the claim rule needs: no interval calls it either way
    pairs = others["gain_auc_pairs"] if "gain_auc_pairs" in others else others["n_seeds"]
    enough = pairs.fillna(0) >= MIN_PAIRS_FOR_A_CLAIM
    untested, others = others[~enough], others[enough]
    if not others.empty:
        ahead = others[_flag(others, "gain_auc_separates")]
        behind = others[_flag(others, "gain_auc_reversed")]
        level = len(others) - len(ahead) - len(behind)
        if len(ahead):
            parts.append(f"Ahead of GRPO in AUC (both 95% intervals above zero): {_names(ahead)}.")
        else:
            parts.append("No method is ahead of GRPO in AUC beyond both its 95% intervals.")
        if len(behind):
            parts.append(f"Behind it: {_names(behind)}.")
        if level:
            parts.append(f"{level} not told apart from GRPO.")
    if not untested.empty:
        names = ", ".join(untested["method"])
        parts.append(f"Fewer than {MIN_PAIRS_FOR_A_CLAIM} seeds, so not tested: {names}.")
    if ORACLE in methods:
        oracle = frame[frame["method"] == ORACLE].iloc[0]
        oracle_pairs = oracle.get("gain_auc_pairs", oracle["n_seeds"])
        if not oracle_pairs >= MIN_PAIRS_FOR_A_CLAIM:  # NaN pairs: none
            pairs = 0 if oracle_pairs != oracle_pairs else int(oracle_pairs)
            where = (
                f"not tested yet ({gain_text(oracle)}): {pairs} seed pairs with GRPO of the "
                f"{MIN_PAIRS_FOR_A_CLAIM} the claim rule needs"
            )
        elif bool(oracle.get("gain_auc_separates")):
            where = f"ahead of GRPO by {gain_text(oracle)}: credit can pay here"
        elif bool(oracle.get("gain_auc_reversed")):
            where = f"behind GRPO by {gain_text(oracle)}: the reference loses to outcome credit"
        else:
            where = (
                f"not told apart from GRPO ({gain_text(oracle)}), so this setting cannot show "
                "what better credit buys"
            )
        parts.append(f"Oracle credit, the reference, is {where}.")
    return " ".join(parts) or "Only GRPO ran in this setting."
