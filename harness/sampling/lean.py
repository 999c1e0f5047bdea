"""A lean KV-cached sampler for the decoder models of the testbed (Qwen3, Qwen2, Llama).

Why it exists: the testbed's policy is tiny (hidden 128, 4 layers), so a decode step of
transformers ``generate`` at batch 64 spends most of its time in per-op overhead — the cache
grown by concatenation, mask preparation and logits processors every step — not in matmuls.
This sampler computes the same model with fewer, larger ops:

- one preallocated key/value cache per call, written in place (no concatenation);
- the query, key and value projections fused into one matmul, gate and up into another
  (weights concatenated once per call, outside autograd);
- the rotary tables of every position computed once per call by the model's own rotary
  module, so every RoPE variant the model supports is honoured;
- decode attention as two small matmuls over the cache; the prompt's prefill through SDPA;
- rows that continue the same context (the n samples of a prompt, the continuations of one
  state) share one prefill, and decode attention reads that context's cache once for all of
  them (one batched matmul over a grid of contexts x rows), not once per row;
- rows that have finished dropped from the cache once a quarter of them has.

It draws exactly as ``generate(do_sample=True, top_k=0)`` does: temperature, then top-p
(transformers' ``TopPLogitsWarper`` rule), softmax, one ``torch.multinomial`` over every row
each step (finished rows included, so the random stream is consumed identically), pad after
EOS, stop when every row has finished. With the same seed it gives the same tokens as
``generate`` unless two logits differ by less than their rounding (a test pins this).
:func:`supports` says which models it runs; everything else goes to ``generate``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

MODEL_TYPES = ("qwen3", "qwen2", "llama")
# generation_config fields that would add a logits processor this sampler does not have
PLAIN_GENERATION = {
    "repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "bad_words_ids": (None,),
    "suppress_tokens": (None,),
    "begin_suppress_tokens": (None,),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "min_length": (None, 0),
    "min_new_tokens": (None, 0),
    "encoder_repetition_penalty": (None, 1.0),
    "typical_p": (None, 1.0),
    "epsilon_cutoff": (None, 0.0),
    "eta_cutoff": (None, 0.0),
    "min_p": (None,),
}


def supports(model: Any) -> str | None:
    """None when the lean sampler runs ``model``, else why not (one phrase)."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in MODEL_TYPES:
        return f"model type {getattr(config, 'model_type', None)!r} is not one of {MODEL_TYPES}"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {getattr(config, 'hidden_act', None)!r} is not silu"
    if (
        getattr(config, "use_sliding_window", False)
        or getattr(config, "layer_types", None)
        and any(kind != "full_attention" for kind in getattr(config, "layer_types", ()))
    ):
        return "sliding-window attention"
    generation = getattr(model, "generation_config", None)
    for name, plain in PLAIN_GENERATION.items():
        if getattr(generation, name, None) not in plain:
            return f"generation_config.{name} is set"
    return None


def _layer_weights(layer: Any) -> dict[str, Tensor | None]:
    """One decoder layer's weights, the projections fused (no gradient)."""
    attn, mlp = layer.self_attn, layer.mlp
    projections = (attn.q_proj, attn.k_proj, attn.v_proj)
    biases = [p.bias for p in projections]
    return {
        "ln1": layer.input_layernorm.weight,
        "ln2": layer.post_attention_layernorm.weight,
        "qkv": torch.cat([p.weight for p in projections]),
        "qkv_bias": None if biases[0] is None else torch.cat(biases),  # type: ignore[list-item]
        "qk_norm": _head_norms(attn),
        "o": attn.o_proj.weight,
        "gate_up": torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
        "down": mlp.down_proj.weight,
    }


def _head_norms(attn: Any) -> Tensor | None:
    """Qwen3's per-head query and key norm weights as one ``[heads + kv_heads, head_dim]``
    tensor (the keys follow the queries in the fused projection), or None without them."""
    if getattr(attn, "q_norm", None) is None:
        return None
    heads = attn.q_proj.weight.shape[0] // attn.q_norm.weight.shape[0]
    kv_heads = attn.k_proj.weight.shape[0] // attn.k_norm.weight.shape[0]
    weights = [attn.q_norm.weight] * heads + [attn.k_norm.weight] * kv_heads
    return torch.stack(weights)


