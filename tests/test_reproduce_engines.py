"""``creditbench reproduce CARD --scale paper --engine verl``: the plan written as a verl launch
(data, reward function, the rows' registration module, one ``main_ppo`` per run), run nowhere
here. The keys are checked against verl's own config in ``tests/test_engine_verl.py``."""

from __future__ import annotations

import importlib.util
import subprocess

import pandas as pd
import pytest

from creditbench.harness.sampling.rollout import chat_turn
from creditbench.harness.tasks import get_task
from creditbench.tools.cli.main import main


def _reproduce(tmp_path, card, *extra):
    return main(
        ["reproduce", card, "--scale", "paper", "--task", "math", "--steps", "16", "--engine"]
        + ["verl", "--results", str(tmp_path), "--seeds", "2", *extra]
    )


@pytest.fixture(scope="module")
def drgrpo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reproduce")
    assert _reproduce(folder, "drgrpo") == 0  # written, run nowhere here
    return folder / "verl"


def _runs(script: str) -> list[dict[str, str]]:
    runs = []
    for block in script.split("python -m verl.trainer.main_ppo")[1:]:
        parts = [p.strip().strip("\\").strip().strip("'\"") for p in block.split("\n")]
        runs.append(dict(p.split("=", 1) for p in parts if "=" in p))
    return runs


def test_the_launch_has_one_verl_run_per_row_and_seed_with_the_plans_values(drgrpo):
    script = (drgrpo / "launch.sh").read_text()
    assert subprocess.run(["bash", "-n", str(drgrpo / "launch.sh")]).returncode == 0
    runs = _runs(script)
    assert len(runs) == 4  # grpo and drgrpo, two seeds each
    by_name = {r["trainer.experiment_name"]: r for r in runs}
    assert set(by_name) == {"math-grpo-s0", "math-grpo-s1", "math-drgrpo-s0", "math-drgrpo-s1"}
    ours = by_name["math-drgrpo-s1"]
    assert ours["algorithm.adv_estimator"] == "creditbench_drgrpo_drgrpo"
    assert ours["actor_rollout_ref.actor.policy_loss.loss_mode"] == "creditbench_drgrpo_drgrpo"
    assert ours["actor_rollout_ref.actor.loss_agg_mode"] == "seq-mean-token-sum-norm"
    # 16 optimizer steps: four batches of four minibatches
    assert ours["data.seed"] == "1" and ours["trainer.total_training_steps"] == "4"
    # the profile where the card is silent, never the testbed's 2e-4
    assert float(ours["actor_rollout_ref.actor.optim.lr"]) == 1e-6
    assert ours["actor_rollout_ref.model.path"] == "$MODEL_DIR"  # no --model-dir given
    prompts = int(ours["data.train_batch_size"])
    assert int(ours["actor_rollout_ref.actor.ppo_mini_batch_size"]) * 4 == prompts
    assert ours["data.train_files"] == "$HERE/data/train.parquet"


def test_the_data_and_the_reward_function_are_the_tasks(drgrpo):
    task = get_task("math")
    problems = task.problems("test")
    frame = pd.read_parquet(drgrpo / "data" / "test.parquet")
    assert len(frame) == len(problems)
    row = frame.iloc[3]
    assert row["prompt"][0]["content"] == problems[3].prompt
    assert [dict(turn) for turn in row["prompt"]] == chat_turn(problems[3].prompt)  # every engine's
    assert row["reward_model"]["ground_truth"] == problems[3].answer
    spec = importlib.util.spec_from_file_location("reward", drgrpo / "reward.py")
    reward = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reward)
    info = {"split": "test", "index": 3}
    right = f"The answer is \\boxed{{{problems[3].answer}}}."
    assert reward.compute_score("x", right, problems[3].answer, info) == 1.0
    assert (
        reward.compute_score("x", "The answer is \\boxed{-987654}.", problems[3].answer, info)
        == 0.0
    )


def test_a_card_whose_own_method_cannot_run_in_verl_is_refused_with_nothing_written(
    tmp_path, capsys
):
    """A launch of SCAPO's card without SCAPO would run its GRPO baseline alone."""
    assert _reproduce(tmp_path, "scapo") == 2
    err = capsys.readouterr().err
    assert "--engine verl: the method the card proposes cannot run on verl" in err
    assert "scapo: its credit reads the behaviour log-probs" in err and "--engine builtin" in err
    assert not (tmp_path / "verl").exists()


