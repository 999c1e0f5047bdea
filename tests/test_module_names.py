"""One name per idea: no two modules of the package share a file name unless they are the same
idea in different rooms, and those pairs are listed here with the idea they share.

Two rules cover whole families without a list:
- a verb's command line (``tools/cli/<verb>.py``) is named after the verb, so it shares its name
  with what it fronts (``tools/cli/bench.py`` and ``tools/bench.py``);
- a task package (``harness/tasks/<task>/``) is laid out as every other: ``task.py``,
  ``grammar.py``, ``traces.py``, ``values.py`` ... name the same part of each task.

Everything else that shares a name is in :data:`SAME_IDEA`; a new clash fails until it is
renamed or listed with its reason, and a listed group that no longer exists fails too, so the
list stays what the tree holds.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("methods", "common", "harness", "leaderboard", "reference", "integrations", "tools")
TASK_PACKAGES = "harness/tasks/"
VERBS = "tools/cli/"

# file name -> (the files that share it, the idea they share)
SAME_IDEA = {
    "base.py": (
        {"harness/tasks/base.py", "methods/base.py"},
        "a contract's base: the Task a world implements, the CreditMethod a method implements",
    ),
    "registry.py": (
        {"harness/tasks/registry.py", "methods/registry.py"},
        "names to classes, built-ins and entry-point plugins: of tasks, of methods",
    ),
    "values.py": (
        {"harness/tasks/*/values.py", "methods/values.py"},
        "state values V(s): the task's own (exact or analytic), and the methods' shared "
        "step values and exact credit",
    ),
    "budget.py": (
        {"harness/budget.py", "tools/reproduce/budget.py"},
        "the compute budget: the meter that charges it, and how many FLOPs a CPU reproduction gets",
    ),
    "claims.py": (
        {"leaderboard/claims.py", "tools/reproduce/claims.py"},
        "a card's claims checked on the records: on the board, and for `reproduce`",
    ),
    "engines.py": (
        {"harness/services/engines.py", "tools/reproduce/engines.py"},
        "the other trainers (verl, TRL): what their adapters take of the contract, and the "
        "launch `reproduce` writes for them",
    ),
    "explain.py": (
        {"harness/diagnostics/explain.py", "leaderboard/explain.py", "tools/explain.py"},
        "credit you can read (`creditbench explain`): the responses a run logs with their "
        "advantages, the picture drawn from them, several methods' credit on one batch",
    ),
    "plan.py": (
        {"tools/campaign/plan.py", "tools/reproduce/plan.py"},
        "what a verb runs, read and checked before anything runs: a campaign's, a card's",
    ),
    "records.py": (
        {"leaderboard/records.py", "tools/campaign/records.py"},
        "finished runs' records read back: a board's runs.csv, a campaign's committed records",
    ),
    "report.py": (
        {"leaderboard/report.py", "tools/reproduce/report.py"},
        "results rendered for a reader: the leaderboard, the reproduction's table",
    ),
    "run.py": (
        {"tools/campaign/run.py", "tools/reproduce/run.py"},
        "a verb's run from start to end: `creditbench campaign`, `creditbench reproduce`",
    ),
}


def shared_names(root: Path = ROOT) -> dict[str, set[str]]:
    """File names held by more than one module (``__init__.py`` aside), with their paths; the
    command lines of verbs left out and a task package's part counted once, as
    ``harness/tasks/*/<part>.py``."""
    holders: dict[str, set[str]] = defaultdict(set)
    for room in ROOMS:
        for path in (root / room).rglob("*.py"):
            relative = path.relative_to(root).as_posix()
            if path.name == "__init__.py" or relative.startswith(VERBS):
                continue
            parts = relative.split("/")
            if relative.startswith(TASK_PACKAGES) and len(parts) == 4:
                relative = f"{TASK_PACKAGES}*/{path.name}"
            holders[path.name].add(relative)
    return {name: paths for name, paths in holders.items() if len(paths) > 1}


def test_no_two_modules_share_a_name_unless_they_are_one_idea_in_different_rooms():
    listed = {name: paths for name, (paths, _) in SAME_IDEA.items()}
    assert shared_names() == listed


def test_every_listed_pair_says_the_idea_it_shares():
    assert all(len(idea) > 20 for _, idea in SAME_IDEA.values())


def test_the_rule_would_catch_a_new_clash(tmp_path):
    """A second ``prompts.py`` outside a task package is a clash; one in another task package,
    or a verb's command line, is not."""
    for relative in (
        "harness/tasks/chain/prompts.py",
        "harness/tasks/ledger/prompts.py",
        "tools/cli/bench.py",
        "tools/bench.py",
        "harness/services/prompts.py",
    ):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("")
    assert shared_names(tmp_path) == {
        "prompts.py": {"harness/tasks/*/prompts.py", "harness/services/prompts.py"}
    }
