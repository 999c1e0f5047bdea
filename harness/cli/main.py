"""The ``creditbench`` command line."""

from __future__ import annotations

import argparse
import sys

from creditbench.harness.allocator import keep_freed_memory
from creditbench.harness.cli.bootstrap import add_bootstrap_commands
from creditbench.harness.cli.data import add_data_commands
from creditbench.harness.cli.leaderboard import add_leaderboard_commands
from creditbench.harness.cli.reproduce import add_reproduce_commands
from creditbench.harness.cli.train import add_train_commands


def _cmd_methods(args: argparse.Namespace) -> int:
    from creditbench.methods.registry import list_methods

    methods = list_methods()
    width = max(len(name) for name in methods)
    for name, cls in methods.items():
        tag = " [reference: needs ground truth]" if cls.reference else ""
        print(f"{name:<{width}}  {cls.summary}{tag}")
        print(f"{'':<{width}}  paper: {cls.paper}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="creditbench",
        description="Token-level credit assignment for RL with verifiable rewards: "
        "reference methods, a budget-matched harness, a leaderboard.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("methods", help="list every registered method")
    p.set_defaults(func=_cmd_methods)
    add_bootstrap_commands(sub)
    add_data_commands(sub)
    add_train_commands(sub)
    add_leaderboard_commands(sub)
    add_reproduce_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    keep_freed_memory()
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
