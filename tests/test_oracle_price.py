"""The oracle's price: what its uncharged value passes would cost, and where a charged oracle
would sit, read from the records by hand (leaderboard/oracle_price.py)."""

from __future__ import annotations

import math

import pytest
from fake_runs import make_run

from creditbench.leaderboard.collect import collect_runs
from creditbench.leaderboard.oracle_price import (
    charged_oracle,
    charged_reading,
    concave_ceiling,
    price_sentence,
)
from creditbench.leaderboard.report import render

SPENT = [0.0, 0.25, 0.5, 0.75, 1.0]
ACCURACY = [0.2, 0.4, 0.5, 0.55, 0.6]


@pytest.mark.parametrize(
    ("price", "auc", "final"),
    [
        # unpriced: the run's own trapezoid, 0.25 * (0.2/2 + 0.4 + 0.5 + 0.55 + 0.6/2)
        (0.0, 0.4625, 0.6),
        # passes as dear as the run: evaluations at 0, 0.5, 1, 1.5, 2; the area up to 1 is
        # 0.5 * (0.2 + 0.4) / 2 + 0.5 * (0.4 + 0.5) / 2
        (1.0, 0.375, 0.5),
        # three times as dear: the evaluation at 0.25 lands at 1, the area is one segment's
        (3.0, 0.3, 0.4),
        # at 0, 0.4, 0.8, 1.2: the segment 0.8 -> 1.2 cut at 1, where it reads 0.525
        (0.6, 0.4 * 0.3 + 0.4 * 0.45 + 0.2 * (0.5 + 0.525) / 2, 0.525),
    ],
)
def test_a_charged_run_reads_its_curve_where_it_would_have_spent_as_much(price, auc, final):
    assert charged_reading(SPENT, ACCURACY, price) == pytest.approx((auc, final))


def test_the_concave_ceiling_by_hand():
    # price 3: points (0, 0.2), (1, 0.4), (2, 0.5), ...; on [0, 1] a concave curve lies below the
    # line through (1, 0.4) and (2, 0.5) extended back, 0.3 + 0.1 x: area 0.35 (linear: 0.3)
    assert concave_ceiling([0, 1, 2, 3, 4], ACCURACY) == pytest.approx(0.35)
    # price 1: points at 0, 0.5, 1, 1.5, 2. On [0, 0.5] below 0.3 + 0.2 x (the next segment's
    # line): 0.175. On [0.5, 1] below both 0.2 + 0.4 x (the segment before, forward) and
    # 0.4 + 0.1 x (the one after, back), which cross at 2/3 (0.4667): two trapezoids
    kink = 0.2 + 0.4 * 2 / 3
    second = (2 / 3 - 0.5) * (0.4 + kink) / 2 + (1 - 2 / 3) * (kink + 0.5) / 2
    assert concave_ceiling([0, 0.5, 1, 1.5, 2], ACCURACY) == pytest.approx(0.175 + second)
    assert 0.175 + second > charged_reading(SPENT, ACCURACY, 1.0)[0]  # above the linear 0.375


def test_the_ceiling_is_never_below_the_linear_reading_and_needs_a_neighbour():
    # not concave (noise): the next segment's line, -0.8 + 0.9 x, runs below the chord 0.1 x
    assert concave_ceiling([0, 1, 2], [0.0, 0.1, 1.0]) == pytest.approx(0.05)
    assert math.isnan(concave_ceiling([0, 1], [0.2, 0.4]))  # two points bound nothing


SEEDS = range(5)
# make_run: 4 steps, 1e9 FLOPs each; accuracy 0.3 + 0.01 seed + slope * f at f = 0, 1/4, ...
# (GRPO's slope 0.1, the oracle's 0.4); every step trains 32 responses
CHARGED_A_STEP, REFERENCE_A_STEP = 1e9, 1e9


