"""``creditbench bootstrap``: build (or reuse) the cached base policy, and benchmark it.

creditbench bootstrap                          # print the default base policy's directory
creditbench bootstrap --task-option n_steps=8  # another task setting
creditbench bootstrap --bench                  # sampled/greedy accuracy on the eval split
creditbench bootstrap --teacher                # OPPO's stronger frozen teacher
creditbench bootstrap --force --out DIR        # rebuild; copy the result to DIR
creditbench bootstrap --force --no-shipped --ship   # rebuild the checkpoint the package carries
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from creditbench.tools.cli.common import (
    eval_problem_count,
    positive_int,
    seed_value,
    sft_step_count,
    thread_count,
    usage_error,
)


def parse_task_options(items: list[str]) -> dict[str, Any]:
    """``["n_steps=8", "name=x"]`` -> ``{"n_steps": 8, "name": "x"}`` (values read as JSON)."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--task-option: expected key=value, got {item!r}")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options


def _cmd_bootstrap(args: argparse.Namespace) -> int:
    import torch

    from creditbench.harness.models.bootstrap import (
        BootstrapConfig,
        ensure_base_policy,
        ensure_teacher_policy,
        evaluate_policy,
        make_task,
        teacher_config,
    )
    from creditbench.harness.models.modeling import MAX_POSITIONS, load_policy

    fields = {"preset": args.preset, "steps": args.steps, "batch_size": args.batch_size}
    fields.update(lr=args.lr, seed=args.seed)
    if args.max_new_tokens >= MAX_POSITIONS:  # before minutes of pre-training, not after
        return usage_error(
            "bootstrap",
            f"--max-new-tokens: must be below the policy's context of {MAX_POSITIONS:,} tokens, "
            f"which also holds the prompt (got {args.max_new_tokens:,})",
        )
    if args.n_eval < 1:
        return usage_error("bootstrap", f"--n-eval: must be >= 1 (got {args.n_eval})")
    if args.threads is not None:
        if args.threads < 1:
            return usage_error("bootstrap", f"--threads: must be >= 1 (got {args.threads})")
        import torch

        # On busy cores one thread can be many times faster than two that wait for each other.
        torch.set_num_threads(args.threads)
    from creditbench.harness.records.rundir import RunDirError, check_creatable

    try:  # before minutes of pre-training: the folders must be ones that can be made
        if args.cache_dir is not None:
            check_creatable(args.cache_dir, "--cache-dir")
        if args.out is not None and not Path(args.out).exists():
            check_creatable(Path(args.out).parent, "--out")
    except RunDirError as err:
        return usage_error("bootstrap", str(err))
    if args.out is not None and Path(args.out).exists():
        return usage_error(
            "bootstrap", f"--out: {args.out} exists; remove it or choose another directory"
        )
    try:
        task_options = parse_task_options(args.task_option)
    except ValueError as err:
        return usage_error("bootstrap", str(err))
    try:
        config = BootstrapConfig(**{k: v for k, v in fields.items() if v is not None})
    except ValueError as err:  # "batch_size: must be ..." -> "--batch-size: must be ..."
        field, _, rule = str(err).partition(": ")
        return usage_error("bootstrap", f"--{field.replace('_', '-')}: {rule}")
    try:
        task = make_task(args.task, task_options)
    except KeyError as err:  # an unknown task name; the message lists the known ones
        return usage_error("bootstrap", f"--task: {err}")
    except (ValueError, TypeError, ImportError) as err:
        return usage_error("bootstrap", f"--task-option {err}")
    ensure = ensure_teacher_policy if args.teacher else ensure_base_policy
    if args.teacher:
        trained = teacher_config(config, bool(task.clean_trace_options))
    else:
        trained = config
    started = time.perf_counter()
    path = ensure(
        args.task,
        task_options,
        config,
        args.cache_dir,
        force=args.force,
        progress=not args.quiet,
        use_shipped=not args.no_shipped,
    )
    build_seconds = time.perf_counter() - started
    if args.ship:
        from creditbench.harness.models.policy_cache import ASSETS_DIR

        shipped = ASSETS_DIR / ("teacher" if args.teacher else "base") / path.name
        if shipped != path:
            shutil.rmtree(shipped, ignore_errors=True)
            shutil.copytree(path, shipped, ignore=shutil.ignore_patterns(".*"))
        print(f"shipped: {shipped}", file=sys.stderr)
    if args.out is not None:
        shutil.copytree(path, args.out)
        path = Path(args.out)
    print(path)
    if not args.bench:
        return 0
    model, tokenizer = load_policy(path)
    result = evaluate_policy(
        task,
        model,
        tokenizer,
        n_problems=args.n_eval,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed or 0,
    )
    print(f"task          {args.task} {json.dumps(task_options, sort_keys=True)}")
    print(f"model         {trained.preset}, {trained.steps} SFT steps x {trained.batch_size}")
    print(
        f"build         {build_seconds:.1f} s on {torch.get_num_threads()} thread(s) "
        "(a cache hit or a shipped checkpoint when near 0)"
    )
    print(f"eval          {result['n_problems']} problems in {result['eval_seconds']:.1f} s")
    target = "" if args.teacher else "; base policy target 0.25-0.60"
    print(f"sampled acc   {result['sampled_accuracy']:.3f}   (temperature 1.0{target})")
    print(f"greedy acc    {result['greedy_accuracy']:.3f}")
    print(
        f"failures      {result['failures']}, first wrong step located in "
        f"{result['located_fraction']:.1%}: {result['failure_kinds']}"
    )
    return 0


def add_bootstrap_commands(subparsers: Any) -> None:
    """Register ``creditbench bootstrap`` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "bootstrap",
        help="build or reuse the cached SFT base policy; --bench prints its accuracy",
        description="Build (or reuse from the cache) the SFT base policy of a task and print "
        "its directory. The cache is $CREDITBENCH_CACHE or ~/.cache/creditbench.",
    )
    p.add_argument("--task", default="chain", help="task name (default: chain)")
    p.add_argument(
        "--task-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a task option (repeatable); the value is read as JSON, else as text",
    )
    p.add_argument("--preset", help="model preset: nano, tiny (default), small or base")
    p.add_argument("--steps", type=sft_step_count, help="SFT optimizer steps (at most 1,000,000)")
    p.add_argument("--batch-size", type=positive_int, help="SFT examples per step")
    p.add_argument("--lr", type=float, help="peak learning rate")
    p.add_argument("--seed", type=seed_value, help="bootstrap seed, in [0, 2**32)")
    p.add_argument("--teacher", action="store_true", help="the stronger teacher checkpoint")
    p.add_argument("--force", action="store_true", help="retrain even when cached or shipped")
    p.add_argument("--no-shipped", action="store_true", help="ignore checkpoints in the package")
    p.add_argument("--cache-dir", help="cache directory (default $CREDITBENCH_CACHE)")
    p.add_argument("--out", help="also copy the checkpoint to this new directory")
    p.add_argument("--ship", action="store_true", help="copy it into the package's assets")
    p.add_argument("--bench", action="store_true", help="print accuracies on the eval split")
    p.add_argument(
        "--n-eval",
        type=eval_problem_count,
        default=200,
        help="eval problems for --bench (at most 100,000)",
    )
    p.add_argument(
        "--max-new-tokens",
        type=positive_int,
        default=256,
        help="generation length cap for --bench, below the policy's context (2048)",
    )
    p.add_argument(
        "--threads", type=thread_count, help="torch CPU threads (default: torch's choice)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_bootstrap)
