"""Claims judged on their own axis: every card claim names the axis its paper compares at, a
claim is read on that axis only and in every setting, its caveats and a baseline behind GRPO
are said beside its verdict, the verdict words come from one table, and each board's verdict
ends with Holm's correction over its rows."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from scipy.stats import t as student_t
from scipy.stats import ttest_1samp
from test_cards import write
from test_claims import EASY, claim_card, table

from creditbench.leaderboard.claims import (
    AXIS_NOT_MEASURED,
    HOLDS,
    NOT_RESOLVED,
    NOT_TESTABLE,
    REVERSED,
    VERDICTS,
    judge,
    judge_claim,
)
from creditbench.leaderboard.claims_page import claims_table
from creditbench.leaderboard.gains import gain
from creditbench.leaderboard.samples import samples_sentence
from creditbench.leaderboard.verdict import holm, holm_sentence, t_test_p
from creditbench.reference.cards import AXES, CardError, Caveat, Claim, Sourced, load_card
from creditbench.reference.cards import load_cards as shipped_cards

ROOT = Path(__file__).resolve().parent.parent
AHEAD, BEHIND = [0.05, 0.06, 0.04, 0.05, 0.06], [-0.05, -0.06, -0.04, -0.05, -0.06]


def claim(axis: str = "compute", baseline: str = "grpo", caveats=()) -> Claim:
    return Claim(
        "A ahead of B", "oppo", baseline, "+3.1", "Table 1", "paper",
        Sourced(axis, "Fig. 1", "paper"), caveats=tuple(caveats),
    )  # fmt: skip


# --- the card schema --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "axis, message",
    [
        (None, "bad.yaml: claims[0].axis: missing required field"),
        (
            {"value": "flops", "source": "Fig. 1", "tag": "paper"},
            "bad.yaml: claims[0].axis.value: expected one of compute, samples, steps, "
            "wall-clock, got 'flops'",
        ),
        ("steps", "bad.yaml: claims[0].axis: expected a mapping, got the string 'steps'"),
        (
            {"value": "steps", "tag": "inferred"},
            "bad.yaml: claims[0].axis.source: missing required field",
        ),
        ("unknown", "bad.yaml: claims[0].axis: expected a mapping"),
    ],
)
def test_the_schema_refuses_a_claim_without_an_axis_or_with_an_unknown_one(tmp_path, axis, message):
    data = claim_card()
    if axis is None:
        del data["claims"][0]["axis"]
    else:
        data["claims"][0]["axis"] = axis
    with pytest.raises(CardError) as caught:
        load_card(write(tmp_path, data))
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_the_schema_reads_caveats_and_refuses_an_unknown_kind(tmp_path):
    data = claim_card()
    data["claims"][0]["caveats"] = [{"kind": "moe", "note": "dense here"}]
    (only,) = load_card(write(tmp_path, data)).claims
    assert only.caveats == (Caveat("moe", "dense here"),) and only.untestable == only.caveats
    data["claims"][0]["caveats"] = [{"kind": "rumour", "note": "x"}]
    with pytest.raises(CardError, match=r"^bad\.yaml: claims\[0\]\.caveats\[0\]\.kind: expected"):
        load_card(write(tmp_path, data))


def test_every_shipped_claim_names_its_axis_and_where_it_was_read():
    claims = [c for card in shipped_cards().values() for c in card.claims]
    assert len(claims) >= 38
    assert all(c.axis.value in AXES and c.axis.tag in ("paper", "code", "inferred") for c in claims)
    # where a paper does not say, the axis is read per step and says it is a reading
    for c in claims:
        if c.axis.source.startswith("not stated"):
            assert (c.axis.value, c.axis.tag) == ("steps", "inferred"), c.claim
    # the three claims whose comparison the testbed cannot make, by their own method pages
    untestable = {(c.method, c.untestable[0].kind) for c in claims if c.untestable}
    assert untestable == {("tspmo", "lora"), ("gspo", "moe"), ("ccpo", "two-agent")}


# --- reading a claim on its axis, in every setting ---------------------------------------------


def with_samples(runs: pd.DataFrame, gap: float, pace: dict[str, int]) -> pd.DataFrame:
    """``runs`` (from :func:`table`) with evaluations at 64 and 128 trained responses: GRPO at
    0.4 + 0.01 a seed at both, every other row ``gap`` off it, all from 0.3 at 0 responses;
    and budget evaluations at step 4 that trained ``pace[row]`` responses a step (32 else)."""
    runs = runs.assign(start_accuracy=0.3, accuracy_metric="sampled_accuracy")
    extra = []
    for name in runs["run"]:
        row, seed = name.rsplit("-", 2)[-2], int(name.rsplit("-s", 1)[1])
        accuracy = 0.4 + 0.01 * seed + (0.0 if row == "grpo" else gap)
        for mark in (64, 128):
            extra.append(
                {"run": name, "kind": "eval_responses", "responses_mark": mark,
                 "responses_trained": mark, "sampled_accuracy": accuracy}
            )  # fmt: skip
        extra.append(
            {"run": name, "kind": "eval", "budget_fraction": 1.0, "step": 4,
             "responses_trained": 4 * pace.get(row, 32)}
        )  # fmt: skip
    return pd.concat([runs, pd.DataFrame(extra)], ignore_index=True)


def test_a_claim_made_on_steps_is_never_read_on_the_compute_axis():
    runs = table({"oppo": AHEAD})  # far ahead at equal compute
    verdict = judge("card", claim("steps"), runs, "hard")
    assert (verdict.verdict, verdict.why, verdict.gain) == (NOT_RESOLVED, AXIS_NOT_MEASURED, None)
    assert judge("card", claim("samples"), runs, "hard").why == AXIS_NOT_MEASURED
    # measured at equal samples, behind there: 0.05 behind at 64 and 128 responses, level at
    # 0, is (0.05 / 2 x 64 + 0.05 x 64) / 128 = 0.0375 behind over the first 128 responses
    measured = with_samples(runs, -0.05, {})
    verdict = judge("card", claim("samples"), measured, "hard")
    assert verdict.verdict == REVERSED and verdict.gain.point == pytest.approx(-0.0375)
    # a claim per step reads it where both rows train as many responses a step, and says so
    verdict = judge("card", claim("steps"), measured, "hard")
    assert verdict.verdict == REVERSED and verdict.gain.point == pytest.approx(-0.0375)
    assert verdict.reading == "read at equal samples: both train 32 responses a step"
    assert judge("card", claim("compute"), measured, "hard").verdict == HOLDS
    # ... and nowhere else: a row that trains 37 responses a step is not at equal steps
    uneven = judge("card", claim("steps"), with_samples(runs, -0.05, {"oppo": 37}), "hard")
    assert (uneven.verdict, uneven.gain) == (NOT_RESOLVED, None)
    assert uneven.why == (
        f"{AXIS_NOT_MEASURED}: equal samples is not equal steps here, oppo training 37.0 "
        "responses a step and grpo 32.0"
    )
    assert judge("card", claim("wall-clock"), measured, "hard").why == AXIS_NOT_MEASURED


def test_a_claim_gets_one_verdict_per_setting():
    both = pd.concat(
        [table({"oppo": AHEAD}), table({"oppo": BEHIND}, setting=EASY)], ignore_index=True
    )
    hard, easy = judge_claim("card", claim(), both)
    assert (hard.setting, hard.verdict) == ("hard", HOLDS)
    assert (easy.setting, easy.verdict) == ("easy", REVERSED)
    header, _, row = claims_table([hard, easy]).splitlines()
    assert header == "| card | claim | axis | paper's number (where) | hard | easy | caveats |"
    assert "| holds on the testbed: +0.052 " in row and "| reversed on the testbed: -0.052 " in row


def test_a_caveat_and_a_baseline_behind_grpo_are_said_beside_the_verdict():
    runs = table({"dapo": [-0.05] * 5, "oppo": [0.0] * 5})  # OPPO level with GRPO, DAPO behind
    inert = Caveat("inert", "the transform never acts here")
    verdict = judge("card", claim(baseline="dapo", caveats=[inert]), runs, "hard")
    assert verdict.verdict == HOLDS and verdict.gain.point == pytest.approx(0.05)
    assert verdict.weak_baseline.startswith("its baseline, dapo, is itself behind GRPO: -0.050")
    row = claims_table([verdict]).splitlines()[2]
    assert "; its baseline, dapo, is itself behind GRPO: -0.050 " in row
    assert row.endswith("| mechanism inert here: the transform never acts here |")
    # a baseline that is GRPO itself, or level with it, gets no such note
    assert judge("card", claim(), runs, "hard").weak_baseline == ""
    level = table({"dapo": [0.0, 0.01, -0.01, 0.0, 0.0], "oppo": AHEAD})
    assert judge("card", claim(baseline="dapo"), level, "hard").weak_baseline == ""


def test_a_claim_the_testbed_cannot_make_is_not_testable_whatever_its_gain():
    moe = Caveat("moe", "the policy here is dense")
    verdict = judge("card", claim(caveats=[moe]), table({"oppo": AHEAD}), "hard")
    assert verdict.verdict == NOT_TESTABLE and verdict.gain.separates
    assert verdict.why == "an MoE-only claim: the policy here is dense"
    abstract = Caveat("abstract", "only the abstract was read")
    assert judge("card", claim(caveats=[abstract]), table({"oppo": AHEAD}), "hard").verdict == HOLDS


# --- the verdict words: one table --------------------------------------------------------------


@pytest.mark.parametrize("page", ["docs/reproducing.md", "docs/index.md"])
def test_the_pages_that_speak_of_claims_use_the_verdict_table_s_words(page):
    """The prose that names the verdicts (the claims page prints them from the table itself)."""
    text = " ".join((ROOT / page).read_text(encoding="utf-8").split())
    missing = [word for word in VERDICTS if word not in text]
    assert not missing, f"{page} does not name the verdicts {missing}"
    for retired in ("reproduced", "contradicted"):
        assert f"*{retired}*" not in text, f"{page}: the verdict word {retired!r} is retired"


# --- Holm's correction beside each board's verdicts --------------------------------------------


def test_holm_adjusts_step_down_by_hand():
    # m = 3: 0.005 x 3 = 0.015; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04, raised to the 0.06 before it
    adjusted = holm({"a": 0.005, "b": 0.03, "c": 0.04, "none": math.nan})
    assert adjusted == pytest.approx({"a": 0.015, "b": 0.06, "c": 0.06})


def test_the_t_test_p_value_is_recovered_from_the_t_interval():
    gaps = [-0.01, -0.03, 0.005, -0.02, -0.015, -0.004]
    row = gain(gaps, reps=200).columns("gain_auc")
    assert t_test_p(row) == pytest.approx(ttest_1samp(gaps, 0.0).pvalue, rel=1e-9)
    assert math.isnan(t_test_p({**row, "gain_auc_pairs": 1}))


def rows_with_p(p_values: dict[str, float], pairs: int = 10, name="gain_auc") -> pd.DataFrame:
    """Board rows behind GRPO by -0.01 in ``name`` whose t test gives each method's p-value
    (both intervals the t interval); GRPO's own row first."""
    critical = student_t.ppf(0.975, pairs - 1)
    rows = [{"method": "grpo", "n_seeds": pairs}]
    for method, p in p_values.items():
        error = 0.01 / student_t.isf(p / 2, pairs - 1)
        low, high = -0.01 - critical * error, -0.01 + critical * error
        rows.append(
            {
                "method": method, "n_seeds": pairs, name: -0.01, f"{name}_pairs": pairs,
                f"{name}_low": low, f"{name}_high": high, f"{name}_t_low": low,
                f"{name}_t_high": high, f"{name}_ahead": 0,
                f"{name}_separates": False, f"{name}_reversed": high < 0,
            }
        )  # fmt: skip
    return pd.DataFrame(rows)


