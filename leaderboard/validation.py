"""Does credit assignment matter on the testbed? Oracle credit against GRPO, setting by setting.

The ``validation`` suite trains GRPO and the oracle-credit reference (the step ground truth) on
the same base policy, seed for seed, at equal FLOPs, over several chain lengths and batch sizes.
:func:`validation_table` turns its runs into one row per setting (task options and swept config
fields):

- the oracle - GRPO difference of the final sampled accuracy and of the area under the
  accuracy-versus-budget curve, with a paired 95% bootstrap interval over seeds (seed ``s`` of
  both methods starts from the same base policy and draws the same first prompts, so the
  difference of a pair removes the variation they share), and whether the interval lies above 0
  (oracle credit ahead beyond noise) or below it (GRPO ahead beyond noise);
- per method, the drift of entropy on the filler tokens (last training step minus first): the
  spurious updates uniform credit makes on tokens that never affect the reward;
- per method, the credit precision (share of negative credit on the first wrong step) and its
  chance level;
- the online accuracy: the mean reward of every plain batch the run's steps drew
  (``Services.sample_batch``, before a method filters or extends it). Each batch is
  drawn from problems the policy has not trained on and graded before its update, so it is
  the current policy's accuracy on fresh problems, read off every trained response instead of
  the few hundred samples of an evaluation (the AUC over trained responses of the training
  stream); its paired gap has the same interval;
- GRPO's own gain (its final minus the start accuracy) and the share of all-fail groups in
  its batches: whether the setting is a regime where GRPO learns and outcome credit lacks
  signal.

Every figure of a row is over the seeds both methods finished.

:func:`validation_markdown` renders the table with a verdict: whether any setting separates the
methods, and whether the gap grows with chain length at the batch size the lengths share.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from .collect import collect_runs, refuse_no_runs
from .gains import MIN_PAIRS_FOR_A_CLAIM, gain, paired_gaps
from .records import spreadsheet_safe
from .saturation import seed_interval
from .stats import (
    auc_over_responses,
    bootstrap_interval,
    natural_key,
    response_curves,
    response_horizon,
    responses_to_reach,
)

BASELINE, ORACLE = "grpo", "oracle"
# The frozen protocol's confirmatory seeds (docs/testbed.md, "The frozen protocol"): runs at
# these seeds form rows of their own, so the claim can be read on them alone.
CONFIRMATORY_SEEDS = range(10, 20)


def seed_set(seed: int) -> str:
    """``confirmatory`` for the protocol's confirmatory seeds, else ``exploratory``."""
    return "confirmatory" if seed in CONFIRMATORY_SEEDS else "exploratory"


def _mean(runs: pd.DataFrame, method: str, column: str) -> float:
    if column not in runs:
        return math.nan
    values = runs.loc[runs["method"] == method, column].dropna()
    return float(values.mean()) if len(values) else math.nan


def _efficiency(evals: pd.DataFrame, group: pd.DataFrame, row: dict) -> dict[str, np.ndarray]:
    """Per-seed efficiency figures of both methods, on the responses they trained on: the AUC
    up to the horizon every run of the setting reached, and the responses to reach halfway
    from the start to GRPO's final accuracy. Returns ``{figure_method: [per seed]}``."""
    curves = response_curves(group, evals)
    if not curves:
        return {}
    row["responses_horizon"] = horizon = response_horizon(curves)
    start, goal = row["start_acc"], row[f"final_{BASELINE}"]
    # halfway from the start to GRPO's final accuracy; undefined where GRPO did not improve
    threshold = start + 0.5 * (goal - start) if goal > start else math.nan
    row["threshold"] = threshold
    out: dict[str, np.ndarray] = {}
    for method in (BASELINE, ORACLE):
        runs = group[group["method"] == method].sort_values("seed")["run"]
        out[f"auc_responses_{method}"] = np.array(
            [auc_over_responses(*curves[run], horizon) for run in runs]
        )
        out[f"reach_{method}"] = np.array(
            [
                responses_to_reach(*curves[run], threshold)
                if math.isfinite(threshold)
                else math.nan
                for run in runs
            ]
        )
    return out


def _setting_name(group: pd.DataFrame) -> str:
    """The name the suite gave the setting: its runs' shared folder name without
    ``-<method>-s<seed>`` (``chain-hard-steps=8``); else its task options and the settings that
    differ."""
    names = set()
    for r in group.itertuples():
        folder = str(r.run).split("/")[-1]
        suffix = f"-{r.method}-s{r.seed}"
        names.add(folder[: -len(suffix)] if folder.endswith(suffix) else "")
    if len(names) == 1 and (name := names.pop()):
        return name
    return f"{group['options'].iloc[0]} {group['setting'].iloc[0]}"


