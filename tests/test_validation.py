"""The validation report: oracle - GRPO gaps paired by seed, drift, precision, length trend."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from creditbench.leaderboard.validation import length_trend, validation_markdown, validation_table
from creditbench.tools.cli.main import main


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


def test_a_base_recipe_is_a_setting_and_the_length_trend_reads_lengths():
    """A base policy stopped early (``bootstrap_options.steps``) is the hard regime: its rows
    stay apart from the default's, and each regime has its own length trend; a setting whose
    other task options differ (a slip rate) is not part of the series."""
    rows = []
    for options, gap, setting in (
        ("steps=4", 0.01, "bootstrap_options.steps=400,"),
        ("steps=6", 0.03, "bootstrap_options.steps=400,"),
        ("steps=12", 0.08, "bootstrap_options.steps=400,"),
        ("slip_rate=0.1,steps=10", 0.00, "bootstrap_options.steps=400,"),
        ("steps=4", 0.02, ""),
    ):
        for method, shift in (("grpo", 0.0), ("oracle", gap)):
            finals = [0.3 + shift, 0.4 + shift]
            rows += run_rows(options, f"{setting}prompts_per_step=4", method, finals, finals)
    result = validation_table(pd.DataFrame(rows), reps=200)
    hard = "bootstrap_options.steps=400,prompts_per_step=4"
    assert set(result["setting"]) == {hard, "prompts_per_step=4"}
    assert list(result.loc[result["setting"] == hard, "options"]) == [
        "slip_rate=0.1,steps=10",
        "steps=4",
        "steps=6",
        "steps=12",
    ]  # natural order
    names, trend = length_trend(result)
    assert names == [f"steps={n}-{hard}" for n in (4, 6, 12)]  # the runs' folder names
    assert [n for n, _ in trend] == [4, 6, 12]
    assert [g for _, g in trend] == pytest.approx([0.01, 0.03, 0.08])


def test_validate_report_only_on_a_folder_without_runs(tmp_path, capsys):
    # refused as the leaderboard refuses it, nothing written (the library still reports it)
    assert main(["validate", "--report-only", "--results", str(tmp_path)]) == 2
    assert "holds no finished run" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    assert "No finished runs" in validation_markdown(tmp_path)
    assert main(["validate", "--report-only", "--results", str(tmp_path / "missing")]) == 2
    assert "--results" in capsys.readouterr().err
    assert "Does not separate" not in validation_markdown(tmp_path)


def test_too_few_seeds_claim_no_gap_whatever_their_signs():
    grpo_final = [0.30, 0.50, 0.40, 0.60]
    oracle_final = [x + 0.05 for x in grpo_final]
    table = pd.DataFrame(
        run_rows("steps=8", "prompts_per_step=4", "grpo", grpo_final, grpo_final)
        + run_rows("steps=8", "prompts_per_step=4", "oracle", oracle_final, oracle_final)
    )
    (row,) = validation_table(table, reps=500).itertuples()
    assert row.final_low == pytest.approx(0.05)  # the interval is reported
    assert not row.final_separates and not row.auc_separates  # but 4 pairs claim nothing


def test_a_setting_of_one_method_is_named_apart_not_a_row_of_nan(monkeypatch, tmp_path):
    """The optimizer grid ran some cells with GRPO only: the report names them under the
    table with each method's seeds, instead of a row of 0 seeds and nan."""
    finals = [0.30, 0.50, 0.40, 0.60, 0.35]
    table = pd.DataFrame(
        run_rows("steps=4", "lr=5e-05", "grpo", finals, finals)
        + run_rows("steps=4", "lr=5e-05", "oracle", [x + 0.05 for x in finals], finals)
        + run_rows("steps=4", "lr=0.00015", "grpo", finals[:2], finals[:2])
    )
    from creditbench.leaderboard import validation

    monkeypatch.setattr(validation, "collect_runs", lambda _: (table, []))
    report = validation_markdown(tmp_path, reps=200)
    rows = [line for line in report.splitlines() if line.startswith("| steps=4")]
    assert len(rows) == 1 and "lr=5e-05" in rows[0]  # no row of 0 seeds and nan for 0.00015
    assert "| 0 |" not in report and report.count("lr=0.00015") == 1
    assert "nothing to compare: steps=4-lr=0.00015 (grpo 2 seeds, oracle 0)." in report

    grpo_only = table[table["setting"] == "lr=0.00015"]
    monkeypatch.setattr(validation, "collect_runs", lambda _: (grpo_only, ["x: unreadable"]))
    report = validation_markdown(tmp_path, reps=200)
    assert "No setting has finished runs of grpo and oracle at the same seed." in report
    assert "(grpo 2 seeds, oracle 0)" in report
    assert "Skipped runs:\n- x: unreadable" in report  # warnings on every path


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
    assert "-0.040 [-0.040, -0.040] t [-0.040, -0.040], 0/5 †" in report
    assert "**Reversed:** GRPO is ahead of oracle credit beyond noise at: steps=4" in report
    assert "**Does not separate:**" in report  # nothing is ahead in oracle's favour


