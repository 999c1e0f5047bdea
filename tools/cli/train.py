"""``creditbench train``: one method, one task, one seed, one budget, into ``runs/<name>/``.

creditbench train --method grpo --task chain --seed 0          # one run into runs/<name>/
creditbench train --method dapo --set rollout.group_size=4     # any config field
creditbench train --resume runs/grpo-chain-s0                  # continue a killed run

User errors (config, unknown method or task, bad arguments) print one line naming the field to
stderr and exit with code 2; nothing is written before the config validates.
"""

from __future__ import annotations

import argparse
import errno
import json
import sys
from pathlib import Path

from creditbench.tools.cli.common import (
    add_set_option,
    quiet_transformers,
    seed_value,
    set_threads,
    thread_count,
    usage_error,
)


def _config_names_a_method(path: str | None) -> bool:
    """Whether the YAML config at ``path`` has a ``method`` (a run's config.yaml does); an
    unreadable file is left to the config loader, which names what is wrong."""
    from creditbench.harness.config import ConfigError, load_yaml_file

    if path is None:
        return False
    try:
        data = load_yaml_file(Path(path), "--config")
    except ConfigError:
        return True  # let load_config report it
    return isinstance(data, dict) and bool(data.get("method"))


def _cmd_train(args: argparse.Namespace) -> int:
    from creditbench.harness.config import ConfigError, load_config
    from creditbench.harness.training.trainer import NonFiniteError, Trainer

    set_threads(args.threads)
    quiet_transformers()
    try:
        if args.resume:
            if args.method or args.task or args.config or args.overrides:
                return usage_error(
                    "train", "--resume: takes the run's own config; drop the other options"
                )
            trainer = Trainer.resume(args.resume)
        else:
            if not args.method and not _config_names_a_method(args.config):
                return usage_error(
                    "train",
                    "--method: required, unless --config names one (see `creditbench methods`)",
                )
            overrides = [f"method={args.method}"] if args.method else []
            for flag, value in (("--task", args.task), ("--output", args.output)):
                if value is not None and not value.strip():  # "" is an error, not "not given"
                    return usage_error("train", f"{flag}: must not be empty")
            if args.name is not None and not args.name.strip():
                return usage_error("train", "--name: must not be empty")
            if args.task is not None:
                overrides.append(f"task={args.task}")
            if args.seed is not None:
                overrides.append(f"seed={args.seed}")
            for flag, value in (("--output", args.output), ("--name", args.name)):
                if value is not None and not _utf8(value):
                    return usage_error("train", f"{flag}: {value!r} is not UTF-8 text")
            # as YAML strings that keep every character (JSON escapes would split an emoji
            # into two halves YAML cannot join)
            if args.output is not None:
                overrides.append(f"output_dir={json.dumps(args.output, ensure_ascii=False)}")
            if args.name is not None:
                overrides.append(f"run_name={json.dumps(args.name, ensure_ascii=False)}")
            # The trainer resolves the method's options (once); loading only parses and checks.
            config = load_config(args.config, [*overrides, *args.overrides], resolve=False)
            trainer = Trainer(config)
    except ConfigError as err:
        return usage_error("train", str(err))
    if trainer.run_dir.is_finished():
        print(f"{trainer.run_dir.path}: already finished")
        _print_summary(trainer.run_dir.read_summary() or {})
        return 0
    bar = _progress_bar(trainer, disable=args.quiet)
    try:
        summary = trainer.train(on_record=bar)
    except ConfigError as err:
        return usage_error("train", str(err))
    except NonFiniteError as err:
        print(f"creditbench train: stopped: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # a full disk, a folder gone read-only, a file gone: say which
        print(f"creditbench train: stopped: {_os_failure(err, trainer)}", file=sys.stderr)
        # a run refused before its first record (a cache path that is a file) left nothing
        # behind: a usage error; a run stopped part-way keeps its checkpoint
        return 1 if trainer.run_dir.path.exists() else 2
    finally:
        bar.close()
    print(f"{trainer.run_dir.path}")
    _print_summary(summary)
    return 0


# The errors of a write that found no room or no permission to write; any other OSError is a
# path that could not be used (a model or cache file gone, a folder where a file belongs).
_WRITE_ERRNOS = frozenset((errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EFBIG))


def _os_failure(err: OSError, trainer) -> str:
    """One line: what failed, on which path, and what is kept (the last complete checkpoint,
    or none yet), with the command that resumes."""
    from creditbench.harness.records.rundir import CheckpointWriteError

    where = f"{err.filename}: " if err.filename else ""
    written = err.errno in _WRITE_ERRNOS or isinstance(err, CheckpointWriteError)
    what = "cannot write" if written else "cannot use"
    if not trainer.run_dir.path.exists():  # removed again: nothing to resume
        return f"{what} {where}{err.strerror or err}; nothing was kept (no run was started)"
    latest = trainer.run_dir.latest_checkpoint()
    kept = (
        f"the last complete checkpoint ({latest.name}) is kept"
        if latest is not None
        else "no checkpoint was complete yet"
    )
    resume = f"creditbench train --resume {trainer.run_dir.path}"
    return f"{what} {where}{err.strerror or err}; {kept}: {resume}"


def _utf8(text: str) -> bool:
    """Whether ``text`` (an argument) is UTF-8 text; bytes that are not arrive as lone
    surrogates, which no file name written by the run could hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _progress_bar:  # noqa: N801 - used like a function
    """A tqdm bar over the budget, fed with every metrics record; drawn from the first record
    on, so a run refused before it trains prints its one error line and no bar."""

    def __init__(self, trainer, disable: bool) -> None:
        self.name, self.disable = trainer.run_dir.path.name, disable
        self._bar = None

    @property
    def bar(self):
        if self._bar is None:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=100, desc=self.name, unit="%", disable=self.disable)
        return self._bar

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
        if self._bar is not None:
            self._bar.close()


def _print_summary(summary: dict) -> None:
    first, last = summary.get("initial_eval", {}), summary.get("final_eval", {})
    for key in ("sampled_accuracy", "greedy_accuracy"):
        if key in last:
            print(f"  {key}: {first.get(key, float('nan')):.3f} -> {last[key]:.3f}")
    if "auc" in summary:
        print("  auc: " + ", ".join(f"{k} {v:.3f}" for k, v in summary["auc"].items()))
    print(f"  steps: {summary.get('steps')}, status: {summary.get('status')}")


def add_train_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train one method on one task under a compute budget")
    p.add_argument("--method", help="a registered method (see `creditbench methods`)")
    p.add_argument("--task", help="a task name (default: chain)")
    p.add_argument("--config", help="a YAML run config")
    p.add_argument("--seed", type=seed_value, help="an integer in [0, 2**32) (default 0)")
    p.add_argument("--output", help="the parent folder of run directories (default: runs)")
    p.add_argument("--name", help="the run directory's name (default: METHOD-TASK-sSEED)")
    add_set_option(p)
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR")
    p.add_argument("--threads", type=thread_count, help="torch CPU threads, at most the CPUs")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_train)
