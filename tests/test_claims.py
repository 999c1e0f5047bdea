"""The papers' claims read from records: the verdict follows the claim rule, a claim finds
only its own rows' runs in the setting read, and `creditbench claims` writes the page (the
claims' axes, settings, caveats and verdict words: tests/test_claims_axes.py)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from fake_runs import make_run
from test_cards import minimal_card, write
from test_standard_board import CAMPAIGN

from creditbench.leaderboard.claims import (
    HOLDS,
    NOT_RESOLVED,
    REVERSED,
    judge,
    row_seeds,
)
from creditbench.leaderboard.claims_page import claims_table
from creditbench.reference.cards import CardError, Claim, Sourced, load_card
from creditbench.tools.cli.main import main

HARD = "chain-hard-steps=10-slip_rate=0.1"
ROOT = Path(__file__).resolve().parents[1]
EASY = "chain-easy-steps=8"


def table(gaps: dict[str, list[float]], setting: str = HARD, base: float = 0.3) -> pd.DataFrame:
    """Run rows of GRPO (AUC ``base`` + 0.01 per seed) and of each row name in ``gaps``
    (GRPO's AUC plus its gap at each seed), named as the bench names them."""
    rows = []
    n = max(len(g) for g in gaps.values())
    for seed in range(n):
        grpo = base + 0.01 * seed
        rows.append({"run": f"{setting}-grpo-s{seed}", "auc": grpo})
        for row, gap in gaps.items():
            if seed < len(gap):
                rows.append({"run": f"{setting}-{row}-s{seed}", "auc": grpo + gap[seed]})
    frame = pd.DataFrame(rows)
    frame["kind"] = "run"
    frame["auc_sampled_accuracy"] = frame["auc"]
    frame["final_sampled_accuracy"] = frame["auc"]
    return frame


COMPUTE = Sourced("compute", "Fig. 1", "paper")


def claim(method: str = "oppo", baseline: str = "grpo", **fields) -> Claim:
    """A claim made at equal compute, the axis the records measure."""
    return Claim("A ahead of B", method, baseline, "+3.1", "Table 1", "paper", COMPUTE, **fields)


def test_a_gain_beyond_noise_at_enough_seeds_reproduces_the_claim():
    rng = np.random.default_rng(0)
    gaps = list(0.05 + 0.01 * rng.standard_normal(8))
    verdict = judge("card", claim(), table({"oppo": gaps}), "hard")
    assert verdict.verdict == HOLDS
    assert verdict.gain.pairs == 8 and verdict.gain.ahead == 8
    assert verdict.gain.low > 0 and verdict.gain.t_low > 0


def test_a_loss_beyond_noise_contradicts_it():
    verdict = judge("card", claim(), table({"oppo": [-0.04, -0.05, -0.03, -0.06, -0.04]}), "hard")
    assert verdict.verdict == REVERSED and verdict.gain.ahead == 0


@pytest.mark.parametrize(
    "gaps, why",
    [
        ([0.05, 0.06, 0.04], "3 seed pairs, fewer than 5"),
        ([0.05, -0.06, 0.04, -0.05, 0.01, -0.02], "the intervals include 0"),
    ],
)
def test_too_few_seeds_or_an_interval_across_zero_resolves_nothing(gaps, why):
    verdict = judge("card", claim(), table({"oppo": gaps}), "hard")
    assert (verdict.verdict, verdict.why) == (NOT_RESOLVED, why)


def test_missing_runs_are_named():
    verdict = judge(
        "card", claim(method="prime", baseline="rloo"), table({"oppo": [0.1] * 5}), "hard"
    )
    assert verdict.verdict == NOT_RESOLVED and verdict.gain is None
    assert verdict.why == "no runs of prime and rloo in the hard setting"


def test_a_claim_reads_only_the_setting_read_and_its_own_row():
    hard = table({"oppo": [0.05] * 5, "dapo_oppo": [-0.2] * 5})
    easy = table({"oppo": [-0.2] * 5}, setting=EASY)
    both = pd.concat([hard, easy], ignore_index=True)
    # dapo_oppo's runs end in "_oppo-s<k>", not "-oppo-s<k>": they are not OPPO's
    assert row_seeds(both, "hard", "oppo", "auc").tolist() == pytest.approx(
        [0.35, 0.36, 0.37, 0.38, 0.39]
    )
    assert judge("card", claim(), both, "hard").verdict == HOLDS
    assert judge("card", claim(), both, "easy").verdict == REVERSED
    assert judge("card", claim(method="dapo_oppo"), both, "hard").verdict == REVERSED


def test_the_table_gives_the_paper_number_the_interval_and_the_verdict():
    verdicts = [
        judge("oppo", claim(), table({"oppo": [0.05] * 5}), "hard"),
        judge("oppo", claim(method="prime"), table({"oppo": [0.05] * 5}), "hard"),
    ]
    lines = claims_table(verdicts).splitlines()
    assert lines[0] == "| card | claim | axis | paper's number (where) | hard | caveats |"
    assert lines[2] == (
        "| oppo | A ahead of B | compute (paper; Fig. 1) | +3.1 (Table 1; paper) | holds on the "
        "testbed: +0.050 [+0.050, +0.050] t [+0.050, +0.050], 5/5 | none |"
    )
    assert "| not resolved (no runs of prime in the hard setting) | none |" in lines[3]


def claim_card() -> dict:
    data = copy.deepcopy(minimal_card())
    data["methods"].append({"name": "dapo", "registered": True, "role": "proposed"})
    data["claims"] = [
        {
            "claim": "DAPO ahead of GRPO",
            "method": "dapo",
            "baseline": "grpo",
            "paper": "+5 points",
            "source": "Table 2",
            "tag": "paper",
            "axis": {"value": "compute", "source": "Fig. 2", "tag": "paper"},
        }
    ]
    return data


def test_a_card_carries_its_claims(tmp_path):
    card = load_card(write(tmp_path, claim_card()))
    (only,) = card.claims
    assert (only.method, only.baseline, only.axis.value, only.verified) == (
        "dapo",
        "grpo",
        "compute",
        True,
    )


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("method", "newmethod", "claims[0].method: 'newmethod' is not a registered row"),
        ("baseline", "dapo", "claims[0].baseline: must differ from the claim's method"),
        ("setting", "hard", "claims[0].setting: unknown field"),
        ("tag", "rumour", "claims[0].tag: expected one of paper, code, inferred"),
        ("paper", "", "claims[0].paper: expected a non-empty string"),
    ],
)
def test_a_malformed_claim_names_its_field(tmp_path, field, value, message):
    data = claim_card()
    data["claims"][0][field] = value
    with pytest.raises(CardError, match=r"^bad\.yaml: ") as caught:
        load_card(write(tmp_path, data))
    assert message in str(caught.value)


