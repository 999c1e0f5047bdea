"""``creditbench data list`` and ``creditbench data show TASK``: what the tasks hold."""

from __future__ import annotations

import argparse
import random

from creditbench.harness.tasks.base import STEP_CHECK, TEACHER, capabilities_of
from creditbench.tools.cli.common import (
    eval_problem_count,
    seed_value,
    usage_error,
)


def _option(text: str) -> tuple[str, object]:
    from creditbench.harness.config import ConfigError, parse_key_value

    try:
        return parse_key_value(text, "--option")
    except ConfigError as err:  # argparse prints it with the usage line and exits 2
        raise argparse.ArgumentTypeError(str(err).removeprefix("--option: ")) from None


def add_data_commands(subparsers) -> None:
    """Register ``data list`` and ``data show`` on the main parser's subparsers."""
    data = subparsers.add_parser("data", help="list the tasks and show their problems")
    sub = data.add_subparsers(dest="data_command", required=True)
    p = sub.add_parser("list", help="every task with a one-line description")
    p.set_defaults(func=_cmd_list)
    p = sub.add_parser("show", help="print a few problems of a task")
    p.add_argument("task", help="a task name (see 'creditbench data list')")
    p.add_argument(
        "--n",
        type=eval_problem_count,
        default=3,
        help="how many problems (default 3, at most 100,000)",
    )
    p.add_argument("--split", default="eval", help="train or eval (real data: test = eval)")
    p.add_argument("--seed", type=seed_value, default=0, help="picks the problems and the samples")
    p.add_argument(
        "--option",
        "-o",
        type=_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a task option, e.g. -o steps=12 (repeatable)",
    )
    p.set_defaults(func=_cmd_show)


def _cmd_list(args: argparse.Namespace) -> int:
    from creditbench.harness.tasks import list_tasks

    tasks = list_tasks()
    width = max(map(len, tasks))
    for name, description in tasks.items():
        print(f"{name:<{width}}  {description}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from creditbench.harness.tasks import UnknownTaskError, get_task
    from creditbench.harness.tasks.math_data import MissingPackageError

    try:
        task = get_task(args.task, **dict(args.option))
        problems = task.problems(args.split)
    except (UnknownTaskError, ValueError, TypeError, MissingPackageError) as error:
        return usage_error("data show", str(error.args[0] if error.args else error))
    if not problems:
        return usage_error("data show", f"--split: {args.split!r} of {args.task} is empty")
    rng = random.Random(args.seed)
    picks = sorted(rng.sample(range(len(problems)), min(args.n, len(problems))))
    for index in picks:
        problem = problems[index]
        print(f"=== {problem.id}")
        print(problem.prompt.rstrip("\n"))
        print(f"--- reference answer: {problem.answer}")
        if {STEP_CHECK, TEACHER} <= capabilities_of(task):
            _show_steps(task, problem, rng)
        else:
            print(f"--- source: {problem.metadata.get('source', '?')}")
        print()
    return 0


def _show_steps(task, problem, rng: random.Random) -> None:
    """The reference solution, then a sampled (or perturbed) one with every step's verdict."""
    print("--- reference solution:")
    for line in task.reference_solution(problem).split("\n"):
        print(f"    {line}")
    text = task.sample_solution(problem, rng)
    label = "sampled with the SFT slip rates"
    if not task.check_steps(problem, text).wrong:
        steps = len(task.step_spans(text)) - 1  # the lines before the answer line
        kind = rng.choice([k for k in task.error_kinds if steps > 1 or k != "missing step"])
        step = rng.randrange(steps - (kind == "missing step"))
        text = task.corrupt_solution(problem, kind, step, rng)
        label = f"perturbed: {kind} at step {step + 1}"
    grade = task.grade(problem, text)
    print(f"--- a solution ({label}); grade {grade.reward:g} ({grade.reason}):")
    check = task.check_steps(problem, text)
    verdicts = {v.step: v.kind for v in check.wrong}
    first = min(verdicts, default=None)
    spans = check.steps
    for i, (s, e) in enumerate(spans):
        mark = " <- first wrong step" if i == first else ""
        print(f"    step {i + 1:>2} {verdicts.get(i, 'ok'):<14} {text[s:e]}{mark}")
    if len(spans) in verdicts:
        print(f"    step {len(spans) + 1:>2} {verdicts[len(spans)]:<14} (end of text)")
