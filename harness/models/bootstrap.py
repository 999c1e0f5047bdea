"""The base policy: a tiny model taught the testbed task by supervised fine-tuning (SFT).

The task writes supervised solutions with step errors injected at a controlled rate
(``task.sft_example``), and the model learns to imitate them, errors included. The result is
an imperfect policy whose failures are step-local: RL has something to fix, and the first wrong
step of a failed response is where credit belongs. The SFT mix also covers the prompt variants
(oracle hint, rewrites, localisation, repair, roles) so that they mean something to the model.

Checkpoints are cached by a content hash of everything that determines them (the task's
options and data, this config, the torch/transformers versions, :data:`FORMAT_VERSION`)::

    <cache>/base/<key>/      config.json  model.safetensors  tokenizer.json  ...  manifest.json

``manifest.json`` is written last and lists the sha256 of every file; an entry without it, or
whose files do not match it, is treated as absent and rebuilt (:mod:`.policy_cache`). The
package may also carry checkpoints under ``harness/assets/base/<key>/``;
``creditbench bootstrap --force --no-shipped --ship`` rebuilds them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from creditbench.harness.models import policy_cache
from creditbench.harness.models.modeling import (
    MODEL_PRESETS,
    build_char_tokenizer,
    build_model,
    save_policy,
)
from creditbench.harness.models.policy_cache import cached_build

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


# Task options that turn off the errors injected into SFT traces. The teacher learns from clean
# traces: it imitates no slips, so it is stronger than the base policy at any size. The problems
# (and the eval split) do not depend on these options.
CLEAN_TRACE_OPTIONS: dict[str, dict[str, Any]] = {
    "chain": {"slip_rate": 0.0, "weak_slip_rate": 0.0, "direct_slip_rate": 0.0},
}


def teacher_config(config: BootstrapConfig, clean_traces: bool = True) -> BootstrapConfig:
    """The SFT config of OPPO's frozen teacher.

    With clean traces (:data:`CLEAN_TRACE_OPTIONS`) it is the base policy's: the data makes the
    teacher stronger, as a bigger or longer-trained model would imitate the same slips. A task
    without such knobs gets twice the steps instead.
    """
    return dataclasses.replace(config, steps=config.steps * (1 if clean_traces else 2))


def teacher_task_options(task_name: str, task_options: dict[str, Any] | None) -> dict[str, Any]:
    """The task options the teacher is trained with: the base's, with clean traces."""
    return {**(task_options or {}), **CLEAN_TRACE_OPTIONS.get(task_name, {})}


# ---------------------------------------------------------------------------------------------
# Training.


def task_alphabet(task: Any) -> str:
    """Every character the task writes: ``task.alphabet``, or its module's ``ALPHABET``."""
    alphabet = getattr(task, "alphabet", None) or getattr(
        sys.modules[type(task).__module__], "ALPHABET", None
    )
    if not alphabet:
        raise ValueError(f"task {type(task).__name__} has no ALPHABET: it cannot be bootstrapped")
    return alphabet


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
) -> Path:
    """Train a fresh model of ``config.preset`` on ``task.sft_example`` and save it to ``out_dir``.

    The loss is the mean cross-entropy over completion tokens (and the closing EOS); prompt
    tokens are context only. The run is deterministic on CPU for a given seed and thread count:
    the examples come from ``random.Random(seed)``, the initial weights from
    ``torch.manual_seed(seed)``, and the model has no dropout. ``on_step(step, model, loss)``
    is called after each optimizer step (1-based). Saved atomically in Hugging Face format.
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
    bar = tqdm(range(1, config.steps + 1), desc=f"SFT {config.preset}", disable=not progress)
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
            if on_step is not None:
                on_step(step, model, loss)
    model.eval()
    return save_policy(model, tokenizer, out_dir)


# ---------------------------------------------------------------------------------------------
# The content-hash cache.


def make_task(task_name: str, task_options: dict[str, Any] | None = None) -> Any:
    """The task registry's ``get_task``; a seam the tests replace with a stand-in task."""
    from creditbench.harness.tasks import get_task

    return get_task(task_name, **(task_options or {}))


