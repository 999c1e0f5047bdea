"""OTB's ablation ladder (leaderboard/ablation.py, scripts/ablation_lines.py), on records made
up by hand: each rung read against the one before it, on each axis the records measure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_claims import HARD, table
from test_claims_axes import with_samples

from creditbench.leaderboard.ablation import (
    CARRIES,
    END,
    NOT_TOLD_APART,
    OTB_LADDER,
    START,
    TAKES_AWAY,
    ladder_block,
    ladder_steps,
)

ROOT = Path(__file__).resolve().parents[1]
NOISE = [0.001, -0.002, 0.0015, -0.001, 0.0005, -0.0005, 0.002, -0.0015, 0.001, -0.001]


def ladder_table(setting: str = HARD):
    """GRPO; otb_norm 0.02 ahead of it; otb_uniform level with otb_norm, within noise; otb 0.01
    behind otb_uniform: at 10 seeds each."""
    norm = [0.02 + n for n in NOISE]
    uniform = [g + n for g, n in zip(norm, reversed(NOISE), strict=True)]
    otb = [g - 0.01 + n / 2 for g, n in zip(uniform, NOISE, strict=True)]
    return table({"otb_norm": norm, "otb_uniform": uniform, "otb": otb}, setting)


def test_each_rung_is_read_against_the_one_before_and_the_steps_add_up():
    runs = ladder_table()
    steps, total, shared = ladder_steps(runs, OTB_LADDER, "hard", "compute", reps=500)
    assert [(s.rung.row, s.below, s.word) for s in steps] == [
        ("otb_norm", "grpo", CARRIES),
        ("otb_uniform", "otb_norm", NOT_TOLD_APART),
        ("otb", "otb_uniform", TAKES_AWAY),
    ]
    assert shared == 10
    assert steps[0].gain.point == pytest.approx(0.02, abs=1e-9)
    assert steps[2].gain.point == pytest.approx(-0.01, abs=1e-9)
    assert sum(s.gain.point for s in steps) == pytest.approx(total.gain.point)
    # the samples axis is not measured by these records: no steps there
    assert ladder_steps(runs, OTB_LADDER, "hard", "samples") is None


def test_the_steps_are_read_on_the_seeds_every_rung_shares():
    runs = ladder_table()
    # otb_uniform lost its seeds 7-9: every cell of the row is read on seeds 0-6, so the
    # steps still add up to the total, which is read on those seven seeds too
    lost = runs.run.str.contains("-otb_uniform-s[789]$")
    steps, total, shared = ladder_steps(runs[~lost], OTB_LADDER, "hard", "compute", reps=500)
    assert shared == 7 and all(s.gain.pairs == 7 for s in [*steps, total])
    assert sum(s.gain.point for s in steps) == pytest.approx(total.gain.point)
    # a rung with no run at all: each cell reads its own two rows' seeds, and nothing is shared
    without = runs[~runs.run.str.contains("-otb_uniform-")]
    steps, total, shared = ladder_steps(without, OTB_LADDER, "hard", "compute", reps=500)
    assert shared == 0 and total.gain.pairs == 10 and steps[0].gain.pairs == 10
    assert steps[1].gain is None and steps[1].why == "no runs of otb_uniform in the hard setting"


def test_the_block_says_which_rungs_carry_the_gain_and_where_rows_are_missing():
    runs = ladder_table()
    block = ladder_block(runs, reps=500, sources="`docs/results/standard`")
    assert block.startswith(START) and block.endswith(END)
    assert "In the hard setting at equal compute, otb is ahead of grpo (+0.010 " in block
    assert (
        "the normalisation carries part of it; the weights take part of it away; the baseline "
        "is not told apart from 0." in block
    )
    assert "| hard · compute (AUC over the FLOP budget), the 10 seeds every rung shares |" in block
    # the easy setting has no runs: every cell says why, and no sentence speaks of it
    assert "not read: no runs of otb_norm and grpo in the easy setting" in block
    assert "In the easy setting" not in block
    # a missing inner rung: its step and the next are not read, and no sentence is made
    without = runs[~runs.run.str.contains("-otb_uniform-")]
    block = ladder_block(without, reps=500)
    assert "not read: no runs of otb_uniform in the hard setting" in block
    assert "No setting has every rung's runs yet." in block


def test_where_the_top_rung_is_not_ahead_the_sentence_reads_each_rung_against_the_one_before():
    from creditbench.leaderboard.ablation import summary

    runs = ladder_table()
    behind = runs.copy()
    top = behind.run.str.contains("-otb-")
    behind.loc[top, "auc"] -= 0.05  # otb now 0.04 behind grpo
    behind["auc_sampled_accuracy"] = behind["auc"]
    steps, total, _ = ladder_steps(behind, OTB_LADDER, "hard", "compute", reps=500)
    sentence = summary("hard", "compute", steps, total)
    assert sentence.startswith("In the hard setting at equal compute, otb is behind grpo (")
    assert sentence.endswith(
        ": the normalisation is ahead of the rung before it; the weights are behind the rung "
        "before them; the baseline is not told apart from the rung before it."
    )


def test_the_samples_axis_is_read_where_the_records_measure_it():
    runs = with_samples(ladder_table(), 0.0, {})  # every row level with GRPO at equal samples
    steps, total, _ = ladder_steps(runs, OTB_LADDER, "hard", "samples", reps=500)
    assert [s.word for s in steps] == [NOT_TOLD_APART] * 3
    assert all(s.gain.point == pytest.approx(0.0) for s in [*steps, total])


def script(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "scripts" / "ablation_lines.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_the_script_rewrites_the_block_and_check_reports_a_stale_one(tmp_path):
    board = ROOT / "docs" / "results" / "standard" / "runs.csv"  # the board's GRPO and OTB
    (tmp_path / "ablations").mkdir()  # no ablation rows have run
    records = ("--board", str(board), "--ablations", str(tmp_path / "ablations"))
    page = tmp_path / "otb.md"
    page.write_text(f"# OTB\n\n{START}\nstale block\n{END}\n\n## References\n")
    check = script(*records, "--page", str(page), "--check", "--reps", "200")
    assert check.returncode == 1 and "differs from the records" in check.stdout
    assert script(*records, "--page", str(page), "--reps", "200").returncode == 0
    text = page.read_text()
    assert "| easy · compute (AUC over the FLOP budget) | not read: no runs of otb_norm" in text
    assert "stale block" not in text
    assert text.endswith(f"{END}\n\n## References\n")
    again = script(*records, "--page", str(page), "--check", "--reps", "200")
    assert again.returncode == 0, again.stdout
    # a page without the markers, or records that are not there: exit 2, the page untouched
    bare = tmp_path / "bare.md"
    bare.write_text("# OTB\n")
    refused = script(*records, "--page", str(bare))
    assert refused.returncode == 2 and "no markers" in refused.stderr
    assert bare.read_text() == "# OTB\n"
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    for argv, said in (
        (["--board", str(tmp_path / "nowhere")], "--board: "),
        (["--page", str(tmp_path / "nosuch.md")], "--page: "),
        (["--page", str(tmp_path)], "--page: "),
        (["--board", str(tmp_path / "other.csv")], "other.csv: not a leaderboard's runs.csv"),
        (["--reps", "1000000000"], "--reps: must be at most 100,000"),
    ):
        done = script(*records, "--page", str(page), *argv)
        assert done.returncode == 2 and said in done.stderr, (argv, done.stderr)
        assert "Traceback" not in done.stderr
    assert page.read_text() == text  # none of them wrote


def test_the_shipped_page_s_block_matches_the_records():
    assert script("--check").returncode == 0
