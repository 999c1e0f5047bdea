"""The leaderboard end to end on fake run directories: collect, render, and a real browser.

Three methods x five seeds (the fewest the claim rule reads) of finished runs are written
with RunDir exactly as the trainer lays them out (config.yaml, metrics.jsonl with step and eval
records, summary.json), plus an unfinished run, a corrupt one, a failed one and a duplicate of
a finished one.
"""

from __future__ import annotations

import base64
import csv
import json
import re
import shutil

import pytest
from browser import check_pages, chromium
from fake_runs import CREDIT_AUROC, FILLER_DRIFT, FRACTIONS, SLOPE, make_run

from creditbench.leaderboard import LeaderboardError, collect_runs, render
from creditbench.tools.cli.main import main as cli_main


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results"
    for method in SLOPE:
        for seed in range(5):
            make_run(root, f"{method}-chain-s{seed}", method, seed)
    make_run(root, "grpo-unfinished", "grpo", 7, summary=False)
    corrupt = make_run(root, "oracle-corrupt", "oracle", 8)
    corrupt.summary_path.write_text('{"status": "fini')
    make_run(root, "dapo-failed", "dapo", 9, status="non-finite")
    shutil.copytree(root / "grpo-chain-s1", root / "zz-copy" / "grpo-chain-s1")
    (root / "link-to-oracle").symlink_to(root / "oracle-chain-s2", target_is_directory=True)
    (root / "zz-copy" / "loop").symlink_to(root, target_is_directory=True)  # a link cycle
    return root


def test_collect_skips_bad_runs_with_named_warnings_and_never_double_counts(results):
    table, warnings = collect_runs(results)
    runs = table[table["kind"] == "run"]
    assert len(runs) == 15
    assert sorted(runs["run"]) == sorted(f"{m}-chain-s{s}" for m in SLOPE for s in range(5))
    assert not runs.duplicated(["method", "task", "options", "seed"]).any()
    assert len(table[table["kind"] == "eval"]) == 15 * len(FRACTIONS)
    text = "\n".join(warnings)
    assert re.search(r"grpo-unfinished: .*unfinished", text)
    assert re.search(r"oracle-corrupt: .*corrupt summary\.json", text)
    assert re.search(r"dapo-failed: .*non-finite", text)
    assert re.search(r"zz-copy/grpo-chain-s1: .*duplicate of grpo-chain-s1", text)
    assert re.search(r"link-to-oracle: the same directory as oracle-chain-s2", text)
    oracle0 = runs[runs["run"] == "oracle-chain-s0"].iloc[0]
    assert oracle0["final_accuracy"] == pytest.approx(0.7)
    assert oracle0["auc"] == pytest.approx(0.3 + 0.4 / 2)
    assert oracle0["options"] == "steps=4"
    assert oracle0["filler_entropy_drift"] == pytest.approx(0.0)
    grpo0 = runs[runs["run"] == "grpo-chain-s0"].iloc[0]
    assert grpo0["filler_entropy_drift"] == pytest.approx(-0.4)
    assert grpo0["credit_auroc"] == pytest.approx(0.5)


def test_render_writes_every_file_with_the_methods_and_one_row_per_run(results, tmp_path):
    out = tmp_path / "board"
    paths = render(results, out, reps=200)
    for key in (
        "markdown",
        "csv",
        "runs_csv",
        "html",
        "gain_forest-chain-steps-4",
        "curves-chain-steps-4",
        "multiples-chain-steps-4",
        "credit_vs_gain",
        "credit",
    ):
        assert paths[key].is_file() and paths[key].stat().st_size > 0, key
        assert paths[key].parent == out
    assert "gain_vs_length" not in paths  # one chain length only
    md = paths["markdown"].read_text()
    table_rows = [line for line in md.splitlines() if line.startswith("| ")]
    for method in SLOPE:
        assert any(f"| {method} |" in line for line in table_rows), method
    # oracle is best, alone; the rows follow the AUC gain over GRPO: oracle, dapo, grpo
    assert re.search(r"^\| 1 \| oracle \| 5 \| 0\.\d+ \[[^|]*\] \| \+0\.150 \[", md, re.M)
    order = [m for line in table_rows for m in SLOPE if line.startswith(f"| {m} |")]
    ranked = [line.split(" | ")[1] for line in table_rows if re.match(r"\| =?\d+ \| ", line)]
    assert ranked[:3] == ["oracle", "dapo", "grpo"], (ranked, order)
    # the verdict is computed from the intervals: dapo and oracle ahead, beyond their intervals
    assert "Ahead of GRPO in AUC (both 95% intervals above zero): dapo (+0.050 [" in md
    assert "Oracle credit, the reference, is ahead of GRPO by +0.150" in md
    for name in ("grpo-unfinished", "oracle-corrupt", "dapo-failed", "zz-copy/grpo-chain-s1"):
        assert name in md
    with open(paths["csv"]) as f:
        stats_rows = list(csv.DictReader(f))
    assert sorted(r["method"] for r in stats_rows) == sorted(SLOPE)
    assert {r["n_seeds"] for r in stats_rows} == {"5"}
    with open(paths["runs_csv"]) as f:
        run_rows = list(csv.DictReader(f))
    assert len(run_rows) == 15 * (len(FRACTIONS) + 1)
    assert len({r["run"] for r in run_rows}) == 15
    assert not list(out.glob(".*.tmp"))


