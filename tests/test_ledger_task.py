"""The ledger world: problems of varied length, the step truth (the first wrong step no fix
corrected) against a brute-force replay, the values' consistency with their successors, the
SFT traces' slips and fixes, and the prompt variants."""

from __future__ import annotations

import random
import re
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from creditbench.harness.tasks import get_task
from creditbench.harness.tasks.base import PROMPT_VARIANTS
from creditbench.harness.tasks.chain import ALPHABET, ERROR_KINDS
from creditbench.harness.tasks.chain.prompts import LOCALIZE_QUESTION, parse_step_answer
from creditbench.harness.tasks.ledger import CLEAN_TRACE_OPTIONS, LedgerConfig, LedgerTask
from creditbench.harness.tasks.ledger.traces import parse_plan

TASK = LedgerTask(LedgerConfig(train_size=300, eval_size=120))
EVAL = TASK.problems("eval")
LINE = re.compile(r"(fix |[a-z]+ )?(\d+)([+-])(\d+)=(\d+)")


def items_of(problem) -> list[tuple[str, int]]:
    return [(o[0], int(o[1:])) for o in problem.metadata["ops"]]


def true_values(problem) -> list[int]:
    """The balance after 0, 1, ..., n items, computed here from the items."""
    values = [problem.metadata["start"]]
    for sign, k in items_of(problem):
        values.append((values[-1] + (k if sign == "+" else -k)) % 100)
    return values


# --------------------------------------------------------------------------------------------
# Responses with errors and fixes, and a replay that knows nothing of the checker
# --------------------------------------------------------------------------------------------

# An error adds 1 or 2 to a written number: the offsets only grow (a fix resets them to the
# item's start), and 16 items of at most three lines each never add up to 100, so no two
# errors cancel and the replay's verdict is exact.
error = st.sampled_from([0, 0, 0, 1, 2])
line_errors = st.tuples(error, error)  # (carried value off by, result off by)
item_plan = st.tuples(line_errors, st.lists(line_errors, max_size=2))  # the item line, its fixes


@st.composite
def responses(draw):
    """``(problem, text)``: a response to an eval problem whose lines err by the drawn offsets,
    each item line perhaps followed by fixes, and an answer line perhaps off too."""
    problem = EVAL[draw(st.integers(0, len(EVAL) - 1))]
    plans = draw(st.lists(item_plan, min_size=len(items_of(problem)),
                          max_size=len(items_of(problem))))  # fmt: skip
    lines, value = [], problem.metadata["start"]
    for (sign, k), (first, fixes) in zip(items_of(problem), plans, strict=True):
        before = value
        for word, (carried_off, result_off) in [("so ", first), *(("fix ", f) for f in fixes)]:
            carried = (before + carried_off) % 100
            result = ((carried + (k if sign == "+" else -k)) + result_off) % 100
            lines.append(f"{word}{carried}{sign}{k}={result}")
            value = result
    answer_off = draw(st.sampled_from([0, 0, 0, 1]))
    return problem, "\n".join([*lines, f"Answer: {(value + answer_off) % 100}"])


def replay(problem, text) -> tuple[int | None, set[int]]:
    """The first step after which the response's balance is off the true balances for good
    (None when it ends on them), and the steps that wrote a line not following from the line
    before it (an item line from the running balance, a fix from the item's start)."""
    truth = true_values(problem)
    lines = text.split("\n")
    on_track, locally_wrong = [], set()
    done, value, item_start = 0, problem.metadata["start"], None
    for step, line in enumerate(lines):
        if line.startswith("Answer: "):
            written = int(line.split()[1])
            on_track.append(written == truth[done])
            if written != value:
                locally_wrong.add(step)
            break
        word, a, sign, k, r = LINE.fullmatch(line).groups()
        a, k, r = int(a), int(k), int(r)
        origin = item_start if word == "fix " else value
        if word != "fix ":
            item_start, done = value, done + 1
        if a != origin or r != (a + (k if sign == "+" else -k)) % 100:
            locally_wrong.add(step)
        value = r
        on_track.append(value == truth[done])
    off_for_good = [i for i in range(len(on_track)) if not any(on_track[i:])]
    return (off_for_good[0] if off_for_good else None), locally_wrong


@given(drawn=responses())
def test_the_first_uncorrected_step_is_where_a_replay_leaves_the_true_balances_for_good(drawn):
    problem, text = drawn
    first_off, _ = replay(problem, text)
    verdict = TASK.first_wrong_step(problem, text)
    assert (verdict.step if verdict else None) == first_off, text