def test_a_dry_run_prints_the_launch_and_writes_nothing(tmp_path, capsys):
    assert _reproduce(tmp_path, "drgrpo", "--dry-run") == 0
    out = capsys.readouterr().out
    # readable: the first run one override a line, the others by what differs from it
    assert out.count("python -m verl.trainer.main_ppo") == 1
    assert "run 1 of 4: python -m verl.trainer.main_ppo" in out and "run 4 of 4: as run 1" in out
    assert max(len(line) for line in out.splitlines() if "=" in line) < 400
    assert f"dry run, nothing written; it would write: {tmp_path / 'verl' / 'data'}" in out
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_dapo_runs_on_verls_own_dynamic_sampling(tmp_path, capsys):
    assert _reproduce(tmp_path, "dapo") == 0
    out = capsys.readouterr().out
    assert "left out" not in out
    assert "in the verl launch, dapo: verl's filter samples until the batch is full" in out
    runs = _runs((tmp_path / "verl" / "launch.sh").read_text())
    by_row = {r["algorithm.adv_estimator"]: r for r in runs}
    dapo, grpo = by_row["creditbench_dapo_dapo"], by_row["creditbench_dapo_grpo"]
    assert dapo["algorithm.filter_groups.enable"] == "True"
    assert dapo["algorithm.filter_groups.metric"] == "reward" and dapo["trainer.use_v1"] == "True"
    assert "algorithm.filter_groups.enable" not in grpo
    assert dapo["actor_rollout_ref.actor.clip_ratio_high"] == "0.28"
    plugin = (tmp_path / "verl" / "creditbench_plan.py").read_text()
    limit = dapo["data.max_response_length"]
    assert f"register('creditbench_dapo_dapo', 'dapo', **{{'max_new_tokens': {limit}" in plugin


def test_engine_flags_are_checked(tmp_path, capsys):
    assert main(["reproduce", "dapo", "--scale", "cpu", "--engine", "verl"]) == 2
    assert "--engine verl: only with --scale paper" in capsys.readouterr().err
    assert _reproduce(tmp_path, "dapo", "--engine", "nosuch") == 2
    assert "--engine: must be one of builtin, verl, trl" in capsys.readouterr().err
    budget = ["reproduce", "dapo", "--scale", "paper", "--task", "math", "--budget", "1e15"]
    assert main([*budget, "--engine", "verl", "--results", str(tmp_path / "b")]) == 2
    assert "give --steps N" in capsys.readouterr().err
    steps = ["reproduce", "dapo", "--scale", "paper", "--task", "math", "--steps", "6"]
    assert main([*steps, "--engine", "verl", "--results", str(tmp_path / "c")]) == 0
    # DAPO's 16 updates a rollout step (§4.1): 6 steps are one batch of 16, and it says so
    assert "6 rounded to 16, a whole number of batches of 16 optimizer steps" in (
        capsys.readouterr().out
    )
    assert "trainer.total_training_steps=1 " in (tmp_path / "c" / "verl" / "launch.sh").read_text()
    assert not (tmp_path / "b" / "verl" / "launch.sh").exists()


def test_a_trl_launch_maps_each_run_onto_grpo_config_arguments(tmp_path, capsys):
    import json

    args = ["reproduce", "rloo", "--scale", "paper", "--task", "math", "--steps", "8"]
    assert main([*args, "--engine", "trl", "--results", str(tmp_path)]) == 0
    folder = tmp_path / "trl"
    assert subprocess.run(["bash", "-n", str(folder / "launch.sh")]).returncode == 0
    plan = json.loads((folder / "runs.json").read_text())
    assert plan["task"] == "math" and len(plan["runs"]) == 6  # grpo and rloo, three seeds
    rloo = plan["runs"]["math-rloo-s1"]
    assert rloo["method"] == "rloo" and rloo["trl"]["seed"] == 1
    assert rloo["trl"]["loss_type"] == "luspo"  # RLOO's seq-mean-token-sum
    assert rloo["trl"]["learning_rate"] == 1e-6 and rloo["trl"]["max_steps"] == 8
    assert rloo["minibatches"] == 4  # the profile's four: optimizer steps a generation
    assert rloo["micro_batch"] >= 1 and "steps_per_generation" not in rloo["trl"]  # train.py
    script = (folder / "launch.sh").read_text()
    assert script.count("accelerate launch") == 6 and "--run math-rloo-s1" in script
    compile((folder / "train.py").read_text(), "train.py", "exec")


def test_a_trl_launch_of_a_card_whose_own_method_trl_cannot_run_is_refused(tmp_path, capsys):
    assert _reproduce(tmp_path, "dapo", "--dry-run", "--engine", "trl") == 2  # the last wins
    err = capsys.readouterr().err
    assert "the method the card proposes cannot run on trl" in err
    assert "dapo: its dynamic sampling runs on one TRL process" in err and "verl" in err
    assert not (tmp_path / "trl").exists()
