"""The lean sampler draws what transformers ``generate`` draws.

With the same seed, the same model and the same sampling settings, the lean sampler and
``generate`` must return the same tokens: the lean path is a faster computation of the same
distribution with the same use of the random stream, not another sampler.
"""

from __future__ import annotations

import pytest
import torch
from small_models import small_decoder
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from creditbench.harness.models.bootstrap import task_alphabet
from creditbench.harness.models.modeling import build_char_tokenizer, build_model
from creditbench.harness.sampling import lean
from creditbench.harness.sampling.rollout import sample_responses, seeded, use_lean
from creditbench.harness.tasks import get_task


@pytest.fixture(scope="module")
def testbed():
    task = get_task("chain", steps=3)
    tokenizer = build_char_tokenizer(task_alphabet(task))
    model = build_model("nano", tokenizer, seed=3).eval()
    prompts = [p.prompt for p in list(task.problems("train"))[:3]]
    return model, tokenizer, prompts


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (1.0, 0.8), (0.6, 1.0), (0.0, 1.0)])
def test_lean_draws_the_tokens_generate_draws(testbed, temperature, top_p):
    model, tokenizer, prompts = testbed
    drawn = {
        engine: sample_responses(
            model,
            tokenizer,
            prompts,
            n=4,
            max_new_tokens=40,
            temperature=temperature,
            top_p=top_p,
            seed=11,
            engine=engine,
        )
        for engine in ("hf", "lean")
    }
    assert torch.equal(drawn["lean"].response_ids, drawn["hf"].response_ids)
    assert drawn["lean"].texts == drawn["hf"].texts
    assert torch.equal(drawn["lean"].truncated, drawn["hf"].truncated)


def test_lean_continues_prefixes_like_generate(testbed):
    """Rows with their own prefixes: no two rows share a prefill."""
    model, tokenizer, prompts = testbed
    prefixes = [[5, 6], [7], [5, 6, 7, 8]]
    drawn = [
        sample_responses(
            model,
            tokenizer,
            prompts,
            n=2,
            max_new_tokens=30,
            temperature=1.0,
            seed=4,
            prefixes=prefixes,
            engine=engine,
        )
        for engine in ("hf", "lean")
    ]
    assert torch.equal(drawn[0].response_ids, drawn[1].response_ids)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_grouped_query_attention_and_projection_biases(family):
    """Llama (grouped keys and values) and Qwen2 (biased projections) also match."""
    model = (
        small_decoder(LlamaForCausalLM, LlamaConfig)
        if family == "llama"
        else small_decoder(Qwen2ForCausalLM, Qwen2Config)
    )
    assert lean.supports(model) is None
    ids = torch.randint(3, 40, (5, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    ids[0, :3], mask[0, :3] = 0, 0  # left padding
    ids[1, :1], mask[1, :1] = 0, 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with seeded(2):
        expected = model.generate(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            max_new_tokens=25,
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            pad_token_id=0,
            eos_token_id=1,
            num_beams=1,
        )
    with seeded(2):
        got = lean.generate(
            model,
            ids,
            mask,
            max_new_tokens=25,
            temperature=1.0,
            top_p=1.0,
            eos_token_id=1,
            pad_token_id=0,
        )
    assert torch.equal(got, expected)


def test_models_it_cannot_run_go_to_generate_or_are_refused(testbed):
    model, _, _ = testbed
    model.generation_config.repetition_penalty = 1.3
    try:
        assert "repetition_penalty" in lean.supports(model)
        assert not use_lean(model, "auto")
        with pytest.raises(ValueError, match="engine: the lean sampler cannot run"):
            use_lean(model, "lean")
    finally:
        model.generation_config.repetition_penalty = 1.0
    assert use_lean(model, "auto") and not use_lean(model, "hf")
    with pytest.raises(ValueError, match="engine: must be one of"):
        use_lean(model, "fast")


def test_top_p_filter_is_transformers_rule():
    from transformers.generation.logits_process import TopPLogitsWarper

    scores = torch.randn(6, 30, generator=torch.Generator().manual_seed(5))
    for top_p in (0.3, 0.9, 0.99):
        expected = TopPLogitsWarper(top_p)(None, scores.clone())
        assert torch.equal(lean.top_p_filter(scores, top_p), expected)


def test_the_shipped_policy_draws_the_same_as_rows_finish_at_different_times(tmp_path):
    """The shipped base policy ends its responses at varied lengths, so the sampler drops
    finished rows from its cache along the way; the draws stay generate's."""
    from creditbench.harness.models.bootstrap import ensure_base_policy
    from creditbench.harness.models.modeling import load_policy

    task = get_task("chain")
    path = ensure_base_policy("chain", {}, None, tmp_path, progress=False)
    model, tokenizer = load_policy(path)
    model.eval()
    prompts = [p.prompt for p in list(task.problems("train"))[:4]]
    drawn = [
        sample_responses(
            model,
            tokenizer,
            prompts,
            n=4,
            max_new_tokens=160,
            temperature=1.0,
            seed=8,
            engine=engine,
        )
        for engine in ("hf", "lean")
    ]
    lengths = drawn[1].response_mask.sum(-1)
    assert len(set(lengths.tolist())) > 4 and not drawn[1].truncated.all()  # finished unevenly
    assert torch.equal(drawn[0].response_ids, drawn[1].response_ids)


def test_backend_lean_on_a_model_it_cannot_run_is_a_config_error(tmp_path):
    import json

    from creditbench.harness.config import ConfigError, load_config
    from creditbench.harness.models.modeling import save_policy
    from creditbench.harness.training.trainer import Trainer

    task = get_task("chain", steps=2)
    tokenizer = build_char_tokenizer(task_alphabet(task))
    path = save_policy(build_model("nano", tokenizer, seed=0), tokenizer, tmp_path / "nano")
    generation = json.loads((path / "generation_config.json").read_text())
    generation["repetition_penalty"] = 1.3
    (path / "generation_config.json").write_text(json.dumps(generation))
    overrides = [f"model.path={path}", "task_options.steps=2", "rollout.backend=lean"]
    trainer = Trainer(load_config(None, ["method=grpo", f"output_dir={tmp_path}", *overrides]))
    with pytest.raises(ConfigError, match=r"^rollout\.backend: the lean sampler cannot run"):
        trainer.build()
