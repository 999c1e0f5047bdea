"""The evaluation noise of a paired difference, as protocol 2's rule measures it (docs/testbed.md,
"Protocol 2's evaluation").

    python scripts/eval_noise.py RUN_A RUN_B [--streams 6] [--threads 1]

Each run's last checkpoint is evaluated on the run's eval problems with ``--streams``
evaluation streams at its k (4 on the standard suite): the run's own stream (its seed) and the
streams of the next seeds. Both runs draw from the same stream in turn, as two runs of one seed do
on the board. For k = 4, 2 and 1 (the first k of each problem's samples) it prints the standard
deviation over the streams of each run's sampled accuracy and of the paired difference, the
AUC noise that difference gives (0.45 of a point's: the later points weigh 1/4, 1/4, 1/4, 1/8
and the start cancels), and the same difference with the two runs on different streams (no
shared random numbers), for comparison.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from creditbench.harness.config import RunConfig, from_dict
from creditbench.harness.models.modeling import load_policy
from creditbench.harness.records.rundir import RunDir
from creditbench.harness.sampling.rollout import derive_seed, sample_responses
from creditbench.harness.tasks import get_task
from creditbench.harness.training.evaluation import eval_problems

AUC_SHARE = (3 * 0.25**2 + 0.125**2) ** 0.5  # a point's noise -> the AUC's, the start cancelling


def correct_matrix(run: Path, seed: int) -> torch.Tensor:
    """``[problems, k]`` bool: which of each problem's k samples the task grades correct, for the
    last checkpoint of ``run`` evaluated with the stream of ``seed``."""
    config = from_dict(RunConfig, RunDir(run).config())
    checkpoint = sorted((run / "checkpoints").glob("step-*"))[-1]
    model, tokenizer = load_policy(checkpoint)
    model.eval()
    task = get_task(config.task, **config.task_options)
    ev = config.eval
    chosen = eval_problems(task, ev.n_problems, config.seed, ev.problems)
    samples = sample_responses(
        model,
        tokenizer,
        [p.prompt for p in chosen],
        n=ev.k_samples,
        max_new_tokens=config.rollout.max_new_tokens,
        temperature=ev.temperature,
        seed=derive_seed(seed, "eval"),
        batch_size=ev.batch_size,
        engine=config.rollout.backend,
    )
    rows = [chosen[i] for i in samples.prompt_index.tolist()]
    graded = [task.grade(p, t).reward > 0.5 for p, t in zip(rows, samples.texts, strict=True)]
    return torch.tensor(graded).view(len(chosen), ev.k_samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    parser.add_argument("--streams", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    seed = from_dict(RunConfig, RunDir(args.run_a).config()).seed
    streams = [seed + j for j in range(args.streams)]
    grades = {
        name: [correct_matrix(run, s) for s in streams]
        for name, run in (("a", args.run_a), ("b", args.run_b))
    }
    k_max = grades["a"][0].shape[1]
    print(f"A: {args.run_a.name}\nB: {args.run_b.name}\nstreams: seeds {streams}")
    for k in sorted({k_max, 2, 1}, reverse=True):
        if k > k_max:
            continue
        acc = {n: [float(m[:, :k].double().mean()) for m in g] for n, g in grades.items()}
        shared = [a - b for a, b in zip(acc["a"], acc["b"], strict=True)]
        crossed = [a - b for a, b in zip(acc["a"], acc["b"][1:] + acc["b"][:1], strict=True)]
        sd = {name: statistics.stdev(values) for name, values in acc.items()}
        sd_shared, sd_crossed = statistics.stdev(shared), statistics.stdev(crossed)
        print(
            f"k={k}: mean accuracy A {statistics.mean(acc['a']):.4f} B "
            f"{statistics.mean(acc['b']):.4f}; SD over streams: A {sd['a']:.4f}, B {sd['b']:.4f}; "
            f"paired difference, shared streams {sd_shared:.4f} (AUC noise "
            f"{AUC_SHARE * sd_shared:.4f}), different streams {sd_crossed:.4f} (AUC noise "
            f"{AUC_SHARE * sd_crossed:.4f})"
        )


if __name__ == "__main__":
    main()
