"""Run directories: atomic files, torn metrics lines, checkpoints that are whole or absent."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch

from creditbench.harness.records.rundir import (
    MetricsLogger,
    RunDir,
    RunDirError,
    atomic_write_json,
    atomic_write_text,
    capture_environment,
    capture_rng_state,
    restore_rng_state,
)


@pytest.fixture(scope="module")
def tiny_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config)


def optimizer_state(model) -> dict:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()
    opt.zero_grad()
    return opt.state_dict()


def draws() -> tuple:
    return (
        random.random(),
        np.random.rand(),
        torch.rand(3).tolist(),
    )


# --- atomic files ------------------------------------------------------------------------------


def test_atomic_writes_leave_no_temporary_files(tmp_path):
    atomic_write_text(tmp_path / "a.txt", "one")
    atomic_write_text(tmp_path / "a.txt", "two")
    atomic_write_json(tmp_path / "b.json", {"x": [1, 2]})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.json"]
    assert (tmp_path / "a.txt").read_text() == "two"
    assert json.loads((tmp_path / "b.json").read_text()) == {"x": [1, 2]}


def test_failed_atomic_write_keeps_the_old_file(tmp_path):
    atomic_write_json(tmp_path / "b.json", {"ok": True})
    with pytest.raises(TypeError):
        atomic_write_json(tmp_path / "b.json", {"bad": object()})
    assert json.loads((tmp_path / "b.json").read_text()) == {"ok": True}
    assert [p.name for p in tmp_path.iterdir()] == ["b.json"]


# --- config, environment, summary -------------------------------------------------------------


def test_create_refuses_a_different_config(tmp_path):
    run = RunDir(tmp_path / "run")
    run.create({"seed": 1, "rollout": {"group_size": 4}, "betas": (0.9, 0.99)}, {"python": "x"})
    assert run.exists() and not run.is_finished()
    assert run.config() == {"seed": 1, "rollout": {"group_size": 4}, "betas": [0.9, 0.99]}
    run.create({"seed": 1, "rollout": {"group_size": 4}, "betas": [0.9, 0.99]}, {"python": "y"})
    assert run.environment() == {"python": "x"}  # the first environment is kept
    with pytest.raises(RunDirError, match=r"differs in rollout\.group_size"):
        run.create({"seed": 1, "rollout": {"group_size": 8}, "betas": [0.9, 0.99]}, {})


def test_summary_marks_the_run_finished(tmp_path):
    run = RunDir(tmp_path)
    run.summary_path.write_text('{"torn": ')
    assert not run.is_finished()
    run.write_summary({"final_accuracy": 0.5})
    assert run.is_finished() and run.read_summary() == {"final_accuracy": 0.5}


def test_capture_environment_names_versions():
    env = capture_environment()
    assert env["packages"]["torch"] == torch.__version__
    assert env["torch_threads"] == torch.get_num_threads()
    assert set(env) >= {"python", "platform", "git_commit", "git_dirty", "device", "cpu_count"}
    assert isinstance(env["method_plugins"], dict)
    json.dumps(env)  # JSON-safe


def test_capture_environment_records_the_commit_of_this_checkout():
    """Run from a git checkout of the project (the tests are), the commit is recorded."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if head.returncode != 0:
        pytest.skip("not a git checkout (a source archive): no commit to record")
    assert capture_environment()["git_commit"] == head.stdout.strip()


# --- metrics -----------------------------------------------------------------------------------


def test_metrics_append_read_and_torn_line(tmp_path):
    run = RunDir(tmp_path)
    run.append_metrics({"step": 1, "reward": 0.5})
    run.append_metrics({"step": 2, "reward": 0.25})
    with open(run.metrics_path, "a") as f:  # a crash in the middle of a write
        f.write('{"step": 3, "rew')
    assert run.read_metrics() == [{"step": 1, "reward": 0.5}, {"step": 2, "reward": 0.25}]
    run.append_metrics({"step": 3, "reward": 1.0})  # the torn tail is dropped, not glued on
    assert [r["step"] for r in run.read_metrics()] == [1, 2, 3]
    assert run.metrics_path.read_text().endswith("}\n")


def test_metrics_record_needs_a_step(tmp_path):
    with pytest.raises(ValueError, match="step"):
        RunDir(tmp_path).append_metrics({"reward": 1.0})


def test_corrupt_middle_line_names_file_and_line(tmp_path):
    run = RunDir(tmp_path)
    run.metrics_path.write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(RunDirError, match=r"metrics\.jsonl:2"):
        run.read_metrics()