def test_the_holm_line_names_the_verdicts_that_do_not_survive():
    frame = rows_with_p({"a": 0.005, "b": 0.03, "c": 0.04})
    assert frame["gain_auc_reversed"].iloc[1:].all()  # three "behind" verdicts at 5% each
    line = holm_sentence(frame)
    assert line == (
        "Holm's correction over the 3 rows against GRPO (the paired t test's p-values, "
        "family-wise error 5%): 1 of the 3 verdicts above survives (the nearest: a, adjusted "
        "0.0150); these do not: b (p 0.0300, adjusted 0.060), c (p 0.0400, adjusted 0.060)."
    )
    assert holm_sentence(rows_with_p({"a": 0.001, "b": 0.01})).endswith(
        "all 2 verdicts above survive (the nearest: b, adjusted 0.0100)."
    )
    # a row not told apart from GRPO joins the family but has no verdict to withdraw
    assert holm_sentence(rows_with_p({"a": 0.2})) == ""


def test_the_equal_samples_axis_s_verdicts_get_their_holm_line_too():
    frame = rows_with_p({"a": 0.005, "b": 0.03, "c": 0.04}, name="gain_samples")
    frame["samples_mean"], frame["samples_horizon"] = 0.4, 256.0
    sentence = samples_sentence(frame)
    assert "behind it: a (" in sentence
    assert sentence.endswith(
        "1 of the 3 verdicts above survives (the nearest: a, adjusted 0.0150); these do not: "
        "b (p 0.0300, adjusted 0.060), c (p 0.0400, adjusted 0.060)."
    )


