"""Teacher-forced forward passes: the log-probabilities of fixed responses under a model.

Every pass that reads a model's probabilities of sampled tokens comes through here: the
behaviour log-probs of a rollout (:func:`score_responses`), the training pass with gradient
(:func:`token_logprobs_and_entropy`), the reference and teacher passes, and the next-token
distributions of :class:`~.passes.ScoringPasses`.

Layout: prompts left-padded ``[b, P]``, responses right-padded ``[b, T]``; the model sees
``cat(prompt, response)`` with position ids counted from each prompt's first real token, as
``generate`` does. The training pass and the scoring pass run the same code on the same layout,
so the first ratio of an on-policy update is 1 to the last bit.

**Shared-prefix forward** (``shared_prefix=True``, the default of ``train.shared_prefix_forward``):
the rows of a group repeat one prompt, and a full forward encodes it once per row. Here each
distinct prompt of a micro-batch is encoded once, with gradient, and its keys and values are
handed to its rows as the cache their responses attend to; the gradient of every row flows back
into the one prompt pass (Prefix Grouper's shared-prefix forward, arXiv 2506.05433, Sec. 3:
"identical forward outputs and backward gradients"). Columns no row uses (left padding common to
every prompt, right padding after every response) are not computed either. The numbers are the
full forward's up to float rounding (``tests/test_forward.py``: log-probs and gradients within
1e-5). The budget meter charges what the full forward would cost: a FLOP budget means the same
model FLOPs whichever way they are computed.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch
from torch import Tensor

from creditbench.harness.sampling.lean import distinct_contexts
from creditbench.harness.sampling.rollout import autocast_for
from creditbench.methods.contract import BEHAVIOUR_ENTROPY, BEHAVIOUR_SUM_PI_SQUARED


def _cache_keyword(model) -> str:
    """The name under which ``model.forward`` takes and returns its key/value cache
    (transformers renamed ``past_key_values`` to ``cache``)."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _full_logits(model, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor) -> Tensor:
    """Logits ``[b, T, V]`` that predict each response token, one forward over every column."""
    device = next(model.parameters()).device
    width = response_ids.shape[1]
    input_ids = torch.cat([prompt_ids, response_ids], dim=1).to(device)
    # Right padding after a response is never attended to by a real token: keep it visible.
    attention = torch.cat([prompt_mask, torch.ones_like(response_ids, dtype=prompt_mask.dtype)], 1)
    attention = attention.to(device)
    position_ids = (attention.long().cumsum(-1) - 1).clamp(min=0)
    with autocast_for(device):
        out = model(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=position_ids,
            logits_to_keep=width + 1,
            use_cache=False,
        )
    return out.logits[:, :-1, :].float()


def _shared_prefix_logits(
    model, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor
) -> Tensor:
    """:func:`_full_logits` with each distinct prompt encoded once (see the module docstring);
    ``response_ids`` already cut to the columns some row uses."""
    device = next(model.parameters()).device
    rows, width = response_ids.shape
    first, inverse = distinct_contexts(prompt_ids, prompt_mask)
    if len(first) == rows:  # nothing shared: one forward is fewer ops
        return _full_logits(model, prompt_ids, prompt_mask, response_ids)
    positions = (prompt_mask.long().cumsum(-1) - 1).clamp(min=0)
    with autocast_for(device):
        prefix = model(
            input_ids=prompt_ids[first].to(device),
            attention_mask=prompt_mask[first].to(device),
            position_ids=positions[first].to(device),
            use_cache=True,
            logits_to_keep=1,
        )
        keyword = _cache_keyword(model)
        cache = prefix[keyword] if keyword in prefix else prefix.past_key_values
        cache.batch_select_indices(inverse.to(device))  # each row reads its prompt's cache
        attention = torch.cat([prompt_mask, prompt_mask.new_ones(rows, width)], 1)
        ahead = positions[:, -1:] + 1 + torch.arange(width)
        out = model(
            input_ids=response_ids.to(device),
            attention_mask=attention.to(device),
            position_ids=ahead.to(device),
            use_cache=True,
            **{keyword: cache},
        )
    # the prompt's last logit predicts the first response token
    return torch.cat([prefix.logits[inverse.to(device), -1:], out.logits[:, :-1]], 1).float()


def response_logits(
    model,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    *,
    shared_prefix: bool = False,
) -> Tensor:
    """Logits ``[b, T, V]`` that predict each response token, in fp32.

    With ``shared_prefix``, columns after the last real response token are not computed and
    hold 0 (every reader multiplies them by ``response_mask``)."""
    if not shared_prefix:
        return _full_logits(model, prompt_ids, prompt_mask, response_ids)
    used = prompt_mask.bool().any(0)
    start = int(used.long().argmax())  # the first column some prompt uses
    filled = response_mask.bool().any(0).nonzero()
    width = int(filled[-1]) + 1 if len(filled) else 1
    logits = _shared_prefix_logits(
        model, prompt_ids[:, start:], prompt_mask[:, start:], response_ids[:, :width]
    )
    missing = response_ids.shape[1] - width
    if missing:
        logits = torch.cat([logits, logits.new_zeros(len(logits), missing, logits.shape[-1])], 1)
    return logits


