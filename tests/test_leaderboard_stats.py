"""Leaderboard statistics and credit diagnostics against cases computed by hand."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import torch

from creditbench.harness.diagnostics.credit import auroc, credit_diagnostics
from creditbench.leaderboard.board import summarize
from creditbench.leaderboard.collect import options_key
from creditbench.leaderboard.gains import gain, ranked, scale_position
from creditbench.leaderboard.stats import (
    bootstrap_interval,
    difference_interval,
    iqm,
    natural_key,
    probability_of_improvement,
)


def test_iqm_is_the_mean_of_the_middle_half():
    assert iqm([1, 2, 3, 4, 5, 6, 7, 8]) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    assert iqm([100, 1, 3, 2]) == pytest.approx(2.5)  # 1 and 100 cut: mean of 2, 3
    assert iqm([0.2, 0.4, 0.9]) == pytest.approx(0.5)  # 25% of 3 runs cuts none


def _paired(values: dict[str, list[float]], column: str = "auc") -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"method": m, "seed": seed, column: v}
            for m, vs in values.items()
            for seed, v in enumerate(vs)
        ]
    )


def test_a_position_is_the_ratio_of_paired_mean_gains_with_an_interval_over_seeds():
    grpo = [0.40, 0.50, 0.45, 0.60, 0.35]
    runs = _paired(
        {
            "grpo": grpo,
            "oracle": [g + d for g, d in zip(grpo, [0.10, 0.12, 0.08, 0.11, 0.09], strict=True)],
            "half": [g + d for g, d in zip(grpo, [0.05, 0.06, 0.04, 0.055, 0.045], strict=True)],
            "worse": [g - 0.05 for g in grpo],
        }
    )
    where, why = scale_position(runs, "half", "auc", reps=300)
    assert why == "" and where.point == pytest.approx(0.5) and where.n == 5
    assert where.low == pytest.approx(0.5) and where.high == pytest.approx(0.5)  # exactly half
    worse, _ = scale_position(runs, "worse", "auc", reps=300)
    assert worse.point == pytest.approx(-0.05 / 0.1) and worse.high < 0
    assert scale_position(runs, "grpo", "auc")[0].point == 0.0


def test_no_position_where_the_oracle_is_not_ahead_beyond_noise_or_too_few_seeds():
    grpo = [0.30, 0.60, 0.45, 0.50, 0.40]
    noisy = _paired({"grpo": grpo, "oracle": [0.32, 0.59, 0.475, 0.49, 0.42], "m": [0.5] * 5})
    where, why = scale_position(noisy, "m", "auc", reps=300)
    assert where is None and why == "the oracle is not ahead of GRPO beyond noise"
    few = _paired({"grpo": [0.4] * 3, "oracle": [0.6, 0.61, 0.62], "m": [0.5] * 3})
    assert scale_position(few, "m", "auc", reps=300) == (None, "fewer than 5 seed pairs")
    alone = _paired({"grpo": grpo, "m": grpo})
    assert scale_position(alone, "m", "auc")[1] == "no oracle runs paired with GRPO's"


def test_a_gain_claims_only_with_both_intervals_and_five_pairs():
    clear = gain([0.05, 0.06, 0.04, 0.05, 0.055], reps=300)
    assert clear.separates and not clear.reversed and (clear.ahead, clear.pairs) == (5, 5)
    # one large gap and four tiny ones: the bootstrap excludes 0, the t interval does not
    lopsided = gain([0.5, 0.01, 0.01, 0.01, 0.01], reps=300)
    assert lopsided.low > 0 and lopsided.t_low < 0 and not lopsided.separates
    assert not gain([0.05, 0.06, 0.04, 0.05], reps=300).separates  # four pairs: no claim
    assert gain([-0.05, -0.06, -0.04, -0.05, -0.055], reps=300).reversed


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


def _gain_row(method, point, low, high, t_low=None, t_high=None):
    """A board row: the AUC gain with its bootstrap and t intervals (t = bootstrap if not given)."""
    t_low, t_high = low if t_low is None else t_low, high if t_high is None else t_high
    return {"method": method, "gain_auc": point, "gain_auc_low": low, "gain_auc_high": high,
            "gain_auc_t_low": t_low, "gain_auc_t_high": t_high}  # fmt: skip


def test_a_rank_counts_the_rows_beyond_by_both_intervals():
    frame = pd.DataFrame(
        [
            {"method": "grpo", "gain_auc": math.nan},
            _gain_row("a", 0.08, 0.05, 0.10),
            _gain_row("b", 0.06, 0.02, 0.09),
            # bootstrap above 0, t interval not: not ahead by the claim rule, so level with GRPO
            _gain_row("boot_only", 0.03, 0.01, 0.05, -0.002, 0.06),
            _gain_row("c", 0.01, -0.01, 0.02),
            # t interval below 0, bootstrap not: not behind GRPO either
            _gain_row("t_only", -0.02, -0.04, 0.001, -0.03, -0.001),
            _gain_row("d", -0.05, -0.07, -0.03),
            {"method": "e", "gain_auc": math.nan},  # no gain: last, unranked
        ]
    )
    out = ranked(frame)
    ranks = dict(zip(out["method"], zip(out["rank"], out["rank_shared"], strict=True), strict=True))
    # no row's bounds lie above a's, b's or boot_only's upper bounds
    assert ranks["a"] == ranks["b"] == ranks["boot_only"] == (1, True)
    assert ranks["c"] == (2, False)  # a's lower bound 0.05 lies above c's upper bound 0.02
    # GRPO's rank is 1 + the methods ahead of it by the claim rule: a and b, not boot_only
    assert ranks["grpo"] == (3, True)
    assert ranks["t_only"] == (3, True)  # not told apart from GRPO: never ranked below it
    assert ranks["d"] == (6, False)  # beyond it: a, b, boot_only, c and GRPO, not t_only
    assert math.isnan(ranks["e"][0])
    assert list(out["method"]) == ["a", "b", "boot_only", "c", "grpo", "t_only", "d", "e"]


def test_some_rows_of_a_board_keep_the_boards_order():
    """GRPO counts among the rows beyond others: ranking the rows without it could reorder
    them, so the forest and the verdict read the board's ranking and leave GRPO out after."""
    from creditbench.leaderboard.gains import ranked_without

    frame = pd.DataFrame(
        [
            {"method": "grpo", "gain_auc": math.nan},
            _gain_row("narrow", -0.02, -0.04, -0.005),  # GRPO is beyond it
            _gain_row("wide", -0.03, -0.08, 0.02),  # nothing is beyond it
        ]
    )
    assert list(ranked_without(frame, ["grpo"])["method"]) == ["wide", "narrow"]
    assert list(ranked(frame[frame["method"] != "grpo"])["method"]) == ["narrow", "wide"]


