"""``creditbench campaign PLAN --sync``: a campaign's finished runs into the repository, and the
pages that read them rendered again.

1. Each finished run of the plan in the work folder that the board's records lack is packed
   there (``<run>.tar.xz``, :func:`~creditbench.harness.records.files.pack_run`); each
   finished run of a card's own rows (``WORK/claims-<card>/``) that no records hold yet goes to
   the claims' own rows. A run already in the records is never replaced: the records are what
   was published.
2. The board's suite manifest (``suite-<suite>.json``): the runs the plan covers, less the easy
   seeds 5-9 the easy-seeds rule has not chosen where the plan has that rule, so the board
   says how much of the campaign it holds. A plan with no bench phase (the claims' own rows
   alone) packs, writes and renders nothing of the board, whose own plan does.
3. The board (``creditbench leaderboard``), the claims' own rows' manifest and ``runs.csv``,
   the claims page (``creditbench claims``) and the home page's headline
   (``scripts/home_headline.py --explain``), the method pages' "Where the mechanism acts"
   rows (``scripts/mechanism_lines.py``), OTB's ablation block (``scripts/ablation_lines.py``,
   from this board and the repository's ablation records) and the tuning rule's table
   (``tools/campaign/tuning.py``), each where the plan's ``pages`` asks for it.

Every file is written whole or not at all (atomically), so a sync killed half-way is run again.
It reads only finished runs, so it may run while the campaign trains; then commit the records
and the pages together (docs/campaign.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from creditbench.harness.models.policy_cache import exclusive_lock
from creditbench.harness.records.files import atomic_write_text, pack_run
from creditbench.tools.campaign.plan import Plan
from creditbench.tools.campaign.records import committed_runs, finished_runs


class SyncError(RuntimeError):
    """A render that failed; the message names it (its own message is above)."""


def plan_runs(plan: Plan) -> list:
    """The suite's runs the plan's bench phases cover, each once, in the suite's order."""
    covered = {run.name for phase in plan.phases if phase.setting for run in plan.runs_of(phase)}
    return [run for run in plan.suite_runs if run.name in covered]


def sync(plan: Plan, work: Path) -> int:
    """Bring the finished runs of ``work`` into the plan's records and render (module doc);
    how many runs were added."""
    # a plan of the claims' own rows alone (protocol 2's third) reads the board's records and
    # leaves them, their manifest and their page as the board's own plan wrote them
    board = any(phase.setting for phase in plan.phases)
    with exclusive_lock(work / ".sync.lock"):  # two syncs of one work folder take turns
        added = (_pack_board(plan, work) if board else 0) + _pack_claims_rows(plan, work)
        print(f"synced {added} new runs into the records")
        if board:
            _write_board_manifest(plan)
        _render(plan, board)
    return added


def _pack(run: Path, records: Path, note: str = "") -> None:
    environment = json.loads((run / "environment.json").read_text(encoding="utf-8"))
    pack_run(run, records)
    commit = str(environment.get("git_commit") or "no commit")[:7]
    print(f"new: {run.name} {commit}{f' ({note})' if note else ''}")


def _pack_board(plan: Plan, work: Path) -> int:
    wanted = {run.name for run in plan_runs(plan)}
    held = committed_runs(plan.board)
    new = [run for name, run in finished_runs(work / "results").items() if name in wanted]
    new = [run for run in new if run.name not in held]
    for run in new:
        _pack(run, plan.board)
    return len(new)


def _pack_claims_rows(plan: Plan, work: Path) -> int:
    """The claims' own rows: variants the suite does not run, beside the board, never in it."""
    if plan.claims_rows is None:
        return 0
    held = {*committed_runs(plan.board), *committed_runs(plan.claims_rows)}
    held |= set(finished_runs(work / "results"))  # a board run reproduce read, not its own
    count = 0
    for phase in plan.phases:
        if not phase.reproduce:
            continue
        for name, run in finished_runs(work / f"claims-{phase.reproduce}").items():
            if name not in held:
                _pack(run, plan.claims_rows, "claims' row")
                held.add(name)
                count += 1
    return count


def _write_board_manifest(plan: Plan) -> None:
    from creditbench.tools.suite import suite_manifest

    suite = Path(plan.suite).stem
    runs = plan_runs(plan)
    if any(phase.rule == "easy-seeds" for phase in plan.phases):
        from creditbench.tools.campaign.easy_seeds import campaign_manifest

        manifest = campaign_manifest(plan.board, runs, suite)
    else:
        manifest = suite_manifest(
            suite, [(r.name, r.label) for r in runs], f"campaign {plan.path.stem}'s runs"
        )
    atomic_write_text(plan.board / f"suite-{suite}.json", json.dumps(manifest, indent=1) + "\n")


def _render(plan: Plan, board: bool = True) -> None:
    """The renders, each a command run from the plan's repository's root with paths relative to
    it, as a person would type them (the pages name their sources)."""

    def run(*argv: str | Path) -> None:
        command = [sys.executable, *(_from_root(arg, plan.repo) for arg in argv)]
        shown = " ".join(command[1:]).replace(" ".join(cli), "creditbench")
        done = subprocess.run(command, cwd=plan.repo, capture_output=True, text=True, check=False)
        if done.returncode != 0:  # what it said, then which render it was
            print(done.stdout + done.stderr, end="", file=sys.stderr)
            raise SyncError(f"{shown} failed (its message is above)")
        print(f"rendered: {shown}")

    cli = ("-m", "creditbench.tools.cli.main")
    if board:
        run(*cli, "leaderboard", plan.board)
    tables = [plan.board / "runs.csv"]
    if plan.claims_rows is not None and plan.claims_rows.is_dir():
        from creditbench.reference.cards import load_cards
        from creditbench.tools.reproduce.claims import own_rows_manifest

        manifest = own_rows_manifest(load_cards().values(), plan.suite, committed_runs(plan.board))
        text = json.dumps(manifest, indent=1) + "\n"
        atomic_write_text(plan.claims_rows / f"suite-{manifest['suite']}.json", text)
        run(*cli, "leaderboard", plan.claims_rows, "--records-only")
        tables.append(plan.claims_rows / "runs.csv")
    if "claims" in plan.pages:
        run(*cli, "claims", *tables, "--out", plan.pages["claims"])
    if "home" in plan.pages:
        script = plan.repo / "scripts" / "home_headline.py"
        run(script, tables[0], plan.pages["home"], "--explain")
    if "methods" in plan.pages:  # each method page's chain rows of "Where the mechanism acts"
        script = plan.repo / "scripts" / "mechanism_lines.py"
        run(script, "--records", tables[0], "--pages", plan.pages["methods"])
    if "ablation" in plan.pages:  # OTB's rungs (docs/testbed.md, "OTB's ablation rows")
        script = plan.repo / "scripts" / "ablation_lines.py"
        run(script, "--board", tables[0], "--page", plan.pages["ablation"])
    if "tuning" in plan.pages:  # the tuning rule's table (docs/testbed.md, "The tuning rule")
        table = ("-m", "creditbench.tools.campaign.tuning", "table", plan.board)
        run(*table, "--out", plan.pages["tuning"])


def _from_root(path: str | Path, root: Path) -> str:
    """``path`` relative to ``root`` when it lies there, else as it is."""
    if isinstance(path, Path) and path.is_absolute() and path.is_relative_to(root):
        return str(path.relative_to(root))
    return str(path)
