"""What a task is: problems with reference answers, a grader, and the optional parts it
declares (:data:`CAPABILITIES`): steps, a step checker, prompt variants, values of its own, and
the data a base policy learns from; and (:data:`STATES`) which steps were taken in the same
state.

Every task, synthetic or real, hands the harness :class:`Problem` records and grades response
text into a :class:`Grade`. The harness never parses task-specific formats itself, and calls
nothing of a task that :class:`Task` does not declare.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Problem:
    """One problem in the shared schema of every task.

    Attributes:
        id: unique within the task and split.
        prompt: the text the policy is given.
        answer: the reference final answer, as text.
        metadata: task-specific fields (difficulty, source, the full worked solution, ...).
    """

    id: str
    prompt: str
    answer: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Grade:
    """The verdict on one response: reward in [0, 1] and why."""

    reward: float
    reason: str  # "correct", "wrong answer", "no answer", "timeout", "too long", ...


@dataclass(frozen=True)
class StepVerdict:
    """Where a response first goes wrong (testbed only).

    Attributes:
        step: 0-based index of the first wrong step (line).
        kind: what is wrong: "arithmetic", "carried value", "operand", "missing step",
            "extra step", "early stop", "malformed".
        char_start, char_end: the span of that step in the response text.
    """

    step: int
    kind: str
    char_start: int
    char_end: int


PROMPT_VARIANTS = (
    "oracle_hint",  # prompt followed by the reference answer (OPPO, SDPO)
    "rewrite_template",  # semifactual rewrites that keep problem and answer (SCAPO)
    "rewrite_typo",
    "rewrite_framing",
    "rewrite_suffix",
    "localize",  # "which step is the first wrong one?" (SRPO); needs a response
    "repair",  # failed solution + reference -> corrected solution (IBPO); needs a response
    "thinker",  # CCPO roles
    "solver",  # needs a hint
    "solo",
    "solution_hint",  # prompt followed by a full correct solution (SDPO's sibling); needs a hint
)


# The optional parts of a task, each a flag in ``Task.capabilities``: the harness calls a
# part's members only on a task that declares it, and says which flag is missing otherwise.
STEPS = "steps"  # step_spans: responses cut into reasoning steps (step_ids)
STEP_CHECK = "step_check"  # check_steps: the step ground truth (implies STEPS)
VARIANTS = "variants"  # variant, repair_solution: the prompt variants the methods ask for
VALUES = "values"  # value_probes: the task's own value of a state
TEACHER = "teacher"  # alphabet, sft_example, solutions: the data the base policy learns from
CAPABILITIES = (STEPS, STEP_CHECK, VARIANTS, VALUES, TEACHER)
# A later part, which a task lists by name beside the ones above (a task declaring "all of
# CAPABILITIES" does not get it unasked): which steps were taken in the same state (GiGPO's
# step-level groups). Implies STEPS.
STATES = "states"  # state_keys: the state each step was taken in
# the methods that make a capability: a task that has one must declare it
MEMBERS = {
    STEPS: ("step_spans",),
    STEP_CHECK: ("check_steps",),
    VARIANTS: ("variant", "repair_solution"),
    VALUES: ("value_probes",),
    TEACHER: ("sft_example", "reference_solution", "sample_solution", "corrupt_solution"),
    STATES: ("state_keys",),
}

Span = tuple[int, int]


@dataclass(frozen=True)
class StepCheck:
    """What a step-checked task says about one response (character spans in its text).

    Attributes:
        steps: the spans of its steps, in order (as :meth:`Task.step_spans`).
        wrong: every wrong step, in order, also inside a correct answer.
        filler: the spans of words that never affect the reward.
    """

    steps: list[Span]
    wrong: list[StepVerdict]
    filler: list[Span]

    @property
    def first_wrong(self) -> StepVerdict | None:
        return self.wrong[0] if self.wrong else None


class Task(Protocol):
    """The whole contract between the harness and a task: nothing outside ``harness/tasks``
    calls a task member this class does not declare (``tests/test_architecture.py``).

    Every task has ``name``, ``capabilities``, ``problems``, ``grade`` and ``answer_text``; the
    other members belong to one capability each and are called only on a task that lists it.
    :class:`TaskBase` gives a task the optional members as refusals, so a task implements what
    it declares. The testbed (:mod:`harness.tasks.chain`) declares all of them; the math data
    sets (:mod:`harness.tasks.math_data`) only :data:`STEPS`.
    """

    name: str
    capabilities: frozenset[str]

    def problems(self, split: str) -> Sequence[Problem]:
        """All problems of ``split`` ("train" or "eval"), in a fixed order."""
        ...

    def grade(self, problem: Problem, response: str) -> Grade:
        """Grade one response. Never raises on model output."""
        ...

    def answer_text(self, problem: Problem) -> str:
        """The reference answer as the task's responses state it (OPPO's hint, MIG's target)."""
        ...

    # STEPS
    def step_spans(self, response: str) -> list[Span]:
        """Character spans of the response's steps, in order, not overlapping; characters
        between spans (whitespace) belong to the step before."""
        ...

    # STEP_CHECK
    def check_steps(self, problem: Problem, response: str) -> StepCheck:
        """The response's steps, wrong steps and filler, in one pass over its text."""
        ...

    # STATES
    def state_keys(self, problem: Problem, response: str) -> list[str | None]:
        """One key per step of ``step_spans(response)``: the state that step was taken in.
        Steps of responses to one problem with equal keys were taken in the same state (the
        same situation reached by different paths: GiGPO's anchor states); None where the
        response's text does not say (a step after one that cannot be read). The testbed's
        state before step k is k and the running value the response carried into it."""
        ...

    # VARIANTS
    def variant(self, problem: Problem, kind: str, **kwargs: Any) -> str:
        """The prompt of ``problem`` in one of :data:`PROMPT_VARIANTS`."""
        ...

    def repair_solution(self, problem: Problem, response: str) -> str:
        """A scripted minimal repair of ``response`` (IBPO's oracle repair)."""
        ...

    # VALUES
    def value_probes(self, problem: Problem, prefix: str) -> Any:
        """What the policy scores for the value of the state ``prefix`` (None where it is 0)."""
        ...

    # TEACHER
    alphabet: str  # every character the task writes: the base policy's vocabulary
    clean_trace_options: dict[str, Any]  # options whose traces hold no injected errors
    error_kinds: tuple[str, ...]  # the errors corrupt_solution can inject

    def sft_example(self, rng: Any, mix: dict[str, float] | None = None) -> tuple[str, str]:
        """One ``(prompt, completion)`` pair for the base policy's supervised training."""
        ...

    def reference_solution(self, problem: Problem) -> str: ...

    def sample_solution(self, problem: Problem, rng: Any, **kwargs: Any) -> str: ...

    def corrupt_solution(self, problem: Problem, kind: str, step: int, rng: Any) -> str: ...


