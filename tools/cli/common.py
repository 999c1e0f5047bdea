"""What every ``creditbench`` verb shares: the one-line usage error (exit code 2), the torch
thread count, quiet transformers, and the repeatable ``--set KEY=VALUE`` option."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Iterable
from pathlib import Path

EXIT_USAGE = 2


def usage_error(command: str, message: str) -> int:
    """Print ``creditbench COMMAND: error: MESSAGE`` to stderr; the exit code of a user error."""
    print(f"creditbench {command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def positive_int(text: str) -> int:
    """An argparse type for counts (threads, workers, repeats, problems, tokens): an integer
    >= 1, or argparse's usage error naming the flag (exit 2). 0 is never "not given"."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1 (got {text!r})") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1 (got {value})")
    return value


def thread_count(text: str) -> int:
    """An argparse type for ``--threads``: an integer from 1 to this machine's CPU count. More
    threads than CPUs only contend for the cores (ours: torch's own default is one per core),
    and a mistyped 100000 made torch start that many and exhausted the process table."""
    value = positive_int(text)
    cpus = os.cpu_count() or 1
    if value > cpus:
        raise argparse.ArgumentTypeError(
            f"must be an integer in 1..{cpus}, this machine's CPU count (got {value})"
        )
    return value


def worker_count(text: str) -> int:
    """An argparse type for ``--workers`` of the verbs that hand runs to bench's workers
    (reproduce, validate): bench's own bound, 1 to ``MAX_PER_CORE`` x the CPU count. Each
    worker holds its models in memory, and a mistyped 1000000 was planned without a word."""
    from creditbench.tools.bench import MAX_PER_CORE

    value = positive_int(text)
    cores = os.cpu_count() or 1
    most = MAX_PER_CORE * cores
    if value > most:
        raise argparse.ArgumentTypeError(
            f"must be between 1 and {most} ({MAX_PER_CORE} x this machine's {cores} cores; "
            f"got {value})"
        )
    return value


def seed_value(text: str) -> int:
    """An argparse type for every ``--seed``: the rule of the run config's ``seed`` (an integer
    in [0, 2**32), what numpy's and Python's generators are seeded with), for train, eval and
    every other verb alike."""
    from creditbench.harness.config import SEED_LIMIT

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**32) (got {value})")
    return value


# ours: 50 times the board's default of 2,000 and twice the 50,000 of rliable's examples
# (rliable README, ``get_interval_estimates(..., reps=50000)``); a mistyped 10**9 ran for
# minutes and was killed for its memory without a word
MAX_REPS = 100_000


def count_up_to(most: int):
    """An argparse type for a count of work (problems, samples, steps, repeats): an integer from
    1 to ``most``. A mistyped 10**12 was accepted and ran until killed; each caller's bound says
    why it is far past any real use."""

    def count(text: str) -> int:
        value = positive_int(text)
        if value > most:
            raise argparse.ArgumentTypeError(f"must be at most {most:,} (got {value:,})")
        return value

    count.__name__ = "count"  # argparse names the type in its own messages
    return count


# ours, each far past real use: an eval split of the shipped tasks holds at most a few thousand
# problems (the chain's 300); the board samples 4 a problem and pass@k reads up to 64
MAX_EVAL_PROBLEMS = 100_000
MAX_EVAL_SAMPLES = 1_024
# ours: 256 times the default 256 continuations a state, which already give a value to +-0.03
MAX_VALUE_SAMPLES = 65_536
MAX_REPEATS = 1_000  # ours: perf's median of 3 steps; 1,000 steps is hours of a slow method
MAX_SFT_STEPS = 1_000_000  # ours: 667 times the recipe's 1,500 SFT steps
MAX_OPTIMIZER_STEPS = 1_000_000  # ours: 2,000 times a paper recipe's few hundred steps
MAX_BATCHES = 10_000  # ours: values' 2 and gradients' 12 batches by default, each many steps' worth
MAX_STATES = 100_000  # ours: values reads 120 states a batch by default
MAX_EXAMPLES = 100_000  # ours: conformance's 100 random batches a check, 1,000 times over
MAX_RESPONSES = 10_000  # ours: explain draws 3 failed responses by default, each printed


# The flags' bounded count types, built once here, so that a parser only names its type;
# resample_count is every --reps: bootstrap resamples
resample_count = count_up_to(MAX_REPS)
eval_problem_count = count_up_to(MAX_EVAL_PROBLEMS)
eval_sample_count = count_up_to(MAX_EVAL_SAMPLES)
value_sample_count = count_up_to(MAX_VALUE_SAMPLES)
repeat_count = count_up_to(MAX_REPEATS)
sft_step_count = count_up_to(MAX_SFT_STEPS)
optimizer_step_count = count_up_to(MAX_OPTIMIZER_STEPS)
batch_count = count_up_to(MAX_BATCHES)
state_count = count_up_to(MAX_STATES)
example_count = count_up_to(MAX_EXAMPLES)
response_count = count_up_to(MAX_RESPONSES)


def not_a_regular_file(path: str | Path) -> str | None:
    """Why ``path`` cannot be read or written as a plain file (a FIFO, a socket, a device, on
    which an open blocks or means something else), or None: it is absent, a regular file, or a
    folder (which the caller names in its own words)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
    return f"{path} is {kind}, not a regular file"


def set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


def quiet_transformers() -> None:
    """No per-file progress bars from transformers while saving checkpoints."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def add_set_option(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    """``--set KEY=VALUE`` (repeatable), collected into ``args.overrides``."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=help or "override a config field, e.g. rollout.group_size=4 (repeatable)",
    )


def unknown_method(flag: str, names: Iterable[str]) -> str | None:
    """The usage message for the first of ``names`` no method is registered as (``--methods:
    unknown method 'x'; known: ...``), or None when every one is known."""
    from creditbench.methods.registry import list_methods

    known = list_methods()
    unknown = [name for name in names if name not in known]
    if not unknown:
        return None
    return f"{flag}: unknown method {unknown[0]!r}; known: {', '.join(known)}"