def non_default_options(task_name: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without those equal to the task's defaults.

    ``steps=8`` on a task whose default is 8 steps names the same task, so it must find the
    same cached (or shipped) base policy.
    """
    defaults = getattr(make_task(task_name, {}), "config", None)
    if defaults is None or not options:
        return options

    def same(a: Any, b: Any) -> bool:  # tuples and JSON lists compare equal
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)

    return {
        key: value
        for key, value in options.items()
        if not (hasattr(defaults, key) and same(getattr(defaults, key), value))
    }


def task_fingerprint(task: Any, mix: dict[str, float] | None, n: int = 64) -> str:
    """sha256 of what the task feeds the bootstrap: its alphabet, SFT examples, problems.

    Any change of the task's generator changes the fingerprint, so a stale checkpoint is never
    reused after the task code changes, while edits that change no data keep the cache.
    """
    rng = random.Random(12345)
    data: dict[str, Any] = {
        "alphabet": task_alphabet(task),
        "sft": [task.sft_example(rng, mix=mix) for _ in range(n)],
    }
    for split in ("train", "eval"):
        data[split] = [[p.prompt, p.answer] for p in list(task.problems(split))[:8]]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def key_material(
    kind: str, task_name: str, task_options: dict[str, Any], config: BootstrapConfig, task: Any
) -> dict[str, Any]:
    """Everything that determines a checkpoint; :func:`cache_key` hashes it."""
    return {
        "format": FORMAT_VERSION,
        "kind": kind,
        "task": task_name,
        "task_options": task_options,
        "task_fingerprint": task_fingerprint(task, config.mix),
        "config": asdict(config),
        "numerics": policy_cache.numerics_versions(),
    }


def _ensure(
    kind: str,
    task_name: str,
    task_options: dict[str, Any] | None,
    config: BootstrapConfig,
    cache_dir: str | Path | None,
    force: bool,
    progress: bool,
    use_shipped: bool,
) -> Path:
    options = non_default_options(task_name, dict(task_options or {}))
    task = make_task(task_name, options)
    material = key_material(kind, task_name, options, config, task)

    def build(tmp: Path) -> None:
        train_base_policy(task, config, tmp, progress=progress)

    return cached_build(kind, material, build, cache_dir, force=force, use_shipped=use_shipped)


def ensure_base_policy(
    task_name: str,
    task_options: dict[str, Any] | None = None,
    config: BootstrapConfig | dict[str, Any] | Any = None,
    cache_dir: str | Path | None = None,
    *,
    force: bool = False,
    progress: bool = True,
    use_shipped: bool = True,
) -> Path:
    """The directory of the base policy for this task and config, trained only if needed.

    ``config`` is anything :func:`as_bootstrap_config` accepts (None gives the defaults).

    Order: an intact cache entry, then a checkpoint shipped with the package for the same key
    (unless ``use_shipped`` is False), else SFT now (``force`` skips both lookups). A corrupt or
    partial entry is never used: it is retrained and replaced.
    """
    config = as_bootstrap_config(config)
    return _ensure("base", task_name, task_options, config, cache_dir, force, progress, use_shipped)


def ensure_teacher_policy(
    task_name: str,
    task_options: dict[str, Any] | None = None,
    config: BootstrapConfig | dict[str, Any] | Any = None,
    cache_dir: str | Path | None = None,
    *,
    force: bool = False,
    progress: bool = True,
    use_shipped: bool = True,
) -> Path:
    """A stronger frozen checkpoint for OPPO's teacher, cached like the base policy.

    ``task_options`` and ``config`` describe the *base* policy (``config`` is anything
    :func:`as_bootstrap_config` accepts). The teacher is trained on the same problems with
    clean traces (:data:`CLEAN_TRACE_OPTIONS`), or twice as long where the task has no such
    knobs (:func:`teacher_config`).
    """
    config = teacher_config(as_bootstrap_config(config), task_name in CLEAN_TRACE_OPTIONS)
    options = teacher_task_options(task_name, task_options)
    return _ensure("teacher", task_name, options, config, cache_dir, force, progress, use_shipped)


# ---------------------------------------------------------------------------------------------
# The benchmark the bootstrap is tuned against.


def evaluate_policy(
    task: Any,
    model: Any,
    tokenizer: Any,
    *,
    n_problems: int = 200,
    max_new_tokens: int = 256,
    seed: int = 0,
) -> dict[str, Any]:
    """Sampled (T=1) and greedy accuracy on the first ``n_problems`` of the eval split, and
    how many sampled failures have a detectable first wrong step (``task.first_wrong_step``).
    """
    from creditbench.harness.models.modeling import generate_texts

    problems = list(task.problems("eval"))[:n_problems]
    prompts = [p.prompt for p in problems]
    start = time.perf_counter()
    sampled = generate_texts(
        model, tokenizer, prompts, temperature=1.0, max_new_tokens=max_new_tokens, seed=seed
    )
    greedy = generate_texts(
        model, tokenizer, prompts, temperature=0.0, max_new_tokens=max_new_tokens, seed=seed
    )
    sampled_rewards = [task.grade(p, t).reward for p, t in zip(problems, sampled, strict=True)]
    greedy_rewards = [task.grade(p, t).reward for p, t in zip(problems, greedy, strict=True)]
    kinds: dict[str, int] = {}
    located = 0
    failures = [
        (p, t) for p, t, r in zip(problems, sampled, sampled_rewards, strict=True) if r < 1.0
    ]
    for problem, text in failures:
        verdict = task.first_wrong_step(problem, text)
        if verdict is not None:
            located += 1
            kinds[verdict.kind] = kinds.get(verdict.kind, 0) + 1
    return {
        "n_problems": len(problems),
        "sampled_accuracy": sum(sampled_rewards) / len(problems),
        "greedy_accuracy": sum(greedy_rewards) / len(problems),
        "failures": len(failures),
        "located_fraction": located / len(failures) if failures else 1.0,
        "failure_kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
        "eval_seconds": time.perf_counter() - start,
    }
