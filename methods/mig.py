"""MIG: process credit from the marginal information gain each reasoning step brings to the
reference answer, above a monotonic watermark; outcome credit on the whole response.

Paper: Wang, Wang, Chen, Nimalsiri, Halgamuge, "Discovering Process-Outcome Credit in
Multi-Step LLM Reasoning", arXiv 2602.01034 (2026). No code was found. Only the abstract could
be read; the equations come from third-party notes on the paper (one quoting its Eq. 1 and
§4.1), tagged [summary] on the docs page, and everything they leave open is ours.

Key equations (response z with reasoning steps s_1..s_K, then its answer; y* the reference
answer, written as the task's responses state it):

    ℓ_k = 1/|y*| Σ_t log π(y*_t | x, s_1..s_k, y*_<t)       ℓ_0: after the prompt alone (Eq. 1)
    h_0 = ℓ_0,  h_k = max(h_{k-1}, ℓ_k),  g_k = max(0, ℓ_k - h_{k-1})   the watermark
    R_MIG = Σ_k g_k = max_k ℓ_k - ℓ_0
    A = α · z_g(R_MIG) on the reasoning tokens + β · z_g(R) on every token
    L = PPO-clip(A) + γ · NLL on the responses that pass both gates (correct, R_MIG > 0)

z_g is GRPO's group z-score. The likelihoods are teacher-forced passes of the answer after
each distinct prefix (a group's empty prefix is one), charged to the budget as scoring.

Deviations:
    - Every weight is ours (α = β = 1, γ = 0.1): none was recovered. The process advantage is
      one value a response, the group z-score of R_MIG (the one transcription with equations);
      ``process_credit: step`` puts each step's own g_k, z-scored over the group's steps, on
      that step's tokens instead (a reading of the abstract's "step-wise" credit).
    - The reasoning steps are the task's steps before the last (the testbed's answer line);
      the paper parses step tags the policy writes.
    - The paper scores several paraphrases of the answer; one, the task's own answer line.
    - The SFT term is averaged over every response token of the batch (so micro-batches add
      up), with gated rows only contributing; its second gate is R_MIG > 0 (one reading).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import CreditMethod, LossConfig, Needs, check_fields
from .contract import Services, method_extra
from .core import (
    Normalizers,
    RolloutBatch,
    aggregate_loss,
    broadcast_to_tokens,
    group_normalized_scores,
)
from .registry import register_method
from .rollouts import with_step_ids
from .values import distinct_states

LIKELIHOODS = method_extra(
    "mig", "mig_likelihoods", "[B, S]", "ℓ_k after the row's first k reasoning steps; NaN past them"
)
PROCESS_MODES = ("response", "step")


def watermark_gains(likelihoods: Tensor) -> Tensor:
    """``[B, S]`` g_k = max(0, ℓ_k - h_{k-1}) for k >= 1 (0 at k = 0 and past a row's states).

    Args:
        likelihoods: ``[B, S]`` ℓ_k, NaN past the row's states.
    """
    valid = ~likelihoods.isnan()
    filled = torch.where(valid, likelihoods, -torch.inf)
    watermark = filled.cummax(-1).values  # h_k
    previous = torch.cat([watermark[:, :1], watermark[:, :-1]], dim=-1)
    gains = (filled - previous).clamp(min=0.0)
    gains[:, 0] = 0.0
    return torch.where(valid, gains, 0.0)


def reasoning_mask(step_ids: Tensor) -> Tensor:
    """``[B, T]`` 1 on the tokens of every step but a row's last (its answer), 0 elsewhere."""
    last = step_ids.max(-1, keepdim=True).values
    return ((step_ids >= 0) & (step_ids < last)).float()


def mig_advantages(
    batch: RolloutBatch,
    likelihoods: Tensor,
    *,
    alpha: float,
    beta: float,
    process_credit: str = "response",
) -> Tensor:
    """``[B, T]`` α · process credit on the reasoning tokens + β · GRPO's outcome credit.

    Args:
        batch: a batch with ``step_ids`` ``[B, T]`` (the task's steps, the answer last).
        likelihoods: ``[B, S]`` ℓ_k (:data:`LIKELIHOODS`).
    """
    step_ids = batch.step_ids
    if step_ids is None:  # one step, the answer: no reasoning tokens, no process credit
        step_ids = torch.where(batch.response_mask > 0, 0, -1)
    gains = watermark_gains(likelihoods)
    reasoning = reasoning_mask(step_ids) * batch.response_mask
    if process_credit == "response":
        scores = group_normalized_scores(gains.sum(-1), batch.group_ids)
        process = broadcast_to_tokens(scores, reasoning)
    else:  # each step's gain g_{k+1} (the state after it) on its tokens, z-scored over the group
        after = torch.cat([gains[:, 1:], torch.zeros_like(gains[:, :1])], dim=-1)
        per_token = after.gather(-1, step_ids.clamp(min=0)) * reasoning
        process = torch.zeros_like(per_token)
        for group in batch.group_ids.unique():
            rows = batch.group_ids == group
            on = reasoning[rows] > 0
            values = per_token[rows][on]
            if values.numel() > 1 and float(values.std()) > 0:
                normed = (per_token[rows] - values.mean()) / (values.std() + 1e-6)
                process[rows] = normed * reasoning[rows]
    outcome = broadcast_to_tokens(
        group_normalized_scores(batch.rewards, batch.group_ids), batch.response_mask
    )
    return alpha * process + beta * outcome


@dataclass
class MIGConfig(LossConfig):
    """MIG hyper-parameters (loss fields inherited from `LossConfig`)."""

    alpha: float = 1.0
    beta: float = 1.0
    sft_coef: float = 0.1
    process_credit: str = "response"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self,
            [
                ("alpha", self.alpha >= 0, "must be >= 0"),
                ("beta", self.beta >= 0, "must be >= 0"),
                ("sft_coef", self.sft_coef >= 0, "must be >= 0"),
                (
                    "process_credit",
                    self.process_credit in PROCESS_MODES,
                    f"must be one of {', '.join(PROCESS_MODES)}",
                ),
            ],
        )


