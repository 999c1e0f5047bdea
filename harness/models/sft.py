"""Supervised fine-tuning of the testbed's base policy: its config and the training loop.

The task writes supervised solutions with step errors injected at a controlled rate
(``task.sft_example``), and the model learns to imitate them, errors included. The result is
an imperfect policy whose failures are step-local: RL has something to fix, and the first wrong
step of a failed response is where credit belongs. The SFT mix also covers the prompt variants
(oracle hint, rewrites, localisation, repair, roles) so that they mean something to the model.

:mod:`.bootstrap` caches what this trains, keyed by :data:`FORMAT_VERSION` among other things.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from creditbench.harness.models.modeling import (
    MODEL_PRESETS,
    build_char_tokenizer,
    build_model,
    save_policy,
)
from creditbench.harness.tasks.base import TEACHER, require

# Bump when a change here changes what training produces; it invalidates every cached entry.
FORMAT_VERSION = 1
IGNORE_INDEX = -100


@dataclass
class BootstrapConfig:
    """How the base policy is trained. Task options are passed separately.

    Attributes:
        preset: model shape, a key of :data:`creditbench.harness.models.modeling.MODEL_PRESETS`.
        steps: optimizer steps.
        batch_size: SFT examples per step.
        lr: peak learning rate (AdamW).
        warmup: linear warm-up steps.
        schedule: decay after warm-up, ``cosine`` or ``linear``, down to ``min_lr_ratio * lr``.
        min_lr_ratio: the final learning rate as a fraction of ``lr``.
        weight_decay: AdamW weight decay.
        grad_clip: maximum global gradient norm (0 turns clipping off).
        seed: seeds the model initialisation and the stream of SFT examples.
        mix: weights of the kinds of SFT example, passed to ``task.sft_example``; None takes
            the task's default mix.
    """

    preset: str = "tiny"
    steps: int = 1500
    batch_size: int = 32
    lr: float = 2e-3
    warmup: int = 100
    schedule: str = "cosine"
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    mix: dict[str, float] | None = field(default=None)

    def __post_init__(self) -> None:
        checks = [
            ("preset", self.preset in MODEL_PRESETS, f"must be one of {', '.join(MODEL_PRESETS)}"),
            ("steps", isinstance(self.steps, int) and self.steps >= 1, "must be an integer >= 1"),
            (
                "batch_size",
                isinstance(self.batch_size, int) and self.batch_size >= 1,
                "must be >= 1",
            ),
            ("lr", self.lr > 0 and math.isfinite(self.lr), "must be > 0"),
            ("warmup", isinstance(self.warmup, int) and self.warmup >= 0, "must be >= 0"),
            ("schedule", self.schedule in ("cosine", "linear"), "must be cosine or linear"),
            ("min_lr_ratio", 0.0 <= self.min_lr_ratio <= 1.0, "must be in [0, 1]"),
            ("weight_decay", self.weight_decay >= 0, "must be >= 0"),
            ("grad_clip", self.grad_clip >= 0, "must be >= 0"),
            (
                "seed",
                isinstance(self.seed, int) and 0 <= self.seed < 2**32,
                "must be in [0, 2**32)",
            ),
            ("mix", self.mix is None or _valid_mix(self.mix), "must map names to weights >= 0"),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise ValueError(f"{name}: {rule} (got {getattr(self, name)!r})")


def _valid_mix(mix: Any) -> bool:
    return isinstance(mix, dict) and all(
        isinstance(k, str) and isinstance(v, (int, float)) and v >= 0 for k, v in mix.items()
    )


def as_bootstrap_config(source: Any = None) -> BootstrapConfig:
    """A :class:`BootstrapConfig` from None (defaults), a config, a dict of its fields, or a
    run config (its ``model.preset`` and ``bootstrap_options``).
    """
    if source is None or isinstance(source, BootstrapConfig):
        return source or BootstrapConfig()
    if isinstance(source, dict):
        options, where = dict(source), "bootstrap"
    elif hasattr(source, "bootstrap_options"):
        options = {"preset": source.model.preset, **source.bootstrap_options}
        where = "bootstrap_options"
    else:
        raise TypeError(f"cannot make a BootstrapConfig from {type(source).__name__}")
    known = {f.name for f in dataclasses.fields(BootstrapConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown field; known: {', '.join(sorted(known))}")
    try:
        return BootstrapConfig(**options)
    except ValueError as err:
        raise ValueError(f"{where}.{err}") from None


def task_alphabet(task: Any) -> str:
    """Every character the task writes (``task.alphabet``); a task that cannot teach a base
    policy (no ``TEACHER`` capability) is refused."""
    require(task, TEACHER, "the built-in base policy (its SFT data)")
    if not task.alphabet:
        raise ValueError(f"task {task.name!r} has an empty alphabet: it cannot be bootstrapped")
    return task.alphabet


@contextlib.contextmanager
def _deterministic() -> Iterator[None]:
    """Deterministic kernels for the block (no measurable cost on CPU); restored afterwards."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def _collate(pairs: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (prompt tokens ignored)."""
    width = max(len(p) + len(c) for p, c in pairs)
    ids = torch.full((len(pairs), width), pad_id, dtype=torch.long)
    labels = torch.full((len(pairs), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(pairs), width), dtype=torch.long)
    for row, (prompt, completion) in enumerate(pairs):
        n = len(prompt) + len(completion)
        ids[row, :n] = torch.tensor(prompt + completion)
        labels[row, len(prompt) : n] = torch.tensor(completion)
        mask[row, :n] = 1
    return dict(input_ids=ids, attention_mask=mask, labels=labels)


