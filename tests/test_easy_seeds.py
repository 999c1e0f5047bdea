"""scripts/easy_seeds.py: the rule that picks the standard suite's rows for easy seeds 5-9
(docs/testbed.md, "The easy setting's seeds 5-9"), on fake records of easy seeds 0-4."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import fake_runs
from fake_runs import make_run

ROOT = Path(__file__).resolve().parents[1]
EASY, HARD = "chain-easy-steps=8", "chain-hard-steps=10-slip_rate=0.1"


def script():
    spec = importlib.util.spec_from_file_location("easy_seeds", ROOT / "scripts" / "easy_seeds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def records(root: Path, monkeypatch, seeds=range(5)) -> Path:
    """GRPO, the oracle and DAPO (ahead at every seed), and RLOO, whose gain changes sign from
    seed to seed (undecided); RLOO's hard runs do not count."""
    for seed in seeds:
        for method in ("grpo", "oracle", "dapo"):
            make_run(root, f"{EASY}-{method}-s{seed}", method, seed)
        monkeypatch.setitem(fake_runs.SLOPE, "rloo", (0.13, 0.07, 0.12, 0.08, 0.11)[seed])
        make_run(root, f"{EASY}-rloo-s{seed}", "rloo", seed)
        make_run(root, f"{HARD}-rloo-s{seed}", "rloo", seed)
    return root


def test_grpo_the_oracle_and_the_undecided_rows_get_seeds_5_to_9(tmp_path, monkeypatch, capsys):
    runs = records(tmp_path / "runs", monkeypatch)
    methods = "grpo,oracle,dapo,rloo"
    assert script().main([str(runs), "--methods", methods]) == 0
    assert capsys.readouterr().out.split() == ["grpo", "oracle", "rloo"]  # DAPO is decided


def test_nothing_is_chosen_while_a_row_lacks_one_of_its_first_five_seeds(
    tmp_path, monkeypatch, capsys
):
    runs = records(tmp_path / "runs", monkeypatch, seeds=range(4))
    assert script().main([str(runs), "--methods", "grpo,oracle,dapo,rloo"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "easy seeds 0-4 missing for: grpo, oracle, dapo, rloo" in out.err
    assert script().main([str(runs), "--bogus"]) == 2


def test_the_campaigns_plan_keeps_easy_seeds_5_to_9_of_the_chosen_rows_only(
    tmp_path, monkeypatch, capsys
):
    """The board counts its runs against the campaign's plan, so a finished campaign reads as
    finished: every hard seed, easy seeds 0-4, and easy seeds 5-9 of GRPO, the oracle and the
    rows the rule chose; a row whose first five are not all in has none of 5-9 planned yet."""
    import json

    from creditbench.tools.suite import Run

    runs = records(tmp_path / "runs", monkeypatch)
    for seed in range(3):  # PPO's easy seeds 0-2 only: the rule cannot read it yet
        make_run(runs, f"{EASY}-ppo-s{seed}", "ppo", seed)
    suite = [
        Run(f"{setting}-{method}-s{seed}", method, "chain", seed, [], setting)
        for setting in (HARD, EASY)
        for method in ("grpo", "oracle", "dapo", "rloo", "ppo")
        for seed in range(10)
    ]
    plan = script().campaign_manifest(str(runs), suite)
    assert plan["suite"] == "standard" and plan["plan"].startswith("the campaign's plan: ")
    names = {r["name"] for r in plan["runs"]}
    assert {f"{HARD}-{m}-s9" for m in ("grpo", "oracle", "dapo", "rloo", "ppo")} <= names
    late = {n.removeprefix(f"{EASY}-") for n in names if n.startswith(EASY) and n[-1] in "56789"}
    assert late == {f"{m}-s{s}" for m in ("grpo", "oracle", "rloo") for s in range(5, 10)}
    assert len(names) == 50 + 25 + 15  # hard; easy 0-4; easy 5-9 of three rows
    # the board says the plan with its coverage
    from creditbench.leaderboard.suite_manifests import suite_coverage

    (tmp_path / "board").mkdir()
    (tmp_path / "board" / "suite-standard.json").write_text(json.dumps(plan))
    sentence = suite_coverage([tmp_path / "board"], names)[0]
    assert sentence == f"Suite standard ({plan['plan']}): all 90 runs finished."
    # the command line: the standard suite's runs, as JSON
    assert script().main([str(runs), "--plan"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert f"{EASY}-rloo-s9" in {r["name"] for r in printed["runs"]}
    assert f"{EASY}-dapo-s9" not in {r["name"] for r in printed["runs"]}
    assert script().main([str(runs), "--plan", "--methods", "grpo"]) == 2  # one or the other
