"""The contract between a method and the harness: every service a method may call, and every
key a batch's ``extras`` may carry.

A method sees the harness only through :class:`Services`. Each service that runs a model is
charged to the run's budget meter by the harness (the *Charged* line of each docstring), never
by the method, so every method pays for what it asks. mypy checks each method file against
this Protocol (``tox -e types``); the harness's implementation is
``creditbench.harness.services.HarnessServices``, and ``tests/fakes.py`` has one without a model.

``RolloutBatch.extras`` maps an :class:`ExtraKey` to a tensor whose first dimension is the
batch. The harness owns the keys below (it fills them); a method declares its own with
:func:`method_extra` next to the code that writes them, so every key in a batch is documented
once and two methods cannot collide on a name.

Imports torch only, like every file of ``methods/``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from .core import RolloutBatch

# --------------------------------------------------------------------------------------------
# Extras keys
# --------------------------------------------------------------------------------------------


class ExtraKey(str):
    """A documented key of ``RolloutBatch.extras``; it is the string itself, so a batch's
    ``extras`` stays a plain ``dict[str, Tensor]`` that any trainer can read.

    Attributes:
        shape: the tensor's shape, e.g. ``[B, T]``.
        doc: what the tensor holds.
        owner: ``harness`` or the name of the method that writes it.
    """

    shape: str
    doc: str
    owner: str

    def __new__(cls, name: str, shape: str, doc: str, owner: str = "harness") -> ExtraKey:
        key = super().__new__(cls, name)
        key.shape, key.doc, key.owner = shape, doc, owner
        return key


EXTRA_REGISTRY: dict[str, ExtraKey] = {}
"""Every declared key by name: the harness's and those of the methods imported so far."""


def _declare(key: ExtraKey) -> ExtraKey:
    known = EXTRA_REGISTRY.get(str(key))
    if known is not None and known.owner != key.owner:
        raise ValueError(f"extras key {str(key)!r} is already declared by {known.owner}")
    EXTRA_REGISTRY[str(key)] = key
    return key


def method_extra(owner: str, name: str, shape: str, doc: str) -> ExtraKey:
    """Declare an extras key that method ``owner`` writes and reads (e.g. SDPO's teacher)."""
    return _declare(ExtraKey(name, shape, doc, owner))


PROBLEM_INDEX = _declare(
    ExtraKey("problem_index", "[B] long", "the row's problem in the task's train split")
)
PREFIX_MASK = _declare(
    ExtraKey(
        "prefix_mask",
        "[B, T]",
        "1 on the tokens of a given prefix (Services.generate with prefixes): context the "
        "row continued, not sampled by it",
    )
)
FIRST_WRONG_MASK = _declare(
    ExtraKey("first_wrong_mask", "[B, T]", "1 on the tokens of the first wrong step")
)
AFTER_WRONG_MASK = _declare(
    ExtraKey("after_wrong_mask", "[B, T]", "1 on the tokens after the first wrong step")
)
WRONG_STEP_MASK = _declare(
    ExtraKey(
        "wrong_step_mask", "[B, T]", "1 on the tokens of every wrong step (also in correct answers)"
    )
)
FILLER_MASK = _declare(ExtraKey("filler_mask", "[B, T]", "1 on reward-irrelevant filler tokens"))

BEHAVIOUR_ENTROPY = _declare(
    ExtraKey(
        "behaviour_entropy",
        "[B, T]",
        "the behaviour policy's entropy (of the tempered distribution, in nats) at each response "
        "token, from the scoring pass; on the batches of a method that lists it in "
        "Needs.behaviour_statistics",
    )
)

BEHAVIOUR_SUM_PI_SQUARED = _declare(
    ExtraKey(
        "behaviour_sum_pi_squared",
        "[B, T]",
        "Σ_v π(v)² of the behaviour policy's tempered distribution at each response token (the "
        "chance that two draws agree), from the scoring pass; on the batches of a method that "
        "lists it in Needs.behaviour_statistics",
    )
)

BEHAVIOUR_STATISTICS: tuple[ExtraKey, ...] = (BEHAVIOUR_ENTROPY, BEHAVIOUR_SUM_PI_SQUARED)
"""Statistics of the behaviour policy's whole next-token distribution that the scoring pass
computes beside the log-probs, for a method that lists them in
``Needs.behaviour_statistics``."""

