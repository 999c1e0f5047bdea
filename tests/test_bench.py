"""``creditbench bench``: suite expansion, parallel workers, skipping finished runs."""

from __future__ import annotations

import json
import re

import pytest
from processes import processes_mentioning

from creditbench.harness.records.rundir import RunDir
from creditbench.methods.registry import list_methods
from creditbench.tools.cli.main import main
from creditbench.tools.suite import (
    SuiteError,
    expand_suite,
    load_suite,
    parse_seeds,
    run_config,
    select_runs,
    suite_path,
    write_manifest,
)


def test_shipped_suites_expand_to_every_method():
    quick = suite_path("quick")
    runs = expand_suite(load_suite(quick), quick)
    registered = list_methods()
    expected = {n for n, cls in registered.items() if not cls.reference} | {"oracle"}
    assert {r.method for r in runs} == expected
    assert len({r.name for r in runs}) == len(runs)

    for name, seeds in (("standard", set(range(10))), ("long", set(range(5)))):
        path = suite_path(name)
        runs = expand_suite(load_suite(path), path)
        assert {r.method for r in runs} == set(registered)
        assert {r.seed for r in runs} == seeds
        assert len({r.label for r in runs}) >= 2  # settings or chain lengths


def test_the_shipped_boards_train_on_the_frozen_protocol():
    """The quick and long suites train as the standard suite (the frozen protocol) does, so
    every published board is on the scale the protocol validated: the same optimizer, lr,
    clip, batch, minibatches and generation limit."""
    protocol = load_suite(suite_path("standard"))["settings"]
    training = [k for k in protocol if k.startswith(("train.", "rollout.")) or k == "model.preset"]
    assert {"train.optimizer", "train.lr", "train.grad_clip", "train.minibatches"} <= set(training)
    for name in ("quick", "long"):
        settings = load_suite(suite_path(name))["settings"]
        assert {k: settings.get(k) for k in training} == {k: protocol[k] for k in training}, name


def test_the_shipped_suites_base_policies_and_teachers_ship_with_the_package(tmp_path, monkeypatch):
    """Every setting of the quick and standard suites starts from a base policy the package
    carries, and OPPO's teacher for it ships too: a fresh machine runs them without training
    one (an hour or more on two cores)."""
    from creditbench.harness.models import bootstrap
    from creditbench.harness.models.policy_cache import ASSETS_DIR

    def no_training(*args, **kwargs):
        raise AssertionError("this setting's base policy is not shipped: it would be trained")

    monkeypatch.setattr(bootstrap, "train_base_policy", no_training)
    for name in ("quick", "standard"):
        path = suite_path(name)
        settings = {}
        for run in expand_suite(load_suite(path), path):
            config = run_config(run, tmp_path / name)
            settings.setdefault(json.dumps(config.task_options, sort_keys=True), config)
        for options, config in settings.items():
            base = bootstrap.ensure_base_policy(
                config.task, config.task_options, config, tmp_path / "cache", progress=False
            )
            assert base.parent.parent == ASSETS_DIR, (name, options)
            # OPPO's teacher rows (the claims' own rows) run in these settings too
            teacher = bootstrap.ensure_teacher_policy(
                config.task, config.task_options, config, tmp_path / "cache", progress=False
            )
            assert teacher.parent == ASSETS_DIR / "teacher", (name, options)
    assert len(settings) == 2  # the standard suite: the easy and the hard setting


