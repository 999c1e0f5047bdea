"""Leaderboard statistics and credit diagnostics against cases computed by hand."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import torch

from creditbench.harness.diagnostics.credit import auroc, credit_diagnostics
from creditbench.leaderboard.collect import options_key, trapezoid
from creditbench.leaderboard.stats import (
    Interval,
    bootstrap_interval,
    difference_interval,
    iqm,
    natural_key,
    position,
    probability_of_improvement,
    rank_groups,
    summarize,
)


def test_iqm_is_the_mean_of_the_middle_half():
    assert iqm([1, 2, 3, 4, 5, 6, 7, 8]) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    assert iqm([100, 1, 3, 2]) == pytest.approx(2.5)  # 1 and 100 cut: mean of 2, 3
    assert iqm([0.2, 0.4, 0.9]) == pytest.approx(0.5)  # 25% of 3 runs cuts none


def test_trapezoid_auc_over_budget_fractions():
    assert trapezoid([0.0, 0.5, 1.0], [0.0, 1.0, 1.0]) == pytest.approx(0.75)
    assert trapezoid([0.0, 0.25, 1.0], [0.2, 0.4, 0.4]) == pytest.approx(0.075 + 0.3)
    assert trapezoid([0.0, 1.0], [0.3, 0.3]) == pytest.approx(0.3)  # constant a scores a
    assert trapezoid([1.0], [0.7]) == 0.0


def test_position_between_grpo_and_oracle():
    assert position(0.5, 0.4, 0.8) == pytest.approx(0.25)
    assert position(0.4, 0.4, 0.8) == pytest.approx(0.0)
    assert position(0.8, 0.4, 0.8) == pytest.approx(1.0)
    assert position(0.2, 0.4, 0.8) == pytest.approx(-0.5)  # worse than GRPO
    assert position(0.5, 0.6, 0.4) is None  # oracle behind GRPO: the scale would run backwards
    assert position(0.5, 0.4, 0.4 + 1e-9) is None  # ends equal: undefined
    assert position(0.5, None, 0.8) is None
    assert position(math.nan, 0.4, 0.8) is None


def _hand_batch():
    """Rows 0 and 1 failed with a first wrong step; 2 succeeded; 3 failed, no wrong step found."""
    advantages = torch.tensor(
        [
            [-0.5, -2.0, -1.0, 0.5],
            [-1.0, -1.0, -1.0, 9.0],  # last token is padding
            [1.0, 1.0, 1.0, 1.0],
            [-5.0, -5.0, 0.0, 0.0],
        ]
    )
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]]).float()
    first_wrong = torch.tensor([[0, 1, 1, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]]).float()
    rewards = torch.tensor([0.0, 0.0, 1.0, 0.0])
    return advantages, mask, first_wrong, rewards


def test_credit_precision_and_auroc_on_a_hand_made_batch():
    out = credit_diagnostics(*_hand_batch())
    # negative mass: row 0 0.5 + 2 + 1 (3 on the first wrong step), row 1 1 + 1 + 1 (1 on it)
    assert out["credit_precision"] == pytest.approx(4 / 6.5)
    # positives -A: 2, 1, 1; negatives: 0.5, -0.5, 1, 1. Pairs won: 4 + (2 + 1) + (2 + 1) of 12
    assert out["credit_auroc"] == pytest.approx(10 / 12)
    assert out["credit_chance"] == pytest.approx(3 / 7)
    assert out["credit_responses"] == 2


def test_uniform_credit_scores_chance_precision_and_auroc_one_half():
    advantages, mask, first_wrong, rewards = _hand_batch()
    uniform = torch.where(rewards[:, None] > 0.5, 1.0, -1.0).expand_as(advantages) * mask
    out = credit_diagnostics(uniform, mask, first_wrong, rewards)
    assert out["credit_auroc"] == pytest.approx(0.5)
    assert out["credit_precision"] == pytest.approx(out["credit_chance"])


def test_credit_diagnostics_undefined_cases_are_nan_not_errors():
    advantages, mask, first_wrong, rewards = _hand_batch()
    out = credit_diagnostics(advantages.abs(), mask, first_wrong, rewards)  # no negative credit
    assert math.isnan(out["credit_precision"])
    out = credit_diagnostics(advantages, mask, first_wrong, torch.ones(4))  # nothing failed
    assert math.isnan(out["credit_precision"]) and math.isnan(out["credit_auroc"])
    assert out["credit_responses"] == 0


@pytest.mark.parametrize("seed", range(5))
def test_auroc_equals_pairwise_counting_with_ties(seed):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 4, (30,), generator=gen).float()  # many ties
    labels = torch.rand(30, generator=gen) < 0.3
    pos, neg = scores[labels].tolist(), scores[~labels].tolist()
    wins = sum((p > n) + 0.5 * (p == n) for p, n in itertools.product(pos, neg))
    assert auroc(scores, labels) == pytest.approx(wins / (len(pos) * len(neg)))


def test_probability_of_improvement_hand_cases():
    better, worse = [0.9, 0.8, 0.85], [0.1, 0.2, 0.15]
    assert probability_of_improvement(better, worse) == pytest.approx(1.0)
    assert probability_of_improvement(worse, better) == pytest.approx(0.0)
    assert probability_of_improvement(better, better) == pytest.approx(0.5)
    # pairs (1,1) tie, (1,0) win, (2,1) win, (2,0) win: 3.5 of 4
    assert probability_of_improvement([1, 2], [1, 0]) == pytest.approx(0.875)


def test_bootstrap_interval_with_one_seed_is_degenerate_not_an_error():
    one = bootstrap_interval([0.42], "iqm")
    assert (one.point, one.low, one.high, one.n) == (0.42, 0.42, 0.42, 1)
    assert one.degenerate
    empty = bootstrap_interval([], "mean")
    assert empty.n == 0 and math.isnan(empty.point)


def test_bootstrap_interval_brackets_the_estimate_and_is_reproducible():
    values = [0.1, 0.3, 0.35, 0.4, 0.9]
    iv = bootstrap_interval(values, "mean", reps=500, seed=3)
    assert iv.point == pytest.approx(np.mean(values))
    assert min(values) <= iv.low < iv.point < iv.high <= max(values)
    assert iv == bootstrap_interval(values, "mean", reps=500, seed=3)
    assert bootstrap_interval(values, "iqm", reps=500).point == pytest.approx(iqm(values))
    constant = bootstrap_interval([0.5, 0.5, 0.5], "mean", reps=100)
    assert constant.low == constant.high == 0.5
    # stratified: each task column resampled on its own; a constant column stays constant
    two_tasks = bootstrap_interval([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]], "mean", reps=100)
    assert two_tasks.low == two_tasks.high == 0.5


def test_difference_interval_excludes_zero_for_a_clear_gap():
    gap = difference_interval([0.8, 0.82, 0.79, 0.81], [0.5, 0.52, 0.49, 0.51], reps=500)
    assert gap.point == pytest.approx(0.3)
    assert 0 < gap.low < gap.point < gap.high


def test_ranks_share_a_rank_when_intervals_overlap_the_best():
    ranks = rank_groups(
        {
            "a": Interval(0.80, 0.75, 0.85, 5),
            "b": Interval(0.78, 0.70, 0.82, 5),  # overlaps a
            "c": Interval(0.50, 0.45, 0.55, 5),
            "d": Interval(0.48, 0.40, 0.52, 5),  # overlaps c
            "e": Interval(0.20, 0.20, 0.20, 1),
        }
    )
    assert ranks == {
        "a": (1, True),
        "b": (1, True),
        "c": (3, True),
        "d": (3, True),
        "e": (5, False),
    }


def test_options_key_and_natural_order():
    assert options_key({"steps": 8, "slip_rate": 0.1}) == "slip_rate=0.1,steps=8"
    assert options_key({}) == "default"
    assert sorted(["steps=12", "steps=4", "steps=8"], key=natural_key) == [
        "steps=4",
        "steps=8",
        "steps=12",
    ]


def _table(final: dict[str, list[float]]) -> pd.DataFrame:
    rows = []
    for method, values in final.items():
        for seed, value in enumerate(values):
            base = {
                "method": method,
                "task": "chain",
                "options": "default",
                "setting": "default",
                "seed": seed,
                "run": f"{method}-{seed}",
            }
            rows.append(
                {
                    **base,
                    "kind": "run",
                    "final_sampled_accuracy": value,
                    "auc_sampled_accuracy": value / 2,
                    "credit_auroc": 0.5,
                }
            )
            for fraction, acc in ((0.0, 0.0), (1.0, value)):
                rows.append(
                    {**base, "kind": "eval", "budget_fraction": fraction, "sampled_accuracy": acc}
                )
    return pd.DataFrame(rows)


def test_summarize_with_one_seed_reports_degenerate_intervals_and_na_positions():
    methods = summarize(_table({"grpo": [0.4], "oracle": [0.6], "dapo": [0.5]}), reps=50)["methods"]
    row = methods.set_index("method").loc["dapo"]
    assert row["n_seeds"] == 1
    assert row["final_iqm_low"] == row["final_iqm_high"] == pytest.approx(0.5)
    assert row["speed_position"] == pytest.approx(0.5)  # AUC 0.25 between 0.2 and 0.3
    assert row["credit_position"] is None  # GRPO and oracle both at AUROC 0.5
    assert row["poi_final"] == pytest.approx(1.0)


def test_summarize_curves_and_ranks_over_seeds():
    out = summarize(
        _table(
            {"grpo": [0.40, 0.42, 0.41], "oracle": [0.70, 0.72, 0.71], "dapo": [0.69, 0.71, 0.72]}
        ),
        reps=200,
    )
    methods = out["methods"].set_index("method")
    assert methods.loc["oracle", "rank_final"] == 1 and methods.loc["oracle", "rank_final_shared"]
    assert methods.loc["dapo", "rank_final"] == 1  # not significantly different from oracle
    assert methods.loc["grpo", "rank_final"] == 3 and not methods.loc["grpo", "rank_final_shared"]
    assert "poi_final" not in methods.columns or math.isnan(methods.loc["grpo", "poi_final"])
    curves = out["curves"]
    end = curves[(curves["method"] == "grpo") & (curves["budget_fraction"] == 1.0)].iloc[0]
    assert end["accuracy"] == pytest.approx(0.41) and end["n"] == 3
    assert end["low"] <= 0.41 <= end["high"]


def test_positions_need_oracle_significantly_ahead_of_grpo_over_seeds():
    # AUC = final / 2. Oracle clearly ahead (AUC 0.405 against 0.205): dapo's 0.305 is halfway.
    clear = summarize(
        _table(
            {"grpo": [0.40, 0.42, 0.41], "oracle": [0.80, 0.82, 0.81], "dapo": [0.60, 0.62, 0.61]}
        ),
        reps=200,
    )["methods"].set_index("method")
    assert clear.loc["dapo", "speed_position"] == pytest.approx((0.305 - 0.205) / (0.405 - 0.205))
    # Oracle's mean is ahead by 0.005 but its seeds straddle GRPO's: the position would be
    # (0.50 - 0.45) / 0.005 = 10 on the old rule; here it is undefined.
    noisy = summarize(
        _table({"grpo": [0.30, 0.60, 0.45], "oracle": [0.32, 0.59, 0.475], "dapo": [0.5] * 3}),
        reps=200,
    )["methods"].set_index("method")
    assert noisy.loc["oracle", "auc_mean"] > noisy.loc["grpo", "auc_mean"]
    assert noisy.loc["dapo", "speed_position"] is None
    assert noisy.loc["grpo", "speed_position"] is None


def test_learning_speed_is_compared_at_equal_trained_responses():
    from creditbench.leaderboard.stats import with_response_auc

    runs, evals = [], []
    # GRPO and the oracle train on 100 responses per half budget; "slow" (charged value
    # rollouts) on half as many: per budget fraction it looks as fast as the oracle, per
    # trained response it is the fastest of all
    for method, per_half, accs in (
        ("grpo", 100.0, [0.2, 0.3, 0.4]),
        ("oracle", 100.0, [0.2, 0.4, 0.5]),
        ("slow", 50.0, [0.2, 0.4, 0.5]),
    ):
        runs.append({"kind": "run", "run": method, "method": method})
        for fraction, step, acc in zip((0.0, 0.5, 1.0), (0, 1, 2), accs, strict=True):
            evals.append(
                {
                    "kind": "eval",
                    "run": method,
                    "budget_fraction": fraction,
                    "responses_trained": per_half * step,
                    "sampled_accuracy": acc,
                }
            )
    group = with_response_auc(pd.DataFrame(runs), pd.DataFrame(evals))
    auc = dict(zip(group["run"], group["auc_responses"], strict=True))
    # the common horizon is 100 responses, the slow method's end
    assert auc["grpo"] == pytest.approx(0.25) and auc["oracle"] == pytest.approx(0.3)
    assert auc["slow"] == pytest.approx((0.3 * 50 + 0.45 * 50) / 100)
    no_counts = pd.DataFrame(evals).drop(columns="responses_trained")
    assert with_response_auc(pd.DataFrame(runs), no_counts)["auc_responses"].isna().all()
