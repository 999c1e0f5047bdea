"""``creditbench explain``: token-level credit drawn as coloured text (HTML and PNG).

- ``creditbench explain RUN --step N``: the responses a run logged at step N (the batch it
  trained on just before an evaluation, ``RUN/responses.jsonl``), coloured by its advantages;
- ``creditbench explain --methods grpo,oracle,oppo``: a few failed responses of one fresh
  testbed batch (the config's base policy, batch shape and seed; ``--set`` as for ``train``),
  every named method's advantages side by side on the same responses.

Writes ``credit.html`` and ``credit.png`` into ``--out`` (default: ``RUN/explain`` for a run,
``explain`` otherwise) and prints their paths.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from creditbench.tools.cli.common import (
    add_set_option,
    quiet_transformers,
    response_count,
    set_threads,
    thread_count,
    usage_error,
)


def _write(out: Path, responses, columns, title) -> None:
    """Write credit.html and credit.png into ``out`` and print their paths; on a terminal,
    draw the credit there first, as coloured text."""
    from creditbench.harness.records.files import atomic_write_bytes, atomic_write_text
    from creditbench.leaderboard.explain import credit_ansi, credit_html, credit_png

    page, picture = credit_html(responses, columns, title), credit_png(responses, columns, title)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "credit.html", page)
    atomic_write_bytes(out / "credit.png", picture)
    if sys.stdout.isatty():
        print(credit_ansi(responses, columns, title))
    print(out / "credit.html")
    print(out / "credit.png")


def _check_out(out: Path) -> str | None:
    """Why ``out`` cannot take the pictures (a file, or under one), or None."""
    from creditbench.harness.records.rundir import RunDirError, check_creatable

    try:
        check_creatable(out, "--out")
    except RunDirError as err:
        return str(err)
    return None


def _explain_run(args: argparse.Namespace) -> int:
    from creditbench.harness.records.rundir import RunDir, RunDirError
    from creditbench.leaderboard.explain import run_panels

    run = RunDir(args.run)
    if not run.exists():
        return usage_error("explain", f"RUN: {args.run} holds no run (no config.yaml)")
    try:
        records = run.read_responses()
    except RunDirError as err:
        return usage_error("explain", str(err))
    logged = [r["step"] for r in records]
    if not logged:
        return usage_error("explain", f"RUN: {args.run} logged no responses (responses.jsonl)")
    step = args.step if args.step is not None else logged[-1]
    if step not in logged:
        steps = ", ".join(map(str, logged))
        return usage_error("explain", f"--step: {step} was not logged; logged steps: {steps}")
    record = records[logged.index(step)]
    method = run.config().get("method", "run")
    panels = run_panels(record, method, args.responses)
    if not panels:
        return usage_error("explain", f"--step: step {step} logged no failed response to draw")
    title = f"{Path(args.run).name}: step {step}, {method}'s token advantages"
    out = Path(args.out or run.path / "explain")
    if (problem := _check_out(out)) is not None:
        return usage_error("explain", problem)
    _write(out, panels, [method], title)
    return 0


def _explain_methods(args: argparse.Namespace) -> int:
    from creditbench.harness.config import ConfigError, load_config
    from creditbench.leaderboard.explain import side_by_side
    from creditbench.tools.explain import explain_methods

    methods = [m.strip() for m in args.methods.split(",")]
    if not any(methods):
        return usage_error("explain", "--methods: name at least one method")
    if not all(methods):  # "grpo,,rloo": a name left out, not a list of two
        return usage_error("explain", f"--methods: {args.methods!r} has an empty name")
    if args.responses < 1:
        return usage_error("explain", f"--responses: must be >= 1 (got {args.responses})")
    out = Path(args.out or "explain")
    if (problem := _check_out(out)) is not None:  # before the batch is sampled and scored
        return usage_error("explain", problem)
    try:
        config = load_config(None, [f"method={methods[0]}", *args.overrides], resolve=False)
        samples = explain_methods(config, methods)
    except ConfigError as err:
        return usage_error("explain", str(err))
    responses = side_by_side(samples, args.responses)
    if not responses:
        return usage_error(
            "explain", f"{methods[0]}'s batch has no failed response with a wrong step"
        )
    title = f"Token credit on {config.task}, seed {config.seed}: {', '.join(methods)}"
    _write(out, responses, methods, title)
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    set_threads(args.threads)
    quiet_transformers()
    if (args.run is None) == (args.methods is None):
        return usage_error("explain", "give a RUN directory or --methods, not both")
    if args.run is not None and args.overrides:
        return usage_error("explain", "--set: only with --methods (a run has its own config)")
    return _explain_run(args) if args.run is not None else _explain_methods(args)


def add_explain_command(subparsers) -> None:
    p = subparsers.add_parser(
        "explain", help="draw token-level credit as coloured text (a run's step, or methods)"
    )
    p.add_argument("run", nargs="?", help="a run directory that logged responses.jsonl")
    p.add_argument("--step", type=int, help="the logged step to draw (default: the last)")
    p.add_argument("--methods", help="comma-separated methods, side by side on one fresh batch")
    p.add_argument(
        "--responses",
        type=response_count,
        default=3,
        help="failed responses to draw (default 3, at most 10,000)",
    )
    add_set_option(p)
    p.add_argument("--out", help="where to write credit.html and credit.png")
    p.add_argument("--threads", type=thread_count, help="torch CPU threads, at most the CPUs")
    p.set_defaults(func=_cmd_explain)
