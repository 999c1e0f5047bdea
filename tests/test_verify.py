"""`creditbench verify`: the comparison of a run's records with its re-run, the CPU fields of
environment.json it reads, and the verb's refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from fake_runs import make_run

from creditbench.harness.records.provenance import capture_environment
from creditbench.tools.verify import compare_runs, format_comparison, read_records

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
    report = format_comparison(a, b, comparison)
    assert "2 differ" in report and report.endswith("records differ")
    rows = {
        line.split()[1]: line
        for line in report.splitlines()
        if line.startswith(("metrics", "summary"))
    }
    assert "0.4 -> 0.5" in rows["reward_mean"] and "0.2" in rows["reward_mean"].split()
    assert "0.35 -> 0.36" in rows["auc.sampled_accuracy"]


def test_a_key_differing_in_many_records_is_one_line(tmp_path):
    published, copy = _published_and_copy(tmp_path)
    for line in (2, 4, 6):
        _edit_metrics_line(copy / "metrics.jsonl", line, lambda r: r.update(entropy=1.0 + 1e-7))
    a, b = read_records(published), read_records(copy)
    report = format_comparison(a, b, compare_runs(a, b))
    rows = [line for line in report.splitlines() if line.startswith("metrics.jsonl")]
    assert len(rows) == 1 and rows[0].split()[1:3] == ["entropy", "3"]


def test_a_missing_record_differs(tmp_path):
    published, copy = _published_and_copy(tmp_path)
    lines = (copy / "metrics.jsonl").read_text().splitlines()
    (copy / "metrics.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    comparison = compare_runs(read_records(published), read_records(copy))
    assert comparison.metrics_lines == (9, 8) and not comparison.identical
    assert {d.line for d in comparison.differences} == {9}