def test_a_rerender_removes_the_figures_it_no_longer_draws_and_nothing_else(results, tmp_path):
    out = tmp_path / "board"
    render(results, out, reps=100)
    page = out / "leaderboard.md"
    # an earlier render showed two figures this one does not draw
    stale = [out / "curves-chain-steps-99.png", out / "gain_vs_length.png"]
    page.write_text(page.read_text() + "".join(f"\n![old]({p.name})\n" for p in stale))
    # the user's own pictures, two of them named as a board names its figures
    kept = [out / "photo.png", out / "curves.png", out / "credit_vs_gain-mine.png"]
    unshown = out / "multiples-chain-steps-7.png"  # a board's name, but no page showed it
    for path in [*stale, *kept, unshown]:
        path.write_bytes(b"old")
    paths = render(results, out, reps=100)
    assert not any(path.exists() for path in stale)
    assert all(path.read_bytes() == b"old" for path in [*kept, unshown])
    assert paths["curves-chain-steps-4"].stat().st_size > 3


def test_render_plots_gain_against_chain_length_when_lengths_vary(tmp_path):
    root = tmp_path / "results"
    for steps in (4, 8):
        for method in ("grpo", "oracle"):
            for seed in range(2):
                make_run(root, f"{method}-l{steps}-s{seed}", method, seed, steps=steps)
    paths = render(root, reps=100)
    assert paths["gain_vs_length"].is_file()
    md = paths["markdown"].read_text()
    assert "## chain · steps=4" in md and "## chain · steps=8" in md


def test_a_one_seed_board_claims_no_intervals_in_its_header_or_captions(tmp_path):
    root = tmp_path / "results"
    for method in ("grpo", "oracle", "dapo"):
        make_run(root, f"{method}-s0", method, 0)
    md = render(root, reps=50)["markdown"].read_text()
    page = md.split("How to read:")[0]
    assert "one seed a method, so no intervals: by the point estimate" in page
    assert "95%" not in page and "Gain over GRPO per method (one seed: points)" in page
    make_run(root, "grpo-s1", "grpo", 1)  # a second seed of one method: intervals again
    make_run(root, "oracle-s1", "oracle", 1)
    md = render(root, reps=50)["markdown"].read_text()
    assert "brackets are 95% intervals" in md and "per method, 95% intervals" in md


def test_a_suite_manifest_makes_the_page_say_how_much_of_the_suite_it_holds(tmp_path):
    root = tmp_path / "results"
    manifest = {"suite": "demo", "runs": []}
    for steps in (4, 8):
        for seed in range(2):
            name = f"grpo-l{steps}-s{seed}"
            manifest["runs"].append({"name": name, "setting": f"chain-steps={steps}"})
    make_run(root, "grpo-l4-s0", "grpo", 0, steps=4)
    make_run(root, "grpo-l4-s1", "grpo", 1, steps=4)
    make_run(root, "grpo-l8-s0", "grpo", 0, steps=8, summary=False)  # started, not finished
    (root / "suite-demo.json").write_text(json.dumps(manifest))
    md = render(root, reps=50)["markdown"].read_text()
    assert "Suite demo: 2 of 4 runs finished (chain-steps=4 2/2, chain-steps=8 0/2)" in md
    make_run(root, "grpo-l8-s0b", "grpo", 0, steps=8)
    make_run(root, "grpo-l8-s1", "grpo", 1, steps=8)
    manifest["runs"][2]["name"] = "grpo-l8-s0b"
    (root / "suite-demo.json").write_text(json.dumps(manifest))
    (root / "suite-broken.json").write_text("{not json")
    md = render(root, reps=50)["markdown"].read_text()
    assert "Suite demo: all 4 runs finished." in md
    assert "suite-broken.json: unreadable suite manifest" in md
    # the board is named after its suite, not the folder it was written to
    assert md.startswith("# creditbench leaderboard: suite demo\n")
    # a committed runs.csv rendered with the folder of later runs, both beside the same
    # manifest: the suite is counted once
    board = tmp_path / "board"
    render(root, board, reps=50, records_only=True)
    shutil.copy(root / "suite-demo.json", board / "suite-demo.json")
    md = render([board / "runs.csv", root], board, reps=50)["markdown"].read_text()
    assert md.count("Suite demo: all 4 runs finished.") == 1
    plain = tmp_path / "plain"
    make_run(plain, "grpo-s0", "grpo", 0)
    assert (
        render(plain, reps=50)["markdown"]
        .read_text()
        .startswith("# creditbench leaderboard: plain\n")
    )


