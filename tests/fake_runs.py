"""Finished runs written with RunDir exactly as the trainer lays them out (config.yaml,
metrics.jsonl with step and eval records, summary.json, environment.json), for the leaderboard's
tests: each method learns at its own slope, each seed adds 0.01."""

from __future__ import annotations

from creditbench.harness.config import RunConfig, to_dict
from creditbench.harness.records.rundir import RunDir

FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)
# Final accuracy per method at seed 0; seeds add 0.01 each. Slopes are over the budget.
START, SLOPE = 0.3, {"grpo": 0.1, "dapo": 0.2, "oracle": 0.4}
CREDIT_AUROC = {"grpo": 0.5, "dapo": 0.6, "oracle": 0.9}
FILLER_DRIFT = {"grpo": -0.4, "dapo": -0.2, "oracle": 0.0}
WALL_SECONDS = {"grpo": 100.0, "dapo": 120.0, "oracle": 150.0}  # each evaluation takes 2 s
STEP_SECONDS = {"grpo": 0.5, "dapo": 0.6, "oracle": 0.75}  # a training step's time


ENVIRONMENT = {"python": "3.11", "git_commit": "c0ffee" * 6 + "abcd", "git_dirty": False}


def make_run(
    root,
    name,
    method,
    seed,
    *,
    steps=4,
    task="chain",
    status="finished",
    summary=True,
    environment=ENVIRONMENT,
    step_seconds=None,
    wall_seconds=None,
    eval_seconds=2.0,
    eval_length=None,
    eval_spent=None,
    responses=None,
    eval_counts=(),
    reference_flops=None,
    **sections,
):
    """A run as the trainer writes it; ``sections`` update config sections (rollout={...});
    ``step_seconds`` (one per step) and ``wall_seconds`` replace the method's usual times,
    ``eval_seconds`` is each evaluation's and ``eval_length`` its samples' mean length, and
    ``eval_spent`` the budget spent at each evaluation (its ``budget_fraction``; none recorded
    by default, as in records older than the field); ``responses`` the responses each step
    trains on (none recorded by default), and ``eval_counts`` the evaluations at counts of
    trained responses, ``(count, step)`` pairs, each with the accuracy of its step;
    ``reference_flops`` the uncharged FLOPs each step adds (a reference method's value passes),
    recorded cumulated as the trainer does."""
    length = {} if eval_length is None else {"mean_length": eval_length}
    config = to_dict(RunConfig(method=method, seed=seed, task=task, task_options={"steps": steps}))
    config.update(run_name=name, output_dir=str(root))
    for section, values in sections.items():
        config[section].update(values)
    run = RunDir(root / name)
    run.create(config, dict(environment))
    accuracy = [START + 0.01 * seed + SLOPE.get(method, 0.15) * f for f in FRACTIONS]
    spent = [{} if eval_spent is None else {"budget_fraction": s} for s in eval_spent or FRACTIONS]
    run.append_metrics(
        {
            "step": 0,
            "eval": {
                "fraction": 0.0,
                **spent[0],
                "step": 0,
                "sampled_accuracy": accuracy[0],
                "greedy_accuracy": accuracy[0],
                **length,
            },
            "time": {"eval": eval_seconds},
        }
    )
    n_steps = len(FRACTIONS) - 1
    step_seconds = step_seconds or [STEP_SECONDS.get(method, 0.55)] * n_steps
    for step in range(1, n_steps + 1):
        fraction = step / n_steps
        run.append_metrics(
            {
                "step": step,
                "budget_fraction": fraction,
                "flops": 1e9 * step,
                "reward_mean": 0.4,
                "entropy": 1.0,
                "filler_entropy": 1.35
                + FILLER_DRIFT.get(method, -0.1) * (step - 1) / (n_steps - 1),
                "credit_precision": CREDIT_AUROC.get(method, 0.55) - 0.3,
                "credit_auroc": CREDIT_AUROC.get(method, 0.55),
                "credit_chance": 0.1,
                **({} if responses is None else {"responses": responses}),
                **({} if reference_flops is None else {"reference_flops": reference_flops * step}),
                "time": {"step": step_seconds[step - 1]},
            }
        )
        for count in (n for n, at in eval_counts if at == step):
            entry = {"responses": count, "step": step, "sampled_accuracy": accuracy[step]}
            entry["greedy_accuracy"] = accuracy[step]
            run.append_metrics({"step": step, "eval": entry, "time": {"eval": eval_seconds}})
        run.append_metrics(
            {
                "step": step,
                "eval": {
                    "fraction": FRACTIONS[step],
                    **spent[step],
                    "step": step,
                    "sampled_accuracy": accuracy[step],
                    "greedy_accuracy": accuracy[step],
                    **length,
                },
                "time": {"eval": eval_seconds},
            }
        )
    if summary:
        run.write_summary(
            {
                "status": status,
                "method": method,
                "task": task,
                "seed": seed,
                "task_options": {"steps": steps},
                "time": {"wall_seconds": wall_seconds or WALL_SECONDS.get(method, 110.0)},
            }
        )
    return run
