"""Small randomly initialised decoder models of the families the fast paths support."""

from __future__ import annotations

import torch

SIZES = {
    "vocab_size": 40,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "bos_token_id": 2,
}


def small_decoder(cls, config_cls, **fields):
    """A 2-layer model of ``cls`` (e.g. ``LlamaForCausalLM``), seeded, in eval mode: by default
    with grouped keys and values (4 query heads, 2 key/value heads) and a vocabulary of 40;
    ``fields`` override or add config fields."""
    torch.manual_seed(0)
    return cls(config_cls(**{**SIZES, **fields})).eval()
