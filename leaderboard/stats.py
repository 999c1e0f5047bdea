"""Statistics over seeds, in the way of "Deep RL at the edge of the statistical precipice".

Agarwal et al., NeurIPS 2021 (arXiv 2108.13264): report aggregates with interval estimates, use
the interquartile mean (IQM, the mean of the middle 50% of runs) beside the mean, and the
probability of improvement rather than a difference of point estimates.

Per method and task (a *group* is one task, task options and setting; see
:mod:`leaderboard.collect`):

- **final accuracy**: the accuracy at the last evaluation; **AUC**: the area under the
  accuracy-versus-budget-fraction curve (trapezoid rule over the evaluation fractions, so a
  run that stays at accuracy a over the whole budget scores a). The accuracy is
  ``sampled_accuracy`` when every run of the group has it, ``greedy_accuracy`` otherwise.
- mean and IQM with **stratified bootstrap 95% confidence intervals** over seeds (percentile
  method, seeds resampled with replacement within each task, ``reps`` draws from a fixed seed).
  With one seed there is nothing to resample: the interval is reported as degenerate
  (``n = 1``), low = high = the single value.
- **probability of improvement** over GRPO, ``P(X > Y) + P(X = Y)/2`` for a random seed of each,
  with rliable's ``metrics.probability_of_improvement`` (the Mann-Whitney U statistic).
- **ranks** by IQM with a "not significantly different" rule: take the best remaining method;
  it and every remaining method whose IQM interval overlaps its interval share its rank
  (competition ranking: 1, 1, 3); remove them and repeat. A shared rank is printed ``=1``.
  Overlap of 95% intervals is a conservative test (it misses some real differences, it does
  not invent any); with degenerate intervals only exact ties share a rank.
- **positions between GRPO (0) and oracle credit (1)**: ``(x - x_grpo) / (x_oracle - x_grpo)``
  for the mean AUC over trained responses (*learning speed* at equal samples, up to the
  horizon every run of the setting reached; the AUC over budget fractions for runs without
  response counts) and the mean credit AUROC (*credit score*, see
  :mod:`harness.diagnostics.credit`); undefined (None, shown n/a) when either end is missing, when
  oracle credit is not ahead of GRPO (``x_oracle - x_grpo < 1e-6``) and, with two or more
  seeds of each, when it is not significantly ahead (the bootstrap 95% interval of the
  difference of means reaches 0): dividing by a gap that noise could erase gives positions of
  -20 or +8 that mean nothing.
- credit diagnostics and the filler entropy drift: the mean over seeds of each run's mean over
  its logged steps (the drift: last minus first logged filler entropy), with bootstrap CIs.
  The token gradient cancellation ratio (``cancel_ratio``, :mod:`harness.diagnostics.cancellation`)
  is averaged the same way.

rliable's ``metrics`` module supplies the IQM and the probability of improvement. Its
``library.get_interval_estimates`` is not used: it imports ``arch``, and arch 7.2 fails to
import under pandas 3; the bootstrap below is the same stratified percentile bootstrap, in numpy.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
from rliable import metrics as rly_metrics

BASELINE = "grpo"
ORACLE = "oracle"
GROUP = ["task", "options", "setting"]
POSITION_TOLERANCE = 1e-6
DIAGNOSTICS = (
    "credit_precision",
    "credit_auroc",
    "credit_chance",
    "filler_entropy_drift",
    "cancel_ratio",  # token gradient cancellation (harness.diagnostics.cancellation)
    "reset_hits_first_wrong",  # RRPO/SRPO: resets at the true first wrong step
)


@dataclass(frozen=True)
class Interval:
    """A point estimate with its 95% interval over ``n`` seeds."""

    point: float
    low: float
    high: float
    n: int

    @property
    def degenerate(self) -> bool:
        return self.n < 2

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high


def natural_key(text: str) -> tuple:
    """Sort key that orders ``steps=4`` before ``steps=12``."""
    return tuple(
        (0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text) if p
    )


def ordered_groups(frame: pd.DataFrame) -> list[tuple[tuple, pd.DataFrame]]:
    """``frame`` split by task, options and setting, in natural order."""
    groups = list(frame.groupby(GROUP, sort=False))
    return sorted(groups, key=lambda item: tuple(natural_key(str(k)) for k in item[0]))


def iqm(values) -> float:
    """Interquartile mean: the mean after cutting 25% of the values at each end."""
    return float(rly_metrics.aggregate_iqm(np.asarray(values, dtype=float).reshape(-1, 1)))


def _statistic(name: str, samples: np.ndarray) -> np.ndarray:
    """``samples`` [reps, n] -> [reps]."""
    if name == "mean":
        return samples.mean(axis=1)
    if name == "iqm":
        from scipy.stats import trim_mean

        return trim_mean(samples, proportiontocut=0.25, axis=1)
    raise ValueError(f"statistic: must be mean or iqm (got {name!r})")


def t_interval(values, *, confidence: float = 0.95) -> Interval:
    """Student's t interval of the mean of ``values`` (NaN dropped): mean ± t_{n-1} · s/√n,
    the parametric twin of :func:`bootstrap_interval` over seed pairs. Degenerate below 2."""
    from scipy.stats import t as student_t

    data = np.asarray(values, dtype=float)
    data = data[np.isfinite(data)]
    if len(data) == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    point = float(data.mean())
    if len(data) < 2:
        return Interval(point, point, point, len(data))
    half = float(student_t.ppf(0.5 + confidence / 2, len(data) - 1) * data.std(ddof=1))
    half /= math.sqrt(len(data))
    return Interval(point, point - half, point + half, len(data))


def bootstrap_interval(
    scores,
    statistic: str = "mean",
    *,
    reps: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> Interval:
    """Stratified bootstrap interval of ``statistic`` over ``scores`` [runs] or [runs, tasks].

    Runs are resampled with replacement within each task column; the statistic pools all
    resampled scores (as rliable's ``StratifiedBootstrap``). NaN scores are dropped (1-D only).
    """
    data = np.asarray(scores, dtype=float)
    if data.ndim == 1:
        data = data[np.isfinite(data)].reshape(-1, 1)
    n_runs, n_tasks = data.shape
    if n_runs == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    point = float(_statistic(statistic, data.reshape(1, -1))[0])
    if n_runs < 2:
        return Interval(point, point, point, n_runs)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n_runs, size=(reps, n_runs, n_tasks))
    resampled = data[picks, np.arange(n_tasks)].reshape(reps, -1)
    boot = _statistic(statistic, resampled)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(boot, [tail, 100 - tail])
    return Interval(point, float(low), float(high), n_runs)


def difference_interval(x, y, *, reps: int = 2000, seed: int = 0) -> Interval:
    """mean(x) - mean(y) with a bootstrap interval, x and y resampled independently."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    if len(x) == 0 or len(y) == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    point = float(x.mean() - y.mean())
    n = min(len(x), len(y))
    if n < 2:
        return Interval(point, point, point, n)
    rng = np.random.default_rng(seed)
    boot = x[rng.integers(0, len(x), (reps, len(x)))].mean(1) - y[
        rng.integers(0, len(y), (reps, len(y)))
    ].mean(1)
    low, high = np.percentile(boot, [2.5, 97.5])
    return Interval(point, float(low), float(high), n)


def probability_of_improvement(x, y) -> float:
    """P(X > Y) + P(X = Y) / 2 for one score of each (rliable's definition, one task)."""
    x = np.asarray(x, dtype=float).reshape(-1, 1)
    y = np.asarray(y, dtype=float).reshape(-1, 1)
    return float(rly_metrics.probability_of_improvement(x, y))


def position(x: float | None, x_grpo: float | None, x_oracle: float | None) -> float | None:
    """Where ``x`` lies between GRPO (0) and oracle credit (1); None when undefined.

    Undefined also when oracle credit is not ahead of GRPO (on short chains it can be behind):
    the scale would run backwards, and "0.5" would read as halfway to a bound that is below
    the baseline.
    """
    values = (x, x_grpo, x_oracle)
    if any(v is None or not math.isfinite(v) for v in values):
        return None
    span = x_oracle - x_grpo  # type: ignore[operator]
    if span < POSITION_TOLERANCE:
        return None
    return (x - x_grpo) / span  # type: ignore[operator]


def oracle_clearly_ahead(group: pd.DataFrame, column: str, *, reps: int, seed: int) -> bool:
    """False when, with two or more seeds of each, oracle credit's lead over GRPO in ``column``
    is not significant (its bootstrap 95% interval reaches 0); True otherwise, so that
    :func:`position` alone decides for single seeds and missing ends."""
    if column not in group:
        return True
    oracle = _seed_values(group, ORACLE, column)
    grpo = _seed_values(group, BASELINE, column)
    gap = difference_interval(oracle, grpo, reps=reps, seed=seed)
    return gap.n < 2 or gap.low > 0


def rank_groups(intervals: dict[str, Interval]) -> dict[str, tuple[int, bool]]:
    """``{method: (rank, shared)}`` by the rule in the module docstring (higher is better)."""
    remaining = sorted(
        (m for m, iv in intervals.items() if math.isfinite(iv.point)),
        key=lambda m: (-intervals[m].point, m),
    )
    ranks: dict[str, tuple[int, bool]] = {}
    rank = 1
    while remaining:
        best = intervals[remaining[0]]
        group = [m for m in remaining if intervals[m].overlaps(best)]
        for m in group:
            ranks[m] = (rank, len(group) > 1)
        rank += len(group)
        remaining = [m for m in remaining if m not in group]
    return ranks


def _accuracy_columns(runs: pd.DataFrame) -> tuple[str, str, str]:
    """(metric, final column, auc column) for one group's run rows."""
    for metric in ("sampled_accuracy", "greedy_accuracy"):
        final, auc = f"final_{metric}", f"auc_{metric}"
        if final in runs and runs[final].notna().all():
            return metric, final, auc
    return "greedy_accuracy", "final_greedy_accuracy", "auc_greedy_accuracy"


def _seed_values(runs: pd.DataFrame, method: str, column: str) -> np.ndarray:
    if column not in runs:
        return np.array([])
    return runs.loc[runs["method"] == method, column].to_numpy(dtype=float)


def auc_over_responses(xs: np.ndarray, ys: np.ndarray, horizon: float) -> float:
    """Mean accuracy over trained responses ``0..horizon``: the area under the curve through
    ``(xs, ys)`` (linear in between, cut at ``horizon``) divided by ``horizon``."""
    if horizon <= 0 or len(xs) < 2:
        return math.nan
    grid = np.union1d(xs[xs < horizon], [horizon])
    return float(np.trapezoid(np.interp(grid, xs, ys), grid) / horizon)


def responses_to_reach(xs: np.ndarray, ys: np.ndarray, threshold: float) -> float:
    """Trained responses at which the curve through ``(xs, ys)`` first reaches ``threshold``
    (linear in between); infinity when it never does."""
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if y >= threshold:
            if i == 0:
                return float(x)
            x0, y0 = xs[i - 1], ys[i - 1]
            return float(x0 + (threshold - y0) / (y - y0) * (x - x0))
    return math.inf


def response_curves(
    group: pd.DataFrame, evals: pd.DataFrame
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each run's ``(trained responses, accuracy)`` at its evaluations, by run, for the run rows
    ``group``; empty when any run lacks ``responses_trained`` or a finite accuracy there."""
    if "responses_trained" not in evals:
        return {}
    curves = {}
    for r in group.itertuples():
        points = evals[evals["run"] == r.run].sort_values("budget_fraction")
        metric = getattr(r, "accuracy_metric", "sampled_accuracy")
        if metric not in points or points.empty:
            return {}
        xs = points["responses_trained"].to_numpy(dtype=float)
        ys = points[metric].to_numpy(dtype=float)
        if not (np.isfinite(xs).all() and np.isfinite(ys).all()):
            return {}
        curves[r.run] = (xs, ys)
    return curves


def response_horizon(curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> float:
    """The trained responses every curve reached: the smallest last point."""
    return min(xs[-1] for xs, _ in curves.values())


def with_response_auc(group: pd.DataFrame, evals: pd.DataFrame) -> pd.DataFrame:
    """``group`` (run rows of one setting) with ``auc_responses``: each run's mean accuracy
    over trained responses up to the horizon every run of the setting reached, so that
    methods that train on fewer responses per FLOP (charged value rollouts) are compared at
    equal samples. NaN throughout when an evaluation lacks ``responses_trained``."""
    group = group.copy()
    curves = response_curves(group, evals)
    if not curves:
        group["auc_responses"] = math.nan
        return group
    horizon = response_horizon(curves)
    group["auc_responses"] = [auc_over_responses(*curves[run], horizon) for run in group["run"]]
    return group


def summarize(table: pd.DataFrame, *, reps: int = 2000, seed: int = 0) -> dict[str, pd.DataFrame]:
    """Per-method statistics of a :func:`collect_runs` table.

    Returns ``{"methods": ..., "curves": ...}``: one row per group and method (statistics
    above; columns ``<metric>_<stat>``, ``_low``, ``_high``), and one row per group, method and
    budget fraction (mean accuracy with its interval across seeds, and the mean number of
    responses the seeds had trained on by then).
    """
    runs = table[table["kind"] == "run"]
    evals = table[table["kind"] == "eval"]
    method_rows: list[dict] = []
    curve_rows: list[dict] = []
    for key, group in ordered_groups(runs):
        metric, final_col, auc_col = _accuracy_columns(group)
        group = with_response_auc(group, evals)
        methods = sorted(group["method"].unique())
        rows: dict[str, dict] = {}
        iqm_final: dict[str, Interval] = {}
        iqm_auc: dict[str, Interval] = {}
        for method in methods:
            row: dict = dict(zip(GROUP, key, strict=True), method=method, accuracy_metric=metric)
            row["n_seeds"] = int((group["method"] == method).sum())
            for name, column in (("final", final_col), ("auc", auc_col)):
                values = _seed_values(group, method, column)
                for stat in ("mean", "iqm"):
                    iv = bootstrap_interval(values, stat, reps=reps, seed=seed)
                    row[f"{name}_{stat}"], row[f"{name}_{stat}_low"] = iv.point, iv.low
                    row[f"{name}_{stat}_high"] = iv.high
                    if stat == "iqm":
                        (iqm_final if name == "final" else iqm_auc)[method] = iv
                if method != BASELINE and BASELINE in methods:
                    base = _seed_values(group, BASELINE, column)
                    row[f"poi_{name}"] = probability_of_improvement(values, base)
                    gain = difference_interval(values, base, reps=reps, seed=seed)
                    row[f"gain_{name}"], row[f"gain_{name}_low"] = gain.point, gain.low
                    row[f"gain_{name}_high"] = gain.high
            for column in (*DIAGNOSTICS, "auc_responses"):
                values = _seed_values(group, method, column)
                if np.isfinite(values).any():
                    iv = bootstrap_interval(values, "mean", reps=reps, seed=seed)
                    row[column], row[f"{column}_low"], row[f"{column}_high"] = (
                        iv.point,
                        iv.low,
                        iv.high,
                    )
            rows[method] = row
        for name, intervals in (("final", iqm_final), ("auc", iqm_auc)):
            for method, (rank, shared) in rank_groups(intervals).items():
                rows[method][f"rank_{name}"] = rank
                rows[method][f"rank_{name}_shared"] = shared
        # learning speed at equal trained responses, where every run has them; else per FLOP
        speed = "auc_responses" if np.isfinite(group["auc_responses"]).all() else None
        for column, seed_column, label in (
            ("auc_responses" if speed else "auc_mean", speed or auc_col, "speed_position"),
            ("credit_auroc", "credit_auroc", "credit_position"),
        ):
            ends = [rows[m].get(column) if m in rows else None for m in (BASELINE, ORACLE)]
            if not oracle_clearly_ahead(group, seed_column, reps=reps, seed=seed):
                ends = [None, None]
            for row in rows.values():
                row[label] = position(row.get(column), *ends)
        method_rows.extend(rows.values())
        mask = np.logical_and.reduce([evals[c] == v for c, v in zip(GROUP, key, strict=True)])
        for (method, fraction), points in evals[mask].groupby(["method", "budget_fraction"]):
            values = points[metric].to_numpy(dtype=float) if metric in points else np.array([])
            iv = bootstrap_interval(values, "mean", reps=reps, seed=seed)
            trained = points["responses_trained"] if "responses_trained" in points else None
            curve_rows.append(
                dict(
                    zip(GROUP, key, strict=True),
                    method=method,
                    budget_fraction=fraction,
                    responses=float(trained.mean()) if trained is not None else math.nan,
                    accuracy=iv.point,
                    low=iv.low,
                    high=iv.high,
                    n=iv.n,
                )
            )
    return {"methods": pd.DataFrame(method_rows), "curves": pd.DataFrame(curve_rows)}
