"""Committed run records (``runs.csv``) stand in for the run folders they were rendered from."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
from fake_runs import SLOPE, make_run

from creditbench.leaderboard import LeaderboardError, collect_runs, render
from creditbench.leaderboard.board import summarize
from creditbench.tools.cli.main import main as cli_main


@pytest.fixture
def published(tmp_path):
    """A snapshot's folders rendered once: (the folder, its runs.csv)."""
    root = tmp_path / "published"
    for method in SLOPE:
        for seed in range(3):
            make_run(root, f"{method}-s{seed}", method, seed)
    return root, render(root, reps=50)["runs_csv"]


def test_a_runs_csv_gives_the_statistics_of_its_folders(published):
    folder, records = published
    from_folders, _ = collect_runs(folder)
    from_records, warnings = collect_runs(records)
    assert warnings == []
    runs = from_records[from_records["kind"] == "run"]
    assert len(runs) == 9 and runs["config_digest"].str.fullmatch(r"[0-9a-f]{12}").all()
    assert set(runs["commit"]) == {"c0ffee" * 6 + "abcd"}
    # the wall time of each run and its evaluations' share, which plan a campaign
    wall = dict(zip(runs["method"], runs["wall_seconds"], strict=True))
    assert wall == {"grpo": 100.0, "dapo": 120.0, "oracle": 150.0}
    assert set(runs["eval_seconds"]) == {10.0}  # 5 evaluations of 2 s
    a = summarize(from_folders, reps=200)
    b = summarize(from_records, reps=200)
    for name in ("methods", "curves"):
        pd.testing.assert_frame_equal(a[name], b[name], check_dtype=False)


def test_the_cost_of_a_step_is_the_median_training_step_so_a_paused_run_moves_it_little(tmp_path):
    """A run paused part-way (a shared machine, a CI job beside the campaign) records a long
    wall time and one long step; the board's wall time a step, read from the median training
    step, still gives each method's ratio to GRPO."""
    root = tmp_path / "runs"
    for method in SLOPE:
        for seed in range(3):
            make_run(root, f"{method}-s{seed}", method, seed)
    shutil.rmtree(root / "grpo-s0")
    make_run(root, "grpo-s0", "grpo", 0, step_seconds=[0.5, 60.0, 0.5, 0.5], wall_seconds=1000.0)
    table, _ = collect_runs(root)
    runs = table[table["kind"] == "run"].set_index("run")
    assert runs.loc["grpo-s0", "step_seconds"] == 0.5 and runs.loc["dapo-s1", "step_seconds"] == 0.6
    methods = summarize(table, reps=50)["methods"].set_index("method")
    assert methods.loc["dapo", "wall_per_step_ratio"] == pytest.approx(1.2)
    assert methods.loc["oracle", "wall_per_step_ratio"] == pytest.approx(1.5)
    assert methods.loc["dapo", "flops_per_step_ratio"] == pytest.approx(1.0)
    # records written before the median step was collected: wall time less evaluations a step
    old = table.drop(columns="step_seconds")
    old = old[~old["run"].eq("grpo-s0")]  # (the paused run would move this mean)
    methods = summarize(old, reps=50)["methods"].set_index("method")
    assert methods.loc["dapo", "wall_per_step_ratio"] == pytest.approx((120 - 10) / (100 - 10))


def test_a_runs_step_is_read_over_its_own_evaluations_pace_so_the_load_it_met_divides_out(
    tmp_path,
):
    """Two machines' loads: DAPO's runs met twice GRPO's load, so both their steps and their
    evaluations took twice as long; a method whose evaluation samples are twice as long pays for
    its longer evaluations, not its training steps. Read over each run's evaluation pace (its
    evaluation seconds over its samples' mean length), both come out at their own cost."""
    root = tmp_path / "runs"
    for seed in range(3):
        make_run(root, f"grpo-s{seed}", "grpo", seed, step_seconds=[0.5] * 4, eval_length=100)
        make_run(  # 1.2x GRPO's work a step, under twice the load
            root, f"dapo-s{seed}", "dapo", seed, step_seconds=[1.2] * 4, eval_seconds=4.0,
            eval_length=100,
        )  # fmt: skip
        make_run(  # GRPO's work a step; its samples twice as long, so its evaluations too
            root, f"oracle-s{seed}", "oracle", seed, step_seconds=[0.5] * 4, eval_seconds=4.0,
            eval_length=200,
        )  # fmt: skip
    table, _ = collect_runs(root)
    methods = summarize(table, reps=50)["methods"].set_index("method")
    assert methods.loc["dapo", "wall_per_step_ratio"] == pytest.approx(1.2)  # raw: 2.4
    assert methods.loc["oracle", "wall_per_step_ratio"] == pytest.approx(1.0)
    # one run without its evaluations' lengths: the whole setting reads the raw steps
    make_run(root, "grpo-s3", "grpo", 3, step_seconds=[0.5] * 4)
    table, _ = collect_runs(root)
    methods = summarize(table, reps=50)["methods"].set_index("method")
    assert methods.loc["dapo", "wall_per_step_ratio"] == pytest.approx(2.4)


