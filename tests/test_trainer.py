"""The training loop: determinism, kill-and-resume equivalence, guards, budget charging, the
on-policy ratio, and CLI errors.

Runs use the chain task with 2-step problems and a randomly initialised "nano" model saved to a
temporary folder, so no base policy is trained. A random model earns no reward, so GRPO would
never move it; the runs here use a test method whose token advantages come from the token ids,
so every step changes the weights and a resume that went wrong would show.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from creditbench.harness.config import load_config
from creditbench.harness.records.rundir import RunDir, RunDirError, RunLockedError
from creditbench.harness.services.step_plan import StepPlan
from creditbench.harness.training.setup import needs_reference
from creditbench.harness.training.trainer import NonFiniteError, Trainer
from creditbench.leaderboard.collect import SAMPLES_EVAL, collect_runs
from creditbench.methods.base import CreditMethod, Needs
from creditbench.methods.registry import _REGISTRY, list_methods, register_method
from creditbench.tools.cli.main import main

TOKEN_METHOD = "test-token-credit"
NAN_METHOD = "test-nan-at-step-3"
TASK = "task_options={steps: 2, train_size: 64, eval_size: 8}"


class TokenCredit(CreditMethod):
    """Advantages that depend on the token ids only: nonzero whatever the reward."""

    summary = "test only"

    def advantages(self, batch, services=None):
        delay = float(os.environ.get("CREDITBENCH_TEST_STEP_SLEEP", "0"))
        if delay:
            time.sleep(delay)  # gives a test time to kill the process mid-run
        return ((batch.response_ids % 5).float() - 2.0) / 2.0 * batch.response_mask


class NaNAtStep3(TokenCredit):
    """Fine for two steps, then a NaN advantage."""

    def advantages(self, batch, services=None):
        advantages = super().advantages(batch, services)
        if services is not None and services.step == 2:  # the third step (0-based)
            advantages[0, 0] = float("nan")
        return advantages


class BlindTokenCredit(TokenCredit):
    """TokenCredit, declared not to read the behaviour log-probs before the update."""

    needs = Needs(behaviour_logprobs=False)


BLIND_METHOD = "test-blind-token-credit"


def register_test_methods() -> None:
    register_method(TOKEN_METHOD)(TokenCredit)
    register_method(NAN_METHOD)(NaNAtStep3)
    register_method(BLIND_METHOD)(BlindTokenCredit)


@pytest.fixture
def test_methods():
    register_test_methods()
    yield
    _REGISTRY.pop(TOKEN_METHOD, None)
    _REGISTRY.pop(NAN_METHOD, None)
    _REGISTRY.pop(BLIND_METHOD, None)


def overrides(policy: Path, *extra: str) -> list[str]:
    return [
        TASK,
        f"model.path={policy}",
        "rollout.prompts_per_step=3",
        "rollout.group_size=3",
        "rollout.max_new_tokens=12",
        "train.lr=3e-3",
        "budget.unit=steps",
        "budget.amount=5",
        "budget.eval_fractions=[0.0, 0.6, 1.0]",
        "eval.n_problems=4",
        "eval.k_samples=2",
        "checkpoint_every=2",
        *extra,
    ]


def run(policy: Path, run_dir: Path, method: str = TOKEN_METHOD, *extra: str) -> dict:
    config = load_config(None, [f"method={method}", *overrides(policy, *extra)])
    return Trainer(config, run_dir).train()


def without_time(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "time"} for r in records]


def test_same_config_and_seed_give_identical_metrics(test_methods, nano_policy, tmp_path):
    first = run(nano_policy, tmp_path / "a")
    second = run(nano_policy, tmp_path / "b")
    metrics_a = without_time(RunDir(tmp_path / "a").read_metrics())
    metrics_b = without_time(RunDir(tmp_path / "b").read_metrics())
    assert metrics_a == metrics_b
    assert [r["step"] for r in metrics_a if "eval" not in r] == [1, 2, 3, 4, 5]
    assert {k: v for k, v in first.items() if k != "time"} == {
        k: v for k, v in second.items() if k != "time"
    }
    # the weights did move, so the equality above is not trivial
    assert all(r["grad_norm"] > 0 for r in metrics_a if "grad_norm" in r)
    third = run(nano_policy, tmp_path / "c", TOKEN_METHOD, "seed=1")
    assert without_time(RunDir(tmp_path / "c").read_metrics()) != metrics_a
    assert third["steps"] == 5


def test_finished_run_is_not_rerun(test_methods, nano_policy, tmp_path):
    summary = run(nano_policy, tmp_path / "a")
    before = (tmp_path / "a" / "metrics.jsonl").read_bytes()
    again = run(nano_policy, tmp_path / "a")
    assert again == summary
    assert (tmp_path / "a" / "metrics.jsonl").read_bytes() == before


DRIVER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import torch
    torch.set_num_threads(1)
    from test_trainer import register_test_methods
    register_test_methods()
    from creditbench.tools.cli.main import main
    sys.exit(main(sys.argv[1:]))
    """
)


