"""What the board says of each setting: its name as the suite gives it ("the hard setting"),
the options on the line below (the heading was the raw option string), and, where its wall
time a step compares raw steps, that it does: a method's runs on a loaded machine rendered
beside committed records made on a quieter one (docs/contributing.md, "Compare against the
published runs") look slower for the load alone."""

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


def test_a_setting_the_suite_names_is_headed_by_its_name_and_its_options_below(tmp_path):
    root = tmp_path / "runs"
    for seed in range(2):
        for method in ("grpo", "dapo"):
            make_run(root, f"chain-hard-steps=10-{method}-s{seed}", method, seed, steps=10)
            make_run(root, f"chain-steps=4-{method}-s{seed}", method, seed, steps=4)
    page = render(root, tmp_path / "board", reps=50)["markdown"].read_text()
    assert "\n## The hard setting · chain\n\nOptions: steps=10\n" in page
    assert "## chain · steps=10" not in page
    # a setting no suite named keeps its task and options as the heading
    assert "\n## chain · steps=4\n" in page


def test_runs_of_one_setting_under_two_names_are_not_named(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "chain-hard-steps=4-grpo-s0", "grpo", 0)
    make_run(root, "chain-easy-steps=4-grpo-s1", "grpo", 1)
    page = render(root, tmp_path / "board", reps=50)["markdown"].read_text()
    assert "\n## chain · steps=4\n" in page and "setting · chain" not in page


def test_a_name_two_settings_share_names_neither(tmp_path):
    """The validation suite's grid: one label (slips) over two chain lengths; each keeps its
    option string."""
    root = tmp_path / "runs"
    for steps in (4, 8):
        make_run(root, f"chain-slips-steps={steps}-grpo-s0", "grpo", 0, steps=steps)
    page = render(root, tmp_path / "board", reps=50)["markdown"].read_text()
    assert "\n## chain · steps=4\n" in page and "\n## chain · steps=8\n" in page
    assert "The slips setting" not in page