def test_a_task_entry_can_carry_its_own_grid_and_settings(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(
        "methods: [grpo]\nseeds: [0, 1]\ngrid: {rollout.prompts_per_step: [2, 4]}\n"
        "settings: {eval.n_problems: 8}\n"
        "tasks:\n"
        "  - {name: chain, options: {steps: [4, 6]}, settings: {eval.k_samples: 1}}\n"
        "  - {name: chain, options: {steps: 8}, grid: {rollout.prompts_per_step: [2, 4, 8]}}\n"
    )
    runs = expand_suite(load_suite(suite), suite)
    assert len(runs) == (2 * 2 + 3) * 2  # (lengths x suite grid + own grid) x seeds
    short = [r for r in runs if '"steps": 4' in " ".join(r.overrides)]
    assert {o for r in short for o in r.overrides} >= {"eval.k_samples=1", "eval.n_problems=8"}
    long = [r for r in runs if '"steps": 8' in " ".join(r.overrides)]
    assert not any(o.startswith("eval.k_samples") for r in long for o in r.overrides)
    assert {o for r in long for o in r.overrides if "prompts_per_step" in o} == {
        f"rollout.prompts_per_step={n}" for n in (2, 4, 8)
    }
    suite.write_text("methods: [grpo]\ntasks:\n  - {name: chain, grids: {}}\n")
    with pytest.raises(SuiteError, match="unknown key 'grids'"):
        expand_suite(load_suite(suite), suite)


def test_suite_errors_name_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("methods: [grpo, no-such-method]\n")
    with pytest.raises(SuiteError, match="no-such-method"):
        expand_suite(load_suite(bad), bad)
    bad.write_text("method: [grpo]\n")
    with pytest.raises(SuiteError, match="unknown key 'method'"):
        load_suite(bad)
    assert main(["bench", "--suite", "no-such-suite", "--dry-run"]) == 2


def test_a_suite_runs_named_variants_of_a_method(tmp_path):
    suite = tmp_path / "variants.yaml"
    suite.write_text(
        "methods: [grpo, {name: dapo_oppo, method: oppo, options: {base: dapo}}]\nseeds: [0]\n"
    )
    runs = expand_suite(load_suite(suite), suite)
    assert [(r.name, r.method, r.entry) for r in runs] == [
        ("chain-grpo-s0", "grpo", "grpo"),
        ("chain-dapo_oppo-s0", "oppo", "dapo_oppo"),
    ]
    assert 'method_options.base="dapo"' in runs[1].overrides
    config = run_config(runs[1], tmp_path)
    assert config.method == "oppo" and config.method_options["base"] == "dapo"
    from creditbench.methods.oppo import OPPO

    assert OPPO(**config.method_options).host.config.eps_high == 0.28  # DAPO's default
    for text, message in [
        ("methods: [{name: a, method: nosuch}]", "unknown method 'nosuch'"),
        ("methods: [{name: A-b, method: grpo}]", "a variant's name is a-z"),
        ("methods: [{name: a}]", "a variant is {name, method, options, settings}"),
        ("methods: [grpo, {name: grpo, method: grpo}]", "'grpo' is listed twice"),
        ("methods: [{name: a, method: grpo, options: [1]}]", "a.options must be a mapping"),
    ]:
        suite.write_text(text + "\n")
        with pytest.raises(SuiteError, match=re.escape(message)):
            expand_suite(load_suite(suite), suite)


def test_suite_method_options_reach_every_run_of_that_method(tmp_path):
    suite = tmp_path / "options.yaml"
    suite.write_text(
        "methods: [grpo, vineppo, {name: vine_two, method: vineppo,"
        " options: {rollouts_per_state: 2}}]\n"
        "method_options: {vineppo: {rollouts_per_state: 4, whiten: false}}\nseeds: [0]\n"
    )
    runs = {r.entry: r for r in expand_suite(load_suite(suite), suite)}
    assert not any(o.startswith("method_options.") for o in runs["grpo"].overrides)
    assert "method_options.rollouts_per_state=4" in runs["vineppo"].overrides
    two = run_config(runs["vine_two"], tmp_path).method_options
    assert two["rollouts_per_state"] == 2 and two["whiten"] is False  # its own options win
    for text in ("method_options: {nosuch: {a: 1}}", "method_options: {grpo: 3}"):
        suite.write_text("methods: [grpo]\n" + text + "\n")
        with pytest.raises(SuiteError, match="method_options: a mapping of registered"):
            expand_suite(load_suite(suite), suite)


def test_task_entries_that_differ_only_in_settings_need_a_label(tmp_path):
    suite = tmp_path / "regimes.yaml"
    entries = (
        "  - {name: chain, options: {steps: 8}}\n"
        "  - {name: chain, LABEL options: {steps: 8}, settings: {bootstrap_options.steps: 400}}\n"
    )
    suite.write_text("methods: [grpo]\ntasks:\n" + entries.replace("LABEL ", ""))
    with pytest.raises(SuiteError, match="both named 'chain-steps=8-grpo-s0'"):
        expand_suite(load_suite(suite), suite)
    suite.write_text("methods: [grpo]\ntasks:\n" + entries.replace("LABEL", "label: hard,"))
    runs = expand_suite(load_suite(suite), suite)
    assert [r.name for r in runs] == ["chain-steps=8-grpo-s0", "chain-hard-steps=8-grpo-s0"]
    assert "bootstrap_options.steps=400" in runs[1].overrides
    suite.write_text("methods: [grpo]\ntasks:\n" + entries.replace("LABEL", "label: Hard-1,"))
    with pytest.raises(SuiteError, match="a label is a-z, 0-9"):
        expand_suite(load_suite(suite), suite)


def test_only_selects_runs_by_glob_in_the_order_of_the_patterns(capsys):
    path = suite_path("standard")
    runs = expand_suite(load_suite(path), path)
    picked = select_runs(runs, ["chain-easy-steps=8-oracle-s0", "chain-easy-steps=8-*-s0"])
    names = [r.name for r in picked]
    assert names[0] == "chain-easy-steps=8-oracle-s0"
    assert len(names) == len(set(names)) == len(list_methods())  # every method once, seed 0
    assert all(n.startswith("chain-easy-steps=8-") and n.endswith("-s0") for n in names)
    assert select_runs(runs, []) == runs
    with pytest.raises(SuiteError, match="--only: nothing-\\* matches no run"):
        select_runs(runs, ["nothing-*"])
    argv = ["bench", "--suite", "standard", "--only", "chain-easy-steps=8-grpo-s4", "--dry-run"]
    assert main([*argv, "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert f"{len(runs)} runs, 1 selected by --only" in out and "1 threads" in out
    assert out.count("  chain-") == 1 and "  chain-easy-steps=8-grpo-s4\n" in out  # timed or not
    assert main([*argv, "--threads", "0"]) == 2
    assert main(["bench", "--suite", "standard", "--only", "x", "--dry-run"]) == 2


def test_seeds_replace_the_suites_and_a_second_set_adds_to_the_manifest(tmp_path, capsys):
    """A confirmatory set runs the same suite on other seeds (``--seeds 10-19``); its manifest
    in a folder that holds the first set lists both."""
    assert parse_seeds("10-12") == [10, 11, 12]
    assert parse_seeds("0,2,5-6,2") == [0, 2, 5, 6]
    for bad in ("", "3-1", "a", "-2", "1,,2"):
        with pytest.raises(SuiteError, match="--seeds"):
            parse_seeds(bad)
    argv = ["bench", "--suite", "quick", "--only", "*-grpo-*", "--dry-run"]
    assert main([*argv, "--seeds", "10-12"]) == 0
    out = capsys.readouterr().out
    listed = [line.split("-")[-1] for line in out.splitlines() if "  chain-" in line]
    assert listed == ["s10", "s11", "s12"]
    assert main([*argv, "--seeds", "3-"]) == 2
    assert "--seeds" in capsys.readouterr().err

    path = suite_path("quick")
    definition = load_suite(path)
    write_manifest(tmp_path, path, expand_suite(definition, path))
    write_manifest(tmp_path, path, expand_suite({**definition, "seeds": [10]}, path))
    names = [r["name"] for r in json.loads((tmp_path / "suite-quick.json").read_text())["runs"]]
    assert {n.rsplit("-", 1)[1] for n in names} == {"s0", "s10"}
    assert len(names) == len(set(names)) == 2 * len(expand_suite(definition, path))


@pytest.mark.slow
def test_bench_runs_workers_and_skips_finished_runs(tmp_path, capsys):
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, save_policy
    from creditbench.harness.tasks import get_task

    tokenizer = build_char_tokenizer(task_alphabet(get_task("chain", steps=2)))
    policy = save_policy(build_model("nano", tokenizer, seed=0), tokenizer, tmp_path / "nano")
    suite = tmp_path / "tiny.yaml"
    suite.write_text(
        f"""
methods: [grpo]
seeds: [0, 1]
tasks:
  - name: chain
    options: {{steps: 2, train_size: 32, eval_size: 4}}
settings:
  model.path: {str(policy)!r}
  rollout.prompts_per_step: 2
  rollout.group_size: 2
  rollout.max_new_tokens: 8
  eval.n_problems: 2
  eval.k_samples: 1
budget: {{unit: steps, amount: 2}}
"""
    )
    results = tmp_path / "results"
    first = ["bench", "--suite", str(suite), "--results", str(results), "--only", "*-s1"]
    assert main(first) == 0
    assert RunDir(results / "chain-steps=2-train_size=32-eval_size=4-grpo-s1").is_finished()
    assert not (results / "chain-steps=2-train_size=32-eval_size=4-grpo-s0").exists()
    manifest = json.loads((results / "suite-tiny.json").read_text())
    assert [r["name"][-2:] for r in manifest["runs"]] == ["s0", "s1"]
    assert "Suite tiny: 1 of 2 runs finished" in (results / "leaderboard.md").read_text()
    assert main(["bench", "--suite", str(suite), "--workers", "2", "--results", str(results)]) == 0
    names = [
        "chain-steps=2-train_size=32-eval_size=4-grpo-s0",
        "chain-steps=2-train_size=32-eval_size=4-grpo-s1",
    ]
    for name in names:
        assert RunDir(results / name).read_summary()["steps"] == 2
    out = capsys.readouterr().out
    assert "grpo" in out.split("setting")[-1]  # the summary table
    # and where the board went (the bench wrote it and said nothing)
    assert f"board: {results / 'leaderboard.md'} (and leaderboard.html beside it)" in out
    assert main(["bench", "--suite", str(suite), "--results", str(results), "--dry-run"]) == 0
    assert capsys.readouterr().out.count("[  done]") == 2
    assert "Suite tiny: all 2 runs finished." in (results / "leaderboard.md").read_text()
    # a second bench on the same results folder while one runs is refused, writing nothing
    capsys.readouterr()
    before = sorted(p.name for p in results.rglob("*"))
    with RunDir(results).lock(writing="these results (a bench)"):
        assert main(["bench", "--suite", str(suite), "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"--results: {results}: another process is writing these results (a bench) (pid" in err
    assert sorted(p.name for p in results.rglob("*")) == before


@pytest.mark.slow
def test_sigterm_to_bench_stops_its_workers_and_says_so(tmp_path):
    """SIGTERM ends bench as Ctrl-C does: its workers stop with it (they trained on, orphaned),
    and it says in one line what is kept, exit 130, no traceback."""
    import signal
    import subprocess
    import sys
    import time

    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, save_policy
    from creditbench.harness.tasks import get_task

    tokenizer = build_char_tokenizer(task_alphabet(get_task("chain", steps=2)))
    policy = save_policy(build_model("nano", tokenizer, seed=0), tokenizer, tmp_path / "nano")
    suite = tmp_path / "long.yaml"
    suite.write_text(
        f"methods: [grpo]\nseeds: [0]\ntasks:\n  - name: chain\n    options: {{steps: 2}}\n"
        f"settings:\n  model.path: {str(policy)!r}\n  rollout.prompts_per_step: 2\n"
        "  rollout.group_size: 2\n  rollout.max_new_tokens: 8\n  eval.n_problems: 2\n"
        "budget: {unit: steps, amount: 100000}\n"
    )
    results = tmp_path / "results"
    bench = subprocess.Popen(
        [sys.executable, "-m", "creditbench.tools.cli.main", "bench", "--suite", str(suite),
         "--results", str(results), "--workers", "1", "--threads", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not list(results.glob("chain-*/metrics.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.5)  # until the worker trains
        assert len(processes_mentioning(str(results))) == 2  # bench and its worker
        bench.send_signal(signal.SIGTERM)
        _, err = bench.communicate(timeout=60)
    finally:
        bench.kill()
    assert bench.returncode == 130
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("bench:")]
    assert lines == [lines[-1]] and "interrupted" in lines[-1] and "Traceback" not in err
    time.sleep(2)
    assert processes_mentioning(str(results)) == []  # no worker left training


def test_the_tuning_suite_is_the_standard_hard_setting_at_three_lrs_on_seeds_no_board_uses():
    """Stage 1 of the tuning rule (docs/testbed.md): every method and the oracle at 1.5e-5,
    5e-5 and 1.5e-4, on seeds 22-23, with every other setting the standard suite's hard run."""
    standard_path, tuning_path = suite_path("standard"), suite_path("tuning")
    standard, tuning = load_suite(standard_path), load_suite(tuning_path)
    assert {k: v for k, v in standard["settings"].items() if k != "train.lr"} == tuning["settings"]
    assert tuning["grid"] == {"train.lr": [1.5e-5, 5e-5, 1.5e-4]}
    assert standard["settings"]["train.lr"] in tuning["grid"]["train.lr"]
    board_seeds = set(range(20))  # exploratory 0-9, confirmatory 10-19
    assert tuning["seeds"] == [22, 23] and not board_seeds & set(tuning["seeds"])
    hard = [t for t in standard["tasks"] if t.get("label") == "hard"]
    assert tuning["tasks"] == hard and tuning["method_options"] == standard["method_options"]
    runs = expand_suite(tuning, tuning_path)
    methods = {run.method for run in expand_suite(standard, standard_path)}
    assert {run.method for run in runs} == methods
    assert len(runs) == len(methods) * 3 * 2


def test_a_variant_may_fix_config_fields_of_its_own_runs_and_they_win(tmp_path):
    """A tuned board lists each method at its own lr: a variant's settings apply to its runs
    only, over the suite's settings; a malformed one is refused naming the variant."""
    suite = {
        "methods": ["grpo", {"name": "gspo_tuned", "method": "gspo",
                             "options": {"eps_low": 1e-3}, "settings": {"train.lr": 1.5e-4}}],
        "seeds": [0],
        "settings": {"train.lr": 5e-5, "eval.n_problems": 4},
    }  # fmt: skip
    runs = {run.entry: run_config(run, tmp_path) for run in expand_suite(suite, tmp_path)}
    assert runs["grpo"].train.lr == 5e-5 and runs["gspo_tuned"].train.lr == 1.5e-4
    assert runs["gspo_tuned"].method_options["eps_low"] == 1e-3
    assert runs["gspo_tuned"].eval.n_problems == 4
    suite["methods"][1]["settings"] = ["train.lr"]
    with pytest.raises(SuiteError, match=r"gspo_tuned\.settings must map config fields"):
        expand_suite(suite, tmp_path)
