"""What a task is: problems with reference answers, a grader, and (on the testbed) a step
checker and the prompt variants the methods ask for.

Every task, synthetic or real, hands the harness :class:`Problem` records and grades response
text into a :class:`Grade`. The harness never parses task-specific formats itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


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


class Task(Protocol):
    """The interface the harness uses. See ``harness/tasks/chain.py`` for the testbed."""

    name: str

    def problems(self, split: str) -> Sequence[Problem]:
        """All problems of ``split`` ("train" or "eval"), in a fixed order."""
        ...

    def grade(self, problem: Problem, response: str) -> Grade:
        """Grade one response. Never raises on model output."""
        ...


@runtime_checkable
class SteppedTask(Task, Protocol):
    """A task that cuts any response into its reasoning steps: the harness gives every graded
    batch of it ``step_ids`` from these spans (:mod:`harness.services.batches`). The testbed's
    steps are its lines; real data's are the dataset's (:mod:`harness.tasks.solution_steps`)."""

    def step_spans(self, response: str) -> list[tuple[int, int]]:
        """Character spans of the response's steps, in order, not overlapping; characters
        between spans (whitespace) belong to the step before."""
        ...


@runtime_checkable
class StepCheckedTask(SteppedTask, Protocol):
    """A task that knows, for any response, where its first wrong step is."""

    def first_wrong_step(self, problem: Problem, response: str) -> StepVerdict | None: ...

    def variant(self, problem: Problem, kind: str, **kwargs: Any) -> str:
        """The prompt of ``problem`` in one of :data:`PROMPT_VARIANTS`."""
        ...


def has_steps(task: object) -> bool:
    """Whether ``task`` is a :class:`SteppedTask`: it cuts responses into reasoning steps, so
    batches carry ``step_ids`` (the testbed, GSM8K, MATH)."""
    return isinstance(task, SteppedTask)


def is_step_checked(task: object) -> bool:
    """Whether ``task`` is a :class:`StepCheckedTask`: it can say where each response first goes
    wrong, so batches carry the step ground truth (the testbed)."""
    return isinstance(task, StepCheckedTask)