def test_the_claims_command_writes_the_page_from_records(tmp_path, capsys):
    for seed in range(5):
        for method in ("grpo", "dapo"):
            make_run(tmp_path / "runs", f"{HARD}-{method}-s{seed}", method, seed)
    out = tmp_path / "claims.md"
    assert main(["claims", str(tmp_path / "runs"), "--card", "dapo", "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert page.startswith("# The papers' claims on the testbed")
    (dapo,) = [line for line in page.splitlines() if line.startswith("| dapo |")]
    # DAPO's claim is made per step, an axis these records do not measure, in either setting
    assert dapo.count(" not resolved (its axis is not measured yet) |") == 2


def test_the_claims_page_says_when_its_suite_is_a_partial_snapshot(tmp_path):
    runs = tmp_path / "runs"
    names = [f"{HARD}-{method}-s{seed}" for seed in range(6) for method in ("grpo", "dapo")]
    for name in names[:10]:  # seed 5 of both not finished yet
        method, seed = name.rsplit("-", 2)[-2], int(name[-1])
        make_run(runs, name, method, seed)

    def page(listed: list[str]) -> str:
        manifest = {"suite": "standard", "runs": [{"name": n, "setting": HARD} for n in listed]}
        (runs / "suite-standard.json").write_text(json.dumps(manifest), encoding="utf-8")
        out = tmp_path / "claims.md"
        assert main(["claims", str(runs), "--card", "dapo", "--out", str(out)]) == 0
        return out.read_text(encoding="utf-8")

    partial = page(names)
    assert "Suite standard: 10 of 12 runs finished" in partial
    assert "A verdict can change as the missing seeds finish." in partial
    whole = page(names[:10])
    assert "Suite standard: all 10 runs finished." in whole and "can change" not in whole


def test_the_claims_command_refuses_an_unknown_card(tmp_path, capsys):
    assert main(["claims", str(tmp_path), "--card", "nope"]) == 2
    assert "--card: no card 'nope'" in capsys.readouterr().err


STANDARD_HARD = "chain-hard-steps=10-slip_rate=0.1-weak_slip_rate=0.3-direct_slip_rate=0.65"


def test_reproduce_runs_only_the_standard_runs_the_records_lack(tmp_path, capsys):
    from creditbench.tools.reproduce.claims import claim_runs, reproduce_claims

    card = load_card(write(tmp_path, claim_card()))
    records = tmp_path / "standard"
    for run in claim_runs(card):
        if run.entry == "grpo" or run.seed < 6:
            made_as_planned(records, run)
    results = tmp_path / "mine"
    code = reproduce_claims(card, results=results, records=[str(records)], dry_run=True, reps=200)
    out = capsys.readouterr().out
    assert code == 0
    assert "20 runs, 16 in the records" in out and "4 to run" in out
    listed = [line.split()[-1] for line in out.splitlines() if line.startswith("  [   run]")]
    assert listed == [f"{STANDARD_HARD}-dapo-s{seed}" for seed in (6, 7, 8, 9)]
    assert not results.exists()  # a dry run writes nothing

    for run in claim_runs(card):  # the missing runs, as if trained here
        if run.entry == "dapo" and run.seed >= 6:
            made_as_planned(results, run)
    code = reproduce_claims(card, results=results, records=[str(records)], reps=200)
    report = (results / "claims_bad.md").read_text(encoding="utf-8")
    assert code == 0 and "0 to run" in capsys.readouterr().out
    (row,) = [line for line in report.splitlines() if line.startswith("| DAPO ahead of GRPO")]
    assert "| holds on the testbed: " in row and "10/10 | not resolved (no runs of" in row


def test_reproduce_reads_the_committed_claims_rows_beside_the_board_by_default(
    tmp_path, monkeypatch, capsys
):
    """Without --records, a checkout's committed claims' own rows count as records as the
    board's do: a user's `creditbench reproduce oppo` re-runs none of the 30 committed runs."""
    from creditbench.tools.reproduce import claims

    card = load_card(write(tmp_path, claim_card()))
    committed = tmp_path / "docs" / "results"
    for run in claims.claim_runs(card):
        made_as_planned(committed / ("standard" if run.entry == "grpo" else "claims-rows"), run)
    monkeypatch.setattr(claims, "COMMITTED_RECORDS", committed / "standard")
    code = claims.reproduce_claims(card, results=tmp_path / "mine", dry_run=True, reps=100)
    out = capsys.readouterr().out
    assert code == 0
    assert "20 runs, 20 in the records" in out and "0 to run" in out


@pytest.mark.records  # the committed records against this code's cards
def test_the_committed_records_hold_every_run_of_the_cards_with_rows_of_their_own(capsys):
    """The campaign ran the claims' own rows (docs/testbed.md): reproducing OPPO's and GTPO's
    claims from this checkout reads all their runs and trains none."""
    from creditbench.tools.bench_plan import COMMITTED_RECORDS

    if not (COMMITTED_RECORDS.parent / "claims-rows").is_dir():
        pytest.skip("an installed package without the repository's committed records")
    for card_id in ("oppo", "gtpo"):
        assert main(["reproduce", card_id, "--scale", "cpu", "--dry-run"]) == 0
        out = capsys.readouterr().out
        runs, in_records = re.search(r"(\d+) runs, (\d+) in the records", out).groups()
        assert "claims-rows" in out and runs == in_records and out.count(", 0 to run") == 1, (
            f"{card_id}: the committed records lack runs its claims need: {CAMPAIGN}"
        )


def test_reproduce_refuses_records_that_do_not_exist(tmp_path):
    from creditbench.tools.reproduce.claims import reproduce_claims
    from creditbench.tools.reproduce.recipe import ReproduceError

    card = load_card(write(tmp_path, claim_card()))
    with pytest.raises(ReproduceError, match="--records: .*nowhere does not exist"):
        reproduce_claims(card, results=tmp_path / "r", records=[str(tmp_path / "nowhere")])


def test_every_card_claim_is_a_run_of_the_standard_suite():
    """Each claim's rows expand into the standard suite's runs (ten seeds each), under the
    leaderboard's own run names where the row is a registered method without options."""
    from creditbench.reference.cards import load_cards
    from creditbench.tools.reproduce.claims import RUN_SETTINGS, claim_rows, claim_runs

    cards = [card for card in load_cards().values() if card.claims]
    assert len(cards) >= 10
    for card in cards:
        runs = claim_runs(card)
        assert len(runs) == 10 * len(claim_rows(card)) * len(RUN_SETTINGS), card.id
        assert {run.entry for run in runs} == set(claim_rows(card)), card.id


def test_reproduce_oppo_plans_its_claims_with_the_teacher_row_under_its_own_name(tmp_path, capsys):
    from creditbench.reference.cards import load_cards
    from creditbench.tools.reproduce.claims import claim_rows, reproduce_claims

    card = load_cards()["oppo"]
    code = reproduce_claims(
        card, results=tmp_path / "r", records=[], seeds=1, dry_run=True, reps=100
    )
    out = capsys.readouterr().out
    assert code == 0
    listed = {line.split()[-1] for line in out.splitlines() if line.startswith("  [   run]")}
    assert f"{STANDARD_HARD}-oppo_teacher-s0" in listed
    assert f"{STANDARD_HARD}-grpo-s0" in listed and len(listed) == len(claim_rows(card))


def test_a_variant_row_two_cards_compare_is_planned_once():
    from creditbench.reference.cards import load_cards
    from creditbench.tools.reproduce.claims import own_rows_manifest

    oppo = load_cards()["oppo"]
    once, twice = own_rows_manifest([oppo]), own_rows_manifest([oppo, oppo])
    assert twice == once and len(once["runs"]) == 30  # teacher, DAPO, DAPO + teacher: 10 seeds


def tuned_gtpo_suite(tmp_path):
    """Protocol 2's tuned suite (the tuning script's writer) with GTPO at a chosen lr and
    option of its own, as a file; GTPO's card compares GRPO-S, a row the board does not run."""
    import yaml

    from creditbench.tools.campaign.tuning import tuned_suite
    from creditbench.tools.campaign.tuning_rule import Config
    from creditbench.tools.suite import load_suite, suite_path

    choices = {m: Config(m, 5e-5) for m in ("grpo", "oracle", "dapo", "forking")}
    choices["gtpo"] = Config("gtpo", 1.5e-4, (("eps_high", 0.3),))
    suite = tuned_suite(load_suite(suite_path("standard")), choices, horizon=160)
    path = tmp_path / "standard-tuned.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False), encoding="utf-8")
    return path


def made_as_planned(records, run) -> None:
    """A finished run in ``records`` whose config holds every value the suite sets for
    ``run``."""
    sections: dict = {}
    for override in run.overrides:
        key, _, text = override.partition("=")
        head, _, field = key.partition(".")
        value = json.loads(text)
        if field:
            sections.setdefault(head, {})[field] = value
        else:
            sections[head] = value
    make_run(records, run.name, run.method, run.seed, **sections)


def test_on_a_tuned_suite_a_claims_own_row_runs_at_its_methods_choice_in_both_settings(tmp_path):
    """docs/testbed.md, protocol 2's claims' own rows: GRPO-S at GTPO's chosen lr and options
    (then its own), in every setting of the suite, where the frozen suite plans hard only."""
    from creditbench.reference.cards import load_cards
    from creditbench.tools.reproduce.claims import claim_runs

    card = load_cards()["gtpo"]
    runs = claim_runs(card, suite=str(tuned_gtpo_suite(tmp_path)))
    own = [r for r in runs if r.entry == "grpo_s"]
    assert {r.label.split("-")[1] for r in own} == {"hard", "easy"} and len(own) == 20
    for run in own:
        assert run.method == "gtpo"
        assert {"train.lr=0.00015", "method_options.eps_high=0.3"} <= set(run.overrides)
        assert 'method_options.level="sequence"' in run.overrides
    (board_gtpo,) = {tuple(r.overrides) for r in runs if r.entry == "gtpo" and r.seed == 0
                     and "-hard-" in r.label}  # fmt: skip
    assert "train.lr=0.00015" in board_gtpo  # a board row runs at its own entry too
    frozen = [r for r in claim_runs(card) if r.entry == "grpo_s"]
    assert {r.label.split("-")[1] for r in frozen} == {"hard"}
    assert "train.lr=5e-05" in frozen[0].overrides  # the frozen suite's one lr
    by_path = claim_runs(card, suite=str(ROOT / "tools" / "suites" / "standard.yaml"))
    assert [r.name for r in by_path] == [r.name for r in claim_runs(card)]  # the same suite

    from creditbench.tools.reproduce.recipe import ReproduceError

    lacking = tmp_path / "lacking.yaml"
    data = yaml.safe_load(tuned_gtpo_suite(tmp_path).read_text())
    data["methods"] = [e for e in data["methods"] if e["name"] != "gtpo"]
    lacking.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ReproduceError, match="--suite: lacking does not run gtpo, whose"):
        claim_runs(card, suite=str(lacking))  # not GTPO's defaults in a suite that tunes


def test_on_a_tuned_suite_the_claims_run_at_the_seeds_their_method_runs_there(tmp_path, capsys):
    """The easy-seeds rule gave GTPO five easy seeds: GRPO-S runs those five there, and the
    board's rows missing from the records are not trained by reproduce."""
    from creditbench.reference.cards import load_cards
    from creditbench.tools.reproduce.claims import claim_runs, planned_runs, reproduce_claims

    card = load_cards()["gtpo"]
    suite = str(tuned_gtpo_suite(tmp_path))
    every = planned_runs(claim_runs(card, suite=suite), suite, set())
    records = tmp_path / "protocol-2"
    held = set()
    for run in every:
        if run.entry == "grpo_s" or ("-easy-" in run.label and run.seed >= 5):
            continue
        made_as_planned(records, run)
        held.add(run.name)
    planned = planned_runs(claim_runs(card, suite=suite), suite, held)
    own = sorted((r.label.split("-")[1], r.seed) for r in planned if r.entry == "grpo_s")
    assert own == sorted([("easy", s) for s in range(5)] + [("hard", s) for s in range(10)])
    assert {r.name for r in planned if r.entry != "grpo_s"} == held

    code = reproduce_claims(
        card, results=tmp_path / "mine", records=[str(records)], dry_run=True, suite=suite
    )
    out = capsys.readouterr().out
    assert code == 0 and "15 to run" in out and "standard-tuned suite" in out
    listed = [line.split()[-1] for line in out.splitlines() if line.startswith("  [   run]")]
    assert len(listed) == 15 and all("-grpo_s-s" in name for name in listed)
    assert not any("-easy-" in name and name.endswith(("-s5", "-s9")) for name in listed)


def test_on_a_tuned_suite_records_of_another_protocols_runs_are_refused(tmp_path, capsys):
    """The tuned suite names each method's variant as the method, so the frozen board's runs
    carry the same names: reading them as the tuned suite's would pair two protocols. A run
    the records hold with other values than the suite sets is refused, naming the field."""
    from creditbench.reference.cards import load_cards
    from creditbench.tools.reproduce.claims import claim_runs, planned_runs

    card = load_cards()["gtpo"]
    suite = str(tuned_gtpo_suite(tmp_path))
    (board_run,) = [r for r in planned_runs(claim_runs(card, suite=suite), suite, set())
                    if r.entry == "gtpo" and r.seed == 0 and "-hard-" in r.label]  # fmt: skip
    records = tmp_path / "records"
    made_as_planned(records, board_run)
    argv = ["reproduce", "gtpo", "--scale", "cpu", "--suite", suite, "--dry-run"]
    argv += ["--results", str(tmp_path / "mine"), "--records", str(records)]
    assert main(argv) == 0  # made as the suite plans it: read as its run
    assert "1 in the records" in capsys.readouterr().out
    other = tmp_path / "other"
    frozen = [o for o in board_run.overrides if not o.startswith(("train.lr", "budget.eval_r"))]
    board_run.overrides = [*frozen, "train.lr=5e-05"]  # the frozen protocol's lr, no counts
    made_as_planned(other, board_run)
    assert main([*argv[:-1], str(other)]) == 2
    err = capsys.readouterr().err
    assert (
        f"--records: {board_run.name} was made with other settings than the standard-tuned" in err
    )
    assert "differs in train.lr, budget.eval_responses" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "mine").exists()
    # the same run finished in the results folder (a frozen reproduce's) is refused there too
    made_as_planned(tmp_path / "mine", board_run)
    assert main([*argv[:-2], "--records", str(records)]) == 2
    assert capsys.readouterr().err.startswith(
        f"creditbench reproduce: error: --results: {board_run.name}"
    )