@register_method("mig")
class MIG(CreditMethod):
    summary = "process credit from each step's gain in the answer's likelihood above a watermark"
    paper = "Discovering Process-Outcome Credit in Multi-Step LLM Reasoning (arXiv 2602.01034)"
    Config = MIGConfig
    needs = Needs(behaviour_logprobs=False)  # its rollout and advantages never read them
    config: MIGConfig

    def rollout(self, services: Services) -> RolloutBatch:
        batch = with_step_ids(services.sample_batch(), services, "auto")
        batch.extras = {**(batch.extras or {}), LIKELIHOODS: answer_likelihoods(services, batch)}
        return batch

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        likelihoods = (batch.extras or {}).get(LIKELIHOODS)
        if likelihoods is None:  # a batch from elsewhere: no likelihoods, no process credit
            width = int(batch.step_ids.max()) + 1 if batch.step_ids is not None else 1
            likelihoods = torch.zeros(batch.size, max(width, 1))
        cfg = self.config
        return mig_advantages(
            batch, likelihoods, alpha=cfg.alpha, beta=cfg.beta, process_credit=cfg.process_credit
        )

    def loss(
        self,
        logprobs: Tensor,
        batch: RolloutBatch,
        advantages: Tensor,
        normalizers: Normalizers | None = None,
        services: Services | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        loss, stats = super().loss(logprobs, batch, advantages, normalizers, services)
        likelihoods = (batch.extras or {}).get(LIKELIHOODS)
        if self.config.sft_coef <= 0 or likelihoods is None:
            return loss, stats
        gated = (batch.rewards > 0) & (watermark_gains(likelihoods).sum(-1) > 0)
        mask = batch.response_mask * gated.unsqueeze(-1)
        nll = aggregate_loss(-logprobs * mask, batch.response_mask, "token-mean", normalizers)
        stats["sft_nll"] = float(nll.detach())
        return loss + self.config.sft_coef * nll, stats


def answer_likelihoods(services: Services, batch: RolloutBatch) -> Tensor:
    """``[B, S]`` ℓ_k: the mean log-probability of the row's reference answer
    (``services.answer_texts``) after the prompt and the row's first k steps, for every k up
    to the start of its last step; NaN past them. Distinct (problem, prefix) states are scored
    once, in one teacher-forced pass of the answer rows under those prompts."""
    keys, rows, where, valid = distinct_states(batch)
    problems = services.problems(batch)
    answers = services.answer_texts(batch)
    width = max(len(prefix) for _, prefix in keys) or 1
    prefixes = torch.zeros(len(keys), width, dtype=torch.long)
    prefix_mask = torch.zeros(len(keys), width)
    for state, (_, prefix) in enumerate(keys):
        prefixes[state, : len(prefix)] = torch.tensor(prefix, dtype=torch.long)
        prefix_mask[state, : len(prefix)] = 1.0
    texts = services.decode(
        RolloutBatch(
            prompt_ids=batch.prompt_ids[rows],
            prompt_mask=batch.prompt_mask[rows],
            response_ids=prefixes,
            response_mask=prefix_mask,
            group_ids=torch.arange(len(keys)),
            rewards=torch.zeros(len(keys)),
            old_logprobs=torch.zeros(len(keys), width),
        )
    )
    answer_rows = services.batch_from_responses(
        [problem for problem, _ in keys], [answers[row] for row in rows]
    )
    prompts = [problems[row].prompt + text for row, text in zip(rows, texts, strict=True)]
    logprobs = services.score(answer_rows, prompts=prompts)
    mask = answer_rows.response_mask
    per_state = (logprobs * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    out = torch.full(valid.shape, float("nan"))
    for row, k, state in where:
        out[row, k] = per_state[state]
    services.report({"mig_states": len(keys)})
    return out