def test_swept_settings_and_method_options_are_separate_rows_not_duplicates(tmp_path):
    root = tmp_path / "results"
    for prompts in (4, 16):
        make_run(root, f"grpo-p{prompts}", "grpo", 0, rollout={"prompts_per_step": prompts})
    make_run(root, "dapo-a", "dapo", 0, method_options={"eps_high": 0.2})
    make_run(root, "dapo-b", "dapo", 0, method_options={"eps_high": 0.28})
    table, warnings = collect_runs(root)
    runs = table[table["kind"] == "run"].set_index("run")
    assert warnings == []
    assert runs.loc["grpo-p4", "setting"] != runs.loc["grpo-p16", "setting"]
    assert "rollout.prompts_per_step=16" in runs.loc["grpo-p16", "setting"]
    assert runs.loc["dapo-a", "method"] == "dapo[eps_high=0.2]"
    assert runs.loc["dapo-b", "method"] == "dapo[eps_high=0.28]"


def test_a_budget_each_task_setting_fixes_is_not_a_setting_but_a_swept_one_is(tmp_path):
    """The standard suite's hard and easy chains carry their own budgets: the task options tell
    them apart, so the budget adds nothing to their label (nor to their figures' file names);
    a budget swept within one task setting still separates its runs."""
    fixed = tmp_path / "fixed"
    make_run(fixed, "easy-grpo-s0", "grpo", 0, steps=8, budget={"amount": 3e12})
    make_run(fixed, "hard-grpo-s0", "grpo", 0, steps=10, budget={"amount": 4.5e12})
    table, _ = collect_runs(fixed)
    assert set(table.loc[table["kind"] == "run", "setting"]) == {"default"}
    swept = tmp_path / "swept"
    make_run(swept, "easy-small-s0", "grpo", 0, steps=8, budget={"amount": 3e12})
    make_run(swept, "easy-large-s0", "grpo", 0, steps=8, budget={"amount": 6e12})
    make_run(swept, "hard-grpo-s0", "grpo", 0, steps=10, budget={"amount": 4.5e12})
    table = collect_runs(swept)[0]
    runs = table[table["kind"] == "run"].set_index("run")
    assert runs.loc["easy-small-s0", "setting"] != runs.loc["easy-large-s0", "setting"]
    assert "budget.amount=4500000000000.0" in runs.loc["hard-grpo-s0", "setting"]


