"""The grader's wall time per call, alone and under concurrency, on adversarial answers.

    python scripts/grader_bench.py [--timeout 3]

Prints the seconds of each adversarial answer graded alone (each must end near its timeout,
however much work sympy would want), then 8 concurrent gradings of which 4 are adversarial: with
a pool of workers the 8 take about as long as the slowest one, not the sum. Figures, not
assertions: the machine's load moves them (the outside load is printed with them).
"""

from __future__ import annotations

import argparse
import os
import threading
import time

from creditbench.harness.tasks.grading import POOL_SIZE, grade_math

ADVERSARIAL = {
    "a power tower": "\\boxed{9^{9^{9^{9}}}}",
    "a huge factorial": "\\boxed{(10^{100})!}",
    "a factorial plus one": "\\boxed{(10^{100})! + 1}",
    "forty nested fractions": "\\boxed{" + "\\frac{1}{" * 40 + "2" + "}" * 40 + "}",
    "a 1e6-character answer": "\\boxed{" + "1+" * 500_000 + "1}",
    "19k characters of open boxes": "\\boxed{" * 2_800,
}
PLAIN = ["\\boxed{\\frac{1}{2}}", "\\boxed{x^2+1}", "\\boxed{\\sqrt{2}}", "\\boxed{7}"]


def graded(answers: list[str], timeout: float) -> tuple[float, list[tuple[float, str]]]:
    """Wall seconds of grading ``answers`` concurrently, and each call's seconds and reason."""
    out: list[tuple[float, str]] = [(0.0, "")] * len(answers)

    def one(i: int, answer: str) -> None:
        started = time.perf_counter()
        grade = grade_math(answer, "7", timeout_s=timeout)
        out[i] = (time.perf_counter() - started, grade.reason)

    threads = [threading.Thread(target=one, args=item) for item in enumerate(answers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds per call (3)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"pool of {POOL_SIZE} workers, timeout {args.timeout:g} s, load average {load:.2f}")
    graded(["\\boxed{x+1}"] * 8, args.timeout)  # start the workers (imports take seconds)
    for name, answer in ADVERSARIAL.items():
        _, [(seconds, reason)] = graded([answer], args.timeout)
        print(f"  alone  {seconds:6.2f} s  {reason:<16} {name}")
    tower = list(ADVERSARIAL.values())[:4]
    wall, calls = graded(tower + PLAIN, args.timeout)
    slowest = max(seconds for seconds, _ in calls)
    total = sum(seconds for seconds, _ in calls)
    print(f"8 concurrent, 4 adversarial: {wall:.2f} s", end=" ")
    print(f"(slowest call {slowest:.2f} s, sum of the calls {total:.2f} s)")


if __name__ == "__main__":
    main()
