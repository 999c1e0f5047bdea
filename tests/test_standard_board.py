"""The committed standard board as a newcomer uses it (issue: the validated leaderboard).

A contributor runs only their method's seeds of the standard suite and renders them with the
committed records: ``creditbench leaderboard docs/results/standard/runs.csv runs/mine --out b``.
Their method must be placed on the board's GRPO (0) -> oracle (1) scale, paired with GRPO's
committed seeds, exactly as a committed method with the same runs is.

The other checks here tie the committed records to this code (the board, the claims page and
the manifests rendered from them; each method's runs from one clean commit whose replay fixture
is the checkout's; the campaign's pins). They are marked ``records``: a step of ``.ci/run`` of
their own (``python -m pytest -m records``), so a code change that moves a method's fixture
fails there, naming the campaign that re-runs the method, and nowhere else.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from creditbench.harness.records.files import RECORD_FILES, find_runs, read_record_bytes, run_name
from creditbench.tools.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
STANDARD = ROOT / "docs" / "results" / "standard"
HARD = "chain-hard-steps=10-slip_rate=0.1-weak_slip_rate=0.3-direct_slip_rate=0.65"
COMMITTED = "dfpo"  # any committed method with at least 5 hard seeds
# What brings the committed records back in line with the code: the campaign re-runs what a
# change invalidated (after re-pinning it) and re-renders the board, the claims and the home page.
CAMPAIGN = "creditbench campaign tools/campaigns/standard.yaml"


def row(page: str, method: str) -> list[str]:
    """The cells of the ranking table's row for ``method`` (the first table naming it)."""
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 7 and cells[1] == method:
            return cells
    raise AssertionError(f"no ranking row for {method}")


def test_a_newcomers_runs_are_placed_on_the_committed_boards_scale(tmp_path: Path) -> None:
    assert (STANDARD / "runs.csv").is_file(), "the standard board's records are committed"
    mine = tmp_path / "mine"
    prefix = f"{HARD}-{COMMITTED}-s"
    runs = [run for run in find_runs(STANDARD)[0] if run_name(run).startswith(prefix)]
    assert len(runs) >= 5, "positions need 5 seeds"
    for run in runs:  # the newcomer's method: the same records under another name
        seed = run_name(run).rsplit("-s", 1)[1]
        target = mine / f"{HARD}-mine-s{seed}"
        target.mkdir(parents=True)
        for name in RECORD_FILES:
            data = read_record_bytes(run / name)
            if name in ("config.yaml", "summary.json"):
                data = data.replace(COMMITTED.encode(), b"mine")
            (target / name).write_bytes(data)

    board = tmp_path / "b"
    argv = ["leaderboard", str(STANDARD / "runs.csv"), str(mine), "--out", str(board)]
    assert main([*argv, "--reps", "200"]) == 0
    page = (board / "leaderboard.md").read_text(encoding="utf-8")
    theirs, committed = row(page, "mine"), row(page, COMMITTED)
    # every seed paired with GRPO's committed run of that seed: k/n with n the seeds
    assert re.search(rf" \d+/{len(runs)}( [▲▼])?$", theirs[4]), theirs[4]
    assert theirs[3:6] == committed[3:6]  # same runs, same AUC, gain and position
    if committed[5] != "n/a" and not committed[5].startswith("n/a"):  # the oracle separates
        position = r"(-?\d\.\d\d) \[(-?\d\.\d\d), (-?\d\.\d\d)\]"
        assert re.fullmatch(position, theirs[5]), f"not placed on the scale: {theirs[5]!r}"
    assert not (STANDARD / "mine").exists() and "mine" not in (STANDARD / "runs.csv").read_text()


@pytest.mark.records
def test_the_committed_board_is_the_one_its_committed_records_give() -> None:
    """docs/results/standard/leaderboard.csv must come from the runs.csv beside it (its
    settings, each one's methods in rank order, seeds, AUC gains and positions): a records
    commit that forgot to re-render the board fails here. The figures are rendered by the same
    command; they are not compared pixel by pixel."""
    import pandas as pd

    from creditbench.leaderboard.board import summarize
    from creditbench.leaderboard.collect import collect_runs
    from creditbench.leaderboard.gains import ranked

    table, _ = collect_runs([STANDARD / "runs.csv"])
    fresh = summarize(table)["methods"]
    committed = pd.read_csv(STANDARD / "leaderboard.csv")
    stale = f"the committed board is not the one this code renders: {CAMPAIGN}"
    assert set(fresh["options"]) == set(committed["options"]), stale
    columns = ["method", "n_seeds", "gain_auc", "gain_auc_low", "gain_auc_high", "position"]
    for options, board in committed.groupby("options"):
        mine = ranked(fresh[fresh["options"] == options].reset_index(drop=True))
        board = board.reset_index(drop=True)
        assert list(mine["method"]) == list(board["method"]), stale
        try:
            pd.testing.assert_frame_equal(
                mine[columns].reset_index(drop=True), board[columns], check_dtype=False, atol=1e-9
            )
        except AssertionError as err:
            raise AssertionError(f"{options}: {stale}\n{err}") from None


