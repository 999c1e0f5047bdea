"""Teacher-forced scoring passes a method may ask for: token log-probs of a batch's responses
under other prompts or another model (:meth:`ScoringPasses.score`), and next-token
distributions at chosen entries (:meth:`ScoringPasses.distribution`). Each pass is charged to
the budget meter as a forward of the model asked for (:class:`~.scorers.Scorers`), and its wall
time is added to ``seconds["scoring"]``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from creditbench.harness.sampling.rollout import encode_prompts, pad_layout, sequence_lengths
from creditbench.harness.scoring.forward import response_logits, score_responses
from creditbench.harness.scoring.scorers import Scorers
from creditbench.methods.core import RolloutBatch


class ScoringPasses:
    """The scoring passes of one run.

    Args:
        scorers: the models that may be scored (policy, reference, teacher, EMA).
        tokenizer: the policy's tokenizer (to encode other prompts).
        micro_batch_size: rows per forward.
        temperature: the rollout temperature; log-probs are those of the tempered policy.
        shared_prefix: encode each distinct prompt of a micro-batch once
            (:mod:`~creditbench.harness.scoring.forward`).
        seconds: the run's time accounting, whose ``"scoring"`` entry each pass adds to.
    """

    def __init__(
        self,
        scorers: Scorers,
        tokenizer: Any,
        *,
        micro_batch_size: int,
        temperature: float,
        seconds: dict[str, float],
        shared_prefix: bool = False,
    ) -> None:
        self.scorers, self.tokenizer = scorers, tokenizer
        self.micro_batch_size, self.temperature = micro_batch_size, temperature
        self.shared_prefix = shared_prefix
        self.seconds = seconds

    def _prompt_layout(self, batch: RolloutBatch, prompts: Sequence[str] | None):
        """``(prompt_ids, prompt_mask)`` of the batch's own prompts, or of one text per row."""
        if prompts is None:
            return batch.prompt_ids, batch.prompt_mask
        if len(prompts) != batch.size:
            raise ValueError(f"prompts: need one per row ({batch.size}), got {len(prompts)}")
        tokens = encode_prompts(self.tokenizer, prompts)
        prompt_ids, prompt_mask, _, _ = pad_layout(
            tokens, [[] for _ in tokens], self.tokenizer.pad_token_id
        )
        return prompt_ids, prompt_mask

    def _lengths(self, batch: RolloutBatch, prompt_mask: Tensor) -> Tensor:
        """``[B]`` the tokens of each prompt and response: what a pass over a row is charged."""
        tok = self.tokenizer
        return prompt_mask.sum(-1).long() + sequence_lengths(
            batch.response_ids, tok.eos_token_id, tok.pad_token_id
        )

    def _charge_scoring(self, model: str, batch: RolloutBatch, prompt_mask: Tensor) -> None:
        self.scorers.charge_forward(model, self._lengths(batch, prompt_mask))

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
        return self._score(batch, prompts, model)  # type: ignore[return-value]

    def score_with_statistics(
        self, batch: RolloutBatch, statistics: Sequence[str]
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The policy's log-probs ``[B, T]`` of the batch's responses and, by name, the
        ``statistics`` ``[B, T]`` of its next-token distribution at each of their positions
        (``forward.DISTRIBUTION_STATISTICS``), from one pass charged as :meth:`score`'s."""
        return self._score(batch, None, "policy", statistics=statistics)  # type: ignore[return-value]

    def _score(
        self,
        batch: RolloutBatch,
        prompts: Sequence[str] | None,
        model: str,
        *,
        statistics: Sequence[str] = (),
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        scorer = self.scorers.get(model)
        prompt_ids, prompt_mask = self._prompt_layout(batch, prompts)
        started = time.perf_counter()
        out = score_responses(
            scorer,
            prompt_ids,
            prompt_mask,
            batch.response_ids,
            batch.response_mask,
            micro_batch_size=self.micro_batch_size,
            temperature=self.temperature,
            shared_prefix=self.shared_prefix,
            statistics=statistics,
        )
        self._charge_scoring(model, batch, prompt_mask)
        self.seconds["scoring"] += time.perf_counter() - started
        return out

    def fit_auxiliary(
        self,
        batch: RolloutBatch,
        row_loss: Any,
        *,
        lr_ratio: float,
        grad_clip: float | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """One optimizer step of the auxiliary model on the batch (see
        :class:`~.auxiliary.AuxiliaryModel`): its log-probs ``[B, T]`` before the step, with
        gradient, go to ``row_loss(logprobs, rows) -> [b]``, whose mean over the batch is
        minimised. Returns the pass's log-probs (detached) and its statistics. Charged: a
        training pass (forward and backward) of a policy-size model."""
        model = self.scorers.auxiliary_for(lr_ratio=lr_ratio, grad_clip=grad_clip)
        lengths = self._lengths(batch, batch.prompt_mask)
        order = torch.arange(batch.size)
        if self.shared_prefix:  # a group's rows in one micro-batch share a prompt
            order = torch.argsort(batch.group_ids, stable=True)
        micro = [
            (
                rows,
                batch.prompt_ids[rows],
                batch.prompt_mask[rows],
                batch.response_ids[rows],
                batch.response_mask[rows],
                lengths[rows],
            )
            for rows in order.split(self.micro_batch_size)
        ]
        started = time.perf_counter()
        out = model.fit(
            micro,
            row_loss,
            batch.size,
            temperature=self.temperature,
            shared_prefix=self.shared_prefix,
            charge=self.scorers.meter.charge_training,
        )
        self.seconds["scoring"] += time.perf_counter() - started
        return out

    def track_ema(self, rate: float) -> None:
        """Keep an exponential moving average of the policy, scored as ``model="ema"``
        (SDPO's teacher); see :meth:`Scorers.track_ema`. Charged: nothing."""
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
        if grad and model != "policy":
            raise ValueError(f"grad: only the policy is trained (got model={model!r})")
        scorer = self.scorers.get(model)
        prompt_ids, prompt_mask = self._prompt_layout(batch, prompts)
        temperature = self.temperature
        started = time.perf_counter()
        out_lp, out_ix = [], []
        for start in range(0, batch.size, self.micro_batch_size):
            rows = slice(start, start + self.micro_batch_size)
            with torch.set_grad_enabled(grad):
                logits = response_logits(
                    scorer,
                    prompt_ids[rows],
                    prompt_mask[rows],
                    batch.response_ids[rows],
                    batch.response_mask[rows],
                    shared_prefix=self.shared_prefix,
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
