"""The base policy and OPPO's teacher: trained by supervised fine-tuning (:mod:`.sft`) once,
then found again.

Checkpoints are cached by a content hash of everything that determines them (the task's
options and data, this config, the torch/transformers versions, :data:`FORMAT_VERSION`)::

    <cache>/base/<key>/      config.json  model.safetensors  tokenizer.json  ...  manifest.json

``manifest.json`` is written last and lists the sha256 of every file; an entry without it, or
whose files do not match it, is treated as absent and rebuilt (:mod:`.policy_cache`). The
package may also carry checkpoints under ``harness/assets/base/<key>/``;
``creditbench bootstrap --force --no-shipped --ship`` rebuilds them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from creditbench.harness.models import policy_cache
from creditbench.harness.models.policy_cache import cached_build
from creditbench.harness.models.sft import (
    FORMAT_VERSION,
    BootstrapConfig,
    as_bootstrap_config,
    task_alphabet,
    train_base_policy,
)

__all__ = [
    "BootstrapConfig",
    "as_bootstrap_config",
    "clean_trace_options",
    "ensure_base_policy",
    "ensure_teacher_policy",
    "evaluate_policy",
    "make_task",
    "task_alphabet",
    "teacher_config",
    "train_base_policy",
]


def clean_trace_options(task_name: str) -> dict[str, Any]:
    """The task's options that turn off the errors injected into its SFT traces (the chain
    task's slip rates, ``Task.clean_trace_options``); empty where it has none."""
    return dict(make_task(task_name, {}).clean_trace_options)


def teacher_config(config: BootstrapConfig, clean_traces: bool = True) -> BootstrapConfig:
    """The SFT config of OPPO's frozen teacher.

    With clean traces (:func:`clean_trace_options`) it is the base policy's: the data makes the
    teacher stronger, as a bigger or longer-trained model would imitate the same slips. A task
    without such knobs gets twice the steps instead.
    """
    return dataclasses.replace(config, steps=config.steps * (1 if clean_traces else 2))


def teacher_task_options(task_name: str, task_options: dict[str, Any] | None) -> dict[str, Any]:
    """The task options the teacher is trained with: the base's, with clean traces."""
    return {**(task_options or {}), **clean_trace_options(task_name)}


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

    def build(tmp: Path, saved: Path) -> None:
        train_base_policy(task, config, tmp, progress=progress, progress_dir=saved)

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
    clean traces (:func:`clean_trace_options`), or twice as long where the task has no such
    knobs (:func:`teacher_config`).
    """
    config = teacher_config(as_bootstrap_config(config), bool(clean_trace_options(task_name)))
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
    how many sampled failures have a detectable first wrong step (``task.check_steps``).
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
        verdict = task.check_steps(problem, text).first_wrong
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
