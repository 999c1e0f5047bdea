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
