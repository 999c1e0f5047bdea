"""``creditbench eval``: a checkpoint or any model directory on a task's eval split.

creditbench eval --checkpoint runs/grpo-chain-s0/checkpoints/step-000120
creditbench eval --model PATH --n 100 --k 2 --decode-with scapo
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from creditbench.tools.cli.common import (
    eval_problem_count,
    eval_sample_count,
    positive_int,
    quiet_transformers,
    seed_value,
    set_threads,
    thread_count,
    usage_error,
)


def _cmd_eval(args: argparse.Namespace) -> int:
    from creditbench.harness.config import ConfigError, EvalConfig, RunConfig, from_dict
    from creditbench.harness.models.modeling import load_policy
    from creditbench.harness.records.rundir import RunDir
    from creditbench.harness.training.evaluation import evaluate

    set_threads(args.threads)
    quiet_transformers()
    source = Path(args.checkpoint or args.model)
    flag = "--checkpoint" if args.checkpoint else "--model"
    if not (source / "config.json").is_file():
        return usage_error("eval", f"{flag}: {source} is not a model directory (no config.json)")
    run_config = RunConfig()
    if args.checkpoint:
        run = RunDir(source.parent.parent)
        if run.exists():
            try:
                run_config = from_dict(RunConfig, run.config())
            except ConfigError as err:
                return usage_error("eval", str(err))
    task_name = args.task or run_config.task
    task_options = run_config.task_options if task_name == run_config.task else {}
    from creditbench.harness.tasks import get_task
    from creditbench.tools.cli.bootstrap import parse_task_options

    try:
        task_options = {**task_options, **parse_task_options(args.task_option)}
        task = get_task(task_name, **task_options)
        ev = from_dict(EvalConfig, {**_eval_fields(run_config.eval), **_eval_args(args)}, "eval")
        rule = _decoding_rule(args, task)
    except (ConfigError, KeyError, TypeError, ValueError) as err:
        message = err.args[0] if err.args else str(err)
        return usage_error("eval", str(message))
    from creditbench.harness.training.setup import check_context

    max_new_tokens = args.max_new_tokens or run_config.rollout.max_new_tokens
    try:
        flag_or_field = "--max-new-tokens" if args.max_new_tokens else "rollout"
        check_context(max_new_tokens, source, flag_or_field)
    except ConfigError as err:
        return usage_error("eval", str(err))
    try:
        model, tokenizer = load_policy(source)
    except ConfigError as err:
        return usage_error("eval", f"{flag}: {err}")
    result = evaluate(
        model,
        tokenizer,
        task,
        n_problems=ev.n_problems,
        k_samples=ev.k_samples,
        greedy=ev.greedy,
        temperature=ev.temperature,
        batch_size=ev.batch_size,
        max_new_tokens=max_new_tokens,
        seed=args.seed,
        drift_threshold=args.drift_threshold,
        decoding_rule=rule,
        problems=ev.problems,
    )
    settings = {"n": ev.n_problems, "k": ev.k_samples, "greedy": ev.greedy}
    print(json.dumps({"model": str(source), "task": task_name, **settings, **result}, indent=2))
    return 0


def _decoding_rule(args: argparse.Namespace, task):
    from creditbench.harness.tasks.base import VARIANTS, require

    """The method named by ``--decode-with`` (its decoding rule), or None for plain decoding."""
    name = getattr(args, "decode_with", None)
    if name is None:
        return None
    from creditbench.methods.registry import get_method, list_methods

    ruled = sorted(n for n, cls in list_methods().items() if cls.decoding_variants)
    if name not in ruled:
        raise ValueError(f"--decode-with: {name!r} has no decoding rule (have: {', '.join(ruled)})")
    if not 0.0 <= args.drift_threshold < 1.0:
        raise ValueError(f"--drift-threshold: must be in [0, 1) (got {args.drift_threshold})")
    require(task, VARIANTS, f"--decode-with {name}")
    return get_method(name)()


def _eval_fields(ev) -> dict:
    from creditbench.harness.config import to_dict

    return to_dict(ev)


def _eval_args(args: argparse.Namespace) -> dict:
    out = {}
    if args.n is not None:
        out["n_problems"] = args.n
    if args.k is not None:
        out["k_samples"] = args.k
    if args.temperature is not None:
        out["temperature"] = args.temperature
    return out


def add_eval_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a checkpoint or model directory on a task")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="a checkpoint folder inside a run directory")
    source.add_argument("--model", help="any Hugging Face causal LM directory")
    p.add_argument("--task", help="default: the run's task (with --checkpoint), else chain")
    p.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--n", type=eval_problem_count, help="eval problems (at most 100,000)")
    p.add_argument(
        "--k",
        type=eval_sample_count,
        help="samples per problem for the sampled accuracy (at most 1,024)",
    )
    p.add_argument("--temperature", type=float)
    p.add_argument(
        "--max-new-tokens",
        type=positive_int,
        help="below the model's context, which holds the prompt",
    )
    p.add_argument("--seed", type=seed_value, default=0, help="in [0, 2**32) (default 0)")
    p.add_argument("--threads", type=thread_count, help="torch CPU threads, at most the CPUs")
    p.add_argument(
        "--decode-with",
        metavar="METHOD",
        help="decode with a method's training-free rule: scapo masks tokens whose probability "
        "drifts under prompt rewrites",
    )
    p.add_argument(
        "--drift-threshold",
        type=float,
        default=0.8,
        help="the p0 mass the drift filter may mask at each step (default 0.8)",
    )
    p.set_defaults(func=_cmd_eval)
