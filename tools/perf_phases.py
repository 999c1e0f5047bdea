"""``creditbench perf --phases``: what one run of the hard setting costs, training and evaluation
apart, before and after protocol 2, side by side in one process.

Both paths run the standard suite's hard-setting GRPO run at seed 0
(``tools/suites/standard.yaml``). *Before* is the frozen protocol as the board ran it: every
evaluation computed. *After* is protocol 2 (docs/testbed.md, "Protocol 2's evaluation"): the
same evaluations, the start one reused from the cache. Protocol 2's rule kept the samples per
problem at 4, so the two paths differ only there; a faster path for either phase is measured
here beside the one it replaces.

It measures, alternating the two paths (the order reversed every round, so neither always runs
first), ``repeats`` training steps of each after a warm-up, and ``repeats`` evaluations of each on
the base policy at the later points' settings; then projects one run:

    training   = steps in the run (the budget / the FLOPs of a measured step) x median step
    evaluation = later points x median evaluation + the start evaluation
                 (before: computed, one more evaluation; after: reused, a cache look-up, once
                 the first run of its seed has computed it: the figure is per run of a campaign
                 whose methods share a seed, and the line below the table says what the
                 first run pays)

Core-seconds are the process's CPU time (``time.process_time``: every thread it ran), which a
busy machine inflates far less than wall time; wall seconds are printed beside them. The
evaluations run on the base policy, whose responses are about as long as a trained one's (150
against 157 tokens in the board's GRPO runs).
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

from creditbench.harness.config import RunConfig

SUITE, HARD_RUN = "standard", "chain-hard-*-grpo-s0"
PATHS = {
    "before": "the frozen protocol: every evaluation computed",
    "after": "protocol 2: the start evaluation reused",
}


def suite_run_config(suite: str, pattern: str, overrides: list[str]) -> RunConfig:
    """The config of the one run of ``suite`` that ``pattern`` selects, with ``overrides``."""
    import dataclasses
    import tempfile
    from pathlib import Path

    from creditbench.tools.suite import (
        expand_suite,
        load_suite,
        run_config,
        select_runs,
        suite_path,
    )

    path = suite_path(suite)
    (run,) = select_runs(expand_suite(load_suite(path), path), [pattern])
    run = dataclasses.replace(run, overrides=[*run.overrides, *overrides])
    return run_config(run, Path(tempfile.gettempdir()) / "creditbench-perf")


def timed(function: Callable[[], Any]) -> tuple[float, float]:
    """(CPU seconds of this process, wall seconds) that ``function()`` took."""
    cpu, wall = time.process_time(), time.perf_counter()
    function()
    return time.process_time() - cpu, time.perf_counter() - wall


def run_phases(overrides: list[str], repeats: int = 3) -> int:
    from creditbench.harness.training.trainer import Trainer
    from creditbench.tools.perf_compare import OutsideLoad

    measure = ["budget.unit=steps", "budget.amount=1000000"]
    trainers: dict[str, Trainer] = {}
    budgets: dict[str, float] = {}
    for name in PATHS:
        budgets[name] = suite_run_config(SUITE, HARD_RUN, overrides).budget.amount
        trainers[name] = Trainer(suite_run_config(SUITE, HARD_RUN, [*overrides, *measure]))
        trainers[name].build()
        trainers[name].reuse_initial_evaluation = name == "after"
    for trainer in trainers.values():
        trainer.train_step()  # warm-up
    cpu: dict[str, dict[str, list[float]]] = {n: {"step": [], "eval": []} for n in trainers}
    wall: dict[str, dict[str, list[float]]] = {n: {"step": [], "eval": []} for n in trainers}
    flops: dict[str, list[float]] = {n: [] for n in trainers}
    order = list(trainers)
    with OutsideLoad() as load:
        for repeat in range(repeats):
            for name in order if repeat % 2 == 0 else order[::-1]:
                trainer = trainers[name]
                before = trainer.meter.counters()["flops"]
                seconds = timed(trainer.train_step)
                flops[name].append(trainer.meter.counters()["flops"] - before)
                cpu[name]["step"].append(seconds[0])
                wall[name]["step"].append(seconds[1])
        for repeat in range(repeats):
            for name in order if repeat % 2 == 0 else order[::-1]:
                seconds = timed(functools.partial(later_point_evaluation, trainers[name]))
                cpu[name]["eval"].append(seconds[0])
                wall[name]["eval"].append(seconds[1])
        start = {name: start_evaluation_seconds(trainers[name]) for name in order}
    projected = {
        name: project(
            trainers[name].config,
            budgets[name],
            statistics.median(flops[name]),
            {phase: statistics.median(v) for phase, v in cpu[name].items()},
            start[name],
        )
        for name in order
    }
    print_projection(trainers, projected, wall, repeats)
    print_batch_scaling(overrides, repeats)
    from creditbench.harness.records.rundir import capture_environment

    if capture_environment().get("git_dirty") is not False:
        print(
            "  (this checkout is not a clean commit: its own runs never reuse an evaluation; "
            "the after column is what the same code does from a clean commit)"
        )
    print("\n" + load.describe())
    return 0


def later_point_evaluation(trainer) -> dict[str, Any]:
    """One evaluation with the run's settings, as at a later budget fraction."""
    from creditbench.harness.training.evaluation import evaluate, evaluation_settings

    settings = evaluation_settings(trainer.config, trainer.config.rollout.backend)
    return evaluate(trainer.policy, trainer.tokenizer, trainer.task, **settings)


