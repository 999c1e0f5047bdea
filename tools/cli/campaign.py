"""``creditbench campaign PLAN``: a board's runs, each method from the commit its plan pins.

creditbench campaign standard --dry-run     # each phase's runs left and expected core-hours
creditbench campaign standard               # run what is left (resumes after any stop)
creditbench campaign standard --sync        # finished runs into the records; re-render

The user's page is ``docs/campaign.md``; the plan files are in ``tools/campaigns/``.
"""

from __future__ import annotations

import argparse
import sys

from creditbench.tools.cli.common import thread_count, usage_error, worker_count


def _cmd_campaign(args: argparse.Namespace) -> int:
    from pathlib import Path

    from creditbench.harness.records.files import RunFormatError
    from creditbench.harness.records.rundir import RunDirError, check_creatable
    from creditbench.tools.bench import default_workers
    from creditbench.tools.campaign.plan import PlanError, load_plan, plan_path
    from creditbench.tools.campaign.run import default_work, dry_run, run_plan
    from creditbench.tools.campaign.sync import SyncError, sync
    from creditbench.tools.campaign.worktrees import CheckoutError

    try:
        plan = load_plan(plan_path(args.plan))
        work = Path(args.work).absolute() if args.work is not None else default_work(plan)
        check_creatable(work, "--work")
        workers = args.workers or default_workers()[0]
        if args.dry_run:
            return dry_run(plan, work, workers)
        if args.sync:
            sync(plan, work)
            return 0
        return run_plan(plan, work, workers, args.threads)
    except (PlanError, CheckoutError, RunDirError, RunFormatError) as err:
        return usage_error("campaign", str(err))
    except SyncError as err:
        print(f"creditbench campaign: error: {err}", file=sys.stderr)
        return 1


def add_campaign_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "campaign",
        help="run a campaign's plan: each method from its pinned commit, resumable, then --sync",
    )
    p.add_argument("plan", help="a shipped plan (standard, slice) or a plan YAML file")
    action = p.add_mutually_exclusive_group()
    action.add_argument(
        "--dry-run",
        action="store_true",
        help="print each phase's runs left and the expected core-hours; run nothing",
    )
    action.add_argument(
        "--sync",
        action="store_true",
        help="pack the finished runs into the plan's records and render the board and pages",
    )
    p.add_argument(
        "--work",
        help="the work folder: checkouts' results, logs, claims rows "
        "(default: $CREDITBENCH_CACHE/campaigns/PLAN)",
    )
    p.add_argument(
        "--workers",
        type=worker_count,
        help="parallel runs, at most 4 a core (default: one per core)",
    )
    p.add_argument(
        "--threads", type=thread_count, default=1, help="torch threads per run (default: 1)"
    )
    p.set_defaults(
        func=_cmd_campaign,
        interrupted="finished runs and the last checkpoint of each unfinished one are kept in "
        "the work folder; the same command resumes",
    )
