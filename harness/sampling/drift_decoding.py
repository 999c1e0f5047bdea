"""Drift-filtered decoding: a method's training-free sampler over prompt variants (SCAPO's,
arXiv 2609.40360, §2 and App. C, is the one registered today).

At every decoding step, with the response prefix y_<t generated so far, the model's next-token
distribution under the original prompt, p0, is compared with its distributions pk under the K
semifactual rewrites of the prompt (same prefix). Each candidate token v gets the drift

    d(v) = (1/K) Σ_k 2 |p0(v) - pk(v)| / (p0(v) + pk(v)) = (1/K) Σ_k 2 tanh(|log p0 - log pk| / 2)

The non-EOS tokens are sorted by decreasing drift and masked in that order for as long as the
masked mass Σ_{w∈M} p0(w) stays at or below the threshold (0.8 in the paper, its only
hyper-parameter); EOS is never masked. The token is drawn from

    p_filter(v) = p0(v) 1[v ∉ M] / (1 - Σ_{w∈M} p0(w))

which is the paper's "sample from p0, resample from the unmasked rest if the draw was masked".
Greedy decoding takes the argmax of p_filter. The K rewritten prompts run beside the original
with their own KV cache, so a step costs K + 1 single-token forwards.

Choices the paper leaves open: d = 0 where p0 = pk = 0; ties keep vocabulary order (a stable
sort); the drift is measured at the sampling temperature (1.0 in the paper); top-p is not used.

The masking rule is the method's (``CreditMethod.decoding_mask``, SCAPO's ``drift_mask``) and
so are the variants (``decoding_variants``); this module runs them inside ``generate``.
``creditbench eval --decode-with scapo [--drift-threshold 0.8]`` evaluates a policy with it.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Protocol

import torch
from torch import Tensor
from transformers import LogitsProcessor, LogitsProcessorList

from creditbench.harness.sampling.rollout import (
    Samples,
    assemble_samples,
    autocast_for,
    cut_at_eos,
    derive_seed,
    encode_prompts,
    pad_layout,
    seeded,
)
from creditbench.harness.tasks.base import VARIANTS, require


class DecodingRule(Protocol):
    """What the sampler needs of a method: ``decoding_variants`` and ``decoding_mask``."""

    decoding_variants: tuple[str, ...]

    def decoding_mask(
        self, logp0: Tensor, logpk: Tensor, eos_id: int, threshold: float
    ) -> Tensor: ...


def check_threshold(threshold: float) -> float:
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"drift_threshold: must be in [0, 1) (got {threshold!r})")
    return float(threshold)


def filtered_logprobs(logp0: Tensor, mask: Tensor) -> Tensor:
    """log p_filter ``[R, V]``: p0 renormalised over the unmasked tokens, -inf on the masked."""
    return torch.log_softmax(logp0.masked_fill(mask, -torch.inf), dim=-1)


class DriftFilter(LogitsProcessor):
    """A ``LogitsProcessor`` that replaces the next-token scores with log p_filter.

    Args:
        model: the policy (its rewritten-prompt passes share no cache with ``generate``).
        rewrite_ids: ``[K * R, P']`` the left-padded rewritten prompts, rewrite k of
            generation row r at row ``k * R + r``.
        rewrite_mask: ``[K * R, P']`` 1 on their real tokens.
        prompt_width: the width P of the ``input_ids`` ``generate`` was given.
        rule: the method whose ``decoding_mask`` picks the masked tokens.
        temperature: p0 and pk are softmax(logits / temperature); give ``generate``
            temperature 1 so that nothing rescales the returned log-probs.
    """

    def __init__(
        self,
        model,
        rewrite_ids: Tensor,
        rewrite_mask: Tensor,
        *,
        prompt_width: int,
        eos_id: int,
        rule: DecodingRule,
        threshold: float = 0.8,
        temperature: float = 1.0,
    ) -> None:
        self.model, self.rule = model, rule
        self.rewrite_ids, self.rewrite_mask = rewrite_ids, rewrite_mask
        self.prompt_width, self.eos_id = prompt_width, eos_id
        self.threshold, self.temperature = check_threshold(threshold), temperature
        self.cache: Any = None
        # transformers 5 renamed the KV-cache argument and output ``past_key_values`` to ``cache``
        parameters = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in parameters else "past_key_values"
        self.fed = 0
        self.steps = 0
        self.masked_mass = 0.0
        self.filtered_steps = 0

    @torch.no_grad()
    def _rewrite_logits(self, generated: Tensor) -> Tensor:
        """Next-token logits ``[K * R, V]`` under the rewrites after ``generated`` ``[R, t]``."""
        rows = generated.shape[0]
        k = self.rewrite_ids.shape[0] // rows
        device = generated.device
        new = generated[:, self.fed :].repeat(k, 1)
        ones = torch.ones(new.shape, device=device)
        width = self.rewrite_ids.shape[1]
        if self.cache is None:  # the rewritten prompts, then whatever was generated already
            tokens = torch.cat([self.rewrite_ids.to(device), new], dim=1)
            mask = torch.cat([self.rewrite_mask.to(device), ones], dim=1)
            positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        else:
            tokens = new
            real = self.rewrite_mask.sum(-1).long().to(device).unsqueeze(-1)
            positions = real + self.fed + torch.arange(new.shape[1], device=device)
            mask = torch.ones(new.shape[0], width + self.fed + new.shape[1], device=device)
            mask[:, :width] = self.rewrite_mask.to(device)
        with autocast_for(device):
            out = self.model(
                input_ids=tokens,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                **{self.cache_arg: self.cache},
            )
        self.cache = out[self.cache_arg]
        self.fed = generated.shape[1]
        return out.logits[:, -1, :].float()

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        generated = input_ids[:, self.prompt_width :]
        rows, vocab = scores.shape
        logits_k = self._rewrite_logits(generated).view(-1, rows, vocab)
        logp0 = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        logpk = torch.log_softmax(logits_k / self.temperature, dim=-1)
        mask = self.rule.decoding_mask(logp0, logpk, self.eos_id, self.threshold)
        live = ~(generated == self.eos_id).any(-1)  # rows still being written
        masked = (logp0.exp() * mask).sum(-1)[live]
        self.steps += int(live.sum())
        self.masked_mass += float(masked.sum())
        self.filtered_steps += int((mask[live].any(-1)).sum())
        return filtered_logprobs(logp0, mask).to(scores.dtype)


class DriftSampler:
    """``sample_responses``'s signature, decoding with a :class:`DriftFilter`.

    ``problems`` are the problems whose prompts will be passed, in order; their rewrites come
    from ``task.variant(problem, kind)`` for each of the rule's ``decoding_variants``.
    """

    def __init__(
        self, task, problems: Sequence, rule: DecodingRule, threshold: float = 0.8
    ) -> None:
        require(task, VARIANTS, "drift_filter (its prompt rewrites)")
        self.threshold = check_threshold(threshold)
        self.rule = rule
        self.rewrites = [
            [task.variant(p, kind) for p in problems] for kind in rule.decoding_variants
        ]
        self.filters: list[DriftFilter] = []

    def summary(self) -> dict[str, float]:
        """``drift_masked_mass``: mean p0 mass masked per decoding step (the rate at which a
        plain p0 draw would be rejected); ``drift_filtered_steps``: share of steps that mask."""
        steps = max(sum(f.steps for f in self.filters), 1)
        return {
            "drift_threshold": self.threshold,
            "drift_masked_mass": sum(f.masked_mass for f in self.filters) / steps,
            "drift_filtered_steps": sum(f.filtered_steps for f in self.filters) / steps,
        }

    @torch.no_grad()
    def __call__(
        self,
        model,
        tokenizer,
        prompts: Sequence[str],
        *,
        n: int,
        max_new_tokens: int,
        temperature: float,
        seed: int,
        batch_size: int | None = None,
    ) -> Samples:
        if any(len(texts) != len(prompts) for texts in self.rewrites):
            raise ValueError(f"prompts: expected {len(self.rewrites[0])}, got {len(prompts)}")
        pad_id, eos_id = tokenizer.pad_token_id, tokenizer.eos_token_id
        prompt_tokens = encode_prompts(tokenizer, prompts)
        rewrite_tokens = [encode_prompts(tokenizer, texts) for texts in self.rewrites]
        device = next(model.parameters()).device
        per_call = batch_size or max(len(prompts), 1)
        rows_prompt, rows_response, rows_truncated = [], [], []
        for start in range(0, len(prompts), per_call):
            chunk = range(start, min(start + per_call, len(prompts)))
            contexts = [prompt_tokens[i] for i in chunk for _ in range(n)]
            rewritten = [tokens[i] for tokens in rewrite_tokens for i in chunk for _ in range(n)]
            ids, mask, _, _ = pad_layout(contexts, [[] for _ in contexts], pad_id)
            r_ids, r_mask, _, _ = pad_layout(rewritten, [[] for _ in rewritten], pad_id)
            drift = DriftFilter(
                model,
                r_ids,
                r_mask,
                prompt_width=ids.shape[1],
                eos_id=eos_id,
                rule=self.rule,
                threshold=self.threshold,
                temperature=temperature if temperature > 0 else 1.0,
            )
            self.filters.append(drift)
            options: dict[str, Any] = dict(
                max_new_tokens=max_new_tokens, pad_token_id=pad_id, eos_token_id=eos_id
            )
            if temperature > 0:
                options.update(do_sample=True, temperature=1.0, top_p=1.0, top_k=0)
            else:
                options.update(do_sample=False, temperature=None, top_p=None)
            with seeded(derive_seed(seed, start)), autocast_for(device):
                out = model.generate(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    position_ids=(mask.long().cumsum(-1) - 1).clamp(min=0).to(device),
                    logits_processor=LogitsProcessorList([drift]),
                    num_beams=1,
                    **options,
                )
            for j, tokens in enumerate(out[:, ids.shape[1] :].cpu().tolist()):
                kept, truncated = cut_at_eos(tokens, eos_id, pad_id)
                rows_prompt.append(prompt_tokens[start + j // n])
                rows_response.append(kept)
                rows_truncated.append(truncated)
        new_tokens = [len(row) for row in rows_response]  # no prefixes: every token is new
        prompt_index = torch.arange(len(prompts)).repeat_interleave(n)
        return assemble_samples(
            tokenizer, rows_prompt, rows_response, rows_truncated, new_tokens, prompt_index
        )
