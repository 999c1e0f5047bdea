"""Planning a suite from measured wall times: estimates, longest first, the dry run's figures."""

from __future__ import annotations

import pytest

from creditbench.tools.bench_plan import (
    describe_plan,
    estimate_seconds,
    expected_wall,
    left_of_started,
    longest_first,
    setting_method,
    weighed_busy,
)
from creditbench.tools.suite import Run


def runs(label, entries, seeds=(0, 1)):
    return [
        Run(name=f"{label}-{e}-s{s}", method=e, task="chain", seed=s, overrides=[], label=label)
        for e in entries
        for s in seeds
    ]


def test_a_run_is_estimated_from_its_own_setting_then_from_its_ratio_to_grpo():
    hard, easy = "chain-hard-steps=10", "chain-easy-steps=8"
    suite = runs(hard, ["grpo", "vineppo", "ibpo"]) + runs(easy, ["grpo", "vineppo", "ibpo"])
    measured = {
        f"{hard}-grpo": [400.0, 420.0, 440.0],  # median 420
        f"{hard}-vineppo": [1260.0],  # 3x GRPO on the hard setting
        f"{easy}-grpo": [300.0],
    }
    got = estimate_seconds(suite, measured)
    assert got[f"{hard}-grpo-s1"] == 420.0 and got[f"{hard}-vineppo-s0"] == 1260.0
    assert got[f"{easy}-vineppo-s0"] == pytest.approx(900.0)  # its ratio, on GRPO's easy time
    assert f"{hard}-ibpo-s0" not in got and f"{easy}-ibpo-s0" not in got  # never measured
    assert setting_method("results/chain-hard-steps=10-grpo-s12") == f"{hard}-grpo"


def test_a_variant_never_measured_takes_its_methods_estimate():
    hard, easy = "chain-hard-steps=10", "chain-easy-steps=8"
    variant = [
        Run(name=f"{label}-grpo_s-s0", method="gtpo", task="chain", seed=0, overrides=[],
            label=label, entry="grpo_s")
        for label in (hard, easy)
    ]  # fmt: skip
    measured = {
        f"{hard}-grpo": [400.0],
        f"{hard}-gtpo": [600.0],
        f"{easy}-grpo": [300.0],
    }
    got = estimate_seconds(variant, measured)
    assert got[f"{hard}-grpo_s-s0"] == 600.0  # GTPO's own time in this setting
    assert got[f"{easy}-grpo_s-s0"] == pytest.approx(450.0)  # GTPO's ratio on GRPO's easy time
    measured[f"{hard}-grpo_s"] = [700.0]
    assert estimate_seconds(variant, measured)[f"{hard}-grpo_s-s0"] == 700.0  # its own first


def test_the_longest_runs_start_first_and_the_unmeasured_before_them():
    suite = runs("a", ["grpo", "slow", "new"], seeds=(0,))
    estimates = {"a-grpo-s0": 100.0, "a-slow-s0": 500.0}
    order = [r.name for r in longest_first(suite, estimates)]
    assert order == ["a-new-s0", "a-slow-s0", "a-grpo-s0"]
    line = describe_plan(suite, estimates, workers=2)
    # the new run starts when GRPO's ends (100 s) and, counted at the median (300 s), ends at
    # 400 s, before the slow one (500 s): 8.3 minutes, not half the sum (5 min)
    assert "0.17 core-hours for 2 measured runs" in line and "about 8.3 min on 2 workers" in line
    assert "1 runs not measured" in line and "counted at the median measured run's time" in line


def test_the_wall_time_is_the_last_run_to_end_on_the_workers():
    suite = runs("a", ["short", "long"], seeds=(0,))
    estimates = {"a-short-s0": 60.0, "a-long-s0": 240.0}
    assert expected_wall(suite, estimates, workers=2) == 240.0  # the dry run said their mean
    assert expected_wall(suite, estimates, workers=1) == 300.0
    assert expected_wall(suite * 3, estimates, workers=2) == 540.0  # each worker the next run
    assert expected_wall(suite, {}, workers=2) == 0.0
    # a plan none of whose runs is measured has no expected cost, not a cost of nothing
    nothing_known = describe_plan(suite, {}, workers=2)
    assert "not known; none of the 2 runs is measured" in nothing_known
    assert "core-hours" not in nothing_known
    assert describe_plan([], {}, workers=2) == "expected: nothing to run"
    assert "about 2.0 hours on 1 workers" in describe_plan(
        suite, {"a-short-s0": 3600.0, "a-long-s0": 3600.0}, workers=1
    )


