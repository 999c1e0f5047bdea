"""``creditbench gradients``: each method's gradient at a fixed policy (norm, consistency,
agreement with a reference's mean gradient).

creditbench gradients --methods grpo oracle --batches 12
"""

from __future__ import annotations

import argparse

from creditbench.tools.cli.common import (
    add_set_option,
    batch_count,
    quiet_transformers,
    set_threads,
    thread_count,
    unknown_method,
    usage_error,
)


def _cmd_gradients(args: argparse.Namespace) -> int:
    from creditbench.harness.config import ConfigError
    from creditbench.tools.gradients import run_gradients

    if args.batches < 2:
        return usage_error("gradients", f"--batches: must be >= 2 (got {args.batches})")
    for flag, names in (("--methods", args.methods), ("--reference", [args.reference])):
        if message := unknown_method(flag, names):
            return usage_error("gradients", message)
    methods = list(dict.fromkeys([*args.methods, args.reference]))
    set_threads(args.threads)
    quiet_transformers()
    try:
        return run_gradients(args.config, args.overrides, methods, args.batches, args.reference)
    except ConfigError as err:
        return usage_error("gradients", str(err))


def add_gradients_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "gradients",
        help="each method's policy gradient at the starting policy: norm, batch-to-batch "
        "consistency, agreement with the reference's mean gradient",
    )
    p.add_argument("--config", help="a YAML run config (default: the defaults)")
    add_set_option(p)
    p.add_argument("--methods", nargs="+", default=["grpo"], help="methods (default: grpo)")
    p.add_argument(
        "--reference", default="oracle", help="whose mean gradient to agree with (default oracle)"
    )
    p.add_argument(
        "--batches",
        type=batch_count,
        default=12,
        help="batches (default 12, at most 10,000)",
    )
    p.add_argument("--threads", type=thread_count, help="torch CPU threads, at most the CPUs")
    p.set_defaults(func=_cmd_gradients)
