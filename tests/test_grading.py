"""The math grader: answer extraction, math-verify equivalence, and outputs built to break it."""

from __future__ import annotations

import sys

import pytest

from creditbench.harness.tasks.base import Grade
from creditbench.harness.tasks.grading import (
    UNBALANCED,
    _Verifier,
    extract_answer,
    grade_math,
    last_boxed,
)


@pytest.mark.parametrize(
    "response, reference",
    [
        ("so the total is \\boxed{72}.", "72"),
        ("48/2 = 24\n48+24 = 72\n#### 72", "72"),
        ("#### 1,234", "1,234"),
        ("They pay 5 + 7 = 12 dollars, so 12.", "12"),
        ("\\boxed{\\frac{1}{2}}", "\\frac12"),
        ("\\boxed{0.5}", "\\frac{1}{2}"),
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}"),
        ("first \\boxed{3}, no wait: \\boxed{5}", "5"),
    ],
)
def test_equivalent_answers_score_one(response: str, reference: str) -> None:
    assert grade_math(response, reference).reward == 1.0


@pytest.mark.parametrize(
    "response, reference",
    [
        ("\\boxed{71}", "72"),
        ("#### 73", "72"),
        ("\\boxed{\\frac{1}{3}}", "\\frac{1}{2}"),
        ("\\boxed{(3, \\pi)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("\\boxed{5}, no wait: \\boxed{3}", "5"),
    ],
)
def test_different_answers_score_zero(response: str, reference: str) -> None:
    grade = grade_math(response, reference)
    assert grade.reward == 0.0 and grade.reason == "wrong answer"


def test_extraction_prefers_boxed_then_hashes_then_the_last_number() -> None:
    assert extract_answer("7 then \\boxed{8} then 9") == "8"
    assert extract_answer("7 #### 8\n then 9") == "8"
    assert extract_answer("7 then 8, then 9.") == "9"
    assert extract_answer("no numbers here") is None


def test_boxed_matches_nested_and_escaped_braces() -> None:
    assert last_boxed("\\boxed{\\frac{a}{b}}") == "\\frac{a}{b}"
    assert last_boxed("\\boxed{\\{1, 2\\}}") == "\\{1, 2\\}"
    assert last_boxed("\\boxed{1} and \\boxed{unclosed") is UNBALANCED  # the last one decides
    assert last_boxed("\\boxed 5$") == "5"
    assert last_boxed("nothing") is None


@pytest.mark.parametrize(
    "response, reason",
    [
        ("", "empty"),
        ("   \n ", "empty"),
        ("x" * 1_000_000, "too long"),
        ("\\boxed{" * 3000 + "}" * 3000, "too long"),
        ("\\boxed{" + "{" * 400 + "1" + "}" * 401, "answer too long"),
        ("no answer in this text", "no answer"),
    ],
    ids=["empty", "blank", "1MB", "nested-boxes", "nested-braces", "no-number"],
)
def test_degenerate_outputs_score_zero_with_a_reason(response: str, reason: str) -> None:
    assert grade_math(response, "1") == Grade(0.0, reason)


@pytest.mark.parametrize(
    "response",
    [
        "\\boxed{" + "{" * 60 + "1" + "}" * 61,
        "\ud800\u2603\x00 \\boxed{\u202e\ufffd}",
        "\\boxed{\\frac{\\frac{}{}}{\\sqrt[}}",
        "\\boxed{\\begin{pmatrix} 1 & \\end{}}",
        "\\boxed{9^{9^{9^{9}}}}",
        "\\boxed{(10^{7})!}",
    ],
    ids=["nested", "unicode-junk", "broken-frac", "broken-matrix", "power-tower", "factorial"],
)
def test_adversarial_answers_never_raise_and_score_zero(response: str) -> None:
    grade = grade_math(response, "2", timeout_s=2.0)
    assert grade.reward == 0.0 and grade.reason


def test_a_hung_worker_is_killed_at_the_timeout_and_replaced() -> None:
    """A worker that never answers (sympy stuck in C code) is killed; the grade is a timeout."""
    stuck = (
        "import sys, time; print('{\"ready\": true}', flush=True); sys.stdin.readline(); "
        "time.sleep(600)"
    )
    verifier = _Verifier([sys.executable, "-c", stuck])
    assert verifier.verify("1", "1", timeout_s=0.5) == verifier.verify("2", "2", timeout_s=0.5)
    grade = verifier.verify("1", "1", timeout_s=0.5)
    assert grade.reward == 0.0 and grade.reason == "timeout"
    assert verifier._proc is None  # killed; the next call starts a fresh worker
    verifier.stop()


def test_a_crashed_worker_is_reported_and_replaced() -> None:
    dies = "import sys; print('{\"ready\": true}', flush=True); sys.stdin.readline(); sys.exit(3)"
    verifier = _Verifier([sys.executable, "-c", dies])
    assert verifier.verify("1", "1", timeout_s=5.0).reason == "grader crashed"
    assert verifier.verify("1", "1", timeout_s=5.0).reason == "grader crashed"  # restarted
    verifier.stop()


def test_grading_still_works_after_a_timeout() -> None:
    grade_math("\\boxed{(10^{8})!}", "3", timeout_s=1.0)
    assert grade_math("\\boxed{\\frac{2}{4}}", "\\frac12").reward == 1.0


def test_an_unbalanced_last_box_is_no_answer_not_the_last_number():
    assert grade_math("so the answer is \\boxed{12", "12").reason == "no answer"
    assert grade_math("\\boxed{12} then \\boxed{1", "12").reason == "no answer"
    assert extract_answer("\\boxed{" * 2_800) is None  # one linear pass, then no answer


@pytest.mark.parametrize("answer", ["\\boxed{9^{9^{9^{9}}}}", "\\boxed{(10^{100})!}"])
def test_an_answer_that_runs_out_of_time_is_reported_as_a_timeout(answer):
    assert grade_math(answer, "7", timeout_s=2.0) == Grade(0.0, "timeout")


def test_the_pool_gives_concurrent_calls_their_own_workers_up_to_its_size():
    import threading
    import time

    from creditbench.harness.tasks.grading import _Pool

    busy, most = [0], [0]
    guard = threading.Lock()

    class Slow:
        def verify(self, gold, answer, timeout_s):
            with guard:
                busy[0] += 1
                most[0] = max(most[0], busy[0])
            time.sleep(0.2)
            with guard:
                busy[0] -= 1
            return Grade(1.0, "correct")

        def stop(self):
            pass

    pool = _Pool(3, make=Slow)
    threads = [threading.Thread(target=pool.verify, args=("1", "1", 1.0)) for _ in range(7)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most[0] == 3 and pool._made == 3  # three at once, never a fourth worker
