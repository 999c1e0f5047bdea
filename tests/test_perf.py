"""``creditbench perf`` runs end to end on a tiny model and prints every section."""

from __future__ import annotations

import re

import pytest

from creditbench.tools.cli.main import main


def test_perf_prints_phases_methods_relative_to_grpo_and_the_plain_loop(tmp_path, capsys):
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, save_policy
    from creditbench.harness.tasks import get_task

    tokenizer = build_char_tokenizer(task_alphabet(get_task("chain", steps=2)))
    policy = save_policy(build_model("nano", tokenizer, seed=0), tokenizer, tmp_path / "nano")
    settings = [
        "task_options.steps=2",
        f"model.path={policy}",
        "rollout.prompts_per_step=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=8",
    ]
    argv = ["perf", "--repeats", "1", "--threads", "1", "--methods", "oracle", "prime", "--no-trl"]
    for item in settings:
        argv += ["--set", item]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for phase in ("generation", "scoring", "advantages", "update", "step"):
        # fast and reference path side by side, and their ratio
        assert re.search(rf"^\s+{phase}\s+[\d.]+ms\s+[\d.]+ms\s+([\d.]+x|-)$", out, re.M), phase
    assert "reference path (today's before it): rollout.backend=hf" in out
    assert re.search(r"fp32 matmul peak \([\d.]+%\)", out)
    assert re.search(r"counting what it executes \((100|[1-9]?\d)% of the tokens", out)
    assert re.search(r"at the update's own shapes .*: [\d.]+ GFLOP/s; executed / that", out)
    assert re.search(r"outside CPU load during the run: [\d.]+ cores", out)
    # GRPO is always timed, as the reference of the relative columns, and gives exactly 1x
    assert re.search(r"^\s+grpo\s+[\d.]+s\s+1\.00x\s+1\.00x", out, re.M)
    assert re.search(r"^\s+oracle\s+[\d.]+s\s+[\d.]+x\s+[\d.]+x", out, re.M)
    # a method with a reference model of its own is timed on a run that keeps none
    assert re.search(r"^\s+prime\s+[\d.]+s\s+[\d.]+x\s+[\d.]+x", out, re.M)
    assert not re.search(r"^\s+dapo\s", out, re.M)  # only the methods asked for
    assert re.search(r"generation\s+harness\s+[\d.]+ ms\s+plain\s+[\d.]+ ms", out)
    assert re.search(r"update\s+harness\s+[\d.]+ ms\s+plain\s+[\d.]+ ms", out)


def test_perf_refuses_bad_arguments(capsys):
    assert main(["perf", "--repeats", "0"]) == 2
    assert "--repeats: must be an integer >= 1" in capsys.readouterr().err
    assert main(["perf", "--methods", "nosuch"]) == 2
    assert "--methods: unknown method 'nosuch'" in capsys.readouterr().err


@pytest.mark.slow
def test_perf_times_trl_grpo_trainer_beside_the_harness(tmp_path, capsys):
    """With the compare extra installed, TRL's step on the same model and batch shape."""
    pytest.importorskip("trl", reason="the slow step of .ci/run installs creditbench[compare]")
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, save_policy
    from creditbench.harness.tasks import get_task

    tokenizer = build_char_tokenizer(task_alphabet(get_task("chain", steps=2)))
    policy = save_policy(build_model("nano", tokenizer, seed=0), tokenizer, tmp_path / "nano")
    argv = ["perf", "--repeats", "1", "--threads", "1", "--methods"]
    for item in (
        "task_options.steps=2",
        f"model.path={policy}",
        "rollout.prompts_per_step=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=8",
    ):
        argv += ["--set", item]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"TRL GRPOTrainer step, .*: [\d.]+ ms; harness fast step / TRL step [\d.]+x", out
    )
    assert "every method, one step" not in out  # --methods with no name skips the table


def test_shaped_matmul_peak_is_a_rate_over_the_models_linear_shapes():
    import torch

    from creditbench.tools.perf import shaped_matmul_peak

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 16))
    rate = shaped_matmul_peak(model, rows=64, repeats=2)
    assert 1e6 < rate < 1e14  # FLOP/s of some plausible machine, not seconds or FLOPs


def test_perf_times_a_method_with_a_kl_weight_with_its_reference_pass(nano_policy, tmp_path):
    """A method whose Config weighs a KL is timed as its run would go: every batch scored
    under the reference (perf's GRPO run keeps none), so the KL term acts; afterwards the
    trainer's own method goes without that pass again."""
    from creditbench.harness.config import load_config
    from creditbench.harness.training.trainer import Trainer
    from creditbench.tools.perf import method_steps

    settings = [
        "task_options.steps=2",
        f"model.path={nano_policy}",
        "rollout.prompts_per_step=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=8",
    ]
    trainer = Trainer(load_config(None, ["method=grpo", *settings]), tmp_path / "perf")
    trainer.build()
    assert trainer.services.scorers.reference is None
    method_steps(trainer, ["reinforce_pp_baseline"])  # grpo, then the baseline variant
    batch, _ = trainer.last_credit
    assert batch.ref_logprobs is not None
    trainer.train_step()  # the trainer's grpo: its batches go back to no reference pass
    batch, _ = trainer.last_credit
    assert batch.ref_logprobs is None


def test_perf_phases_projects_a_hard_run_before_and_after_side_by_side(capsys):
    """The standard suites' hard run, shrunk to seconds by overrides both paths share: the
    table has every row with both paths and their ratio, and the start evaluation that the
    path after protocol 2 reuses costs it a look-up where the path before computes it."""
    argv = ["perf", "--phases", "--repeats", "1", "--threads", "1"]
    for item in ("eval.n_problems=2", "rollout.max_new_tokens=8", "rollout.prompts_per_step=2"):
        argv += ["--set", item]
    assert main(argv) == 0
    out = capsys.readouterr().out
    values = {}
    for label in ("training step", "evaluation (a point)", "start evaluation", "run"):
        match = re.search(rf"^\s+{re.escape(label)}\s+([\d.]+)\s+([\d.]+)\s+[\d.]+x$", out, re.M)
        assert match, label
        values[label] = (float(match.group(1)), float(match.group(2)))
    before_start, after_start = values["start evaluation"]
    assert before_start == values["evaluation (a point)"][0]  # computed: a point's cost
    assert after_start < before_start  # reused: the material and a look-up
    assert re.search(r"before: \d+ steps, 4 later points \+ the start", out)
    for phase in ("generation", "update"):  # a batch 4x the run's, per token
        assert re.search(rf"^\s+{phase}\s+\d+\s+\d+\s+[\d.]+x \(the most", out, re.M), phase
    assert "outside CPU load during the run" in out


def test_perf_phases_refuses_a_config_of_its_own(capsys):
    assert main(["perf", "--phases", "--config", "x.yaml"]) == 2
    assert "--phases: measures the standard suites' hard run" in capsys.readouterr().err


def test_the_project_arithmetic_of_perf_phases():
    from creditbench.harness.config import RunConfig
    from creditbench.tools.perf_phases import project

    config = RunConfig()
    config.budget.eval_fractions = [0.0, 0.25, 0.5, 0.75, 1.0]
    computed = project(config, 10.0, 2.5, {"step": 3.0, "eval": 7.0}, None)
    assert computed["steps"] == 4 and computed["training"] == 12.0
    assert computed["evaluation"] == 5 * 7.0 and computed["run"] == 47.0
    reused = project(config, 10.0, 3.0, {"step": 3.0, "eval": 7.0}, 0.5)
    assert reused["steps"] == 4 and reused["evaluation"] == 4 * 7.0 + 0.5