def test_efficiency_on_trained_responses_and_the_csv():
    import numpy as np

    from creditbench.leaderboard.validation import (
        CSV_COLUMNS,
        auc_over_responses,
        responses_to_reach,
        validation_csv,
    )

    xs, ys = np.array([0.0, 100.0, 200.0]), np.array([0.2, 0.4, 0.4])
    assert auc_over_responses(xs, ys, 200.0) == pytest.approx((0.3 * 100 + 0.4 * 100) / 200)
    assert auc_over_responses(xs, ys, 100.0) == pytest.approx(0.3)  # cut at the horizon
    assert responses_to_reach(xs, ys, 0.3) == pytest.approx(50.0)
    assert responses_to_reach(xs, ys, 0.5) == float("inf")

    rows, evals = [], []
    for method, slope in (("grpo", 0.001), ("oracle", 0.002)):
        for seed in range(3):
            run = f"{method}-s{seed}"
            responses = [0.0, 100.0, 200.0 if method == "grpo" else 150.0]
            accs = [0.2 + slope * r for r in responses]
            rows.append(
                {
                    "kind": "run", "run": run, "method": method, "task": "chain",
                    "options": "steps=4", "setting": "default", "seed": seed,
                    "final_accuracy": accs[-1], "auc": float(np.mean(accs)),
                    "start_accuracy": accs[0], "accuracy_metric": "sampled_accuracy",
                }
            )  # fmt: skip
            evals += [
                {
                    "kind": "eval", "run": run, "method": method, "budget_fraction": f,
                    "responses_trained": r, "sampled_accuracy": a,
                }
                for f, r, a in zip((0.0, 0.5, 1.0), responses, accs, strict=True)
            ]  # fmt: skip
    (row,) = validation_table(pd.DataFrame(rows + evals), reps=200).itertuples()
    assert row.seeds == 3 and row.start_acc == pytest.approx(0.2)
    assert row.responses_horizon == 150.0  # the oracle's runs trained on fewer responses
    assert row.threshold == pytest.approx(0.2 + 0.5 * 0.2)  # halfway to GRPO's final 0.4
    assert row.reach_grpo == pytest.approx(100.0) and row.reach_oracle == pytest.approx(50.0)
    # on 0..150 responses: GRPO averages 0.275, the oracle 0.35
    assert row.auc_responses_gap == pytest.approx(0.075)
    # two evaluations after the start are too few to fit a saturating curve to
    assert math.isnan(row.asymptote_grpo) and not row.saturates_oracle
    text = validation_csv(validation_table(pd.DataFrame(rows + evals), reps=200))
    # where GRPO did not improve there is no halfway point to reach
    flat = pd.DataFrame(rows + evals)
    flat.loc[(flat["kind"] == "run") & (flat["method"] == "grpo"), "final_accuracy"] = 0.1
    (row,) = validation_table(flat, reps=200).itertuples()
    assert math.isnan(row.threshold) and math.isnan(row.reach_oracle)
    header, line = text.strip().splitlines()
    assert header.split(",") == list(CSV_COLUMNS)
    assert line.startswith("steps=4 default,exploratory,3,0.2000,")


def test_online_accuracy_gap_gain_and_the_suites_setting_name(monkeypatch, tmp_path):
    """The training stream's mean reward is paired like the evaluation's figures; a gap there
    alone is named as such; the setting is called by its runs' folder name."""
    rows = []
    for method, shift in (("grpo", 0.0), ("oracle", 0.02)):
        for seed in range(6):
            rows.append(
                {
                    "kind": "run", "run": f"r/chain-hard-steps=8-{method}-s{seed}",
                    "method": method, "task": "chain", "options": "steps=8",
                    "setting": "bootstrap_options.steps=650", "seed": seed,
                    "final_accuracy": 0.25 + (0.01 if seed % 2 else -0.01),  # no final gap
                    "auc": 0.2, "start_accuracy": 0.15,
                    "reward_mean": 0.2 + 0.01 * seed + shift,
                    "all_fail_frac": 0.5 if method == "grpo" else 0.4,
                }
            )  # fmt: skip
    table = pd.DataFrame(rows)
    (row,) = validation_table(table, reps=300).itertuples()
    assert row.name == "chain-hard-steps=8"
    assert row.online_gap == pytest.approx(0.02) and row.online_separates
    assert row.online_low == pytest.approx(0.02)
    assert row.grpo_gain == pytest.approx(0.10) and row.all_fail_grpo == pytest.approx(0.5)
    assert not row.final_separates and not row.auc_separates

    from creditbench.leaderboard import validation

    monkeypatch.setattr(validation, "collect_runs", lambda _: (table, []))
    report, csv = validation.validation_report(tmp_path, reps=300)
    assert "| chain-hard-steps=8 | 6 | 0.150 |" in report
    assert "**Online only:**" in report and "chain-hard-steps=8" in report.split("Online only")[1]
    assert csv.splitlines()[1].startswith("chain-hard-steps=8,exploratory,6,0.1500,")


