"""``creditbench reproduce CARD``: run a paper card's recipe at CPU or paper scale and write the
paper's numbers beside ours (see :mod:`creditbench.tools.reproduce.run`).

creditbench reproduce dapo                         # CPU scale: the claims on the standard suite
creditbench reproduce dapo --dry-run               # the plan, nothing run
creditbench reproduce dapo --minutes 30            # a quick look at the ordering, 30 minutes
creditbench reproduce dapo --scale paper --model-dir DIR --steps 200
creditbench reproduce drgrpo --scale paper --engine verl --steps 200   # a verl launch
"""

from __future__ import annotations

import argparse

from creditbench.tools.cli.common import (
    eval_problem_count,
    optimizer_step_count,
    positive_int,
    resample_count,
    usage_error,
    worker_count,
)


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from creditbench.tools.reproduce.run import ReproduceError, reproduce

    try:
        return reproduce(
            args.card,
            scale=args.scale,
            results=args.results,
            seeds=args.seeds,
            minutes=args.minutes,
            flops=args.budget,
            steps=args.steps,
            n_eval=args.n_eval,
            workers=args.workers,
            model_dir=args.model_dir,
            task=args.task,
            ignore_hardware=args.ignore_hardware,
            overrides=args.overrides,
            dry_run=args.dry_run,
            reps=args.reps,
            engine=args.engine,
            records=args.records,
            suite=args.suite,
        )
    except ReproduceError as err:
        return usage_error("reproduce", str(err))


def add_reproduce_commands(subparsers) -> None:
    """Register ``reproduce`` on the main parser's subparsers."""
    p = subparsers.add_parser(
        "reproduce", help="run a paper card's recipe and compare with the paper's table"
    )
    p.add_argument("card", help="a card id of reference/cards/ (e.g. dapo, drgrpo, gspo)")
    p.add_argument(
        "--scale",
        choices=("cpu", "paper"),
        help="cpu: the testbed; paper: the full recipe (default: paper with a CUDA GPU, else cpu)",
    )
    p.add_argument("--results", help="results folder (default: runs/reproduce-CARD)")
    p.add_argument(
        "--seeds",
        type=positive_int,
        help="seeds per method (the claims: at most, and by default, the standard suite's 10; "
        "a quick look: at most 10,000, by default the card's 3)",
    )
    p.add_argument(
        "--records",
        action="append",
        metavar="SOURCE",
        help="cpu: the suite's records to read before running what they lack "
        "(repeatable; default: docs/results/standard and docs/results/claims-rows, "
        "where they exist)",
    )
    p.add_argument(
        "--suite",
        help="cpu: the claims on this suite (a shipped name or a YAML file) instead of the "
        "standard one, in each of its settings, each row at its method's entry there "
        "(protocol 2: tools/suites/standard-tuned.yaml)",
    )
    p.add_argument(
        "--minutes",
        type=float,
        help="cpu: a quick look instead of the claims: the card's cpu_scale recipe, its budget "
        "planned for this many minutes",
    )
    p.add_argument("--budget", type=float, help="FLOPs per run, instead of the planned budget")
    p.add_argument(
        "--steps",
        type=optimizer_step_count,
        help="paper: optimizer steps per run (at most 1,000,000)",
    )
    p.add_argument(
        "--n-eval",
        type=eval_problem_count,
        help="evaluation problems (eval.n_problems; at most 100,000)",
    )
    p.add_argument(
        "--workers",
        type=worker_count,
        help="cpu: parallel runs, at most 4 x the cores (default: one per core)",
    )
    p.add_argument("--model-dir", help="paper: a local copy of the paper's model")
    p.add_argument("--task", help="paper: the task when the card's training data is not ours")
    p.add_argument(
        "--ignore-hardware",
        action="store_true",
        help="paper: try on fewer or smaller GPUs than the card estimates",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field of every run (repeatable)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the plan and the runs, run nothing"
    )
    p.add_argument(
        "--reps",
        type=resample_count,
        default=2000,
        help="bootstrap resamples (default 2000, at most 100,000)",
    )
    p.add_argument(
        "--engine",
        default="builtin",
        help="paper: builtin (creditbench's trainer, vLLM rollouts), or verl or trl (write a "
        "launch of the plan for that trainer into RESULTS/ENGINE, run nothing here)",
    )
    p.set_defaults(func=_cmd_reproduce)