def _saturation(evals: pd.DataFrame, group: pd.DataFrame, row: dict, reps: int) -> None:
    """Per method, the ScaleRL-form curve fitted to its seeds' evaluation points over budget
    fractions from the setting's start (:mod:`.saturation`), with intervals over seeds."""
    for method in (BASELINE, ORACLE):
        runs = group[group["method"] == method]
        curves = []
        for run, metric in zip(runs["run"], runs.get("accuracy_metric", []), strict=False):
            points = evals[evals["run"] == run]
            if metric in points:
                curves.append((points["budget_fraction"].to_numpy(), points[metric].to_numpy()))
        fit, asymptote, midpoint = seed_interval(curves, row["start_acc"], reps=reps)
        row[f"asymptote_{method}"], row[f"midpoint_{method}"] = fit.asymptote, fit.midpoint
        row[f"asymptote_{method}_low"], row[f"asymptote_{method}_high"] = asymptote
        row[f"midpoint_{method}_low"], row[f"midpoint_{method}_high"] = midpoint
        row[f"saturates_{method}"] = fit.identified


def validation_table(
    table: pd.DataFrame, *, reps: int = 2000, seed: int = 0, fit_reps: int = 200
) -> pd.DataFrame:
    """One row per (task options, setting) of a :func:`collect_runs` table; see the module doc."""
    runs = table[table["kind"] == "run"].copy()
    runs["seed_set"] = [seed_set(int(seed)) for seed in runs["seed"]]
    evals = table[table["kind"] == "eval"]
    rows = []
    keys = ["options", "setting", "seed_set"]
    for (options, setting, which), group in runs.groupby(keys, sort=False):
        row: dict = {"options": options, "setting": setting, "seed_set": which}
        seeds = [set(group.loc[group["method"] == m, "seed"]) for m in (BASELINE, ORACLE)]
        row["name"] = _setting_name(group)  # named before pairing: a cell of one method too
        row[f"runs_{BASELINE}"], row[f"runs_{ORACLE}"] = len(seeds[0]), len(seeds[1])
        group = group[group["seed"].isin(seeds[0] & seeds[1])]  # every figure over the pairs
        row["seeds"] = len(seeds[0] & seeds[1])
        if which == "confirmatory":
            row["name"] += " (confirmatory)"
        row["start_acc"] = _mean(group, BASELINE, "start_accuracy")
        for method in (BASELINE, ORACLE):
            row[f"auc_{method}"] = _mean(group, method, "auc")
            row[f"final_{method}"] = _mean(group, method, "final_accuracy")
            row[f"drift_{method}"] = _mean(group, method, "filler_entropy_drift")
            row[f"precision_{method}"] = _mean(group, method, "credit_precision")
        row["credit_chance"] = _mean(group, BASELINE, "credit_chance")
        row["grpo_gain"] = row[f"final_{BASELINE}"] - row["start_acc"]
        row["all_fail_grpo"] = _mean(group, BASELINE, "all_fail_frac")
        row["online_grpo"] = _mean(group, BASELINE, "reward_mean")
        row["online_oracle"] = _mean(group, ORACLE, "reward_mean")
        pairs = (("final_accuracy", "final"), ("auc", "auc"), ("reward_mean", "online"))
        for column, name in pairs:
            # the paired gain and the claim rule (leaderboard.gains), named as this table
            # names them: <name>_gap, _low, _high, _t_low, _t_high, _ahead, _pairs, ...
            found = gain(paired_gaps(group, ORACLE, column).to_numpy(), reps=reps, seed=seed)
            for key, value in found.columns(name).items():
                row[f"{name}_gap" if key == name else key] = value
        figures = _efficiency(evals, group, row) if row["seeds"] else {}
        if figures:
            gaps = figures[f"auc_responses_{ORACLE}"] - figures[f"auc_responses_{BASELINE}"]
            interval = bootstrap_interval(gaps[np.isfinite(gaps)], reps=reps, seed=seed)
            row["auc_responses_gap"] = interval.point
            row["auc_responses_low"], row["auc_responses_high"] = interval.low, interval.high
            for method in (BASELINE, ORACLE):
                row[f"reach_{method}"] = float(np.median(figures[f"reach_{method}"]))
        if row["seeds"] and len(evals):
            _saturation(evals, group, row, fit_reps)
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    order = sorted(
        range(len(out)),
        key=lambda i: natural_key(f"{out.setting[i]} {out.options[i]} {out.seed_set[i]}"),
    )
    return out.iloc[order].reset_index(drop=True)