def test_paper_numbers_appear_only_where_the_task_matches(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import creditbench.reference.cards as cards

    card = SimpleNamespace(
        title="A paper",
        arxiv="2402.03300",
        methods=(SimpleNamespace(name="grpo", label="GRPO", registered=True),),
        results=(
            SimpleNamespace(
                table="Table 9",
                benchmark="GSM-8K",
                metric="pass@1",
                model="M-7B",
                rows={"GRPO": 88.2, "Other": 80.0},
                verified=True,
                unverified_rows=frozenset({"Other"}),
            ),
            SimpleNamespace(
                table="Table 9",
                benchmark="AIME 2024",
                metric="avg@32",
                model="M-7B",
                rows={"GRPO": 12.0},
                verified=True,
                unverified_rows=frozenset(),
            ),
        ),
    )
    monkeypatch.setattr(cards, "load_cards", lambda: {"paper": card})
    root = tmp_path / "results"
    make_run(root, "grpo-gsm8k", "grpo", 0, task="gsm8k")
    make_run(root, "grpo-chain", "grpo", 0)
    md = render(root, reps=50)["markdown"].read_text()
    chain_part, gsm8k_part = md.split("## gsm8k")
    assert "reported by the paper" not in chain_part
    assert "Reported by the paper" in gsm8k_part
    row = next(line for line in gsm8k_part.splitlines() if "| GRPO |" in line)
    assert "88.2" in row and "40.0" in row  # ours: final accuracy 0.4 as a percentage
    assert "80 (unverified)" in gsm8k_part and "not run" in gsm8k_part
    assert "AIME" not in md


def test_render_refuses_an_empty_or_missing_results_directory(tmp_path):
    with pytest.raises(LeaderboardError, match="no such results directory"):
        render(tmp_path / "nowhere")
    make_run(tmp_path / "r", "grpo-x", "grpo", 0, summary=False)
    with pytest.raises(LeaderboardError, match=r"no finished run.*grpo-x"):
        render(tmp_path / "r")
    assert not (tmp_path / "r" / "leaderboard.md").exists()


def test_cli_leaderboard_renders_and_exits_2_on_an_empty_directory(results, tmp_path, capsys):
    assert cli_main(["leaderboard", str(results), "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "leaderboard.html").is_file()
    (tmp_path / "empty").mkdir()
    assert cli_main(["leaderboard", str(tmp_path / "empty")]) == 2
    assert "no finished run" in capsys.readouterr().err


@pytest.mark.skipif(chromium() is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_html_page_in_headless_chromium_fits_1280px_and_embeds_its_images(results, tmp_path):
    paths = render(results, tmp_path / "board", reps=200)
    problems = check_pages(paths["html"].parent, ["leaderboard.html"], tmp_path / "shots")
    assert problems == []  # every table fits, every image loads, nothing fetched from outside
    assert (tmp_path / "shots" / "leaderboard.html.png").stat().st_size > 10_000
    page = paths["html"].read_text()
    assert page.count("<table>") >= 2 and "credit AUROC" in page
    images = re.findall(r'<img[^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) >= 4
    for data in images:
        png = base64.b64decode(data)
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    assert not re.search(r'(src|href)="(https?:)?//', page)  # no external assets


def test_provenance_names_the_commits_and_packages_of_the_runs():
    import pandas as pd

    from creditbench.leaderboard.report import provenance

    rows = [
        {"kind": "run", "commit": "1" * 40, "git_dirty": False, "packages": '{"torch": "2.1"}'},
        {"kind": "run", "commit": "1" * 40, "git_dirty": True, "packages": '{"torch": "2.1"}'},
        {"kind": "run", "commit": "2" * 40, "git_dirty": False, "packages": '{"torch": "2.3"}'},
        {"kind": "run", "commit": "", "git_dirty": False, "packages": "{}"},  # no environment
        {"kind": "eval", "commit": None, "git_dirty": None, "packages": None},
    ]
    text = provenance(pd.DataFrame(rows))
    assert "111111111111 (2 runs)" in text and "222222222222 (1 runs)" in text
    assert "1 with uncommitted changes" in text
    assert "torch 2.1, 2.3" in text
    assert provenance(pd.DataFrame(rows[3:])) == "No run records its environment."


def test_reset_methods_carry_the_compute_matching_note(tmp_path, monkeypatch):
    for table, value in ((SLOPE, 0.15), (CREDIT_AUROC, 0.55), (FILLER_DRIFT, -0.1)):
        monkeypatch.setitem(table, "srpo", value)
    root = tmp_path / "results"
    for seed in range(2):
        make_run(root, f"grpo-s{seed}", "grpo", seed)
    render(root, tmp_path / "without", reps=50)
    assert "Compute matching" not in (tmp_path / "without" / "leaderboard.md").read_text()
    for seed in range(2):
        make_run(root, f"srpo-s{seed}", "srpo", seed)
    render(root, tmp_path / "with", reps=50)
    text = (tmp_path / "with" / "leaderboard.md").read_text()
    assert "Compute matching of srpo: this table compares at equal FLOPs" in text


def test_the_length_series_skips_groups_without_the_option():
    """The hard setting has options the easy one lacks (pandas holds the missing values as NaN):
    the series is still found where one option varies, and the others are left out."""
    import pandas as pd

    from creditbench.leaderboard.plots import length_series

    methods = pd.DataFrame(
        {
            "options": ["steps=8", "steps=10", "slip_rate=0.1,steps=10", "default"],
            "task": ["chain"] * 4,
            "setting": ["a", "a", "b", "c"],
            "method": ["grpo"] * 4,
        }
    )
    name, frame = length_series(methods)
    assert name == "steps"
    assert sorted(frame.loc[frame["setting"] == "a", "option_value"]) == [8.0, 10.0]
    # only slip_rate differs in "b"'s options from a setting of its own: no series of it
    assert length_series(methods.iloc[2:]) is None


def test_markdown_shows_a_contributed_label_as_text_never_as_html():
    from creditbench.leaderboard.blocks import to_markdown

    label = "<script>alert(1)</script>"
    text = to_markdown(
        [("h1", f"board {label}"), ("p", f"by {label} & co"), ("table", ["method"], [[label]])]
    )
    assert "<script>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "&amp; co" in text


def test_crowded_point_labels_do_not_overlap():
    """credit_vs_gain names every method beside its point; methods near chance precision and
    zero gain crowd one spot, where the names were drawn on top of each other."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from creditbench.leaderboard.plots import spread_labels

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    points = [(f"method_{i}", 0.10 + 0.001 * i, 0.002 * (i % 3)) for i in range(12)]
    points.append(("oracle", 0.8, 0.05))
    ax.plot([p[1] for p in points], [p[2] for p in points], "o")
    texts = spread_labels(ax, points)
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in texts]
    assert len(boxes) == 13
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    plt.close(fig)