@pytest.mark.records
def test_the_claims_page_is_the_one_its_committed_records_give(tmp_path, monkeypatch) -> None:
    """docs/results/claims.md is `creditbench claims` over the committed records (the standard
    board's, and the claims' own rows once they exist), as docs/reproducing.md says."""
    monkeypatch.chdir(ROOT)
    sources = ["docs/results/standard/runs.csv"]
    if (ROOT / "docs" / "results" / "claims-rows" / "runs.csv").is_file():
        sources.append("docs/results/claims-rows/runs.csv")
    out = tmp_path / "claims.md"
    assert main(["claims", *sources, "--out", str(out)]) == 0
    committed = (ROOT / "docs" / "results" / "claims.md").read_text(encoding="utf-8")
    assert out.read_text(encoding="utf-8") == committed, (
        f"docs/results/claims.md is not the page this code renders from the records: {CAMPAIGN}"
    )


def committed_runs():
    """The committed runs.csv's rows of whole runs (one a run, beside its evaluations')."""
    import pandas as pd

    runs = pd.read_csv(STANDARD / "runs.csv")
    return runs[runs["kind"] == "run"]


# Every folder of committed runs the board or its rules read: the board, the claims' own rows,
# the tuning runs (whose stages may come from different commits, each read with this code's
# fixtures: docs/testbed.md, "The tuning rule") and OTB's ablation rows
RECORD_FOLDERS = tuple(
    ROOT / "docs" / "results" / name for name in ("standard", "claims-rows", "tuning", "ablations")
)


def registered_method_commits() -> set[tuple[str, str]]:
    """``(registered method, commit)`` of every committed run of :data:`RECORD_FOLDERS` (a
    variant such as ``oppo_teacher`` or ``gspo_stage2_1`` runs a registered method with options,
    which its config, recorded in ``runs.csv``, names)."""
    import pandas as pd

    pairs = set()
    for folder in RECORD_FOLDERS:
        if not (folder / "runs.csv").is_file():
            continue
        runs = pd.read_csv(folder / "runs.csv", dtype={"commit": str})
        for config, commit in runs[runs["kind"] == "run"][["config", "commit"]].itertuples(
            index=False
        ):
            pairs.add((json.loads(config)["method"], str(commit)))
    return pairs


@pytest.mark.records
def test_each_methods_committed_runs_come_from_one_clean_commit() -> None:
    """The campaign's rule: every run of a method comes from one pinned clean clone, whose
    commit each run records (a fixture change re-runs the method from a new one)."""
    runs = committed_runs()
    assert runs["commit"].notna().all(), f"every run records its commit: {CAMPAIGN}"
    assert not runs["git_dirty"].astype(bool).any(), f"no run from a dirty tree: {CAMPAIGN}"
    commits = runs.groupby("method")["commit"].nunique()
    assert (commits == 1).all(), (
        f"methods run from several commits: {', '.join(commits[commits > 1].index)}; re-run "
        f"them from their pinned commit: {CAMPAIGN}"
    )
    committed = {run_name(p) for p in find_runs(STANDARD)[0]}
    assert committed == set(runs["run"]), (
        f"runs.csv lists other runs than the committed records (folders or archives): {CAMPAIGN}"
    )


@pytest.mark.records
def test_each_methods_replay_fixture_is_the_one_its_committed_runs_were_made_with() -> None:
    """A change that alters a method's replay fixture (its advantages on the recorded batches)
    invalidates its committed runs: they would no longer be this code's numbers. The fixture at
    the runs' commit must equal the checkout's, until the method is re-run and pinned anew."""
    import subprocess

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)

    if git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout: the runs' commits cannot be read")
    if git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.skip("a shallow clone: the runs' commits may lie outside its history")
    changed = []
    for method, commit in sorted(registered_method_commits()):
        fixture = f"tests/replay_fixtures/{method}.jsonl"
        then = git("show", f"{commit}:{fixture}")
        assert then.returncode == 0, f"{method}: no {fixture} at its runs' commit {commit}"
        if then.stdout != (ROOT / fixture).read_text():
            changed.append(f"{method} (runs at {str(commit)[:7]})")
    assert not changed, (
        f"replay fixtures changed since the committed runs: {', '.join(changed)}; their runs are "
        f"no longer this code's numbers. Pin these methods to the new commit in "
        f"tools/campaigns/standard.yaml and re-run them: {CAMPAIGN} (or undo the change)"
    )


