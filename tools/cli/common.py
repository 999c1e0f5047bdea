"""What every ``creditbench`` verb shares: the one-line usage error (exit code 2), the torch
thread count, quiet transformers, and the repeatable ``--set KEY=VALUE`` option."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

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