def test_an_evaluation_lands_at_the_step_that_reaches_each_count_of_trained_responses(
    test_methods, nano_policy, tmp_path
):
    """budget.eval_responses: 9 responses a step (3 prompts x 3), so 9 is reached exactly at
    step 1, 10 and 18 at step 2, 27 at step 3; 1000 never. Each is evaluated once, apart from
    the evaluations at budget fractions, and adding them changes no step of training."""
    counts = "budget.eval_responses=[9, 10, 18, 27, 1000]"
    summary = run(nano_policy, tmp_path / "counts", TOKEN_METHOD, counts)
    records = without_time(RunDir(tmp_path / "counts").read_metrics())
    evals = [r for r in records if "eval" in r]
    at_counts = [(r["eval"]["responses"], r["step"]) for r in evals if "responses" in r["eval"]]
    assert at_counts == [(9, 1), (10, 2), (18, 2), (27, 3)]
    trained = {r["step"]: r["responses"] for r in records if "eval" not in r}
    assert all(sum(trained[s] for s in range(1, step + 1)) >= n for n, step in at_counts)
    assert all(sum(trained[s] for s in range(1, step)) < n for n, step in at_counts)
    # one evaluation a step, logged under each mark it serves: the same numbers
    step2 = [r["eval"] for r in evals if r["step"] == 2]
    assert len(step2) == 2 and step2[0]["sampled_accuracy"] == step2[1]["sampled_accuracy"]

    plain = run(nano_policy, tmp_path / "plain")
    plain_records = without_time(RunDir(tmp_path / "plain").read_metrics())
    assert [r for r in records if "responses" not in r.get("eval", {})] == plain_records
    assert {k: v for k, v in summary.items() if k not in ("time", "run_name")} == {
        k: v for k, v in plain.items() if k not in ("time", "run_name")
    }
    # the leaderboard reads them as their own kind of evaluation, where they happened
    table, _ = collect_runs(tmp_path / "counts")
    rows = table[table["kind"] == SAMPLES_EVAL]
    assert rows[["responses_mark", "responses_trained"]].values.tolist() == [
        [9, 9], [10, 18], [18, 18], [27, 27]
    ]  # fmt: skip
    assert (table["kind"] == "eval").sum() == 3  # the budget's, at 0, 0.6 and 1


