"""The board's numbers: one row per setting and method, from a :func:`collect_runs` table.

Per method of a setting (:mod:`leaderboard.stats` for the intervals, :mod:`leaderboard.gains`
for everything read against GRPO):

- the mean and IQM of its final accuracy and AUC over seeds, with bootstrap intervals;
- its gains over GRPO paired by seed: the AUC (``gain_auc``), the final accuracy
  (``gain_final``) and the online accuracy (``gain_online``: the mean reward of every plain
  batch the steps drew, each graded before its update, whatever a method then filtered or
  added), each with its bootstrap and t intervals, k of n
  seeds ahead, and whether the claim rule calls it ahead or behind;
- the equal-samples axis (:func:`.stats.with_samples_auc`): the mean of its AUC over the
  first ``samples_horizon`` trained responses (``samples_mean``), its gain over GRPO paired by
  seed (``gain_samples``) and its position (``samples_position``), each with its intervals as
  on the compute axis; NaN where the runs were not evaluated at counts of trained responses
  (not measured, never interpolated);
- its position on the GRPO(0) -> oracle(1) scale of the AUC (``position``, with its interval,
  or n/a and ``position_note`` saying why) and of the credit AUROC (``credit_position``);
- its rank (``rank``, ``rank_shared``; ``rank_missing`` says why a row has none) by the AUC
  gain, the one ranking every table, plot and sentence uses;
- the probability of improvement over GRPO (two or more seeds of each only);
- its cost beside GRPO's: FLOPs and wall time per step (``flops_per_step_ratio``: the mean
  over seeds of each run's FLOPs over its steps; ``wall_per_step_ratio``: the median over seeds
  of each run's median training step, evaluations left out, so that a run paused part-way on a
  shared machine moves it little, divided by the run's evaluation pace where every run records
  it, so that the load a run met divides out; records older than that median give their wall
  time less their evaluations over their steps), each over GRPO's;
- the credit diagnostics and the filler entropy drift, means with bootstrap intervals.

And per setting, method and budget fraction, the mean accuracy curve with its interval; and per
oracle run, what its uncharged value passes would cost and where a charged oracle would sit
(:func:`.oracle_price.charged_oracle`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .collect import SAMPLES_EVAL
from .gains import ONLINE_COLUMN, gain, paired_gaps, ranked, scale_position
from .oracle_price import charged_oracle
from .stats import (
    BASELINE,
    DIAGNOSTICS,
    GROUP,
    SAMPLES_AUC,
    accuracy_columns,
    bootstrap_interval,
    ordered_groups,
    probability_of_improvement,
    seed_values,
    with_samples_auc,
)


def _per_step(runs: pd.DataFrame, column: str) -> pd.Series:
    """Each run's ``column`` total over its steps (NaN where not recorded)."""
    if column not in runs or "steps" not in runs:
        return pd.Series(math.nan, index=runs.index)
    steps = runs["steps"].where(runs["steps"] > 0)
    return runs[column] / steps


def _step_seconds(runs: pd.DataFrame) -> pd.Series:
    """Each run's median training step; for records written before that was collected, its
    wall time less its evaluations over its steps (a mean, which a pause would move). Where
    every run of the group records its evaluations' pace, the step is over that pace: the runs
    of a campaign met different loads (GRPO's hard runs took a median 2.2 to 4.4 s a step),
    and a run's own evaluations (the same problems and samples in every run of a setting, their
    time taken as proportional to the samples' mean length, which is an approximation) met the
    same load. On the standard board GRPO's look-alikes (OTB, Dr. GRPO, TEMPO, KTAE, GSPO) come
    out at 0.98-1.01 this way, against 0.47-0.67 from the raw steps."""
    median = runs.get("step_seconds", pd.Series(math.nan, index=runs.index))
    if "wall_seconds" in runs and "eval_seconds" in runs:
        training = runs.assign(train_seconds=runs["wall_seconds"] - runs["eval_seconds"])
        median = median.fillna(_per_step(training, "train_seconds"))
    pace = runs.get("eval_token_seconds", pd.Series(math.nan, index=runs.index))
    if pace.notna().all() and (pace > 0).all():
        return median / pace
    return median


