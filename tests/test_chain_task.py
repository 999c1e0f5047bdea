"""The chain testbed: problems, grader, step checker, variants, SFT examples, token masks."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from creditbench.harness.tasks import get_task
from creditbench.harness.tasks.base import PROMPT_VARIANTS
from creditbench.harness.tasks.chain import ALPHABET, ERROR_KINDS, ChainConfig, ChainTask
from creditbench.harness.tasks.chain.prompts import LOCALIZE_QUESTION, parse_step_answer
from creditbench.harness.tasks.chain.traces import parse_plan
from creditbench.harness.tasks.steps import spans_to_token_mask, step_masks, token_char_offsets

TASK = ChainTask(ChainConfig(train_size=300, eval_size=60))
EVAL = TASK.problems("eval")
OPS = {"add": "+", "minus": "-", "times": "*"}


def numbers(text: str) -> list[str]:
    return re.findall(r"\d+", text)


def problem_from_prompt(task: ChainTask, line: str):
    """Rebuild a problem from its default prompt, independently of the task's own records."""
    sentences = [s.strip() for s in line.split(".") if s.strip()][:-1]  # drop "work mod 100"
    start = int(sentences[0].split()[-1])
    ops = []
    for sentence in sentences[1:]:
        if sentence == "last digit":
            ops.append(("%", 10))
        else:
            word, k = sentence.split()
            ops.append((OPS[word], int(k)))
    return task.make_problem("rebuilt", start, ops)


# --------------------------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------------------------


def test_problems_are_deterministic_from_the_seed() -> None:
    again = ChainTask(ChainConfig(train_size=300, eval_size=60))
    assert [p.prompt for p in again.problems("train")] == [p.prompt for p in TASK.problems("train")]
    other = ChainTask(ChainConfig(train_size=300, eval_size=60, seed=1))
    assert [p.prompt for p in other.problems("eval")] != [p.prompt for p in EVAL]


def test_splits_are_disjoint_distinct_and_sized() -> None:
    train = {p.prompt for p in TASK.problems("train")}
    evals = {p.prompt for p in EVAL}
    assert len(train) == 300 and len(evals) == 60
    assert not train & evals


def test_eval_does_not_depend_on_the_train_size() -> None:
    bigger = ChainTask(ChainConfig(train_size=700, eval_size=60))
    assert [p.prompt for p in bigger.problems("eval")] == [p.prompt for p in EVAL]


@pytest.mark.parametrize("steps", [4, 12])
def test_chain_length_is_the_number_of_operations(steps: int) -> None:
    task = ChainTask(ChainConfig(steps=steps, train_size=5, eval_size=5))
    for problem in task.problems("train"):
        assert len(problem.metadata["ops"]) == steps
        assert task.reference_solution(problem).count("\n") == steps


@pytest.mark.parametrize(
    "field, value",
    [("steps", 0), ("slip_rate", 1.5), ("weak_op", "div"), ("fillers", ["So"]), ("eval_size", 0),
     ("mul_rate", 0.95), ("multipliers", [12])],
)  # fmt: skip
def test_bad_config_names_the_field(field: str, value) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        ChainConfig(**{field: value})


def test_registry_passes_options_to_the_config() -> None:
    task = get_task("chain", steps=5, train_size=3, eval_size=3)
    assert len(task.problems("eval")[0].metadata["ops"]) == 5


# --------------------------------------------------------------------------------------------
# Grader and step checker
# --------------------------------------------------------------------------------------------


def test_reference_solution_is_right_everywhere() -> None:
    for problem in EVAL:
        text = TASK.reference_solution(problem)
        assert TASK.grade(problem, text).reward == 1.0
        assert TASK.first_wrong_step(problem, text) is None
        assert TASK.wrong_steps(problem, text) == []


def test_grade_reads_the_answer_line() -> None:
    problem = EVAL[0]
    body = TASK.reference_solution(problem).rsplit("\n", 1)[0]
    wrong = (int(problem.answer) + 1) % 100
    assert TASK.grade(problem, f"{body}\nAnswer: {problem.answer}").reason == "correct"
    assert TASK.grade(problem, f"{body}\nAnswer: {wrong}").reason == "wrong answer"
    assert TASK.grade(problem, body).reason == "no answer"
    assert TASK.grade(problem, f"{body}\nAnswer: x{problem.answer}").reason == "malformed answer"


