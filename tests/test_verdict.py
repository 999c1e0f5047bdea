"""A setting's verdict says what its intervals say, and nothing its intervals do not."""

from __future__ import annotations

import pandas as pd

from creditbench.leaderboard.gains import MIN_PAIRS_FOR_A_CLAIM, ranked
from creditbench.leaderboard.tables import accuracy_table, gains_table
from creditbench.leaderboard.verdict import setting_verdict


def frame(rows, seeds=5):
    """Rows of summarize()["methods"] for one setting: (method, gain, low, high), the t
    interval 0.005 wider on each side, every seed ahead where the gain is positive."""
    out = []
    for method, gain, low, high in rows:
        pairs = seeds if gain == gain else float("nan")
        t_low, t_high = low - 0.005, high + 0.005
        enough = seeds >= MIN_PAIRS_FOR_A_CLAIM
        out.append(
            {
                "method": method,
                "n_seeds": seeds,
                "gain_auc": gain,
                "gain_auc_low": low,
                "gain_auc_high": high,
                "gain_auc_t_low": t_low,
                "gain_auc_t_high": t_high,
                "gain_auc_ahead": seeds if gain == gain and gain > 0 else 0,
                "gain_auc_pairs": pairs,
                "gain_auc_separates": enough and low > 0 and t_low > 0,
                "gain_auc_reversed": enough and high < 0 and t_high < 0,
                "auc_mean": 0.5 + (gain if gain == gain else 0.0),
                "auc_mean_low": 0.45,
                "auc_mean_high": 0.55,
                "final_mean": 0.6,
                "final_mean_low": 0.55,
                "final_mean_high": 0.65,
            }
        )
    return pd.DataFrame(out)


NAN = float("nan")


def test_ahead_behind_and_level_follow_both_intervals_and_the_oracle_is_reported_apart():
    f = frame(
        [
            ("grpo", NAN, NAN, NAN),
            ("a", 0.03, 0.01, 0.05),
            ("b", 0.01, -0.01, 0.03),  # interval holds zero: not told apart
            ("c", -0.04, -0.06, -0.02),
            ("d", 0.02, 0.003, 0.04),  # bootstrap above 0, t interval (0.003 - 0.005) not
            ("oracle", 0.05, 0.02, 0.08),
        ]
    )
    text = setting_verdict(f)
    ahead = "a (+0.030 [+0.010, +0.050] t [+0.005, +0.055] 5/5)"
    assert f"Ahead of GRPO in AUC (both 95% intervals above zero): {ahead}." in text
    assert "Behind it: c (-0.040 [-0.060, -0.020] t [-0.065, -0.015] 0/5)." in text
    assert "2 not told apart from GRPO." in text
    assert "Oracle credit, the reference, is ahead of GRPO by +0.050 [+0.020, +0.080]" in text
    order = ["oracle", "a", "d", "b", "grpo", "c"]
    assert list(ranked(f)["method"]) == order
    headers, rows = accuracy_table(f)
    assert [r[1] for r in rows] == order and headers[0] == "rank"
    assert rows[order.index("grpo")][4] == "0 (baseline)"
    assert rows[1][4].endswith("5/5 ▲") and rows[-1][4].endswith("0/5 ▼")
    assert not rows[2][4].endswith("▲")  # d: the bootstrap alone does not claim
    assert [r[0] for r in gains_table(f)[1]] == order


def test_an_oracle_level_with_grpo_says_the_setting_cannot_show_what_credit_buys():
    f = frame([("grpo", NAN, NAN, NAN), ("a", 0.0, -0.02, 0.02), ("oracle", 0.01, -0.01, 0.03)])
    text = setting_verdict(f)
    assert text.startswith("No method is ahead of GRPO in AUC beyond both its 95% intervals.")
    assert "cannot show what better credit buys" in text
    f = frame([("grpo", NAN, NAN, NAN), ("oracle", -0.03, -0.05, -0.01)])
    assert "behind GRPO by -0.030" in setting_verdict(f)
    # three seed pairs: too few for the claim rule, which is not "cannot show" anything yet
    few = frame([("grpo", NAN, NAN, NAN), ("oracle", 0.058, 0.044, 0.076)], seeds=3)
    text = setting_verdict(few)
    assert "Oracle credit, the reference, is not tested yet (+0.058" in text
    assert "3 seed pairs with GRPO of the 5 the claim rule needs" in text
    assert "cannot show" not in text


def test_one_seed_names_no_winner_and_no_grpo_means_no_gain():
    f = frame([("grpo", NAN, NAN, NAN), ("a", 0.02, 0.02, 0.02), ("b", -0.01, -0.01, -0.01)], 1)
    text = setting_verdict(f)
    assert "no method is called ahead of GRPO" in text
    assert "from a (+0.020) to b (-0.010)" in text
    assert "Ahead" not in text and text.startswith("One seed per method:")
    assert "No GRPO runs" in setting_verdict(frame([("a", NAN, NAN, NAN)]))
    # methods with five seeds but GRPO with one: one pair each, and the verdict says why
    lone_grpo = frame([("grpo", NAN, NAN, NAN)], 1)
    five = frame([("a", 0.02, 0.02, 0.02), ("b", -0.01, -0.01, -0.01)], 5)
    text = setting_verdict(pd.concat([lone_grpo, five], ignore_index=True))
    assert text.startswith("GRPO has one seed: no intervals") and "Ahead" not in text


def test_a_method_with_one_seed_among_several_is_not_called_ahead():
    f = frame([("grpo", NAN, NAN, NAN), ("a", 0.03, 0.01, 0.05)])
    lone = frame([("b", 0.09, 0.09, 0.09)], seeds=1)  # a degenerate interval above 0
    text = setting_verdict(pd.concat([f, lone], ignore_index=True))
    assert "Ahead of GRPO in AUC (both 95% intervals above zero): a (+0.030" in text
    assert "b (" not in text and "Fewer than 5 seeds, so not tested: b." in text
    three = frame([("grpo", NAN, NAN, NAN), ("c", 0.05, 0.04, 0.06)], seeds=3)
    assert "Fewer than 5 seeds, so not tested: c." in setting_verdict(three)
