"""The base-policy bootstrap: deterministic SFT, the content-hash cache, damaged entries, CLI."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from creditbench.harness.models import bootstrap, modeling, policy_cache, sft
from creditbench.harness.models.bootstrap import (
    BootstrapConfig,
    as_bootstrap_config,
    ensure_base_policy,
    ensure_teacher_policy,
    key_material,
    teacher_config,
    teacher_task_options,
    train_base_policy,
)
from creditbench.harness.models.modeling import load_policy
from creditbench.harness.models.policy_cache import cache_key, read_manifest
from creditbench.harness.tasks.base import STEP_CHECK, TEACHER, Grade, Problem, StepCheck, TaskBase
from creditbench.tools.cli.main import main

FAST = dict(preset="nano", steps=3, batch_size=4, warmup=1)


class SumTask(TaskBase):
    """A small stand-in task: add two numbers. Enough to exercise the bootstrap."""

    name = "sum"
    capabilities = frozenset({STEP_CHECK, TEACHER})
    alphabet = "0123456789+=\n abcdefghijklmnopqrstuvwxyz:"

    def __init__(self, scale: int = 10) -> None:
        self.scale = scale

    def _problem(self, i: int, a: int, b: int) -> Problem:
        return Problem(f"sum/{i}", f"{a}+{b}=\n", str(a + b))

    def problems(self, split: str) -> list[Problem]:
        rng = random.Random(split)
        return [
            self._problem(i, rng.randrange(self.scale), rng.randrange(self.scale)) for i in range(6)
        ]

    def grade(self, problem: Problem, text: str) -> Grade:
        ok = text.strip().endswith(f"answer: {problem.answer}")
        return Grade(float(ok), "correct" if ok else "wrong answer")

    def check_steps(self, problem, text) -> StepCheck:
        return StepCheck(steps=[], wrong=[], filler=[])

    def sft_example(self, rng: random.Random, mix=None) -> tuple[str, str]:
        a, b = rng.randrange(self.scale), rng.randrange(self.scale)
        return f"{a}+{b}=\n", f"so {a}+{b}\nanswer: {a + b}"


@pytest.fixture
def sum_task(monkeypatch):
    """Route ``make_task`` to the stand-in and count trainings."""
    calls = {"train": 0}
    real_train = bootstrap.train_base_policy

    def counting_train(*args, **kwargs):
        calls["train"] += 1
        return real_train(*args, **kwargs)

    real_make = bootstrap.make_task

    def make(name, options=None):
        return real_make(name, options) if name == "chain" else SumTask(**(options or {}))

    monkeypatch.setattr(bootstrap, "make_task", make)
    monkeypatch.setattr(bootstrap, "train_base_policy", counting_train)
    return calls


def _tensors(path):
    # copies: load_file may map the file, and some tests damage it in place afterwards
    return {k: v.clone() for k, v in load_file(path / "model.safetensors").items()}


def test_short_bootstrap_is_deterministic(tmp_path):
    config = BootstrapConfig(**FAST)
    a = train_base_policy(SumTask(), config, tmp_path / "a", progress=False)
    b = train_base_policy(SumTask(), config, tmp_path / "b", progress=False)
    c = train_base_policy(SumTask(), BootstrapConfig(**{**FAST, "seed": 1}), tmp_path / "c", False)
    ta, tb, tc = _tensors(a), _tensors(b), _tensors(c)
    assert ta.keys() == tb.keys()
    assert all(torch.equal(ta[k], tb[k]) for k in ta)
    assert not all(torch.equal(ta[k], tc[k]) for k in ta)
    # training moved the weights away from the initialisation of the same seed
    model, tokenizer = load_policy(a)
    assert tokenizer.decode(tokenizer("12+3=\n")["input_ids"]) == "12+3=\n"
    fresh = modeling.build_model("nano", tokenizer, seed=0)
    assert not torch.equal(fresh.model.embed_tokens.weight, model.model.embed_tokens.weight)


def test_a_killed_bootstrap_resumes_to_the_weights_of_an_uninterrupted_one(tmp_path):
    config = BootstrapConfig(**{**FAST, "steps": 7})
    whole = _tensors(train_base_policy(SumTask(), config, tmp_path / "whole", progress=False))

    class Killed(Exception):
        pass

    def kill_at_step_5(step, model, loss):
        if step == 5:  # after step 5's update, before its state is saved (every 2 steps)
            raise Killed

    progress = tmp_path / "progress"
    with pytest.raises(Killed):
        train_base_policy(
            SumTask(), config, tmp_path / "x", False, kill_at_step_5, progress, save_every=2
        )
    assert (progress / sft.PROGRESS_FILE).is_file()  # saved after step 4
    steps = []
    resumed = train_base_policy(
        SumTask(),
        config,
        tmp_path / "resumed",
        False,
        lambda step, model, loss: steps.append(step),
        progress,
        save_every=2,
    )
    assert steps == [5, 6, 7]  # the saved steps are not trained again
    again = _tensors(resumed)
    assert all(torch.equal(whole[k], again[k]) for k in whole)


def test_the_cache_keeps_a_builds_progress_until_the_entry_is_complete(tmp_path):
    seen = []

    def failing(tmp, progress):
        seen.append(progress)
        progress.mkdir(parents=True, exist_ok=True)
        (progress / "state").write_text("half")
        raise RuntimeError("killed")

    material = {"kind": "base", "x": 1}
    with pytest.raises(RuntimeError):
        policy_cache.cached_build("base", material, failing, tmp_path, use_shipped=False)
    assert (seen[0] / "state").read_text() == "half"  # left for the next attempt

    def finishing(tmp, progress):
        assert progress == seen[0] and (progress / "state").is_file()
        train_base_policy(SumTask(), BootstrapConfig(**FAST), tmp, progress=False)

    entry = policy_cache.cached_build("base", material, finishing, tmp_path, use_shipped=False)
    assert read_manifest(entry) is not None
    assert not seen[0].exists()  # a complete entry needs no progress


def test_sft_rejects_characters_outside_the_alphabet(tmp_path):
    class Leaky(SumTask):
        def sft_example(self, rng, mix=None):
            return "1+1=\n", "ANSWER 2"

    with pytest.raises(ValueError, match="outside its ALPHABET"):
        train_base_policy(Leaky(), BootstrapConfig(**FAST), tmp_path / "x", progress=False)
    assert not (tmp_path / "x").exists()


def test_cache_is_reused_and_keyed_by_content(tmp_path, sum_task):
    config = BootstrapConfig(**FAST)
    first = ensure_base_policy("sum", {}, config, tmp_path, progress=False)
    assert sum_task["train"] == 1 and read_manifest(first) is not None
    mtime = (first / "model.safetensors").stat().st_mtime_ns
    again = ensure_base_policy("sum", {}, config, tmp_path, progress=False)
    assert again == first and sum_task["train"] == 1
    assert (first / "model.safetensors").stat().st_mtime_ns == mtime
    # another config or other task options: another entry
    other = ensure_base_policy(
        "sum", {}, BootstrapConfig(**{**FAST, "lr": 5e-4}), tmp_path, progress=False
    )
    scaled = ensure_base_policy("sum", {"scale": 20}, config, tmp_path, progress=False)
    assert len({first, other, scaled}) == 3 and sum_task["train"] == 3
    # force retrains in place
    assert ensure_base_policy("sum", {}, config, tmp_path, force=True, progress=False) == first
    assert sum_task["train"] == 4


def test_content_hash_changes_with_every_config_field():
    task = SumTask()
    base = BootstrapConfig(**FAST)
    key = cache_key(key_material("base", "sum", {}, base, task))
    changes = dict(
        preset="tiny", steps=4, batch_size=5, lr=7e-4, warmup=2, schedule="linear",
        min_lr_ratio=0.5, weight_decay=0.1, grad_clip=0.5, seed=7, mix={"solve": 1.0},
    )  # fmt: skip
    assert set(changes) == {f for f in BootstrapConfig.__dataclass_fields__}
    assert all(getattr(base, field) != value for field, value in changes.items())
    for field, value in changes.items():
        changed = BootstrapConfig(**{**FAST, field: value})
        assert cache_key(key_material("base", "sum", {}, changed, task)) != key, field
    assert cache_key(key_material("teacher", "sum", {}, base, task)) != key
    assert cache_key(key_material("base", "sum", {"scale": 10}, base, task)) != key
    # the task's data is part of the key: same name and options, other generator
    assert cache_key(key_material("base", "sum", {}, base, SumTask(scale=11))) != key
    assert cache_key(key_material("base", "sum", {}, BootstrapConfig(**FAST), task)) == key


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "no_manifest", "bad_manifest"])
def test_corrupt_cache_entry_is_rebuilt(tmp_path, sum_task, damage):
    config = BootstrapConfig(**FAST)
    entry = ensure_base_policy("sum", {}, config, tmp_path, progress=False)
    good = _tensors(entry)
    weights = entry / "model.safetensors"
    if damage == "truncate":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif damage == "flip":
        data = bytearray(weights.read_bytes())
        data[-1] ^= 0xFF
        weights.write_bytes(bytes(data))
    elif damage == "delete":
        (entry / "tokenizer.json").unlink()
    elif damage == "no_manifest":
        (entry / "manifest.json").unlink()
    else:
        (entry / "manifest.json").write_text("{not json")
    assert read_manifest(entry) is None
    rebuilt = ensure_base_policy("sum", {}, config, tmp_path, progress=False)
    assert rebuilt == entry and sum_task["train"] == 2 and read_manifest(entry) is not None
    fresh = _tensors(rebuilt)
    assert all(torch.equal(good[k], fresh[k]) for k in good)  # deterministic rebuild


def test_shipped_checkpoint_is_used_when_the_key_matches(tmp_path, sum_task, monkeypatch):
    config = BootstrapConfig(**FAST)
    built = ensure_base_policy("sum", {}, config, tmp_path / "build", progress=False)
    assets = tmp_path / "assets"
    (assets / "base").mkdir(parents=True)
    shutil.copytree(built, assets / "base" / built.name)
    monkeypatch.setattr(policy_cache, "ASSETS_DIR", assets)
    # a torch/transformers version bump does not disqualify the shipped copy
    monkeypatch.setattr(policy_cache, "numerics_versions", lambda: {"torch": "9.9"})
    found = ensure_base_policy("sum", {}, config, tmp_path / "empty", progress=False)
    assert found == assets / "base" / built.name and sum_task["train"] == 1
    ensure_base_policy("sum", {}, config, tmp_path / "empty", use_shipped=False, progress=False)
    assert sum_task["train"] == 2


def test_teacher_trains_on_clean_traces(tmp_path, sum_task):
    base = BootstrapConfig(**FAST)
    assert teacher_config(base) == base
    assert teacher_config(base, clean_traces=False).steps == 2 * base.steps
    path = ensure_teacher_policy("sum", {"scale": 12}, base, tmp_path, progress=False)
    material = json.loads((path / "manifest.json").read_text())["material"]
    assert material["kind"] == "teacher" and path.parent.name == "teacher"
    # no clean-trace knobs are known for "sum": the teacher trains twice as long instead
    assert material["config"]["steps"] == 2 * base.steps
    assert material["task_options"] == {"scale": 12}
    chain = teacher_task_options("chain", {"steps": 4, "slip_rate": 0.2})
    assert chain["steps"] == 4 and chain["slip_rate"] == chain["weak_slip_rate"] == 0.0


def test_clean_traces_make_a_correct_chain_teacher_data():
    from creditbench.harness.models.bootstrap import make_task

    task = make_task("chain", teacher_task_options("chain", {"steps": 4}))
    rng = random.Random(0)
    for problem in task.problems("eval")[:50]:
        solution = task.sample_solution(problem, rng)
        assert task.check_steps(problem, solution).wrong == []


def test_config_errors_name_the_field():
    for field, value in [("preset", "huge"), ("steps", 0), ("lr", -1.0), ("schedule", "step"),
                         ("mix", {"solve": -1}), ("batch_size", 0), ("seed", -1)]:  # fmt: skip
        with pytest.raises(ValueError, match=f"^{field}:"):
            BootstrapConfig(**{field: value})
    model = type("Model", (), {"preset": "tiny"})
    run = type("Run", (), {"bootstrap_options": {"steps": 7}, "model": model})
    with pytest.raises(ValueError, match="bootstrap_options.stepz: unknown field"):
        as_bootstrap_config(type("Run", (), {"bootstrap_options": {"stepz": 1}, "model": model}))
    with pytest.raises(ValueError, match="bootstrap_options.steps: must be"):
        as_bootstrap_config(type("Run", (), {"bootstrap_options": {"steps": 0}, "model": model}))
    assert as_bootstrap_config(run) == BootstrapConfig(preset="tiny", steps=7)


def test_cli_bootstrap_prints_the_path_and_reuses_it(tmp_path, sum_task, capsys):
    args = ["bootstrap", "--task", "sum", "--preset", "nano", "--steps", "2", "--quiet"]
    args += ["--cache-dir", str(tmp_path), "--batch-size", "2"]
    assert main(args) == 0
    path = capsys.readouterr().out.strip()
    assert read_manifest(Path(path)) is not None
    assert main([*args, "--bench", "--n-eval", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(path) and "sampled acc" in out and "greedy acc" in out
    assert sum_task["train"] == 1


def test_cli_bootstrap_bad_input_exits_2(tmp_path, capsys):
    base = ["bootstrap", "--cache-dir", str(tmp_path), "--quiet"]
    assert main([*base, "--steps", "0"]) == 2
    assert "steps: must be" in capsys.readouterr().err
    assert main([*base, "--task-option", "noequals"]) == 2
    assert "--task-option" in capsys.readouterr().err
    assert main([*base, "--task", "nosuchtask"]) == 2
    assert "nosuchtask" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_chain_task_sft_examples_fit_the_character_tokenizer():
    from creditbench.harness.models.bootstrap import make_task
    from creditbench.harness.models.modeling import build_char_tokenizer
    from creditbench.harness.models.sft import sft_pairs, task_alphabet

    task = make_task("chain", {"steps": 4})
    tokenizer = build_char_tokenizer(task_alphabet(task))
    # raises on any character outside the alphabet; 300 examples cover every kind of the mix
    pairs = sft_pairs(task, tokenizer, random.Random(0), 300, mix=None)
    assert all(c[-1] == tokenizer.eos_token_id for _, c in pairs)
    model = modeling.build_model("nano", tokenizer, seed=0)
    loss = sft.sft_backward(model, pairs[:16], tokenizer.pad_token_id, max_tokens=1024)
    assert loss > 0 and model.lm_head.weight.grad is not None


def test_micro_batches_give_the_full_batch_gradient():
    task = SumTask(scale=1000)
    tokenizer = modeling.build_char_tokenizer(task.alphabet)
    pairs = sft.sft_pairs(task, tokenizer, random.Random(0), 12, mix=None)
    pairs[3] = (pairs[3][0] * 5, pairs[3][1])  # one long prompt, as localisation examples have
    grads = []
    for max_tokens in (10**6, 40):  # one batch; then about one example per micro-batch
        model = modeling.build_model("nano", tokenizer, seed=0)
        loss = sft.sft_backward(model, pairs, tokenizer.pad_token_id, max_tokens)
        grads.append((loss, [p.grad.clone() for p in model.parameters()]))
    (loss_a, grad_a), (loss_b, grad_b) = grads
    assert loss_a == pytest.approx(loss_b, rel=1e-5)
    assert all(
        torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(grad_a, grad_b, strict=True)
    )


def test_shipped_checkpoints_are_intact_and_load():
    shipped = sorted(
        p for kind in ("base", "teacher") for p in (policy_cache.ASSETS_DIR / kind).glob("*")
    )
    for entry in shipped:
        manifest = read_manifest(entry)
        assert manifest is not None, (
            f"{entry.name}: damaged; rebuild with creditbench bootstrap --ship"
        )
        assert manifest["key"] == entry.name == cache_key(manifest["material"])
        BootstrapConfig(**manifest["material"]["config"])  # still a valid config
        model, tokenizer = load_policy(entry)
        assert model.config.vocab_size == len(tokenizer)


def test_options_equal_to_the_defaults_find_the_shipped_base_policy(tmp_path):
    from creditbench.harness.models.bootstrap import ensure_base_policy, non_default_options

    assert (
        non_default_options("chain", {"steps": 8, "fillers": ["so", "then", "next", "now"]}) == {}
    )
    assert non_default_options("chain", {"steps": 4, "slip_rate": 0.04}) == {"steps": 4}
    plain = ensure_base_policy("chain", {}, None, tmp_path, progress=False)
    spelled_out = ensure_base_policy("chain", {"steps": 8}, None, tmp_path, progress=False)
    assert plain == spelled_out
    assert plain.parent.parent == policy_cache.ASSETS_DIR  # shipped, nothing was trained
