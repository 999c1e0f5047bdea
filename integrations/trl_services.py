"""The `Services` contract on TRL's side: what a method's credit may call inside
`CreditGRPOTrainer`, run with TRL's own model and tokenizer.

The harness's scoring passes and text helpers do the work (`harness.scoring`,
`harness.services.text`), given TRL's model instead of the harness's: teacher-forced log-probs
of the batch's responses under its own prompts or one text per row (`score`, `distribution`),
under the frozen reference model or a trained auxiliary model (PRIME's reward model,
`fit_auxiliary`, trained as TRL trains the policy: AdamW with TRL's betas, weight decay,
learning rate and gradient clip); with a
creditbench task the task's prompt variants, problems and answers of each row. The step and
the budget fraction are TRL's (``global_step / max_steps``), and `report` goes to TRL's logged
metrics.

:class:`TRLServices` does not sample, and any service not listed raises NotImplementedError
naming it. A method whose rollout draws more than the plain batch (continuations, resets,
repairs, two roles) gets :class:`TRLRolloutServices` instead: the harness's own services
(`HarnessServices`: its sampler, grader and scoring passes) on TRL's model, tokenizer and
sampling settings, whose first draw of a step is the prompts TRL's sampler chose for it and
whose further draws (DAPO's refills, a method's own) take the adapter's next prompts.

On several processes every process holds the whole gathered batch and runs the method on it
(as TRL's own group statistics do), but the forward passes are split: `score` and
`score_behaviour` score this process's share of the rows (:class:`RowShards`) and gather the
shares, so a step costs each process its share of a scoring pass, not a whole one. The
auxiliary model's fit and `distribution` still run on every row on every process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from creditbench.harness.budget import BudgetMeter
from creditbench.harness.config import RolloutConfig
from creditbench.harness.scoring.auxiliary import PolicyOptimizer
from creditbench.harness.scoring.passes import ScoringPasses
from creditbench.harness.scoring.scorers import Scorers
from creditbench.harness.services.harness_services import HarnessServices
from creditbench.harness.services.model_services import ModelServices
from creditbench.harness.services.text import TaskText
from creditbench.methods.core import RolloutBatch

Scored = torch.Tensor | dict[str, torch.Tensor]
BEHAVIOUR = "behaviour_logprobs"  # score_behaviour's log-probs among its statistics


def adamw_like_trl(args: Any) -> PolicyOptimizer:
    """How TRL trains the policy (``TrainingArguments``' AdamW: its betas, epsilon, weight
    decay, learning rate and ``max_grad_norm``), for an auxiliary model to copy."""
    return PolicyOptimizer(
        make=lambda params, lr: torch.optim.AdamW(
            params,
            lr=lr,
            betas=(args.adam_beta1, args.adam_beta2),
            eps=args.adam_epsilon,
            weight_decay=args.weight_decay,
        ),
        lr=args.learning_rate,
        grad_clip=args.max_grad_norm or None,
    )


@dataclass(frozen=True)
class RowShards:
    """This process's share of a batch's rows, and the gather that joins every process's.

    ``gather`` concatenates one equally shaped tensor from each process along dim 0, in
    process order (``accelerator.gather``). Each of the ``count`` processes scores ``ceil(B /
    count)`` rows, the last ones padded with copies of row ``B - 1`` so that every share has
    one shape; the copies are dropped after the gather.
    """

    index: int = 0
    count: int = 1
    gather: Callable[[torch.Tensor], torch.Tensor] = lambda tensor: tensor

    def run(
        self,
        batch: RolloutBatch,
        prompts: Sequence[str] | None,
        score: Callable[[RolloutBatch, Sequence[str] | None], Scored],
    ) -> Scored:
        """``score(rows, their prompts)`` on this process's rows, gathered to the whole batch's
        (``[B, ...]`` tensors, or a dict of them)."""
        if self.count == 1:
            return score(batch, prompts)
        share = -(-batch.size // self.count)
        first = self.index * share
        rows = torch.arange(first, first + share).clamp(max=batch.size - 1)
        mine = score(batch.select(rows), None if prompts is None else [prompts[i] for i in rows])

        def whole(local: torch.Tensor) -> torch.Tensor:
            return self.gather(local.contiguous())[: batch.size]

        if isinstance(mine, dict):
            return {key: whole(value) for key, value in mine.items()}
        return whole(mine)


class TRLServices(ModelServices):
    """The services of one `CreditGRPOTrainer` run.

    Args:
        policy: TRL's model (the one being trained), unwrapped.
        tokenizer: TRL's processing class.
        max_new_tokens: TRL's ``max_completion_length``.
        temperature: TRL's sampling temperature (log-probs are the tempered policy's, as TRL's).
        micro_batch_size: rows per scoring forward.
        seed: the run seed (TRL's ``args.seed``).
        reference: a frozen copy of the initial policy, or None.
        optimizer: how the policy is trained, for an auxiliary model (see
            :func:`adamw_like_trl`), or None.
        task: the creditbench task the training set comes from, whose rows carry
            ``extras[PROBLEM_INDEX]``; None: no variants, problems or answers.
        shards: how the processes split a scoring pass (one process: the whole batch).
    """

    def __init__(
        self,
        *,
        policy: Any,
        tokenizer: Any,
        max_new_tokens: int,
        temperature: float,
        micro_batch_size: int,
        seed: int,
        reference: Any = None,
        optimizer: PolicyOptimizer | None = None,
        task: Any = None,
        shards: RowShards = RowShards(),
    ) -> None:
        self.max_new_tokens, self.seed, self.task = max_new_tokens, seed, task
        self.shards = shards
        self.step, self.budget_fraction = 0, 0.0
        self.stats: dict[str, float] = {}
        self.scorers = Scorers(policy, BudgetMeter.for_model(policy), reference, None, optimizer)
        self.scoring = ScoringPasses(
            self.scorers,
            tokenizer,
            micro_batch_size=micro_batch_size,
            temperature=temperature,
            seconds={"generation": 0.0, "scoring": 0.0},
        )
        problems = list(task.problems("train")) if task is not None else []
        self.text = TaskText(task, tokenizer, problems)

    def begin_step(self, step: int, budget_fraction: float) -> None:
        """A new generation batch: TRL's step and the share of ``max_steps`` done before it."""
        self.step, self.budget_fraction, self.stats = step, budget_fraction, {}

    # --- the batch's own scoring ---------------------------------------------------------------

    def score_behaviour(self, batch: RolloutBatch, statistics: Sequence[str]) -> None:
        """Fill ``batch.old_logprobs`` with the policy's log-probs before the update (TRL's
        ``old_per_token_logps``) and ``batch.extras`` with ``statistics`` of its next-token
        distribution, from one forward (this process's share of it)."""

        def one_pass(rows: RolloutBatch, _: Sequence[str] | None) -> dict[str, torch.Tensor]:
            if not statistics:
                return {BEHAVIOUR: self.scoring.score(rows)}
            logprobs, found = self.scoring.score_with_statistics(rows, statistics)
            return {**found, BEHAVIOUR: logprobs}

        scored = self.shards.run(batch, None, one_pass)
        assert isinstance(scored, dict)
        batch.old_logprobs = scored.pop(BEHAVIOUR)
        if statistics:
            batch.extras = {**(batch.extras or {}), **scored}

    def score(
        self, batch: RolloutBatch, prompts: Sequence[str] | None = None, model: str = "policy"
    ) -> torch.Tensor:
        """Teacher-forced log-probs ``[B, T]`` (:meth:`ModelServices.score`), this process
        scoring its share of the rows."""
        scored = self.shards.run(batch, prompts, lambda b, p: self.scoring.score(b, p, model))
        assert isinstance(scored, torch.Tensor)
        return scored

    def track_ema(self, rate: float) -> None:
        """Keep an exponential moving average of TRL's policy, scored as ``model="ema"``; the
        adapter moves it once a generation batch, after that batch's updates
        (`Scorers.after_update`), as the builtin trainer does once a step."""
        self.scoring.track_ema(rate)

    def on_policy_updated(self) -> None:
        """After a generation batch's optimizer steps: move the moving average, if one is kept."""
        self.scorers.after_update()

    # --- the rest of the Services contract: ModelServices; nothing samples ---------------------

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # Python's own protocol lookups (copy, pickle, hasattr)
            raise AttributeError(name)
        raise NotImplementedError(f"{name}: TRL's adapter does not offer it (nothing samples)")


class TRLPrompts:
    """The prompt schedule of :class:`TRLRolloutServices` (`PromptSchedule`'s interface): the
    first sampling call of a step draws the problems TRL's sampler gave the step (``first``);
    each further call the problems ``more()`` returns (the adapter's refill prompts)."""

    def __init__(self, more: Callable[[], list[int]]) -> None:
        self.more = more
        self.first: list[int] = []
        self._step, self._calls = -1, 0

    def next_call(self, step: int) -> int:
        if self._step != step:
            self._step, self._calls = step, 0
        self._calls += 1
        return self._calls - 1

    def indices(self, step: int, call: int = 0) -> list[int]:
        return list(self.first) if call == 0 else self.more()


class TRLRolloutServices(HarnessServices):
    """The harness's services (`HarnessServices`) on TRL's model, for a method that samples its
    own batch inside `CreditGRPOTrainer`: sampled with the harness's sampler (not TRL's vLLM),
    graded by the task's grader (not TRL's reward functions), scored as the builtin trainer
    scores; see the module.

    Args:
        task: the creditbench task the training set comes from.
        policy, tokenizer: TRL's model (unwrapped) and processing class.
        rollout: TRL's sampling settings as a `RolloutConfig` (``num_generations``,
            ``max_completion_length``, ``temperature``, ``top_p``; the prompts a step).
        micro_batch_size, seed, reference, optimizer: as :class:`TRLServices`.
        more_prompts: the train-split indices of the next refill's prompts, for a draw after a
            step's first.
    """

    def __init__(
        self,
        *,
        task: Any,
        policy: Any,
        tokenizer: Any,
        rollout: RolloutConfig,
        micro_batch_size: int,
        seed: int,
        more_prompts: Callable[[], list[int]],
        reference: Any = None,
        optimizer: PolicyOptimizer | None = None,
    ) -> None:
        super().__init__(
            task=task,
            policy=policy,
            tokenizer=tokenizer,
            meter=BudgetMeter.for_model(policy),
            rollout=rollout,
            micro_batch_size=micro_batch_size,
            seed=seed,
            reference=reference,
            policy_optimizer=optimizer,
        )
        self.prompts = TRLPrompts(more_prompts)
        self.prompt_schedule = self.prompts  # type: ignore[assignment]
