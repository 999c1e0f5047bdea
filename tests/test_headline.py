"""The home page's headline is computed from the leaderboard's committed records: the verdict
in words, the board's own figure of the hard setting and a compact table; below it, the credit
picture shows the board's best method beside GRPO, the oracle and OPPO."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest
from fake_runs import make_run
from test_standard_board import CAMPAIGN

from creditbench.leaderboard import render
from creditbench.leaderboard.explain import credit_html, shown_columns
from creditbench.leaderboard.gains import ranked
from creditbench.leaderboard.headline import (
    CREDIT_END,
    CREDIT_START,
    END,
    PICTURE,
    START,
    Best,
    HeadlineError,
    board_best,
    credit_block,
    credit_methods,
    current,
    hard_board,
    headline_block,
    home_blocks,
    rewrite,
    seeds_each,
)
from creditbench.leaderboard.plots import FOREST_COLUMNS, drawn_numbers
from creditbench.leaderboard.worlds import END as WORLDS_END
from creditbench.leaderboard.worlds import START as WORLDS_START

ROOT = Path(__file__).resolve().parents[1]
HARD = "chain-hard-steps=10-slip_rate=0.1"


def board(tmp_path) -> Path:
    runs = tmp_path / "standard"
    for seed in range(5):
        for method in ("grpo", "oracle", "dapo"):
            make_run(runs, f"{HARD}-{method}-s{seed}", method, seed)
        make_run(runs, f"chain-easy-steps=8-rloo-s{seed}", "rloo", seed)  # not the hard setting
    render(runs, reps=200)
    return runs


def test_the_block_shows_the_verdict_a_titled_figure_and_a_compact_table(tmp_path):
    """The first screen in plain words: what wins, by how much, on which axis, in which
    setting; the figure titled with its setting; a table of positions and seeds. The intervals
    stay on the board's page, which the block links to."""
    runs = board(tmp_path)
    block = headline_block(runs / "runs.csv", board=str(runs), reps=200)
    assert block.startswith(START) and block.endswith(END)
    verdict = block.splitlines()[1]
    assert verdict.startswith("**The verdict, at equal compute")
    # dapo gains 0.1 where the oracle gains 0.3 at every seed: a third of the way
    assert "In the hard setting dapo beats GRPO by +0.050 AUC (0.33 of the way" in verdict
    assert "[" not in verdict  # no interval in the sentence: they are on the board
    figure = block.split("](", 1)[1].split(")", 1)[0]
    assert Path(figure).is_file() and Path(figure).name.startswith("gain_forest-")
    assert "**Figure: every method's gain over GRPO in the hard setting**" in block
    assert "| dapo | +0.33 | beats GRPO | 5 |" in block  # the easy setting's RLOO is not in it
    # the easy setting has RLOO alone, no GRPO: the sentence says so, the table has no column
    assert "the easy setting has no GRPO runs yet" in verdict and "easy: position" not in block
    assert f"[the standard board]({runs}/leaderboard.md)" in block
    both = tmp_path / "both"
    for seed in range(5):
        for method in ("grpo", "oracle", "dapo"):
            make_run(both, f"{HARD}-{method}-s{seed}", method, seed)
            make_run(both, f"chain-easy-steps=8-{method}-s{seed}", method, seed, steps=8)
    render(both, reps=200)
    block = headline_block(both / "runs.csv", board=str(both), reps=200)
    assert "in the easy setting dapo beats GRPO by +0.050 AUC" in block.splitlines()[1]
    assert "| dapo | +0.33 | +0.33 | beats GRPO | beats GRPO | 5 / 5 |" in block
    assert "| grpo | 0 (GRPO) | 0 (GRPO) | the baseline | the baseline | 5 / 5 |" in block


