"""The oracle's price: what its value passes would cost if charged, and where a charged oracle
would sit on the board's two axes, read from the records without new runs.

The near-exact oracle reads each state's value off passes of the policy that the harness counts
and does not charge (``services.reference_passes()``): its runs train on GRPO's FLOP budget and
record the passes beside it (``reference_flops``, a run's total in ``runs.csv``). The board's
scale, GRPO 0 and the oracle 1, is therefore perfect credit at GRPO's *samples*, not at its
compute. Per oracle run:

- **price**: its reference FLOPs over its charged FLOPs. A run that paid for its passes from the
  same budget would spend ``1 + price`` times the FLOPs a step, so it would stop after
  ``reached = 1 / (1 + price)`` of the uncharged run's steps.
- **compute axis**: each of the run's evaluations placed where a charged run would have spent as
  much, at ``spent_fraction * (1 + price)`` of the budget, and read up to the budget's end (1)
  by the board's rule (:func:`~creditbench.harness.records.files.area_until`): the AUC is the
  uncharged curve's mean over its first ``reached`` share, the final accuracy the curve at 1.
  This assumes (a) that charging changes where a run stops and nothing it does before: the same
  steps in the same order, which holds on this harness, whose lr is constant and whose
  evaluations draw from a stream of their own; (b) that the passes cost the same share of every
  step: the run's ratio places every evaluation, where each evaluation's own count would place
  it exactly (the share drifts within a run); (c) the shape of the curve between evaluations,
  which a charged run would have measured at points the uncharged one never did. So two
  readings bound it: linear between evaluations, as the board reads every run
  (:func:`charged_reading`), and the most a concave curve through the evaluations allows
  (:func:`concave_ceiling`). A concave curve lies above its chords, so the linear reading is the
  least such a curve gives; where a charged run ends before the first evaluation after the
  start, its linear curve is a single chord and the two readings lie far apart.
- **samples axis**: unchanged. The passes train on no response and change no step, so at a
  count of trained responses a charged oracle is the uncharged one, as long as it reaches the
  count: it trains ``charged_responses`` before its budget ends (read on the same curve),
  which the sentence compares with the fewest any run of the setting trains, the count that
  bounds the axis's horizon already.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from creditbench.harness.records.files import area_until

from .gains import gain
from .stats import BASELINE, GROUP, ORACLE, accuracy_columns, ordered_groups
from .verdict import gain_text


def charged_fractions(spent: Sequence[float], price: float) -> list[float]:
    """Where a run's evaluations would fall had its uncharged passes been charged: each at the
    share of the budget it had spent (``spent``) times ``1 + price``."""
    return [float(x) * (1.0 + price) for x in spent]


def charged_reading(
    spent: Sequence[float], accuracy: Sequence[float], price: float
) -> tuple[float, float]:
    """``(AUC, final accuracy)`` of a run charged for passes that cost ``price`` times its charged
    FLOPs: its curve (evaluations at ``spent``, in order) placed at :func:`charged_fractions` and
    read up to the budget's end by the board's rule, linear between evaluations."""
    xs, ys = charged_fractions(spent, price), [float(y) for y in accuracy]
    return area_until(xs, ys, 1.0), float(np.interp(1.0, xs, ys))


Line = tuple[float, float]  # (slope, intercept)


def _line(p: tuple[float, float], q: tuple[float, float]) -> Line:
    (x0, y0), (x1, y1) = p, q
    slope = (y1 - y0) / (x1 - x0)
    return slope, y0 - slope * x0


def _at(line: Line, x: float) -> float:
    return line[0] * x + line[1]


def _ceiling_area(chord: Line, caps: list[Line], a: float, b: float) -> float:
    """Area over ``[a, b]`` under the lowest of ``caps``, never below ``chord``: a piecewise
    linear curve whose kinks lie where two of the lines cross, so the trapezoids between those
    crossings give it exactly."""
    lines = [chord, *caps]
    cuts = {a, b}
    for i, (s1, c1) in enumerate(lines):
        for s2, c2 in lines[i + 1 :]:
            if s1 != s2 and a < (x := (c2 - c1) / (s1 - s2)) < b:
                cuts.add(x)

    def height(x: float) -> float:
        return max(_at(chord, x), min(_at(cap, x) for cap in caps))

    xs = sorted(cuts)
    pieces = zip(xs, xs[1:], strict=False)
    return sum((x1 - x0) * (height(x0) + height(x1)) / 2 for x0, x1 in pieces)


def concave_ceiling(xs: Sequence[float], ys: Sequence[float], end: float = 1.0) -> float:
    """The most area up to ``end`` that a concave curve through the points ``(xs, ys)`` (in
    order, the last at or past ``end``) can have. Between two points a concave curve lies below
    the line through the two points before them, extended forward, and below the line through
    the two after them, extended back (slopes fall from left to right); it lies above the chord
    between them, which bounds it where noisy points are not concave. NaN where a segment
    before ``end`` has neither neighbour (a curve of two points)."""
    points = list(zip((float(x) for x in xs), (float(y) for y in ys), strict=True))
    area = 0.0
    for k in range(len(points) - 1):
        a, b = points[k][0], min(points[k + 1][0], end)
        if a >= end:
            break
        caps = [_line(points[k - 1], points[k])] if k >= 1 else []
        if k + 2 < len(points):
            caps.append(_line(points[k + 1], points[k + 2]))
        if not caps:
            return math.nan
        area += _ceiling_area(_line(points[k], points[k + 1]), caps, a, b)
    return area


def _fewest_responses(group: pd.DataFrame, evals: pd.DataFrame) -> float:
    """The fewest responses any run of ``group`` (run rows) trained by its last evaluation."""
    if "responses_trained" not in evals:
        return math.nan
    mine = evals[evals["run"].isin(group["run"])].sort_values("budget_fraction")
    last = mine.groupby("run")["responses_trained"].last()
    return float(last.min()) if len(last) else math.nan


def charged_oracle(table: pd.DataFrame) -> pd.DataFrame:
    """One row per setting and oracle run that records its uncharged passes: the setting
    (:data:`~.stats.GROUP`), ``seed``, ``charged_flops``, ``reference_flops``, ``price``,
    ``reached``, its AUC as run (``auc``), charged (``charged_auc`` linear, ``charged_ceiling``
    concave at most, ``charged_final``, ``charged_responses``, ``charged_evaluations``: the
    evaluations after the start a charged run would still reach), GRPO's AUC at the seed
    (``grpo_auc``, NaN without it) and ``fewest_responses``, the fewest trained by any run of
    the setting (module doc)."""
    runs = table[table["kind"] == "run"]
    evals = table[table["kind"] == "eval"]
    rows: list[dict] = []
    if "reference_flops" not in runs:
        return pd.DataFrame(rows)
    for key, group in ordered_groups(runs):
        metric, _, auc_col = accuracy_columns(group)
        grpo = group[group["method"] == BASELINE].set_index("seed")[auc_col]
        fewest = _fewest_responses(group, evals)
        for run in group[group["method"] == ORACLE].to_dict("records"):
            charged, reference = float(run["flops_total"]), float(run["reference_flops"])
            if not (math.isfinite(charged) and math.isfinite(reference) and charged > 0):
                continue
            points = evals[evals["run"] == run["run"]].sort_values("budget_fraction")
            price = reference / charged
            at = charged_fractions(points["spent_fraction"].to_numpy(dtype=float), price)
            accuracy = points[metric].to_numpy(dtype=float)
            auc, final = charged_reading(points["spent_fraction"], accuracy, price)
            trained = points["responses_trained"].to_numpy(dtype=float)
            rows.append(
                dict(zip(GROUP, key, strict=True))
                | {
                    "seed": run["seed"],
                    "charged_flops": charged,
                    "reference_flops": reference,
                    "price": price,
                    "reached": 1.0 / (1.0 + price),
                    "auc": float(run[auc_col]),
                    "charged_auc": auc,
                    "charged_ceiling": concave_ceiling(at, accuracy),
                    "charged_final": final,
                    "charged_responses": float(np.interp(1.0, at, trained)),
                    "charged_evaluations": sum(0 < x <= 1.0 for x in at),
                    "grpo_auc": float(grpo.get(run["seed"], math.nan)),
                    "fewest_responses": fewest,
                }
            )
    return pd.DataFrame(rows)


def _neighbours(frame: pd.DataFrame, value: float) -> str:
    """Where a mean AUC gain of ``value`` falls among the setting's rows (``frame``) besides GRPO
    and the oracle, by their mean gains."""
    others = frame[~frame["method"].isin([BASELINE, ORACLE])].dropna(subset=["gain_auc"])
    above = others[others["gain_auc"] >= value].sort_values("gain_auc")
    below = others[others["gain_auc"] < value].sort_values("gain_auc", ascending=False)
    if above.empty and below.empty:
        return ""
    if above.empty:
        return "above every method's"
    if below.empty:
        return "below every method's"
    high, low = above.iloc[0], below.iloc[0]
    return (
        f"between {high['method']}'s ({high['gain_auc']:+.3f}) and "
        f"{low['method']}'s ({low['gain_auc']:+.3f})"
    )


def _flops(value: float) -> str:
    """``1.8e13``."""
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _against_grpo(paired: pd.DataFrame, column: str, frame: pd.DataFrame) -> str:
    """A charged reading's gain over GRPO paired by seed, the claim rule's word, and where the
    oracle separates, its place on the GRPO (0) to oracle (1) scale."""
    gaps = (paired[column] - paired["grpo_auc"]).to_numpy()
    row = gain(gaps).columns("gain_auc")
    word = (
        "behind GRPO"
        if row["gain_auc_reversed"]
        else "ahead of GRPO"
        if row["gain_auc_separates"]
        else "not told apart from GRPO"
    )
    oracle = frame[frame["method"] == ORACLE]
    if len(oracle) and bool(oracle["gain_auc_separates"].fillna(False).iloc[0]):
        position = gaps.mean() / (paired["auc"] - paired["grpo_auc"]).mean()
        word += f", {position:+.2f} on the GRPO (0) to oracle (1) scale"
    return f"{gain_text(row)} against GRPO: {word}"


def price_sentence(charged: pd.DataFrame, frame: pd.DataFrame) -> str:
    """The board's line for the setting of ``frame`` (its rows of ``summarize()["methods"]``),
    read from ``charged`` (:func:`charged_oracle`'s rows, of any settings); empty where no oracle
    run of the setting records its uncharged passes."""
    if charged.empty:
        return ""
    setting = frame[GROUP].iloc[0]
    charged = charged[(charged[GROUP] == setting).all(axis=1)]
    if charged.empty:
        return ""
    price = charged["price"]
    spread = f" ({price.min():.1f} to {price.max():.1f} over its {len(charged)} seeds)"
    early = (
        ", before its first evaluation after the start, so that its curve is one line from the "
        "start to that evaluation"
        if charged["charged_evaluations"].max() == 0
        else ""
    )
    passes, budget = (
        _flops(charged["reference_flops"].mean()),
        _flops(charged["charged_flops"].mean()),
    )
    parts = [
        f"The oracle, charged for its value passes: they cost {price.mean():.1f} times its "
        f"charged FLOPs{spread if len(charged) > 1 else ''}, {passes} FLOPs a run against "
        f"{budget}, so a run of the same budget "
        f"would stop after {charged['reached'].mean():.0%} of its steps{early}."
    ]
    paired = charged.dropna(subset=["grpo_auc"])
    if not paired.empty:
        gaps = paired["charged_auc"] - paired["grpo_auc"]
        among = _neighbours(frame, float(gaps.mean()))
        parts.append(
            f"Its AUC would lie between {paired['charged_auc'].mean():.3f}, read linearly "
            f"between evaluations as the board reads every run "
            f"({_against_grpo(paired, 'charged_auc', frame)}"
            + (f"; its mean gain {among}" if among else "")
            + f"), and {paired['charged_ceiling'].mean():.3f}, the most a concave curve through "
            f"its evaluations allows ({_against_grpo(paired, 'charged_ceiling', frame)})."
        )
    responses, fewest = charged["charged_responses"].mean(), charged["fewest_responses"].iloc[0]
    reach = ""
    if math.isfinite(fewest):
        reach = (
            f", more than the {fewest:,.0f} of the setting's shortest run"
            if responses >= fewest
            else f", fewer than the {fewest:,.0f} of the setting's shortest run, which would cut "
            "the axis's horizon to it"
        )
    parts.append(
        "At equal samples it would not move: the passes train no response and change no step, "
        f"and a charged run would still train {responses:,.0f} responses{reach}."
    )
    return " ".join(parts)
