"""``creditbench verify``: re-run one published run at its recorded commit and compare records.

creditbench verify docs/results/standard/chain-easy-steps=8-grpo-s3   # a run folder
creditbench verify RUN --scratch /tmp/check --keep                      # keep the re-run

The run's ``environment.json`` names the commit it ran from; that commit is checked out clean in
the cache (``tools/campaign/worktrees.py``) and its own ``creditbench train`` runs the run's
``config.yaml`` into a scratch folder, with the recorded thread count and kernel pins. The two
runs' records are then compared (``tools/verify.py``) and the differences printed, one line per
key. Exit code 0 when the records are identical, 1 when they differ (as ``diff``), 2 on bad
input (no such run, a run without a commit or from a dirty checkout, a scratch folder in use)
or when the re-run itself fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from creditbench.tools.cli.common import usage_error

if TYPE_CHECKING:
    from creditbench.tools.verify import RunRecords

SCRATCH_PREFIX = "creditbench-verify-"
PUBLISHED_CONFIG = "published-config.yaml"  # the run's config, as the re-run reads it
RERUNS = "runs"  # the folder of the scratch folder the re-run writes into


def _cmd_verify(args: argparse.Namespace) -> int:
    from creditbench.harness.records.files import RunFormatError
    from creditbench.harness.records.rundir import (
        RunDirError,
        check_creatable,
        check_not_inside_a_run,
    )
    from creditbench.tools.campaign.worktrees import CheckoutError, checkout
    from creditbench.tools.verify import cannot_rerun, find_run, read_records

    run = find_run(Path(args.run))
    if run is None:
        return usage_error("verify", f"RUN: {args.run}: no such run folder or archive")
    try:
        published = read_records(run)
    except RunFormatError as err:
        return usage_error("verify", f"RUN: {err}")
    refusal = cannot_rerun(published)
    if refusal is not None:
        return usage_error("verify", f"RUN: {run}/{refusal}")
    if args.scratch is not None:
        scratch = Path(args.scratch)
        try:
            check_creatable(scratch, "--scratch")
            check_not_inside_a_run(scratch, "--scratch")
        except RunDirError as err:
            return usage_error("verify", str(err))
        if scratch.exists() and (not scratch.is_dir() or any(scratch.iterdir())):
            return usage_error("verify", f"--scratch: {scratch} is not empty; choose a new folder")
    commit = published.environment["git_commit"]
    try:
        source = checkout(commit)
    except CheckoutError as err:
        return usage_error("verify", f"{run}/environment.json: git_commit: {err}")
    made = args.scratch is None or not Path(args.scratch).exists()
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
    try:
        return _rerun_and_compare(run, published, source, scratch, quiet=args.quiet)
    finally:
        if args.keep:
            print(f"the re-run is kept in {scratch / RERUNS}")
        else:
            _remove(scratch, whole=made)


def _rerun_and_compare(
    run: Path, published: RunRecords, source: Path, scratch: Path, *, quiet: bool
) -> int:
    """Re-run ``published`` from the checkout ``source`` in ``scratch``, print the report."""
    from creditbench.harness.records.files import RunFormatError, atomic_write_text
    from creditbench.tools.campaign.worktrees import pinned_cli
    from creditbench.tools.verify import (
        compare_runs,
        format_comparison,
        read_records,
        rerun_environment,
    )

    environment, config = published.environment, published.config
    threads = environment.get("torch_threads")
    wall = (published.summary.get("time") or {}).get("wall_seconds")
    took = f"{wall:.0f} s" if isinstance(wall, int | float) else "an unrecorded time"
    count = f"{threads} torch thread{'' if threads == 1 else 's'}" if threads else "torch's threads"
    print(
        f"re-running {config['run_name']} at {environment['git_commit'][:7]} in {scratch}: "
        f"the published run took {took} (training and evaluation; loading takes some seconds "
        f"more) on {environment.get('cpu_model') or 'its CPU'} with {count}",
        flush=True,
    )
    scratch.mkdir(parents=True, exist_ok=True)
    config_path = scratch / PUBLISHED_CONFIG
    atomic_write_text(config_path, published.config_text)
    command = [*pinned_cli(source), "train", "--config", str(config_path)]
    command += ["--output", str(scratch / RERUNS)]
    if isinstance(threads, int) and threads >= 1:
        command += ["--threads", str(threads)]
    if quiet:
        command.append("--quiet")
    env = rerun_environment(environment, dict(os.environ))
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        output, _ = child.communicate()
    finally:
        if child.poll() is None:  # interrupted: the re-run stops with this command
            child.terminate()
            child.wait()
    rerun_path = scratch / RERUNS / str(config["run_name"])
    if child.returncode != 0:
        sys.stdout.write(output)
        return usage_error(
            "verify",
            f"the re-run at {environment['git_commit'][:7]} failed "
            f"(exit {child.returncode}; its messages are above)",
        )
    try:
        rerun = read_records(rerun_path)
    except RunFormatError as err:
        return usage_error("verify", f"the re-run left no records: {err}")
    comparison = compare_runs(published, rerun)
    print(f"\npublished: {run}\nre-run:    {rerun_path}\n")
    print(format_comparison(published, _with_this_machine(rerun, env), comparison))
    return 0 if comparison.identical else 1


def _with_this_machine(rerun: RunRecords, env: dict[str, str]) -> RunRecords:
    """The re-run's records, its environment completed where the re-run's commit predates the
    CPU fields: this machine's CPU, and the kernels of the process environment ``env`` it ran
    in (torch read here under the same pins)."""
    import dataclasses

    import torch

    from creditbench.harness.records.provenance import KERNEL_PIN_VARIABLES, cpu_model

    environment = dict(rerun.environment)
    if environment.get("kernel_pins") is None:
        environment["kernel_pins"] = {k: env[k] for k in KERNEL_PIN_VARIABLES if k in env}
    if environment.get("cpu_model") is None:
        environment["cpu_model"] = f"{cpu_model() or 'unknown'} (read here)"
    if environment.get("cpu_capability") is None:  # the re-run had this process's pins
        environment["cpu_capability"] = f"{torch.backends.cpu.get_cpu_capability()} (read here)"
    return dataclasses.replace(rerun, environment=environment)


def _remove(scratch: Path, *, whole: bool) -> None:
    """Remove the scratch folder (``whole``: verify made it) or what verify put in it."""
    if whole:
        shutil.rmtree(scratch, ignore_errors=True)
        return
    (scratch / PUBLISHED_CONFIG).unlink(missing_ok=True)
    shutil.rmtree(scratch / RERUNS, ignore_errors=True)


def add_verify_command(subparsers) -> None:
    p = subparsers.add_parser(
        "verify",
        help="re-run a published run at its recorded commit and compare the records",
        description="Re-run RUN (a run folder or <run name>.tar.xz) from the commit and config "
        "it records, in a scratch folder, and print which records differ and by how much. "
        "Exit 0: identical; 1: the records differ; 2: bad input or the re-run failed.",
    )
    p.add_argument("run", metavar="RUN", help="a finished run: its folder or its .tar.xz")
    p.add_argument(
        "--scratch",
        metavar="DIR",
        help="an empty or new folder to re-run in (default: a temporary folder)",
    )
    p.add_argument("--keep", action="store_true", help="keep the re-run (default: removed)")
    p.add_argument("--quiet", action="store_true", help="no progress bar from the re-run")
    p.set_defaults(
        func=_cmd_verify,
        interrupted="the re-run stopped and its scratch folder is removed (kept with --keep); "
        "the published run is untouched",
    )
