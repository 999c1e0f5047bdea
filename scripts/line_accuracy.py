"""How well a base policy writes a task's step lines: the share of its sampled step lines the
task's own step checker finds right, and the share of its answers that are right.

    python scripts/line_accuracy.py ledger ~/.cache/creditbench/base/<key> --problems 100
    python scripts/line_accuracy.py chain harness/assets/base/<key>

A base far below the bootstrap's window (sampled accuracy 0.25-0.60) fails either because its
lines are wrong (the model cannot do the task's arithmetic) or because it stops, skips or
blunders with right lines; the first figure tells which. A wrong line is one the checker lists
as wrong, and on a task that corrects lines (the ledger's ``fix``), a corrected one too: the
model wrote it wrong. Sampling is at temperature 1 with a fixed seed, on the first problems of
the eval split; one torch thread.
"""

from __future__ import annotations

import argparse

import torch

from creditbench.harness.models.modeling import generate_texts, load_policy
from creditbench.harness.tasks import get_task


def line_accuracy(task, texts, problems) -> tuple[float, int, float]:
    """(share of step lines right, step lines, share of answers right) of ``texts``."""
    right = total = 0
    answers = 0.0
    for problem, text in zip(problems, texts, strict=True):
        check = task.check_steps(problem, text)
        lines = sum(1 for start, end in check.steps if not text[start:end].startswith("Answer"))
        wrong = {verdict.step for verdict in check.wrong if verdict.step < lines}
        if hasattr(task, "corrected_steps"):
            wrong |= {verdict.step for verdict in task.corrected_steps(problem, text)}
        total += lines
        right += lines - len(wrong)
        answers += task.grade(problem, text).reward
    return right / max(total, 1), total, answers / max(len(problems), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", help="a registered task (chain, ledger, countdown)")
    parser.add_argument("policy", help="a base policy's folder")
    parser.add_argument("--problems", type=int, default=100, help="eval problems (default 100)")
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = get_task(args.task)
    model, tokenizer = load_policy(args.policy)
    problems = task.problems("eval")[: args.problems]
    prompts = [problem.prompt for problem in problems]
    texts = generate_texts(
        model, tokenizer, prompts, temperature=1.0, max_new_tokens=256, seed=args.seed
    )
    share, lines, answers = line_accuracy(task, texts, problems)
    print(f"{args.task}: step lines right {share:.3f} of {lines}; answers right {answers:.3f}")


if __name__ == "__main__":
    main()
