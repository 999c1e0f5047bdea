"""``creditbench train``, ``eval``, ``bench`` and ``perf``.

creditbench train --method grpo --task chain --seed 0          # one run into runs/<name>/
creditbench train --method dapo --set rollout.group_size=4     # any config field
creditbench train --resume runs/grpo-chain-s0                  # continue a killed run
creditbench eval --checkpoint runs/grpo-chain-s0/checkpoints/step-000120
creditbench bench --suite quick --workers 2                    # methods x seeds x tasks
creditbench perf                                               # where a step's time goes

User errors (config, unknown method or task, bad arguments) print one line naming the field to
stderr and exit with code 2; nothing is written before the config validates.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EXIT_USAGE = 2


def _fail(command: str, message: str) -> int:
    print(f"creditbench {command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _quiet_transformers() -> None:
    """No per-file progress bars from transformers while saving checkpoints."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


# --------------------------------------------------------------------------------------------
# train


def _cmd_train(args: argparse.Namespace) -> int:
    from creditbench.harness.config import ConfigError, load_config
    from creditbench.harness.training.trainer import NonFiniteError, Trainer

    set_threads(args.threads)
    _quiet_transformers()
    try:
        if args.resume:
            if args.method or args.task or args.config or args.overrides:
                return _fail(
                    "train", "--resume: takes the run's own config; drop the other options"
                )
            trainer = Trainer.resume(args.resume)
        else:
            if not args.method:
                return _fail("train", "--method: required (see `creditbench methods`)")
            overrides = [f"method={args.method}"]
            if args.task:
                overrides.append(f"task={args.task}")
            if args.seed is not None:
                overrides.append(f"seed={args.seed}")
            if args.output:
                overrides.append(f"output_dir={args.output}")
            if args.name:
                overrides.append(f"run_name={args.name}")
            # The trainer resolves the method's options (once); loading only parses and checks.
            config = load_config(args.config, [*overrides, *args.overrides], resolve=False)
            trainer = Trainer(config)
    except ConfigError as err:
        return _fail("train", str(err))
    if trainer.run_dir.is_finished():
        print(f"{trainer.run_dir.path}: already finished")
        _print_summary(trainer.run_dir.read_summary() or {})
        return 0
    bar = _progress_bar(trainer, disable=args.quiet)
    try:
        summary = trainer.train(on_record=bar)
    except ConfigError as err:
        return _fail("train", str(err))
    except NonFiniteError as err:
        print(f"creditbench train: stopped: {err}", file=sys.stderr)
        return 1
    finally:
        bar.close()
    print(f"{trainer.run_dir.path}")
    _print_summary(summary)
    return 0


class _progress_bar:  # noqa: N801 - used like a function
    """A tqdm bar over the budget, fed with every metrics record."""

    def __init__(self, trainer, disable: bool) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=100, desc=trainer.run_dir.path.name, unit="%", disable=disable)

    def __call__(self, record: dict) -> None:
        fraction = record.get("budget_fraction")
        if fraction is not None:
            self.bar.update(max(0.0, round(min(fraction, 1.0) * 100 - self.bar.n, 2)))
        if "eval" in record:
            ev = record["eval"]
            self.bar.set_postfix(
                acc=ev.get("sampled_accuracy", ev.get("greedy_accuracy")), refresh=False
            )
        elif "reward_mean" in record:
            self.bar.set_postfix(reward=round(record["reward_mean"], 3), refresh=False)

    def close(self) -> None:
        self.bar.close()


def _print_summary(summary: dict) -> None:
    first, last = summary.get("initial_eval", {}), summary.get("final_eval", {})
    for key in ("sampled_accuracy", "greedy_accuracy"):
        if key in last:
            print(f"  {key}: {first.get(key, float('nan')):.3f} -> {last[key]:.3f}")
    if "auc" in summary:
        print("  auc: " + ", ".join(f"{k} {v:.3f}" for k, v in summary["auc"].items()))
    print(f"  steps: {summary.get('steps')}, status: {summary.get('status')}")


# --------------------------------------------------------------------------------------------
# eval