@pytest.mark.parametrize("kind", ERROR_KINDS)
def test_each_injected_error_is_found_at_its_step(kind: str) -> None:
    rng = random.Random(0)
    for problem in EVAL[:15]:
        n = len(problem.metadata["ops"])
        last = {"missing step": n - 2, "extra step": n}.get(kind, n - 1)
        for step in range(last + 1):
            text = TASK.corrupt_solution(problem, kind, step, rng)
            verdict = TASK.first_wrong_step(problem, text)
            assert verdict is not None and (verdict.step, verdict.kind) == (step, kind), text
            assert (verdict.char_start, verdict.char_end) == TASK.step_spans(text)[step]
            if kind != "early stop":  # one wrong line; the lines around it carry on correctly
                assert len(TASK.wrong_steps(problem, text)) == 1, text


def test_a_cancelled_slip_is_a_wrong_step_inside_a_correct_answer() -> None:
    task = ChainTask(ChainConfig(train_size=1, eval_size=1))
    problem = task.make_problem("p", 23, [("+", 40), ("%", 10), ("+", 5)])
    text = "so 23+40=73\nthen 73%10=3\nnow 3+5=8\nAnswer: 8"  # 63 slipped to 73
    assert task.grade(problem, text).reward == 1.0
    verdict = task.first_wrong_step(problem, text)
    assert (verdict.step, verdict.kind) == (0, "arithmetic")
    assert task.wrong_step_spans(problem, text) == [(0, 11)]


def test_split_multiplication_is_checked_part_by_part() -> None:
    problem = TASK.make_problem("p", 14, [("*", 7)])
    assert TASK.first_wrong_step(problem, "so 14*(3+4)=42+56=98\nAnswer: 98") is None
    assert TASK.first_wrong_step(problem, "so 14*(2+5)=28+70=98\nAnswer: 98") is None
    for wrong in ("so 14*(3+4)=42+57=99", "so 14*(3+4)=43+56=99", "so 14*(3+3)=42+42=84"):
        verdict = TASK.first_wrong_step(problem, f"{wrong}\nAnswer: 99")
        assert verdict is not None and verdict.step == 0, wrong


texts = st.one_of(
    st.text(alphabet=ALPHABET, max_size=300),
    st.text(max_size=200),
    st.sampled_from(["", "\n", "\n\n\nAnswer:", "Answer: 99999999999999", "9" * 10000]),
)


@given(text=texts)
def test_any_text_is_judged_without_raising(text: str) -> None:
    problem = EVAL[0]
    grade = TASK.grade(problem, text)
    verdict = TASK.first_wrong_step(problem, text)
    spans = TASK.step_spans(text)
    if verdict is None:
        assert grade.reward == 1.0
    if verdict is not None:
        assert 0 <= verdict.char_start <= verdict.char_end <= len(text)
        assert verdict.step <= len(spans)
        if verdict.step < len(spans):
            assert (verdict.char_start, verdict.char_end) == spans[verdict.step]
    for s, e in TASK.filler_spans(text):
        assert not re.search(r"\d|\n", text[s:e])


def test_huge_text_is_judged() -> None:
    problem = EVAL[0]
    text = TASK.reference_solution(problem) * 20000
    assert TASK.grade(problem, text).reward == 0.0  # "...Answer: 73so ..." is malformed
    assert TASK.first_wrong_step(problem, text) is not None


def _perturb(text: str, edits: list[tuple[int, int, str]]) -> str:
    for op, where, char in edits:
        lines = text.split("\n")
        line = where % max(len(lines), 1)
        pos = where % (len(text) + 1)
        if op == 0:
            text = text[:pos] + char + text[pos:]
        elif op == 1:
            text = text[:pos] + text[pos + 1 :]
        elif op == 2:
            text = text[:pos] + char + text[pos + 1 :]
        elif op == 3:
            text = "\n".join(lines[:line] + lines[line + 1 :])
        elif op == 4:
            text = "\n".join(lines[: line + 1] + lines[line:])
        else:
            text = "\n".join(
                lines[:line]
                + lines[line + 1 : line + 2]
                + lines[line : line + 1]
                + lines[line + 2 :]
            )
    return text