def test_a_niced_process_takes_little_from_a_run():
    """The load average counts the niced campaign's runs as whole cores; the scheduler gives
    them about a tenth of a core beside a run at nice 0 (10 levels of 1.25)."""
    before = {1: (0, 10.0), 2: (10, 10.0), 3: (-5, 0.0), 4: (0, 5.0)}
    after = {1: (0, 12.0), 2: (10, 12.0), 3: (-5, 2.0), 5: (0, 9.0)}  # 4 ended, 5 began
    busy = weighed_busy(before, after, elapsed=2.0, ours=0)
    assert busy == pytest.approx(1.0 + 1.25**-10 + 1.0)
    assert weighed_busy(before, after, elapsed=2.0, ours=10) == pytest.approx(3.0)


def test_the_dry_run_prints_each_runs_expected_minutes_from_a_timings_source(
    tmp_path, capsys, monkeypatch
):
    """A committed runs.csv with wall times plans the runs of its settings and methods."""
    from creditbench.tools import bench_plan
    from creditbench.tools.cli.main import main

    monkeypatch.chdir(tmp_path)
    # no committed records (an installed wheel): only the sources given count
    monkeypatch.setattr(bench_plan, "COMMITTED_RECORDS", tmp_path / "wheel" / "standard")
    results = tmp_path / "results"
    argv = ["bench", "--suite", "quick", "--results", str(results), "--dry-run"]
    assert main([*argv, "--only", "chain-grpo-s0", "--only", "chain-oracle-s0"]) == 0
    out = capsys.readouterr().out
    assert out.count("not measured") == 2 and "none of the 2 runs is measured" in out
    assert "core-hours" not in out  # nothing measured is not a plan that costs nothing

    timings = tmp_path / "runs.csv"
    header = "run,kind,method,task,options,setting,seed,config,wall_seconds,budget_fraction,"
    header += "sampled_accuracy\n"
    lines = [
        f'old/chain-{m}-s0,{kind},{m},chain,default,default,0,"{{""method"": ""{m}"", '
        f'""seed"": 0}}",{seconds if kind == "run" else ""},{"" if kind == "run" else 1.0},0.5\n'
        for m, seconds in (("grpo", 600), ("oracle", 900))
        for kind in ("run", "eval")
    ]
    timings.write_text(header + "".join(lines))
    assert main([*argv, "--timings", str(timings), "--only", "chain-grpo-s0"]) == 0
    out = capsys.readouterr().out
    assert "10.0 min  chain-grpo-s0" in out and "not measured" not in out
    assert main([*argv, "--timings", str(tmp_path / "missing.csv")]) == 2
    assert "--timings" in capsys.readouterr().err
    timings.write_text("a,b\n1,2\n")
    assert main([*argv, "--timings", str(timings)]) == 2
    assert "--timings" in capsys.readouterr().err


def test_a_checkout_plans_the_standard_suite_from_its_committed_records(
    tmp_path, capsys, monkeypatch
):
    """Without --timings, the dry run reads the checkout's docs/results/standard/runs.csv,
    from any working directory, as `creditbench reproduce` does; without it (an installed
    wheel), it says no times were found."""
    from creditbench.tools import bench_plan
    from creditbench.tools.cli.main import main

    if not (bench_plan.COMMITTED_RECORDS / "runs.csv").is_file():
        pytest.skip("the campaign's records are not committed yet")
    argv = ["bench", "--suite", "standard", "--dry-run", "--only", "chain-easy-steps=8-grpo-s0"]
    monkeypatch.chdir(tmp_path)  # not the checkout's root
    assert main([*argv, "--results", "a"]) == 0
    out = capsys.readouterr().out
    assert " min  chain-easy-steps=8-grpo-s0" in out and "not measured" not in out
    assert f"timings sources ({bench_plan.COMMITTED_RECORDS / 'runs.csv'})" in out
    monkeypatch.setattr(bench_plan, "COMMITTED_RECORDS", tmp_path / "wheel" / "standard")
    assert main([*argv, "--results", "b"]) == 0
    out = capsys.readouterr().out
    assert "not measured  chain-easy-steps=8-grpo-s0" in out and "no --timings" in out
    assert not (tmp_path / "a").exists()  # a dry run writes nothing