@given(drawn=responses())
def test_a_lines_state_is_the_next_item_and_the_balance_written_before_it(drawn):
    """GiGPO's anchor states (Task.state_keys), against a replay of the written lines: an item
    line and the fixes after it are taken at the item count so far and the balance the line
    before wrote; a fixed slip and no slip meet again once the balances agree."""
    problem, text = drawn
    expected, done, value = [], 0, problem.metadata["start"]
    for line in text.split("\n"):
        if line.startswith("Answer: "):
            expected.append(f"{done}:{value}")
            break
        word, _, _, _, result = LINE.fullmatch(line).groups()
        expected.append(f"{done}:{value}")  # a fix line redoes the item just counted
        done += word != "fix "
        value = int(result)
    assert TASK.state_keys(problem, text) == expected
    assert len(expected) == len(TASK.step_spans(text))


def test_a_fixed_slip_rejoins_the_clean_responses_state():
    problem = EVAL[0]
    clean = TASK.reference_solution(problem).split("\n")
    word, a, sign, k, result = LINE.fullmatch(clean[0]).groups()
    slipped = f"{word or ''}{a}{sign}{k}={(int(result) + 1) % 100}"
    fixed = [slipped, f"fix {a}{sign}{k}={result}", *clean[1:]]
    clean_keys = TASK.state_keys(problem, "\n".join(clean))
    fixed_keys = TASK.state_keys(problem, "\n".join(fixed))
    assert fixed_keys[1] == f"1:{(int(result) + 1) % 100}"  # the fix is taken after the slip
    assert fixed_keys[2:] == clean_keys[1:]  # then the same states as the clean response
    assert TASK.state_keys(problem, "so 1+x=3\nAnswer: 3")[1] is None


@given(drawn=responses())
def test_the_answer_is_right_exactly_when_every_wrong_line_was_corrected(drawn):
    problem, text = drawn
    check = TASK.check_steps(problem, text)
    assert (TASK.grade(problem, text).reward == 1.0) == (check.wrong == [])
    _, locally_wrong = replay(problem, text)
    corrected = {v.step for v in TASK.corrected_steps(problem, text)}
    uncorrected = {v.step for v in check.wrong}
    assert corrected | uncorrected == locally_wrong and not corrected & uncorrected


def test_a_fixed_slip_is_not_blamed_and_a_later_slip_is():
    problem = TASK.make_problem("p", 37, [("+", 25), ("-", 48), ("+", 9), ("+", 50)])
    fixed = "so 37+25=62\nthen 62-48=14\nnext 14+9=33\nfix 14+9=23\nso 23+50=73\nAnswer: 73"
    assert TASK.grade(problem, fixed).reward == 1.0
    assert TASK.wrong_steps(problem, fixed) == []
    assert [v.step for v in TASK.corrected_steps(problem, fixed)] == [2]
    failed = fixed.replace("23+50=73\nAnswer: 73", "23+50=83\nAnswer: 83")
    assert [(v.step, v.kind) for v in TASK.wrong_steps(problem, failed)] == [(4, "arithmetic")]
    assert TASK.check_steps(problem, failed).first_wrong.step == 4  # not the fixed slip at 2
    late = "so 37+25=62\nthen 62-48=14\nnext 14+9=33\nso 33+50=83\nfix 14+9=23\nAnswer: 23"
    wrong = TASK.wrong_steps(problem, late)  # a fix after the next item comes too late
    assert wrong[0].step == 2 and TASK.grade(problem, late).reward == 0.0


def test_a_wrong_fix_and_a_fix_with_nothing_to_fix_are_wrong_steps():
    problem = TASK.make_problem("p", 10, [("+", 5), ("+", 6)])
    spoiled = "so 10+5=15\nfix 10+5=16\nso 16+6=22\nAnswer: 22"
    assert [(v.step, v.kind) for v in TASK.wrong_steps(problem, spoiled)] == [(1, "arithmetic")]
    early = "fix 10+5=15\nso 10+5=15\nso 15+6=21\nAnswer: 21"
    assert [(v.step, v.kind) for v in TASK.wrong_steps(problem, early)] == [(0, "extra step")]