def test_new_runs_render_against_committed_records_with_labels_over_both(published, tmp_path):
    _, records = published
    mine = tmp_path / "mine"
    for seed in range(3):
        make_run(mine, f"mymethod-s{seed}", "dapo", seed, rollout={"group_size": 4})
    make_run(mine, "grpo-s0", "grpo", 0)  # a re-run of a committed run: counted once
    out = tmp_path / "board"
    paths = render([records, mine], out, reps=50)
    table = pd.read_csv(paths["runs_csv"])
    runs = table[table["kind"] == "run"]
    assert len(runs) == 9 + 3
    # The group size differs only in the new runs, so it becomes their setting label.
    assert set(runs.loc[runs["run"].str.startswith("mymethod"), "setting"]) == {
        "rollout.group_size=4"
    }
    assert set(runs.loc[~runs["run"].str.startswith("mymethod"), "setting"]) == {
        "rollout.group_size=8"
    }
    text = paths["markdown"].read_text()
    assert "duplicate of grpo-s0" in text
    assert "rollout.group_size=4" in text


def test_the_cli_renders_a_runs_csv_with_new_folders_and_needs_out_for_a_file(
    published, tmp_path, capsys
):
    _, records = published
    mine = tmp_path / "mine"
    make_run(mine, "rloo-s0", "rloo", 0)
    out = tmp_path / "board"
    assert (
        cli_main(["leaderboard", str(records), str(mine), "--out", str(out), "--reps", "20"]) == 0
    )
    assert "rloo" in (out / "leaderboard.md").read_text()
    capsys.readouterr()
    assert cli_main(["leaderboard", str(records)]) == 2
    assert "--out" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda f: f.drop(columns=["config"]), r"no column config"),
        (lambda f: f.assign(kind=f["kind"].replace({"eval": "evaluation"})), r":2: kind"),
        (lambda f: f.assign(config=f["config"].str.replace('"seed":', '"seed_":')), r"config says"),
        (lambda f: f.assign(config=f["config"].str.replace("{", "[", n=1)), r"not a JSON object"),
        (
            lambda f: f.assign(config=f["config"].str.replace('"lr":', '"lr": 1, "x":')),
            r"config_digest",
        ),
        (lambda f: f[f["kind"] == "run"], r"has no evaluation rows"),
        (lambda f: f[f["kind"] == "eval"], r"no run row"),
    ],
)
def test_a_malformed_runs_csv_is_one_error_naming_the_file_and_nothing_is_written(
    published, tmp_path, edit, message
):
    _, records = published
    broken = tmp_path / "broken.csv"
    edit(pd.read_csv(records)).to_csv(broken, index=False)
    out = tmp_path / "board"
    with pytest.raises(LeaderboardError, match=message) as caught:
        render(broken, out, reps=20)
    assert str(broken) in str(caught.value)
    assert not out.exists()


def test_a_suite_manifest_next_to_a_runs_csv_still_says_how_much_of_the_suite_it_holds(
    published, tmp_path
):
    import json

    _, records = published
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "runs.csv").write_bytes(records.read_bytes())
    runs = [
        {"name": f"{m}-s{s}", "setting": "chain"}
        for m in ("grpo", "dapo", "oracle", "rloo")
        for s in range(3)
    ]
    (snapshot / "suite-demo.json").write_text(json.dumps({"suite": "demo", "runs": runs}))
    md = render(snapshot / "runs.csv", tmp_path / "board", reps=20)["markdown"].read_text()
    assert "Suite demo: 9 of 12 runs finished" in md


def test_records_only_writes_just_runs_csv_and_validate_reads_it_as_it_reads_the_folder(
    published, tmp_path
):
    folder, _ = published
    out = tmp_path / "records"
    assert cli_main(["leaderboard", str(folder), "--out", str(out), "--records-only"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["runs.csv"]
    argv = ["validate", "--report-only", "--reps", "50", "--results"]
    assert cli_main([*argv, str(folder)]) == 0
    assert cli_main([*argv, str(out / "runs.csv")]) == 0
    assert (out / "validation.md").read_text() == (folder / "validation.md").read_text()
    assert "oracle" in (out / "validation.md").read_text()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["validate", "--report-only", "--reps", "0", "--results", "RECORDS"],
            "--reps: must be an integer >= 1",
        ),
        (["validate", "--report-only", "--results", "NOWHERE"], "neither a folder nor a runs.csv"),
        (["leaderboard", "NOWHERE"], "no such results directory or runs.csv"),
    ],
)
def test_bad_record_arguments_are_one_line_and_exit_2(published, tmp_path, capsys, argv, message):
    _, records = published
    argv = [
        str(records) if a == "RECORDS" else str(tmp_path / "x") if a == "NOWHERE" else a
        for a in argv
    ]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_run_config_that_is_not_utf8_or_gives_a_key_twice_is_named(tmp_path):
    from creditbench.harness.records.files import RunFormatError, read_run_config

    path = tmp_path / "config.yaml"
    path.write_bytes(b"seed: 1\n\xff: 2\n")
    with pytest.raises(RunFormatError, match="config.yaml: not UTF-8 text"):
        read_run_config(path)
    path.write_text("seed: 1\ntrain:\n  lr: 1.0e-5\n  lr: 5.0e-5\n")
    with pytest.raises(RunFormatError, match=r"config.yaml:4: invalid YAML: duplicate key 'lr'"):
        read_run_config(path)