@pytest.mark.records
def test_the_campaign_plan_pins_every_builtin_method_once_at_its_runs_commit() -> None:
    """``tools/campaigns/standard.yaml`` runs each builtin method (the oracle included) from one
    pinned commit (its loader refuses a method pinned twice): a method it forgets never joins
    the board, and a committed run from another commit than the pinned one is a run the
    campaign would not reproduce."""
    from creditbench.methods.registry import list_methods, method_origin
    from creditbench.tools.campaign.plan import load_plan, plan_path

    plan = load_plan(plan_path("standard"))
    pinned = [method for methods in plan.pins.values() for method in methods]
    builtin = [name for name in list_methods() if method_origin(name).kind == "builtin"]
    assert sorted(pinned) == sorted(builtin), f"pin every builtin method once: {CAMPAIGN}"
    for method, commit in committed_runs().groupby("method")["commit"].first().items():
        assert plan.commit_of(method) == str(commit), (
            f"{method}: committed runs at {str(commit)[:7]}, pinned to "
            f"{plan.commit_of(method)[:7]}: re-run it at its pin or pin it to its runs' commit"
        )


@pytest.mark.records
def test_every_committed_figure_of_the_board_is_shown_somewhere() -> None:
    """A render writes figures named after the settings; a figure a later render no longer
    names would otherwise stay committed beside the board, stale, with nothing pointing to it."""
    pages = [p.read_text(encoding="utf-8") for p in (ROOT / "docs").rglob("*.md")]
    orphans = [f.name for f in STANDARD.glob("*.png") if not any(f.name in p for p in pages)]
    assert orphans == [], (
        f"figures no page shows (left by an earlier render?): {orphans}; remove them and "
        f"re-render: {CAMPAIGN}"
    )


@pytest.mark.records
def test_the_committed_suite_manifest_is_the_campaigns_plan_for_the_committed_records() -> None:
    """The board says how many of the campaign's runs it holds; the plan it counts against
    must be the one the easy-seeds rule gives for the committed records, over the suite's runs
    (a stale or hand-edited plan would misstate what is left)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("easy_seeds", ROOT / "scripts" / "easy_seeds.py")
    easy_seeds = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(easy_seeds)
    plan = easy_seeds.campaign_manifest(str(STANDARD / "runs.csv"))
    committed = json.loads((STANDARD / "suite-standard.json").read_text())
    stale = f"docs/results/standard/suite-standard.json is not the campaign's plan: {CAMPAIGN}"
    assert committed.get("plan") == plan["plan"], stale
    assert {r["name"] for r in committed["runs"]} == {r["name"] for r in plan["runs"]}, stale


@pytest.mark.records
def test_the_claims_own_rows_are_counted_against_every_cards_variant_rows() -> None:
    """The claims page says how many of the claims' own rows its verdicts stand on: their
    manifest must list every card row the board does not run, at the standard suite's runs of
    its claims' settings, and no row of the board (whose runs the standard manifest counts)."""
    import json

    from creditbench.reference.cards import load_cards
    from creditbench.tools.reproduce.claims import claim_runs, on_the_board, own_rows_manifest

    cards = list(load_cards().values())
    plan = own_rows_manifest(cards)
    names = {r["name"] for r in plan["runs"]}
    compared = [c for c in cards if c.claims]
    runs = [(card, run) for card in compared for run in claim_runs(card)]
    own = [run for card, run in runs if not on_the_board(card, run.entry)]
    assert names == {run.name for run in own}
    # GTPO's GRPO-S; OPPO's teacher and DAPO rows: each at the suite's ten hard seeds
    for row in ("grpo_s", "oppo_teacher", "dapo_oppo", "dapo_oppo_teacher"):
        assert sorted(r.seed for r in own if r.entry == row) == list(range(10)), row
    board = json.loads((STANDARD / "suite-standard.json").read_text())
    assert not names & {r["name"] for r in board["runs"]}, f"a row in both manifests: {CAMPAIGN}"
    committed = ROOT / "docs" / "results" / "claims-rows" / "suite-claims-rows.json"
    if committed.is_file():  # written by the campaign's sync beside the rows' records
        assert json.loads(committed.read_text()) == plan, (
            f"docs/results/claims-rows/suite-claims-rows.json is not the cards' plan: {CAMPAIGN}"
        )
