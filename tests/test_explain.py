"""Credit you can see: the responses a run logs, and the picture ``creditbench explain`` draws."""

from __future__ import annotations

import io
import re

import pytest

from creditbench.harness.config import load_config
from creditbench.harness.records.rundir import RunDir
from creditbench.harness.training.trainer import Trainer
from creditbench.leaderboard.explain import credit_html, credit_png, side_by_side
from creditbench.tools.cli.main import main as cli_main

TASK = "task_options={steps: 2, train_size: 64, eval_size: 8}"


def settings(policy, *extra):
    return [
        TASK,
        f"model.path={policy}",
        "rollout.prompts_per_step=2",
        "rollout.group_size=4",
        "rollout.max_new_tokens=24",
        "budget.unit=steps",
        "budget.amount=4",
        "budget.eval_fractions=[0.0, 0.5, 1.0]",
        "eval.n_problems=4",
        "eval.k_samples=1",
        *extra,
    ]


@pytest.fixture(scope="module")
def grpo_run(nano_policy, tmp_path_factory):
    path = tmp_path_factory.mktemp("runs") / "grpo"
    config = load_config(None, ["method=grpo", *settings(nano_policy)])
    Trainer(config, path).train()
    return path


def test_a_run_logs_the_batch_before_each_evaluation_with_grpos_advantages(grpo_run):
    records = RunDir(grpo_run).read_responses()
    evals = [r["eval"]["step"] for r in RunDir(grpo_run).read_metrics() if "eval" in r]
    assert [r["step"] for r in records] == [s for s in evals if s > 0] == [2, 4]
    for record in records:
        responses = record["responses"]
        assert len(responses) == 8  # the whole batch: 2 groups of 4
        for group in {r["group"] for r in responses}:
            rows = [r for r in responses if r["group"] == group]
            rewards = [r["reward"] for r in rows]
            mean = sum(rewards) / len(rewards)
            std = (sum((x - mean) ** 2 for x in rewards) / (len(rewards) - 1)) ** 0.5
            for r in rows:
                assert len(r["tokens"]) == len(r["advantages"]) > 0
                # GRPO: one advantage per response, (r - mean) / (std + eps)
                expected = (r["reward"] - mean) / (std + 1e-6)
                assert r["advantages"] == pytest.approx([expected] * len(r["tokens"]), abs=1e-5)
                assert all(0 <= i < len(r["tokens"]) for i in r["first_wrong"])


def test_a_resumed_run_keeps_only_the_responses_of_the_steps_it_keeps(tmp_path):
    run = RunDir(tmp_path / "r")
    for step in (1, 2, 3, 4):
        run.append_metrics({"step": step})
        run.append_responses({"step": step, "responses": []})
    with open(run.responses_path, "ab") as f:
        f.write(b'{"step": 5, "resp')  # torn by a kill mid-append
    assert [r["step"] for r in run.read_responses()] == [1, 2, 3, 4]
    run.truncate_metrics(after_step=2)
    assert [r["step"] for r in run.read_responses()] == [1, 2]


def test_explain_run_draws_a_logged_step_and_names_the_logged_ones_otherwise(
    grpo_run, tmp_path, capsys
):
    out = tmp_path / "picture"
    assert cli_main(["explain", str(grpo_run), "--step", "4", "--out", str(out)]) == 0
    page = (out / "credit.html").read_text()
    # --responses (default 3) failed responses of the step, as with --methods; not all eight
    logged = [r for r in RunDir(grpo_run).read_responses() if r["step"] == 4][0]["responses"]
    failed = sum(r["reward"] <= 0.5 for r in logged)
    assert failed >= 1
    assert page.count('<div class="panel">') == min(3, failed) and "grpo" in page
    assert (out / "credit.png").read_bytes().startswith(b"\x89PNG")
    assert (
        cli_main(["explain", str(grpo_run), "--step", "4", "--out", str(out), "--responses", "1"])
        == 0
    )
    assert (out / "credit.html").read_text().count('<div class="panel">') == 1
    capsys.readouterr()
    assert cli_main(["explain", str(grpo_run), "--step", "3"]) == 2
    assert "--step: 3 was not logged; logged steps: 2, 4" in capsys.readouterr().err
    assert cli_main(["explain", str(tmp_path)]) == 2
    assert "holds no run" in capsys.readouterr().err
    assert cli_main(["explain", str(grpo_run), "--methods", "grpo"]) == 2
    assert "not both" in capsys.readouterr().err