CSV_COLUMNS = {  # validation.csv column: validation_table column
    "setting": None,
    "seed_set": "seed_set",
    "seeds": "seeds",
    "start_acc": "start_acc",
    "grpo_auc": "auc_grpo",
    "oracle_auc": "auc_oracle",
    "gain_auc": "auc_gap",
    "gain_auc_lo": "auc_low",
    "gain_auc_hi": "auc_high",
    "gain_auc_t_lo": "auc_t_low",
    "gain_auc_t_hi": "auc_t_high",
    "auc_seeds_ahead": "auc_ahead",
    "auc_sign_test_p": "auc_sign_p",
    "gain_final": "final_gap",
    "gain_final_lo": "final_low",
    "gain_final_hi": "final_high",
    "gain_final_t_lo": "final_t_low",
    "gain_final_t_hi": "final_t_high",
    "final_seeds_ahead": "final_ahead",
    "final_sign_test_p": "final_sign_p",
    "grpo_gain": "grpo_gain",
    "grpo_all_fail_share": "all_fail_grpo",
    "grpo_online": "online_grpo",
    "oracle_online": "online_oracle",
    "gain_online": "online_gap",
    "gain_online_lo": "online_low",
    "gain_online_hi": "online_high",
    "gain_online_t_lo": "online_t_low",
    "gain_online_t_hi": "online_t_high",
    "online_seeds_ahead": "online_ahead",
    "online_sign_test_p": "online_sign_p",
    "gain_auc_responses": "auc_responses_gap",
    "gain_auc_responses_lo": "auc_responses_low",
    "gain_auc_responses_hi": "auc_responses_high",
    "grpo_asymptote": "asymptote_grpo",
    "grpo_asymptote_lo": "asymptote_grpo_low",
    "grpo_asymptote_hi": "asymptote_grpo_high",
    "grpo_midpoint": "midpoint_grpo",
    "oracle_asymptote": "asymptote_oracle",
    "oracle_asymptote_lo": "asymptote_oracle_low",
    "oracle_asymptote_hi": "asymptote_oracle_high",
    "oracle_midpoint": "midpoint_oracle",
    "threshold": "threshold",
    "grpo_responses_to_threshold": "reach_grpo",
    "oracle_responses_to_threshold": "reach_oracle",
}


def validation_csv(rows: pd.DataFrame) -> str:
    """``validation.csv``: one row per setting, the columns of :data:`CSV_COLUMNS` (gains are
    oracle - GRPO with 95% paired bootstrap intervals; AUC over budget fractions, and over
    trained responses up to the horizon every run reached, and of the training stream (online);
    responses to reach halfway from the start to GRPO's final accuracy, medians over seeds;
    GRPO's gain over the start and its share of all-fail groups). A setting run by one method
    only is a row of 0 seeds without gains; the Markdown report names it under its table. A
    setting name that starts like a formula is written behind a ``'``, as in ``runs.csv``."""
    out = pd.DataFrame(index=rows.index)
    for column, source in CSV_COLUMNS.items():
        if source is None:
            out[column] = rows["name"]
        else:
            out[column] = rows[source] if source in rows else math.nan
    # a setting is named by its suite's label, free text: "=..." must not become a formula
    return spreadsheet_safe(out).to_csv(index=False, float_format="%.4f")


CHAIN_LENGTH = re.compile(r"(?:^|,)steps=(\d+)")  # the chain task's option in a run's options


def _chain_length(options: str) -> int | None:
    found = CHAIN_LENGTH.search(options)
    return int(found.group(1)) if found else None


def length_trend(rows: pd.DataFrame, column: str = "auc_gap") -> tuple[list[str], list[tuple]]:
    """The settings that differ only in chain length, the most lengths of them: their names and
    their ``(length, gap)`` pairs, by length. Settings whose other task options differ (slip
    rates) are not one series."""
    best: tuple[list[str], list[tuple[int, float]]] = ([], [])
    others = rows["options"].map(lambda options: CHAIN_LENGTH.sub("", options))
    by = [rows["setting"], others] + ([rows["seed_set"]] if "seed_set" in rows else [])
    for _, group in rows.groupby(by, sort=False):
        columns = zip(group["options"], group[column], group["name"], strict=True)
        series = sorted(
            (length, float(gap), name)
            for options, gap, name in columns
            if (length := _chain_length(options)) is not None and math.isfinite(gap)
        )
        if len(series) > len(best[1]):
            best = ([name for *_, name in series], [(length, gap) for length, gap, _ in series])
    return best


