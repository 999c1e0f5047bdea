"""``creditbench perf``: where a step's time goes, by phase, against a plain loop and TRL's step;
with ``--phases``, what one hard-setting run costs, training and evaluation apart, before and
after protocol 2.

creditbench perf
creditbench perf --phases
"""

from __future__ import annotations

import argparse

from creditbench.tools.cli.common import (
    add_set_option,
    quiet_transformers,
    repeat_count,
    set_threads,
    thread_count,
    unknown_method,
    usage_error,
)


def _cmd_perf(args: argparse.Namespace) -> int:
    from creditbench.harness.config import ConfigError
    from creditbench.tools.perf import run_perf

    if args.repeats < 1:
        return usage_error("perf", f"--repeats: must be >= 1 (got {args.repeats})")
    if message := unknown_method("--methods", args.methods or ()):
        return usage_error("perf", message)
    set_threads(args.threads)
    quiet_transformers()
    if args.phases:
        from creditbench.tools.perf_phases import run_phases

        if args.config:
            return usage_error(
                "perf", "--phases: measures the standard suites' hard run and takes no --config"
            )
        try:
            return run_phases(args.overrides, repeats=args.repeats)
        except ConfigError as err:
            return usage_error("perf", str(err))
    try:
        return run_perf(
            args.config,
            args.overrides,
            repeats=args.repeats,
            methods=args.methods,
            compare_trl=not args.no_trl,
        )
    except ConfigError as err:
        return usage_error("perf", str(err))


def add_perf_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "perf", help="time a step by phase: fast and reference paths, a plain loop, TRL"
    )
    p.add_argument("--config", help="a YAML run config (default: the defaults)")
    add_set_option(p)
    p.add_argument(
        "--repeats",
        type=repeat_count,
        default=3,
        help="steps per median (default 3, at most 1,000)",
    )
    p.add_argument(
        "--methods", nargs="*", help="methods to time one step of (default: all; none: skip)"
    )
    p.add_argument("--no-trl", action="store_true", help="skip the TRL GRPOTrainer step")
    p.add_argument(
        "--phases",
        action="store_true",
        help="one hard-setting run's core-seconds, training and evaluation apart, before and "
        "after protocol 2 (the standard suite's hard GRPO run), side by side",
    )
    p.add_argument("--threads", type=thread_count, help="torch CPU threads, at most the CPUs")
    p.set_defaults(func=_cmd_perf)
