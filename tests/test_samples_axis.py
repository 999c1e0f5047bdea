"""The equal-samples axis: each run's mean accuracy over the first trained responses every
measured run of its setting reached, read from its evaluations at counts of trained responses
only (budget.eval_responses), paired by seed with GRPO's; a row without them is not measured."""

from __future__ import annotations

import math

import pytest
from fake_runs import make_run

from creditbench.leaderboard.board import summarize
from creditbench.leaderboard.collect import SAMPLES_EVAL, collect_runs
from creditbench.leaderboard.report import render
from creditbench.leaderboard.stats import with_samples_auc

SEEDS = range(5)
COUNTS = [64, 128, 192]
# GRPO trains on 64 responses a step: each count is reached exactly, at steps 1, 2 and 3.
# "dapo" here trains on 40 a step (a method that drops groups): 40, 80, 120, 160, so 64 is
# reached at step 2 (80 trained) and 128 at step 4 (160); 192 never.
GRPO_COUNTS, DAPO_COUNTS = [(64, 1), (128, 2), (192, 3)], [(64, 2), (128, 4)]
# make_run's accuracies at steps 0-4, seed 0: GRPO 0.3 + 0.1 f, "dapo" 0.3 + 0.2 f (f = step/4)
# By hand, up to 128 trained responses (the most both reached), over 128:
GRPO_BY_HAND = (64 * (0.3 + 0.325) / 2 + 64 * (0.325 + 0.35) / 2) / 128  # 0.325
# dapo's points: (0, 0.3), (80, 0.4), (160, 0.5); its segment past 128 is cut there, its
# accuracy at 128 read on the line between 80 and 160
AT_128 = 0.4 + (0.5 - 0.4) * (128 - 80) / (160 - 80)
DAPO_BY_HAND = (80 * (0.3 + 0.4) / 2 + 48 * (0.4 + AT_128) / 2) / 128  # 0.38


def board(root, *, counts: bool = True):
    for seed in SEEDS:
        budget = {"budget": {"eval_responses": COUNTS}} if counts else {}
        make_run(root, f"grpo-s{seed}", "grpo", seed, responses=64,
                 eval_counts=GRPO_COUNTS if counts else (), **budget)  # fmt: skip
        make_run(root, f"dapo-s{seed}", "dapo", seed, responses=40,
                 eval_counts=DAPO_COUNTS if counts else (), **budget)  # fmt: skip
        make_run(root, f"oracle-s{seed}", "oracle", seed, responses=64)  # never at counts
    table, warnings = collect_runs(root)
    assert warnings == []
    return table


def test_the_samples_auc_of_two_runs_by_hand(tmp_path):
    table = board(tmp_path)
    assert table["setting"].unique().tolist() == ["default"]  # the counts split no setting
    samples = table[table["kind"] == SAMPLES_EVAL]
    dapo = samples[samples["run"] == "dapo-s0"]
    assert dapo[["responses_mark", "step", "responses_trained"]].values.tolist() == [
        [64, 2, 80],
        [128, 4, 160],
    ]
    runs = table[(table["kind"] == "run") & (table["seed"] == 0)]
    group = with_samples_auc(runs, samples)
    auc = dict(zip(group["run"], group["auc_samples"], strict=True))
    assert auc["grpo-s0"] == pytest.approx(GRPO_BY_HAND) == pytest.approx(0.325)
    assert auc["dapo-s0"] == pytest.approx(DAPO_BY_HAND) == pytest.approx(0.38)
    assert math.isnan(auc["oracle-s0"])  # no evaluation at a count: not measured
    assert group["samples_horizon"].tolist() == [128.0] * 3

    rows = summarize(table, reps=200)["methods"].set_index("method")
    # seeds add 0.01 to both curves: the paired gap is the same at every seed
    assert rows.loc["dapo", "gain_samples"] == pytest.approx(DAPO_BY_HAND - GRPO_BY_HAND)
    assert rows.loc["dapo", "gain_samples_pairs"] == len(SEEDS)
    assert rows.loc["dapo", "gain_samples_separates"]
    assert rows.loc["grpo", "samples_mean"] == pytest.approx(GRPO_BY_HAND + 0.02)
    assert math.isnan(rows.loc["oracle", "samples_mean"])
    assert math.isnan(rows.loc["oracle", "gain_samples"])
    # the compute axis is unchanged beside it: the AUC over the budget's fractions
    assert rows.loc["dapo", "gain_auc"] == pytest.approx(0.05)


def test_a_row_without_evaluations_at_counts_reads_not_measured(tmp_path):
    table = board(tmp_path / "runs")
    render(tmp_path / "runs", out_dir=tmp_path / "board", reps=200)
    page = (tmp_path / "board" / "leaderboard.md").read_text(encoding="utf-8")
    assert "At equal samples (the mean accuracy over the first 128 trained responses" in page
    assert "not measured: oracle" in page
    assert "| oracle | not measured | not measured |" in page
    dapo = next(line for line in page.splitlines() if line.startswith("| dapo | 0.400 ["))
    assert "| +0.055 [+0.055, +0.055] t [+0.055, +0.055] 5/5 ▲ |" in dapo

    # the committed form of a board, its runs.csv, reads back to the same axis
    again, _ = collect_runs(tmp_path / "board" / "runs.csv")
    assert again[again["kind"] == SAMPLES_EVAL].shape == table[table["kind"] == SAMPLES_EVAL].shape
    mine = summarize(again, reps=200)["methods"].set_index("method")
    assert mine.loc["dapo", "gain_samples"] == pytest.approx(DAPO_BY_HAND - GRPO_BY_HAND)

    # no run at counts: the whole axis is not measured, never read off the budget's fractions
    board(tmp_path / "plain", counts=False)
    render(tmp_path / "plain", out_dir=tmp_path / "plain-board", reps=200)
    plain = (tmp_path / "plain-board" / "leaderboard.md").read_text(encoding="utf-8")
    assert "At equal samples: not measured. No run of this setting" in plain
    rows = summarize(collect_runs(tmp_path / "plain")[0], reps=200)["methods"]
    assert rows["samples_mean"].isna().all() and "gain_samples" not in rows