STEP_TRUTH_KEYS: tuple[ExtraKey, ...] = (
    FIRST_WRONG_MASK,
    AFTER_WRONG_MASK,
    WRONG_STEP_MASK,
    FILLER_MASK,
)
"""Step ground truth a step-checked task (the testbed) attaches to every graded batch; a method
that reads one lists it in ``Needs.step_truth``."""


# --------------------------------------------------------------------------------------------
# Group filters: a rollout an engine can run itself
# --------------------------------------------------------------------------------------------

ALL_GROUPS = "all_groups"  # the plain sampled batch, every group kept
MIXED_GROUPS = "mixed_groups"  # groups whose task rewards are not all equal (DAPO's rule)


@dataclass(frozen=True)
class GroupFilter:
    """What a method's own rollout amounts to when it only draws plain sampled batches and keeps
    whole groups of them by a rule (``keep``: :data:`ALL_GROUPS` or :data:`MIXED_GROUPS`),
    drawing at most ``max_batches`` batches a step (0: no bound). An engine that samples for
    itself can run such a method with a filter of its own (verl's ``algorithm.filter_groups``);
    see ``CreditMethod.group_filter``."""

    keep: str
    max_batches: int = 0

    def __post_init__(self) -> None:
        if self.keep not in (ALL_GROUPS, MIXED_GROUPS):
            raise ValueError(f"keep: one of {ALL_GROUPS}, {MIXED_GROUPS} (got {self.keep!r})")
        if self.max_batches < 0:
            raise ValueError(f"max_batches: must be >= 0 (got {self.max_batches})")


# --------------------------------------------------------------------------------------------
# What a method's credit means: the promises the conformance suite checks
# --------------------------------------------------------------------------------------------

DIRECTION = "direction"  # an opt-out key: a passed response gets at least a failed one's credit


@dataclass(frozen=True)
class Reduction:
    """Options under which a method's advantages are another registered method's (``target``,
    with its defaults): TEMPO with ``td_weight`` 0 is GRPO. ``source`` says where the reduction
    is stated (the paper's section, or "ours"). The conformance suite checks that the two
    agree there, and that the method's defaults differ from the target somewhere, so a method
    that ignores its own knob is caught."""

    target: str
    options: Mapping[str, object]
    source: str


# --------------------------------------------------------------------------------------------
# The services
# --------------------------------------------------------------------------------------------


class Problem(Protocol):
    """What a method may read of a task's problem."""

    @property
    def prompt(self) -> str: ...

    @property
    def answer(self) -> str: ...


