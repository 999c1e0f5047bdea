"""How far one training step wanders through the project's files: a reader's measure of the
harness (docs/harness.md, "One step, traced").

    python scripts/trace_step.py                 # grpo on the testbed, the default run config
    python scripts/trace_step.py --method tempo --show
    python scripts/trace_step.py --setup         # from `creditbench train` to the first step

Builds the default run (the embedded testbed) with ``--method``, takes one step untraced (first
use of lazy imports and caches), then traces the next step and its metrics record
(``Trainer.train_step`` and the logger's write) with ``sys.setprofile``. Only the project's own
source files count (the installed package's folders; torch, transformers and the standard
library are skipped).

With ``--setup`` it traces the run's setup instead: ``creditbench train --method M`` from the
command line's ``main`` to the call of the first step (the first step itself untraced), in a
fresh process, so the first look-ups (the method registry, the task, the base policy's cache)
count as a newcomer meets them.

Figures, printed one a line, of the reader's path: every project function the step runs, read
once, in the order the step first calls it:
- ``functions``: distinct project functions that ran;
- ``files``: distinct project files they live in;
- ``hops``: moves from one file to another along that path;
- ``returns``: hops into a file the path had already left once: the zig-zag a reader follows.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import creditbench.harness

PACKAGE = Path(creditbench.harness.__file__).resolve().parents[1]
ROOMS = ("methods", "common", "harness", "leaderboard", "reference", "integrations", "tools")


def project_file(filename: str) -> str | None:
    """The file's path inside the project (``harness/training/trainer.py``), or None."""
    try:
        relative = Path(filename).resolve().relative_to(PACKAGE)
    except ValueError:
        return None
    return relative.as_posix() if relative.parts[0] in ROOMS else None


class StepTrace:
    """The project files and functions execution moves through while ``run`` runs."""

    def __init__(self) -> None:
        self.functions: dict[tuple[str, str], None] = {}  # in the order of their first call

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            where = project_file(frame.f_code.co_filename)
            if where is not None:
                self.functions.setdefault((where, frame.f_code.co_qualname), None)

    @property
    def path(self) -> list[str]:
        """The files a reader opens, reading each function once in the order the step first
        calls it (consecutive functions of one file read in one visit)."""
        out: list[str] = []
        for where, _ in self.functions:
            if not out or out[-1] != where:
                out.append(where)
        return out

    def run(self, step: Callable[[], Any]) -> Any:
        sys.setprofile(self._profile)
        try:
            return step()
        finally:
            sys.setprofile(None)

    def figures(self) -> dict[str, int]:
        hops = len(self.path) - 1 if self.path else 0
        left: set[str] = set()
        returns = 0
        for before, after in zip(self.path, self.path[1:], strict=False):
            left.add(before)
            returns += after in left
        return {
            "functions": len(self.functions),
            "files": len({file for file, _ in self.functions}),
            "hops": hops,
            "returns": returns,
        }


def traced_step(method: str) -> StepTrace:
    """One traced step (and its record) of the default run with ``method``, after one untraced."""
    import torch

    from creditbench.harness.config import RunConfig, to_dict
    from creditbench.harness.records.rundir import MetricsLogger
    from creditbench.harness.training.trainer import Trainer

    torch.set_num_threads(1)
    config = RunConfig(method=method)
    with tempfile.TemporaryDirectory() as folder:
        trainer = Trainer(config, Path(folder) / "run")
        trainer.run_dir.create(to_dict(config), {})
        trainer.build()
        logger = MetricsLogger(trainer.run_dir)
        try:
            logger.log(trainer.train_step())
            trace = StepTrace()
            trace.run(lambda: logger.log(trainer.train_step()))
        finally:
            logger.close()
    return trace


class FirstStep(BaseException):
    """Raised where the first step would start: the setup trace ends there (a BaseException,
    so no handler of the command's catches it on the way out)."""


def traced_setup(method: str) -> StepTrace:
    """The path of ``creditbench train --method METHOD`` from the command line to the first
    step, in a temporary output folder."""
    from creditbench.harness.training.trainer import Trainer
    from creditbench.tools.cli.main import main as creditbench

    def stop(self: Trainer, method: Any = None) -> dict[str, Any]:
        # the path ends here: what runs after, as the exception unwinds (the closing of the
        # metrics log and the progress bar in their finally blocks), is not on the way in
        sys.setprofile(None)
        raise FirstStep

    real_step, reuse = Trainer.train_step, Trainer.reuse_initial_evaluation
    Trainer.train_step = stop  # type: ignore[method-assign]
    # the evaluation at budget fraction 0 is computed, as in a newcomer's first run: its cache
    # (a clean commit's earlier run) would make the figure depend on what ran here before
    Trainer.reuse_initial_evaluation = False
    trace = StepTrace()
    try:
        with tempfile.TemporaryDirectory() as folder:
            argv = ["train", "--method", method, "--output", folder, "--quiet", "--threads", "1"]
            trace.run(lambda: creditbench(argv))
    except FirstStep:
        pass
    else:
        raise RuntimeError("creditbench train ended before its first step")
    finally:
        Trainer.train_step = real_step  # type: ignore[method-assign]
        Trainer.reuse_initial_evaluation = reuse
    return trace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default="grpo")
    parser.add_argument("--show", action="store_true", help="print the files in order too")
    parser.add_argument(
        "--setup", action="store_true", help="trace the setup, command line to first step"
    )
    args = parser.parse_args(argv)
    trace = traced_setup(args.method) if args.setup else traced_step(args.method)
    for name, value in trace.figures().items():
        print(f"{name}: {value}")
    if args.show:
        print(" -> ".join(trace.path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