def _fmt(value: float, digits: int = 3) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:+.{digits}f}"


def _saturation_lines(rows: pd.DataFrame) -> list[str]:
    """The fitted saturating curves, one row per setting; an asymptote whose curve had not
    bent inside the budget is marked as extrapolated."""
    if "asymptote_grpo" not in rows:
        return []
    lines = [
        "Saturating fit (ScaleRL's form, arXiv 2510.13786: accuracy = start + (A - start) / "
        "(1 + (C_mid / C)^B) over the budget fraction C, pooled over seeds, 95% intervals over "
        "resampled seeds; `~`: the midpoint lies beyond the budget, so A is extrapolated):",
        "",
        "| setting | GRPO asymptote A | GRPO midpoint C_mid | oracle asymptote A "
        "| oracle midpoint C_mid |",
        "|---|---|---|---|---|",
    ]
    for r in rows.to_dict("records"):
        cells = []
        for method in (BASELINE, ORACLE):
            a, low, high = (
                r.get(f"asymptote_{method}{k}", math.nan) for k in ("", "_low", "_high")
            )
            mark = "" if r.get(f"saturates_{method}") else "~"
            cells.append(f"{mark}{_level(a)} [{_level(low)}, {_level(high)}]")
            mid = r.get(f"midpoint_{method}", math.nan)
            low, high = r.get(f"midpoint_{method}_low"), r.get(f"midpoint_{method}_high")
            cells.append(f"{_level(mid, 2)} [{_level(low, 2)}, {_level(high, 2)}]")
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _level(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _share(value: float) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.2f}"


def validation_report(
    results_dir: str | Path, *, reps: int = 2000, refuse_empty: bool = False
) -> tuple[str, str]:
    """``(validation.md, validation.csv)`` of a results directory. With ``refuse_empty``, one
    that holds no finished run is a ``RunFormatError``, as the leaderboard refuses it (the
    command line's ``validate``), not a report of nothing."""
    table, warnings = collect_runs(results_dir)
    if refuse_empty:
        refuse_no_runs(table, warnings, [results_dir])
    rows = validation_table(table, reps=reps)
    return _markdown(rows, warnings), validation_csv(rows) if not rows.empty else ""


def validation_markdown(results_dir: str | Path, *, reps: int = 2000) -> str:
    """The validation report of a results directory, as markdown."""
    return validation_report(results_dir, reps=reps)[0]


def _unpaired_line(rows: pd.DataFrame) -> list[str]:
    """The settings whose runs are of one method only (or at other seeds): nothing to pair."""
    if rows.empty:
        return []
    cells = ", ".join(
        f"{r['name']} ({BASELINE} {int(r[f'runs_{BASELINE}'])} seeds, "
        f"{ORACLE} {int(r[f'runs_{ORACLE}'])})"
        for _, r in rows.iterrows()
    )
    return ["", f"Settings with no seed run by both methods, so nothing to compare: {cells}."]


