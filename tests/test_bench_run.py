"""``creditbench bench`` as it runs: bounds checked before anything is written, GRPO and the
oracle first, a line a finished run, a bar that never goes backwards, logs never written
through a link, the lock held through the render, one line when every run failed, and a
checkpoint every step so an interrupted run loses at most the step it had in progress."""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path

import pytest

from creditbench.tools import bench, bench_workers
from creditbench.tools.bench_plan import default_timings, load_factor
from creditbench.tools.cli.main import main
from creditbench.tools.suite import Run, SuiteError


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory) -> Path:
    """A one-method suite of two 2-step runs on a nano policy saved beside it."""
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, save_policy
    from creditbench.harness.tasks import get_task

    folder = tmp_path_factory.mktemp("suite")
    tokenizer = build_char_tokenizer(task_alphabet(get_task("chain", steps=2)))
    policy = save_policy(build_model("nano", tokenizer, seed=0), tokenizer, folder / "nano")
    suite = folder / "tiny.yaml"
    suite.write_text(
        f"methods: [rloo, grpo]\nreferences: [oracle]\nseeds: [0]\ntasks:\n  - name: chain\n"
        f"    options: {{steps: 2}}\nsettings:\n  model.path: {str(policy)!r}\n"
        "  rollout.prompts_per_step: 2\n  rollout.group_size: 2\n  rollout.max_new_tokens: 8\n"
        "  eval.n_problems: 2\n  eval.k_samples: 1\nbudget: {unit: steps, amount: 2}\n"
    )
    return suite


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers", "1000000"], "--workers: must be between 1 and"),
        (["--threads", "1000000"], "--threads: must be between 1 and"),
        (["--seeds", "0-1000000000"], "--seeds: '0-1000000000': at most 10000 seeds"),
        (["--seeds", "4294967296"], "a seed is at most 4294967295"),
    ],
)
def test_sizes_are_bounded_before_anything_is_written(tiny_suite, tmp_path, capsys, argv, message):
    results = tmp_path / "results"
    assert main(["bench", "--suite", str(tiny_suite), "--results", str(results), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not results.exists()


def test_grpo_and_the_oracle_run_first(tiny_suite, capsys):
    assert main(["bench", "--suite", str(tiny_suite), "--dry-run", "--results", "unwritten"]) == 0
    listed = re.findall(r"\]\s+(?:not measured|[\d.]+ min)\s+(\S+)", capsys.readouterr().out)
    assert [name.split("-")[-2] for name in listed] == ["grpo", "oracle", "rloo"]
    runs = [Run(f"r-{m}-s0", m, "chain", 0, [], "r") for m in ("a", "oracle", "b", "grpo")]
    assert [r.method for r in bench.references_first(runs)] == ["grpo", "oracle", "a", "b"]


def test_the_quick_suites_dry_run_is_timed_by_its_own_committed_records(capsys):
    """The quick suite's settings are not the standard board's: its own records time it (the
    dry run said "0.0 core-hours for 0 measured runs"), and it says which records it read."""
    quick = bench.suite_path("quick")
    committed = default_timings("quick")
    if not committed or "quick" not in str(committed[0]):
        pytest.skip("the quick suite's records are not committed in this checkout")
    assert main(["bench", "--suite", "quick", "--dry-run", "--results", "unwritten"]) == 0
    out = capsys.readouterr().out
    assert f"{committed[0]}" in out
    runs = bench.expand_suite(bench.load_suite(quick), quick)
    # a method added since the records were made is not measured yet; every other run is
    with open(committed[0], newline="") as records:
        recorded = {row["method"] for row in csv.DictReader(records)}
    measurable = [run for run in runs if run.entry in recorded]
    timed = int(re.search(r"; (\d+) of (\d+) runs timed by them", out).group(1))
    assert len(measurable) >= len(runs) // 2 and timed >= len(measurable)
    assert " 0 measured runs" not in out
    assert not Path("unwritten").exists()


def test_the_load_scales_the_plan():
    assert load_factor(0.0, 2, 2) == 1.0  # a core a run: the records' own conditions
    assert load_factor(4.0, 2, 2) == 3.0  # six runnable processes share two cores
    assert load_factor(0.5, 1, 4) == 1.0


def test_a_finished_run_prints_its_method_setting_seed_auc_final_and_time(tmp_path):
    run = Run("chain-grpo-s3", "grpo", "chain", 3, [], "chain")
    summary = {
        "status": "finished",
        "steps": 14,
        "final_eval": {"sampled_accuracy": 0.4321},
        "auc": {"sampled_accuracy": 0.4012},
    }
    line = bench_workers.finished_line(run, summary, 126.0, tmp_path / "x.log")
    assert line == "done   grpo chain seed 3: AUC 0.401, final accuracy 0.432, 14 steps, 2.1 min"
    failed = bench_workers.finished_line(run, None, 6.0, tmp_path / "x.log")
    assert (
        failed.startswith("FAILED grpo chain seed 3 (failed") and str(tmp_path / "x.log") in failed
    )


class _FakeProcess:
    """A worker that reports progress from a script of budget fractions, one a poll; a fraction
    lower than the one before is a resumed run that restarts from its checkpoint."""

    script: dict[str, list[float]] = {}

    def __init__(self, cmd, stdout=None, stderr=None, env=None):
        self.name = cmd[cmd.index("--name") + 1]
        self.folder = Path(cmd[cmd.index("--output") + 1]) / self.name
        self.fractions = list(self.script[self.name])
        self.returncode: int | None = None

    def poll(self):
        if not self.fractions:
            self.returncode = 0
            (self.folder / "summary.json").write_text(
                json.dumps(
                    {
                        "status": "finished",
                        "steps": 2,
                        "auc": {"sampled_accuracy": 0.5},
                        "final_eval": {"sampled_accuracy": 0.25},
                    }
                )  # fmt: skip
            )
            return 0
        self.folder.mkdir(parents=True, exist_ok=True)
        record = {"budget_fraction": self.fractions.pop(0)}
        (self.folder / "metrics.jsonl").write_text(json.dumps(record) + "\n")
        return None

    def terminate(self):
        pass

    def wait(self, timeout=None):
        return 0


class _Bar:
    def __init__(self, total, initial, **kwargs):
        self.total, self.n, self.positions, self.lines = total, initial, [], []
        self.initial = initial

    def refresh(self):
        self.positions.append(self.n)

    def write(self, line):
        self.lines.append(line)

    def close(self):
        pass


def test_the_bar_never_goes_backwards_and_each_run_prints_a_line(tmp_path, monkeypatch):
    runs = [Run(f"chain-{m}-s0", m, "chain", 0, [], "chain") for m in ("grpo", "rloo")]
    _FakeProcess.script = {"chain-grpo-s0": [0.2, 0.4, 0.1, 0.6], "chain-rloo-s0": [0.5, 0.3]}
    monkeypatch.setattr(bench_workers.subprocess, "Popen", _FakeProcess)
    monkeypatch.setattr(bench_workers.time, "sleep", lambda seconds: None)
    bars: list[_Bar] = []
    monkeypatch.setattr(bench_workers, "tqdm", None, raising=False)

    def make_bar(**kwargs):
        bars.append(_Bar(**kwargs))
        return bars[-1]

    assert bench_workers.run_workers(runs, tmp_path, 2, 1, 0, make_bar) == []
    positions = bars[0].positions
    assert positions == sorted(positions) and positions[-1] == 2
    assert [line.split(":")[0] for line in bars[0].lines] == [
        "done   rloo chain seed 0",
        "done   grpo chain seed 0",
    ]


def test_a_resumed_bench_starts_its_bar_where_the_stopped_one_left_it(tmp_path, monkeypatch):
    """Runs stopped part-way (a Ctrl-C) count what they had done from the bar's first frame:
    it started at the finished runs' count and went back (4.22 -> 4.00 of 28)."""
    runs = [Run(f"chain-{m}-s0", m, "chain", 0, [], "chain") for m in ("grpo", "rloo")]
    for run, fraction in zip(runs, (0.5, 0.25), strict=True):
        (tmp_path / run.name).mkdir()
        (tmp_path / run.name / "metrics.jsonl").write_text(
            json.dumps({"budget_fraction": fraction})
        )
    _FakeProcess.script = {"chain-grpo-s0": [0.5, 0.75], "chain-rloo-s0": [0.25, 0.5]}
    monkeypatch.setattr(bench_workers.subprocess, "Popen", _FakeProcess)
    monkeypatch.setattr(bench_workers.time, "sleep", lambda seconds: None)
    bars: list[_Bar] = []

    def make_bar(**kwargs):
        bars.append(_Bar(**kwargs))
        return bars[-1]

    assert bench_workers.run_workers(runs, tmp_path, 1, 1, 3, make_bar) == []
    assert bars[0].initial == 3.75  # three finished before, and half and a quarter of two
    positions = bars[0].positions
    assert positions == sorted(positions) and positions[0] >= 3.75 and positions[-1] == 5


def test_a_log_that_is_a_link_is_never_written_through(tiny_suite, tmp_path, capsys):
    results = tmp_path / "results"
    (results / "logs").mkdir(parents=True)
    target = tmp_path / "precious.txt"
    target.write_text("keep\n")
    (results / "logs" / "chain-steps=2-grpo-s0.log").symlink_to(target)
    assert main(["bench", "--suite", str(tiny_suite), "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is a link" in err and "grpo-s0.log" in err
    assert target.read_text() == "keep\n"
    assert sorted(p.name for p in results.iterdir()) == ["logs"]  # nothing else written
    with pytest.raises(SuiteError, match="is a link"):
        bench_workers.open_log(results / "logs" / "chain-steps=2-grpo-s0.log")


def test_the_lock_is_held_through_the_render_and_all_failed_is_one_line(
    tiny_suite, tmp_path, capsys, monkeypatch
):
    from creditbench.harness.records.rundir import RunDir, RunDirError
    from creditbench.leaderboard import report

    results = tmp_path / "results"
    held: list[bool] = []

    def render_checking_the_lock(folder, *args, **kwargs):
        try:
            with RunDir(folder).lock(writing="a third bench"):
                held.append(False)
        except RunDirError:
            held.append(True)
        return report.render(folder, *args, **kwargs)

    def every_run_fails(pending, results_dir, *args):
        return [run.name for run in pending]

    monkeypatch.setattr("creditbench.leaderboard.render", render_checking_the_lock)
    monkeypatch.setattr(bench_workers, "run_workers", every_run_fails)
    assert main(["bench", "--suite", str(tiny_suite), "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert held == [True]
    assert len(err.splitlines()) == 1 and "every run failed (3)" in err and "Traceback" not in err


def test_runs_checkpoint_every_step_unless_begun_under_another_value(tmp_path):
    assert bench.checkpoint_setting(tmp_path / "new") == "checkpoint_every=1"
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.yaml").write_text("method: grpo\ncheckpoint_every: 10\n")
    assert bench.checkpoint_setting(tmp_path / "old") == "checkpoint_every=10"


@pytest.mark.slow
def test_an_interrupted_bench_keeps_a_checkpoint_of_the_last_step_and_resumes(tmp_path, tiny_suite):
    """SIGTERM (as Ctrl-C) mid-run leaves a checkpoint at most one step behind the run's last
    record, and the same command resumes from it and finishes."""
    import signal
    import subprocess
    import sys
    import time

    from creditbench.harness.records.rundir import RunDir

    suite = tmp_path / "long.yaml"
    text = tiny_suite.read_text().replace("amount: 2", "amount: 6")
    suite.write_text(text.replace("methods: [rloo, grpo]\nreferences: [oracle]", "methods: [grpo]"))
    results = tmp_path / "results"
    argv = ["bench", "--suite", str(suite), "--results", str(results), "--workers", "1"]
    bench_process = subprocess.Popen(
        [sys.executable, "-m", "creditbench.tools.cli.main", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    run_dir = RunDir(results / "chain-steps=2-grpo-s0")
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            steps = [
                json.loads(line).get("step", 0)
                for line in run_dir.metrics_path.read_text().splitlines()
                if '"step"' in line
            ] if run_dir.metrics_path.exists() else []  # fmt: skip
            if steps and max(steps) >= 3:
                break
            time.sleep(0.2)
        bench_process.send_signal(signal.SIGTERM)
        _, err = bench_process.communicate(timeout=60)
    finally:
        bench_process.kill()
    assert bench_process.returncode == 130 and "its checkpoint of its last finished step" in err
    if run_dir.is_finished():
        pytest.skip("the run finished before the signal reached it")
    logged = max(
        json.loads(line).get("step", 0) for line in run_dir.metrics_path.read_text().splitlines()
    )
    kept = int(run_dir.latest_checkpoint().name.split("-")[-1])
    assert kept >= logged - 1 >= 2
    assert main(argv) == 0
    assert run_dir.read_summary()["steps"] == 6
    assert os.path.exists(results / "leaderboard.md")