@pytest.mark.parametrize("kind", ERROR_KINDS)
def test_each_injected_error_is_found_at_its_step(kind: str) -> None:
    rng = random.Random(0)
    for problem in EVAL[:15]:
        n = len(items_of(problem))
        last = {"missing step": n - 2, "extra step": n}.get(kind, n - 1)
        for step in range(last + 1):
            text = TASK.corrupt_solution(problem, kind, step, rng)
            verdict = TASK.first_wrong_step(problem, text)
            assert verdict is not None and (verdict.step, verdict.kind) == (step, kind), text
            if kind != "early stop":
                assert len(TASK.wrong_steps(problem, text)) == 1, text


texts = st.one_of(
    st.text(alphabet=ALPHABET, max_size=300),
    st.text(max_size=200),
    st.sampled_from(["", "\n", "fix\nfix 1+1=2\nAnswer: 3", "fix 9" * 100, "9" * 10000]),
)


@given(text=texts)
def test_any_text_is_judged_without_raising(text: str) -> None:
    problem = EVAL[0]
    grade = TASK.grade(problem, text)
    check = TASK.check_steps(problem, text)
    if check.first_wrong is None:
        assert grade.reward == 1.0
    for verdict in check.wrong:
        assert 0 <= verdict.char_start <= verdict.char_end <= len(text)
    for s, e in check.filler:
        assert not re.search(r"\d|\n", text[s:e]) and text[s:e] != "fix "


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------


def states(text: str) -> list[str]:
    """Every state of a response: its first k whole lines, before the answer line."""
    lines = text.split("\n")[:-1]
    return ["".join(line + "\n" for line in lines[:k]) for k in range(len(lines) + 1)]


def recoverable(problem, prefix: str) -> bool:
    """Whether the balance before the state's last item is the true one (then a fix, or
    nothing, puts the state back on the true balances): replayed from the lines."""
    truth = true_values(problem)
    done, value, item_start = 0, problem.metadata["start"], problem.metadata["start"]
    for line in prefix.split("\n")[:-1]:
        word, _, _, _, r = LINE.fullmatch(line).groups()
        if word != "fix ":
            item_start, done = value, done + 1
        value = int(r)
    return item_start == truth[max(done - 1, 0)]


@given(drawn=responses())
def test_a_states_value_is_zero_exactly_when_no_fix_can_save_it(drawn):
    problem, text = drawn
    for prefix in states(text):
        found = TASK.value_probes(problem, prefix)
        assert (found is not None) == recoverable(problem, prefix), prefix
        if found is not None:  # its continuation is a right solution from the state
            whole = found.texts[0]
            assert whole.startswith(prefix) and TASK.grade(problem, whole).reward == 1.0
            assert TASK.wrong_steps(problem, whole) == []


@given(drawn=responses())
def test_a_states_value_is_its_next_lines_probability_times_its_successors(drawn):
    """V(s) = P(the continuation's first line | s) V(s'), s' = s and that line: the successor
    continues the same text and scores the same renderings but the first."""
    problem, text = drawn
    for prefix in states(text):
        found = TASK.value_probes(problem, prefix)
        if found is None:
            continue
        continuation = found.texts[0][len(prefix) :]
        if continuation.startswith("Answer:"):
            assert len(found.lines) == 1
            continue
        successor = prefix + continuation.split("\n", 1)[0] + "\n"
        after = TASK.value_probes(problem, successor)
        assert after is not None and after.texts == found.texts
        assert after.lines == found.lines[1:]


def test_a_pending_slip_is_worth_its_fix_and_the_fix_word_is_scored():
    problem = TASK.make_problem("p", 37, [("+", 25), ("-", 48)])
    found = TASK.value_probes(problem, "so 37+25=52\n")
    first = found.lines[0][0]
    assert found.texts[0][first.start : first.end] == "fix 37+25=62\n"
    closed = TASK.value_probes(problem, "so 37+25=52\nthen 52-48=4\n")
    assert closed is None  # the slip's item is closed: no fix reaches it any more
    with pytest.raises(ValueError, match="prefix"):
        TASK.value_probes(problem, "so 37+25=62\nAnswer: 62")


# --------------------------------------------------------------------------------------------
# Problems, traces and variants
# --------------------------------------------------------------------------------------------