def rotate_half_matrix(head_dim: int, like: Tensor) -> Tensor:
    """R with ``x @ R == cat(-x[half:], x[:half])``: RoPE's rotate-half as one matmul."""
    half = head_dim // 2
    matrix = torch.zeros(head_dim, head_dim, dtype=like.dtype, device=like.device)
    matrix[half:, :half] = -torch.eye(half, dtype=like.dtype, device=like.device)
    matrix[:half, half:] = torch.eye(half, dtype=like.dtype, device=like.device)
    return matrix


class _Decoder:
    """The model as plain functions over a preallocated cache for ``rows`` x ``length``."""

    def __init__(
        self,
        model: Any,
        rows: int,
        length: int,
        positions: Tensor,
        context: tuple[_Decoder, Tensor, Tensor] | None = None,
    ) -> None:
        config = model.config
        self.eps = config.rms_norm_eps
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.scale = self.head_dim**-0.5
        inner = model.model
        self.embed = inner.embed_tokens.weight
        self.layers = [_layer_weights(layer) for layer in inner.layers]
        self.norm, self.head = inner.norm.weight, model.lm_head.weight
        dtype = self.embed.dtype
        shape = (len(self.layers), rows, self.kv_heads, length, self.head_dim)
        # every position is written before it is read: no need to zero gigabytes of cache
        self.keys = torch.empty(shape, dtype=dtype, device=self.embed.device)
        self.values = torch.empty(shape, dtype=dtype, device=self.embed.device)
        # (context decoder, [rows] its row, [rows] slot among the rows of that context): the
        # rows continue shared contexts kept once in the context decoder's cache
        self.context = context
        probe = torch.zeros(1, dtype=dtype, device=self.embed.device)
        cos, sin = inner.rotary_emb(probe, positions)  # [rows, length, head_dim]
        self.cos, self.sin = cos.unsqueeze(1), sin.unsqueeze(1)
        self.rotate_half = rotate_half_matrix(self.head_dim, self.embed)

    def keep_rows(self, keep: Tensor, filled: int) -> None:
        """Drop the cache rows where ``keep`` ``[rows]`` is False (finished responses); only
        the first ``filled`` positions hold anything yet, so only they are copied."""
        index = keep.nonzero().squeeze(-1)

        def kept(cache: Tensor) -> Tensor:
            new = cache.new_empty(cache.shape[0], len(index), *cache.shape[2:])
            new[:, :, :, :filled] = cache[:, :, :, :filled].index_select(1, index)
            return new

        self.keys, self.values = kept(self.keys), kept(self.values)
        self.cos, self.sin = self.cos[keep], self.sin[keep]
        if self.context is not None:
            shared, row, slot = self.context
            self.context = (shared, row[keep], slot[keep])

    def _rms(self, x: Tensor, weight: Tensor | None) -> Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight, self.eps)

    @staticmethod
    def _wide(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """``F.linear`` for a projection wider than its input. In decode (one position per
        row) it runs as ``weight @ x.T``: on the testbed's CPU that product of the same
        numbers was 1.6x faster at 64 rows (qkv 110 -> 71 us, gate/up 212 -> 124 us)."""
        if x.shape[1] != 1:
            return F.linear(x, weight, bias)
        out = torch.mm(weight, x.view(x.shape[0], -1).t()).t().unsqueeze(1)
        return out if bias is None else out + bias

    def _layer(self, i: int, x: Tensor, start: int, mask: Tensor) -> Tensor:
        w, rows, width = self.layers[i], x.shape[0], x.shape[1]
        h, kv, d = self.heads, self.kv_heads, self.head_dim
        qkv = self._wide(self._rms(x, w["ln1"]), w["qkv"], w["qkv_bias"])  # type: ignore[arg-type]
        qk, v = qkv.split([(h + kv) * d, kv * d], -1)
        qk = qk.view(rows, width, h + kv, d)
        if w["qk_norm"] is not None:  # Qwen3: one norm over the query and key heads
            qk = F.rms_norm(qk, (d,), None, self.eps) * w["qk_norm"]
        cos, sin = self.cos[:, :, start : start + width], self.sin[:, :, start : start + width]
        qk = qk.transpose(1, 2)
        # RoPE's rotate-half as one [rows * heads * width, d] x [d, d] product
        rotated = torch.mm(qk.reshape(-1, d), self.rotate_half).view(qk.shape)
        qk = qk * cos + rotated * sin
        q, k = qk.split([h, kv], 1)
        end = start + width
        self.keys[i, :, :, start:end] = k
        self.values[i, :, :, start:end] = v.view(rows, width, kv, d).transpose(1, 2)
        keys, values = self.keys[i, :, :, :end], self.values[i, :, :, :end]
        grouped = q.reshape(rows, kv, h // kv, d) if width == 1 else q
        if width == 1 and self.context is not None:
            out = self._attend_with_context(i, grouped, keys, values, mask)
        elif width == 1:  # decode: [rows, kv, heads per kv, 1 x end] scores, two small matmuls
            scores = torch.matmul(grouped, keys.transpose(-1, -2)) * self.scale
            scores = scores.masked_fill(~mask, float("-inf"))
            out = torch.matmul(torch.softmax(scores, -1), values).reshape(rows, h, 1, d)
        else:
            repeat = h // kv
            keys = keys.repeat_interleave(repeat, 1) if repeat > 1 else keys
            values = values.repeat_interleave(repeat, 1) if repeat > 1 else values
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scale)
        x = x + F.linear(out.transpose(1, 2).reshape(rows, width, h * d), w["o"])  # type: ignore[arg-type]
        gate, up = self._wide(self._rms(x, w["ln2"]), w["gate_up"]).chunk(2, -1)  # type: ignore[arg-type]
        return x + F.linear(F.silu(gate) * up, w["down"])  # type: ignore[arg-type]

    def _attend_with_context(
        self, i: int, q: Tensor, keys: Tensor, values: Tensor, mask: Tensor
    ) -> Tensor:
        """Decode attention over a shared context and the row's own tokens, one softmax.

        ``q`` ``[rows, kv, g, d]``; ``keys``/``values`` the row's own ``[rows, kv, t, d]``;
        ``mask`` ``[rows, 1, 1, C + t]`` (context positions first). The context keys are
        read once per context, not once per row: queries are laid out on a grid ``[contexts,
        slots]`` so that one batched matmul serves every row of a context.
        """
        shared, row, slot = self.context  # type: ignore[misc]
        rows, kv, g, d = q.shape
        ctx_keys, ctx_values = shared.keys[i], shared.values[i]  # [contexts, kv, C, d]
        contexts, width = ctx_keys.shape[0], ctx_keys.shape[2]
        slots = int(slot.max()) + 1
        grid = q.new_zeros(contexts, slots, kv, g, d)
        grid[row, slot] = q
        grid = grid.permute(0, 2, 1, 3, 4).reshape(contexts, kv, slots * g, d)
        ctx_scores = torch.matmul(grid, ctx_keys.transpose(-1, -2))  # [contexts, kv, s*g, C]
        ctx_scores = ctx_scores.view(contexts, kv, slots, g, width).permute(0, 2, 1, 3, 4)
        own_scores = torch.matmul(q, keys.transpose(-1, -2))  # [rows, kv, g, t]
        scores = torch.cat([ctx_scores[row, slot], own_scores], -1) * self.scale
        probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
        ctx_probs, own_probs = probs.split([width, keys.shape[2]], -1)
        spread = probs.new_zeros(contexts, slots, kv, g, width)
        spread[row, slot] = ctx_probs
        spread = spread.permute(0, 2, 1, 3, 4).reshape(contexts, kv, slots * g, width)
        from_ctx = torch.matmul(spread, ctx_values).view(contexts, kv, slots, g, d)
        out = from_ctx.permute(0, 2, 1, 3, 4)[row, slot] + torch.matmul(own_probs, values)
        return out.reshape(rows, kv * g, 1, d)

    def logits(self, ids: Tensor, start: int, mask: Tensor) -> Tensor:
        """Float32 logits ``[rows, V]`` of the last of ``ids`` ``[rows, width]`` at ``start``."""
        x = F.embedding(ids, self.embed)
        for i in range(len(self.layers)):
            x = self._layer(i, x, start, mask)
        return F.linear(self._rms(x[:, -1], self.norm), self.head).float()


def top_p_filter(scores: Tensor, top_p: float) -> Tensor:
    """transformers' ``TopPLogitsWarper``: -inf outside the smallest set of mass > top_p."""
    ordered, order = torch.sort(scores, descending=False)
    remove = ordered.softmax(-1).cumsum(-1) <= (1 - top_p)
    remove[..., -1:] = False
    return scores.masked_fill(remove.scatter(1, order, remove), float("-inf"))


def distinct_contexts(ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``([contexts] the first row of each distinct context, [rows] each row's context)`` of
    the left-padded rows ``ids``/``mask`` ``[rows, P]`` (a context is a row's ids and mask)."""
    _, inverse = torch.unique(torch.cat([ids, mask.long()], 1), dim=0, return_inverse=True)
    rows = torch.arange(len(inverse), device=inverse.device)
    first = torch.full((int(inverse.max()) + 1,), len(inverse), device=inverse.device)
    return first.scatter_reduce(0, inverse, rows, "amin"), inverse


def _context_slots(inverse: Tensor) -> Tensor:
    """``[rows]`` each row's rank among the rows of its context, from ``inverse`` ``[rows]``."""
    rows = torch.arange(len(inverse), device=inverse.device)
    order = torch.argsort(inverse, stable=True)
    sizes = torch.bincount(inverse, minlength=int(inverse.max()) + 1)
    starts = torch.cumsum(sizes, 0) - sizes
    slot = torch.empty_like(inverse)
    slot[order] = rows - starts[inverse[order]]
    return slot


@torch.no_grad()
def generate(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor,
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    eos_token_id: int,
    pad_token_id: int,
) -> Tensor:
    """``[B, P + t]``: the left-padded prompts ``input_ids`` ``[B, P]`` followed by ``t <=
    max_new_tokens`` sampled tokens (greedy when ``temperature`` is 0), as ``generate``
    returns them. The caller seeds the global torch generator."""
    rows, width = input_ids.shape
    device = input_ids.device
    real = attention_mask.bool()
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    ahead = positions[:, -1:] + 1 + torch.arange(max_new_tokens, device=device)
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    # a pad query sees itself only: no row of the mask is empty (SDPA would give NaN)
    eye = torch.eye(width, dtype=torch.bool, device=device)
    prefill = ((causal & real[:, None, :]) | eye)[:, None]
    ahead_visible = torch.ones(rows, max_new_tokens, dtype=torch.bool, device=device)
    visible = torch.cat([real, ahead_visible], 1)
    # Rows with the same prompt (the n samples of one, the continuations of one state) share
    # one prefill, and their decode attention reads its cache once per context.
    first, inverse = distinct_contexts(input_ids, attention_mask)
    if len(first) < rows:
        slot = _context_slots(inverse)
        shared = _Decoder(model, len(first), width, positions[first])
        logits = shared.logits(input_ids[first], 0, prefill[first])[inverse]
        decoder = _Decoder(model, rows, max_new_tokens, ahead, context=(shared, inverse, slot))
        offset = 0  # the row caches hold the new tokens only
    else:
        decoder = _Decoder(model, rows, width + max_new_tokens, torch.cat([positions, ahead], 1))
        logits = decoder.logits(input_ids, 0, prefill)
        offset = width
    out = torch.full((rows, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    cached = torch.arange(rows, device=device)  # the rows the decoder still computes
    for t in range(max_new_tokens):
        if temperature > 0:
            scores = logits / temperature
            if top_p < 1.0:
                scores = top_p_filter(scores, top_p)
            # over every row, finished ones included: the random stream is used as generate
            # uses it, whatever the (dropped) rows' logits are
            tokens = torch.multinomial(torch.softmax(scores, -1), 1).squeeze(1)
        else:
            tokens = logits.argmax(-1)
        tokens = torch.where(finished, torch.full_like(tokens, pad_token_id), tokens)
        out[:, t] = tokens
        finished = finished | (tokens == eos_token_id)
        if bool(finished.all()) or t == max_new_tokens - 1:
            return torch.cat([input_ids, out[:, : t + 1]], 1)
        if 4 * int(finished[cached].sum()) >= len(cached):  # a quarter done: stop computing them
            keep = ~finished[cached]
            cached = cached[keep]
            decoder.keep_rows(keep, filled=offset + t)
            visible = visible[keep]
        mask = visible[:, None, None, : width + t + 1]
        computed = decoder.logits(tokens[cached, None], offset + t, mask)
        logits = torch.zeros(rows, computed.shape[-1], device=device).index_copy_(
            0, cached, computed
        )
    return input_ids  # max_new_tokens == 0
