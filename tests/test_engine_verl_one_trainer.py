"""A verl launch compares its rows on one trainer: where a row's credit reads the response token
ids (TEMPO's, KTAE's), which only verl's legacy trainer passes to an estimator, the baseline
beside it runs on the legacy trainer too (``trainer.use_v1=False``), not on verl's default v1
trainer. Reads the written ``launch.sh``; verl itself is not needed (its own config checks of
these launches are in ``tests/test_engine_verl.py``)."""

from __future__ import annotations

import re

import pytest

from creditbench.tools.cli.main import main

pytestmark = pytest.mark.engines  # a launch writes MATH's data: seconds, not for the default suite


@pytest.mark.parametrize("card", ["tempo", "ktae"])
def test_the_baseline_and_the_token_level_method_run_on_one_trainer(card, tmp_path):
    args = ["reproduce", card, "--scale", "paper", "--task", "math", "--steps", "16"]
    assert main([*args, "--engine", "verl", "--results", str(tmp_path)]) == 0
    script = (tmp_path / "verl" / "launch.sh").read_text().replace("\\\n", " ")
    runs = [line for line in script.splitlines() if line.startswith("python -m verl")]
    trainers = {}
    for run in runs:
        estimator = re.search(r"algorithm\.adv_estimator=(\S+)", run).group(1)
        trainers.setdefault(estimator, set()).update(re.findall(r"trainer\.use_v1=(\w+)", run))
    assert set(trainers) == {f"creditbench_{card}_grpo", f"creditbench_{card}_{card}"}
    assert all(found == {"False"} for found in trainers.values()), trainers


def test_a_launch_without_a_token_level_row_stays_on_verls_default_trainer(tmp_path):
    args = ["reproduce", "drgrpo", "--scale", "paper", "--task", "math", "--steps", "16"]
    assert main([*args, "--engine", "verl", "--results", str(tmp_path)]) == 0
    assert "trainer.use_v1=False" not in (tmp_path / "verl" / "launch.sh").read_text()