@pytest.mark.parametrize("method", [TOKEN_METHOD, "prime"])  # prime: a second trained model
def test_kill_and_resume_matches_an_uninterrupted_run(test_methods, nano_policy, tmp_path, method):
    # evaluations at counts of trained responses (9 a step) too: those the killed process
    # logged after its last checkpoint are logged again on resume, never twice
    counts = "budget.eval_responses=[9, 27, 45, 63]"
    extra = ("budget.amount=8", "checkpoint_every=2", "eval.k_samples=0", counts)
    reference = run(nano_policy, tmp_path / "reference", method, *extra)

    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(tests=str(Path(__file__).parent)))
    killed = tmp_path / "killed"
    args = ["train", "--quiet", "--threads", "1", "--method", method]
    args += ["--output", str(tmp_path), "--name", "killed"]
    for item in overrides(nano_policy, *extra):
        args += ["--set", item]
    env = {**os.environ, "CREDITBENCH_TEST_STEP_SLEEP": "0.3"}
    proc = subprocess.Popen([sys.executable, str(driver), *args], env=env)
    deadline = time.monotonic() + 600  # generous: a loaded machine starts python slowly
    while RunDir(killed).latest_checkpoint() is None:
        assert proc.poll() is None, "the training process ended before its first checkpoint"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not RunDir(killed).is_finished()

    resumed = subprocess.run(
        [
            sys.executable,
            str(driver),
            "train",
            "--quiet",
            "--threads",
            "1",
            "--resume",
            str(killed),
        ],
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert without_time(RunDir(killed).read_metrics()) == without_time(
        RunDir(tmp_path / "reference").read_metrics()
    )
    marks = [r["eval"].get("responses") for r in RunDir(killed).read_metrics() if "eval" in r]
    assert [m for m in marks if m is not None] == [9, 27, 45, 63]
    # the responses logged for `creditbench explain` resume as the metrics do
    logged = RunDir(tmp_path / "reference").read_responses()
    assert logged and RunDir(killed).read_responses() == logged
    summary = RunDir(killed).read_summary()
    assert {k: v for k, v in summary.items() if k not in ("time", "run_name")} == {
        k: v for k, v in reference.items() if k not in ("time", "run_name")
    }


def test_non_finite_advantages_stop_the_run_before_any_checkpoint(
    test_methods, nano_policy, tmp_path
):
    with pytest.raises(NonFiniteError, match=rf"{NAN_METHOD}.*advantage"):
        run(nano_policy, tmp_path / "nan", NAN_METHOD, "checkpoint_every=1")
    run_dir = RunDir(tmp_path / "nan")
    steps = sorted(int(p.name.split("-")[1]) for p in run_dir.checkpoints_path.iterdir())
    assert steps and max(steps) == 2  # steps 1 and 2 were good; step 3 never reached a checkpoint
    assert max(r["step"] for r in run_dir.read_metrics()) == 2
    assert run_dir.read_summary()["status"] == "non-finite"


class Recorder(TokenCredit):
    """Keeps the batch of the step, for counting its tokens."""

    batches: list = []

    def rollout(self, services):
        batch = super().rollout(services)
        Recorder.batches.append(batch)
        return batch


def test_every_pass_of_a_step_is_charged(nano_policy, tmp_path):
    config = load_config(
        None,
        ["method=grpo", *overrides(nano_policy, "train.ppo_epochs=2", "train.minibatches=3")]
        + ["train.reference_model=true"],
    )
    trainer = Trainer(config, tmp_path / "charged")
    trainer.method = Recorder()
    Recorder.batches.clear()
    trainer.build()
    trainer.train_step()
    (batch,) = Recorder.batches
    meter = trainer.meter

    prompt = batch.prompt_mask.sum(-1).long()
    response = batch.response_mask.sum(-1).long()
    total = prompt + response
    # policy scoring + reference scoring, both over prompt + response
    assert meter.forward_tokens == 2 * int(total.sum())
    assert meter.generated_tokens == int(response.sum())
    assert meter.trained_tokens == 2 * int(total.sum())  # two PPO epochs
    assert meter.optimizer_steps == 2 * 3  # epochs x minibatches

    n, layers, width = meter.non_embedding_params, meter.n_layers, meter.d_model
    tri = [int(t) * (int(t) + 1) // 2 for t in total]
    forward = sum(2 * n * int(t) + 2 * layers * width * c for t, c in zip(total, tri, strict=False))
    generation = sum(
        2 * n * (int(p) + int(g)) + 2 * layers * width * sum(range(1, int(p) + int(g) + 1))
        for p, g in zip(prompt, response, strict=False)
    )
    assert meter.flops == 2 * forward + generation + 2 * 3 * forward


def test_first_epoch_is_exactly_on_policy(test_methods, nano_policy, tmp_path):
    run(nano_policy, tmp_path / "a", TOKEN_METHOD, "train.ppo_epochs=1", "train.micro_batch_size=4")
    steps = [r for r in RunDir(tmp_path / "a").read_metrics() if "clip_frac" in r]
    assert steps and all(r["approx_kl"] == 0.0 and r["clip_frac"] == 0.0 for r in steps)
    # a second epoch is off-policy: the ratio moves away from 1 there
    run(nano_policy, tmp_path / "b", TOKEN_METHOD, "train.ppo_epochs=3", "train.lr=3e-2")
    later = [r for r in RunDir(tmp_path / "b").read_metrics() if "approx_kl" in r]
    assert any(r["approx_kl"] != 0.0 for r in later)


REFERENCE_PATH = (
    "rollout.backend=hf",
    "train.skip_onpolicy_scoring=false",
    "train.shared_prefix_forward=false",
)
COUNTERS = ("flops", "forward_tokens")


def test_fast_path_computes_what_the_reference_path_computes(test_methods, nano_policy, tmp_path):
    """The lean sampler, the shared-prefix forward and the skipped on-policy scoring pass change
    no metric of a run: the same tokens, rewards, losses, gradients and evaluations; only the
    scoring pass's charge to the meter is gone."""
    run(nano_policy, tmp_path / "fast", BLIND_METHOD)
    run(nano_policy, tmp_path / "reference", BLIND_METHOD, *REFERENCE_PATH)
    fast = without_time(RunDir(tmp_path / "fast").read_metrics())
    reference = without_time(RunDir(tmp_path / "reference").read_metrics())
    assert len(fast) == len(reference)

    def same(ours, theirs, where=""):
        if isinstance(ours, dict):
            assert set(ours) == set(theirs), where
            for key in ours:
                if key not in COUNTERS:
                    same(ours[key], theirs[key], f"{where}.{key}")
        elif isinstance(ours, float):
            assert ours == pytest.approx(theirs, rel=1e-5, abs=1e-6), where
        elif isinstance(ours, list):  # per optimizer step: grad_norms, update_norms
            assert len(ours) == len(theirs), where
            for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
                same(a, b, f"{where}[{index}]")
        else:
            assert ours == theirs, where

    for ours, theirs in zip(fast, reference, strict=True):
        same(ours, theirs)
    steps = [r for r in fast if "clip_frac" in r]
    assert steps and all(r["approx_kl"] == 0.0 and r["clip_frac"] == 0.0 for r in steps)
    flops = [(a["flops"], b["flops"]) for a, b in zip(fast, reference, strict=True) if "flops" in a]
    assert all(a < b for a, b in flops[1:])  # the scoring forward is no longer charged


def test_scoring_is_kept_where_the_update_is_not_exactly_on_policy(
    test_methods, nano_policy, tmp_path
):
    config = load_config(None, [f"method={BLIND_METHOD}", *overrides(nano_policy)])
    trainer = Trainer(config, tmp_path / "a")
    trainer.build()
    assert StepPlan.for_method(0, trainer.method, trainer.config.train).behaviour_from_update
    assert not StepPlan.for_method(
        0, TokenCredit(), trainer.config.train
    ).behaviour_from_update  # reads them
    for extra in ("train.ppo_epochs=2", "train.minibatches=2", "train.skip_onpolicy_scoring=false"):
        config = load_config(None, [f"method={BLIND_METHOD}", *overrides(nano_policy, extra)])
        other = Trainer(config, tmp_path / extra)
        assert not StepPlan.for_method(0, other.method, other.config.train).behaviour_from_update, (
            extra
        )


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["train", "--method", "no-such-method"], "method"),
        (["train", "--method", "grpo", "--set", "rollout.group_sise=4"], "group_sise"),
        (["train", "--method", "grpo", "--set", "rollout.group_size=0"], "rollout.group_size"),
        (["train", "--method", "grpo", "--task", "no-such-task"], "task"),
        (["train", "--method", "grpo", "--set", "method_options.eps_low=2"], "eps_low"),
    ],
)
def test_cli_user_errors_exit_2_naming_the_field(argv, field, tmp_path, capsys):
    code = main([*argv, "--output", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2
    assert field in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_a_config_that_names_its_method_needs_no_method_flag(tmp_path, capsys):
    """A run's config.yaml (or any config with ``method``) trains as it says; without one,
    ``--method`` is required, and the message says so."""
    config = tmp_path / "c.yaml"
    config.write_text("method: no-such-method\n")
    assert main(["train", "--config", str(config), "--output", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "no-such-method" in err and "--method: required" not in err  # the config's method
    config.write_text("seed: 3\n")
    assert main(["train", "--config", str(config), "--output", str(tmp_path / "runs")]) == 2
    assert "--method: required, unless --config names one" in capsys.readouterr().err
    assert main(["train"]) == 2
    assert not (tmp_path / "runs").exists()


def test_a_reference_methods_value_passes_are_counted_not_charged(nano_policy, tmp_path):
    """The exact-credit oracle samples GRPO's batch and trains on it as GRPO does; its value
    continuations run in a reference block: counted in reference_*, not in flops."""
    short = ("budget.amount=1", "budget.eval_fractions=[1.0]")
    run(nano_policy, tmp_path / "grpo", "grpo", *short)
    mc = ("method_options.estimator=mc", "method_options.value_samples=2")
    run(nano_policy, tmp_path / "oracle", "oracle", *short, *mc)
    (grpo,) = [r for r in RunDir(tmp_path / "grpo").read_metrics() if "clip_frac" in r]
    (oracle,) = [r for r in RunDir(tmp_path / "oracle").read_metrics() if "clip_frac" in r]
    assert oracle["flops"] == grpo["flops"]
    assert oracle["generated_tokens"] == grpo["generated_tokens"]
    assert oracle["reference_flops"] > 0 and oracle["reference_generated_tokens"] > 0
    assert oracle["value_rollouts"] == 2 * oracle["value_states"]
    assert "reference_flops" not in grpo
    # the task's own values: a scoring pass over its texts, nothing generated, nothing charged
    run(nano_policy, tmp_path / "analytic", "oracle", *short, "method_options.estimator=analytic")
    (analytic,) = [r for r in RunDir(tmp_path / "analytic").read_metrics() if "clip_frac" in r]
    assert analytic["flops"] == grpo["flops"]
    assert analytic["reference_flops"] > 0 and analytic.get("reference_generated_tokens", 0) == 0
    assert analytic["value_texts"] >= 1 and analytic["value_states"] >= 1


def test_only_a_reference_method_may_open_an_uncharged_block(nano_policy, tmp_path):
    config = load_config(None, ["method=grpo", *overrides(nano_policy)])
    trainer = Trainer(config, tmp_path / "refused")
    trainer.build()
    trainer.services.begin_step(StepPlan(0, reference_method=False))
    with pytest.raises(RuntimeError, match="reference_passes"):
        with trainer.services.reference_passes():
            pass
    trainer.services.begin_step(StepPlan(0, reference_method=True))
    with trainer.services.reference_passes():
        trainer.services.generate(["start at 1. add 2. work mod 100."], 2, rewards_only=True)
    assert trainer.meter.flops == 0 and trainer.meter.reference["flops"] > 0


def test_sgd_with_a_small_clip_moves_every_step_by_lr_times_clip(
    test_methods, nano_policy, tmp_path
):
    """train.optimizer=sgd: with the gradient clipped below its norm, a step's length is
    exactly lr x grad_clip, whatever the method's advantage scale."""
    config = load_config(
        None,
        [
            f"method={TOKEN_METHOD}",
            *overrides(nano_policy, "train.optimizer=sgd", "train.lr=0.5", "train.grad_clip=1e-4"),
        ],
    )
    trainer = Trainer(config, tmp_path / "sgd")
    trainer.build()
    assert isinstance(trainer.optimizer, torch.optim.SGD)
    moved = []
    for _ in range(3):
        before = torch.cat([p.detach().reshape(-1).clone() for p in trainer.policy.parameters()])
        record = trainer.train_step()
        after = torch.cat([p.detach().reshape(-1) for p in trainer.policy.parameters()])
        if record["grad_norm"] > 1e-4:
            moved.append(float((after - before).norm()))
    assert moved and all(m == pytest.approx(0.5 * 1e-4, rel=1e-3) for m in moved)


def test_an_unknown_optimizer_is_a_config_error():
    from creditbench.harness.config import ConfigError

    with pytest.raises(ConfigError, match=r"train\.optimizer: must be one of adamw, sgd"):
        load_config(None, ["train.optimizer=adam"])


def test_a_second_trained_model_steps_is_charged_and_gets_its_reference(nano_policy, tmp_path):
    """PRIME's reward model: one step per training step away from the initial policy, charged
    as a training pass; the reference it scores against is kept without being asked for."""
    config = load_config(None, ["method=prime", *overrides(nano_policy)])
    trainer = Trainer(config, tmp_path / "prime")
    trainer.build()
    scorers = trainer.services.scorers
    assert scorers.reference is not None  # the method asked for one; the config did not
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    flops_before = trainer.meter.flops
    record = trainer.train_step()
    auxiliary = scorers.auxiliary
    assert auxiliary is not None and auxiliary.steps == 1
    # trained as the policy is, at twice its lr (PRIME §4.2's ratio), clipped as it is
    assert isinstance(auxiliary.optimizer, torch.optim.AdamW)
    assert auxiliary.optimizer.param_groups[0]["lr"] == pytest.approx(2 * config.train.lr)
    assert auxiliary.grad_clip == config.train.grad_clip
    moved = [
        name
        for name, value in auxiliary.model.state_dict().items()
        if not torch.equal(value, before[name])
    ]
    assert moved  # the reward model took a step away from the initial policy
    # the reference stays the initial policy
    for name, value in scorers.reference.state_dict().items():
        assert torch.equal(value, before[name])
    assert record["prm_loss"] > 0 and "process_reward_abs" in record
    # the reward model's training pass is charged: more than GRPO's step on the same run
    grpo = Trainer(load_config(None, ["method=grpo", *overrides(nano_policy)]), tmp_path / "g")
    grpo.build()
    grpo.train_step()
    assert trainer.meter.flops - flops_before > grpo.meter.flops
    assert trainer.meter.trained_tokens > grpo.meter.trained_tokens


def test_the_ema_teacher_moves_once_a_step_whatever_the_minibatches(nano_policy, tmp_path):
    """SDPO's EMA teacher moves once per rollout step, after all its optimizer steps, as
    lasgroup/SDPO moves it once per update_policy call; not after each of 4 minibatches."""
    config = load_config(None, ["method=sdpo", *overrides(nano_policy, "train.minibatches=3")])
    trainer = Trainer(config, tmp_path / "sdpo")
    trainer.build()
    scorers = trainer.services.scorers
    moves = []
    original = scorers.after_update
    scorers.after_update = lambda: (moves.append(trainer.meter.optimizer_steps), original())[1]
    optimizer_steps = trainer.meter.optimizer_steps
    trainer.train_step()
    trainer.train_step()
    assert trainer.meter.optimizer_steps - optimizer_steps == 6  # 3 minibatches a step
    assert moves == [optimizer_steps + 3, optimizer_steps + 6]  # after each step's last


def test_the_reward_model_follows_a_fixed_step_sgd_policy(nano_policy, tmp_path):
    """Under the validation's SGD at a fixed step the reward model is an SGD model at twice
    the policy's lr and the policy's clip: twice the policy's step, not AdamW at lr 20."""
    sgd = ["train.optimizer=sgd", "train.lr=10.0", "train.grad_clip=1e-3"]
    config = load_config(None, ["method=prime", *overrides(nano_policy, *sgd)])
    trainer = Trainer(config, tmp_path / "prime-sgd")
    trainer.build()
    trainer.train_step()
    auxiliary = trainer.services.scorers.auxiliary
    assert isinstance(auxiliary.optimizer, torch.optim.SGD)
    assert auxiliary.optimizer.param_groups[0]["lr"] == pytest.approx(20.0)
    assert auxiliary.grad_clip == pytest.approx(1e-3)


def test_a_finished_run_given_another_method_or_config_is_refused(
    test_methods, nano_policy, tmp_path
):
    run(nano_policy, tmp_path / "a")
    before = (tmp_path / "a" / "metrics.jsonl").read_bytes()
    with pytest.raises(RunDirError, match="finished run with a different config.*method"):
        run(nano_policy, tmp_path / "a", "grpo")
    with pytest.raises(RunDirError, match="train.lr"):
        run(nano_policy, tmp_path / "a", TOKEN_METHOD, "train.lr=1e-3")
    assert (tmp_path / "a" / "metrics.jsonl").read_bytes() == before


def test_a_second_writer_of_a_run_is_refused_naming_the_first(test_methods, nano_policy, tmp_path):
    config = load_config(None, [f"method={TOKEN_METHOD}", *overrides(nano_policy)])
    first = Trainer(config, tmp_path / "a")
    with first.run_dir.lock():  # as a train of the same run holds it
        with pytest.raises(RunLockedError, match=rf"another process is writing.*pid {os.getpid()}"):
            Trainer(config, tmp_path / "a").train()
        assert not (tmp_path / "a" / "metrics.jsonl").exists()
    # released (a kill releases it too: the kernel drops a dead holder's flock), so it runs
    assert Trainer(config, tmp_path / "a").train()["steps"] == 5


def test_a_lock_file_left_by_a_dead_writer_is_stale_and_taken(test_methods, nano_policy, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / ".lock").write_text("pid 999999 on elsewhere since 00:00:00")
    summary = run(nano_policy, tmp_path / "a")
    assert summary["steps"] == 5


def test_two_train_commands_into_one_run_one_runs_and_one_exits_2(nano_policy, tmp_path, capsys):
    args = ["train", "--method", "grpo", "--output", str(tmp_path), "--name", "same", "--quiet"]
    for item in overrides(nano_policy):
        args += ["--set", item]
    holder = RunDir(tmp_path / "same")
    with holder.lock():
        assert main(args) == 2
    assert "another process is writing this run (pid" in capsys.readouterr().err
    assert main(args) == 0
    records = (tmp_path / "same" / "metrics.jsonl").read_text().splitlines()
    assert len([r for r in records if '"eval"' not in r]) == 5  # one writer's records, once


def test_a_disk_full_during_a_checkpoint_keeps_the_last_one_and_resume_continues(
    test_methods, nano_policy, tmp_path, monkeypatch
):
    import errno

    from creditbench.harness.records import rundir

    extra = ("budget.amount=6", "checkpoint_every=2", "eval.k_samples=0")
    reference = run(nano_policy, tmp_path / "reference", TOKEN_METHOD, *extra)
    real_save, calls = rundir._torch_save_synced, []

    def full_disk_at_the_second_checkpoint(obj, path):
        calls.append(path)
        if path.name == "optimizer.pt" and len([c for c in calls if c.name == path.name]) == 2:
            real_save(obj, path)  # a part of the file is written, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(obj, path)

    monkeypatch.setattr(rundir, "_torch_save_synced", full_disk_at_the_second_checkpoint)
    with pytest.raises(OSError, match="No space left"):
        run(nano_policy, tmp_path / "full", TOKEN_METHOD, *extra)
    monkeypatch.setattr(rundir, "_torch_save_synced", real_save)
    full = RunDir(tmp_path / "full")
    assert full.latest_checkpoint().name == "step-000002"  # the last complete one
    leftovers = [p.name for p in full.checkpoints_path.iterdir()]
    assert leftovers == ["step-000002"]  # the torn step-4 checkpoint is gone
    assert not full.is_finished()
    resumed = Trainer.resume(full).train()
    assert without_time(full.read_metrics()) == without_time(
        RunDir(tmp_path / "reference").read_metrics()
    )
    assert resumed["steps"] == reference["steps"] == 6


@pytest.mark.parametrize(
    ("error", "said", "not_said"),
    [  # a full disk is a failed write; a path gone is a path that cannot be used
        ((errno.ENOSPC, "No space left on device", None), "stopped: cannot write", "cannot use"),
        (
            (errno.ENOENT, "No such file or directory", "/gone/cache.bin"),
            "stopped: cannot use /gone/cache.bin: No such file or directory",
            "cannot write",
        ),
    ],
)
def test_train_stops_on_an_os_error_with_one_line_saying_what_failed_and_naming_resume(
    test_methods, nano_policy, tmp_path, monkeypatch, capsys, error, said, not_said
):
    from creditbench.harness.records import rundir

    def failing(obj, path):
        raise OSError(error[0], error[1], error[2] or str(path))

    monkeypatch.setattr(rundir, "_torch_save_synced", failing)
    args = ["train", "--method", TOKEN_METHOD, "--output", str(tmp_path), "--name", "r", "--quiet"]
    for item in overrides(nano_policy):
        args += ["--set", item]
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert said in err and error[1] in err and not_said not in err
    assert f"--resume {tmp_path / 'r'}" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("damage", ["truncated weights", "state without its meter"])
def test_resume_from_a_damaged_checkpoint_is_one_line_naming_it(
    test_methods, nano_policy, tmp_path, capsys, damage
):
    import json as json_

    extra = ("budget.amount=4", "checkpoint_every=2", "eval.k_samples=0")
    run(nano_policy, tmp_path / "r", TOKEN_METHOD, *extra)
    folder = RunDir(tmp_path / "r")
    folder.summary_path.unlink()  # as if killed after its last checkpoint
    latest = folder.latest_checkpoint()
    if damage == "truncated weights":
        weights = latest / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])
    else:
        state = json_.loads((latest / "trainer_state.json").read_text())
        del state["meter"]
        (latest / "trainer_state.json").write_text(json_.dumps(state))
    capsys.readouterr()  # what the first run printed
    assert main(["train", "--resume", str(folder.path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{latest}: cannot resume from this checkpoint" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    if damage != "truncated weights":
        assert "missing 'meter'" in err


@pytest.mark.parametrize(
    ("method", "options", "expected"),
    [
        ("vineppo", [], True),  # kl_coef = 1e-4 by default: it was silently off
        ("reinforce_pp", [], True),  # kl_coef_reward = 1e-3 in the token rewards
        ("reinforce_pp_baseline", [], True),  # kl_coef = 1e-3 in the loss
        ("reinforce_pp", ["method_options.kl_coef_reward=0"], False),
        ("vineppo", ["method_options.kl_coef=0"], False),
        ("grpo", [], False),
        ("grpo", ["method_options.kl_coef=0.04"], True),
        ("grpo", ["train.reference_model=true"], True),
        ("prime", [], True),  # scores with the reference (Needs.reference_model)
    ],
)
def test_a_reference_model_comes_from_the_resolved_config(method, options, expected):
    """The run keeps a reference when the method's resolved Config (its defaults included) has
    a positive KL weight, never from the option names a user happened to set."""
    config = load_config(None, [f"method={method}", *options])
    assert needs_reference(config) is expected


def test_every_method_whose_defaults_weigh_a_kl_gets_a_reference():
    for name, cls in list_methods().items():
        config = load_config(None, [f"method={name}"])
        assert needs_reference(config) is cls().needs_reference, name
    hosted = load_config(None, ["method=oppo", "method_options.host.kl_coef=0.04"])
    assert needs_reference(hosted)  # a KL term of the host's loss (methods/compose.py)


def test_vineppo_trains_with_its_kl_term_on_by_default(nano_policy, tmp_path):
    """VinePPO's default KL (1e-4, a per-sequence sum) acts: the batch carries reference
    log-probs and the step's record its KL statistic."""
    extra = ("method_options.rollouts_per_state=1",)
    config = load_config(None, ["method=vineppo", *overrides(nano_policy, *extra)])
    trainer = Trainer(config, tmp_path / "vineppo")
    trainer.build()
    assert trainer.services.scorers.reference is not None
    record = trainer.train_step()
    batch, _ = trainer.last_credit
    assert batch.ref_logprobs is not None
    assert "kl_ref" in record


def test_each_optimizer_step_records_its_update_and_gradient_norms(
    test_methods, nano_policy, tmp_path
):
    """Under SGD without momentum a step moves the parameters by lr x min(grad norm, clip):
    the recorded ‖Δθ‖ of each optimizer step is that (advantages nonzero whatever the reward,
    so every gradient is too)."""
    sgd = ["train.optimizer=sgd", "train.lr=10.0", "train.grad_clip=1e-3", "train.minibatches=3"]
    config = load_config(None, [f"method={TOKEN_METHOD}", *overrides(nano_policy, *sgd)])
    trainer = Trainer(config, tmp_path / "norms")
    trainer.build()
    record = trainer.train_step()
    grads, updates = record["grad_norms"], record["update_norms"]
    assert len(grads) == len(updates) == 3 and min(grads) > 0
    for grad, update in zip(grads, updates, strict=True):
        assert update == pytest.approx(10.0 * min(grad, 1e-3), rel=1e-4)
    assert record["update_norm"] == pytest.approx(sum(updates) / 3)
    # off: no copy of the parameters, no update norms
    off = overrides(nano_policy, *sgd, "train.record_update_norm=false")
    trainer = Trainer(load_config(None, [f"method={TOKEN_METHOD}", *off]), tmp_path / "off")
    trainer.build()
    record = trainer.train_step()
    assert "update_norms" not in record and len(record["grad_norms"]) == 3


def test_grpo_steps_without_a_mixed_group_are_counted_and_have_no_gradient(nano_policy, tmp_path):
    """The untrained nano policy fails everything: every group is all-fail, so every one of
    GRPO's minibatches lacks a mixed group and its gradient is exactly 0."""
    config = load_config(None, ["method=grpo", *overrides(nano_policy, "train.minibatches=3")])
    trainer = Trainer(config, tmp_path / "grpo")
    trainer.build()
    record = trainer.train_step()
    assert record["accuracy"] == 0
    assert record["minibatches_without_mixed_group"] == 3
    assert record["grad_norms"] == [0.0, 0.0, 0.0] and record["update_norms"] == [0.0] * 3


def test_rows_in_mixed_groups_marks_the_groups_with_both_outcomes():
    from creditbench.harness.diagnostics.step import rows_in_mixed_groups

    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    groups = torch.tensor([7, 7, 3, 3, 5, 5, 9])  # mixed, all-fail, all-pass, alone
    expected = [True, True, False, False, False, False, False]
    assert rows_in_mixed_groups(rewards, groups).tolist() == expected


def test_each_seed_evaluates_on_its_own_draw_of_the_eval_split():
    """eval.problems=seeded: the subset is drawn with the run seed (the same at every
    evaluation of a run and for every method at that seed), so problem sampling enters the
    interval over seeds; first: the first problems; a split no larger is taken whole."""
    from creditbench.harness.tasks import get_task
    from creditbench.harness.training.evaluation import eval_problems

    task = get_task("chain", steps=2)
    split = list(task.problems("eval"))
    draw = lambda n, seed, how="seeded": [p.prompt for p in eval_problems(task, n, seed, how)]  # noqa: E731
    assert draw(20, 0) == draw(20, 0) and draw(20, 0) != draw(20, 1)
    assert len(set(draw(20, 3))) == 20 and set(draw(20, 3)) <= {p.prompt for p in split}
    assert draw(20, 0, "first") == [p.prompt for p in split[:20]]
    assert draw(len(split), 5) == draw(len(split) + 7, 9) == [p.prompt for p in split]
    with pytest.raises(Exception, match="eval.problems: must be one of seeded, first"):
        load_config(None, ["eval.problems=nosuch"])


def test_resume_refuses_a_config_edited_since_the_checkpoint_naming_the_field(
    test_methods, nano_policy, tmp_path, capsys
):
    import yaml

    extra = ("budget.amount=4", "checkpoint_every=2", "eval.k_samples=0")
    run(nano_policy, tmp_path / "r", TOKEN_METHOD, *extra)
    folder = RunDir(tmp_path / "r")
    folder.summary_path.unlink()  # as if killed after its last checkpoint
    config = yaml.safe_load(folder.config_path.read_text())
    config["train"]["lr"] = config["train"]["lr"] * 10  # edited between the kill and the resume
    folder.config_path.write_text(yaml.safe_dump(config))
    capsys.readouterr()
    assert main(["train", "--resume", str(folder.path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "config.yaml: changed since step-" in err and "differs in train.lr" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not folder.is_finished()  # nothing trained on the mixed config


class TrainsOnOtherRows(CreditMethod):
    """Draws two plain batches and trains on the first alone, with every reward set to 1: a
    method that filters and extends what it drew."""

    def rollout(self, services):
        first, _ = services.sample_batch(), services.sample_batch()
        first.rewards = torch.ones_like(first.rewards)
        return first

    def advantages(self, batch, services=None):
        return torch.zeros_like(batch.response_mask)


def test_the_online_accuracy_is_over_every_drawn_batch_not_the_trained_one(nano_policy, tmp_path):
    """The step's reward_mean and accuracy are those of every plain batch the step drew
    (Services.sample_batch), whatever the method trained on: the nano policy fails every drawn
    response, though the trained batch says all passed."""
    register_method("test-other-rows")(TrainsOnOtherRows)
    try:
        config = load_config(None, ["method=test-other-rows", *overrides(nano_policy)])
        trainer = Trainer(config, tmp_path / "other")
        trainer.build()
        record = trainer.train_step()
        drawn = trainer.services.drawn_rewards
        assert len(drawn) == 2 and sum(len(r) for r in drawn) == 18  # two draws of 3 x 3
        assert record["reward_mean"] == 0.0 and record["accuracy"] == 0.0
        assert record["responses"] == 9  # trained on one draw
        trainer.services.begin_step(StepPlan(1))
        assert trainer.services.drawn_rewards == []  # each step counts its own draws
    finally:
        _REGISTRY.pop("test-other-rows", None)


def test_drawn_statistics_pool_the_draws_and_skip_what_has_no_outcome():
    from creditbench.harness.diagnostics.step import drawn_statistics

    drawn = [torch.tensor([1.0, 0.0, float("nan")]), torch.tensor([1.0, 0.75])]
    assert drawn_statistics(drawn) == {"reward_mean": 0.6875, "accuracy": 0.75}
    assert drawn_statistics([]) == {} and drawn_statistics([torch.tensor([float("nan")])]) == {}


@pytest.fixture
def clean_commit_cache(monkeypatch, tmp_path):
    """A cache of its own, and runs that believe they run from a clean commit (the tree under
    test may be edited; the reuse rule never reuses an edited tree's evaluation)."""
    import creditbench.harness.training.evaluation as evaluation_module

    real = evaluation_module.capture_environment
    monkeypatch.setenv("CREDITBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(
        evaluation_module,
        "capture_environment",
        lambda: {**real(), "git_commit": "0" * 40, "git_dirty": False},
    )
    return evaluation_module


def first_record(run_dir: Path) -> dict:
    return RunDir(run_dir).read_metrics()[0]


def test_the_initial_evaluation_is_computed_once_per_seed_and_reused_identically(
    test_methods, nano_policy, tmp_path, clean_commit_cache
):
    run(nano_policy, tmp_path / "a")
    run(nano_policy, tmp_path / "b", BLIND_METHOD)  # another method, the same base and seed
    first, second = first_record(tmp_path / "a"), first_record(tmp_path / "b")
    assert "eval_reused" not in first["time"] and second["time"]["eval_reused"] is True
    assert second["eval"] == first["eval"]
    # what the run would have computed itself: the same numbers
    Trainer.reuse_initial_evaluation = False
    try:
        run(nano_policy, tmp_path / "c", BLIND_METHOD)
    finally:
        Trainer.reuse_initial_evaluation = True
    computed = first_record(tmp_path / "c")
    assert "eval_reused" not in computed["time"] and computed["eval"] == first["eval"]
    # only the evaluation at fraction 0: the later ones grade trained policies
    later = [r for r in RunDir(tmp_path / "b").read_metrics()[1:] if "eval" in r]
    assert later and all("eval_reused" not in r["time"] for r in later)


def test_an_initial_evaluation_with_other_settings_or_an_edited_tree_is_not_reused(
    test_methods, nano_policy, tmp_path, clean_commit_cache, monkeypatch
):
    run(nano_policy, tmp_path / "a")
    run(nano_policy, tmp_path / "b", TOKEN_METHOD, "eval.k_samples=3")
    run(nano_policy, tmp_path / "c", TOKEN_METHOD, "seed=1")
    for name in ("b", "c"):
        assert "eval_reused" not in first_record(tmp_path / name)["time"], name
    real = clean_commit_cache.capture_environment
    monkeypatch.setattr(
        clean_commit_cache, "capture_environment", lambda: {**real(), "git_dirty": True}
    )
    run(nano_policy, tmp_path / "d")
    assert "eval_reused" not in first_record(tmp_path / "d")["time"]
