"""A setting's verdict says what its intervals say, and nothing its intervals do not."""

from __future__ import annotations

import pandas as pd

from creditbench.leaderboard.tables import accuracy_table
from creditbench.leaderboard.verdict import by_gain, setting_verdict


def frame(rows, seeds=5):
    """Rows of summarize()["methods"] for one setting: (method, gain, low, high)."""
    out = []
    for method, gain, low, high in rows:
        out.append(
            {
                "method": method,
                "n_seeds": seeds,
                "gain_auc": gain,
                "gain_auc_low": low,
                "gain_auc_high": high,
                "auc_iqm": 0.5 + (gain if gain == gain else 0.0),
                "auc_iqm_low": 0.45,
                "auc_iqm_high": 0.55,
                "final_iqm": 0.6,
                "final_iqm_low": 0.55,
                "final_iqm_high": 0.65,
                "rank_auc": 1,
                "rank_auc_shared": True,
            }
        )
    return pd.DataFrame(out)


NAN = float("nan")


def test_ahead_behind_and_level_follow_the_intervals_and_the_oracle_is_reported_apart():
    f = frame(
        [
            ("grpo", NAN, NAN, NAN),
            ("a", 0.03, 0.01, 0.05),
            ("b", 0.01, -0.01, 0.03),  # interval holds zero: not told apart
            ("c", -0.04, -0.06, -0.02),
            ("oracle", 0.05, 0.02, 0.08),
        ]
    )
    text = setting_verdict(f)
    assert "Ahead of GRPO in AUC (95% interval above zero): a (+0.030 [+0.010, +0.050])." in text
    assert "Behind it: c (-0.040 [-0.060, -0.020])." in text
    assert "1 not told apart from GRPO." in text
    assert "Oracle credit, the reference, is ahead of GRPO by +0.050 [+0.020, +0.080]" in text
    assert list(by_gain(f)["method"]) == ["oracle", "a", "b", "grpo", "c"]
    headers, rows = accuracy_table(f)
    assert [r[1] for r in rows] == ["oracle", "a", "b", "grpo", "c"]
    assert rows[3][3] == "0 (baseline)"


def test_an_oracle_level_with_grpo_says_the_setting_cannot_show_what_credit_buys():
    f = frame([("grpo", NAN, NAN, NAN), ("a", 0.0, -0.02, 0.02), ("oracle", 0.01, -0.01, 0.03)])
    text = setting_verdict(f)
    assert text.startswith("No method is ahead of GRPO in AUC beyond its 95% interval.")
    assert "cannot show what better credit buys" in text
    f = frame([("grpo", NAN, NAN, NAN), ("oracle", -0.03, -0.05, -0.01)])
    assert "behind GRPO by -0.030" in setting_verdict(f)


def test_one_seed_names_no_winner_and_no_grpo_means_no_gain():
    f = frame([("grpo", NAN, NAN, NAN), ("a", 0.02, 0.02, 0.02), ("b", -0.01, -0.01, -0.01)], 1)
    text = setting_verdict(f)
    assert "no method is called ahead of GRPO" in text
    assert "from a (+0.020) to b (-0.010)" in text
    assert "Ahead" not in text
    assert "No GRPO runs" in setting_verdict(frame([("a", NAN, NAN, NAN)]))


def test_a_method_with_one_seed_among_several_is_not_called_ahead():
    f = frame([("grpo", NAN, NAN, NAN), ("a", 0.03, 0.01, 0.05)])
    lone = frame([("b", 0.09, 0.09, 0.09)], seeds=1)  # a degenerate interval above 0
    text = setting_verdict(pd.concat([f, lone], ignore_index=True))
    assert "Ahead of GRPO in AUC (95% interval above zero): a (+0.030" in text
    assert "b (" not in text and "One seed, so not tested: b." in text