@given(
    index=st.integers(0, len(EVAL) - 1),
    seed=st.integers(0, 10**6),
    edits=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 10**4), st.sampled_from(ALPHABET)), max_size=3
    ),
)
def test_step_checker_agrees_with_the_grader(index: int, seed: int, edits) -> None:
    """No wrong step means a correct answer; the first wrong step is the first of all of them."""
    problem = EVAL[index]
    text = _perturb(TASK.sample_solution(problem, random.Random(seed)), edits)
    verdict = TASK.first_wrong_step(problem, text)
    if verdict is None:
        assert TASK.grade(problem, text).reward == 1.0
    if TASK.grade(problem, text).reward == 0.0:
        assert verdict is not None
    all_wrong = TASK.wrong_steps(problem, text)
    assert (all_wrong[0] if all_wrong else None) == verdict


def test_filler_spans_cover_exactly_the_filler_words() -> None:
    rng = random.Random(1)
    fillers = {f + " " for f in TASK.config.fillers}
    for problem in EVAL[:20]:
        text = TASK.sample_solution(problem, rng)
        spans = TASK.filler_spans(text)
        assert len(spans) == len(problem.metadata["ops"])
        assert {text[s:e] for s, e in spans} <= fillers
        # replacing every filler changes neither the grade nor any verdict
        swapped = re.sub(r"^(so|then|next|now) ", "well ", text, flags=re.M)
        assert TASK.grade(problem, swapped) == TASK.grade(problem, text)
        assert [(v.step, v.kind) for v in TASK.wrong_steps(problem, swapped)] == [
            (v.step, v.kind) for v in TASK.wrong_steps(problem, text)
        ]


# --------------------------------------------------------------------------------------------
# Prompt variants
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind", ["rewrite_template", "rewrite_typo", "rewrite_framing", "rewrite_suffix"]
)
def test_rewrites_keep_every_number_and_change_the_text(kind: str) -> None:
    for problem in EVAL:
        rewrite = TASK.variant(problem, kind)
        assert rewrite != problem.prompt and rewrite.endswith("\n")
        assert numbers(rewrite) == numbers(problem.prompt)
        assert set(rewrite) <= set(ALPHABET)
        assert TASK.variant(problem, kind) == rewrite  # fixed by the problem id


def test_typo_is_one_character_edit_outside_numbers() -> None:
    for problem in EVAL:
        a, b = problem.prompt, TASK.variant(problem, "rewrite_typo")
        i = next(k for k in range(min(len(a), len(b))) if a[k] != b[k])
        j = 0
        while j < min(len(a), len(b)) - i and a[len(a) - 1 - j] == b[len(b) - 1 - j]:
            j += 1
        changed_a, changed_b = a[i : len(a) - j], b[i : len(b) - j]
        one_edit = len(changed_a) + len(changed_b) <= 2  # a deletion, insertion or substitution
        swap = len(changed_a) == len(changed_b) == 2 and changed_a == changed_b[::-1]
        assert one_edit or swap, (changed_a, changed_b)
        assert not re.search(r"\d", changed_a + changed_b)


def test_template_rewrite_states_the_same_problem() -> None:
    for problem in EVAL[:10]:
        rewrite = TASK.variant(problem, "rewrite_template")
        assert numbers(rewrite) == numbers(problem.prompt)
        assert rewrite.count(".") + rewrite.count(",") >= len(problem.metadata["ops"]) + 1


def test_every_variant_is_produced_for_every_kind() -> None:
    problem = EVAL[3]
    response = TASK.corrupt_solution(problem, "arithmetic", 2, random.Random(0))
    for kind in PROMPT_VARIANTS:
        text = TASK.variant(problem, kind, response=response, hint="plan: split 7.")
        assert text.startswith(problem.prompt) or kind.startswith("rewrite_")
        assert set(text) <= set(ALPHABET)
    assert problem.answer in TASK.variant(problem, "oracle_hint").removeprefix(problem.prompt)
    assert TASK.variant(problem, "solo") == problem.prompt
    with pytest.raises(ValueError, match="needs a response"):
        TASK.variant(problem, "localize")
    with pytest.raises(ValueError, match="needs a hint"):
        TASK.variant(problem, "solver")
    with pytest.raises(ValueError, match="unknown variant"):
        TASK.variant(problem, "nope")