def _cost_ratios(group: pd.DataFrame, rows: dict[str, dict]) -> None:
    """FLOPs and wall seconds per step of each method over GRPO's (module doc), and how many of
    the setting's runs record no pace of their evaluations (``wall_unpaced_runs`` of
    ``wall_runs``): where any does, the wall ratio compares raw steps, whatever loads the runs
    met (a method's runs on a loaded machine beside committed records), and the page says so."""
    flops = _per_step(group, "flops_total").groupby(group["method"]).mean()
    wall = _step_seconds(group).groupby(group["method"]).median()
    pace = group.get("eval_token_seconds", pd.Series(math.nan, index=group.index))
    unpaced = int((~(pace > 0)).sum())
    for name, per_method in (("flops", flops), ("wall", wall)):
        base = per_method.get(BASELINE, math.nan)
        for method, row in rows.items():
            value = per_method.get(method, math.nan)
            ok = math.isfinite(value) and math.isfinite(base) and base > 0
            row[f"{name}_per_step_ratio"] = value / base if ok else math.nan
    for row in rows.values():
        row["wall_unpaced_runs"], row["wall_runs"] = unpaced, len(group)


def summarize(table: pd.DataFrame, *, reps: int = 2000, seed: int = 0) -> dict[str, pd.DataFrame]:
    """``{"methods": ..., "curves": ..., "oracle_price": ...}``: the rows of the module doc."""
    runs = table[table["kind"] == "run"]
    evals = table[table["kind"] == "eval"]
    samples = table[table["kind"] == SAMPLES_EVAL]
    method_rows: list[dict] = []
    curve_rows: list[dict] = []
    for key, group in ordered_groups(runs):
        metric, final_col, auc_col = accuracy_columns(group)
        group = with_samples_auc(group, samples)
        methods = sorted(group["method"].unique())
        rows: dict[str, dict] = {}
        for method in methods:
            row: dict = dict(zip(GROUP, key, strict=True), method=method, accuracy_metric=metric)
            row["n_seeds"] = int((group["method"] == method).sum())
            row["samples_horizon"] = float(group["samples_horizon"].iloc[0])
            means = (("final", final_col), ("auc", auc_col), ("samples", SAMPLES_AUC))
            for name, column in means:
                values = seed_values(group, method, column)
                for stat in ("mean", "iqm"):
                    iv = bootstrap_interval(values, stat, reps=reps, seed=seed)
                    row[f"{name}_{stat}"], row[f"{name}_{stat}_low"] = iv.point, iv.low
                    row[f"{name}_{stat}_high"] = iv.high
            if method != BASELINE and BASELINE in methods:
                gains = (("auc", auc_col), ("final", final_col), ("online", ONLINE_COLUMN),
                         ("samples", SAMPLES_AUC))  # fmt: skip
                for name, column in gains:
                    gaps = paired_gaps(group, method, column)
                    if len(gaps):
                        row |= gain(gaps.to_numpy(), reps=reps, seed=seed).columns(f"gain_{name}")
                base = seed_values(group, BASELINE, auc_col)
                if min(len(base), row["n_seeds"]) >= 2:  # one seed of either: no probability
                    values = seed_values(group, method, auc_col)
                    row["poi_auc"] = probability_of_improvement(values, base)
            for label, column in (
                ("position", auc_col),
                ("samples_position", SAMPLES_AUC),
                ("credit_position", "credit_auroc"),
            ):
                where, why = scale_position(group, method, column, reps=reps, seed=seed)
                row[label] = where.point if where is not None else math.nan
                row[f"{label}_low"] = where.low if where is not None else math.nan
                row[f"{label}_high"] = where.high if where is not None else math.nan
                row[f"{label}_note"] = why
            for column in DIAGNOSTICS:
                values = seed_values(group, method, column)
                if np.isfinite(values).any():
                    iv = bootstrap_interval(values, "mean", reps=reps, seed=seed)
                    row[column], row[f"{column}_low"], row[f"{column}_high"] = (
                        iv.point,
                        iv.low,
                        iv.high,
                    )
            rows[method] = row
        _cost_ratios(group, rows)
        frame = ranked(pd.DataFrame(list(rows.values())))
        method_rows.extend(frame.to_dict("records"))
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
    return {
        "methods": pd.DataFrame(method_rows),
        "curves": pd.DataFrame(curve_rows),
        "oracle_price": charged_oracle(table),
    }