def test_problems_vary_in_length_and_are_deterministic():
    sizes = [len(items_of(p)) for p in EVAL]
    assert min(sizes) == 2 and max(sizes) >= 12
    assert 4.5 <= statistics.mean(sizes) <= 8.5  # about the chain's 8 steps
    lengths = [len(TASK.reference_solution(p)) for p in EVAL]
    assert max(lengths) >= 5 * min(lengths)
    again = LedgerTask(LedgerConfig(train_size=300, eval_size=120))
    assert [p.prompt for p in again.problems("eval")] == [p.prompt for p in EVAL]
    assert not {p.prompt for p in TASK.problems("train")} & {p.prompt for p in EVAL}


@pytest.mark.parametrize(
    ("field", "value"),
    [("min_items", 0), ("max_items", 1), ("slip_rate", 1.5), ("fix_rate", -0.1),
     ("fillers", ["fix"]), ("eval_size", 0)],
)  # fmt: skip
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        get_task("ledger", **{field: value})


def test_the_registry_builds_the_ledger_and_names_an_unknown_option():
    assert get_task("ledger", min_items=3, max_items=3, eval_size=5).problems("eval")[0]
    with pytest.raises(ValueError, match="steps: unknown option of task ledger"):
        get_task("ledger", steps=8)


def test_sft_traces_slip_and_fix_at_their_rates_and_clean_traces_do_neither():
    rng = random.Random(0)
    lines = fixes = slipped = 0
    for problem in EVAL * 4:
        text = TASK.sample_solution(problem, rng)
        steps = text.split("\n")[:-1]
        lines += sum(not s.startswith("fix") for s in steps)
        fixes += sum(s.startswith("fix") for s in steps)
        slipped += len(TASK.corrected_steps(problem, text)) + len(TASK.wrong_steps(problem, text))
    assert 0.06 <= slipped / (lines + fixes) <= 0.10  # slip_rate 0.08 per written result
    assert 0.35 <= fixes / slipped <= 0.65  # fix_rate 0.5 per wrong line
    clean = LedgerTask(LedgerConfig(train_size=10, eval_size=10, **CLEAN_TRACE_OPTIONS))
    for problem in clean.problems("eval"):
        text = clean.sample_solution(problem, rng)
        assert "fix" not in text and clean.grade(problem, text).reward == 1.0


def test_sft_localisation_answers_the_first_uncorrected_step_past_corrected_ones():
    rng = random.Random(1)
    past_a_fix = 0
    for _ in range(150):
        prompt, completion = TASK.sft_example(rng, mix={"localize": 1.0})
        assert prompt.endswith(LOCALIZE_QUESTION + "\n")
        numbered = re.findall(r"step \d+: (.*)\n", prompt)
        start = int(re.match(r"start at (\d+)", prompt).group(1))
        problem = next(  # rebuild the problem from its prompt's items
            TASK.make_problem("x", start, items)
            for items in [[(("+" if w == "add" else "-"), int(k))
                           for w, k in re.findall(r"(add|minus) (\d+)", prompt.split("\n")[0])]]
        )  # fmt: skip
        response = "\n".join(numbered)
        truth = TASK.first_wrong_step(problem, response)
        assert parse_step_answer(completion) == truth.step + 1
        corrected = TASK.corrected_steps(problem, response)
        past_a_fix += bool(corrected and corrected[0].step < truth.step)
    assert past_a_fix > 0  # some answers skip a corrected slip before the real one


def test_repair_drops_the_fixes_keeps_the_connectives_and_is_right():
    problem = TASK.make_problem("p", 37, [("+", 25), ("-", 48), ("+", 9)])
    failed = "now 37+25=52\nfix 37+25=62\nthen 62-48=14\nnext 14+9=33\nAnswer: 33"
    repaired = TASK.repair_solution(problem, failed)
    assert repaired == "now 37+25=62\nthen 62-48=14\nnext 14+9=23\nAnswer: 23"
    assert TASK.grade(problem, repaired).reward == 1.0


def test_every_variant_is_made_and_the_plan_counts_the_items():
    problem = EVAL[0]
    response = TASK.sample_solution(problem, random.Random(0))
    for kind in PROMPT_VARIANTS:
        made = TASK.variant(problem, kind, response=response, hint="plan: 3 items.")
        assert made and set(made) <= set(ALPHABET)
    assert problem.answer in TASK.variant(problem, "oracle_hint")
    prompt, plan = TASK.sft_example(random.Random(3), mix={"thinker": 1.0})
    assert parse_plan(plan) == len(re.findall(r"(add|minus) \d+", prompt))
    with pytest.raises(ValueError, match="needs a response"):
        TASK.variant(problem, "localize")


