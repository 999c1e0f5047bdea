"""The oracle's price: what its uncharged value passes would cost, and where a charged oracle
would sit, read from the records by hand (leaderboard/oracle_price.py)."""

from __future__ import annotations

from fake_runs import make_run

from creditbench.leaderboard.collect import collect_runs

SEEDS = range(5)
# make_run: 4 steps, 1e9 FLOPs each; accuracy 0.3 + 0.01 seed + slope * f at f = 0, 1/4, ...
# (GRPO's slope 0.1, the oracle's 0.4); every step trains 32 responses
CHARGED_A_STEP, REFERENCE_A_STEP = 1e9, 1e9


def board(root, *, reference=REFERENCE_A_STEP):
    """The runs written under ``root`` and their table."""
    for seed in SEEDS:
        make_run(root, f"grpo-s{seed}", "grpo", seed, responses=32)
        make_run(root, f"dapo-s{seed}", "dapo", seed, responses=32)
        make_run(root, f"oracle-s{seed}", "oracle", seed, responses=32, reference_flops=reference)
    table, warnings = collect_runs(root)
    assert warnings == []
    return table


def test_a_runs_row_holds_its_uncharged_passes_total_not_their_running_mean(tmp_path):
    runs = board(tmp_path)
    oracle = runs[(runs["kind"] == "run") & (runs["method"] == "oracle")]
    # recorded cumulated, 1e9, 2e9, 3e9, 4e9: the total is the last (their mean would be 2.5e9)
    assert oracle["reference_flops"].tolist() == [4 * REFERENCE_A_STEP] * len(SEEDS)
    assert oracle["flops_total"].tolist() == [4 * CHARGED_A_STEP] * len(SEEDS)
