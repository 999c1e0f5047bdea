"""Small randomly initialised decoder models of the families the fast paths support."""

from __future__ import annotations

import torch


def small_decoder(cls, config_cls, **extra):
    """A 2-layer model of ``cls`` (e.g. ``LlamaForCausalLM``) with grouped keys and values
    (4 query heads, 2 key/value heads), vocabulary 40, seeded, in eval mode."""
    torch.manual_seed(0)
    config = config_cls(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        **extra,
    )
    return cls(config).eval()
