"""The shared-prefix forward computes what the full forward computes.

Each distinct prompt of a micro-batch is encoded once and its rows' responses attend to its
cache; padding columns no row uses are skipped. Log-probs and gradients must equal the full
forward's up to float rounding (1e-5), on Qwen3 (the testbed's), Llama (grouped keys and values)
and Qwen2 (biased projections), with left-padded prompts of different lengths, groups that share
a prompt and rows that share nothing.
"""

from __future__ import annotations

import pytest
import torch
from small_models import small_decoder
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from creditbench.harness.models.bootstrap import task_alphabet
from creditbench.harness.models.modeling import build_char_tokenizer, build_model
from creditbench.harness.scoring.forward import (
    response_logits,
    score_responses,
    token_logprobs_and_entropy,
)
from creditbench.harness.tasks import get_task


def _model(family: str):
    if family == "qwen3":
        tokenizer = build_char_tokenizer(task_alphabet(get_task("chain", steps=3)))
        return build_model("nano", tokenizer, seed=3)
    if family == "llama":
        return small_decoder(LlamaForCausalLM, LlamaConfig)
    return small_decoder(Qwen2ForCausalLM, Qwen2Config)


def _batch(vocab: int, seed: int = 0):
    """Three prompts (two of them left-padded) x 3 rows each, plus two rows of their own
    prompts; responses of different lengths, right-padded with 0 after their mask ends, and
    the last column padding in every row."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, vocab, (5, 9), generator=g)
    prompt_mask = torch.ones_like(prompts)
    for row, pad in enumerate([3, 0, 5, 1, 2]):
        prompts[row, :pad], prompt_mask[row, :pad] = 0, 0
    # rows 0-8: three groups of three; rows 9-10: a prompt each
    which = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 4])
    prompt_ids, prompt_mask = prompts[which], prompt_mask[which]
    lengths = torch.randint(1, 11, (len(which),), generator=g)
    response_ids = torch.randint(3, vocab, (len(which), 12), generator=g)
    response_mask = (torch.arange(12) < lengths[:, None]).long()
    response_ids = response_ids * response_mask
    return prompt_ids, prompt_mask, response_ids, response_mask


@pytest.mark.parametrize("family", ["qwen3", "llama", "qwen2"])
def test_log_probs_and_gradients_equal_the_full_forward(family):
    model = _model(family)
    vocab = model.config.vocab_size
    prompt_ids, prompt_mask, response_ids, response_mask = _batch(vocab)
    weights = torch.randn(response_ids.shape, generator=torch.Generator().manual_seed(5))
    got = {}
    for shared in (False, True):
        model.zero_grad(set_to_none=True)
        logprobs, entropy = token_logprobs_and_entropy(
            model, prompt_ids, prompt_mask, response_ids, response_mask, shared_prefix=shared
        )
        (logprobs * weights).sum().backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        got[shared] = (logprobs.detach(), entropy, grads)
    (full_lp, full_ent, full_grads), (lp, ent, grads) = got[False], got[True]
    assert torch.allclose(lp, full_lp, atol=1e-5, rtol=0)
    assert torch.allclose(ent, full_ent, atol=1e-5, rtol=0)
    assert (lp[response_mask == 0] == 0).all()
    assert len(grads) == len(full_grads)
    for ours, theirs in zip(grads, full_grads, strict=True):
        scale = float(theirs.abs().max()) + 1e-12
        assert float((ours - theirs).abs().max()) <= 1e-5 * scale
    # the comparison is not vacuous: the prompts and the weights do move the gradient
    assert max(float(g.abs().max()) for g in full_grads) > 1e-4


def test_scoring_passes_match_and_rows_of_distinct_prompts_work():
    model = _model("qwen3").eval()
    prompt_ids, prompt_mask, response_ids, response_mask = _batch(model.config.vocab_size, 1)
    full = score_responses(
        model, prompt_ids, prompt_mask, response_ids, response_mask, micro_batch_size=4
    )
    shared = score_responses(
        model,
        prompt_ids,
        prompt_mask,
        response_ids,
        response_mask,
        micro_batch_size=4,
        shared_prefix=True,
    )
    assert torch.allclose(shared, full, atol=1e-5, rtol=0)
    alone = slice(9, 11)  # two rows, two prompts: nothing shared, the full forward runs
    logits = response_logits(
        model,
        prompt_ids[alone],
        prompt_mask[alone],
        response_ids[alone],
        response_mask[alone],
        shared_prefix=True,
    )
    assert logits.shape == (2, 12, model.config.vocab_size)
    filled = int(response_mask[alone].sum(1).max())
    assert (logits[:, filled:] == 0).all()  # the columns no row uses are not computed


def test_shared_prefix_share_counts_each_prompt_once_per_micro_batch():
    from creditbench.harness.scoring.forward import shared_prefix_share

    prompt_ids = torch.tensor([[0, 5, 6], [0, 5, 6], [7, 8, 9], [7, 8, 9]])
    prompt_mask = (prompt_ids > 0).long()  # prompts of 2 and 3 tokens
    response_mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1]])  # 2, 1, 3, 3
    full = 2 + 2 + 3 + 3 + 9
    assert shared_prefix_share(prompt_ids, prompt_mask, response_mask, 4) == (2 + 3 + 9) / full
    # micro-batches of one row share nothing
    assert shared_prefix_share(prompt_ids, prompt_mask, response_mask, 1) == 1.0