def test_localize_prompt_numbers_the_steps() -> None:
    problem = EVAL[0]
    response = TASK.corrupt_solution(problem, "operand", 4, random.Random(2))
    prompt = TASK.variant(problem, "localize", response=response)
    lines = prompt.removeprefix(problem.prompt).split("\n")
    assert lines[4].startswith("step 5: ") and lines[4].endswith(response.split("\n")[4])
    assert lines[-2] == LOCALIZE_QUESTION
    assert parse_step_answer("Step: 5") == 5 and parse_step_answer("no idea") is None


def test_repair_is_a_minimal_edit_that_is_right() -> None:
    rng = random.Random(3)
    for problem in EVAL[:20]:
        failed = TASK.sample_solution(problem, rng, force_slip_at=5)
        fixed = TASK.repair_solution(problem, failed)
        assert TASK.grade(problem, fixed).reward == 1.0
        assert TASK.wrong_steps(problem, fixed) == []
        first = TASK.first_wrong_step(problem, failed).step
        assert fixed.split("\n")[:first] == failed.split("\n")[:first]
        assert [fixed[s:e] for s, e in TASK.filler_spans(fixed)] == [
            failed[s:e] for s, e in TASK.filler_spans(failed)
        ]


# --------------------------------------------------------------------------------------------
# SFT examples
# --------------------------------------------------------------------------------------------


def test_sft_examples_are_well_formed() -> None:
    rng = random.Random(0)
    for _ in range(300):
        prompt, completion = TASK.sft_example(rng)
        assert set(prompt + completion) <= set(ALPHABET)
        assert prompt.endswith("\n") and completion and not completion.endswith("\n")
        assert (
            re.fullmatch(r"Step: \d+", completion)
            or completion.startswith("plan: ")
            or re.search(r"\nAnswer: \d+$", completion)
        ), completion


def test_sft_localisation_answers_name_the_true_first_wrong_step() -> None:
    rng = random.Random(1)
    for _ in range(40):
        prompt, completion = TASK.sft_example(rng, mix={"localize": 1.0})
        head, _, rest = prompt.partition("\n")
        problem = problem_from_prompt(TASK, head)
        lines = rest.split("\n")[:-2]  # drop the question and the final empty string
        solution = "\n".join(re.sub(r"^step \d+: ", "", line) for line in lines)
        assert TASK.grade(problem, solution).reward == 0.0
        assert parse_step_answer(completion) == TASK.first_wrong_step(problem, solution).step + 1


def test_sft_solver_follows_the_plan_and_oracle_hint_is_right() -> None:
    rng = random.Random(2)
    for _ in range(40):
        prompt, completion = TASK.sft_example(rng, mix={"solver": 1.0})
        head, plan = prompt.split("\n")[:2]
        split_ks = parse_plan(plan)
        for s, e in TASK.step_spans(completion)[:-1]:
            line = completion[s:e]
            if "*(" in line:
                assert sum(map(int, re.findall(r"\((\d)\+(\d)\)", line)[0])) in split_ks
            elif direct := re.search(r"\d\*(\d)=", line):
                assert int(direct.group(1)) not in split_ks
        prompt, completion = TASK.sft_example(rng, mix={"oracle_hint": 1.0})
        problem = problem_from_prompt(TASK, prompt.split("\n")[0])
        assert TASK.grade(problem, completion).reward == 1.0
        assert TASK.first_wrong_step(problem, completion) is None


def test_sft_problems_avoid_the_eval_split() -> None:
    # one step: a small problem space, of which the eval split is a large part
    task = ChainTask(ChainConfig(steps=1, eval_size=4000, train_size=0))
    evals = {p.prompt for p in task.problems("eval")}
    rng = random.Random(0)
    prompts = [task.sft_example(rng, mix={"solve": 1.0})[0] for _ in range(300)]
    assert not evals & set(prompts)


