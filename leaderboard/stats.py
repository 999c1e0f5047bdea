"""Statistics over seeds, in the way of "Deep RL at the edge of the statistical precipice".

Agarwal et al., NeurIPS 2021 (arXiv 2108.13264): report aggregates with interval estimates, use
the interquartile mean (IQM, the mean of the middle 50% of runs) beside the mean, and the
probability of improvement rather than a difference of point estimates.

Per method and task (a *group* is one task, task options and setting; see
:mod:`leaderboard.collect`):

- **final accuracy**: the accuracy at the last evaluation; **AUC**: the area under the
  accuracy-versus-budget-fraction curve over the budget [0, 1], each evaluation placed at the
  share of the budget spent when it happened, linear in between, the segment past 1 cut at 1
  (:func:`~creditbench.harness.records.files.budget_auc`), so a run that stays at accuracy a
  over the whole budget scores a. The accuracy is
  ``sampled_accuracy`` when every run of the group has it, ``greedy_accuracy`` otherwise.
- **AUC at equal samples** (:func:`with_samples_auc`): the mean accuracy over the first
  trained responses every measured run of a setting reached, from the evaluations at counts of
  trained responses (``budget.eval_responses``) alone; not measured where a run has none.
- mean and IQM with **stratified bootstrap 95% confidence intervals** over seeds (percentile
  method, seeds resampled with replacement within each task, ``reps`` draws from a fixed seed).
  With one seed there is nothing to resample: the interval is reported as degenerate
  (``n = 1``), low = high = the single value.
- **probability of improvement** over GRPO, ``P(X > Y) + P(X = Y)/2`` for a random seed of each,
  with rliable's ``metrics.probability_of_improvement`` (the Mann-Whitney U statistic).
- gains over GRPO paired by seed, the claim rule, positions on the GRPO(0) -> oracle(1)
  scale and the ranking: :mod:`leaderboard.gains`; the board's per-method table:
  :mod:`leaderboard.board`.
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

from creditbench.harness.records.files import area_until

BASELINE = "grpo"
ORACLE = "oracle"
SAMPLES_AUC = "auc_samples"  # a run's AUC on the equal-samples axis (with_samples_auc)
GROUP = ["task", "options", "setting"]
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


def stratified_interval(
    strata, statistic: str = "iqm", *, reps: int = 2000, seed: int = 0, confidence: float = 0.95
) -> Interval:
    """:func:`bootstrap_interval` over strata of unequal sizes: ``strata`` is a list of 1-D score
    arrays (one a world and setting), each resampled with replacement within itself; the
    statistic pools every resampled score (rliable's stratified bootstrap, strata ragged). NaN
    scores are dropped; ``n`` counts the scores."""
    groups = [np.asarray(s, dtype=float) for s in strata]
    groups = [g[np.isfinite(g)] for g in groups]
    groups = [g for g in groups if len(g)]
    if not groups:
        return Interval(math.nan, math.nan, math.nan, 0)
    pooled = np.concatenate(groups)
    point = float(_statistic(statistic, pooled.reshape(1, -1))[0])
    if len(pooled) < 2:
        return Interval(point, point, point, len(pooled))
    rng = np.random.default_rng(seed)
    resampled = np.concatenate([g[rng.integers(0, len(g), size=(reps, len(g)))] for g in groups], 1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(_statistic(statistic, resampled), [tail, 100 - tail])
    return Interval(point, float(low), float(high), len(pooled))


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


def accuracy_columns(runs: pd.DataFrame) -> tuple[str, str, str]:
    """(metric, final column, auc column) for one group's run rows."""
    for metric in ("sampled_accuracy", "greedy_accuracy"):
        final, auc = f"final_{metric}", f"auc_{metric}"
        if final in runs and runs[final].notna().all():
            return metric, final, auc
    return "greedy_accuracy", "final_greedy_accuracy", "auc_greedy_accuracy"


def seed_values(runs: pd.DataFrame, method: str, column: str) -> np.ndarray:
    if column not in runs:
        return np.array([])
    return runs.loc[runs["method"] == method, column].to_numpy(dtype=float)


def auc_over_responses(xs, ys, horizon: float) -> float:
    """Mean accuracy over trained responses ``0..horizon``: the area under the curve through
    ``(xs, ys)`` (linear in between, cut at ``horizon``: the rule of the compute axis's AUC,
    :func:`~creditbench.harness.records.files.area_until`) divided by ``horizon``."""
    if horizon <= 0 or len(xs) < 2:
        return math.nan
    return area_until([float(x) for x in xs], [float(y) for y in ys], horizon) / horizon


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


def with_samples_auc(group: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """``group`` (run rows of one setting) with the equal-samples axis: ``auc_samples``, each
    run's mean accuracy over its first ``samples_horizon`` trained responses, read from its
    evaluations at counts of trained responses only (``samples``: the table's
    ``eval_responses`` rows), never interpolated from the budget's.

    The horizon is the largest count at which every measured run of the setting was evaluated;
    a run's curve starts at its start evaluation (0 responses) and passes through its
    evaluations at the counts every measured run shares, each where it happened (the responses
    trained by the step that reached the count), and its area is taken up to the horizon by the
    compute axis's rule. A run without such evaluations (or without a start evaluation) is not
    measured: NaN, as is everything when no count is shared."""
    group = group.assign(**{SAMPLES_AUC: math.nan, "samples_horizon": math.nan})
    curves = {}  # run -> (start accuracy, {count: (responses trained, accuracy)})
    for r in group.itertuples():
        points = samples[samples["run"] == r.run] if "run" in samples else samples
        metric = getattr(r, "accuracy_metric", "sampled_accuracy")
        start = float(getattr(r, "start_accuracy", math.nan))
        if points.empty or metric not in points or not math.isfinite(start):
            continue
        marks = points["responses_mark"].astype(int)
        xs, ys = points["responses_trained"].astype(float), points[metric].astype(float)
        if np.isfinite(xs).all() and np.isfinite(ys).all():
            curves[r.run] = (start, dict(zip(marks, zip(xs, ys, strict=True), strict=True)))
    shared = set.intersection(*(set(points) for _, points in curves.values())) if curves else set()
    if not shared:
        return group
    horizon = max(shared)
    for run, (start, points) in curves.items():
        at = [points[mark] for mark in sorted(shared)]
        xs, ys = [0.0, *(x for x, _ in at)], [start, *(y for _, y in at)]
        group.loc[group["run"] == run, SAMPLES_AUC] = auc_over_responses(xs, ys, horizon)
    group["samples_horizon"] = float(horizon)
    return group
