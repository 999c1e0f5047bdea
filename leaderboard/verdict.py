"""The verdict of a setting in one or two sentences, computed from its numbers.

The ranking statistic is the gain in AUC over GRPO (the area under accuracy against budget
fraction), paired by seed (:mod:`leaderboard.gains`). A method is *ahead* of GRPO when the
claim rule says so (its bootstrap and t 95% intervals both above zero, over at least 5 seeds),
*behind* when both lie below, and otherwise not told apart from it. Oracle credit, the
reference, is reported on its own: whether credit can matter in the setting at all.

Each setting's verdict ends with Holm's correction over the setting's rows against GRPO
(:func:`holm_sentence`): a board of 27 rows read at 5% each calls about one row apart from GRPO
by chance, so the sentence says which "ahead" and "behind" verdicts keep a family-wise error of
5%. It corrects the t test's p-values (:func:`t_test_p`, recovered from the t interval the row
already carries), not the bootstrap's: over 10 seed pairs the percentile bootstrap's interval is
the narrower of the two (it ignores the uncertainty of the spread), and its p-value, a share of
2,000 resamples, moves in steps of 0.0005 where Holm's smallest threshold is 0.05/27 = 0.0019.
The claim rule still asks both intervals; the correction only withdraws verdicts.
"""

from __future__ import annotations

import math

import pandas as pd

from .gains import MIN_PAIRS_FOR_A_CLAIM, ranked_without
from .stats import BASELINE, ORACLE

FAMILY_WISE_ERROR = 0.05  # Holm's family-wise error rate over a setting's rows


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
    holm = holm_sentence(frame)
    return " ".join([*parts, *([holm] if holm else [])]) or "Only GRPO ran in this setting."


def t_test_p(row, name: str = "gain_auc") -> float:
    """The two-sided p-value of the paired t test of the row's gain against 0, recovered from
    its 95% t interval (mean ± t_{n-1} · s/√n, :func:`.stats.t_interval`); NaN below 2 pairs."""
    from scipy.stats import t as student_t

    pairs, point = row.get(f"{name}_pairs"), row.get(name)
    low, high = row.get(f"{name}_t_low"), row.get(f"{name}_t_high")
    values = (pairs, point, low, high)
    if any(v is None or not math.isfinite(v) for v in values) or pairs < 2:
        return math.nan
    error = (high - low) / (2 * student_t.ppf(0.975, int(pairs) - 1))
    if error == 0:  # every pair the same gap
        return 0.0 if point != 0 else 1.0
    return float(2 * student_t.sf(abs(point) / error, int(pairs) - 1))


def holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values, ``{name: adjusted}``: a name survives at family-wise
    error ``alpha`` where its adjusted p-value is at most ``alpha``. Smallest first, the i-th
    p-value (from 0) of m is multiplied by ``m - i``, capped at 1, and never falls below the one
    before it, so that once one fails every larger one fails too. NaN p-values are left out of
    the family."""
    family = sorted((p, name) for name, p in p_values.items() if math.isfinite(p))
    adjusted, floor = {}, 0.0
    for i, (p, name) in enumerate(family):
        floor = max(floor, min(1.0, (len(family) - i) * p))
        adjusted[name] = floor
    return adjusted


def holm_sentence(frame: pd.DataFrame, name: str = "gain_auc") -> str:
    """Which of the setting's "ahead" and "behind" verdicts survive Holm's correction over its
    rows against GRPO (module doc); empty without such a verdict."""
    others = frame[frame["method"] != BASELINE]
    p_values = {str(r["method"]): t_test_p(r, name) for _, r in others.iterrows()}
    called = _flag(others, f"{name}_separates") | _flag(others, f"{name}_reversed")
    verdicts = [str(m) for m in others.loc[called, "method"]]
    return holm_text(p_values, verdicts, "rows against GRPO")


def holm_text(
    p_values: dict[str, float], verdicts: list[str], family: str, where: str = "above"
) -> str:
    """Which of ``verdicts`` (names of ``p_values`` whose verdict was called) survive Holm's
    correction over the family ``p_values`` (``family`` says what its members are, ``where``
    where the verdicts stand on the page); empty without such a verdict."""
    adjusted = holm(p_values)
    verdicts = [v for v in verdicts if v in adjusted]
    if not verdicts:
        return ""
    fall = [m for m in verdicts if adjusted[m] > FAMILY_WISE_ERROR]
    head = (
        f"Holm's correction over the {len(adjusted)} {family} (the paired t test's "
        f"p-values, family-wise error {FAMILY_WISE_ERROR:.0%}): "
    )
    kept = [m for m in verdicts if m not in fall]
    # the survivor nearest the line, so that a reader sees the margin
    nearest = max(kept, key=lambda m: adjusted[m], default=None)
    closest = f" (the nearest: {nearest}, adjusted {adjusted[nearest]:.4f})" if nearest else ""
    if not fall:
        if len(verdicts) == 1:
            return head + f"the one verdict {where} survives{closest}."
        return head + f"all {len(verdicts)} verdicts {where} survive{closest}."
    named = ", ".join(f"{m} (p {p_values[m]:.4f}, adjusted {adjusted[m]:.3f})" for m in fall)
    if len(verdicts) == 1:
        return head + f"the one verdict {where} does not survive: {named}."
    survive = "survives" if len(kept) == 1 else "survive"
    return (
        head + f"{len(kept)} of the {len(verdicts)} verdicts {where} {survive}{closest}; these do "
        f"not: {named}."
    )
