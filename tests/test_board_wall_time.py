"""The board's wall time a step says when it compares raw steps: a method's runs on a loaded
machine rendered beside committed records made on a quieter one (docs/contributing.md,
"Compare against the published runs") look slower for the load alone."""

from __future__ import annotations

from fake_runs import make_run

from creditbench.leaderboard import render


def board(tmp_path, eval_length_of_grpo):
    root = tmp_path / "runs"
    for seed in range(2):
        make_run(root, f"grpo-s{seed}", "grpo", seed, eval_length=eval_length_of_grpo)
        make_run(root, f"dapo-s{seed}", "dapo", seed, eval_length=12.0)
    return render(root, tmp_path / "board", reps=50)["markdown"].read_text()


def test_runs_without_their_evaluations_pace_are_said_to_compare_raw_steps(tmp_path):
    page = board(tmp_path, eval_length_of_grpo=None)
    assert "FLOPs / wall time a step" in page
    assert (
        "Wall time a step: 2 of the setting's 4 runs record no pace of their evaluations, so it "
        "is read from the raw steps, each under the load its machine had then"
    ) in page


def test_runs_that_all_record_their_pace_need_no_such_sentence(tmp_path):
    page = board(tmp_path, eval_length_of_grpo=12.0)
    assert "FLOPs / wall time a step" in page
    assert "record no pace of their evaluations" not in page