@pytest.mark.parametrize("line", ["[1, 2]", "42", '"step"', '{"step": "7"}', '{"step": true}'])
def test_a_json_line_of_another_shape_names_file_and_line(tmp_path, line):
    run = RunDir(tmp_path)
    run.metrics_path.write_text('{"step": 1}\n' + line + "\n")
    with pytest.raises(
        RunDirError,
        match=r'metrics\.jsonl:2: not a record of this file \(a JSON object with an integer "step',
    ):
        run.read_metrics()


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (
            '{"step": 1, "responses": 5}',
            r'responses\.jsonl:1: "responses" is missing or not a list',
        ),
        ('{"step": 1}', r'responses\.jsonl:1: "responses" is missing or not a list'),
        ('{"step": 1, "responses": [1, 2]}', r"record 1 \(step 1\): a response is not an object"),
        (
            '{"step": 1, "responses": [{"prompt": "p", "tokens": ["a"], "advantages": [0.1, 0.2],'
            ' "reward": 1, "first_wrong": []}]}',
            r"advantages \(one per token\)",
        ),
    ],
)
def test_a_responses_record_of_another_shape_is_named(tmp_path, record, message):
    run = RunDir(tmp_path)
    run.responses_path.write_text(record + "\n")
    with pytest.raises(RunDirError, match=message):
        run.read_responses()


def test_truncate_metrics_keeps_earlier_steps_verbatim(tmp_path):
    run = RunDir(tmp_path)
    for step in range(1, 6):
        run.append_metrics({"step": step, "x": step / 3})
    lines = run.metrics_path.read_text().splitlines(keepends=True)
    with open(run.metrics_path, "a") as f:
        f.write('{"step": 6')
    run.truncate_metrics(3)
    assert run.metrics_path.read_text() == "".join(lines[:3])
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]


def test_metrics_logger_without_tensorboard(tmp_path):
    logger = MetricsLogger(RunDir(tmp_path), tensorboard=False)
    logger.log({"step": 1, "loss": 0.5})
    logger.close()
    assert RunDir(tmp_path).read_metrics() == [{"step": 1, "loss": 0.5}]


def test_metrics_logger_writes_scalars_when_tensorboard_exists(tmp_path, monkeypatch):
    import sys
    import types

    calls = []

    class FakeWriter:
        def __init__(self, log_dir, purge_step=None):
            calls.append(("init", log_dir, purge_step))

        def add_scalar(self, key, value, step):
            calls.append((key, value, step))

        def flush(self):
            pass

        def close(self):
            calls.append(("close",))

    fake = types.ModuleType("torch.utils.tensorboard")
    fake.SummaryWriter = FakeWriter
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake)
    logger = MetricsLogger(RunDir(tmp_path), purge_step=4)
    assert logger.tensorboard_enabled
    logger.log({"step": 4, "loss": 0.5, "method": "grpo", "done": True})
    logger.close()
    assert calls[0][2] == 4
    assert ("loss", 0.5, 4) in calls and not any(c[0] in ("method", "done") for c in calls)


# --- RNG and checkpoints -----------------------------------------------------------------------


def test_rng_state_round_trip():
    generator = torch.Generator().manual_seed(7)
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    state = capture_rng_state({"sampler": generator})
    expected = draws(), torch.rand(2, generator=generator).tolist()
    draws()  # move every stream on
    restore_rng_state(state, {"sampler": generator})
    assert (draws(), torch.rand(2, generator=generator).tolist()) == expected