def test_a_claim_needs_the_t_interval_too_and_counts_the_seeds_ahead():
    """Five pairs all of one sign put the bootstrap interval above 0 whatever their spread;
    one large gap and four tiny ones leave the t interval across 0, so no claim is made."""
    grpo_final = [0.30, 0.50, 0.40, 0.60, 0.35]
    gaps = [0.5, 0.01, 0.01, 0.01, 0.01]
    oracle_final = [x + gap for x, gap in zip(grpo_final, gaps, strict=True)]
    table = pd.DataFrame(
        run_rows("steps=4", "prompts_per_step=4", "grpo", grpo_final, grpo_final)
        + run_rows("steps=4", "prompts_per_step=4", "oracle", oracle_final, grpo_final)
    )
    (row,) = validation_table(table, reps=500).itertuples()
    assert row.final_low > 0 and row.final_t_low < 0
    assert not row.final_separates and row.final_ahead == 5 and row.final_pairs == 5


def test_t_interval_is_the_mean_plus_minus_t_times_the_standard_error():
    import math

    from creditbench.leaderboard.stats import t_interval

    got = t_interval([1.0, 2.0, 3.0, float("nan")])
    half = 4.302652729911275 * 1.0 / math.sqrt(3)  # t_{0.975, 2}, s = 1
    assert (got.point, got.n) == (2.0, 3)
    assert got.low == pytest.approx(2.0 - half) and got.high == pytest.approx(2.0 + half)
    assert t_interval([0.5]).low == 0.5 and t_interval([]).n == 0


def test_the_length_line_claims_growth_only_where_the_intervals_are_apart(monkeypatch, tmp_path):
    """A gap larger at 12 steps than at 8 whose intervals overlap is reported as within noise,
    not as growth with length."""
    from creditbench.leaderboard import validation

    grpo = [0.30, 0.50, 0.40, 0.60, 0.35]
    rows = []
    for options, gaps in (
        ("steps=8", [0.01, 0.03, 0.02, 0.04, 0.00]),
        ("steps=12", [0.02, 0.04, 0.03, 0.05, 0.01]),
    ):
        oracle = [g + d for g, d in zip(grpo, gaps, strict=True)]
        rows += run_rows(options, "default", "grpo", grpo, grpo)
        rows += run_rows(options, "default", "oracle", oracle, oracle)
    table = pd.DataFrame(rows)
    monkeypatch.setattr(validation, "collect_runs", lambda _: (table, []))
    report = validation_markdown(tmp_path, reps=500)
    assert "is larger at greater length, but within noise" in report
    assert "grows with length beyond noise" not in report


def test_the_confirmatory_seeds_are_rows_of_their_own(monkeypatch, tmp_path):
    """Seeds 10-19 of the frozen protocol form their own row beside seeds 0-9 of the same
    setting, so the claim is read on the confirmatory set alone; the CSV names the set."""
    from creditbench.leaderboard import validation

    grpo = [0.30, 0.50, 0.40, 0.60, 0.35]
    first = run_rows("steps=10", "default", "grpo", grpo, grpo)
    first += run_rows("steps=10", "default", "oracle", [g + 0.05 for g in grpo], grpo)
    later = run_rows("steps=10", "default", "grpo", grpo, grpo)
    later += run_rows("steps=10", "default", "oracle", [g - 0.01 for g in grpo], grpo)
    for row in later:
        row["seed"] += 10
        row["run"] = row["run"].replace(f"-s{row['seed'] - 10}", f"-s{row['seed']}")
    table = pd.DataFrame(first + later)
    rows = validation_table(table, reps=300)
    assert list(rows["seed_set"]) == ["confirmatory", "exploratory"]
    by_set = rows.set_index("seed_set")
    assert by_set.loc["exploratory", "final_gap"] == pytest.approx(0.05)
    assert by_set.loc["confirmatory", "final_gap"] == pytest.approx(-0.01)
    assert by_set.loc["confirmatory", "seeds"] == 5
    assert by_set.loc["confirmatory", "name"].endswith("(confirmatory)")
    monkeypatch.setattr(validation, "collect_runs", lambda _: (table, []))
    report, csv_text = validation.validation_report(tmp_path, reps=300)
    assert csv_text.splitlines()[0].startswith("setting,seed_set,seeds,")
    assert "(confirmatory)" in report