def start_evaluation_seconds(trainer) -> float | None:
    """CPU seconds of the start evaluation's look-up when the path reuses it (the material
    computed and the cache read), None when the path computes it."""
    if not trainer.reuse_initial_evaluation:
        return None
    from creditbench.harness.records.rundir import capture_environment
    from creditbench.harness.training.evaluation import (
        evaluation_settings,
        initial_evaluation_material,
    )

    cpu = time.process_time()
    settings = evaluation_settings(trainer.config, trainer.config.rollout.backend)
    initial_evaluation_material(
        trainer.policy, trainer.tokenizer, trainer.task, settings, capture_environment()
    )
    return time.process_time() - cpu


def project(
    config: RunConfig,
    budget: float,
    step_flops: float,
    seconds: dict[str, float],
    start: float | None,
) -> dict[str, float]:
    """One run's core-seconds: its steps x a step, its evaluations x an evaluation."""
    import math

    steps = math.ceil(budget / step_flops)
    later = sum(1 for f in config.budget.eval_fractions if f > 0)
    start_cost = seconds["eval"] if start is None else start
    training = steps * seconds["step"]
    evaluation = later * seconds["eval"] + start_cost
    return {
        "steps": steps,
        "step": seconds["step"],
        "points": later,
        "eval": seconds["eval"],
        "start": start_cost,
        "training": training,
        "evaluation": evaluation,
        "run": training + evaluation,
    }


def print_projection(trainers, projected, wall, repeats: int) -> None:
    before, after = projected["before"], projected["after"]
    for name, trainer in trainers.items():
        ev = trainer.config.eval
        print(
            f"{name:<6} ({PATHS[name]}): {ev.n_problems} problems x {ev.k_samples} samples a "
            f"point at {len(trainer.config.budget.eval_fractions)} budget fractions"
        )
    print(
        f"\none hard-setting run (GRPO, seed 0), core-seconds (CPU time; median of {repeats} "
        "interleaved measurements):"
    )
    print(f"  {'':<24} {'before':>10} {'after':>10} {'after/before':>13}")
    rows = (
        ("training step", "step"),
        ("evaluation (a point)", "eval"),
        ("start evaluation", "start"),
        ("training (the run)", "training"),
        ("evaluation (the run)", "evaluation"),
        ("run", "run"),
    )
    for label, key in rows:
        ratio = after[key] / before[key] if before[key] else float("nan")
        print(f"  {label:<24} {before[key]:10.2f} {after[key]:10.2f} {ratio:12.2f}x")
    for name, p in projected.items():
        print(
            f"  {name}: {p['steps']} steps, {p['points']} later points + the start; evaluation "
            f"{p['evaluation'] / p['run']:.0%} of the run; wall seconds a step "
            f"{statistics.median(wall[name]['step']):.2f}, an evaluation "
            f"{statistics.median(wall[name]['eval']):.2f}"
        )
    print(
        f"  (after: the first run of a seed computes the start evaluation, {after['eval']:.1f} "
        f"core-seconds more, {after['evaluation'] - after['start'] + after['eval']:.0f} in all; "
        "the other runs of that seed reuse it)"
    )


# How much cheaper a token gets in a batch this many times the run's: what several seeds in one
# process (stacked weights, one generation for all) could save at most, since a stacked batch
# does at least the work of one batch that large
SCALE = 4


def print_batch_scaling(overrides: list[str], repeats: int) -> None:
    """Core-seconds per token of the run's generation and update at its batch (4 prompts x 8)
    and at ``SCALE`` times as many prompts: the spare arithmetic larger batches would use."""
    import torch

    from creditbench.harness.sampling.rollout import sample_responses
    from creditbench.harness.training.ppo import ppo_update
    from creditbench.harness.training.trainer import Trainer

    measure = ["budget.unit=steps", "budget.amount=1000000", "train.lr=1e-12"]
    rates: dict[int, dict[str, float]] = {}
    base = suite_run_config(SUITE, HARD_RUN, overrides).rollout.prompts_per_step
    for prompts in (base, SCALE * base):
        config = suite_run_config(
            SUITE, HARD_RUN, [*overrides, *measure, f"rollout.prompts_per_step={prompts}"]
        )
        trainer = Trainer(config)
        trainer.build()
        texts = [p.prompt for p in trainer.services.train_problems[:prompts]]
        rollout = config.rollout
        generation, update = [], []
        for repeat in range(repeats):
            cpu = time.process_time()
            samples = sample_responses(
                trainer.policy,
                trainer.tokenizer,
                texts,
                n=rollout.group_size,
                max_new_tokens=rollout.max_new_tokens,
                temperature=rollout.temperature,
                seed=repeat,
            )
            generation.append(float(samples.new_tokens.sum()) / (time.process_time() - cpu))
            batch = trainer.services.sample_batch()
            advantages = trainer.method.advantages(batch, trainer.services)
            lengths = torch.cat([batch.prompt_mask, batch.response_mask], 1).sum(-1).long()
            cpu = time.process_time()
            ppo_update(
                trainer.policy,
                trainer.optimizer,
                trainer.method,
                batch,
                advantages,
                train=config.train,
                micro_batch_size=trainer.micro_batch_size,
                temperature=rollout.temperature,
                meter=trainer.meter,
                lengths=lengths,
                seed=repeat,
                step=0,
            )
            update.append(float(batch.response_mask.sum()) / (time.process_time() - cpu))
        rates[prompts] = {
            "generation": statistics.median(generation),
            "update": statistics.median(update),
        }
    small, large = rates[base], rates[SCALE * base]
    print(
        f"\nthe spare arithmetic: tokens per core-second at the run's batch ({base} prompts) and "
        f"at {SCALE}x it, median of {repeats}:"
    )
    for phase in ("generation", "update"):
        print(
            f"  {phase:<11} {small[phase]:8.0f} {large[phase]:8.0f}   "
            f"{large[phase] / small[phase]:.2f}x (the most stacking {SCALE} seeds could gain)"
        )