def _cmd_eval(args: argparse.Namespace) -> int:
    from creditbench.harness.config import ConfigError, EvalConfig, RunConfig, from_dict
    from creditbench.harness.models.modeling import load_policy
    from creditbench.harness.records.rundir import RunDir
    from creditbench.harness.training.evaluation import evaluate

    set_threads(args.threads)
    _quiet_transformers()
    source = Path(args.checkpoint or args.model)
    flag = "--checkpoint" if args.checkpoint else "--model"
    if not (source / "config.json").is_file():
        return _fail("eval", f"{flag}: {source} is not a model directory (no config.json)")
    run_config = RunConfig()
    if args.checkpoint:
        run = RunDir(source.parent.parent)
        if run.exists():
            try:
                run_config = from_dict(RunConfig, run.config())
            except ConfigError as err:
                return _fail("eval", str(err))
    task_name = args.task or run_config.task
    task_options = run_config.task_options if task_name == run_config.task else {}
    from creditbench.harness.cli.bootstrap import parse_task_options
    from creditbench.harness.tasks import get_task

    try:
        task_options = {**task_options, **parse_task_options(args.task_option)}
        task = get_task(task_name, **task_options)
        ev = from_dict(EvalConfig, {**_eval_fields(run_config.eval), **_eval_args(args)}, "eval")
        rule = _decoding_rule(args, task)
    except (ConfigError, KeyError, TypeError, ValueError) as err:
        message = err.args[0] if err.args else str(err)
        return _fail("eval", str(message))
    model, tokenizer = load_policy(source)
    result = evaluate(
        model,
        tokenizer,
        task,
        n_problems=ev.n_problems,
        k_samples=ev.k_samples,
        greedy=ev.greedy,
        temperature=ev.temperature,
        batch_size=ev.batch_size,
        max_new_tokens=args.max_new_tokens or run_config.rollout.max_new_tokens,
        seed=args.seed,
        drift_threshold=args.drift_threshold,
        decoding_rule=rule,
    )
    print(json.dumps({"model": str(source), "task": task_name, **result}, indent=2))
    return 0


def _decoding_rule(args: argparse.Namespace, task):
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
    if not hasattr(task, "variant"):
        raise ValueError(f"--decode-with: task {task.name!r} has no prompt variants")
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


# --------------------------------------------------------------------------------------------
# bench and perf (their own modules)


def _cmd_bench(args: argparse.Namespace) -> int:
    from creditbench.harness.bench import SuiteError, run_suite

    _quiet_transformers()
    try:
        return run_suite(
            args.suite,
            workers=args.workers,
            results=args.results,
            dry_run=args.dry_run,
            overrides=args.overrides,
            only=args.only,
            threads=args.threads,
        )
    except SuiteError as err:
        return _fail("bench", str(err))


def _cmd_perf(args: argparse.Namespace) -> int:
    from creditbench.harness.config import ConfigError
    from creditbench.harness.training.perf import run_perf

    set_threads(args.threads)
    _quiet_transformers()
    try:
        return run_perf(args.config, args.overrides, repeats=args.repeats, methods=args.methods)
    except ConfigError as err:
        return _fail("perf", str(err))


# --------------------------------------------------------------------------------------------
# the parsers


def add_train_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``train``, ``eval``, ``bench`` and ``perf`` to the ``creditbench`` parser."""
    p = sub.add_parser("train", help="train one method on one task under a compute budget")
    p.add_argument("--method", help="a registered method (see `creditbench methods`)")
    p.add_argument("--task", help="a task name (default: chain)")
    p.add_argument("--config", help="a YAML run config")
    p.add_argument("--seed", type=int)
    p.add_argument("--output", help="the parent folder of run directories (default: runs)")
    p.add_argument("--name", help="the run directory's name (default: METHOD-TASK-sSEED)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. rollout.group_size=4 (repeatable)",
    )
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("eval", help="evaluate a checkpoint or model directory on a task")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="a checkpoint folder inside a run directory")
    source.add_argument("--model", help="any Hugging Face causal LM directory")
    p.add_argument("--task", help="default: the run's task (with --checkpoint), else chain")
    p.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--n", type=int, help="eval problems")
    p.add_argument("--k", type=int, help="samples per problem for the sampled accuracy")
    p.add_argument("--temperature", type=float)
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int)
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

    p = sub.add_parser("bench", help="run a benchmark suite (methods x seeds x tasks)")
    p.add_argument("--suite", required=True, help="quick, standard, or a suite YAML file")
    p.add_argument("--workers", type=int, help="parallel runs (default: sized to the machine)")
    p.add_argument("--results", help="results folder (default: runs/bench-SUITE)")
    p.add_argument("--dry-run", action="store_true", help="list the runs and exit")
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="GLOB",
        help="run only the runs whose names match (repeatable), e.g. 'chain-steps=8-*-s0'",
    )
    p.add_argument("--threads", type=int, help="torch threads per run (default: cores / workers)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field of every run (repeatable)",
    )
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("perf", help="time a training step by phase against a plain loop")
    p.add_argument("--config", help="a YAML run config (default: the defaults)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--methods", nargs="*", help="methods to time (default: all)")
    p.add_argument("--threads", type=int)
    p.set_defaults(func=_cmd_perf)