class Services(Protocol):
    """Everything the harness offers a method during one training step.

    Determinism: what a call draws depends only on the run seed, the step and the order of the
    calls within the step, so a resumed run draws exactly what an uninterrupted one draws.
    """

    @property
    def step(self) -> int:
        """The 0-based training step being run."""
        ...

    @property
    def max_new_tokens(self) -> int:
        """The run's generation limit (``rollout.max_new_tokens``): a response that reaches it
        is truncated. DAPO's L_max and Dr. GRPO's constant L default to it."""
        ...

    @property
    def budget_fraction(self) -> float:
        """How far the run is through its budget: the fraction spent *before* this step began
        (``spent / amount`` of the run's budget meter, in the run's budget unit: FLOPs,
        seconds, generated tokens or optimizer steps), 0.0 at the first step and whenever the
        run has no budget amount. One value for the whole step, whatever the step charges; it
        may exceed 1 only after the last step. A schedule stated as a share of training (SCAPO's
        N0, the first 20% of it) reads this, so it needs no step count sized to the suite.
        Charged: nothing."""
        ...

    # --- randomness -------------------------------------------------------------------------

    def generator(self, stream: int) -> torch.Generator:
        """A CPU generator seeded from the run seed, the step and ``stream`` (run seed ×
        ``stream`` + step): a method's own draws (RRPO's reset step), reproducible on resume.
        Distinct streams give distinct draws. Charged: nothing."""
        ...

    # --- rollouts ---------------------------------------------------------------------------

    def sample_batch(self) -> RolloutBatch:
        """The default rollout: the step's next ``prompts_per_step`` problems, ``group_size``
        responses each, graded, with behaviour (and reference) log-probs, ``step_ids`` on a task
        with steps (the testbed's lines, GSM8K's lines, MATH's sentences) and, on a step-checked
        task, :data:`STEP_TRUTH_KEYS`. A second call in the same step draws
        other problems (DAPO's refill). Charged: generation, plus a scoring forward of the
        policy (and of the reference model when the run has one)."""
        ...

    def step_prompts(self) -> tuple[list[str], Tensor]:
        """The step's prompts and their train-split indices ``[P]``, drawn as
        :meth:`sample_batch` draws them but not sampled, for a method that runs its own
        rollout with :meth:`generate`. Charged: nothing."""
        ...

    def generate(
        self,
        prompts: Sequence[str],
        n: int = 1,
        prefixes: Sequence[str | Sequence[int] | Tensor] | None = None,
        *,
        problem_index: Sequence[int] | Tensor | None = None,
        temperature: float | None = None,
        max_new_tokens: int | None = None,
        rewards_only: bool = False,
    ) -> RolloutBatch:
        """``n`` responses to each prompt (any text: a problem's prompt or a variant of it),
        each optionally continuing a prefix (text or token ids) marked by
        :data:`PREFIX_MASK`. Rows are graded against ``problem_index`` (train-split indices,
        one per prompt); without it rewards are NaN (text only, e.g. a thinker's hint). Group
        ids are the prompt's position. ``temperature`` 0 is greedy; None keeps the run's.
        ``rewards_only``: the rows are wanted for their rewards alone (value estimates): no
        scoring pass, no step ground truth, behaviour log-probs NaN.
        Charged: generation and, unless ``rewards_only``, a scoring forward, as
        :meth:`sample_batch`."""
        ...

    def reference_passes(self) -> AbstractContextManager[None]:
        """A block whose model passes are counted (``reference_flops``, ``time.reference_seconds``
        and token counts in the step's record) but not charged: the knowledge of a reference
        method (``CreditMethod.reference``, the exact-credit oracle's value estimates), which
        stands for what no method can buy. Raises RuntimeError for any other method.
        Charged: nothing."""
        ...

    def task_values(self, batch: RolloutBatch) -> Tensor:
        """``[B, S]`` the task's own V(s_k) = P(R = 1 | s_k) at every state of every row (the
        states of ``methods.values.state_starts``; NaN past a row's states): the policy's
        teacher-forced probability of writing each remaining step right, in any of its correct
        renderings, with the task's cancelling operations (the testbed's analytic values,
        ``harness/tasks/chain/values.py``). Raises ValueError on a task without them.
        Charged: a forward of the policy over the texts scored (a reference method runs it in
        :meth:`reference_passes`)."""
        ...

    def batch_from_responses(
        self,
        problem_index: Sequence[int] | Tensor,
        responses: Sequence[str | Sequence[int] | Tensor],
    ) -> RolloutBatch:
        """Given responses (text, or token ids) to train-split problems as a graded batch under
        each problem's plain prompt, with the policy's teacher-forced log-probs as behaviour
        log-probs; nothing is generated. Group ids are row positions (IBPO's repairs).
        Charged: a scoring forward (and the reference model's, if any)."""
        ...

    # --- scoring ----------------------------------------------------------------------------

    def score(
        self, batch: RolloutBatch, prompts: Sequence[str] | None = None, model: str = "policy"
    ) -> Tensor:
        """Teacher-forced log-probs ``[B, T]`` of the batch's responses, without gradient,
        under the batch's own prompts or one text per row (an oracle hint, a rewrite).
        ``model``: ``policy``, ``reference`` (the frozen initial policy), ``teacher`` (a
        stronger frozen checkpoint, testbed only), ``ema`` (see :meth:`track_ema`) or
        ``auxiliary`` (see :meth:`fit_auxiliary`). Zero where ``response_mask`` is 0.
        Charged: a forward of that model."""
        ...

    def distribution(
        self,
        batch: RolloutBatch,
        prompts: Sequence[str] | None = None,
        model: str = "policy",
        *,
        top_k: int | None = None,
        indices: Tensor | None = None,
        grad: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """Next-token log-probs ``[B, T, K]`` at chosen vocabulary entries and those entries
        ``[B, T, K]``: the model's own ``top_k`` (all entries when None) or the given
        ``indices``. ``grad`` keeps the graph (policy only), for a loss that distils whole
        distributions. Charged: a forward of that model (the trainer's training charge covers
        the backward of a ``grad`` pass)."""
        ...

    def fit_auxiliary(
        self,
        batch: RolloutBatch,
        row_loss: Callable[[Tensor, Tensor], Tensor],
        *,
        lr_ratio: float,
        grad_clip: float | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """One optimizer step of the run's trainable auxiliary model (PRIME's reward model),
        made as a copy of the policy on the first call (before the first update: the initial
        policy) and trained as the policy is: the run's optimizer and its settings
        (``train.optimizer``), at ``lr_ratio`` times the policy's learning rate, the gradient
        clipped to ``grad_clip`` (None: the policy's ``train.grad_clip``); later calls must
        repeat both. Its log-probs
        ``[B, T]`` of the batch's responses, with gradient, go to ``row_loss(logprobs, rows)``
        ``-> [b]`` (``rows`` the batch rows of a micro-batch); the mean over the batch is
        minimised. Returns those log-probs, from before the step, detached, and
        ``{"aux_loss", "aux_grad_norm", "aux_updates"}`` (``aux_updates``: the steps the model
        had taken before this pass; 0 on the first, whose weights are the initial policy's).
        Its weights and optimizer state are checkpointed with the run. Charged: a training
        pass (forward and backward) of a policy-size model."""
        ...

    def track_ema(self, rate: float) -> None:
        """Keep an exponential moving average of the policy, updated with ``rate`` once a
        training step, after the step's update (however many optimizer steps it takes), scored
        as ``model="ema"``. Charged: nothing (no model pass)."""
        ...

    # --- text and the task ------------------------------------------------------------------

    def decode(self, batch: RolloutBatch) -> list[str]:
        """The text of every response (a given prefix included, EOS excluded)."""
        ...

    def problems(self, batch: RolloutBatch) -> list[Problem]:
        """The problem of every row (by :data:`PROBLEM_INDEX`)."""
        ...

    def variant(
        self, batch: RolloutBatch, kind: str, hints: Sequence[str] | None = None
    ) -> list[str]:
        """The task's ``kind`` prompt variant for every row (``oracle_hint``, ``rewrite_*``,
        ``localize``, ``repair``, ``thinker``, ``solver``, ``solution_hint``; see
        ``harness/tasks/base.py``); ``localize`` and ``repair`` are built around the row's
        response, ``solver`` and ``solution_hint`` need ``hints``, one per row. Raises
        ValueError on a task without variants. Charged: nothing."""
        ...

    def answer_texts(self, batch: RolloutBatch) -> list[str]:
        """The reference answer of every row as the task's responses state it (the testbed:
        its answer line, ``Answer: N``; MATH: ``The answer is \\boxed{N}.``), for a method
        that scores the answer's likelihood (MIG). Raises ValueError on a task without an
        answer format. Charged: nothing."""
        ...

    def task_repair(self, batch: RolloutBatch) -> list[str]:
        """The task's scripted minimal repair of every row's response (on the testbed: the
        first wrong step fixed, later values recomputed). Raises ValueError on a task without
        one. Charged: nothing (no model runs)."""
        ...

    def delimited_step_ids(self, batch: RolloutBatch, delimiter: str) -> Tensor:
        """``[B, T]`` step index of every response token, a step ending with each
        ``delimiter``; -1 on EOS and padding: steps for a task without its own."""
        ...

    def state_ids(self, batch: RolloutBatch) -> Tensor:
        """``[B, T]`` the state each response token's step was taken in, as an id: rows of
        one problem whose steps have equal ids took them in the same state (the task's
        ``state_keys``; GiGPO's step-level groups); -1 off the task's steps, on EOS and
        padding, and where the text does not say. Raises on a task without states.
        Charged: nothing (no model runs)."""
        ...

    # --- statistics -------------------------------------------------------------------------

    def report(self, stats: Mapping[str, float]) -> None:
        """Statistics of this step for its metrics record (repair rates, reset positions):
        the per-step channel, so a method keeps no state between its hooks. A later value of
        a key replaces an earlier one within the step."""
        ...
