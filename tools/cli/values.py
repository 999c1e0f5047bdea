"""``creditbench values``: the task's own state values against Monte Carlo.

creditbench values --batches 2 --states 120
"""

from __future__ import annotations

import argparse
from pathlib import Path

from creditbench.tools.cli.common import (
    add_set_option,
    batch_count,
    not_a_regular_file,
    quiet_transformers,
    set_threads,
    state_count,
    thread_count,
    usage_error,
    value_sample_count,
)


def _cmd_values(args: argparse.Namespace) -> int:
    from creditbench.harness.config import ConfigError
    from creditbench.tools.value_check import run_value_check

    for flag, value, least in (("--batches", args.batches, 1), ("--states", args.states, 1),
                               ("--samples", args.samples, 2)):  # fmt: skip
        if value < least:
            return usage_error("values", f"{flag}: must be >= {least} (got {value})")
    if args.out is not None:
        from creditbench.harness.records.rundir import RunDirError, check_creatable

        if Path(args.out).is_dir():
            return usage_error("values", f"--out: {args.out} is a folder; name a CSV file")
        if (problem := not_a_regular_file(args.out)) is not None:  # writing one would block
            return usage_error("values", f"--out: {problem}")
        try:  # before the continuations are sampled, not after
            check_creatable(Path(args.out).parent, "--out")
        except RunDirError as err:
            return usage_error("values", str(err))
    set_threads(args.threads)
    quiet_transformers()
    try:
        return run_value_check(
            args.config,
            args.overrides,
            args.batches,
            args.states,
            args.samples,
            args.out,
            args.checkpoint,
            args.mc_from,
        )
    except (ConfigError, ValueError) as err:
        return usage_error("values", str(err))


def add_values_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "values",
        help="the task's own state values against Monte Carlo, at the starting policy or a "
        "checkpoint's",
    )
    p.add_argument("--config", help="a YAML run config (default: the defaults)")
    add_set_option(p)
    p.add_argument(
        "--batches",
        type=batch_count,
        default=2,
        help="batches (default 2, at most 10,000)",
    )
    p.add_argument(
        "--states",
        type=state_count,
        default=120,
        help="states per batch (default 120, at most 100,000)",
    )
    p.add_argument(
        "--samples",
        type=value_sample_count,
        default=256,
        help="continuations a state (256, at most 65,536)",
    )
    p.add_argument("--out", help="write one CSV row per state here")
    p.add_argument(
        "--checkpoint",
        help="a run's checkpoints/step-N folder: value the states of its policy (the run's "
        "config.yaml is the default config)",
    )
    p.add_argument(
        "--mc-from",
        help="an earlier --out CSV of the same states: take its Monte-Carlo values instead of "
        "sampling them again (a changed estimator checked in seconds)",
    )
    p.add_argument("--threads", type=thread_count, help="torch CPU threads, at most the CPUs")
    p.set_defaults(func=_cmd_values)