def test_a_row_missing_a_bound_keeps_its_point_inside_its_span():
    frame = pd.DataFrame(
        [
            _gain_row("half", 0.05, 0.01, math.nan, math.nan, math.nan),  # only a lower bound
            _gain_row("b", 0.03, 0.02, 0.04),
        ]
    )
    ranks = dict(zip(ranked(frame)["method"], ranked(frame)["rank"], strict=True))
    assert ranks == {"half": 1, "b": 1}  # b's 0.02 is not beyond half's point 0.05


def test_the_ranking_lists_rows_in_rank_order_when_a_wide_interval_joins_the_leader():
    frame = pd.DataFrame(
        [
            _gain_row("a", 0.08, 0.05, 0.10),
            _gain_row("narrow", 0.03, 0.02, 0.04),
            _gain_row("wide", 0.01, -0.03, 0.06),
        ]
    )
    out = ranked(frame)
    # nothing lies beyond "wide", so it shares the leader's rank; "a" lies beyond "narrow"
    assert list(zip(out["method"], out["rank"], strict=True)) == [
        ("a", 1),
        ("wide", 1),
        ("narrow", 2),
    ]


def test_a_row_with_fewer_seeds_than_a_claim_is_listed_unranked_on_a_board_of_claims():
    """A method whose seeds are still running (or a newcomer's first seeds) has a wide t
    interval, so no row lies beyond it: ranked, it would come first. On a board where methods
    have the pairs of a claim it is listed after them, unranked; a board of few seeds
    throughout ranks every row."""
    from creditbench.leaderboard.tables import fmt_rank

    def with_pairs(row, pairs):
        return {**row, "gain_auc_pairs": pairs, "n_seeds": pairs}

    frame = pd.DataFrame(
        [
            {"method": "grpo", "gain_auc": math.nan, "n_seeds": 10},
            with_pairs(_gain_row("a", 0.02, 0.01, 0.03), 10),
            with_pairs(_gain_row("early", -0.03, -0.06, 0.01, -0.20, 0.14), 3),
            with_pairs(_gain_row("behind", -0.05, -0.07, -0.03), 10),
            with_pairs(_gain_row("early_low", -0.08, -0.12, -0.04, -0.30, 0.14), 2),
        ]
    )
    out = ranked(frame)
    assert list(out["method"]) == ["a", "grpo", "behind", "early", "early_low"]
    ranks = dict(zip(out["method"], out["rank"], strict=True))
    assert (ranks["a"], ranks["grpo"], ranks["behind"]) == (1, 2, 3)
    assert math.isnan(ranks["early"]) and math.isnan(ranks["early_low"])
    assert fmt_rank(out.iloc[3]) == "n/a (n<5)"
    # the same rows at three pairs each: no method has a claim's pairs, so every row ranks
    few = frame.assign(gain_auc_pairs=3, n_seeds=3)
    assert ranked(few)["rank"].notna().all()
    assert ranked(few)["method"].iloc[0] in ("a", "early")


