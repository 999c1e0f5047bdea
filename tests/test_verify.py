"""`creditbench verify`: the comparison of a run's records with its re-run, the CPU fields of
environment.json it reads, and the verb's refusals."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from fake_runs import make_run

from creditbench.harness.records.files import pack_run
from creditbench.harness.records.provenance import capture_environment
from creditbench.tools.verify import compare_runs, find_run, format_comparison, read_records

# --- environment.json ---------------------------------------------------------------------------


def test_environment_records_the_cpu_and_its_kernels(monkeypatch):
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.setenv("MKL_CBWR", "AVX2")
    env = capture_environment()
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert env["kernel_pins"] == {"MKL_CBWR": "AVX2"}
    cpuinfo = Path("/proc/cpuinfo")
    names = [
        line.partition(":")[2].strip()
        for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
        if line.partition(":")[0].strip() == "model name"
    ]
    if names:
        assert env["cpu_model"] == names[0]
    json.dumps(env)


# --- the comparison -----------------------------------------------------------------------------


def _published_and_copy(tmp_path: Path) -> tuple[Path, Path]:
    """A finished fake run with a summary that has evaluations, and a byte-for-byte copy."""
    run = make_run(tmp_path / "published", "grpo-s0", "grpo", 0)
    summary = run.read_summary() or {}
    summary.update(final_eval={"sampled_accuracy": 0.4, "step": 4}, auc={"sampled_accuracy": 0.35})
    run.write_summary(summary)
    copy = tmp_path / "rerun" / "grpo-s0"
    shutil.copytree(run.path, copy)
    return run.path, copy


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _edit_metrics_line(path: Path, line: int, edit) -> None:
    """Apply ``edit`` to the record on ``line`` (1-based) of a metrics.jsonl."""
    lines = path.read_text().splitlines()
    record = json.loads(lines[line - 1])
    edit(record)
    lines[line - 1] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")


def test_a_copy_of_the_records_is_identical(tmp_path):
    published, copy = _published_and_copy(tmp_path)
    comparison = compare_runs(read_records(published), read_records(copy))
    assert comparison.identical and comparison.compared > 20
    assert comparison.metrics_lines == (9, 9)
    assert format_comparison(read_records(published), read_records(copy), comparison).endswith(
        "records identical"
    )


def test_clocks_and_the_output_folder_are_not_compared(tmp_path):
    published, copy = _published_and_copy(tmp_path)
    _edit_metrics_line(copy / "metrics.jsonl", 2, lambda r: r["time"].update(step=99.0))
    _edit_json(copy / "summary.json", lambda s: s["time"].update(wall_seconds=1.0))
    config = (copy / "config.yaml").read_text()
    (copy / "config.yaml").write_text(config.replace(str(tmp_path / "published"), "/elsewhere"))
    assert "/elsewhere" in (copy / "config.yaml").read_text()
    assert compare_runs(read_records(published), read_records(copy)).identical


def test_a_planted_change_is_named_with_its_difference(tmp_path):
    published, copy = _published_and_copy(tmp_path)
    _edit_metrics_line(copy / "metrics.jsonl", 4, lambda r: r.update(reward_mean=0.5))
    _edit_json(copy / "summary.json", lambda s: s["auc"].update(sampled_accuracy=0.36))
    a, b = read_records(published), read_records(copy)
    comparison = compare_runs(a, b)
    assert not comparison.identical
    found = {(d.file, d.line, d.key): d for d in comparison.differences}
    assert set(found) == {
        ("metrics.jsonl", 4, "reward_mean"),
        ("summary.json", None, "auc.sampled_accuracy"),
    }
    reward = found["metrics.jsonl", 4, "reward_mean"]
    assert (reward.published, reward.rerun) == (0.4, 0.5)
    assert reward.absolute == pytest.approx(0.1) and reward.relative == pytest.approx(0.2)
    auc = found["summary.json", None, "auc.sampled_accuracy"]
    assert auc.absolute == pytest.approx(0.01) and auc.relative == pytest.approx(0.01 / 0.36)
    assert comparison.largest_relative is reward
    assert comparison.beyond_cross_cpu_tolerance == comparison.differences
    report = format_comparison(a, b, comparison)
    assert "2 differ" in report and report.endswith("records differ")
    assert "2 differences are beyond the tolerance another CPU's kernels explain" in report
    rows = {
        line.split()[1]: line
        for line in report.splitlines()
        if line.startswith(("metrics", "summary"))
    }
    assert "0.4 -> 0.5" in rows["reward_mean"] and "0.2" in rows["reward_mean"].split()
    assert "0.35 -> 0.36" in rows["auc.sampled_accuracy"]


def test_a_key_differing_in_many_records_is_one_line(tmp_path):
    """Three records' entropy moved in the 7th digit (as another CPU's kernels move it): one
    line for the key, within the cross-CPU tolerance; an integer off by one is not."""
    published, copy = _published_and_copy(tmp_path)
    for line in (2, 4, 6):
        _edit_metrics_line(copy / "metrics.jsonl", line, lambda r: r.update(entropy=1.0 + 1e-7))
    a, b = read_records(published), read_records(copy)
    comparison = compare_runs(a, b)
    assert len(comparison.differences) == 3 and not comparison.beyond_cross_cpu_tolerance
    report = format_comparison(a, b, comparison)
    rows = [line.split() for line in report.splitlines() if line.startswith("metrics.jsonl")]
    assert [row[1:4] for row in rows] == [["entropy", "3", "0"]]
    assert "every difference is within the tolerance" in report
    assert report.endswith("records differ")  # within the tolerance is still not identical

    _edit_json(copy / "summary.json", lambda s: s.update(seed=s["seed"] + 1))  # an integer
    comparison = compare_runs(a, read_records(copy))
    assert [d.key for d in comparison.beyond_cross_cpu_tolerance] == ["seed"]


def test_a_run_archive_reads_as_its_folder(tmp_path):
    """A committed run is ``<name>.tar.xz``: read from it (named with or without the suffix),
    its records are the folder's."""
    published, _ = _published_and_copy(tmp_path)
    packed = pack_run(published, tmp_path / "packed")
    assert find_run(tmp_path / "packed" / "grpo-s0") == packed
    from_archive, from_folder = read_records(packed), read_records(published)
    assert from_archive == from_folder
    assert compare_runs(from_folder, from_archive).identical