def test_a_grid_point_never_measured_is_estimated_by_its_setting_and_never_by_another():
    """A tuning grid's runs (``...-lr=5e-05-grpo-s22``) take their setting's measured times; a
    task option is never dropped, so another setting's runs never stand in for them."""
    hard = "chain-hard-steps=10"
    measured = {f"{hard}-grpo": [420.0], "chain-hard-grpo": [999.0]}
    options = ['task_options={"steps": 10}']
    grid = [
        Run(
            name=f"{hard}-lr={lr}-grpo-s22",
            method="grpo",
            task="chain",
            seed=22,
            overrides=[f"train.lr={lr}", *options],
            label=f"{hard}-lr={lr}",
        )  # fmt: skip
        for lr in ("1.5e-05", "5e-05", "0.00015")
    ]
    other = Run(name="chain-hard-steps=12-grpo-s0", method="grpo", task="chain", seed=0,
                overrides=['task_options={"steps": 12}'], label="chain-hard-steps=12")  # fmt: skip
    got = estimate_seconds([*grid, other], measured)
    assert [got[run.name] for run in grid] == [420.0, 420.0, 420.0]
    assert other.name not in got  # steps=12 never measured; steps is a task option, kept


def test_without_psutil_the_load_average_is_read_and_said(monkeypatch):
    import sys

    from creditbench.tools import bench_plan

    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil raises ImportError
    monkeypatch.setattr(bench_plan.os, "getloadavg", lambda: (6.0, 5.0, 4.0), raising=False)
    monkeypatch.setattr(bench_plan.os, "cpu_count", lambda: 2)
    suite = runs("a", ["grpo"], seeds=(0,))
    line = bench_plan.describe_load(suite, {"a-grpo-s0": 60.0}, workers=2)
    assert "6.0 of 2 cores by the load average, niced processes counted whole" in line
    assert "about 3.5 min, 3.5 x the records' times" in line  # (6 + 1 worker) / 2 cores


def started_run(results, name: str, checkpoint_step: int | None, fractions: list[float]) -> None:
    """A run folder with one step record a fraction, and a complete checkpoint at a step."""
    import json

    from creditbench.harness.records.rundir import COMPLETE_MARKER

    folder = results / name
    folder.mkdir(parents=True)
    lines = [{"step": 0, "eval": {"fraction": 0.0}}]
    lines += [{"step": i + 1, "budget_fraction": f} for i, f in enumerate(fractions)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    if checkpoint_step is not None:
        checkpoint = folder / "checkpoints" / f"step-{checkpoint_step:06d}"
        checkpoint.mkdir(parents=True)
        (checkpoint / COMPLETE_MARKER).write_text("")


def test_a_part_done_run_is_counted_for_what_is_left_past_its_checkpoint(tmp_path):
    suite = runs("chain-hard-steps=10", ["grpo"], seeds=(0, 1, 2, 3))
    estimates = {run.name: 400.0 for run in suite}
    started_run(tmp_path, suite[0].name, 3, [0.1, 0.2, 0.3, 0.4])  # resumes at 0.3
    started_run(tmp_path, suite[1].name, None, [0.1, 0.2])  # no checkpoint: starts over
    (tmp_path / suite[2].name).mkdir()  # a folder and nothing in it
    got, started = left_of_started(estimates, suite, tmp_path)
    assert started == 1
    assert got[suite[0].name] == pytest.approx(280.0)
    assert [got[run.name] for run in suite[1:]] == [400.0, 400.0, 400.0]
    assert estimates[suite[0].name] == 400.0  # the caller's estimates are left as they were