def test_sft_traces_slip_more_on_the_weak_and_the_risky_steps() -> None:
    task = ChainTask(ChainConfig(train_size=400, eval_size=10))
    rng = random.Random(4)
    wrong = {"sub": [0, 0], "add": [0, 0], "direct": [0, 0], "split": [0, 0]}
    for problem in task.problems("train"):
        text = task.sample_solution(problem, rng)
        kinds = {v.step for v in task.wrong_steps(problem, text)}
        for i, (s, e) in enumerate(task.step_spans(text)[:-1]):
            line = text[s:e]
            key = (
                "split"
                if "*(" in line
                else "direct"
                if re.search(r"\d\*[1-9]", line)
                else ("sub" if "-" in line else "add" if "+" in line else None)
            )
            if key:
                wrong[key][0] += i in kinds
                wrong[key][1] += 1
    rate = {k: a / b for k, (a, b) in wrong.items()}
    assert rate["sub"] > 1.5 * rate["add"] and rate["direct"] > 1.5 * rate["split"]


def test_bad_mix_is_refused() -> None:
    with pytest.raises(ValueError, match="mix"):
        TASK.sft_example(random.Random(0), mix={"dance": 1.0})


# --------------------------------------------------------------------------------------------
# Token masks
# --------------------------------------------------------------------------------------------


def _char_tokenizer():
    from creditbench.harness.models.modeling import build_char_tokenizer

    return build_char_tokenizer(ALPHABET)


def test_step_masks_select_the_right_tokens() -> None:
    tokenizer = _char_tokenizer()
    problem = EVAL[1]
    text = TASK.corrupt_solution(problem, "arithmetic", 3, random.Random(5))
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    offsets = token_char_offsets(tokenizer, ids)
    extras = step_masks(TASK.check_steps(problem, text), offsets)
    assert all(len(mask) == len(ids) for mask in extras.values())

    def decoded(mask):
        return tokenizer.decode(
            [t for t, m in zip(ids, mask, strict=True) if m], skip_special_tokens=True
        )

    s, e = TASK.step_spans(text)[3]
    assert decoded(extras["first_wrong_mask"]) == text[s:e]
    assert decoded(extras["after_wrong_mask"]) == text[e:]
    assert extras["after_wrong_mask"][-1] == 1  # the end of sequence comes after it too
    assert decoded(extras["wrong_step_mask"]) == text[s:e]
    assert decoded(extras["filler_mask"]) == "".join(text[a:b] for a, b in TASK.filler_spans(text))


def test_a_stop_without_answer_blames_the_end_of_sequence() -> None:
    tokenizer = _char_tokenizer()
    problem = EVAL[1]
    text = TASK.reference_solution(problem).rsplit("\n", 1)[0]  # all steps, no answer line
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    extras = step_masks(TASK.check_steps(problem, text), token_char_offsets(tokenizer, ids))
    assert extras["first_wrong_mask"] == [0] * (len(ids) - 1) + [1]
    assert sum(extras["after_wrong_mask"]) == 0


class _PairTokenizer:
    """Two characters per token, and decoding a lone token drops its leading space: per-token
    decoding does not add up to the text, so offsets must come from decoded prefixes."""

    def __init__(self, text: str) -> None:
        self.pieces = [text[i : i + 2] for i in range(0, len(text), 2)]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.pieces[i] for i in ids)

    def batch_decode(self, batch, skip_special_tokens=True):
        return [self.decode(ids).lstrip(" ") for ids in batch]


def test_offsets_from_prefixes_when_pieces_do_not_add_up() -> None:
    text = "so 14+3=17\nnow 17*3=51\nAnswer: 51"
    tokenizer = _PairTokenizer(text)
    offsets = token_char_offsets(tokenizer, list(range(len(tokenizer.pieces))))
    assert offsets == [(i, min(i + 2, len(text))) for i in range(0, len(text), 2)]
    assert spans_to_token_mask(offsets, [(3, 5), (11, 11)]) == [0, 1, 1] + [0] * (len(offsets) - 3)


def test_a_mix_naming_a_variant_without_sft_examples_is_refused():
    """SDPO's teacher prompt (`solution_hint`) has no SFT example of its own: a base mix naming it
    once trained silently on the solver's plan shown as "a correct solution"."""
    import random

    from creditbench.harness.tasks import get_task

    task = get_task("chain", steps=2)
    with pytest.raises(ValueError, match=r"unknown: \['solution_hint'\]"):
        task.sft_example(random.Random(0), {"solve": 1.0, "solution_hint": 0.1})
    prompt, _ = task.sft_example(random.Random(0), {"solver": 1.0})  # the plan branch's own kind
    assert prompt