def test_the_claims_page_has_a_holm_line_per_setting_over_the_claims_read_there():
    from dataclasses import replace

    from creditbench.leaderboard.claims import Verdict
    from creditbench.leaderboard.claims_page import holm_line

    def verdict(name: str, gaps: list[float], word: str, setting: str = "hard") -> Verdict:
        return Verdict("card", replace(claim(), claim=name), setting, gain(gaps), word)

    strong = [0.05, 0.06, 0.04, 0.05, 0.055, 0.045, 0.05, 0.06]  # p far below 5%
    weak = [0.01, 0.02, -0.002, 0.015, -0.001, 0.012, 0.008, 0.011]  # p 0.011
    flat = [0.01, -0.01, 0.02, -0.02, 0.0, 0.01, -0.01, 0.005]
    verdicts = [verdict("A ahead of GRPO", strong, HOLDS), verdict("B ahead of GRPO", weak, HOLDS)]
    verdicts += [verdict(f"C{i} ahead of GRPO", flat, NOT_RESOLVED) for i in range(8)]
    verdicts.append(verdict("D ahead of GRPO", strong, NOT_TESTABLE))  # judges nothing
    verdicts.append(verdict("E ahead of GRPO", strong, HOLDS, setting="easy"))
    line = holm_line(verdicts, "hard")
    # ten claims read in the hard setting (D is not testable, E is the easy setting's)
    assert line.startswith("hard: Holm's correction over the 10 claims read in the hard setting")
    assert "1 of the 2 verdicts in the table below survives (the nearest: A ahead" in line
    assert "these do not: B ahead of GRPO (card)" in line
    easy = holm_line(verdicts, "easy")
    assert "the one verdict in the table below survives" in easy
    # one verdict that falls: said in the singular, with its p-values
    lone = [verdict("B ahead of GRPO", weak, HOLDS), *verdicts[2:10]]
    assert "the one verdict in the table below does not survive: B ahead of GRPO (card) (p " in (
        holm_line(lone, "hard")
    )
    assert holm_line(verdicts[2:10], "hard") == ""  # no verdict called: no line