def test_the_headline_says_how_many_seeds_its_rows_hold_not_a_maximum():
    # the easy setting keeps 5 seeds where they settle a row and 10 elsewhere: "up to 10" (or
    # "so far") would read as an unfinished campaign once every planned seed is in
    assert seeds_each(pd.DataFrame({"n_seeds": [10, 5, 10]})) == "5 to 10 seeds each"
    assert seeds_each(pd.DataFrame({"n_seeds": [10, 10]})) == "10 seeds each"
    assert seeds_each(pd.DataFrame({"n_seeds": [1, 1]})) == "one seed each"


def test_rewrite_replaces_only_the_marked_block():
    page = f"# Home\n\nintro\n\n{START}\nold\n{END}\n\nrest\n"
    new = rewrite(page, f"{START}\nnew\n{END}")
    assert new == f"# Home\n\nintro\n\n{START}\nnew\n{END}\n\nrest\n"
    assert current(new) == f"{START}\nnew\n{END}"
    with pytest.raises(HeadlineError, match="exactly one pair"):
        rewrite("no markers", "x")


def test_records_without_the_hard_setting_give_no_headline(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, "chain-easy-steps=8-grpo-s0", "grpo", 0)
    with pytest.raises(HeadlineError, match="no finished run of the hard setting"):
        headline_block(runs)


@pytest.mark.records  # the committed records against this code: their own step of .ci/run
def test_the_home_page_headline_is_the_one_its_committed_records_give():
    """With the standard board committed, the home page's blocks are recomputed from its
    records and must match, and the credit picture shows the methods its block names; before
    the records exist, the page shows no computed headline."""
    page = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    records = ROOT / "docs" / "results" / "standard" / "runs.csv"
    if not records.exists():
        assert current(page) is None, "a computed headline without the records it comes from"
        return
    home = home_blocks(records, reps=2000)
    stale = f"docs/index.md is not the page this code renders from the records: {CAMPAIGN}"
    assert current(page) == home.headline, stale
    assert current(page, CREDIT_START, CREDIT_END) == home.credit, stale
    if "](" in home.headline:  # the gain figure, once GRPO's runs are in
        figure = home.headline.split("](", 1)[1].split(")", 1)[0]
        # the figure plots the numbers these records give, in the board's order
        frame = hard_board(records, reps=2000)
        rows = ranked(frame[frame["method"] != "grpo"])
        expected = rows[["method", *FOREST_COLUMNS]].values.tolist()
        drawn = drawn_numbers((ROOT / "docs" / figure).read_bytes())
        assert drawn is not None and [r[0] for r in drawn] == [r[0] for r in expected], stale
        for mine, theirs in zip(drawn, expected, strict=True):
            assert mine[1:] == pytest.approx(theirs[1:], abs=1e-6, nan_ok=True), (mine[0], stale)
    picture = ROOT / "docs" / PICTURE
    shown = shown_columns((picture / "credit.html").read_text(encoding="utf-8"))
    assert shown == home.methods, stale
    assert (picture / "credit.png").is_file()


def test_the_credit_picture_shows_the_boards_best_beside_grpo_the_oracle_and_oppo(tmp_path):
    frame = hard_board(board(tmp_path) / "runs.csv", reps=200)
    assert board_best(frame) == Best("dapo", "2", [])  # oracle 1, dapo 2, GRPO 3
    assert credit_methods("dapo") == ["grpo", "oracle", "dapo", "oppo"]
    assert credit_methods("oppo") == ["grpo", "oracle", "vineppo", "oppo"]  # no column twice
    assert credit_methods(None) == ["grpo", "oracle", "vineppo", "oppo"]
    assert "dapo, the board's best method besides the references, at rank 2" in credit_block(
        board_best(frame)
    )
    no_grpo = tmp_path / "no_grpo"
    make_run(no_grpo, f"{HARD}-dapo-s0", "dapo", 0)
    assert board_best(hard_board(no_grpo, reps=50)) is None
    assert "joins it once the board ranks a method" in credit_block(None)


def gains(**rows):
    """A board's rows: ``method=(gain, low, high)``; GRPO's gain is 0 by definition."""
    data = [(m, g, lo, hi) for m, (g, lo, hi) in rows.items()]
    return pd.DataFrame(data, columns=["method", "gain_auc", "gain_auc_low", "gain_auc_high"])


