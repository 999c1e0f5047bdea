"""The countdown world: reachability against brute force, the step checker against the grader,
and the exact values against every response a policy can write."""

from __future__ import annotations

import itertools
import math
import random
import re
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from creditbench.harness.tasks import get_task
from creditbench.harness.tasks.countdown import ALPHABET, CountdownConfig, CountdownTask
from creditbench.harness.tasks.countdown.grammar import (
    after_move,
    makeable,
    moves,
    reachable,
    render_step,
)
from creditbench.harness.tasks.countdown.task import INJECTED_ERRORS
from creditbench.harness.tasks.countdown.traces import dead_moves, live_moves
from creditbench.harness.tasks.countdown.values import continuations, state_numbers

TASK = CountdownTask(CountdownConfig(train_size=200, eval_size=40))
EVAL = TASK.problems("eval")
MAX_VALUE = 99

BLUNDERING = {
    rate: CountdownTask(CountdownConfig(train_size=0, eval_size=40, blunder_rate=rate))
    for rate in (0.0, 0.5, 1.0)
}
small_numbers = st.lists(st.integers(1, 9), min_size=1, max_size=4).map(tuple)


def brute_force_values(numbers: tuple[int, ...], max_value: int) -> set[int]:
    """Every value made from exactly ``numbers``, over ordered pairs and every operation,
    written independently of the task's move list (which writes each pair larger first)."""
    if len(numbers) == 1:
        return {numbers[0]}
    out: set[int] = set()
    for i, j in itertools.permutations(range(len(numbers)), 2):
        a, b = numbers[i], numbers[j]
        rest = [x for k, x in enumerate(numbers) if k not in (i, j)]
        for result in (a + b, a - b, a * b, a // b if b and a % b == 0 else -1):
            if 0 <= result <= max_value:
                out |= brute_force_values((*rest, result), max_value)
    return out


# --------------------------------------------------------------------------------------------
# Reachability
# --------------------------------------------------------------------------------------------


@given(small_numbers)
def test_reachability_agrees_with_brute_force(numbers):
    assert makeable(numbers, MAX_VALUE) == brute_force_values(numbers, MAX_VALUE)


@given(small_numbers, st.integers(0, 99))
def test_a_state_is_live_exactly_when_one_of_its_moves_is(numbers, target):
    """Reachability is consistent with its successors: a state of several numbers is live
    iff some move leads to a live state, and the live and dead moves split every move."""
    if len(numbers) < 2:
        return
    live = live_moves(numbers, target, MAX_VALUE)
    dead = dead_moves(numbers, target, MAX_VALUE)
    assert reachable(numbers, target, MAX_VALUE) == bool(live)
    assert sorted(live + dead) == sorted(moves(numbers, MAX_VALUE))


def test_problems_can_be_solved_within_the_solution_bound():
    for problem in EVAL:
        numbers = tuple(problem.metadata["numbers"])
        assert reachable(numbers, int(problem.answer), MAX_VALUE)
        assert 1 <= problem.metadata["solutions"] <= TASK.config.max_solutions
    assert not {p.prompt for p in EVAL} & {p.prompt for p in TASK.problems("train")}


# --------------------------------------------------------------------------------------------
# The grader and the step checker
# --------------------------------------------------------------------------------------------


@given(st.integers(0, 39), st.integers(0, 2**32 - 1), st.sampled_from([0.0, 0.5, 1.0]))
def test_the_grader_agrees_with_the_step_checker_on_sampled_traces(index, seed, blunder):
    task = BLUNDERING[blunder]
    problem = task.problems("eval")[index]
    text = task.sample_solution(problem, random.Random(seed))
    check = task.check_steps(problem, text)
    assert (task.grade(problem, text).reward == 1.0) == (not check.wrong)
    assert set(text) <= set(ALPHABET)
    if check.wrong and check.wrong[0].kind == "dead end":
        # a trace is right line by line, so it fails at its first dead end, and the state
        # before that line was live
        first = check.wrong[0]
        assert first.kind == "dead end" and first.step < len(check.steps)
        before = text[: check.steps[first.step][0]]
        assert state_numbers(tuple(problem.metadata["numbers"]), int(problem.answer), before,
                             MAX_VALUE) is not None  # fmt: skip


@given(
    st.integers(0, 39),
    st.sampled_from(INJECTED_ERRORS),
    st.integers(0, 2),
    st.integers(0, 2**32 - 1),
)
def test_an_injected_error_is_the_first_wrong_step(index, kind, step, seed):
    problem = EVAL[index]
    try:
        text = TASK.corrupt_solution(problem, kind, step, random.Random(seed))
    except ValueError:  # no dead end (or no list to reorder) at that line
        return
    first = TASK.check_steps(problem, text).wrong[0]
    assert (first.kind, first.step) == (kind, step)
    assert TASK.grade(problem, text).reward == 0.0


@given(st.integers(0, 39), st.integers(0, 2**32 - 1), st.sampled_from([0.0, 0.5, 1.0]))
def test_a_steps_state_is_the_numbers_left_before_it_whatever_pairs_made_them(index, seed, blunder):
    """GiGPO's anchor states (Task.state_keys): on a trace (every line right, blunders
    included), the state of line k is the multiset of numbers a replay from the problem's
    numbers leaves after k lines, however the lines combined them."""
    task = BLUNDERING[blunder]
    problem = task.problems("eval")[index]
    text = task.sample_solution(problem, random.Random(seed))
    keys = task.state_keys(problem, text)
    assert len(keys) == len(task.step_spans(text))
    numbers = tuple(problem.metadata["numbers"])
    lines = text.split("\n")
    for k, key in enumerate(keys):
        assert key == f"{k}:" + " ".join(map(str, sorted(numbers)))
        if k < len(lines) and not lines[k].startswith("Answer"):
            a, b, result = (int(x) for x in re.findall(r"\d+", lines[k])[:3])
            numbers = after_move(numbers, a, b, result)


def test_two_pairs_that_leave_the_same_numbers_lead_to_one_state():
    problem = TASK.make_problem("p", (1, 2, 3, 4), 24)
    one = "2*1=2 left 3 4 2\n4*3=12 left 2 12\n12*2=24 left 24\nAnswer: 24"
    other = "3*1=3 left 2 4 3\n4*3=12 left 2 12\n12*2=24 left 24\nAnswer: 24"
    assert TASK.state_keys(problem, one)[:2] == ["0:1 2 3 4", "1:2 3 4"]
    assert TASK.state_keys(problem, other)[:2] == ["0:1 2 3 4", "1:2 3 4"]
    assert TASK.state_keys(problem, "4*1=4 left 2 3 4\nAnswer: 4")[1] == "1:2 3 4"
    assert TASK.state_keys(problem, "2+1=3 left 3 4 3\nAnswer: 3")[1] == "1:3 3 4"
    # a line that does not parse leaves the next state unknown
    assert TASK.state_keys(problem, "2*1=2 so\n4*3=12 left 2 12") == ["0:1 2 3 4", None]


@given(st.integers(0, 39), st.text(alphabet=ALPHABET, max_size=80))
def test_the_checker_never_raises_and_locates_spans_inside_the_text(index, text):
    problem = EVAL[index]
    check = TASK.check_steps(problem, text)
    assert (TASK.grade(problem, text).reward == 1.0) == (not check.wrong)
    for verdict in check.wrong:
        assert 0 <= verdict.char_start <= verdict.char_end <= len(text)


def test_the_reference_solution_is_correct_and_every_other_line_format_is_not():
    problem = EVAL[0]
    text = TASK.reference_solution(problem)
    assert TASK.grade(problem, text).reward == 1.0
    first, rest = text.split("\n", 1)
    for bad in (first.replace("=", " = "), "0" + first, first + " "):
        assert TASK.grade(problem, bad + "\n" + rest).reward == 0.0
    # anything after the answer line's newline is not read
    assert TASK.grade(problem, text + "\nfoo").reward == 1.0
    assert TASK.grade(problem, text + "0").reward == 0.0


def test_a_dead_end_is_located_at_the_line_that_makes_the_target_unreachable():
    problem = next(p for p in EVAL if dead_moves(tuple(p.metadata["numbers"]), int(p.answer), 99))
    numbers, target = tuple(problem.metadata["numbers"]), int(problem.answer)
    a, op, b, result = dead_moves(numbers, target, MAX_VALUE)[0]
    rest = after_move(numbers, a, b, result)
    line = render_step(a, op, b, result, rest)
    check = TASK.check_steps(problem, line + "\n")
    assert [(v.step, v.kind) for v in check.wrong] == [(0, "dead end"), (1, "early stop")]
    assert TASK.value_probes(problem, line + "\n") is None
    assert TASK.value_probes(problem, "") is not None


def test_bad_options_name_their_field():
    with pytest.raises(ValueError, match="blunder_rate"):
        get_task("countdown", blunder_rate=2)
    with pytest.raises(ValueError, match="unknown option of task countdown"):
        get_task("countdown", steps=3)
    with pytest.raises(ValueError, match="mix"):
        TASK.sft_example(random.Random(0), mix={"oracle_hint": 1.0})


# --------------------------------------------------------------------------------------------
# The exact values
# --------------------------------------------------------------------------------------------


class MovePolicy:
    """A policy that writes only the task's lines, with probabilities of its own: at each line
    any allowed move (live or dead) by a hashed weight of the state and the move, and an
    answer line stating the number left (or, with probability ``slip``, one more); after it,
    the end of the sequence, a newline or a space (which the grader refuses)."""

    def __init__(self, seed: int, slip: float = 0.1, eos: float = 0.7, newline: float = 0.2):
        self.seed, self.slip, self.eos, self.newline = seed, slip, eos, newline

    def lines(self, numbers: tuple[int, ...], prefix: str) -> list[tuple[float, str, tuple]]:
        found = []
        for a, op, b, result in moves(numbers, MAX_VALUE):
            rest = after_move(numbers, a, b, result)
            found.append((render_step(a, op, b, result, rest), rest))
        weights = [1 + zlib.crc32(f"{self.seed}|{prefix}|{t}".encode()) % 7 for t, _ in found]
        total = sum(weights)
        return [(w / total, t, rest) for w, (t, rest) in zip(weights, found, strict=True)]

    def responses(self, numbers: tuple[int, ...], prefix: str = ""):
        """Every ``(probability, text)`` the policy writes from the state ``prefix``."""
        if len(numbers) == 1:
            for answer, p in ((numbers[0], 1 - self.slip), (numbers[0] + 1, self.slip)):
                ends = (("", self.eos), ("\n", self.newline), (" ", 1 - self.eos - self.newline))
                for end, q in ends:
                    yield p * q, f"Answer: {answer}{end}"
            return
        for p, line, rest in self.lines(numbers, prefix):
            for q, tail in self.responses(rest, prefix + line + "\n"):
                yield p * q, line + "\n" + tail

    def probability(self, numbers: tuple[int, ...], prefix: str, continuation: str) -> float:
        """The probability of writing ``continuation`` (then the end of sequence when it does
        not end with a newline) from the state ``prefix``."""
        return sum(p for p, text in self.responses(numbers, prefix) if text == continuation)


def probe_value(problem, prefix: str, policy: MovePolicy) -> float:
    """V(prefix) from the task's probes, each rendering's probability under ``policy``."""
    probes = TASK.value_probes(problem, prefix)
    if probes is None:
        return 0.0
    numbers = state_numbers(tuple(problem.metadata["numbers"]), int(problem.answer), prefix, 99)
    total = 0.0
    for rendering in probes.lines[0]:
        text = probes.texts[rendering.text]
        continuation = text[rendering.start : rendering.end]  # the end of sequence is implied
        total += policy.probability(numbers, prefix, continuation)
    return total


def test_a_state_after_a_right_line_has_the_states_continuations_behind_it():
    """C(s) is the union over live moves m of m followed by C(s + m): the set form of
    V(s) = sum_m pi(m | s) V(s + m), whatever the policy."""
    for problem in EVAL[:10]:
        numbers, target = tuple(problem.metadata["numbers"]), int(problem.answer)
        expected = []
        for a, op, b, result in live_moves(numbers, target, MAX_VALUE):
            rest = after_move(numbers, a, b, result)
            line = render_step(a, op, b, result, rest) + "\n"
            expected += [line + tail for tail in continuations(rest, target, MAX_VALUE)]
        assert continuations(numbers, target, MAX_VALUE) == expected
        assert len(expected) == problem.metadata["solutions"]


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 39), st.integers(0, 1000), st.integers(0, 3))
def test_the_values_are_the_probability_of_success_over_every_response(index, seed, depth):
    """Against a policy whose every response can be listed, V(s) from the task's probes equals
    the sum over all its responses from s of probability x reward (the grader's), at the
    empty state and at states deeper in one of its responses."""
    problem = EVAL[index]
    numbers = tuple(problem.metadata["numbers"])
    policy = MovePolicy(seed)
    rng = random.Random(seed)
    prefix, current = "", numbers
    for _ in range(min(depth, len(numbers) - 1)):  # walk down a random line, live or dead
        p, line, current = rng.choice(policy.lines(current, prefix))
        prefix += line + "\n"
    if len(current) == 1:
        prefix, current = "", numbers  # the state before the answer line is covered below
    truth = sum(
        p * TASK.grade(problem, prefix + text).reward
        for p, text in policy.responses(current, prefix)
    )
    assert probe_value(problem, prefix, policy) == pytest.approx(truth, abs=1e-12)


def test_the_state_before_the_answer_is_worth_the_answer_and_its_end():
    problem = EVAL[0]
    solution = TASK.reference_solution(problem)
    before = solution[: solution.index("Answer")]
    policy = MovePolicy(0, slip=0.1, eos=0.7, newline=0.2)
    assert probe_value(problem, before, policy) == pytest.approx(0.9 * (0.7 + 0.2))
    responses = policy.responses(tuple(problem.metadata["numbers"]))
    truth = sum(p * TASK.grade(problem, text).reward for p, text in responses)
    assert math.isclose(probe_value(problem, "", policy), truth)
