"""A run's greedy gain on its eval problems, paired by problem, with a bootstrap interval: the
statistic of the real-model measurement's rule (docs/worlds/real-model.md).

    python scripts/paired_greedy_gain.py RUN --checkpoint step-000030 [--resamples 10000]

The run's base policy (its config's model) and the checkpoint are each evaluated greedily on
the run's eval problems, as the run's own evaluations do; the script prints each one's
accuracy, the run's recorded accuracy at the checkpoint's step where it has one (the two must
agree: the same greedy decoding of the same problems), and the mean per-problem gain with its
95% percentile and BCa bootstrap intervals over the problems (scipy's ``bootstrap``, paired).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy import stats

from creditbench.harness.config import RunConfig, from_dict
from creditbench.harness.models.modeling import load_policy
from creditbench.harness.records.rundir import RunDir
from creditbench.harness.sampling.rollout import sample_responses
from creditbench.harness.tasks import get_task
from creditbench.harness.training.evaluation import eval_problems


def greedy_correct(model, tokenizer, task, problems, max_new_tokens: int, batch_size: int):
    """``[problems]`` 0/1: whether the greedy response to each problem is graded correct."""
    model.eval()
    samples = sample_responses(
        model,
        tokenizer,
        [p.prompt for p in problems],
        n=1,
        max_new_tokens=max_new_tokens,
        temperature=0.0,
        seed=0,
        batch_size=batch_size,
    )
    grades = [task.grade(p, t).reward > 0.5 for p, t in zip(problems, samples.texts, strict=True)]
    return np.array(grades, dtype=float)


def paired_gain(before, after, resamples: int, seed: int = 0) -> dict[str, float]:
    """The mean of ``after - before`` over problems with its 95% bootstrap intervals."""

    def mean_gain(a, b, axis=-1):
        return np.mean(b - a, axis=axis)

    out = {"gain": float(np.mean(after - before))}
    for method in ("percentile", "BCa"):
        found = stats.bootstrap(
            (before, after),
            mean_gain,
            paired=True,
            n_resamples=resamples,
            confidence_level=0.95,
            method=method,
            rng=np.random.default_rng(seed),
        )
        out[f"{method}_low"] = float(found.confidence_interval.low)
        out[f"{method}_high"] = float(found.confidence_interval.high)
    return out


def recorded_accuracy(run: RunDir, step: int) -> float | None:
    """The run's own greedy accuracy at ``step``, if it evaluated there."""
    for record in run.read_metrics():
        if "eval" in record and record["step"] == step:
            return record["eval"].get("greedy_accuracy")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--checkpoint", required=True, help="a folder under RUN/checkpoints")
    parser.add_argument("--resamples", type=int, default=10_000)
    args = parser.parse_args(argv)
    run = RunDir(args.run)
    config = from_dict(RunConfig, run.config())
    task = get_task(config.task, **config.task_options)
    problems = eval_problems(task, config.eval.n_problems, config.seed, config.eval.problems)
    shape = (config.rollout.max_new_tokens, config.eval.batch_size)
    base, tokenizer = load_policy(config.model.path, gguf_file=config.model.gguf_file)
    before = greedy_correct(base, tokenizer, task, problems, *shape)
    del base
    checkpoint = args.run / "checkpoints" / args.checkpoint
    trained, tokenizer = load_policy(checkpoint)
    after = greedy_correct(trained, tokenizer, task, problems, *shape)
    step = int(args.checkpoint.rsplit("-", 1)[1])
    result = {
        "problems": len(problems),
        "base_accuracy": float(before.mean()),
        "recorded_base_accuracy": recorded_accuracy(run, 0),
        "step": step,
        "accuracy": float(after.mean()),
        "recorded_accuracy": recorded_accuracy(run, step),
        "solved_only_after": int(((after == 1) & (before == 0)).sum()),
        "solved_only_before": int(((after == 0) & (before == 1)).sum()),
        **paired_gain(before, after, args.resamples),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
