"""Gains over GRPO paired by seed, the claim rule, the GRPO(0) -> oracle(1) scale, the ranking.

Seed ``s`` of every method starts from the same base policy, draws the same first prompts and
is evaluated on the same problems, so a method's gain over GRPO is read seed by seed: the gaps
``x_method(s) - x_grpo(s)`` over the seeds both finished. The leaderboard, the validation
report and their prose all read gains, claims, positions and ranks from here:

- **gain**: the mean gap, with the 95% percentile bootstrap interval of the mean over the seed
  pairs (resampled with replacement) and the 95% Student t interval, and k of n: the pairs in
  which the method is ahead, with the two-sided exact sign test's p-value (tied pairs left
  out).
- **claim rule**: a method is *ahead* of GRPO where both intervals lie above 0 over at least
  :data:`MIN_PAIRS_FOR_A_CLAIM` pairs, *behind* where both lie below, and otherwise not told
  apart (``docs/testbed.md``, "The frozen protocol").
- **position** on the GRPO(0) -> oracle(1) scale: the ratio of the paired mean gains,
  ``mean gap_method / mean gap_oracle`` over the seeds GRPO, the method and the oracle share,
  with a bootstrap interval (the seeds resampled together, the ratio of the resampled means).
  Shown only where the oracle is ahead of GRPO by the claim rule: dividing by a gap noise could
  erase gives positions of -20 or +8 that mean nothing. Elsewhere it is n/a, with the reason.
- **rank**: 1 + the number of rows whose AUC gain is *beyond* the row's: every one of its two
  95% intervals lies above every one of the row's (GRPO's gain is the point 0), the claim rule
  read between any two rows. Where every row has at least five seed pairs, GRPO's rank is
  therefore 1 + the methods ahead of it by the claim rule, and a method not told apart from
  GRPO never ranks below it. The five-pair minimum of a claim is not applied: a rank orders
  rows, and with fewer pairs the t interval is wide; with one seed a row has no interval and
  its point stands for it, so only ties (to 1e-6) share a rank. Rows of one rank share it
  (``=2``); ranks need not be consecutive (1, 1, 2: the third row has one row beyond it, the
  second none). Rows are listed by rank, then by point estimate: a method with a wide interval
  can share the leader's rank while one with a higher point but a narrow interval below the
  leader's does not. On a board where some method has at least five pairs, a row with fewer
  (a method whose seeds are still running, a newcomer's first seeds) is not ranked: it is
  listed after the ranked rows, by point estimate, its rank ``n/a (n<5)``, since its wide t
  interval would leave no row beyond it and put it first. A board of few seeds throughout
  (the quick suite's one) ranks every row as above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import binomtest

from .stats import BASELINE, ORACLE, Interval, bootstrap_interval, t_interval

# Fewest seed pairs whose intervals may claim a gain (ours): a percentile bootstrap over n pairs
# of one sign excludes 0 whatever n, and under a null symmetric about 0 all n gaps share one
# given sign with probability 2^-n; 5 pairs make that 3%, within the interval's 5%.
MIN_PAIRS_FOR_A_CLAIM = 5
# The gains every board reports: name -> the run column it is the gain of (the accuracy
# columns are resolved per setting: sampled accuracy where every run has it).
ONLINE_COLUMN = "reward_mean"


@dataclass(frozen=True)
class Gain:
    """A mean paired gap with its bootstrap and t 95% intervals and k of n pairs ahead."""

    point: float
    low: float
    high: float
    t_low: float
    t_high: float
    ahead: int
    pairs: int
    behind: int = 0

    @property
    def sign_p(self) -> float:
        """The two-sided exact sign test's p-value of ``ahead`` against ``behind`` (tied pairs
        left out); 1.0 with no untied pair."""
        untied = self.ahead + self.behind
        if untied == 0:
            return 1.0
        return float(binomtest(self.ahead, untied, 0.5, alternative="two-sided").pvalue)

    @property
    def separates(self) -> bool:
        """Ahead of GRPO by the claim rule."""
        return self.pairs >= MIN_PAIRS_FOR_A_CLAIM and self.low > 0 and self.t_low > 0

    @property
    def reversed(self) -> bool:
        """Behind GRPO by the claim rule."""
        return self.pairs >= MIN_PAIRS_FOR_A_CLAIM and self.high < 0 and self.t_high < 0

    def columns(self, name: str) -> dict[str, float | int | bool]:
        """``{name: point, name_low, name_high, name_t_low, name_t_high, name_ahead,
        name_pairs, name_sign_p, name_separates, name_reversed}``."""
        return {
            name: self.point,
            f"{name}_low": self.low,
            f"{name}_high": self.high,
            f"{name}_t_low": self.t_low,
            f"{name}_t_high": self.t_high,
            f"{name}_ahead": self.ahead,
            f"{name}_pairs": self.pairs,
            f"{name}_sign_p": self.sign_p,
            f"{name}_separates": self.separates,
            f"{name}_reversed": self.reversed,
        }


def paired_gaps(
    runs: pd.DataFrame, method: str, column: str, baseline: str = BASELINE
) -> pd.Series:
    """``method - baseline`` of ``column``, indexed by the seeds both finished (NaN dropped)."""
    if column not in runs:
        return pd.Series(dtype=float)
    by_seed = runs.pivot_table(index="seed", columns="method", values=column, aggfunc="first")
    if method not in by_seed or baseline not in by_seed:
        return pd.Series(dtype=float)
    return (by_seed[method] - by_seed[baseline]).dropna().astype(float)


def gain(gaps, *, reps: int = 2000, seed: int = 0) -> Gain:
    """The :class:`Gain` of paired gaps (one per seed)."""
    values = np.asarray(gaps, dtype=float)
    values = values[np.isfinite(values)]
    boot: Interval = bootstrap_interval(values, reps=reps, seed=seed)
    student = t_interval(values)
    ahead, behind = int((values > 0).sum()), int((values < 0).sum())
    return Gain(boot.point, boot.low, boot.high, student.low, student.high, ahead, boot.n, behind)


def scale_position(
    runs: pd.DataFrame, method: str, column: str, *, reps: int = 2000, seed: int = 0
) -> tuple[Interval | None, str]:
    """``(position with its bootstrap interval, "")`` of ``method`` on the GRPO(0) ->
    oracle(1) scale of ``column``, or ``(None, why not)`` (module doc)."""
    if method == BASELINE:
        return Interval(0.0, 0.0, 0.0, 0), ""
    oracle = paired_gaps(runs, ORACLE, column)
    if oracle.empty:
        return None, "no oracle runs paired with GRPO's"
    reference = gain(oracle.to_numpy(), reps=reps, seed=seed)
    if reference.pairs < MIN_PAIRS_FOR_A_CLAIM:
        return None, f"fewer than {MIN_PAIRS_FOR_A_CLAIM} seed pairs"
    if not reference.separates:
        return None, "the oracle is not ahead of GRPO beyond noise"
    mine = paired_gaps(runs, method, column)
    seeds = mine.index.intersection(oracle.index)
    if len(seeds) < MIN_PAIRS_FOR_A_CLAIM:
        return None, f"fewer than {MIN_PAIRS_FOR_A_CLAIM} seeds shared with the oracle"
    numerator = mine.loc[seeds].to_numpy()
    denominator = oracle.loc[seeds].to_numpy()
    point = float(numerator.mean() / denominator.mean())
    picks = np.random.default_rng(seed).integers(0, len(seeds), size=(reps, len(seeds)))
    below = denominator[picks].mean(axis=1)
    ratios = numerator[picks].mean(axis=1) / np.where(below == 0, np.nan, below)
    low, high = np.nanpercentile(ratios, [2.5, 97.5])
    return Interval(point, float(low), float(high), len(seeds)), ""


def ranked(frame: pd.DataFrame, column: str = "gain_auc") -> pd.DataFrame:
    """The methods of one setting, best first, with ``rank`` and ``rank_shared`` (module doc);
    GRPO's gain is 0, a method without a gain comes last, unranked."""

    def span(i) -> tuple[float, float, float]:
        """(point, low, high) of row ``i``'s gain: the lowest and highest bound of its two
        intervals; the point where it has none (one seed)."""
        if frame.at[i, "method"] == BASELINE:
            return 0.0, 0.0, 0.0
        point = float(frame.at[i, column]) if column in frame else math.nan
        bounds = [point] + [
            float(frame.at[i, name])
            for name in (f"{column}_low", f"{column}_high", f"{column}_t_low", f"{column}_t_high")
            if name in frame and math.isfinite(float(frame.at[i, name]))
        ]
        return point, min(bounds), max(bounds)

    def pairs(i) -> int:
        """Row ``i``'s seed pairs with GRPO (GRPO's own: its seeds)."""
        name = f"{column}_pairs"
        value = frame.at[i, name] if name in frame and frame.at[i, "method"] != BASELINE else None
        if value is None or not math.isfinite(float(value)):
            value = frame.at[i, "n_seeds"] if "n_seeds" in frame else 1
        return int(value)

    # rounded to 1e-6: accuracies are recorded in float32 by some runs and exactly by others
    # (about 1e-8 apart), and a board shows three decimals; gains equal to 1e-6 are a tie
    spans = {i: tuple(round(x, 6) for x in span(i)) for i in frame.index}
    known = [i for i in frame.index if math.isfinite(spans[i][0])]
    # on a board where some method has the pairs of a claim, a row with fewer is not ranked:
    # its wide interval would leave no row beyond it and rank it first (module doc)
    claimable = [i for i in known if pairs(i) >= MIN_PAIRS_FOR_A_CLAIM]
    if any(frame.at[i, "method"] != BASELINE for i in claimable):
        few = [i for i in known if i not in claimable]
        few.sort(key=lambda i: (-spans[i][0], frame.at[i, "method"]))
        known = claimable
    else:
        few = []
    out = frame.copy()
    out["rank"], out["rank_shared"] = math.nan, False
    out["rank_missing"] = ""
    for i in known:
        out.at[i, "rank"] = 1 + sum(spans[j][1] > spans[i][2] for j in known)
    for i in known:
        out.at[i, "rank_shared"] = int((out.loc[known, "rank"] == out.at[i, "rank"]).sum()) > 1
    for i in few:
        out.at[i, "rank_missing"] = f"n<{MIN_PAIRS_FOR_A_CLAIM}"
    order = sorted(known, key=lambda i: (out.at[i, "rank"], -spans[i][0], frame.at[i, "method"]))
    rest = [i for i in frame.index if i not in known and i not in few]
    return out.loc[order + few + rest]


def ranked_without(frame: pd.DataFrame, leave_out, column: str = "gain_auc") -> pd.DataFrame:
    """:func:`ranked` over the whole board, then without the methods ``leave_out``: a list of
    some rows (the forest without GRPO, the verdict without the references) keeps the board's
    ranks and order, which ranking the rows alone could change (GRPO and the oracle count among
    the rows beyond others)."""
    out = ranked(frame, column)
    return out[~out["method"].isin(list(leave_out))]
