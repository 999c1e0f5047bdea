"""The task "ledger": a running balance over credits and debits mod 100, where a slip can be
corrected by a later ``fix`` line and problems range from a few items to many.

A problem reads ``start at 37. add 25. minus 48. work mod 100.`` (the chain's phrasing, so the
chain's prompt variants and alphabet serve it) and its solution is written one item per line,
with ``fix`` lines that redo the last item (:mod:`.grammar`). The world is built so that
length normalisation, resets and counterfactual credit have something to act on
(``docs/worlds/ledger.md``):

- **recoverable errors**: the SFT traces slip at ``slip_rate`` and fix a slip at ``fix_rate``,
  so many successes hold a wrong line, and a failure's first wrong line is often not its cause;
- **varied lengths**: ``min_items..max_items`` items, drawn with probability ``1/n``.

Problems are deterministic from ``seed``; the eval split comes from its own random stream and
the train split (and every SFT problem) excludes the eval problems.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass

from creditbench.harness.tasks.base import (
    CAPABILITIES,
    PROMPT_VARIANTS,
    STATES,
    Grade,
    Problem,
    StepCheck,
    StepVerdict,
    TaskBase,
)
from creditbench.harness.tasks.chain.grammar import (
    ALPHABET,
    ERROR_KINDS,
    Op,
    layout,
    parse_answer,
    parse_op,
    running_values,
)
from creditbench.harness.tasks.chain.prompts import (
    FRAMINGS,
    TEMPLATES,
    localize_prompt,
    render_prompt,
    repair_prompt,
    solution_hint_prompt,
    suffix_tag,
    typo,
)
from creditbench.harness.tasks.chain.traces import corrupt_solution
from creditbench.harness.tasks.chain.values import ValueProbes
from creditbench.methods.field_checks import check_fields

from .grammar import filler_spans, read, walk
from .traces import plan_text, render, repair_solution, sample_solution
from .values import value_probes

__all__ = ["CLEAN_TRACE_OPTIONS", "SFT_MIX", "LedgerConfig", "LedgerTask"]

# The prompt variants sft_example makes examples of (the chain's list: solution_hint has none).
SFT_KINDS = tuple(v for v in PROMPT_VARIANTS if v != "solution_hint")

# Mostly plain solutions, and enough of each variant that the methods asking for one find it
# meaningful (ours, the chain's mix).
SFT_MIX = {
    "solve": 0.60,
    "oracle_hint": 0.06,
    "rewrite_template": 0.04,
    "rewrite_typo": 0.04,
    "rewrite_framing": 0.04,
    "rewrite_suffix": 0.04,
    "localize": 0.06,
    "repair": 0.05,
    "thinker": 0.03,
    "solver": 0.04,
}

# OPPO's teacher learns from traces that never slip (so they never fix either).
CLEAN_TRACE_OPTIONS = {"slip_rate": 0.0}


@dataclass(frozen=True)
class LedgerConfig:
    """Knobs of the ledger task.

    Attributes:
        min_items, max_items: the range of items per problem; ``n`` is drawn with probability
            proportional to ``1/n`` (ours: short problems common, long ones not rare; mean 6.3
            items at the defaults, the chain's 8 steps in about as many characters).
        slip_rate: chance that a written result (of an item or a fix) slips in an SFT trace;
            the difficulty knob of the world's settings.
        fix_rate: chance that a trace writes a fix after a wrong line.
        fillers: the connective words an item line may start with.
        train_size, eval_size: problems per split.
        seed: the problems' seed.
    """

    min_items: int = 2
    max_items: int = 16
    slip_rate: float = 0.08
    fix_rate: float = 0.5
    fillers: tuple[str, ...] = ("so", "then", "next", "now")
    train_size: int = 5000
    eval_size: int = 300
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "fillers", tuple(self.fillers))
        count = isinstance(self.min_items, int) and isinstance(self.max_items, int)
        checks = [
            ("min_items", count and 1 <= self.min_items <= 32, "must be an integer in 1..32"),
            (
                "max_items",
                count and self.min_items <= self.max_items <= 32,
                "must be an integer in min_items..32",
            ),
            ("slip_rate", 0.0 <= self.slip_rate <= 1.0, "must be in [0, 1]"),
            ("fix_rate", 0.0 <= self.fix_rate <= 1.0, "must be in [0, 1]"),
            (
                "fillers",
                len(self.fillers) > 0
                and all(
                    isinstance(f, str) and re.fullmatch(r"[a-z]+( [a-z]+)*", f) and f != "fix"
                    for f in self.fillers
                ),
                "must be a non-empty list of lowercase words, not 'fix'",
            ),
            (
                "train_size",
                isinstance(self.train_size, int) and self.train_size >= 0,
                "must be >= 0",
            ),
            ("eval_size", isinstance(self.eval_size, int) and self.eval_size >= 1, "must be >= 1"),
            ("seed", isinstance(self.seed, int), "must be an integer"),
        ]
        check_fields(self, checks)


def _stable_rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


Key = tuple[int, tuple[Op, ...]]


class LedgerTask(TaskBase):
    """The ledger world: problems, grader, step checker, values, variants and SFT examples."""

    name = "ledger"
    capabilities = frozenset((*CAPABILITIES, STATES))
    alphabet = ALPHABET
    clean_trace_options = CLEAN_TRACE_OPTIONS
    error_kinds = ERROR_KINDS

    def __init__(self, config: LedgerConfig | None = None) -> None:
        self.config = config or LedgerConfig()
        self._splits: dict[str, list[Problem]] = {}
        self._eval_key_set: set[Key] | None = None

    # ---------------------------------------------------------------- problems

    def _draw(self, rng: random.Random) -> Key:
        cfg = self.config
        sizes = range(cfg.min_items, cfg.max_items + 1)
        n = rng.choices(sizes, weights=[1 / k for k in sizes])[0]
        items: list[Op] = []
        while len(items) < n:
            op = (rng.choice("+-"), rng.randint(2, 99))
            if not items or op != items[-1]:  # equal neighbours would blur missing/extra lines
                items.append(op)
        return rng.randint(1, 99), tuple(items)

    def make_problem(self, pid: str, start: int, items: list[Op] | tuple[Op, ...]) -> Problem:
        items = list(items)
        values = running_values(start, items)
        metadata = {"start": start, "ops": [f"{s}{k}" for s, k in items], "values": values}
        return Problem(pid, render_prompt(start, items), str(values[-1]), metadata)

    def problems(self, split: str) -> list[Problem]:
        """The problems of ``"train"`` or ``"eval"`` (``"test"`` is an alias), fixed order."""
        split = "eval" if split == "test" else split
        if split not in ("train", "eval"):
            raise ValueError(f"split: the ledger task has train and eval (got {split!r})")
        if split not in self._splits:
            eval_keys = self._eval_keys() if split == "train" else set()
            size = self.config.train_size if split == "train" else self.config.eval_size
            rng = random.Random(f"ledger/{split}/{self.config.seed}")
            seen: set[Key] = set()
            drawn: list[Problem] = []
            for _ in range(50 * size + 1000):
                if len(seen) == size:
                    break
                key = self._draw(rng)
                if key not in eval_keys and key not in seen:
                    seen.add(key)
                    drawn.append(self.make_problem(f"ledger/{split}/{len(seen) - 1}", *key))
            if len(seen) < size:
                raise ValueError(f"{split}_size: cannot draw {size} distinct problems")
            self._splits[split] = drawn
        return self._splits[split]

    def _eval_keys(self) -> set[Key]:
        if self._eval_key_set is None:
            self._eval_key_set = {self._key(p) for p in self.problems("eval")}
        return self._eval_key_set

    @staticmethod
    def _key(problem: Problem) -> Key:
        return problem.metadata["start"], tuple(parse_op(o) for o in problem.metadata["ops"])

    # ---------------------------------------------------------------- grading and checking

    def grade(self, problem: Problem, text: str) -> Grade:
        """1 when the answer line holds the right balance. Never raises."""
        status, value = parse_answer(text)
        if status == "missing":
            return Grade(0.0, "no answer")
        if status == "malformed":
            return Grade(0.0, "malformed answer")
        return Grade(1.0, "correct") if str(value) == problem.answer else Grade(0.0, "wrong answer")

    def wrong_steps(self, problem: Problem, text: str) -> list[StepVerdict]:
        """The wrong steps of ``text`` that no later fix corrected, in order (the step truth)."""
        start, items = self._key(problem)
        return read(start, list(items), text).wrong

    def corrected_steps(self, problem: Problem, text: str) -> list[StepVerdict]:
        """The wrong lines of ``text`` that a later right fix of the same item corrected."""
        start, items = self._key(problem)
        return read(start, list(items), text).corrected

    def first_wrong_step(self, problem: Problem, text: str) -> StepVerdict | None:
        wrong = self.wrong_steps(problem, text)
        return wrong[0] if wrong else None

    def filler_spans(self, text: str) -> list[tuple[int, int]]:
        return filler_spans(text)

    def step_spans(self, text: str) -> list[tuple[int, int]]:
        """The item and fix lines, then the answer line; newlines belong to no span."""
        return layout(text).spans

    def state_keys(self, problem: Problem, text: str) -> list[str | None]:
        """The state each step of ``text`` (item and fix lines, then the answer line) was taken
        in: ``"i:v"``, the item the next item line should write and the balance the response
        carried into the line (the start for the first, then each line's written result,
        slips and fixes included). A response that fixed a slip and one that made none stand in
        the same state once their balances agree (GiGPO's anchor states); which lines were
        wrong before is not part of it, as on the chain. None where the balance carried in
        cannot be read (after a malformed line, until a line writes one again)."""
        start, items = self._key(problem)
        lay = layout(text)
        keys: list[str | None] = []
        expected: int = 0
        carried: int | None = start
        for state in walk(start, list(items), [text[s:e] for s, e in lay.steps]):
            keys.append(None if carried is None else f"{expected}:{carried}")
            expected, carried = state.expected, state.carried
        if lay.answer is not None:
            keys.append(None if carried is None else f"{expected}:{carried}")
        return keys

    def check_steps(self, problem: Problem, text: str) -> StepCheck:
        """The uncorrected wrong steps, the step lines and the connectives of ``text``."""
        return StepCheck(
            steps=layout(text).spans,
            wrong=self.wrong_steps(problem, text),
            filler=filler_spans(text),
        )

    # ---------------------------------------------------------------- solutions and values

    def answer_text(self, problem: Problem) -> str:
        return f"Answer: {problem.answer}"

    def reference_solution(self, problem: Problem) -> str:
        return self.sample_solution(problem, random.Random(0), slips=False)

    def sample_solution(self, problem: Problem, rng: random.Random, **kwargs) -> str:
        """A trace as the SFT data writes it (:func:`.traces.sample_solution`)."""
        start, items = self._key(problem)
        return sample_solution(start, list(items), self.config, rng, **kwargs)

    def corrupt_solution(self, problem: Problem, kind: str, step: int, rng: random.Random) -> str:
        """A solution without fixes and with one error of ``kind`` at item line ``step``
        (the chain's corruptions: ledger items are chain operations)."""
        start, items = self._key(problem)
        return corrupt_solution(start, list(items), self.config, rng, kind, step)  # type: ignore[arg-type]

    def repair_solution(self, problem: Problem, response: str) -> str:
        start, items = self._key(problem)
        return repair_solution(start, list(items), response, self.config.fillers)

    def value_probes(self, problem: Problem, prefix: str) -> ValueProbes | None:
        """What the policy scores for the value of the state ``prefix`` (:mod:`.values`);
        None where the state's value is 0."""
        start, items = self._key(problem)
        return value_probes(start, list(items), problem.answer, prefix, self.config.fillers)

    # ---------------------------------------------------------------- prompt variants

    def variant(
        self, problem: Problem, kind: str, response: str | None = None, hint: str | None = None
    ) -> str:
        """The prompt of ``problem`` in one of :data:`PROMPT_VARIANTS`, as the chain's
        (``localize`` and ``repair`` need the ``response``; ``solver`` and ``solution_hint``
        a ``hint``); random choices are fixed by the problem id."""
        if kind not in PROMPT_VARIANTS:
            raise ValueError(f"kind: unknown variant {kind!r}; known: {', '.join(PROMPT_VARIANTS)}")
        if kind in ("localize", "repair") and response is None:
            raise ValueError(f"the {kind} variant needs a response")
        if kind in ("solver", "solution_hint") and hint is None:
            raise ValueError(f"the {kind} variant needs a hint")
        rng = _stable_rng(problem.id, kind)
        start, items = self._key(problem)
        prompt = problem.prompt
        if kind == "oracle_hint":
            return f"{prompt}the answer is {problem.answer}.\n"
        if kind == "rewrite_template":
            return render_prompt(start, list(items), rng.randrange(1, len(TEMPLATES)))
        if kind == "rewrite_typo":
            return typo(prompt, rng)
        if kind == "rewrite_framing":
            return f"{rng.choice(FRAMINGS)} {prompt}"
        if kind == "rewrite_suffix":
            return suffix_tag(prompt, rng)
        if kind == "localize":
            assert response is not None
            return localize_prompt(prompt, response)
        if kind == "repair":
            assert response is not None
            reference = hint if hint is not None else self.reference_solution(problem)
            return repair_prompt(prompt, response, reference)
        if kind == "thinker":
            return f"{prompt}make a plan.\n"
        if kind == "solver":
            assert hint is not None
            return f"{prompt}{hint.strip()}\n"
        if kind == "solution_hint":
            assert hint is not None
            return solution_hint_prompt(prompt, hint)
        return prompt  # solo

    # ---------------------------------------------------------------- SFT examples

    def sft_example(
        self, rng: random.Random, mix: dict[str, float] | None = None
    ) -> tuple[str, str]:
        """One ``(prompt, completion)`` pair for the base policy's supervised training, on a
        fresh problem not in the eval split; ``mix`` weighs the kinds (default
        :data:`SFT_MIX`)."""
        mix = SFT_MIX if mix is None else mix
        unknown = set(mix) - {"solve", *SFT_KINDS}
        if unknown or not mix or min(mix.values()) < 0 or sum(mix.values()) <= 0:
            raise ValueError(f"mix: keys must be solve or a prompt variant this task makes "
                             f"examples of ({', '.join(SFT_KINDS)}), with weights >= 0 summing "
                             f"to > 0 (unknown: {sorted(unknown)})")  # fmt: skip
        kind = rng.choices(list(mix), weights=list(mix.values()))[0]
        problem = self._fresh_problem(rng)
        if kind in ("solve", "solo") or kind.startswith("rewrite_"):
            prompt = problem.prompt if kind == "solve" else self.variant(problem, kind)
            return prompt, self.sample_solution(problem, rng)
        if kind == "oracle_hint":
            return self.variant(problem, kind), self.sample_solution(problem, rng, slips=False)
        if kind == "localize":
            failed = self._failed_solution(problem, rng)
            verdict = self.first_wrong_step(problem, failed)
            assert verdict is not None
            return self.variant(problem, kind, failed), f"Step: {verdict.step + 1}"
        if kind == "repair":
            failed = self._failed_solution(problem, rng)
            reference = self.sample_solution(problem, rng, slips=False)
            return self.variant(problem, kind, failed, reference), self.repair_solution(
                problem, failed
            )
        plan = plan_text(list(self._key(problem)[1]))
        if kind == "thinker":
            return self.variant(problem, kind), plan
        assert kind == "solver", kind  # SFT_KINDS lists no other
        return self.variant(problem, kind, hint=plan), self.sample_solution(problem, rng)

    def _fresh_problem(self, rng: random.Random) -> Problem:
        eval_keys = self._eval_keys()
        while True:
            key = self._draw(rng)
            if key not in eval_keys:
                return self.make_problem(f"ledger/sft/{rng.getrandbits(40):010x}", *key)

    def _failed_solution(self, problem: Problem, rng: random.Random) -> str:
        """A failed trace: an unfixed slip among the traces' own slips and fixes, so that its
        first wrong line is often a corrected one (what localisation must see past)."""
        n = len(self._key(problem)[1])
        for _ in range(20):
            text = self.sample_solution(problem, rng, force_slip_at=rng.randrange(n))
            if self.grade(problem, text).reward == 0.0:
                return text
        return render([], (int(problem.answer) + 1) % 100)  # an early stop: wrong at once