def board(root, *, reference=REFERENCE_A_STEP):
    """The runs written under ``root`` and their table."""
    for seed in SEEDS:
        make_run(root, f"grpo-s{seed}", "grpo", seed, responses=32)
        make_run(root, f"dapo-s{seed}", "dapo", seed, responses=32)
        make_run(root, f"oracle-s{seed}", "oracle", seed, responses=32, reference_flops=reference)
    table, warnings = collect_runs(root)
    assert warnings == []
    return table


def test_a_runs_row_holds_its_uncharged_passes_total_not_their_running_mean(tmp_path):
    runs = board(tmp_path)
    oracle = runs[(runs["kind"] == "run") & (runs["method"] == "oracle")]
    # recorded cumulated, 1e9, 2e9, 3e9, 4e9: the total is the last (their mean would be 2.5e9)
    assert oracle["reference_flops"].tolist() == [4 * REFERENCE_A_STEP] * len(SEEDS)
    assert oracle["flops_total"].tolist() == [4 * CHARGED_A_STEP] * len(SEEDS)


def test_each_oracle_run_charged_by_hand(tmp_path):
    rows = charged_oracle(board(tmp_path)).set_index("seed")
    assert rows["price"].tolist() == [1.0] * 5 and rows["reached"].tolist() == [0.5] * 5
    for seed in SEEDS:
        start = 0.3 + 0.01 * seed
        row = rows.loc[seed]
        # the curve read over its first half: its mean there, the line at f = 1/4
        assert row["charged_auc"] == pytest.approx(start + 0.4 * 0.25)
        assert row["charged_ceiling"] == pytest.approx(start + 0.4 * 0.25)  # a straight line
        assert row["charged_final"] == pytest.approx(start + 0.4 * 0.5)
        assert row["auc"] == pytest.approx(start + 0.4 * 0.5)
        assert row["grpo_auc"] == pytest.approx(start + 0.1 * 0.5)
        assert row["charged_responses"] == 64  # the second step's, of 4 steps of 32
        assert row["charged_evaluations"] == 2  # at 1/4 and 1/2 of the run, now 0.5 and 1
    assert rows["fewest_responses"].tolist() == [128.0] * 5


def test_the_boards_line_says_the_price_and_where_a_charged_oracle_sits(tmp_path):
    board(tmp_path / "runs")
    md = render(tmp_path / "runs", tmp_path / "board", reps=200)["markdown"].read_text()
    lines = md.splitlines()
    price = next(i for i, line in enumerate(lines) if line.startswith("The oracle, charged"))
    assert lines[price - 2].startswith("Ahead of GRPO")  # right after the setting's verdict
    line = lines[price]
    assert "they cost 1.0 times its charged FLOPs (1.0 to 1.0 over its 5 seeds)" in line
    assert "4.0e9 FLOPs a run against 4.0e9" in line and "stop after 50% of its steps" in line
    # charged AUC 0.40 + 0.01 seed against GRPO's 0.35 + 0.01 seed: +0.05 at every seed, a third
    # of the oracle's own +0.15
    assert "Its AUC would lie between 0.420" in line
    assert "+0.050 [+0.050, +0.050] t [+0.050, +0.050] 5/5 against GRPO: ahead of GRPO" in line
    assert "+0.33 on the GRPO (0) to oracle (1) scale" in line
    assert "and 0.420, the most a concave curve" in line
    assert "still train 64 responses, more than the 128" not in line
    assert "still train 64 responses, fewer than the 128 of the setting's shortest run" in line


def test_a_board_whose_oracle_records_no_uncharged_passes_has_no_price_line(tmp_path):
    assert charged_oracle(board(tmp_path / "runs", reference=None)).empty
    md = render(tmp_path / "runs", tmp_path / "board", reps=50)["markdown"].read_text()
    assert "charged for its value passes" not in md


def test_the_line_is_the_settings_own(tmp_path):
    table = board(tmp_path)
    rows = charged_oracle(table)
    frame = rows.assign(method="oracle").iloc[:1][["task", "options", "setting", "method"]]
    assert price_sentence(rows, frame.assign(options="elsewhere")) == ""
