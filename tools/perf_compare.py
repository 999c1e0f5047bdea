"""What ``creditbench perf`` measures beside the harness: TRL's ``GRPOTrainer`` on the same
model and batch, and the load other processes put on the machine meanwhile.

The TRL step is the same work as a default GRPO step of the harness: the run's policy and
tokenizer, ``prompts_per_step`` prompts of the task's train split with ``group_size``
completions each, at most ``max_new_tokens`` new tokens, the run's temperature and top-p, the
task's grader as the reward, one optimizer step per generation (so TRL, too, skips the
old-policy pass), fp32, no gradient checkpointing, no KL term. It needs ``trl`` (the
``creditbench[compare]`` extra); without it the comparison is skipped with a note.
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import tempfile
import time
from typing import Any


class OutsideLoad:
    """The CPU time other processes used while a measurement ran, in cores busy on average.

    Read from ``/proc/stat`` (every process's busy time) minus this process's own CPU time
    (``os.times``, children included); None where ``/proc/stat`` does not exist.
    """

    def __enter__(self) -> OutsideLoad:
        self.started, self.busy, self.own = time.perf_counter(), _busy_seconds(), _own_seconds()
        self.cores: float | None = None
        return self

    def __exit__(self, *exc: object) -> None:
        busy = _busy_seconds()
        if busy is None or self.busy is None:
            return
        wall = time.perf_counter() - self.started
        others = (busy - self.busy) - (_own_seconds() - self.own)
        self.cores = max(others, 0.0) / max(wall, 1e-9)

    def describe(self) -> str:
        if self.cores is None:
            return "outside CPU load: unknown (no /proc/stat)"
        verdict = "quiet" if self.cores < 0.2 else "busy: compare ratios, not seconds"
        return (
            f"outside CPU load during the run: {self.cores:.2f} cores busy on average "
            f"(of {os.cpu_count()}; {verdict})"
        )


def _busy_seconds() -> float | None:
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [float(x) for x in stat.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def trl_step_seconds(trainer: Any, repeats: int) -> float | str:
    """Median seconds of a TRL ``GRPOTrainer`` step on ``trainer``'s policy and batch shape
    (after one warm-up step), or why it could not run."""
    try:
        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        return 'trl is not installed (in the clone: pip install -e ".[compare]")'
    import copy

    import torch

    cfg = trainer.config
    rows = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    problems = list(trainer.services.train_problems)[: rows * (repeats + 2)]
    task = trainer.task
    dataset = Dataset.from_list([{"prompt": p.prompt, "index": i} for i, p in enumerate(problems)])

    def reward(prompts, completions, index, **_):
        return [
            task.grade(problems[i], text).reward for i, text in zip(index, completions, strict=True)
        ]

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.marks: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.marks.append(time.perf_counter())

    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as folder:
        args = GRPOConfig(
            output_dir=folder,
            per_device_train_batch_size=rows,
            num_generations=cfg.rollout.group_size,
            max_completion_length=cfg.rollout.max_new_tokens,
            temperature=cfg.rollout.temperature,
            top_p=cfg.rollout.top_p,
            top_k=0,
            beta=0.0,
            loss_type="grpo",
            learning_rate=cfg.train.lr,
            max_grad_norm=cfg.train.grad_clip,
            gradient_checkpointing=False,
            use_cpu=trainer.device.type == "cpu",
            bf16=False,
            max_steps=repeats + 1,
            logging_strategy="no",
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            seed=cfg.seed,
        )
        clock = Clock()
        grpo = GRPOTrainer(
            model=copy.deepcopy(trainer.policy),  # the harness's policy stays as it was
            reward_funcs=[reward],
            args=args,
            train_dataset=dataset,
            processing_class=trainer.tokenizer,
            callbacks=[clock],
        )
        torch.set_num_threads(threads)  # the same threads as the harness, whatever TRL set
        started = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):  # TRL prints its final log line
            grpo.train()
        torch.set_num_threads(threads)
    marks = [started, *clock.marks]
    steps = [b - a for a, b in zip(marks, marks[1:], strict=False)]
    return statistics.median(steps[1:]) if len(steps) > 1 else steps[0]
