"""The validation report: oracle - GRPO gaps paired by seed, drift, precision, length trend."""

from __future__ import annotations

import pandas as pd
import pytest

from creditbench.harness.cli.main import main
from creditbench.leaderboard.validation import length_trend, validation_markdown, validation_table


def run_rows(options, setting, method, finals, aucs, drift=0.0, precision=0.1):
    return [
        {
            "kind": "run",
            "run": f"{options}-{setting}-{method}-s{seed}",
            "method": method,
            "task": "chain",
            "options": options,
            "setting": setting,
            "seed": seed,
            "final_accuracy": final,
            "auc": auc,
            "filler_entropy_drift": drift,
            "credit_precision": precision,
            "credit_chance": 0.1,
        }
        for seed, (final, auc) in enumerate(zip(finals, aucs, strict=True))
    ]


def test_gaps_are_paired_by_seed_and_flag_separation():
    grpo_final = [0.30, 0.50, 0.40, 0.60, 0.35]
    # seed by seed 0.05 above GRPO: a paired interval is tight although the seeds spread widely
    oracle_final = [x + 0.05 for x in grpo_final]
    mixed = [0.32, 0.45, 0.43, 0.58, 0.36]  # differences of both signs
    table = pd.DataFrame(
        run_rows("steps=8", "prompts_per_step=4", "grpo", grpo_final, grpo_final, drift=-0.3)
        + run_rows("steps=8", "prompts_per_step=4", "oracle", oracle_final, mixed, drift=0.01)
        + run_rows("steps=8", "prompts_per_step=4", "rloo", mixed, mixed)  # ignored
    )
    (row,) = validation_table(table, reps=500).itertuples()
    assert row.final_gap == pytest.approx(0.05)
    assert row.final_low == pytest.approx(0.05) and row.final_high == pytest.approx(0.05)
    assert row.final_separates
    assert row.auc_gap == pytest.approx(
        sum(m - g for m, g in zip(mixed, grpo_final, strict=True)) / 5
    )
    assert row.auc_low < 0 < row.auc_high and not row.auc_separates
    assert row.final_pairs == 5
    assert row.drift_grpo == pytest.approx(-0.3) and row.drift_oracle == pytest.approx(0.01)


def test_unpaired_seeds_are_left_out():
    table = pd.DataFrame(
        run_rows("steps=8", "default", "grpo", [0.1, 0.2, 0.3], [0.1, 0.2, 0.3])
        + run_rows("steps=8", "default", "oracle", [0.2, 0.4], [0.2, 0.4])
    )
    (row,) = validation_table(table, reps=200).itertuples()
    assert row.final_pairs == 2
    assert row.final_gap == pytest.approx(0.15)
    assert row.final_grpo == pytest.approx(0.15)  # seed 2 of GRPO has no pair
    assert row.final_oracle == pytest.approx(0.30)


def test_base_recipe_is_not_a_setting_and_the_length_trend_reads_lengths():
    rows = []
    for length, gap, setting in (
        (4, 0.01, "bootstrap_options.steps=600,"),
        (6, 0.03, "bootstrap_options.steps=600,"),
        (12, 0.08, ""),
    ):
        rows += run_rows(
            f"steps={length}", f"{setting}prompts_per_step=4", "grpo", [0.3, 0.4], [0.3, 0.4]
        )
        rows += run_rows(
            f"steps={length}",
            f"{setting}prompts_per_step=4",
            "oracle",
            [0.3 + gap, 0.4 + gap],
            [0.3 + gap, 0.4 + gap],
        )
    result = validation_table(pd.DataFrame(rows), reps=200)
    assert set(result["setting"]) == {"prompts_per_step=4"}
    assert list(result["options"]) == ["steps=4", "steps=6", "steps=12"]  # natural order
    setting, trend = length_trend(result)
    assert setting == "prompts_per_step=4"
    assert [n for n, _ in trend] == [4, 6, 12]
    assert [g for _, g in trend] == pytest.approx([0.01, 0.03, 0.08])


def test_validate_report_only_on_a_folder_without_runs(tmp_path, capsys):
    assert main(["validate", "--report-only", "--results", str(tmp_path)]) == 0
    assert "No finished runs" in (tmp_path / "validation.md").read_text()
    assert main(["validate", "--report-only", "--results", str(tmp_path / "missing")]) == 2
    assert "--results" in capsys.readouterr().err
    assert "Does not separate" not in validation_markdown(tmp_path)


def test_grpo_ahead_beyond_noise_is_reported_not_hidden(monkeypatch, tmp_path):
    grpo_final = [0.30, 0.50, 0.40, 0.60, 0.35]
    oracle_final = [x - 0.04 for x in grpo_final]  # seed by seed behind
    table = pd.DataFrame(
        run_rows("steps=4", "prompts_per_step=4", "grpo", grpo_final, grpo_final)
        + run_rows("steps=4", "prompts_per_step=4", "oracle", oracle_final, grpo_final)
    )
    (row,) = validation_table(table, reps=500).itertuples()
    assert row.final_reversed and not row.final_separates
    assert not row.auc_reversed and not row.auc_separates  # equal AUCs: no gap either way

    from creditbench.leaderboard import validation

    monkeypatch.setattr(validation, "collect_runs", lambda _: (table, []))
    report = validation_markdown(tmp_path, reps=500)
    assert "-0.040 [-0.040, -0.040] †" in report
    assert "**Reversed:** GRPO is ahead of oracle credit beyond noise at: steps=4" in report
    assert "**Does not separate:**" in report  # nothing is ahead in oracle's favour
