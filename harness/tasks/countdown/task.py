"""The countdown task: make a target from four small numbers, one pair a line, where a line
can make the target unreachable (a dead end) and the step truth is reachability, computed
exactly. The world of branching decisions: see ``docs/worlds/countdown.md``.

Problems are deterministic from ``seed``; the eval split comes from its own random stream, and
the train split (and every SFT problem) excludes the eval problems. Only problems whose target
can be made, with at most ``max_solutions`` solutions, are drawn.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from creditbench.harness.tasks.base import (
    STATES,
    STEP_CHECK,
    STEPS,
    TEACHER,
    VALUES,
    Grade,
    Problem,
    StepCheck,
    StepVerdict,
    TaskBase,
)
from creditbench.methods.field_checks import check_fields

from .grammar import (
    ALPHABET,
    ERROR_KINDS,
    judge,
    layout,
    parse_answer,
    parse_step,
    reachable,
)
from .traces import corrupt_solution, play, reference_solution
from .values import ValueProbes, solution_count, value_probes

__all__ = ["ALPHABET", "CLEAN_TRACE_OPTIONS", "ERROR_KINDS", "CountdownConfig", "CountdownTask"]

# The errors corrupt_solution injects (the checker knows more kinds: grammar.ERROR_KINDS).
INJECTED_ERRORS = ("dead end", "arithmetic", "numbers left", "early stop")

# The traces' options that make OPPO's teacher: live moves only, no slips.
CLEAN_TRACE_OPTIONS = {"blunder_rate": 0.0, "slip_rate": 0.0}


@dataclass(frozen=True)
class CountdownConfig:
    """Knobs of the countdown task.

    Attributes:
        numbers: how many numbers a problem gives (the lines a solution writes: one fewer).
        max_number: the numbers are drawn from 1..max_number.
        target_min, target_max: the target is drawn from this range (then kept only if it can
            be made).
        max_value: the largest number a line may write (keeps the arithmetic at two digits,
            the chain's scale).
        max_solutions: problems with more solutions are redrawn: the harder problems, and a
            bound on what an exact value costs (twice this many texts a problem).
        blunder_rate: share of the SFT traces' moves drawn from every allowed move instead of
            the live ones: the difficulty knob of the base policy.
        slip_rate: chance that a trace's result slips by one digit.
        train_size, eval_size: problems per split.
        seed: the problems' seed.
    """

    numbers: int = 4
    max_number: int = 9
    target_min: int = 10
    target_max: int = 99
    max_value: int = 99
    max_solutions: int = 16
    blunder_rate: float = 0.25
    slip_rate: float = 0.0
    train_size: int = 5000
    eval_size: int = 300
    seed: int = 0

    def __post_init__(self) -> None:
        def integer(name: str, low: int, high: int) -> tuple[str, bool, str]:
            value = getattr(self, name)
            ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
            return name, ok, f"must be an integer in {low}..{high}"

        rates = ("blunder_rate", "slip_rate")
        checks = [
            integer("numbers", 2, 6),
            integer("max_number", 1, 99),
            integer("target_min", 0, 999),
            integer("target_max", 0, 999),
            ("target_max", self.target_max >= self.target_min, "must be >= target_min"),
            integer("max_value", 1, 999),
            ("max_value", self.max_value >= self.target_max, "must be >= target_max"),
            integer("max_solutions", 1, 256),
            *[(r, 0.0 <= getattr(self, r) <= 1.0, "must be in [0, 1]") for r in rates],
            integer("train_size", 0, 10**6),
            integer("eval_size", 1, 10**5),
            ("seed", isinstance(self.seed, int), "must be an integer"),
        ]
        check_fields(self, checks)


Key = tuple[tuple[int, ...], int]  # (numbers, target)


class CountdownTask(TaskBase):
    """The countdown world: problems, grader, step checker, exact values and SFT traces."""

    name = "countdown"
    capabilities = frozenset({STEPS, STEP_CHECK, STATES, VALUES, TEACHER})
    alphabet = ALPHABET
    clean_trace_options = CLEAN_TRACE_OPTIONS
    error_kinds = INJECTED_ERRORS

    def __init__(self, config: CountdownConfig | None = None) -> None:
        self.config = config or CountdownConfig()
        self._splits: dict[str, list[Problem]] = {}
        self._eval_key_set: set[Key] | None = None

    # ---------------------------------------------------------------- problems

    def _draw(self, rng: random.Random) -> Key:
        """A problem whose target can be made with at most ``max_solutions`` solutions."""
        cfg = self.config
        while True:
            numbers = tuple(rng.randint(1, cfg.max_number) for _ in range(cfg.numbers))
            target = rng.randint(cfg.target_min, cfg.target_max)
            if reachable(numbers, target, cfg.max_value):
                if solution_count(numbers, target, cfg.max_value) <= cfg.max_solutions:
                    return numbers, target

    def make_problem(self, pid: str, numbers: tuple[int, ...], target: int) -> Problem:
        prompt = f"make {target} from {' '.join(map(str, numbers))}.\n"
        metadata = {
            "numbers": list(numbers),
            "target": target,
            "solutions": solution_count(numbers, target, self.config.max_value),
        }
        return Problem(pid, prompt, str(target), metadata)

    def problems(self, split: str) -> list[Problem]:
        """The problems of ``"train"`` or ``"eval"`` (``"test"`` is an alias), fixed order."""
        split = "eval" if split == "test" else split
        if split not in ("train", "eval"):
            raise ValueError(f"split: the countdown task has train and eval (got {split!r})")
        if split not in self._splits:
            eval_keys = self._eval_keys() if split == "train" else set()
            size = self.config.train_size if split == "train" else self.config.eval_size
            rng = random.Random(f"countdown/{split}/{self.config.seed}")
            seen: set[Key] = set()
            out: list[Problem] = []
            for _ in range(50 * size + 1000):
                if len(seen) == size:
                    break
                key = self._draw(rng)
                if key not in eval_keys and key not in seen:
                    seen.add(key)
                    out.append(self.make_problem(f"countdown/{split}/{len(out)}", *key))
            if len(seen) < size:
                raise ValueError(f"{split}_size: cannot draw {size} distinct problems")
            self._splits[split] = out
        return self._splits[split]

    def _eval_keys(self) -> set[Key]:
        if self._eval_key_set is None:
            self._eval_key_set = {self._key(p) for p in self.problems("eval")}
        return self._eval_key_set

    @staticmethod
    def _key(problem: Problem) -> Key:
        return tuple(problem.metadata["numbers"]), int(problem.metadata["target"])

    # ---------------------------------------------------------------- grading and checking

    def grade(self, problem: Problem, text: str) -> Grade:
        """1 when every line is right and the answer line states the target. Never raises."""
        status, value = parse_answer(text)
        if status == "missing":
            return Grade(0.0, "no answer")
        if status == "malformed":
            return Grade(0.0, "malformed answer")
        if str(value) != problem.answer:
            return Grade(0.0, "wrong answer")
        if self.wrong_steps(problem, text):
            return Grade(0.0, "wrong step")
        return Grade(1.0, "correct")

    def wrong_steps(self, problem: Problem, text: str) -> list[StepVerdict]:
        """Every wrong step of ``text`` (dead ends included), in order."""
        numbers, target = self._key(problem)
        return list(judge(numbers, target, text, self.config.max_value))

    def step_spans(self, text: str) -> list[tuple[int, int]]:
        """The step lines, then the answer line; newlines are not part of any span."""
        return layout(text).spans

    def state_keys(self, problem: Problem, text: str) -> list[str | None]:
        """The state each step of ``text`` (step lines, then the answer line) was taken in:
        ``"k:n1 n2 ..."``, the step's index and the numbers left the response carried into
        it, in increasing order (the same numbers in another order are the same situation):
        the problem's numbers for the first, then each line's written list, slips included.
        Two responses that combined other pairs into the same numbers left stand in the same
        state (GiGPO's anchor states). None from the first line that does not parse on."""

        def key(k: int, numbers: tuple[int, ...] | None) -> str | None:
            return None if numbers is None else f"{k}:{' '.join(map(str, sorted(numbers)))}"

        numbers: tuple[int, ...] | None = self._key(problem)[0]
        lay = layout(text)
        keys: list[str | None] = []
        for k, (start, end) in enumerate(lay.steps):
            keys.append(key(k, numbers))
            line = parse_step(text[start:end])
            numbers = None if line is None or numbers is None else line.left
        if lay.answer is not None:
            keys.append(key(len(lay.steps), numbers))
        return keys

    def check_steps(self, problem: Problem, text: str) -> StepCheck:
        """Every wrong step and the step lines of ``text``; the task has no filler words."""
        return StepCheck(steps=layout(text).spans, wrong=self.wrong_steps(problem, text), filler=[])

    # ---------------------------------------------------------------- values

    def value_probes(self, problem: Problem, prefix: str) -> ValueProbes | None:
        """The successful continuations of the state ``prefix`` for the policy to score
        (:mod:`.values`); None where the state's value is 0."""
        numbers, target = self._key(problem)
        return value_probes(numbers, target, prefix, self.config.max_value)

    # ---------------------------------------------------------------- solutions and SFT

    def answer_text(self, problem: Problem) -> str:
        """The reference answer as a response states it: its answer line."""
        return f"Answer: {problem.answer}"

    def reference_solution(self, problem: Problem) -> str:
        numbers, target = self._key(problem)
        return reference_solution(numbers, target, self.config.max_value)

    def sample_solution(self, problem: Problem, rng: random.Random, **kwargs) -> str:
        """A trace of the imperfect searcher; ``blunders=False``, ``slips=False`` clean it."""
        numbers, target = self._key(problem)
        return play(numbers, target, self.config, rng, **kwargs)

    def corrupt_solution(self, problem: Problem, kind: str, step: int, rng: random.Random) -> str:
        """A solution with one error of ``kind`` (:data:`INJECTED_ERRORS`) at line ``step``."""
        if kind not in INJECTED_ERRORS:
            raise ValueError(f"kind: unknown error kind {kind!r}; known: {INJECTED_ERRORS}")
        numbers, target = self._key(problem)
        return corrupt_solution(numbers, target, self.config, rng, kind, step)

    def sft_example(
        self, rng: random.Random, mix: dict[str, float] | None = None
    ) -> tuple[str, str]:
        """One ``(prompt, trace)`` pair on a fresh problem outside the eval split. The task
        has no prompt variants, so the only kind of example is ``solve``."""
        if mix is not None and (set(mix) != {"solve"} or mix["solve"] <= 0):
            raise ValueError(
                f"mix: the countdown task makes only 'solve' examples (got {sorted(mix)})"
            )
        eval_keys = self._eval_keys()
        while True:
            key = self._draw(rng)
            if key not in eval_keys:
                break
        problem = self.make_problem(f"countdown/sft/{rng.getrandbits(40):010x}", *key)
        return problem.prompt, self.sample_solution(problem, rng)
