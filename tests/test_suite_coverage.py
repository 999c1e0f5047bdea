"""How much of a suite a board holds, said once a suite: a method's runs of the quick suite
rendered beside its committed records (docs/contributing.md, "Compare against the published
runs") bring a second manifest of the same suite, one run longer."""

from __future__ import annotations

import json

from fake_runs import make_run

from creditbench.leaderboard import render
from creditbench.leaderboard.suite_manifests import suite_coverage


def write_manifest(folder, runs, plan=None):
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {"suite": "quick", "runs": [{"name": n, "setting": "chain"} for n in runs]}
    if plan:
        manifest["plan"] = plan
    (folder / "suite-quick.json").write_text(json.dumps(manifest))


def test_two_manifests_of_one_suite_are_one_sentence_over_the_union_of_their_runs(tmp_path):
    committed, mine = tmp_path / "committed", tmp_path / "mine"
    write_manifest(committed, ["chain-grpo-s0", "chain-otb-s0"])
    write_manifest(mine, ["chain-grpo-s0", "chain-otb-s0", "chain-clipped-s0"])
    everything = {"chain-grpo-s0", "chain-otb-s0", "chain-clipped-s0"}
    assert suite_coverage([committed, mine], everything) == ["Suite quick: all 3 runs finished."]
    [partial] = suite_coverage([committed, mine], {"chain-grpo-s0", "chain-otb-s0"})
    assert partial.startswith("Suite quick: 2 of 3 runs finished (chain 2/3)")


def test_another_plan_of_the_suite_keeps_its_own_sentence(tmp_path):
    write_manifest(tmp_path / "a", ["chain-grpo-s0"])
    write_manifest(tmp_path / "b", ["chain-grpo-s0", "chain-otb-s0"], plan="stage 1")
    sentences = suite_coverage([tmp_path / "a", tmp_path / "b"], {"chain-grpo-s0"})
    assert sentences[0] == "Suite quick: all 1 runs finished."
    assert sentences[1].startswith("Suite quick (stage 1): 1 of 2 runs finished")


def test_the_plugin_board_says_once_how_much_of_the_suite_it_holds(tmp_path):
    committed, mine = tmp_path / "committed", tmp_path / "mine"
    make_run(committed, "chain-grpo-s0", "grpo", 0)
    make_run(committed, "chain-otb-s0", "otb", 0)
    write_manifest(committed, ["chain-grpo-s0", "chain-otb-s0"])
    make_run(mine, "chain-clipped-s0", "clipped", 0)
    write_manifest(mine, ["chain-grpo-s0", "chain-otb-s0", "chain-clipped-s0"])
    markdown = render([committed, mine], tmp_path / "board", reps=50)["markdown"].read_text()
    assert "runs finished" in markdown
    assert markdown.count("Suite quick:") == 1
    assert "Suite quick: all 3 runs finished." in markdown