def _markdown(rows: pd.DataFrame, warnings: list[str]) -> str:
    lines = ["# Validation: oracle credit against GRPO at equal FLOPs", ""]
    skipped = ["", "Skipped runs:", *[f"- {w}" for w in warnings]] if warnings else []
    if rows.empty:
        text = "No finished runs of grpo and oracle were found."
        return "\n".join([*lines, text, *skipped, ""])
    unpaired = _unpaired_line(rows[rows["seeds"] == 0])
    rows = rows[rows["seeds"] > 0].reset_index(drop=True)
    if rows.empty:
        text = "No setting has finished runs of grpo and oracle at the same seed."
        return "\n".join([*lines, text, *unpaired, *skipped, ""])
    lines += [
        "Gap = oracle - GRPO (paired by seed), 95% bootstrap interval in brackets, the 95% "
        "t interval after t, and k/n: the seeds (of n pairs) at which the oracle is ahead; "
        "final = sampled accuracy at the end of the budget, AUC = area under the "
        "accuracy-versus-budget curve; equal responses = the AUC over trained responses up to "
        "the horizon every run reached; online = the mean reward of the training batches (the "
        "policy's accuracy on fresh problems, each batch graded before its update); GRPO gain "
        "= its final minus the start accuracy; all-fail = the share of GRPO's groups with no "
        "correct response; drift = filler entropy at the last training step minus "
        "the first (nats); precision = share of negative credit on the first wrong step "
        "(chance level beside it).",
        "",
        "| setting | seeds | start | final GRPO | final oracle | final gap | AUC gap "
        "| AUC gap, equal responses | online gap | GRPO gain | all-fail "
        "| drift GRPO | drift oracle | precision GRPO / oracle / chance |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    mark = lambda ahead, behind: " *" if ahead else (" †" if behind else "")  # noqa: E731

    def gap(r, name: str) -> str:  # the gain, its bootstrap and t intervals, k of n ahead
        get = lambda key: getattr(r, f"{name}_{key}")  # noqa: E731
        return (
            f"{_fmt(get('gap'))} [{_fmt(get('low'))}, {_fmt(get('high'))}] "
            f"t [{_fmt(get('t_low'))}, {_fmt(get('t_high'))}], {get('ahead')}/{get('pairs')}"
        )

    for r in rows.itertuples():
        final_gap, auc_gap = gap(r, "final"), gap(r, "auc")
        per_response = "n/a"
        if "auc_responses_gap" in rows and math.isfinite(r.auc_responses_gap):
            low, high = _fmt(r.auc_responses_low), _fmt(r.auc_responses_high)
            per_response = f"{_fmt(r.auc_responses_gap)} [{low}, {high}]"
        online = gap(r, "online")
        online += mark(r.online_separates, r.online_reversed)
        lines.append(
            f"| {r.name} | {r.final_pairs} | {_fmt(r.start_acc).lstrip('+')} "
            f"| {r.final_grpo:.3f} | {r.final_oracle:.3f} "
            f"| {final_gap}{mark(r.final_separates, r.final_reversed)} "
            f"| {auc_gap}{mark(r.auc_separates, r.auc_reversed)} | {per_response} "
            f"| {online} | {_fmt(r.grpo_gain)} | {_share(r.all_fail_grpo)} "
            f"| {_fmt(r.drift_grpo)} | {_fmt(r.drift_oracle)} "
            f"| {r.precision_grpo:.3f} / {r.precision_oracle:.3f} / {r.credit_chance:.3f} |"
        )
    lines += [
        "",
        "`*`: both intervals lie above zero (oracle credit ahead); `†`: both below zero (GRPO "
        f"ahead); neither with fewer than {MIN_PAIRS_FOR_A_CLAIM} seeds.",
        *unpaired,
        "",
        *_saturation_lines(rows),
    ]
    separating = rows[rows["final_separates"] | rows["auc_separates"]]
    if len(separating):
        where = ", ".join(separating["name"])
        lines.append(f"**Separates:** oracle credit is ahead of GRPO beyond noise at: {where}.")
    else:
        lines.append(
            "**Does not separate:** in no setting does the interval lie above zero (oracle "
            "credit ahead), for the final accuracy or the AUC."
        )
    reversed_ = rows[rows["final_reversed"] | rows["auc_reversed"]]
    if len(reversed_):
        where = ", ".join(reversed_["name"])
        lines.append(f"**Reversed:** GRPO is ahead of oracle credit beyond noise at: {where}.")
    online = rows[rows["online_separates"] & ~(rows["final_separates"] | rows["auc_separates"])]
    if len(online):
        lines.append(
            "**Online only:** on the training stream, oracle credit is ahead beyond noise where "
            f"the evaluation cannot tell: {', '.join(online['name'])}."
        )
    names, trend = length_trend(rows)
    if len(trend) >= 2:
        gaps = [gap for _, gap in trend]
        grows = all(b > a for a, b in zip(gaps, gaps[1:], strict=False))
        # growth is claimed only where each longer setting's interval lies above the shorter's
        by_name = rows.set_index("name")
        lows, highs = by_name.loc[names, "auc_low"], by_name.loc[names, "auc_high"]
        apart = all(low > high for low, high in zip(lows[1:], highs[:-1], strict=True))
        shown = ", ".join(f"{length} steps {gap:+.3f}" for length, gap in trend)
        verdict = (
            "grows with length beyond noise"
            if grows and apart
            else "is larger at greater length, but within noise (the intervals overlap)"
            if grows
            else "does not grow monotonically with length"
        )
        where = ", ".join(names)
        lines.append(f"**Length:** across {where}, the AUC gap {verdict} ({shown}).")
    return "\n".join([*lines, *skipped]) + "\n"
