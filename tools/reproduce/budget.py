"""The CPU budget of ``creditbench reproduce --scale cpu``: how many FLOPs each run gets.

A CPU reproduction is sized by wall clock (``--minutes``, default 30): :func:`plan_budget`
turns the minutes, the number of runs and workers, and the cost of each run's evaluations
(:func:`eval_flops_per_run`) into one per-run FLOP budget, from the measured throughput of a
bench worker below. Every run of the reproduction gets that same budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from creditbench.tools.reproduce.recipe import ReproduceError

__all__ = ["BudgetPlan", "eval_flops_per_run", "flops_text", "plan_budget"]

# Throughput of one bench worker (one thread, two workers on a 2-core machine) on the tiny
# preset, in metered FLOPs per second of step time (generation, scoring and update together):
# 1.86e10-2.13e10, median 1.99e10, over the six runs of a `creditbench reproduce dapo` at
# 1.6e13 FLOPs each, and 1.86e10 for the quick suite's GRPO run. Their three evaluations
# took 40 s (median), 1.7 times what the earlier constant of 1.5e10 planned.
STEP_FLOPS_PER_SECOND = 2.0e10
EVAL_FLOPS_PER_SECOND = 9.0e9
RUN_OVERHEAD_SECONDS = 20.0  # process start, imports, model load, checkpoints
DEFAULT_MINUTES = 30.0


def flops_text(x: float) -> str:
    """``1.6e13`` rather than ``1.6e+13``."""
    return f"{x:.2g}".replace("e+", "e")


@dataclass(frozen=True)
class BudgetPlan:
    """A per-run FLOP budget and the wall-clock time it should take on ``workers`` workers."""

    flops: float
    runs: int
    workers: int
    train_seconds: float
    eval_seconds: float
    overhead_seconds: float

    @property
    def rounds(self) -> int:
        return math.ceil(self.runs / self.workers)

    @property
    def run_seconds(self) -> float:
        return self.train_seconds + self.eval_seconds + self.overhead_seconds

    @property
    def minutes(self) -> float:
        return self.rounds * self.run_seconds / 60

    def describe(self) -> str:
        return (
            f"{flops_text(self.flops)} FLOPs per run; {self.runs} runs on {self.workers} "
            f"workers ({self.rounds} round{'s' if self.rounds > 1 else ''}), about "
            f"{self.run_seconds / 60:.1f} min a run "
            f"({self.train_seconds / 60:.1f} min training at "
            f"{flops_text(STEP_FLOPS_PER_SECOND)} FLOP/s, {self.eval_seconds / 60:.1f} min "
            f"evaluation): about {self.minutes:.1f} min in all"
        )


def plan_budget(
    *,
    minutes: float,
    runs: int,
    workers: int,
    eval_flops: float,
    flops: float | None = None,
    overhead: float = RUN_OVERHEAD_SECONDS,
) -> BudgetPlan:
    """The per-run FLOP budget that fills ``minutes`` with ``runs`` runs on ``workers`` workers.

    The runs go in ``ceil(runs / workers)`` rounds. Each run's share of the wall clock pays its
    evaluations (``eval_flops`` metered FLOPs at ``EVAL_FLOPS_PER_SECOND``) and a fixed
    overhead; the rest buys training at ``STEP_FLOPS_PER_SECOND``, rounded down to two
    significant digits. With ``flops`` given: that budget, and how long it should take.
    """
    if not minutes > 0:
        raise ReproduceError(f"--minutes: must be > 0 (got {minutes})")
    if workers < 1:
        raise ReproduceError(f"--workers: must be >= 1 (got {workers})")
    if runs < 1:
        raise ReproduceError(f"runs: must be >= 1 (got {runs})")
    eval_seconds = eval_flops / EVAL_FLOPS_PER_SECOND
    if flops is None:
        share = minutes * 60 / math.ceil(runs / workers)
        train_seconds = share - eval_seconds - overhead
        if train_seconds <= 0:
            raise ReproduceError(
                f"--minutes: too short for {runs} runs on {workers} workers, whose evaluations "
                f"alone take about {eval_seconds:.0f} s a run; lower --seeds or --n-eval, or "
                f"raise --minutes (got {minutes:g})"
            )
        exact = train_seconds * STEP_FLOPS_PER_SECOND
        scale = 10.0 ** (math.floor(math.log10(exact)) - 1)
        flops = math.floor(exact / scale) * scale
    elif not flops > 0:
        raise ReproduceError(f"--budget: must be > 0 FLOPs (got {flops:g})")
    return BudgetPlan(
        flops=float(flops),
        runs=runs,
        workers=workers,
        train_seconds=flops / STEP_FLOPS_PER_SECOND,
        eval_seconds=eval_seconds,
        overhead_seconds=overhead,
    )


def eval_flops_per_run(config) -> float:
    """Metered FLOPs of a run's evaluations: at every eval fraction, ``n_problems`` problems
    times ``k_samples`` samples (+1 greedy), each generating ``max_new_tokens`` tokens after its
    prompt (an upper bound: most responses stop earlier)."""
    from creditbench.harness.budget import BudgetMeter
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, load_policy
    from creditbench.harness.sampling.rollout import encode_prompts
    from creditbench.harness.tasks import get_task
    from creditbench.harness.training.evaluation import eval_problems

    task = get_task(config.task, **config.task_options)
    if config.model.path is not None:
        model, tokenizer = load_policy(Path(config.model.path))
    else:
        tokenizer = build_char_tokenizer(task_alphabet(task))
        model = build_model(config.model.preset, tokenizer, seed=0)
    meter = BudgetMeter.for_model(model)
    ev = config.eval
    problems = eval_problems(task, ev.n_problems, config.seed, ev.problems)
    # the prompts as the rollout encodes them: a chat template's own tokens are prefilled too
    prompts = [len(ids) for ids in encode_prompts(tokenizer, [p.prompt for p in problems])]
    samples = ev.k_samples + (1 if ev.greedy else 0)
    news = [config.rollout.max_new_tokens] * len(prompts)
    one = meter.charge_generation(prompts * samples, news * samples)
    return float(one * len(config.budget.eval_fractions))
