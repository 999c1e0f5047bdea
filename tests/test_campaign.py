"""``creditbench campaign PLAN``: the plan loader's refusals, the standard plan's pins, clean
worktrees of pinned commits in the cache, the dry run, and a tiny campaign run, killed, resumed
and synced (docs/campaign.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from processes import processes_mentioning

from creditbench.tools.campaign.plan import PlanError, load_plan, plan_path
from creditbench.tools.campaign.worktrees import CheckoutError, checkout, pinned_cli
from creditbench.tools.cli.main import main

ROOT = Path(__file__).resolve().parents[1]


def git(*args: str | Path, cwd: Path = ROOT) -> str:
    done = subprocess.run(["git", "-C", str(cwd), *map(str, args)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def head() -> str:
    """This checkout's commit: what a test pins (a plan's commits must exist)."""
    if subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True
    ).returncode:
        pytest.skip("not a git checkout: a campaign pins commits of the repository it runs in")
    return git("rev-parse", "HEAD")


@pytest.fixture
def clone(tmp_path: Path, head: str) -> Path:
    """A clone of this repository that shares its objects: its worktrees are its own, so a test
    leaves nothing in this checkout's git folder."""
    target = tmp_path / "clone"
    git("clone", "-q", "--shared", "--no-checkout", ROOT, target, cwd=tmp_path)
    git("checkout", "-q", "--detach", head, cwd=target)
    return target


GOOD = """\
suite: standard
methods: [grpo, oracle]
records: {board: records}
pins:
  HEAD: [grpo, oracle]
phases:
  - {setting: hard, seeds: 0-1}
"""


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (("suite:", "sweet: x\nsuite:"), "sweet", "unknown key"),
        (("[grpo, oracle]\nphases", "[grpo, oracle, nosuch]\nphases"), "pins: ", "'nosuch'"),
        (("  HEAD: [grpo, oracle]", "  HEAD: [grpo]\n  OTHER: [grpo, oracle]"), "pins", "twice"),
        (("  HEAD: [grpo, oracle]", "  HEAD: [grpo]"), "pins", "no pinned commit for oracle"),
        (("  HEAD:", f"  {'f' * 40}:"), "pins: fffffff", "no such commit"),
        (("  HEAD:", "  abc1234:"), "pins", "a full commit id"),
        (
            ("setting: hard", "setting: medium"),
            "phases: phase 1: setting",
            "'medium'; the suite's: hard, easy",
        ),
        (("seeds: 0-1", "seeds: 1-0"), "phases: phase 1: seeds", "seeds and ranges"),
        (("seeds: 0-1}", "seeds: 0-1, rule: easy-seeds}"), "phases: phase 1: rule", "easy setting"),
        (("0-1}", "0-1}\n  - {reproduce: otb}"), "phases: phase 2: reproduce", "claims_rows"),
        (("methods: [grpo, oracle]", "methods: [grpo, oracle, gtpo]"), "pins", "gtpo"),
    ],
)
def test_the_plan_loader_refuses_a_wrong_plan_naming_the_file_and_field(
    tmp_path: Path, head: str, change: tuple[str, str], field: str, message: str
) -> None:
    plan = tmp_path / "plan.yaml"
    text = GOOD.replace(*change).replace("HEAD", head).replace("OTHER", git("rev-parse", "HEAD~1"))
    assert text != GOOD.replace("HEAD", head), "the change applies"
    plan.write_text(text)
    with pytest.raises(PlanError) as refused:
        load_plan(plan)
    line = str(refused.value)
    assert line.startswith(f"{plan}: {field}") and message in line and "\n" not in line, line
    plan.write_text(GOOD.replace("HEAD", head))
    assert load_plan(plan).pins == {head: ("grpo", "oracle")}  # the same plan, unchanged, loads