def test_the_page_colours_by_sign_leaves_zero_white_and_underlines_the_first_wrong_step():
    response = {
        "prompt": "p",
        "reward": 0.0,
        "tokens": ["a", "b", "c", "\n", "d"],
        "first_wrong": [1, 2],
        "advantages": {"m": [0.0, -2.0, -1.0, 0.0, 0.5], "other": None},
    }
    page = credit_html([response], ["m", "other"], "t")
    spans = re.findall(r"<span([^>]*)>([^<]*)</span>", page)
    assert [text for _, text in spans] == ["a", "b", "c", "\n", "d"]
    assert "background" not in spans[0][0] and "wrong" not in spans[0][0]
    assert 'class="wrong"' in spans[1][0] and "rgba(214,38,40,0.85)" in spans[1][0]  # full red
    assert "rgba(214,38,40,0.42)" in spans[2][0]  # half of the largest |A|
    assert spans[4][0].count("rgba(33,102,204") == 1  # positive: blue
    assert "not in this column" in page
    assert credit_png([response], ["m", "other"], "t").startswith(b"\x89PNG")


def test_the_picture_fits_a_page_column_at_its_own_size_panels_as_wide_as_their_lines():
    from PIL import Image

    from creditbench.leaderboard.explain import DPI, MAX_PICTURE_INCHES, MIN_PANEL_CHARS

    tokens = list("so 21+5=26\nthen 26*2=52\nAnswer: 52")  # longest line 12 characters

    def width_px(n_columns: int, text=tokens) -> int:
        columns = [f"m{i}" for i in range(n_columns)]
        response = {"prompt": "p", "reward": 0.0, "tokens": text, "first_wrong": [0],
                    "advantages": {c: [-1.0] * len(text) for c in columns}}  # fmt: skip
        png = credit_png([response], columns, "t")
        return Image.open(io.BytesIO(png)).size[0]

    one_panel = round((MIN_PANEL_CHARS * 0.075 + 2 * 0.25) * DPI)
    two_panels = round((2 * MIN_PANEL_CHARS * 0.075 + 3 * 0.25) * DPI)
    assert abs(width_px(1) - one_panel) <= 2  # short lines: the narrowest panel, not 44 chars
    assert abs(width_px(4) - two_panels) <= 2  # four panels: two rows of two
    assert width_px(21) <= MAX_PICTURE_INCHES * DPI  # every method: rows of three, not six
    long_line = list("x" * 40)
    assert width_px(1, long_line) > one_panel + 15 * 0.075 * DPI  # a long line widens it


def test_side_by_side_matches_the_same_response_across_methods():
    def sample(tokens, reward, wrong, adv):
        return {
            "prompt": "p",
            "tokens": tokens,
            "reward": reward,
            "first_wrong": wrong,
            "advantages": adv,
            "group": 0,
        }

    a = [
        sample(["x"], 0.0, [0], [-1.0]),
        sample(["y"], 1.0, [], [1.0]),
        sample(["z"], 0.0, [0], [-1.0]),
    ]
    b = [sample(["z"], 0.0, [0], [-0.3]), sample(["x"], 0.0, [0], [-0.1])]
    picked = side_by_side({"a": a, "b": b}, 5)
    assert [p["tokens"] for p in picked] == [["x"], ["z"]]  # failed, with a wrong step
    assert picked[0]["advantages"] == {"a": [-1.0], "b": [-0.1]}
    c = [sample(["w"], 0.0, [0], [0.0])]
    assert side_by_side({"a": a, "c": c}, 1)[0]["advantages"]["c"] is None


def test_explain_methods_puts_methods_on_the_same_fresh_responses(nano_policy, tmp_path):
    out = tmp_path / "side"
    argv = ["explain", "--methods", "grpo,oracle", "--out", str(out), "--responses", "2"]
    for item in settings(nano_policy, "rollout.prompts_per_step=3"):
        argv += ["--set", item]
    assert cli_main(argv) == 0
    page = (out / "credit.html").read_text()
    assert "<h4>grpo</h4>" in page and "<h4>oracle</h4>" in page
    assert "not in this column" not in page  # both sample the plain way: the same responses
    assert not re.search(r'(src|href)="(https?:)?//', page)


def test_terminal_text_colours_each_token_and_underlines_the_first_wrong_step():
    import re

    from creditbench.leaderboard.explain import credit_ansi

    response = {
        "reward": 0.0,
        "first_wrong": [1],
        "tokens": ["so ", "1+1=3\n", "Answer"],
        "advantages": {"grpo": [-1.0, -0.5, 0.0], "oracle": None},
    }
    text = credit_ansi([response], ["grpo", "oracle"], "title")
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert "so 1+1=3\nAnswer" in plain and "(not in this batch)" in plain
    first, second, third = re.findall(r"\x1b\[48;2;(\d+);(\d+);(\d+);", text)
    assert int(first[0]) > int(first[1])  # blame is red
    assert second != first and third == ("255", "255", "255")  # half as strong; 0 stays white
    assert text.count("\x1b[4m") == 1  # the first wrong step only


def test_explain_draws_on_the_terminal_only_when_stdout_is_one(
    grpo_run, tmp_path, capsys, monkeypatch
):
    import sys

    argv = ["explain", str(grpo_run), "--step", "4", "--out", str(tmp_path / "p")]
    assert cli_main(argv) == 0
    assert "\x1b[" not in capsys.readouterr().out  # piped: the two paths only
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert "\x1b[48;2;" in out and out.rstrip().endswith("credit.png")
