"""What the harness offers a method (:class:`methods.base.Services`), all charged to the budget.

A method sees one :class:`HarnessServices` per run. Every forward pass, generation and scoring
pass it asks for is charged to the run's :class:`~creditbench.harness.budget.BudgetMeter` here,
so no method can spend compute the others do not pay for.

Rows of every batch carry ``extras["problem_index"]`` (``[B]`` long), the index of their problem
in the task's train split; the services use it to grade, to build prompt variants and to decode.

Determinism: the prompts and the sampler's seed of a call depend only on ``(seed, step, call)``
where ``call`` counts the sampling calls within the step, so a resumed run draws exactly what an
uninterrupted one draws.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from creditbench.harness.sampling.rollout import (
    Samples,
    assemble_samples,
    cut_at_eos,
    derive_seed,
    encode,
    pad_layout,
    sample_responses,
    score_responses,
)
from creditbench.harness.scoring.scorers import Scorers
from creditbench.methods.contract import STEP_TRUTH_KEYS
from creditbench.methods.core import RolloutBatch

NEEDS_RESPONSE = ("localize", "repair")  # prompt variants built around a response


def sequence_lengths(response_ids: Tensor, eos_id: int, pad_id: int) -> Tensor:
    """``[B]`` real tokens of each response: through the first EOS, else every non-pad token."""
    is_eos = response_ids == eos_id
    has_eos = is_eos.any(-1)
    first_eos = torch.where(has_eos, is_eos.float().argmax(-1) + 1, response_ids.shape[1])
    if pad_id == eos_id:
        return first_eos
    return torch.where(has_eos, first_eos, (response_ids != pad_id).sum(-1))


class HarnessServices:
    """The services of one run.

    Args:
        task: the task (``problems``, ``grade``; step-checked tasks also ``first_wrong_step``,
            ``step_spans``, ``variant``).
        policy, tokenizer: the model being trained and its tokenizer.
        meter: the run's budget meter.
        rollout: the run's :class:`~creditbench.harness.config.RolloutConfig`.
        micro_batch_size: rows per scoring forward.
        seed: the run seed.
        reference: a frozen copy of the initial policy, or None.
        teacher_loader: a zero-argument callable returning a frozen teacher model, loaded on
            first use (OPPO's teacher-oracle variant), or None.
        sampler: an alternative sampling backend with ``sample(...)`` (:class:`VLLMBackend`).
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
        reference=None,
        teacher_loader: Callable[[], Any] | None = None,
        sampler=None,
    ) -> None:
        self.task = task
        self.policy = policy
        self.tokenizer = tokenizer
        self.meter = meter
        self.rollout_config = rollout
        self.micro_batch_size = micro_batch_size
        self.seed = seed
        self.reference = reference
        self.scorers = Scorers(policy, meter, reference, teacher_loader)
        self.sampler = sampler
        self.train_problems = list(task.problems("train"))
        self.step_checked = hasattr(task, "first_wrong_step")
        self.step = 0
        self.stats: dict[str, float] = {}  # what methods report this step (see report)
        self._calls_step = -1
        self._calls = 0
        self.seconds = {"generation": 0.0, "scoring": 0.0}
        self._order_cache: tuple[int, list[int]] = (-1, [])

    # --- the step -----------------------------------------------------------------------------

    def begin_step(self, step: int) -> None:
        """Called by the trainer before a step's rollout: the step number, a fresh stats dict."""
        self.step = step
        self.stats = {}

    def generator(self, stream: int) -> torch.Generator:
        """A CPU generator seeded ``seed * stream + step`` (see ``Services.generator``)."""
        return torch.Generator().manual_seed(self.seed * stream + self.step)

    def report(self, stats) -> None:
        """Statistics for this step's metrics record (see ``Services.report``)."""
        self.stats.update({key: float(value) for key, value in stats.items()})

    # --- prompts ----------------------------------------------------------------------------

    def _next_call(self) -> int:
        if self._calls_step != self.step:
            self._calls_step, self._calls = self.step, 0
        self._calls += 1
        return self._calls - 1

    def prompt_indices(self, step: int, call: int = 0) -> list[int]:
        """The train-split indices a sampling call draws, a function of ``(seed, step, call)``.

        The first call of a step takes the next ``prompts_per_step`` problems of a seeded
        shuffle of the split (reshuffled every pass); further calls in the same step (dynamic
        sampling) draw ``prompts_per_step`` distinct problems at random.
        """
        n_train, per_step = len(self.train_problems), self.rollout_config.prompts_per_step
        if call > 0:
            gen = torch.Generator().manual_seed(derive_seed(self.seed, "extra-prompts", step, call))
            return torch.randperm(n_train, generator=gen)[: min(per_step, n_train)].tolist()
        out = []
        for position in range(step * per_step, (step + 1) * per_step):
            epoch, offset = divmod(position, n_train)
            out.append(self._order(epoch)[offset])
        return out

    def _order(self, epoch: int) -> list[int]:
        """The seeded shuffle of the train split for one pass over it."""
        if self._order_cache[0] != epoch:
            gen = torch.Generator().manual_seed(derive_seed(self.seed, "order", epoch))
            self._order_cache = (
                epoch,
                torch.randperm(len(self.train_problems), generator=gen).tolist(),
            )
        return self._order_cache[1]

    def problems(self, batch: RolloutBatch) -> list:
        """The :class:`Problem` of every row."""
        return [self.train_problems[i] for i in batch.extras["problem_index"].tolist()]

    def step_prompts(self) -> tuple[list[str], Tensor]:
        """This step's prompts and their train-split indices ``[P]``, drawn as
        :meth:`sample_batch` draws them but not sampled: for a method that runs its own
        rollout with :meth:`generate` (RRPO/SRPO's fresh attempts and resets)."""
        indices = self.prompt_indices(self.step, self._next_call())
        prompts = [self.train_problems[i].prompt for i in indices]
        return prompts, torch.tensor(indices, dtype=torch.long)

    def delimited_step_ids(self, batch: RolloutBatch, delimiter: str) -> Tensor:
        """``[B, T]`` step index of every response token, a step being the text up to and
        including each ``delimiter`` (a blank line, ``</thought>``), the rest the last step;
        ``-1`` on the end-of-sequence token and padding. Steps for tasks without a checker."""
        from creditbench.harness.tasks.steps import token_char_offsets, token_step_ids

        lengths = sequence_lengths(
            batch.response_ids, self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        )
        out = torch.full(batch.response_ids.shape, -1, dtype=torch.long)
        for row, length in enumerate(lengths.tolist()):
            tokens = batch.response_ids[row, :length].tolist()
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            spans, start = [], 0
            while start < len(text):
                found = text.find(delimiter, start)
                end = len(text) if found < 0 else found + len(delimiter)
                spans.append((start, end))
                start = end
            ids = token_step_ids(token_char_offsets(self.tokenizer, tokens), spans)
            if ids:
                out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        return out

    def decode(self, batch: RolloutBatch) -> list[str]:
        """The text of every response (prefix included, EOS excluded)."""
        lengths = sequence_lengths(
            batch.response_ids, self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        )
        out = []
        for row, length in zip(batch.response_ids.tolist(), lengths.tolist(), strict=True):
            tokens = [t for t in row[:length] if t != self.tokenizer.eos_token_id]
            out.append(self.tokenizer.decode(tokens, skip_special_tokens=True))
        return out

    def variant(
        self, batch: RolloutBatch, kind: str, hints: Sequence[str] | None = None
    ) -> list[str]:
        """The task's ``kind`` prompt variant for every row (:data:`PROMPT_VARIANTS`).

        ``localize`` and ``repair`` are built around the row's response; ``solver`` needs
        ``hints``, one per row.
        """
        if not hasattr(self.task, "variant"):
            raise ValueError(f"task {self.task.name!r} has no prompt variants (asked for {kind!r})")
        texts = self.decode(batch) if kind in NEEDS_RESPONSE else None
        out = []
        for row, problem in enumerate(self.problems(batch)):
            options: dict[str, Any] = {}
            if texts is not None:
                options["response"] = texts[row]
            if hints is not None:
                options["hint"] = hints[row]
            out.append(self.task.variant(problem, kind, **options))
        return out

    # --- sampling ---------------------------------------------------------------------------

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
            samples = sample_responses(self.policy, self.tokenizer, prompts, **options)
        contexts = samples.prompt_mask.sum(-1).long() + samples.response_mask.sum(-1).long()
        self.meter.charge_generation(contexts - samples.new_tokens, samples.new_tokens)
        self.seconds["generation"] += time.perf_counter() - started
        return samples

    def sample_batch(self) -> RolloutBatch:
        """The default rollout: the next ``prompts_per_step`` problems, ``group_size`` each."""
        call = self._next_call()
        indices = self.prompt_indices(self.step, call)
        prompts = [self.train_problems[i].prompt for i in indices]
        seed = derive_seed(self.seed, "rollout", self.step, call)
        samples = self._sample(prompts, self.rollout_config.group_size, seed=seed)
        problem_index = torch.tensor(indices, dtype=torch.long)[samples.prompt_index]
        return self._to_batch(samples, problem_index, group_offset=call * len(indices))

    def generate(
        self,
        prompts: Sequence[str],
        n: int = 1,
        prefixes: Sequence[str | Sequence[int] | Tensor] | None = None,
        *,
        problem_index: Sequence[int] | Tensor | None = None,
        temperature: float | None = None,
        max_new_tokens: int | None = None,
    ) -> RolloutBatch:
        """``n`` fresh responses to each prompt, optionally continuing a given prefix.

        Args:
            prompts: prompt texts (a problem's prompt, or any variant of it).
            prefixes: per prompt, text or token ids every response starts with (a reset state
                inside an earlier response); the prefix is part of the response, marked by
                ``extras["prefix_mask"]`` so a method can keep it out of the loss.
            problem_index: per prompt, the train-split problem it belongs to; responses are
                graded against it. Without it the responses are not graded and their
                rewards are NaN (use them as text only, e.g. a thinker's hint).
            temperature: 0 for greedy; defaults to the rollout temperature.

        Returns:
            A :class:`RolloutBatch` with behaviour log-probs under the prompts given; group ids
            are the prompt's position in ``prompts``.
        """
        call = self._next_call()
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
        batch = self._to_batch(samples, index, group_offset=0)
        if prefix_ids is not None:
            widths = torch.tensor([len(p) for p in prefix_ids])[samples.prompt_index]
            positions = torch.arange(batch.response_ids.shape[1])
            batch.extras["prefix_mask"] = (positions < widths.unsqueeze(-1)).float()
        return batch

    def batch_from_responses(
        self,
        problem_index: Sequence[int] | Tensor,
        responses: Sequence[str | Sequence[int] | Tensor],
    ) -> RolloutBatch:
        """Given responses to train-split problems as a graded, scored batch, without sampling.

        Each response is a text (encoded, EOS appended) or the token ids of the response alone
        (cut after the first EOS). Every row gets its problem's plain prompt, is graded against
        it, and its behaviour log-probs are the policy's teacher-forced under that prompt: a
        forward pass charged to the budget (and one of the reference model, if the run has
        one). Nothing is generated. Group ids are the row positions. Used to train on a
        response the policy did not sample under the plain prompt (IBPO's repairs).
        """
        index = torch.as_tensor(problem_index, dtype=torch.long).reshape(-1)
        if len(responses) != index.numel() or index.numel() == 0:
            raise ValueError(
                f"responses: need one per problem_index, at least one "
                f"(got {len(responses)} for {index.numel()})"
            )
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        prompts = encode(self.tokenizer, [self.train_problems[i].prompt for i in index.tolist()])
        rows, truncated = [], []
        for response in responses:
            if isinstance(response, str):
                tokens = [*encode(self.tokenizer, [response])[0], eos]
            else:
                tokens = [int(t) for t in response]
            tokens, cut = cut_at_eos(tokens, eos, pad)
            rows.append(tokens)
            truncated.append(cut)
        samples = assemble_samples(  # nothing generated: no new tokens to charge
            self.tokenizer, prompts, rows, truncated, [0] * len(rows), torch.arange(len(rows))
        )
        return self._to_batch(samples, index, group_offset=0)

    def task_repair(self, batch: RolloutBatch) -> list[str]:
        """The task's scripted minimal repair of every row's response (on the chain task: the
        first wrong step fixed and every later value recomputed). Runs no model, costs nothing.
        """
        if not hasattr(self.task, "repair_solution"):
            raise ValueError(f"task {self.task.name!r} has no scripted repair (repair_solution)")
        texts = self.decode(batch)
        return [
            self.task.repair_solution(problem, text)
            for problem, text in zip(self.problems(batch), texts, strict=True)
        ]

    def _to_batch(
        self, samples: Samples, problem_index: Tensor | None, *, group_offset: int
    ) -> RolloutBatch:
        """Grade, score and annotate sampled responses."""
        extras: dict[str, Tensor] = {}
        if problem_index is not None:
            problems = [self.train_problems[i] for i in problem_index.tolist()]
            rewards = torch.tensor(
                [
                    self.task.grade(p, t).reward
                    for p, t in zip(problems, samples.texts, strict=True)
                ],
                dtype=torch.float32,
            )
            extras["problem_index"] = problem_index
        else:
            problems = None
            rewards = torch.full((len(samples.texts),), float("nan"))
        batch = RolloutBatch(
            prompt_ids=samples.prompt_ids,
            prompt_mask=samples.prompt_mask,
            response_ids=samples.response_ids,
            response_mask=samples.response_mask,
            group_ids=samples.prompt_index + group_offset,
            rewards=rewards,
            old_logprobs=torch.zeros_like(samples.response_mask),
            truncated=samples.truncated,
            extras=extras,
        )
        batch.old_logprobs = self.score(batch)
        if self.reference is not None:
            batch.ref_logprobs = self.score(batch, model="reference")
        if problems is not None and self.step_checked:
            step_ids, step_extras = self._step_ground_truth(problems, samples)
            batch.step_ids = step_ids
            extras.update(step_extras)
        return batch

    def _step_ground_truth(self, problems, samples: Samples) -> tuple[Tensor, dict[str, Tensor]]:
        """``step_ids`` ``[B, T]`` and the :data:`STEP_TRUTH_KEYS` masks from the step checker."""
        from creditbench.harness.tasks.steps import step_extras, token_char_offsets, token_step_ids

        width = samples.response_ids.shape[1]
        step_ids = torch.full((len(problems), width), -1, dtype=torch.long)
        masks = {key: torch.zeros((len(problems), width)) for key in STEP_TRUTH_KEYS}
        lengths = samples.response_mask.sum(-1).long().tolist()
        for row, (problem, text) in enumerate(zip(problems, samples.texts, strict=True)):
            tokens = samples.response_ids[row, : lengths[row]].tolist()
            offsets = token_char_offsets(self.tokenizer, tokens)
            for key, values in step_extras(self.task, problem, text, offsets).items():
                if key in masks and values:
                    masks[key][row, : len(values)] = torch.tensor(values, dtype=torch.float32)
            ids = token_step_ids(offsets, self.task.step_spans(text))
            if ids:
                step_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        return step_ids, masks

    # --- scoring ----------------------------------------------------------------------------

    def _model(self, name: str):
        return self.scorers.get(name)

    def _prompt_layout(self, batch: RolloutBatch, prompts: Sequence[str] | None):
        """``(prompt_ids, prompt_mask)`` of the batch's own prompts, or of one text per row."""
        if prompts is None:
            return batch.prompt_ids, batch.prompt_mask
        if len(prompts) != batch.size:
            raise ValueError(f"prompts: need one per row ({batch.size}), got {len(prompts)}")
        tokens = encode(self.tokenizer, prompts)
        prompt_ids, prompt_mask, _, _ = pad_layout(
            tokens, [[] for _ in tokens], self.tokenizer.pad_token_id
        )
        return prompt_ids, prompt_mask

    def _charge_scoring(self, model: str, batch: RolloutBatch, prompt_mask: Tensor) -> None:
        lengths = prompt_mask.sum(-1).long() + sequence_lengths(
            batch.response_ids, self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        )
        self.scorers.charge_forward(model, lengths)

    def score(
        self, batch: RolloutBatch, prompts: Sequence[str] | None = None, model: str = "policy"
    ) -> Tensor:
        """Log-probs ``[B, T]`` of the batch's responses, teacher-forced, without gradient.

        Args:
            prompts: one prompt text per row to score the responses under instead of the
                batch's own prompts (an oracle hint, a semifactual rewrite).
            model: ``policy``, ``reference`` (frozen initial policy), ``teacher`` or ``ema``
                (see :class:`~creditbench.harness.scoring.scorers.Scorers`).

        Zero where ``batch.response_mask`` is 0. Charged as a forward pass of that model.
        """
        scorer = self._model(model)
        prompt_ids, prompt_mask = self._prompt_layout(batch, prompts)
        started = time.perf_counter()
        logprobs = score_responses(
            scorer,
            prompt_ids,
            prompt_mask,
            batch.response_ids,
            batch.response_mask,
            micro_batch_size=self.micro_batch_size,
            temperature=self.rollout_config.temperature,
        )
        self._charge_scoring(model, batch, prompt_mask)
        self.seconds["scoring"] += time.perf_counter() - started
        return logprobs

    def track_ema(self, rate: float) -> None:
        """Keep an exponential moving average of the policy, scored as ``model="ema"``
        (SDPO's teacher); see :meth:`Scorers.track_ema`."""
        self.scorers.track_ema(rate)

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
        """Next-token log-probs ``[B, T, K]`` at chosen vocabulary entries, teacher-forced.

        Args:
            prompts, model: as in :meth:`score`.
            top_k: without ``indices``, the model's own ``top_k`` most likely tokens at each
                position (every vocabulary entry when None).
            indices: ``[B, T, K]`` the entries to read (a student's top-K, for a teacher).
            grad: keep the graph (``model="policy"`` only), for a loss that distils whole
                distributions (SDPO's top-K variant); the pass is charged as a forward, the
                trainer's own charge covering the backward.

        Returns:
            ``(logprobs, indices)``, both ``[B, T, K]``, zero where ``batch.response_mask`` is 0.
            The log-probs are those of the tempered distribution, as :meth:`score`'s.
        """
        from creditbench.harness.sampling.rollout import _response_logits

        if grad and model != "policy":
            raise ValueError(f"grad: only the policy is trained (got model={model!r})")
        scorer = self._model(model)
        prompt_ids, prompt_mask = self._prompt_layout(batch, prompts)
        temperature = self.rollout_config.temperature
        started = time.perf_counter()
        out_lp, out_ix = [], []
        for start in range(0, batch.size, self.micro_batch_size):
            rows = slice(start, start + self.micro_batch_size)
            with torch.set_grad_enabled(grad):
                logits = _response_logits(
                    scorer, prompt_ids[rows], prompt_mask[rows], batch.response_ids[rows]
                )
                logp = torch.log_softmax(logits / temperature if temperature > 0 else logits, -1)
                if indices is not None:
                    index = indices[rows].to(logp.device)
                elif top_k is not None and top_k < logp.shape[-1]:
                    index = logp.detach().topk(top_k, dim=-1).indices
                else:
                    index = torch.arange(logp.shape[-1], device=logp.device).expand_as(logp)
                mask = batch.response_mask[rows].to(logp.device).unsqueeze(-1)
                out_lp.append((logp.gather(-1, index) * mask).cpu())
                out_ix.append((index * mask.long()).cpu())
        self._charge_scoring(model, batch, prompt_mask)
        self.seconds["scoring"] += time.perf_counter() - started
        return torch.cat(out_lp), torch.cat(out_ix)

    def on_policy_updated(self) -> None:
        """Called by the trainer after each optimizer step (pushes weights to a vLLM sampler)."""
        if self.sampler is not None:
            self.sampler.load_weights(self.policy)
        self.scorers.after_update()