def test_a_wrong_plan_is_one_line_and_exit_2_with_nothing_written(tmp_path, capsys) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(GOOD.replace("HEAD", "e" * 40))
    work = tmp_path / "work"
    assert main(["campaign", str(plan), "--work", str(work)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"creditbench campaign: error: {plan}: pins: eeeeeee: commit")
    assert len(err.splitlines()) == 1 and not work.exists()
    assert main(["campaign", "no-such-plan", "--dry-run"]) == 2
    assert "unknown plan 'no-such-plan'; shipped: slice, standard" in capsys.readouterr().err


def test_the_standard_plan_pins_every_builtin_method_once_in_the_campaigns_order() -> None:
    from creditbench.methods.registry import list_methods, method_origin

    plan = load_plan(plan_path("standard"))
    pinned = [method for methods in plan.pins.values() for method in methods]
    builtin = [name for name in list_methods() if method_origin(name).kind == "builtin"]
    assert sorted(pinned) == sorted(builtin)  # each once: the loader refuses a second pin
    first = ("grpo", "oracle", "int", "mig", "pppo", "spo", "ktae", "otb", "gtpo")
    steps = [(p.setting, p.seeds, p.rule, p.reproduce, set(p.methods)) for p in plan.phases]
    assert steps == [
        ("easy", (0, 1, 2, 3, 4), "", "", set(first)),
        ("easy", (5, 6, 7, 8, 9), "easy-seeds", "", set(first)),
        ("hard", tuple(range(10)), "", "", set(pinned)),
        ("easy", (0, 1, 2, 3, 4), "", "", set(pinned)),
        ("easy", (5, 6, 7, 8, 9), "easy-seeds", "", set(pinned)),
        ("", (), "", "gtpo", set()),
        ("", (), "", "oppo", set()),
    ]
    assert plan.board == ROOT / "docs" / "results" / "standard"
    assert plan.claims_rows == ROOT / "docs" / "results" / "claims-rows"


def test_a_worktree_of_a_commit_is_made_once_clean_and_reused(tmp_path, clone, head) -> None:
    cache = tmp_path / "cache"
    made: list[Path] = []
    both = [
        threading.Thread(target=lambda: made.append(checkout(head[:7], repo=clone, cache=cache)))
        for _ in range(2)
    ]
    for thread in both:
        thread.start()
    for thread in both:
        thread.join()
    assert made == [cache / "worktrees" / head] * 2  # two asking at once: one worktree
    path = made[0]
    assert (
        git("rev-parse", "HEAD", cwd=path) == head and git("status", "--porcelain", cwd=path) == ""
    )
    assert len([line for line in git("worktree", "list", cwd=clone).splitlines()]) == 2
    marker = (cache / "worktrees" / f"{head}.ready").stat().st_mtime_ns
    assert checkout(head, repo=clone, cache=cache) == path  # reused, not made again
    assert (cache / "worktrees" / f"{head}.ready").stat().st_mtime_ns == marker

    # its CLI imports the checkout's code, not this package's
    argv = pinned_cli(path)[:-2] + ["-c", "import creditbench.tools as t; print(t.__path__[0])"]
    shown = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(shown).resolve() == (path / "tools").resolve()

    (path / "README.md").write_text("changed")  # a checkout that is not its commit is refused
    with pytest.raises(CheckoutError, match="is not clean"):
        checkout(head, repo=clone, cache=cache)
    git("checkout", "--", "README.md", cwd=path)
    (cache / "worktrees" / f"{head}.ready").unlink()  # as a creation killed before its marker
    assert checkout(head, repo=clone, cache=cache) == path
    with pytest.raises(CheckoutError, match="no such commit"):
        checkout("f" * 40, repo=clone, cache=cache)


def test_the_slices_dry_run_prints_its_runs_and_hours_and_writes_nothing(tmp_path, capsys):
    text = plan_path("slice").read_text().replace("runs/campaign-slice", str(tmp_path / "kept"))
    plan = tmp_path / "slice.yaml"
    plan.write_text(text)
    work = tmp_path / "work"
    assert main(["campaign", str(plan), "--dry-run", "--work", str(work), "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "phase 1: hard seeds 0-1: 6 runs, 6 left, " in out
    listed = [line.split() for line in out.splitlines() if line.strip().endswith(("-s0", "-s1"))]
    assert sorted(cells[-1].rsplit("-", 2)[-2] for cells in listed) == [
        "grpo",
        "grpo",
        "oracle",
        "oracle",
        "otb",
        "otb",
    ]
    assert all(cells[1] == "min" and float(cells[0]) > 0 for cells in listed)  # measured times
    assert "total: 6 runs left; expected: " in out and " core-hours for 6 measured runs" in out
    assert not work.exists() and not (tmp_path / "kept").exists()

    # a rule phase before any run of the campaign waits for the runs it reads (it crashed on
    # the empty table of a plan that has no records yet, as protocol 2's before its first run)
    plan.write_text(text + "  - {setting: easy, seeds: 5-9, rule: easy-seeds}\n")
    assert main(["campaign", str(plan), "--dry-run", "--work", str(work), "--workers", "2"]) == 0
    out = capsys.readouterr().out
    waiting = "phase 2: easy seeds 5-9, the rows the easy-seeds rule chooses: waits (easy seeds"
    assert waiting + " 0-4 missing for: grpo, oracle, otb); up to 15 runs" in out
    assert not work.exists()


# --- a tiny campaign, end to end -----------------------------------------------------------


def tiny_campaign(tmp_path: Path, clone: Path, head: str) -> Path:
    """A plan in ``clone`` whose one phase is a two-run bench of a nano model (a few seconds a
    run), pinned to ``head``, its records in the clone's ``runs/tiny-board``."""
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, save_policy
    from creditbench.harness.tasks import get_task

    tokenizer = build_char_tokenizer(task_alphabet(get_task("chain", steps=2)))
    policy = save_policy(build_model("nano", tokenizer, seed=0), tokenizer, tmp_path / "nano")
    suite = tmp_path / "tiny.yaml"
    suite.write_text(
        f"methods: [grpo]\nseeds: [0, 1]\ntasks:\n  - name: chain\n    label: tiny\n"
        "    options: {steps: 2, train_size: 32, eval_size: 4}\n"
        f"settings:\n  model.path: {str(policy)!r}\n  rollout.prompts_per_step: 2\n"
        "  rollout.group_size: 2\n  rollout.max_new_tokens: 8\n  eval.n_problems: 2\n"
        "  eval.k_samples: 1\n  checkpoint_every: 1\nbudget: {unit: steps, amount: 16}\n"
    )
    plan = clone / "runs" / "tiny.yaml"  # runs/ is ignored: the clone stays clean
    plan.parent.mkdir()
    plan.write_text(
        f"suite: {suite}\nrecords: {{board: runs/tiny-board}}\npins:\n  {head}: [grpo]\n"
        "phases:\n  - {setting: tiny, seeds: 0-1}\n"
    )
    return plan


@pytest.mark.slow
def test_a_campaign_runs_is_killed_resumes_and_syncs(tmp_path, clone, head, capsys) -> None:
    plan = tiny_campaign(tmp_path, clone, head)
    work = tmp_path / "work"
    env = {**os.environ, "CREDITBENCH_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "creditbench.tools.cli.main", "campaign", str(plan)]
    command += ["--work", str(work), "--workers", "1"]
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    runs = work / "results"
    try:
        deadline = time.monotonic() + 180
        while not list(runs.glob("*/checkpoints/step-*/COMPLETE")) and time.monotonic() < deadline:
            time.sleep(0.5)  # until a run has trained and saved a checkpoint
        # a second campaign on the same work folder is refused while the first runs
        os.environ["CREDITBENCH_CACHE"] = env["CREDITBENCH_CACHE"]
        assert main(["campaign", str(plan), "--work", str(work)]) == 2
        assert "another process is writing this campaign's work folder" in capsys.readouterr().err
        (killed,) = [p for p in runs.glob("chain-*") if (p / "checkpoints").is_dir()]
        step_one = (killed / "metrics.jsonl").read_text().splitlines()[1]
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
    finally:
        first.kill()
        del os.environ["CREDITBENCH_CACHE"]
    assert first.returncode == 130, err.decode()
    assert "creditbench campaign: interrupted" in err.decode()
    time.sleep(2)
    assert processes_mentioning(str(work)) == []  # its bench and the bench's worker stopped
    assert len(list(runs.glob("chain-*/summary.json"))) < 2  # they did not train on

    again = subprocess.run(command, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    names = sorted(p.name for p in runs.glob("chain-*"))
    assert len(names) == 2 and all((runs / n / "summary.json").is_file() for n in names)
    # the killed run resumed from its checkpoint: its first step's record is the one it wrote
    assert (killed / "metrics.jsonl").read_text().splitlines()[1] == step_one
    for name in names:  # each run records the pinned commit, clean
        environment = json.loads((runs / name / "environment.json").read_text())
        assert environment["git_commit"] == head and not environment["git_dirty"]

    sync = [*command[:-2], "--sync"]
    assert subprocess.run(sync, env=env, capture_output=True).returncode == 0
    board = clone / "runs" / "tiny-board"
    archives = sorted(p.name for p in board.glob("*.tar.xz"))
    assert archives == [f"{name}.tar.xz" for name in names]
    packed = {name: (board / name).read_bytes() for name in archives}
    assert "all 2 runs finished" in (board / "leaderboard.md").read_text()
    manifest = json.loads((board / "suite-tiny.json").read_text())
    assert sorted(run["name"] for run in manifest["runs"]) == names
    synced = subprocess.run(sync, env=env, capture_output=True, text=True)
    assert "synced 0 new runs" in synced.stdout  # nothing new; nothing replaced
    assert {name: (board / name).read_bytes() for name in archives} == packed

    # a fresh work folder restores the records and has nothing left to run
    dry = subprocess.run(
        [*command[:-4], "--work", str(tmp_path / "fresh"), "--dry-run"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert "phase 1: tiny seeds 0-1: 2 runs, 0 left" in dry.stdout, dry.stdout + dry.stderr


def render_commands(monkeypatch, plan) -> list[list[str]]:
    """The commands a plan's --sync renders with (``sync._render``), recorded, none run."""
    from creditbench.tools.campaign import sync

    commands = []

    def recorded(command, **kwargs):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(sync.subprocess, "run", recorded)
    sync._render(plan)
    return commands


def test_the_tuning_plans_sync_renders_the_tuning_table(monkeypatch, tmp_path) -> None:
    """The tuning campaign's --sync writes the tuning rule's table beside its records (the plan's
    `pages: {tuning: ...}`), by the rule's own script, after the board."""

    plan = load_plan(plan_path("tuning"))
    assert plan.pages["tuning"].name == "tuning.md"
    assert plan.pages["tuning"].parent == plan.board
    commands = render_commands(monkeypatch, plan)
    rendered = [" ".join(c[1:4]) for c in commands]
    assert rendered[0] == "-m creditbench.tools.cli.main leaderboard"
    assert rendered[-1] == "-m creditbench.tools.campaign.tuning table"
    assert commands[-1][-2:] == ["--out", "docs/results/tuning/tuning.md"]


def test_the_standard_plans_sync_renders_the_method_pages_mechanism_rows(monkeypatch) -> None:
    """The standard campaign's --sync recomputes each method page's chain rows of "Where the
    mechanism acts" from the board it has just rendered (the plan's `pages: {methods: ...}`)."""

    commands = render_commands(monkeypatch, load_plan(plan_path("standard")))
    mechanism = [c for c in commands if c[1].endswith("mechanism_lines.py")]
    assert len(mechanism) == 1
    assert mechanism[0][2:] == [
        "--records", "docs/results/standard/runs.csv", "--pages", "docs/methods"
    ]  # fmt: skip


def test_the_standard_plans_sync_renders_otbs_ablation_block(monkeypatch) -> None:
    """The standard campaign's --sync rewrites OTB's ablation block (the plan's `pages:
    {ablation: ...}`), after the board it reads, so a re-run board cannot leave it stale."""

    commands = render_commands(monkeypatch, load_plan(plan_path("standard")))
    rendered = [" ".join(c[1:4]) for c in commands]
    ablation = [i for i, c in enumerate(commands) if c[1].endswith("ablation_lines.py")]
    assert len(ablation) == 1
    # the ladder's ends are this board's GRPO and OTB, read from the runs.csv just rendered
    assert commands[ablation[0]][2:] == [
        "--board", "docs/results/standard/runs.csv", "--page", "docs/methods/otb.md"
    ]  # fmt: skip
    board = rendered.index("-m creditbench.tools.cli.main leaderboard")
    assert board < ablation[0]


def test_a_phase_may_run_seeds_the_suite_does_not_list_and_the_plan_counts_them(
    tmp_path: Path, head: str
) -> None:
    """A confirmatory phase (seeds 10-19 of GRPO and the oracle) runs seeds outside the suite's
    own, as bench's --seeds does; the plan counts its runs, so the dry run and the board's
    manifest see them rather than an empty phase."""
    plan = tmp_path / "plan.yaml"
    text = GOOD.replace("HEAD", head).replace(
        "seeds: 0-1}", "seeds: 0-1}\n  - {setting: hard, seeds: 10-12}"
    )
    assert text != GOOD.replace("HEAD", head), "the change applies"
    plan.write_text(text)
    loaded = load_plan(plan)
    first, confirmatory = loaded.phases
    assert {run.seed for run in loaded.runs_of(confirmatory)} == {10, 11, 12}
    assert len(loaded.runs_of(confirmatory)) == 3 * len(loaded.runs_of(first)) // 2


def test_a_plan_of_the_claims_own_rows_alone_leaves_the_boards_records_as_they_are(
    monkeypatch, tmp_path
) -> None:
    """Protocol 2's third plan reads the board's records folder: its --sync packs its rows into
    the claims' own records and leaves the board's manifest and page to the board's plan (it
    rewrote the manifest with no runs, since the plan has no bench phase)."""
    import dataclasses

    import yaml

    from creditbench.tools.campaign import sync
    from creditbench.tools.campaign.tuning import tuned_suite
    from creditbench.tools.campaign.tuning_plans import protocol2_plans
    from creditbench.tools.campaign.tuning_rule import Config
    from creditbench.tools.campaign.worktrees import resolve_commit
    from creditbench.tools.suite import load_suite, suite_path

    choices = {m: Config(m, 5e-5) for m in ("grpo", "oracle", "dapo", "forking", "gtpo")}
    suite = tuned_suite(load_suite(suite_path("standard")), choices, horizon=160)
    suite_file = tmp_path / "tuned.yaml"
    suite_file.write_text(yaml.safe_dump(suite, sort_keys=False))
    texts = protocol2_plans(str(suite_file), suite, "", {"methods": []}, resolve_commit("HEAD"))
    (tmp_path / "claims.yaml").write_text(texts[2])
    board = tmp_path / "board"
    board.mkdir()
    manifest = board / "suite-tuned.json"
    manifest.write_text("the board plan's manifest")
    plan = dataclasses.replace(
        load_plan(tmp_path / "claims.yaml"), board=board, claims_rows=tmp_path / "claims-rows"
    )
    commands = []

    def recorded(command, **kwargs):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(sync.subprocess, "run", recorded)
    assert sync.sync(plan, tmp_path / "work") == 0
    assert manifest.read_text() == "the board plan's manifest"
    assert sorted(p.name for p in board.iterdir()) == ["suite-tuned.json"]
    assert not any(str(board) in " ".join(map(str, c)) for c in commands)  # nor rendered


def test_the_standard_plans_claims_phases_run_the_frozen_suite_as_their_pinned_commits_do(
    tmp_path,
) -> None:
    """A pinned commit older than reproduce --suite runs the standard suite alone: the standard
    plan's reproduce steps pass no --suite, and plan every own row's ten hard seeds without
    reading which seeds the board's methods have."""
    from creditbench.tools.campaign.run import phase_steps, step_argv

    plan = load_plan(plan_path("standard"))
    phase = next(p for p in plan.phases if p.reproduce == "gtpo")
    (step,), waits = phase_steps(plan, phase, [tmp_path / "no-records"])
    assert not waits and len(step.runs) == 10 and {r.entry for r in step.runs} == {"grpo_s"}
    argv = step_argv(plan, phase, step, tmp_path / "work", workers=2, threads=1)
    assert argv[:2] == ["reproduce", "gtpo"] and "--suite" not in argv