def test_checkpoint_round_trip(tmp_path, tiny_model):
    from transformers import Qwen2ForCausalLM

    run = RunDir(tmp_path)
    opt_state = optimizer_state(tiny_model)
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    path = run.save_checkpoint(
        12, model=tiny_model, tokenizer=None, optimizer_state=opt_state, trainer_state={"step": 12}
    )
    expected = draws()
    assert path.name == "step-000012" and run.latest_checkpoint() == path
    assert (path / "model.safetensors").is_file() and (path / "COMPLETE").is_file()

    loaded = run.load_checkpoint(path)
    assert loaded["step"] == 12 and loaded["trainer_state"] == {"step": 12}
    saved_exp_avg = opt_state["state"][0]["exp_avg"]
    assert torch.equal(loaded["optimizer_state"]["state"][0]["exp_avg"], saved_exp_avg)
    restore_rng_state(loaded["rng_state"])
    assert draws() == expected
    reloaded = Qwen2ForCausalLM.from_pretrained(path)
    for (name, a), (_, b) in zip(
        tiny_model.state_dict().items(), reloaded.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("broken", ["optimizer.pt", "rng.pt"])
@pytest.mark.parametrize("content", [b"garbage, not a torch save", b""])
def test_a_broken_checkpoint_file_is_named_in_one_line(tmp_path, tiny_model, broken, content):
    run = RunDir(tmp_path)
    path = run.save_checkpoint(
        3, model=tiny_model, tokenizer=None, optimizer_state={}, trainer_state={"step": 3}
    )
    (path / broken).write_bytes(content)
    with pytest.raises(RunDirError) as caught:
        run.load_checkpoint(path)
    message = str(caught.value)
    assert message.startswith(f"{path / broken}: cannot read checkpoint (") and "\n" not in message


@pytest.mark.parametrize("planted", ["trainer_state.json", "optimizer.pt", "model.safetensors"])
def test_a_fifo_in_a_checkpoint_is_refused_not_waited_on(tmp_path, tiny_model, planted):
    """A FIFO in place of a checkpoint's file (a shared results folder): a resume opened it and
    waited for a writer, forever. Now the load names it, before reading anything."""
    import os
    import threading

    run = RunDir(tmp_path)
    path = run.save_checkpoint(
        3, model=tiny_model, tokenizer=None, optimizer_state={}, trainer_state={"step": 3}
    )
    (path / planted).unlink()
    os.mkfifo(path / planted)
    raised = []

    def load():
        try:
            run.load_checkpoint(path)
        except RunDirError as err:
            raised.append(str(err))

    worker = threading.Thread(target=load)
    worker.start()
    worker.join(60)
    if worker.is_alive():  # blocked in open(): give it its writer, then fail
        fd = os.open(path / planted, os.O_RDWR | os.O_NONBLOCK)
        worker.join(60)
        os.close(fd)
        pytest.fail(f"load_checkpoint waited on {planted}")
    assert raised == [f"{path / planted}: not a regular file, which no checkpoint holds"]


def save(run, step, model):
    return run.save_checkpoint(
        step, model=model, tokenizer=None, optimizer_state={}, trainer_state={"step": step}
    )


def test_keep_last_k_and_incomplete_ignored(tmp_path, tiny_model):
    run = RunDir(tmp_path, keep_checkpoints=2)
    for step in (10, 20, 30):
        save(run, step, tiny_model)
    assert [p.name for p in sorted(run.checkpoints_path.iterdir())] == [
        "step-000020",
        "step-000030",
    ]
    partial = run.checkpoint_path(40)  # e.g. copied by hand, or a marker lost
    partial.mkdir()
    (partial / "optimizer.pt").write_bytes(b"")
    assert run.latest_checkpoint() == run.checkpoint_path(30)
    with pytest.raises(RunDirError, match="not a complete checkpoint"):
        run.load_checkpoint(partial)


def test_resaving_drops_the_abandoned_future(tmp_path, tiny_model):
    run = RunDir(tmp_path, keep_checkpoints=3)
    for step in (10, 20, 30):
        save(run, step, tiny_model)
    save(run, 20, tiny_model)  # resumed from 20 after 30 was judged unusable
    assert [p.name for p in sorted(run.checkpoints_path.iterdir())] == [
        "step-000010",
        "step-000020",
    ]


def test_crash_mid_save_keeps_the_previous_checkpoint(tmp_path, tiny_model, monkeypatch):
    run = RunDir(tmp_path)
    previous = save(run, 10, tiny_model)

    def crash(self, directory, **kwargs):
        (directory / "model.safetensors").write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(type(tiny_model), "save_pretrained", crash)
    with pytest.raises(OSError, match="disk full"):
        save(run, 20, tiny_model)
    assert run.latest_checkpoint() == previous
    assert [p.name for p in run.checkpoints_path.iterdir()] == ["step-000010"]
    assert run.load_checkpoint(previous)["trainer_state"] == {"step": 10}


def test_leftovers_of_a_killed_save_are_invisible_and_cleaned(tmp_path, tiny_model):
    run = RunDir(tmp_path)
    save(run, 10, tiny_model)
    leftover = run.checkpoints_path / f".tmp-step-000020-{os.getpid() + 1}"
    leftover.mkdir()
    (leftover / "COMPLETE").write_text("20\n")  # even a marker inside a temp dir does not count
    assert run.latest_checkpoint() == run.checkpoint_path(10)
    save(run, 20, tiny_model)
    assert not leftover.exists()
    assert run.latest_checkpoint() == run.checkpoint_path(20)


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_writes_take_the_mode_the_umask_gives_not_the_temporary_files(tmp_path, umask, mode):
    from creditbench.harness.records.files import atomic_write_text, process_umask

    previous = os.umask(umask)
    try:
        assert process_umask() == umask
        atomic_write_text(tmp_path / "summary.json", "{}\n")
        atomic_write_text(tmp_path / "summary.json", "{}\n")  # a replacement, the same
    finally:
        os.umask(previous)
    assert (tmp_path / "summary.json").stat().st_mode & 0o777 == mode
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664)])
def test_checkpoints_and_records_take_the_umasks_mode(tmp_path, tiny_model, umask, mode):
    """Every file of a checkpoint (safetensors writes its weights 0600) and the appended
    records (metrics.jsonl, responses.jsonl) get the mode a plain open gives them."""
    previous = os.umask(umask)
    try:
        run = RunDir(tmp_path)
        path = save(run, 1, tiny_model)
        run.append_metrics({"step": 1})
        run.append_responses({"step": 1, "responses": []})
    finally:
        os.umask(previous)
    files = [p for p in path.iterdir() if p.is_file()]
    assert path / "model.safetensors" in files
    for file in [*files, run.metrics_path, run.responses_path]:
        assert file.stat().st_mode & 0o777 == mode, file.name


def test_the_lock_is_never_opened_through_a_link(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(target)
    with pytest.raises(RunDirError, match=r"\.lock: is a symbolic link"):
        with RunDir(run).lock():
            pass
    assert target.read_text() == "keep me\n"
    os.unlink(run / ".lock")
    with RunDir(run).lock():  # a plain lock file is made and taken
        assert (run / ".lock").is_file() and not (run / ".lock").is_symlink()
