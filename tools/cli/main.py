"""The ``creditbench`` command line."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from creditbench.harness.allocator import keep_freed_memory
from creditbench.harness.tasks.math_data import MissingPackageError
from creditbench.methods.registry import PluginError
from creditbench.tools.cli.bench import add_bench_command
from creditbench.tools.cli.bootstrap import add_bootstrap_commands
from creditbench.tools.cli.campaign import add_campaign_command
from creditbench.tools.cli.common import EXIT_USAGE, usage_error
from creditbench.tools.cli.data import add_data_commands
from creditbench.tools.cli.eval import add_eval_command
from creditbench.tools.cli.explain import add_explain_command
from creditbench.tools.cli.gradients import add_gradients_command
from creditbench.tools.cli.leaderboard import add_leaderboard_commands
from creditbench.tools.cli.methods import add_method_commands
from creditbench.tools.cli.perf import add_perf_command
from creditbench.tools.cli.reproduce import add_reproduce_commands
from creditbench.tools.cli.train import add_train_command
from creditbench.tools.cli.values import add_values_command
from creditbench.tools.cli.verify import add_verify_command


class _UsageError(Exception):
    """An argument argparse refused; `main` prints it as one line and returns 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with a usage error of one line (``creditbench train: error: --threads: must be
    an integer >= 1 (got 0)``), the same as every command's own, returned, not exited."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(f"{self.prog}: error: {message.removeprefix('argument ')}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="creditbench",
        description="Token-level credit assignment for RL with verifiable rewards: "
        "reference methods, a budget-matched harness, a leaderboard.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    add_method_commands(sub)
    add_bootstrap_commands(sub)
    add_data_commands(sub)
    add_train_command(sub)
    add_eval_command(sub)
    add_bench_command(sub)
    add_campaign_command(sub)
    add_perf_command(sub)
    add_gradients_command(sub)
    add_values_command(sub)
    add_leaderboard_commands(sub)
    add_explain_command(sub)
    add_reproduce_commands(sub)
    add_verify_command(sub)
    return parser


EXIT_INTERRUPTED = 130  # the shell's code for a command ended by Ctrl-C
KEPT = (
    "finished runs and the last checkpoint of an unfinished one are kept; the same command "
    "resumes (train: --resume RUN)"
)


def _terminate_like_ctrl_c(signum: int, frame: object) -> None:
    """SIGTERM ends a command as Ctrl-C does: the cleanup code runs (bench stops its workers
    instead of leaving them training on)."""
    raise KeyboardInterrupt


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a command a closed pipe stops returns


def _reader_gone() -> int:
    """A pipe whose reader closed: stop quietly, as a shell command stopped by SIGPIPE does.
    Standard output now points at /dev/null, so the interpreter's last flush at exit finds no
    broken pipe to report (the Python documentation's recipe, "Note on SIGPIPE")."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # a stdout without a descriptor (captured): nothing to flush
        pass
    finally:
        os.close(devnull)
    return EXIT_BROKEN_PIPE


def main(argv: list[str] | None = None) -> int:
    keep_freed_memory()
    if threading.current_thread() is threading.main_thread() and (
        signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    ):
        signal.signal(signal.SIGTERM, _terminate_like_ctrl_c)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as err:
        print(err, file=sys.stderr)
        return EXIT_USAGE
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at the interpreter's exit
        return code
    except BrokenPipeError:  # `creditbench methods | head -1`: the reader has all it wants
        return _reader_gone()
    except PluginError as err:  # any command may be the first to load the registry
        return usage_error(args.command, str(err))
    except MissingPackageError as err:  # any command may be the first to read a task's data
        return usage_error(args.command, f"task data: {err}")
    except KeyboardInterrupt:
        kept = getattr(args, "interrupted", KEPT)  # a verb that keeps something else says so
        print(f"\ncreditbench {args.command}: interrupted; {kept}", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
