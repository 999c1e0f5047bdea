"""scripts/step_costs.py: every method's wall time a step over GRPO's, measured side by side in
one process on a committed run's setting (the board's cost column)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "results" / "standard" / "runs.csv"
EASY_GRPO = "chain-easy-steps=8-grpo-s0"


def script():
    spec = importlib.util.spec_from_file_location("step_costs", ROOT / "scripts" / "step_costs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bad_arguments_exit_2_with_one_message_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "costs.csv"
    assert script().main([str(RECORDS), "no-such-run", "--out", str(out)]) == 2
    assert "no finished run named no-such-run" in capsys.readouterr().err
    assert script().main([str(RECORDS), EASY_GRPO, "--out", str(out), "--rounds", "0"]) == 2
    assert "--rounds must be at least 1" in capsys.readouterr().err
    assert script().main([str(RECORDS)]) == 2  # argparse: the run and --out are required
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.mark.slow
def test_each_method_gets_its_ratio_to_grpos_step_in_the_runs_setting(tmp_path):
    out = tmp_path / "costs.csv"
    methods = "grpo,drgrpo,oracle"
    assert script().main([str(RECORDS), EASY_GRPO, "--out", str(out), "--methods", methods]) == 0
    costs = pd.read_csv(out, dtype={"options": str}).set_index("method")
    assert sorted(costs.index) == ["drgrpo", "grpo", "oracle"]
    assert (costs["options"] == "steps=8").all() and (costs["rounds"] == 3).all()
    assert costs.loc["grpo", "wall_per_step_ratio"] == 1.0
    assert (costs["step_seconds"] > 0).all()
    # the oracle's values are counted, not charged, and it does more work than GRPO's step
    assert costs.loc["oracle", "wall_per_step_ratio"] > 1.0
    # the board reads it: the file's settings key the rows the runs give
    runs = pd.read_csv(RECORDS, dtype={"options": str})
    run = runs[(runs["kind"] == "run") & (runs["run"] == EASY_GRPO)].iloc[0]
    assert (costs["task"].iloc[0], costs["setting"].iloc[0]) == (run["task"], run["setting"])