def shared_prefix_share(
    prompt_ids: Tensor, prompt_mask: Tensor, response_mask: Tensor, micro_batch_size: int
) -> float:
    """The share of a full forward's real tokens the shared-prefix forward computes over
    consecutive micro-batches of ``micro_batch_size`` rows: each distinct prompt once per
    micro-batch, every response token (what ``creditbench perf`` reports as executed work)."""
    full = shared = 0
    for start in range(0, len(prompt_ids), micro_batch_size):
        rows = slice(start, start + micro_batch_size)
        first, _ = distinct_contexts(prompt_ids[rows], prompt_mask[rows])
        prompt_tokens = prompt_mask[rows].sum(-1)
        responses = int(response_mask[rows].sum())
        full += int(prompt_tokens.sum()) + responses
        shared += int(prompt_tokens[first].sum()) + responses
    return shared / max(full, 1)


def gather_logprobs(logits: Tensor, response_ids: Tensor, temperature: float) -> Tensor:
    """``[b, T]`` log-probs of ``response_ids`` under ``softmax(logits / temperature)``."""
    scaled = logits / temperature if temperature > 0 else logits
    logprobs = torch.log_softmax(scaled, dim=-1)
    return logprobs.gather(-1, response_ids.to(logits.device).unsqueeze(-1)).squeeze(-1)


def token_logprobs_and_entropy(
    model,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    *,
    temperature: float = 1.0,
    shared_prefix: bool = False,
) -> tuple[Tensor, Tensor]:
    """The training pass: log-probs ``[b, T]`` with gradient, and entropies ``[b, T]`` without.

    Both are zero where ``response_mask`` is 0. Entropy is of the tempered distribution.
    """
    logits = response_logits(
        model, prompt_ids, prompt_mask, response_ids, response_mask, shared_prefix=shared_prefix
    )
    mask = response_mask.to(logits.device)
    logprobs = gather_logprobs(logits, response_ids, temperature) * mask
    return logprobs.cpu(), tempered_entropy(logits, temperature, mask).cpu()


def tempered_entropy(logits: Tensor, temperature: float, mask: Tensor) -> Tensor:
    """``[b, T]`` the entropy of ``softmax(logits / temperature)``, without gradient, 0 where
    ``mask`` is 0 (temperature 0: of the untempered logits)."""
    with torch.no_grad():
        scaled = logits.detach() / temperature if temperature > 0 else logits.detach()
        log_p = torch.log_softmax(scaled, dim=-1)
        return -(log_p.exp() * log_p).sum(-1) * mask


def tempered_sum_pi_squared(logits: Tensor, temperature: float, mask: Tensor) -> Tensor:
    """``[b, T]`` Σ_v π(v)² of ``softmax(logits / temperature)``, without gradient, 0 where
    ``mask`` is 0 (temperature 0: of the untempered logits)."""
    with torch.no_grad():
        scaled = logits.detach() / temperature if temperature > 0 else logits.detach()
        return torch.softmax(scaled, dim=-1).square().sum(-1) * mask


# What the scoring pass can compute of each position's whole next-token distribution, by the
# extras key a method reads it from (methods.contract.BEHAVIOUR_STATISTICS).
DISTRIBUTION_STATISTICS = {
    BEHAVIOUR_ENTROPY: tempered_entropy,
    BEHAVIOUR_SUM_PI_SQUARED: tempered_sum_pi_squared,
}


@torch.no_grad()
def score_responses(
    model,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    *,
    micro_batch_size: int,
    temperature: float = 1.0,
    shared_prefix: bool = False,
    statistics: Sequence[str] = (),
) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
    """Teacher-forced log-probs ``[B, T]`` of fixed responses, batched, without gradient, and
    when ``statistics`` names any (keys of :data:`DISTRIBUTION_STATISTICS`), each of them
    ``[B, T]`` of the tempered distribution beside them, by name.

    The behaviour log-probs, the reference model's, and a method's extra passes (responses
    under other prompts, or under a frozen teacher) all come from here. Rows are scored in
    micro-batches of ``micro_batch_size`` consecutive rows, the layout the training pass uses.
    """
    parts: list[Tensor] = []
    computed: dict[str, list[Tensor]] = {name: [] for name in statistics}
    for start in range(0, response_ids.shape[0], micro_batch_size):
        rows = slice(start, start + micro_batch_size)
        logits = response_logits(
            model,
            prompt_ids[rows],
            prompt_mask[rows],
            response_ids[rows],
            response_mask[rows],
            shared_prefix=shared_prefix,
        )
        mask = response_mask[rows].to(logits.device)
        parts.append((gather_logprobs(logits, response_ids[rows], temperature) * mask).cpu())
        for name, values in computed.items():
            values.append(DISTRIBUTION_STATISTICS[name](logits, temperature, mask).cpu())
    logprobs = torch.cat(parts, dim=0) if parts else torch.zeros_like(response_mask)
    if not statistics:
        return logprobs
    empty = torch.zeros_like(response_mask)
    return logprobs, {k: torch.cat(v, dim=0) if v else empty for k, v in computed.items()}