def test_gains_equal_but_for_float_rounding_share_a_rank():
    # one seed each: only ties share a rank; an accuracy kept in float32 (0.6349999904632568)
    # and the same one kept exactly (0.635) are a tie, a gap of 1e-4 is not
    exact, single = 0.635, float(np.float32(0.635))
    frame = pd.DataFrame(
        [
            {"method": "a", "gain_auc": exact},
            {"method": "b", "gain_auc": single},
            {"method": "c", "gain_auc": exact - 1e-4},
        ]
    )
    out = ranked(frame)
    ranks = list(zip(out["rank"], out["rank_shared"], strict=True))
    assert ranks == [(1, True), (1, True), (3, False)]


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


def test_summarize_with_one_seed_reports_degenerate_intervals_and_no_positions():
    methods = summarize(_table({"grpo": [0.4], "oracle": [0.6], "dapo": [0.5]}), reps=50)["methods"]
    row = methods.set_index("method").loc["dapo"]
    assert row["n_seeds"] == 1
    assert row["final_iqm_low"] == row["final_iqm_high"] == pytest.approx(0.5)
    assert row["gain_auc"] == pytest.approx(0.05) and row["gain_auc_pairs"] == 1
    assert math.isnan(row["position"]) and row["position_note"] == "fewer than 5 seed pairs"
    assert "poi_auc" not in methods or math.isnan(row["poi_auc"])  # one seed: no probability
    from creditbench.leaderboard.tables import accuracy_table

    headers, _ = accuracy_table(methods)  # a one-seed board shows no position column at all
    assert not any("position" in h or "P(" in h for h in headers)


def test_summarize_pairs_gains_by_seed_ranks_and_places_methods():
    grpo = [0.40, 0.42, 0.41, 0.44, 0.39]
    out = summarize(
        _table(
            {
                "grpo": grpo,
                "oracle": [g + 0.30 for g in grpo],
                "dapo": [g + d for g, d in zip(grpo, [0.14, 0.16, 0.15, 0.15, 0.15], strict=True)],
            }
        ),
        reps=200,
    )
    methods = out["methods"].set_index("method")
    # paired by seed: the seeds' spread (0.39 to 0.44) does not widen the gain's interval
    assert methods.loc["dapo", "gain_final"] == pytest.approx(0.15)
    assert methods.loc["dapo", "gain_final_high"] - methods.loc["dapo", "gain_final_low"] < 0.02
    assert methods.loc["dapo", "gain_auc_separates"] and methods.loc["dapo", "gain_auc_ahead"] == 5
    assert methods.loc["dapo", "position"] == pytest.approx(0.5)  # AUC = final / 2
    assert methods.loc["oracle", "rank"] == 1 and methods.loc["grpo", "rank"] == 3
    assert list(out["methods"]["method"]) == ["oracle", "dapo", "grpo"]  # the board's order
    curves = out["curves"]
    end = curves[(curves["method"] == "grpo") & (curves["budget_fraction"] == 1.0)].iloc[0]
    assert end["accuracy"] == pytest.approx(np.mean(grpo)) and end["n"] == 5


def test_the_sign_test_leaves_ties_out_and_is_two_sided():
    found = gain([0.1, 0.2, 0.05, 0.3, 0.1, -0.02, 0.0])
    assert (found.ahead, found.behind, found.pairs) == (5, 1, 7)
    assert math.isclose(found.sign_p, 14 / 64)  # P(k <= 1 or k >= 5 of 6), k ~ Bin(6, 1/2)
    assert math.isclose(gain([0.1] * 10).sign_p, 2 / 1024)
    assert gain([0.0, 0.0]).sign_p == 1.0
    assert found.columns("auc")["auc_sign_p"] == found.sign_p