def test_the_boards_best_is_placed_by_the_boards_own_ranking_references_included():
    # a leader the oracle is not beyond shares the oracle's rank
    frame = gains(grpo=(0, 0, 0), oracle=(0.3, 0.1, 0.5), a=(0.2, 0.15, 0.25),
                  b=(0.03, -0.02, 0.08))  # fmt: skip
    assert board_best(frame) == Best("a", "=1", ["oracle"])
    # every method below GRPO: the best is still named, at its own rank below GRPO's
    frame = gains(grpo=(0, 0, 0), oracle=(0.3, 0.2, 0.4), a=(-0.1, -0.15, -0.05),
                  b=(-0.12, -0.14, -0.10))  # fmt: skip
    best = board_best(frame)
    assert best == Best("a", "=3", ["b"])
    text = credit_block(best)
    assert "a, the board's best method besides the references, at rank =3 with b (as many" in text
    # VinePPO leading is named as the leader, not as a stand-in
    vine = credit_block(Best("vineppo", "1", []))
    assert "vineppo, the board's best method" in vine and "joins it" not in vine
    # OPPO leading: its own phrase says so, ties included, and VinePPO takes the third column
    oppo = credit_block(Best("oppo", "=2", ["otb"]))
    assert (
        "OPPO (a self-oracle's evidence; the board's best method besides the references, " in oppo
    )
    assert "at rank =2 with otb (as many rows beyond each of them)" in oppo
    # a best the board ranks level with GRPO is first by its point estimate only
    level = credit_block(Best("drgrpo", "=2", ["otb", "grpo"]))
    assert "drgrpo, first, by its point estimate, of the methods the board ranks level" in level
    assert "GRPO: rank =2 with otb, grpo (as many" in level
    assert "--methods grpo,oracle,vineppo,oppo" in oppo


def _script():
    spec = importlib.util.spec_from_file_location(
        "home_headline", ROOT / "scripts" / "home_headline.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_says_when_the_picture_no_longer_shows_the_boards_best(tmp_path, capsys):
    runs = board(tmp_path)
    page = tmp_path / "index.md"
    blocks = [f"{START}\n{END}", f"{WORLDS_START}\n{WORLDS_END}", f"{CREDIT_START}\n{CREDIT_END}"]
    page.write_text("# Home\n\n" + "\n\n".join(blocks) + "\n")
    picture = tmp_path / PICTURE
    picture.mkdir(parents=True)

    def draw(columns):
        response = {"prompt": "p", "tokens": ["a"], "first_wrong": [], "reward": 0.0}
        response["advantages"] = {c: [0.5] for c in columns}
        (picture / "credit.html").write_text(credit_html([response], columns, "t"))

    draw(["grpo", "oracle", "oppo", "vineppo"])  # drawn before DAPO led the board
    assert _script().main([str(runs / "runs.csv"), str(page)]) == 1
    assert "rerun with --explain" in capsys.readouterr().err
    text = page.read_text()
    assert "--methods grpo,oracle,dapo,oppo" in current(text, CREDIT_START, CREDIT_END)
    assert "dapo beats GRPO by +0.050 AUC" in current(text)
    # the worlds' records are found beside the page: none here
    assert "no runs yet: chain, countdown, ledger" in current(text, WORLDS_START, WORLDS_END)
    draw(["grpo", "oracle", "dapo", "oppo"])
    assert _script().main([str(runs / "runs.csv"), str(page)]) == 0
    assert _script().main([str(page)]) == 2  # usage


def test_before_grpos_runs_the_block_says_so_and_shows_no_figure(tmp_path):
    runs = tmp_path / "standard"
    make_run(runs, f"{HARD}-dapo-s0", "dapo", 0)
    block = headline_block(runs, reps=200)
    assert block.startswith(START) and block.endswith(END)
    assert "GRPO not yet" in block and "](" not in block