class MissingCapabilityError(ValueError):
    """A task asked for a part it does not declare (a method's prompt variant on real data)."""


def require(task: Any, capability: str, asked: str) -> None:
    """MissingCapabilityError unless ``task`` declares ``capability``; ``asked`` says who
    asked (a method's service, a CLI option) so the message points at the fix."""
    declared = capabilities_of(task)
    if capability not in declared:
        name = getattr(task, "name", type(task).__name__)
        raise MissingCapabilityError(
            f"task {name!r} has no {capability} (asked for by {asked}); it declares "
            f"{', '.join(sorted(declared)) or 'none'}"
        )


def undeclared_capabilities(task: Any) -> list[str]:
    """The capabilities whose methods ``task`` has (its own, not `TaskBase`'s refusals) but
    does not list in ``capabilities``: the harness would never call them."""
    declared = capabilities_of(task)
    out = []
    for capability, members in MEMBERS.items():
        own = [m for m in members if callable(getattr(type(task), m, None))]
        own = [m for m in own if getattr(type(task), m) is not getattr(TaskBase, m, None)]
        if own and capability not in declared:
            out.append(f"{capability} ({', '.join(own)})")
    return out


def capabilities_of(task: Any) -> frozenset[str]:
    """The capabilities ``task`` declares; none for a task written before they existed."""
    return frozenset(getattr(task, "capabilities", ()))


class TaskBase:
    """Defaults for :class:`Task`: no capabilities, every optional member a refusal."""

    name = "task"
    capabilities: frozenset[str] = frozenset()
    alphabet = ""
    clean_trace_options: dict[str, Any] = {}
    error_kinds: tuple[str, ...] = ()

    def _refuse(self, capability: str, member: str) -> Any:
        require(self, capability, member)
        raise NotImplementedError(f"task {self.name!r} declares {capability} but lacks {member}")

    def answer_text(self, problem: Problem) -> str:
        return problem.answer

    def step_spans(self, response: str) -> list[Span]:
        return self._refuse(STEPS, "step_spans")

    def check_steps(self, problem: Problem, response: str) -> StepCheck:
        return self._refuse(STEP_CHECK, "check_steps")

    def state_keys(self, problem: Problem, response: str) -> list[str | None]:
        return self._refuse(STATES, "state_keys")

    def variant(self, problem: Problem, kind: str, **kwargs: Any) -> str:
        return self._refuse(VARIANTS, f"the {kind} prompt variant")

    def repair_solution(self, problem: Problem, response: str) -> str:
        return self._refuse(VARIANTS, "repair_solution")

    def value_probes(self, problem: Problem, prefix: str) -> Any:
        return self._refuse(VALUES, "value_probes")

    def sft_example(self, rng: Any, mix: dict[str, float] | None = None) -> tuple[str, str]:
        return self._refuse(TEACHER, "sft_example")

    def reference_solution(self, problem: Problem) -> str:
        return self._refuse(TEACHER, "reference_solution")

    def sample_solution(self, problem: Problem, rng: Any, **kwargs: Any) -> str:
        return self._refuse(TEACHER, "sample_solution")

    def corrupt_solution(self, problem: Problem, kind: str, step: int, rng: Any) -> str:
        return self._refuse(TEACHER, "corrupt_solution")


def has_steps(task: Any) -> bool:
    """Whether ``task`` cuts responses into reasoning steps, so batches carry ``step_ids``
    (the testbed, GSM8K, MATH)."""
    return bool({STEPS, STEP_CHECK} & capabilities_of(task))


def is_step_checked(task: Any) -> bool:
    """Whether ``task`` can say where each response goes wrong, so batches carry the step
    ground truth (the testbed)."""
    return STEP_CHECK in capabilities_of(task)
