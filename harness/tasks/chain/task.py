"""The testbed task "chain": a running value transformed by a chain of operations mod 100.

A problem reads ``start at 37. add 25. times 7. last digit. work mod 100.`` and its solution
is written one operation per line (see :mod:`.grammar` for the format and the
step checker). The task is built so that credit assignment matters on it:

- **length**: ``steps`` operations, so a failed response holds many correct lines;
- **decision points**: a multiplication may be written directly or split into two easier
  products; in the SFT traces the direct form slips far more often (``direct_slip_rate``);
- **filler**: each line starts with a free choice among ``fillers`` ("so", "then", ...), many
  high-entropy tokens that never affect the reward;
- **cancelling steps**: "keep the last digit" (``mod_rate``) wipes out a slip in the tens digit
  and "times 0" (``zero_rate``) wipes out everything before it, so some correct answers contain
  wrong steps;
- **a systematic weakness**: the operation kind ``weak_op`` slips at ``weak_slip_rate``.

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
from creditbench.methods.field_checks import check_fields

from .grammar import (
    ALPHABET,
    ERROR_KINDS,
    Op,
    filler_spans,
    judge,
    layout,
    parse_answer,
    parse_op,
    parse_step,
    render_step,
    running_values,
)
from .prompts import (
    FRAMINGS,
    TEMPLATES,
    localize_prompt,
    render_prompt,
    repair_prompt,
    solution_hint_prompt,
    suffix_tag,
    typo,
)
from .traces import (
    corrupt_solution,
    plan_text,
    repair_solution,
    sample_solution,
    splittable,
)
from .values import ValueProbes, value_probes

__all__ = ["ALPHABET", "CLEAN_TRACE_OPTIONS", "ERROR_KINDS", "SFT_MIX", "ChainConfig", "ChainTask"]

WEAK_OPS = ("add", "sub", "mul", "mod", "none")

# Default share of each kind of SFT example: mostly plain solutions, and enough of every prompt
# variant that the oracle hint, the rewrites, localisation, repair and the roles mean something.
# The prompt variants sft_example makes examples of. `solution_hint` (SDPO's teacher prompt) has
# none yet: a mix naming it is refused, where it once fell through to the solver's plan branch
# and trained on a plan shown as "a correct solution"
SFT_KINDS = tuple(v for v in PROMPT_VARIANTS if v != "solution_hint")

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


@dataclass(frozen=True)
class ChainConfig:
    """Knobs of the chain task (every rate is a probability).

    Attributes:
        steps: operations per problem.
        mul_rate, mod_rate, zero_rate: share of operations that multiply by one of
            ``multipliers`` (decision points), keep the last digit, multiply by 0; the rest add
            or subtract 2..99.
        multipliers: the factors of multiplications, 2..9. The default 3, 7, 9 are invertible
            mod 100, so a slip survives a multiplication and only "last digit" and "times 0"
            cancel slips.
        slip_rate: chance that a written result slips in an SFT trace.
        weak_op: the operation kind ("add", "sub", "mul", "mod", or "none") that slips at
            ``weak_slip_rate`` instead.
        direct_slip_rate: slip chance of a multiplication written directly (the risky choice).
        split_rate: share of multiplications written in the split form in SFT traces.
        fillers: the connective words a step line may start with.
        train_size, eval_size: problems per split.
        seed: the problems' seed.
    """

    steps: int = 8
    mul_rate: float = 0.3
    mod_rate: float = 0.1
    zero_rate: float = 0.02
    multipliers: tuple[int, ...] = (3, 7, 9)
    slip_rate: float = 0.04
    weak_op: str = "sub"
    weak_slip_rate: float = 0.12
    direct_slip_rate: float = 0.25
    split_rate: float = 0.5
    fillers: tuple[str, ...] = ("so", "then", "next", "now")
    train_size: int = 5000
    eval_size: int = 300
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "fillers", tuple(self.fillers))
        object.__setattr__(self, "multipliers", tuple(self.multipliers))
        rates = ("mul_rate", "mod_rate", "zero_rate", "slip_rate", "weak_slip_rate")
        checks = [
            ("steps", isinstance(self.steps, int) and 1 <= self.steps <= 64, "must be 1..64"),
            *[(r, 0.0 <= getattr(self, r) <= 1.0, "must be in [0, 1]") for r in rates],
            ("direct_slip_rate", 0.0 <= self.direct_slip_rate <= 1.0, "must be in [0, 1]"),
            ("split_rate", 0.0 <= self.split_rate <= 1.0, "must be in [0, 1]"),
            (
                "mul_rate",
                self.mul_rate + self.mod_rate + self.zero_rate <= 1.0,
                "mul_rate + mod_rate + zero_rate must be <= 1",
            ),
            (
                "multipliers",
                len(self.multipliers) > 0
                and all(isinstance(k, int) and 2 <= k <= 9 for k in self.multipliers),
                "must be a non-empty list of integers in 2..9",
            ),
            ("weak_op", self.weak_op in WEAK_OPS, f"must be one of {', '.join(WEAK_OPS)}"),
            (
                "fillers",
                len(self.fillers) > 0
                and all(
                    isinstance(f, str) and re.fullmatch(r"[a-z]+( [a-z]+)*", f)
                    for f in self.fillers
                ),
                "must be a non-empty list of lowercase words",
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


# Options that turn off the errors injected into SFT traces. OPPO's teacher learns from clean
# traces: it imitates no slips, so it is stronger than the base policy at any size. The problems
# (and the eval split) do not depend on these options.
CLEAN_TRACE_OPTIONS = {"slip_rate": 0.0, "weak_slip_rate": 0.0, "direct_slip_rate": 0.0}


class ChainTask(TaskBase):
    """The chain testbed: problems, grader, step checker, prompt variants and SFT examples."""

    name = "chain"
    capabilities = frozenset((*CAPABILITIES, STATES))
    alphabet = ALPHABET
    clean_trace_options = CLEAN_TRACE_OPTIONS
    error_kinds = ERROR_KINDS

    def __init__(self, config: ChainConfig | None = None) -> None:
        self.config = config or ChainConfig()
        self._splits: dict[str, list[Problem]] = {}
        self._eval_key_set: set | None = None

    # ---------------------------------------------------------------- problems

    def _draw(self, rng: random.Random) -> tuple[int, tuple[Op, ...]]:
        cfg = self.config
        ops: list[Op] = []
        while len(ops) < cfg.steps:
            u = rng.random()
            if u < cfg.zero_rate:
                op: Op = ("*", 0)
            elif u < cfg.zero_rate + cfg.mod_rate:
                op = ("%", 10)
            elif u < cfg.zero_rate + cfg.mod_rate + cfg.mul_rate:
                op = ("*", rng.choice(self.config.multipliers))
            else:
                op = (rng.choice("+-"), rng.randint(2, 99))
            if not ops or op != ops[-1]:  # equal neighbours would blur missing/extra steps
                ops.append(op)
        return rng.randint(1, 99), tuple(ops)

    def make_problem(self, pid: str, start: int, ops: list[Op] | tuple[Op, ...]) -> Problem:
        ops = list(ops)
        values = running_values(start, ops)
        prompt = render_prompt(start, ops, template=0)
        metadata = {"start": start, "ops": [f"{s}{k}" for s, k in ops], "values": values}
        return Problem(pid, prompt, str(values[-1]), metadata)

    def problems(self, split: str) -> list[Problem]:
        """The problems of ``"train"`` or ``"eval"`` (``"test"`` is an alias), fixed order."""
        split = "eval" if split == "test" else split
        if split not in ("train", "eval"):
            raise ValueError(f"split: the chain task has train and eval (got {split!r})")
        if split not in self._splits:
            eval_keys = self._eval_keys() if split == "train" else set()
            size = self.config.train_size if split == "train" else self.config.eval_size
            rng = random.Random(f"chain/{split}/{self.config.seed}")
            seen: set = set()
            for _ in range(50 * size + 1000):
                if len(seen) == size:
                    break
                key = self._draw(rng)
                if key not in eval_keys and key not in seen:
                    seen.add(key)
                    self._splits.setdefault(split, []).append(
                        self.make_problem(f"chain/{split}/{len(seen) - 1}", *key)
                    )
            if len(seen) < size:
                raise ValueError(f"{split}_size: cannot draw {size} distinct problems")
        return self._splits.get(split, [])

    def _eval_keys(self) -> set:
        if self._eval_key_set is None:
            self._eval_key_set = {self._key(p) for p in self.problems("eval")}
        return self._eval_key_set

    @staticmethod
    def _key(problem: Problem) -> tuple[int, tuple[Op, ...]]:
        return problem.metadata["start"], tuple(parse_op(o) for o in problem.metadata["ops"])

    # ---------------------------------------------------------------- grading and checking

    def grade(self, problem: Problem, text: str) -> Grade:
        """1 when the answer line holds the right value. Never raises."""
        status, value = parse_answer(text)
        if status == "missing":
            return Grade(0.0, "no answer")
        if status == "malformed":
            return Grade(0.0, "malformed answer")
        return Grade(1.0, "correct") if str(value) == problem.answer else Grade(0.0, "wrong answer")

    def wrong_steps(self, problem: Problem, text: str) -> list[StepVerdict]:
        """Every wrong step of ``text`` (also inside a correct answer), in order."""
        start, ops = self._key(problem)
        return list(judge(start, list(ops), text))

    def first_wrong_step(self, problem: Problem, text: str) -> StepVerdict | None:
        start, ops = self._key(problem)
        return next(judge(start, list(ops), text), None)

    def wrong_step_spans(self, problem: Problem, text: str) -> list[tuple[int, int]]:
        return [(v.char_start, v.char_end) for v in self.wrong_steps(problem, text)]

    def filler_spans(self, text: str) -> list[tuple[int, int]]:
        return filler_spans(text)

    def step_spans(self, text: str) -> list[tuple[int, int]]:
        """The step lines, then the answer line; newlines are not part of any span."""
        return layout(text).spans

    def state_keys(self, problem: Problem, text: str) -> list[str | None]:
        """The state each step of ``text`` (step lines, then the answer line) was taken in:
        ``"k:v"``, the step's index and the running value the response carried into it (the
        start for the first, then each line's written result, slips included); None from the
        first line that does not parse on, whose carried value the text does not say."""
        value: int | None = self._key(problem)[0]
        lines = layout(text)
        keys: list[str | None] = []
        for k, (start, end) in enumerate(lines.steps):
            keys.append(None if value is None else f"{k}:{value}")
            parsed = parse_step(text[start:end])
            value = None if parsed is None or value is None else parsed.result
        if lines.answer is not None:
            keys.append(None if value is None else f"{len(lines.steps)}:{value}")
        return keys

    def check_steps(self, problem: Problem, text: str) -> StepCheck:
        """Every wrong step, the step lines and the filler words of ``text``."""
        return StepCheck(
            wrong=self.wrong_steps(problem, text),
            steps=layout(text).spans,
            filler=filler_spans(text),
        )

    # ---------------------------------------------------------------- solutions

    def answer_text(self, problem: Problem) -> str:
        """The reference answer as a response states it: its answer line."""
        return f"Answer: {problem.answer}"

    def reference_solution(self, problem: Problem) -> str:
        start, ops = self._key(problem)
        values = running_values(start, list(ops))
        filler = self.config.fillers[0] + " "
        lines = [render_step(filler, values[i], op, values[i + 1]) for i, op in enumerate(ops)]
        return "\n".join([*lines, f"Answer: {values[-1]}"])

    def sample_solution(self, problem: Problem, rng: random.Random, **kwargs) -> str:
        """A solution as the SFT traces write it; see :func:`.traces.sample_solution`."""
        start, ops = self._key(problem)
        return sample_solution(start, list(ops), self.config, rng, **kwargs)

    def corrupt_solution(self, problem: Problem, kind: str, step: int, rng: random.Random) -> str:
        """A solution with one error of ``kind`` at line ``step``."""
        start, ops = self._key(problem)
        return corrupt_solution(start, list(ops), self.config, rng, kind, step)

    def repair_solution(self, problem: Problem, response: str) -> str:
        start, ops = self._key(problem)
        return repair_solution(start, list(ops), response, self.config)

    def value_probes(self, problem: Problem, prefix: str) -> ValueProbes | None:
        """What the policy scores for the value of the state ``prefix`` (a response's first
        whole lines) of ``problem`` (:mod:`.values`); None where the state's value is 0."""
        start, ops = self._key(problem)
        fillers = tuple(self.config.fillers)
        return value_probes(
            start, list(ops), problem.answer, prefix, fillers, self.config.split_rate
        )

    # ---------------------------------------------------------------- prompt variants

    def variant(
        self, problem: Problem, kind: str, response: str | None = None, hint: str | None = None
    ) -> str:
        """The prompt of ``problem`` in one of :data:`PROMPT_VARIANTS`.

        ``localize`` and ``repair`` need the ``response`` to judge; ``repair`` takes the correct
        reference as ``hint`` (default: the reference solution); ``solver`` needs the thinker's
        ``hint``; ``solution_hint`` a correct solution as ``hint``. Random choices (which
        rewrite, which typo) are fixed by the problem id.
        """
        if kind not in PROMPT_VARIANTS:
            raise ValueError(f"kind: unknown variant {kind!r}; known: {', '.join(PROMPT_VARIANTS)}")
        if kind in ("localize", "repair") and response is None:
            raise ValueError(f"the {kind} variant needs a response")
        rng = _stable_rng(problem.id, kind)
        start, ops = self._key(problem)
        prompt = problem.prompt
        if kind == "oracle_hint":
            return f"{prompt}the answer is {problem.answer}.\n"
        if kind == "rewrite_template":
            return render_prompt(start, list(ops), rng.randrange(1, len(TEMPLATES)))
        if kind == "rewrite_typo":
            return typo(prompt, rng)
        if kind == "rewrite_framing":
            return f"{rng.choice(FRAMINGS)} {prompt}"
        if kind == "rewrite_suffix":
            return suffix_tag(prompt, rng)
        if kind == "localize":
            assert response is not None  # refused above
            return localize_prompt(prompt, response)
        if kind == "repair":
            assert response is not None
            reference = hint if hint is not None else self.reference_solution(problem)
            return repair_prompt(prompt, response, reference)
        if kind == "thinker":
            return f"{prompt}make a plan.\n"
        if kind == "solver":
            if hint is None:
                raise ValueError("the solver variant needs a hint (the thinker's plan)")
            return f"{prompt}{hint.strip()}\n"
        if kind == "solution_hint":
            if hint is None:
                raise ValueError("the solution_hint variant needs a hint (a correct solution)")
            return solution_hint_prompt(prompt, hint)
        return prompt  # solo

    # ---------------------------------------------------------------- SFT examples

    def sft_example(
        self, rng: random.Random, mix: dict[str, float] | None = None
    ) -> tuple[str, str]:
        """One ``(prompt, completion)`` pair for supervised pre-training of the base policy, on
        a fresh problem that is not in the eval split. ``mix`` weighs the kinds of example
        (keys: ``"solve"`` and :data:`PROMPT_VARIANTS`; default :data:`SFT_MIX`)."""
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
        split_ks = self._random_plan(problem, rng)
        plan = plan_text(split_ks)
        if kind == "thinker":
            return self.variant(problem, kind), plan
        assert kind == "solver", kind  # SFT_KINDS lists no other
        return self.variant(problem, kind, hint=plan), self.sample_solution(
            problem, rng, split_ks=set(split_ks)
        )

    def _fresh_problem(self, rng: random.Random) -> Problem:
        eval_keys = self._eval_keys()
        while True:
            key = self._draw(rng)
            if key not in eval_keys:
                return self.make_problem(f"chain/sft/{rng.getrandbits(40):010x}", *key)

    def _random_plan(self, problem: Problem, rng: random.Random) -> list[int]:
        ks = dict.fromkeys(k for s, k in self._key(problem)[1] if splittable((s, k)))
        return [k for k in ks if rng.random() < self.config.split_rate]

    def _failed_solution(self, problem: Problem, rng: random.Random) -> str:
        """A solution with a wrong answer: mostly slips, sometimes another kind of error."""
        n = self.config.steps
        for _ in range(20):
            if rng.random() < 0.8:
                text = self.sample_solution(problem, rng, force_slip_at=rng.randrange(n))
            else:
                kind = rng.choice([k for k in ERROR_KINDS if n > 1 or k != "missing step"])
                high = {"missing step": n - 2, "extra step": n}.get(kind, n - 1)
                text = self.corrupt_solution(problem, kind, rng.randint(0, high), rng)
            if self.grade(problem, text).reward == 0.0:
                return text
        return self.sample_solution(problem, rng, slips=False, force_slip_at=n - 1)