def test_sft_examples_use_the_alphabet_and_avoid_the_eval_split():
    rng = random.Random(2)
    evals = {p.prompt for p in EVAL}
    for _ in range(200):
        prompt, completion = TASK.sft_example(rng)
        assert set(prompt + completion) <= set(ALPHABET)
        assert prompt not in evals


def test_the_diagnostic_counts_what_resets_exact_credit_and_length_normalisation_act_on():
    from creditbench.harness.tasks.ledger.diagnostics import where_mechanisms_act

    problem = TASK.make_problem("p", 37, [("+", 25), ("-", 48), ("+", 9)])
    long = TASK.make_problem("q", 1, [("+", 2)] * 1 + [("-", 3), ("+", 2)] * 5)
    texts = [
        "so 37+25=52\nfix 37+25=62\nso 62-48=14\nso 14+9=23\nAnswer: 23",  # fixed, passed
        "so 37+25=52\nfix 37+25=62\nso 62-48=15\nso 15+9=24\nAnswer: 24",  # fixed, then failed
        "so 37+25=62\nso 62-48=14\nso 14+9=23\nAnswer: 23",  # clean, passed
        TASK.reference_solution(long).replace("Answer: ", "Answer: 9"),  # long, failed
    ]
    figures = where_mechanisms_act(TASK, [problem, problem, problem, long], texts)
    assert figures["accuracy"] == 0.5
    assert figures["failures_first_wrong_line_corrected"] == 0.5
    assert figures["successes_with_corrected_slip"] == 0.5
    assert figures["failure_rate_longest_third"] == 1.0
    assert figures["failure_rate_shortest_third"] == 0.0
    fix_chars = 2 * len("fix 37+25=62")
    assert figures["fix_character_share"] == pytest.approx(fix_chars / sum(map(len, texts)))
    with pytest.raises(ValueError, match="texts"):
        where_mechanisms_act(TASK, [problem], texts[:1])


# --------------------------------------------------------------------------------------------
# The values scored by a policy (the oracle's analytic estimator through the harness)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    from creditbench.harness.config import load_config
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, save_policy
    from creditbench.harness.services.step_plan import StepPlan
    from creditbench.harness.training.trainer import Trainer

    tmp = tmp_path_factory.mktemp("ledger-values")
    tokenizer = build_char_tokenizer(ALPHABET)
    policy = save_policy(build_model("nano", tokenizer, seed=0), tokenizer, tmp / "nano")
    settings = [
        "task=ledger",
        "task_options.max_items=3",
        'task_options.fillers=["so"]',
        f"model.path={policy}",
    ]
    trainer = Trainer(load_config(None, settings), str(tmp / "run"))
    trainer.build()
    trainer.services.begin_step(StepPlan(0, reference_method=True))
    return trainer.services


def test_a_pending_slips_value_is_the_policys_probability_of_its_fix_and_the_rest(services):
    """After a slip, V(s) is the product of the policy's probabilities of the fix line (its
    word ``fix`` included), of each later line after its connective, and of the answer and the
    end of sequence, read off one teacher-forced score of a response that slips and fixes."""
    import math

    import torch

    index, problem = 0, services.train_problems[0]
    right = services.task.reference_solution(problem).split("\n")
    first = right[0]
    slipped = first[: first.rindex("=") + 1] + str((int(first.split("=")[-1]) + 1) % 100)
    response = "\n".join([slipped, "fix " + first.removeprefix("so "), *right[1:]])
    batch = services.batch_from_responses([index], [response])
    values = services.task_values(batch)
    logprobs = services.score(batch)[0]  # one token per character, then the end of sequence
    lines = response.split("\n")
    spans, at = [], 0
    for line in lines[:-1]:
        skip = 0 if line.startswith("fix") else len("so ")
        spans.append((at + skip, at + len(line) + 1))
        at += len(line) + 1
    spans.append((at, len(response) + 1))
    expected = [math.exp(sum(float(logprobs[s:e].sum()) for s, e in spans[k:]))
                for k in range(1, len(spans))]  # fmt: skip
    torch.testing.assert_close(values[0, 1 : len(spans)], torch.tensor(expected), rtol=1e-4, atol=0)
    sampled = services.sample_batch()
    from creditbench.methods.values import state_starts

    found = services.task_values(sampled)
    _, valid = state_starts(sampled.step_ids)
    assert ((found[valid] >= 0) & (found[valid] <= 1)).all()
