"""What the harness offers a method (:class:`methods.contract.Services`), all charged to the
budget.

A method sees one :class:`HarnessServices` per run: a thin object that composes the parts doing
the work, each in its own module: the prompt schedule (:mod:`.prompt_schedule`), sampling
(here: the rollout backend and its budget charge), graded batches (:mod:`.batches`), the scoring
passes (:mod:`creditbench.harness.scoring.passes`) and the task's text helpers (:mod:`.text`).
Every forward pass, generation and scoring pass is charged to the run's
:class:`~creditbench.harness.budget.BudgetMeter`, so no method can spend compute the others do
not pay for.

Determinism: the prompts and the sampler's seed of a call depend only on ``(seed, step, call)``
where ``call`` counts the sampling calls within the step, so a resumed run draws exactly what an
uninterrupted one draws.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from creditbench.harness.sampling.rollout import derive_seed, encode, sample_responses
from creditbench.harness.scoring.passes import ScoringPasses
from creditbench.harness.scoring.scorers import Scorers
from creditbench.harness.services.batches import GradedBatches
from creditbench.harness.services.model_services import ModelServices
from creditbench.harness.services.prompt_schedule import PromptSchedule
from creditbench.harness.services.step_plan import StepPlan
from creditbench.harness.services.task_values import task_state_values
from creditbench.harness.services.text import TaskText
from creditbench.harness.tasks.base import has_steps, is_step_checked
from creditbench.methods.contract import PREFIX_MASK
from creditbench.methods.core import RolloutBatch

# Rows one sampling call decodes together at most: a larger request (value continuations of
# hundreds of states) is sampled in chunks of prompts, so its cache fits in memory.
MAX_ROWS_PER_CALL = 8192


class HarnessServices(ModelServices):
    """The services of one run (the :class:`~creditbench.methods.contract.Services` contract).

    Args:
        task: the task (:class:`~creditbench.harness.tasks.base.Task`; what it can do beyond
            problems and grades is in its ``capabilities``).
        policy, tokenizer: the model being trained and its tokenizer.
        meter: the run's budget meter.
        rollout: the run's :class:`~creditbench.harness.config.RolloutConfig`.
        micro_batch_size: rows per scoring forward.
        shared_prefix: encode each distinct prompt of a scoring micro-batch once.
        seed: the run seed.
        reference: a frozen copy of the initial policy, or None.
        teacher_loader: a zero-argument callable returning a frozen teacher model, loaded on
            first use (OPPO's teacher-oracle variant), or None.
        sampler: an alternative sampling backend with ``sample(...)`` (:class:`VLLMBackend`).
        policy_optimizer: how the policy is trained
            (:class:`~creditbench.harness.scoring.auxiliary.PolicyOptimizer`), which an
            auxiliary model copies; None: a method cannot fit one.
    """

    def __init__(
        self,
        *,
        task,
        policy,
        tokenizer,
        meter,
        rollout,
        micro_batch_size: int,
        seed: int,
        shared_prefix: bool = False,
        reference=None,
        teacher_loader: Callable[[], Any] | None = None,
        sampler=None,
        policy_optimizer=None,
    ) -> None:
        self.task, self.policy, self.tokenizer, self.meter = task, policy, tokenizer, meter
        self.rollout_config = rollout
        self.max_new_tokens = rollout.max_new_tokens
        self.seed = seed
        self.sampler = sampler
        self.train_problems = list(task.problems("train"))
        self.step_checked = is_step_checked(task)
        self.step = 0
        self.budget_fraction = 0.0  # the budget spent before this step (see begin_step)
        self.stats: dict[str, float] = {}  # what methods report this step (see report)
        # the rewards of every plain batch the step drew (sample_batch), before a method
        # filters or extends it: the step's online accuracy
        self.drawn_rewards: list[Tensor] = []
        self.seconds = {"generation": 0.0, "scoring": 0.0}
        self.scorers = Scorers(policy, meter, reference, teacher_loader, policy_optimizer)
        self.scoring = ScoringPasses(
            self.scorers,
            tokenizer,
            micro_batch_size=micro_batch_size,
            temperature=rollout.temperature,
            seconds=self.seconds,
            shared_prefix=shared_prefix,
        )
        self.prompt_schedule = PromptSchedule(
            len(self.train_problems), rollout.prompts_per_step, seed
        )
        self.batches = GradedBatches(
            task,
            tokenizer,
            self.train_problems,
            self.scoring,
            with_reference=reference is not None,
            step_checked=self.step_checked,
            stepped=has_steps(task),
        )
        self.text = TaskText(task, tokenizer, self.train_problems)
        self.plan = self.batches.plan = StepPlan(0)

    # --- the step -----------------------------------------------------------------------------

    def begin_step(self, plan: StepPlan) -> None:
        """Called by the trainer before a step's rollout with the step's :class:`StepPlan`
        (which passes its batches get); a fresh stats dict. The budget's spent fraction is read
        here, once, so every hook of the step sees the same ``budget_fraction`` (0.0 on a meter
        without a budget amount)."""
        self.step = plan.step
        self.budget_fraction = self.meter.fraction() if self.meter.amount > 0 else 0.0
        self.stats = {}
        self.drawn_rewards = []
        self.plan = self.batches.plan = plan

    def end_step(self) -> None:
        """After the step's update: a batch made outside a step (``creditbench explain``, a
        tool) gets every pass, as the plain plan says."""
        self.plan = self.batches.plan = StepPlan(self.step)

    @contextlib.contextmanager
    def reference_passes(self) -> Iterator[None]:
        """Model passes inside the block are counted, not charged (see
        ``Services.reference_passes``); only a reference method may open one."""
        if not self.plan.reference_method:
            raise RuntimeError(
                "reference_passes: only a reference method (CreditMethod.reference) may run "
                "passes its budget does not pay for"
            )
        with self.meter.as_reference():
            yield

    def on_policy_updated(self) -> None:
        """Called by the trainer once a step, after the step's last optimizer step: pushes the
        weights to a vLLM sampler and moves the policy's moving average."""
        if self.sampler is not None:
            self.sampler.load_weights(self.policy)
        self.scorers.after_update()

    # --- rollouts -----------------------------------------------------------------------------

    def step_prompts(self) -> tuple[list[str], Tensor]:
        """This step's prompts and their train-split indices ``[P]``, drawn as
        :meth:`sample_batch` draws them but not sampled: for a method that runs its own
        rollout with :meth:`generate` (RRPO/SRPO's fresh attempts and resets)."""
        indices = self.prompt_schedule.indices(self.step, self.prompt_schedule.next_call(self.step))
        prompts = [self.train_problems[i].prompt for i in indices]
        return prompts, torch.tensor(indices, dtype=torch.long)

    def _sample(self, prompts, n, *, seed, prefixes=None, temperature=None, max_new_tokens=None):
        cfg = self.rollout_config
        options = dict(
            n=n,
            max_new_tokens=max_new_tokens or cfg.max_new_tokens,
            temperature=cfg.temperature if temperature is None else temperature,
            top_p=cfg.top_p,
            seed=seed,
            prefixes=prefixes,
        )
        started = time.perf_counter()
        if self.sampler is not None:
            samples = self.sampler.sample(prompts, **options)
        else:
            per_call = max(1, MAX_ROWS_PER_CALL // max(n, 1))
            samples = sample_responses(
                self.policy,
                self.tokenizer,
                prompts,
                engine=cfg.backend,
                batch_size=per_call if len(prompts) > per_call else None,
                **options,
            )
        contexts = samples.prompt_mask.sum(-1).long() + samples.response_mask.sum(-1).long()
        self.meter.charge_generation(contexts - samples.new_tokens, samples.new_tokens)
        self.seconds["generation"] += time.perf_counter() - started
        return samples

    def sample_batch(self) -> RolloutBatch:
        """The default rollout: the next ``prompts_per_step`` problems, ``group_size`` each."""
        call = self.prompt_schedule.next_call(self.step)
        indices = self.prompt_schedule.indices(self.step, call)
        prompts = [self.train_problems[i].prompt for i in indices]
        seed = derive_seed(self.seed, "rollout", self.step, call)
        samples = self._sample(prompts, self.rollout_config.group_size, seed=seed)
        problem_index = torch.tensor(indices, dtype=torch.long)[samples.prompt_index]
        batch = self.batches.from_samples(samples, problem_index, group_offset=call * len(indices))
        self.drawn_rewards.append(batch.rewards.detach().clone())
        return batch

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
        """``n`` fresh responses to each prompt, optionally continuing a given prefix.

        Args:
            prompts: prompt texts (a problem's prompt, or any variant of it).
            prefixes: per prompt, text or token ids every response starts with (a reset state
                inside an earlier response); the prefix is part of the response, marked by
                ``extras[PREFIX_MASK]`` so a method can keep it out of the loss.
            problem_index: per prompt, the train-split problem it belongs to; responses are
                graded against it. Without it the responses are not graded and their
                rewards are NaN (use them as text only, e.g. a thinker's hint).
            temperature: 0 for greedy; defaults to the rollout temperature.
            rewards_only: graded rows only (value estimates): no scoring pass and no step
                ground truth; behaviour log-probs are NaN.

        Returns:
            A :class:`RolloutBatch` with behaviour log-probs under the prompts given; group ids
            are the prompt's position in ``prompts``.
        """
        call = self.prompt_schedule.next_call(self.step)
        prefix_ids = None
        if prefixes is not None:
            prefix_ids = [
                encode(self.tokenizer, [p])[0] if isinstance(p, str) else [int(t) for t in p]
                for p in prefixes
            ]
        seed = derive_seed(self.seed, "generate", self.step, call)
        samples = self._sample(
            list(prompts),
            n,
            seed=seed,
            prefixes=prefix_ids,
            temperature=temperature,
            max_new_tokens=max_new_tokens,
        )
        index = None
        if problem_index is not None:
            index = torch.as_tensor(problem_index, dtype=torch.long)[samples.prompt_index]
        batch = self.batches.from_samples(samples, index, group_offset=0, rewards_only=rewards_only)
        if prefix_ids is not None:
            widths = torch.tensor([len(p) for p in prefix_ids])[samples.prompt_index]
            positions = torch.arange(batch.response_ids.shape[1])
            batch.extras[PREFIX_MASK] = (positions < widths.unsqueeze(-1)).float()
        return batch

    def task_values(self, batch: RolloutBatch) -> Tensor:
        """The task's V(s_k) of every state, scored by the policy (:mod:`.task_values`)."""
        values, stats = task_state_values(
            batch, task=self.task, text=self.text, scoring=self.scoring, tokenizer=self.tokenizer
        )
        self.report(stats)
        return values

    def batch_from_responses(
        self,
        problem_index: Sequence[int] | Tensor,
        responses: Sequence[str | Sequence[int] | Tensor],
    ) -> RolloutBatch:
        """Given responses as a graded, scored batch, nothing generated (IBPO's repairs); see
        :meth:`.batches.GradedBatches.from_responses`."""
        return self.batches.from_responses(problem_index, responses)

    # --- scoring and text: :class:`.model_services.ModelServices`, besides these ---------------

    def track_ema(self, rate: float) -> None:
        """Keep an exponential moving average of the policy, scored as ``model="ema"``."""
        self.scoring.track_ema(rate)

    # --- text and the task (:class:`.text.TaskText`; no model runs) ---------------------------

    def task_repair(self, batch: RolloutBatch) -> list[str]:
        return self.text.task_repair(batch)

    def delimited_step_ids(self, batch: RolloutBatch, delimiter: str) -> Tensor:
        return self.text.delimited_step_ids(batch, delimiter)

    def state_ids(self, batch: RolloutBatch) -> Tensor:
        return self.text.state_ids(batch)