def test_a_missing_record_differs(tmp_path):
    published, copy = _published_and_copy(tmp_path)
    lines = (copy / "metrics.jsonl").read_text().splitlines()
    (copy / "metrics.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    comparison = compare_runs(read_records(published), read_records(copy))
    assert comparison.metrics_lines == (9, 8) and not comparison.identical
    assert {d.line for d in comparison.differences} == {9}


# --- the verb -------------------------------------------------------------------------------------


def _verify(argv: list[str], capsys) -> tuple[int, str, str]:
    from creditbench.tools.cli.main import main

    code = main(["verify", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


@pytest.mark.parametrize(
    ("environment", "budget", "message"),
    [
        ({"git_commit": None, "git_dirty": None}, "flops", "git_commit is not recorded"),
        ({"git_commit": "1" * 40, "git_dirty": True}, "flops", "had uncommitted changes"),
        ({"git_commit": "1" * 40}, "flops", "git_dirty: the checkout the run was made from is"),
        ({"git_commit": "1" * 40, "git_dirty": False}, "seconds", "budget.unit is seconds"),
        ({"git_commit": "1" * 40, "git_dirty": False}, "flops", "no such commit"),
    ],
    ids=["no commit", "dirty", "dirty unknown", "wall-clock budget", "unknown commit"],
)
def test_a_run_that_cannot_be_rerun_is_one_line_exit_2(
    tmp_path, capsys, monkeypatch, environment, budget, message
):
    monkeypatch.setenv("CREDITBENCH_CACHE", str(tmp_path / "cache"))
    run = make_run(tmp_path, "grpo-s0", "grpo", 0, environment=environment, budget={"unit": budget})
    code, out, err = _verify([str(run.path)], capsys)
    assert code == 2 and message in err
    assert len(err.splitlines()) == 1 and err.startswith("creditbench verify: error:")
    assert not (tmp_path / "cache").exists() and out == ""


def test_no_such_run_a_damaged_one_and_a_scratch_folder_in_use_are_one_line_exit_2(
    tmp_path, capsys
):
    code, _, err = _verify([str(tmp_path / "nothing")], capsys)
    assert code == 2 and err == (
        f"creditbench verify: error: RUN: {tmp_path / 'nothing'}: no such run folder or archive"
    )
    (tmp_path / "empty").mkdir()
    code, _, err = _verify([str(tmp_path / "empty")], capsys)
    assert code == 2 and "config.yaml: missing (not a run)" in err
    (tmp_path / "damaged.tar.xz").write_bytes(b"not xz")
    code, _, err = _verify([str(tmp_path / "damaged.tar.xz")], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "damaged.tar.xz: damaged run archive" in err
    run = make_run(tmp_path, "grpo-s0", "grpo", 0)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "mine.txt").write_text("x")
    code, _, err = _verify([str(run.path), "--scratch", str(tmp_path / "busy")], capsys)
    assert code == 2 and err.endswith(
        "--scratch: " + str(tmp_path / "busy") + " is not empty; choose a new folder"
    )
    code, _, err = _verify([str(run.path), "--scratch", str(run.path / "check")], capsys)
    assert code == 2 and "--scratch: " in err and "is inside the run" in err
    assert not (run.path / "check").exists()


TINY_RUN = [
    "--set",
    "task_options.steps=2",
    "--set",
    "rollout.prompts_per_step=2",
    "--set",
    "rollout.group_size=4",
    "--set",
    "rollout.max_new_tokens=16",
    "--set",
    "budget.unit=steps",
    "--set",
    "budget.amount=2",
    "--set",
    "budget.eval_fractions=[0.0, 1.0]",
    "--set",
    "eval.n_problems=4",
]


@pytest.fixture
def head_checkout(tmp_path, monkeypatch):
    """A clean worktree of HEAD in a temporary cache (the one verify uses too), removed from
    the repository's worktree list afterwards."""
    from creditbench.tools.campaign.worktrees import REPOSITORY, CheckoutError, checkout

    monkeypatch.setenv("CREDITBENCH_CACHE", str(tmp_path / "cache"))
    try:
        head = checkout("HEAD")
    except CheckoutError as err:
        pytest.skip(f"no git checkout to re-run from: {err}")
    yield head
    subprocess.run(["git", "-C", str(REPOSITORY), "worktree", "remove", "--force", str(head)])


@pytest.mark.slow
def test_verify_reruns_a_run_at_its_commit_and_reports_a_planted_change(
    nano_policy, head_checkout, tmp_path, capsys
):
    """A run made by HEAD's own CLI (a clean checkout in a temporary cache), with one metric
    changed afterwards: verify re-runs it at HEAD, finds every other record identical, names
    the planted one with its difference, and exits 1."""
    from creditbench.tools.campaign.worktrees import pinned_cli

    head = head_checkout
    made = subprocess.run(
        [*pinned_cli(head), "train", "--method", "grpo", "--output", str(tmp_path / "published")]
        + ["--name", "tiny", "--threads", "1", "--quiet", "--set", f"model.path={nano_policy}"]
        + TINY_RUN,
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    run = tmp_path / "published" / "tiny"
    assert json.loads((run / "environment.json").read_text())["git_dirty"] is False
    planted = json.loads((run / "metrics.jsonl").read_text().splitlines()[1])["reward_mean"]
    _edit_metrics_line(run / "metrics.jsonl", 2, lambda r: r.update(reward_mean=planted + 0.5))

    code, out, err = _verify([str(run), "--scratch", str(tmp_path / "scratch"), "--quiet"], capsys)
    assert code == 1, err
    rows = [line.split() for line in out.splitlines() if line.startswith("metrics.jsonl ")]
    assert [row[1:3] for row in rows] == [["reward_mean", "1"]]
    assert f"{planted + 0.5} -> {planted}" in out and out.rstrip().endswith("records differ")
    assert not (tmp_path / "scratch").exists()  # removed without --keep


def test_an_interrupted_verify_says_what_it_keeps_not_trains_resume_line(monkeypatch, capsys):
    """Ctrl-C in verify removes the scratch re-run; the message must not promise checkpoints
    and a --resume, as an interrupted train does."""
    import creditbench.tools.cli.verify as verify_cli
    from creditbench.tools.cli.main import main

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(verify_cli, "_cmd_verify", interrupted)
    assert main(["verify", "somewhere"]) == 130
    err = capsys.readouterr().err
    assert "creditbench verify: interrupted; the re-run stopped" in err
    assert "--resume" not in err
