"""One step of `CreditGRPOTrainer` on two processes, launched by ``torchrun`` from
``tests/test_engine_trl_processes.py``: ``python trl_processes.py METHOD OUT``.

Each process writes ``OUT/process-<k>.json``: how many rows its scoring passes took, the gathered
batch's size, how far its split scoring lies from scoring the whole batch on this process (the
behaviour log-probs and statistics, and a pass under the task's prompt variants), and the
method's advantages, which must agree between the processes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from datasets import Dataset
from trl import GRPOConfig

from creditbench.harness.config import RunConfig
from creditbench.harness.models.modeling import load_policy
from creditbench.harness.training.setup import base_policy_path, load_task
from creditbench.integrations.trl import PROBLEM_COLUMN, CreditGRPOTrainer


def main(method: str, out: Path) -> None:
    torch.set_num_threads(1)
    config = RunConfig()
    policy, tokenizer = load_policy(base_policy_path(config))
    policy.eval()  # the scoring passes are compared across processes: no dropout
    task = load_task(config)
    problems = task.problems("train")[:16]
    rows = [{"prompt": p.prompt, PROBLEM_COLUMN: i} for i, p in enumerate(problems)]

    def reward(prompts, completions, problem_index, **_):
        graded = zip(problem_index, completions, strict=True)
        return [task.grade(problems[i], text).reward for i, text in graded]

    args = GRPOConfig(
        output_dir=str(out / "trl"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=160,
        temperature=1.0,
        beta=0.0,
        learning_rate=1e-3,
        use_cpu=True,
        bf16=False,
        max_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )
    trainer = CreditGRPOTrainer(
        method=method,
        task=task,
        model=policy,
        reward_funcs=[reward],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    scoring = trainer.credit_services.scoring
    scored_rows: list[int] = []
    for name in ("score", "score_with_statistics"):
        original = getattr(scoring, name)

        def counted(batch, *rest, _original=original, **options):
            scored_rows.append(batch.size)
            return _original(batch, *rest, **options)

        setattr(scoring, name, counted)
    record: dict = {}
    credit = trainer.credit_method.advantages

    def spy(batch, services=None):
        advantages = credit(batch, services)
        if services is None:  # T-SPMO's loss mask calls its credit again
            return advantages
        record["scored_rows"] = list(scored_rows)
        record["batch_size"] = batch.size
        record["advantages"] = advantages.tolist()
        statistics = trainer.credit_method.needs.behaviour_statistics
        if statistics:
            whole, found = scoring.score_with_statistics(batch, statistics)
            record["statistics_gap"] = max(
                float((found[k] - batch.extra(k)).abs().max()) for k in statistics
            )
        else:
            whole = scoring.score(batch)
        record["behaviour_gap"] = float((whole - batch.old_logprobs).abs().max())
        variant = services.variant(batch, "rewrite_typo")
        split = services.score(batch, variant)
        record["variant_gap"] = float((split - scoring.score(batch, variant)).abs().max())
        return advantages

    trainer.credit_method.advantages = spy
    trainer.train()
    index = trainer.accelerator.process_index
    (out / f"process-{index}.json").write_text(json.dumps(record))
    trainer.accelerator.wait_for_everyone()
    torch.distributed.destroy_process_group()  # a clean exit: no process aborts its peer's


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
