"""The board across worlds (leaderboard/worlds.py): per-seed positions on each world's own
GRPO -> oracle scale, their IQM pooled over worlds and settings with a stratified bootstrap,
each claim's verdict in a world from its settings' verdicts, and the home page's block the
committed records give."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from creditbench.leaderboard.claims import HOLDS, NOT_RESOLVED, NOT_TESTABLE, REVERSED
from creditbench.leaderboard.headline import current
from creditbench.leaderboard.stats import stratified_interval
from creditbench.leaderboard.worlds import (
    END,
    NO_RUNS,
    START,
    World,
    aggregate_positions,
    read_worlds,
    seed_positions,
    world_verdict,
    worlds_block,
)
from creditbench.reference.cards import load_cards

ROOT = Path(__file__).resolve().parents[1]


def runs(world: str, label: str, aucs: dict[str, list[float]]) -> pd.DataFrame:
    """Run rows of one world and setting: ``aucs[method][seed]``."""
    rows = [
        {
            "run": f"{world}-{label}-x=1-{method}-s{seed}",
            "kind": "run",
            "task": world,
            "method": method,
            "seed": seed,
            "final_sampled_accuracy": auc,
            "auc_sampled_accuracy": auc,
        }
        for method, values in aucs.items()
        for seed, auc in enumerate(values)
    ]
    return pd.DataFrame(rows)


GRPO = [0.30, 0.32, 0.31, 0.29, 0.30, 0.33]
ORACLE = [0.40, 0.43, 0.40, 0.40, 0.39, 0.43]  # gaps 0.10 0.11 0.09 0.11 0.09 0.10: mean 0.10


def test_a_position_is_the_seed_gap_over_the_oracles_mean_gap():
    table = runs("chain", "hard", {"grpo": GRPO, "oracle": ORACLE, "m": [g + 0.05 for g in GRPO]})
    positions = seed_positions(table, "m")
    assert positions is not None
    np.testing.assert_allclose(positions.to_numpy(), 0.5, rtol=1e-6)
    assert (seed_positions(table, "grpo") == 0).all()
    np.testing.assert_allclose(seed_positions(table, "oracle").mean(), 1.0, rtol=1e-6)


def test_no_scale_where_the_oracle_is_not_ahead_beyond_noise():
    level = [g + d for g, d in zip(GRPO, [0.01, -0.01, 0.02, -0.02, 0.0, 0.01], strict=True)]
    table = runs("chain", "hard", {"grpo": GRPO, "oracle": level, "m": GRPO})
    assert seed_positions(table, "m") is None
    few = runs("chain", "hard", {"grpo": GRPO[:4], "oracle": ORACLE[:4], "m": GRPO[:4]})
    assert seed_positions(few, "m") is None  # 4 pairs: fewer than a claim needs


def test_the_aggregate_pools_every_world_and_setting_that_places_a_method():
    hard = runs("chain", "hard", {"grpo": GRPO, "oracle": ORACLE, "m": [g + 0.05 for g in GRPO]})
    easy = runs("chain", "easy", {"grpo": GRPO, "oracle": ORACLE, "m": [g + 0.10 for g in GRPO]})
    other = runs("ledger", "hard", {"grpo": GRPO, "oracle": ORACLE, "m": [g - 0.10 for g in GRPO]})
    worlds = [
        World("chain", pd.concat([hard, easy]), None),
        World("ledger", other, None),
        World("countdown", None, None),
    ]
    table = aggregate_positions(worlds, reps=500).set_index("method")
    assert table.loc["m", "where"] == "chain · hard, chain · easy, ledger · hard"
    assert table.loc["m", "seeds"] == 18
    # positions 0.5 (6), 1.0 (6), -1.0 (6): the IQM drops the lowest and highest quarter
    scores = np.concatenate([np.full(6, 0.5), np.full(6, 1.0), np.full(6, -1.0)])
    expected = stratified_interval([scores[:6], scores[6:12], scores[12:]], "iqm", reps=500)
    assert table.loc["m", "iqm"] == pytest.approx(expected.point, rel=1e-6)
    assert expected.point == pytest.approx(0.3, rel=1e-6)
    assert list(table.index)[0] == "oracle"  # best first


def test_the_stratified_interval_resamples_within_strata():
    wide = stratified_interval([[0.0, 1.0, 2.0, 3.0], [10.0]], "mean", reps=2000)
    assert wide.n == 5 and wide.point == pytest.approx(3.2)
    # the single-score stratum is always drawn once: the mean never leaves [2, 4.4]
    assert 2.0 <= wide.low < wide.point < wide.high <= 4.4
    assert stratified_interval([[np.nan], []]).n == 0


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ([HOLDS, NOT_RESOLVED], HOLDS),
        ([REVERSED, NOT_RESOLVED], REVERSED),
        ([HOLDS, REVERSED], NOT_RESOLVED),
        ([NOT_RESOLVED, NOT_RESOLVED], NOT_RESOLVED),
        ([NOT_TESTABLE, NOT_TESTABLE], NOT_TESTABLE),
        ([NOT_TESTABLE, HOLDS], HOLDS),
    ],
)
def test_a_claims_world_verdict_comes_from_its_settings(words, expected):
    assert world_verdict(words) == expected


def test_a_world_without_records_is_counted_as_without_runs(tmp_path):
    worlds = read_worlds(tmp_path, {"chain": ("results/standard/runs.csv",)})
    assert worlds == [World("chain", None, None)]
    cards = [load_cards()["dfpo"]]
    block = worlds_block(worlds, cards, reps=200)
    assert block.startswith(START) and block.endswith(END)
    assert f"{NO_RUNS}: chain" in block and "No world places a method yet" in block


@pytest.mark.records  # the committed records against this code: their own step of .ci/run
def test_the_home_page_block_is_the_one_the_committed_records_give():
    page = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    expected = worlds_block(read_worlds(ROOT / "docs"), list(load_cards().values()))
    assert current(page, START, END) == expected, (
        "docs/index.md's worlds block is stale: python scripts/home_headline.py "
        "docs/results/standard/runs.csv docs/index.md"
    )
