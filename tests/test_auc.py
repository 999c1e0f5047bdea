"""The AUC over the compute budget: each evaluation placed where it happened (the share of the
budget spent by then), the area taken over the budget [0, 1] and nothing past it."""

from __future__ import annotations

import pytest
from fake_runs import make_run

from creditbench.harness.budget import BudgetMeter
from creditbench.harness.config import RunConfig
from creditbench.harness.records.files import area_until, budget_auc
from creditbench.harness.records.summary import run_summary
from creditbench.leaderboard.collect import collect_runs

# VinePPO's evaluations on the standard board fall at these shares of the budget, scheduled at
# 0, .25, .5, .75 and 1: a step of it spends several percent of the budget at once
VINEPPO_SPENT = (0.0, 0.39, 0.58, 0.77, 1.16)
# make_run's accuracies of GRPO at seed 0 (0.3 + 0.1 x the scheduled fraction)
ACCURACY = (0.3, 0.325, 0.35, 0.375, 0.4)
# by hand: the trapezoids up to 0.77, then the last segment cut at 1, its accuracy at 1 read on
# the line from (0.77, 0.375) to (1.16, 0.4)
AT_ONE = 0.375 + (0.4 - 0.375) * (1.0 - 0.77) / (1.16 - 0.77)
BY_HAND = (
    0.39 * (0.3 + 0.325) / 2
    + 0.19 * (0.325 + 0.35) / 2
    + 0.19 * (0.35 + 0.375) / 2
    + 0.23 * (0.375 + AT_ONE) / 2
)


def test_the_area_is_taken_up_to_the_end_and_not_past_it():
    assert area_until([0.0, 0.5, 1.0], [0.0, 1.0, 1.0], 1.0) == pytest.approx(0.75)
    assert area_until([0.0, 1.0], [0.3, 0.3], 1.0) == pytest.approx(0.3)  # constant a scores a
    assert area_until([1.0], [0.7], 1.0) == 0.0
    # past the end: the segment that crosses it is cut there, what lies beyond earns nothing
    assert area_until([0.0, 2.0], [0.0, 1.0], 1.0) == pytest.approx(0.25)
    assert area_until([0.0, 1.0, 1.5], [0.2, 0.2, 0.9], 1.0) == pytest.approx(0.2)
    # two evaluations at one point (fractions crossed by one step): no width, no area
    assert area_until([0.0, 0.5, 0.5, 1.0], [0.0, 1.0, 1.0, 1.0], 1.0) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="short of 1"):
        area_until([0.0, 0.9], [0.3, 0.4], 1.0)  # not measured up to the end: refused
    with pytest.raises(ValueError, match="decrease"):
        area_until([0.0, 0.6, 0.5, 1.0], [0.1] * 4, 1.0)


def test_an_evaluation_at_1_16_of_the_budget_is_placed_there():
    evals = [
        {"fraction": f, "budget_fraction": spent, "sampled_accuracy": a}
        for f, spent, a in zip((0.0, 0.25, 0.5, 0.75, 1.0), VINEPPO_SPENT, ACCURACY, strict=True)
    ]
    assert budget_auc(evals, "sampled_accuracy") == pytest.approx(BY_HAND)
    # at the scheduled fractions it would have been 0.35, crediting VinePPO's late evaluations
    assert BY_HAND == pytest.approx(0.3428, abs=1e-4)
    # where the spent share is not recorded (a budget in seconds, older records): as scheduled
    unrecorded = [{k: v for k, v in e.items() if k != "budget_fraction"} for e in evals]
    assert budget_auc(unrecorded, "sampled_accuracy") == pytest.approx(0.35)
    unrecorded[1]["budget_fraction"] = None  # a seconds budget records None
    assert budget_auc(unrecorded, "sampled_accuracy") == pytest.approx(0.35)


def test_the_board_and_the_summary_read_a_runs_auc_where_its_evaluations_happened(tmp_path):
    make_run(tmp_path, "vineppo-chain-s0", "grpo", 0, eval_spent=VINEPPO_SPENT)
    make_run(tmp_path, "old-chain-s1", "grpo", 1)  # records without the spent share
    table, warnings = collect_runs(tmp_path)
    assert warnings == []
    runs = table[table["kind"] == "run"].set_index("run")
    assert runs.loc["vineppo-chain-s0", "auc"] == pytest.approx(BY_HAND)
    assert runs.loc["old-chain-s1", "auc"] == pytest.approx(0.35 + 0.01)
    evals = table[(table["kind"] == "eval") & (table["run"] == "vineppo-chain-s0")]
    assert evals["spent_fraction"].tolist() == list(VINEPPO_SPENT)
    assert evals["budget_fraction"].tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]  # as scheduled

    config = RunConfig(method="grpo", task="chain")
    meter = BudgetMeter(non_embedding_params=1, n_layers=1, d_model=1, amount=1.0)
    evals = [
        {"fraction": f, "budget_fraction": s, "sampled_accuracy": a, "greedy_accuracy": a}
        for f, s, a in zip((0.0, 0.25, 0.5, 0.75, 1.0), VINEPPO_SPENT, ACCURACY, strict=True)
    ]
    summary = run_summary(config, steps=5, meter=meter, evals=evals, wall_seconds=1.0)
    assert summary["auc"]["sampled_accuracy"] == pytest.approx(BY_HAND)
    stopped = run_summary(
        config, steps=2, meter=meter, evals=evals[:3], wall_seconds=1.0, status="non-finite"
    )
    assert "auc" not in stopped  # a run stopped early has no AUC over its budget


def test_a_run_whose_evaluations_end_short_of_its_budget_is_refused(tmp_path):
    make_run(tmp_path, "short-chain-s0", "grpo", 0, eval_spent=(0.0, 0.2, 0.4, 0.6, 0.9))
    table, warnings = collect_runs(tmp_path)
    assert table.empty
    assert warnings == [
        "short-chain-s0: skipped: its evaluations end at 0.9 of the budget, short of its end: "
        "no AUC over the whole budget"
    ]