def sft_pairs(
    task: Any, tokenizer: Any, rng: random.Random, n: int, mix: dict[str, float] | None
) -> list[tuple[list[int], list[int]]]:
    """``n`` SFT examples as ``(prompt ids, completion ids + EOS)``."""
    unk = tokenizer.unk_token_id
    pairs = []
    for _ in range(n):
        prompt, completion = task.sft_example(rng, mix=mix)
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c_ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
        if unk in p_ids or unk in c_ids:
            raise ValueError(
                f"task {type(task).__name__}: an SFT example uses a character outside "
                f"its ALPHABET: {prompt + completion!r}"
            )
        pairs.append((p_ids, c_ids + [tokenizer.eos_token_id]))
    return pairs


def sft_backward(
    model: Any, pairs: list[tuple[list[int], list[int]]], pad_id: int, max_tokens: int = 8192
) -> float:
    """Accumulate the gradient of the mean completion-token cross-entropy over ``pairs``.

    Examples are sorted by length and cut into micro-batches of at most ``max_tokens`` padded
    tokens, so that the few long examples (localisation, repair: about twice the length of a
    solution) no longer pad the whole batch to their length. Returns the loss.
    """
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    chunks: list[list[int]] = [[]]
    for i in order:
        width = len(pairs[i][0]) + len(pairs[i][1])  # the longest so far, as the order is sorted
        if chunks[-1] and width * (len(chunks[-1]) + 1) > max_tokens:
            chunks.append([])
        chunks[-1].append(i)
    n_targets = sum(len(c) for _, c in pairs)
    total = 0.0
    for chunk in chunks:
        batch = _collate([pairs[i] for i in chunk], pad_id)
        labels = batch.pop("labels")
        logits = model(**batch).logits[:, :-1].float()
        loss = (
            torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]),
                labels[:, 1:].reshape(-1),
                ignore_index=IGNORE_INDEX,
                reduction="sum",
            )
            / n_targets
        )
        loss.backward()
        total += loss.item()
    return total


def _lr_factor(step: int, config: BootstrapConfig) -> float:
    if step < config.warmup:
        return (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    if config.schedule == "cosine":
        shape = 0.5 * (1 + math.cos(math.pi * progress))
    else:
        shape = 1 - progress
    return config.min_lr_ratio + (1 - config.min_lr_ratio) * shape


def train_base_policy(
    task: Any,
    config: BootstrapConfig,
    out_dir: str | Path,
    progress: bool = True,
    on_step: Callable[[int, Any, float], None] | None = None,
    progress_dir: str | Path | None = None,
    save_every: int = 100,
) -> Path:
    """Train a fresh model of ``config.preset`` on ``task.sft_example`` and save it to ``out_dir``.

    The loss is the mean cross-entropy over completion tokens (and the closing EOS); prompt
    tokens are context only. The run is deterministic on CPU for a given seed and thread count:
    the examples come from ``random.Random(seed)``, the initial weights from
    ``torch.manual_seed(seed)``, and the model has no dropout. ``on_step(step, model, loss)``
    is called after each optimizer step (1-based). Saved atomically in Hugging Face format.

    With ``progress_dir``, the state of the run (weights, optimizer, schedule, both random
    generators, the step) is written there every ``save_every`` steps, and a run that finds it
    continues from it: a killed bootstrap loses at most ``save_every`` steps, and the resumed
    run ends with the weights an uninterrupted one would have.
    """
    tokenizer = build_char_tokenizer(task_alphabet(task))
    model = build_model(config.preset, tokenizer, config.seed)
    model.train()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": config.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=config.lr,
        betas=(0.9, 0.95),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _lr_factor(s, config))
    rng = random.Random(config.seed)
    saved = Path(progress_dir) / PROGRESS_FILE if progress_dir is not None else None
    first = 1
    if saved is not None and saved.is_file():
        state = torch.load(saved, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        rng.setstate(_as_random_state(state["rng"]))
        torch.set_rng_state(state["torch_rng"])
        first = int(state["step"]) + 1
    bar = tqdm(
        range(first, config.steps + 1),
        desc=f"SFT {config.preset}",
        disable=not progress,
        initial=first - 1,
        total=config.steps,
    )
    with _deterministic():
        for step in bar:
            pairs = sft_pairs(task, tokenizer, rng, config.batch_size, config.mix)
            loss = sft_backward(model, pairs, tokenizer.pad_token_id)
            if config.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
            if saved is not None and step % save_every == 0 and step < config.steps:
                _save_progress(saved, step, model, optimizer, scheduler, rng)
            if on_step is not None:
                on_step(step, model, loss)
    model.eval()
    return save_policy(model, tokenizer, out_dir)


PROGRESS_FILE = "progress.pt"


def _save_progress(path: Path, step: int, model, optimizer, scheduler, rng) -> None:
    """The run's state after ``step``, written whole or not at all (a temp file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": list(_flatten_random_state(rng.getstate())),
        "torch_rng": torch.get_rng_state(),
    }
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def _flatten_random_state(state: tuple) -> list:
    """``random.Random.getstate()`` as ``[version, *internal, gauss_next]`` (plain ints and
    None, which a weights-only load reads)."""
    version, internal, gauss_next = state
    return [version, *internal, gauss_next]


def _as_random_state(flat: list) -> tuple:
    return (int(flat[0]), tuple(int(x) for x in flat[1:-1]), flat[-1])


# ---------------------------------------------------------------------------------------------
# The content-hash cache.
