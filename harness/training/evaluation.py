"""Evaluation on a task's eval split: greedy accuracy and mean accuracy over k samples.

Evaluation is never charged to the budget. Its sampler seed is fixed per run, so every
evaluation of a run draws with the same random numbers and the curve moves only with the model.

The evaluation at budget fraction 0 grades the base policy, before any update: every method's
run at one seed computes the same numbers there (the standard board's 28 rows at a seed agree to
the last digit). :func:`reuse_initial_evaluation` keeps that result in the cache, keyed by
everything that decides it, so a campaign computes it once per seed instead of once per run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from creditbench.harness.models.policy_cache import cache_key, default_cache_dir
from creditbench.harness.records.rundir import capture_environment
from creditbench.harness.records.summary import budget_fields
from creditbench.harness.sampling.rollout import derive_seed, sample_responses

if TYPE_CHECKING:
    from creditbench.harness.training.observers import RecordLogger
    from creditbench.harness.training.trainer import Trainer


def eval_problems(task, n_problems: int, seed: int, draw: str = "seeded") -> list:
    """``n_problems`` problems of the eval split in split order: drawn without replacement
    with ``seed`` (``draw="seeded"``) or the first ones (``"first"``); the whole split when it
    holds no more."""
    split = list(task.problems("eval"))
    if n_problems >= len(split):
        return split
    if draw == "first":
        return split[:n_problems]
    generator = torch.Generator().manual_seed(derive_seed(seed, "eval-problems"))
    picked = torch.randperm(len(split), generator=generator)[:n_problems].sort().values
    return [split[i] for i in picked.tolist()]


def evaluate(
    model,
    tokenizer,
    task,
    *,
    n_problems: int,
    k_samples: int,
    greedy: bool,
    temperature: float,
    batch_size: int,
    max_new_tokens: int,
    seed: int,
    drift_threshold: float | None = None,
    decoding_rule: Any = None,
    engine: str = "auto",
    problems: str = "seeded",
) -> dict[str, Any]:
    """Accuracy of ``model`` on ``n_problems`` problems of the eval split (:func:`eval_problems`:
    drawn with ``seed``, or the first ones).

    ``batch_size`` prompts go into each ``generate`` call (``batch_size * k_samples`` rows
    when sampling): on a CPU, per-call overhead dominates small models, so bigger is faster.

    Returns:
        ``greedy_accuracy`` (when ``greedy``), ``sampled_accuracy`` (mean over ``k_samples``
        responses per problem at ``temperature``, when ``k_samples > 0``), ``pass_at_k``,
        ``mean_length`` (tokens per sampled response) and ``n_problems``.

    ``engine`` picks the sampler (:func:`~creditbench.harness.sampling.rollout.sample_responses`).
    ``decoding_rule`` (a method with ``decoding_variants``, e.g. SCAPO; None: plain decoding)
    decodes with that method's drift filter at the masked-mass ``drift_threshold``
    (:mod:`creditbench.harness.sampling.drift_decoding`) and adds its ``drift_*`` statistics.
    """
    chosen = eval_problems(task, n_problems, seed, problems)
    prompts = [p.prompt for p in chosen]
    result: dict[str, Any] = {"n_problems": len(chosen)}
    sample: Any = functools.partial(sample_responses, engine=engine)
    if decoding_rule is not None:
        from creditbench.harness.sampling.drift_decoding import DriftSampler

        sample = DriftSampler(task, chosen, decoding_rule, drift_threshold or 0.8)
    was_training = model.training
    model.eval()
    try:
        if greedy:
            samples = sample(
                model,
                tokenizer,
                prompts,
                n=1,
                max_new_tokens=max_new_tokens,
                temperature=0.0,
                seed=0,
                batch_size=batch_size,
            )
            rewards = [task.grade(p, t).reward for p, t in zip(chosen, samples.texts, strict=True)]
            result["greedy_accuracy"] = sum(r > 0.5 for r in rewards) / max(len(rewards), 1)
        if k_samples > 0:
            samples = sample(
                model,
                tokenizer,
                prompts,
                n=k_samples,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                seed=derive_seed(seed, "eval"),
                batch_size=batch_size,
            )
            rows = [chosen[i] for i in samples.prompt_index.tolist()]
            correct = torch.tensor(
                [task.grade(p, t).reward > 0.5 for p, t in zip(rows, samples.texts, strict=True)]
            ).view(len(chosen), k_samples)
            # shares of counts in float64, so 4 of 5 reads 0.8, not float32's 0.800000011920929
            result["sampled_accuracy"] = float(correct.double().mean())
            result["pass_at_k"] = float(correct.any(-1).double().mean())
            result["mean_length"] = float(samples.response_mask.sum(-1).double().mean())
    finally:
        model.train(was_training)
    if decoding_rule is not None:
        result.update(sample.summary())
    return result


def evaluation_settings(config, engine: str) -> dict[str, Any]:
    """The keyword arguments of :func:`evaluate` for a run of ``config`` (a ``RunConfig``):
    its eval section, its token limit and seed, and the sampler ``engine``."""
    ev = config.eval
    return dict(
        n_problems=ev.n_problems,
        k_samples=ev.k_samples,
        greedy=ev.greedy,
        temperature=ev.temperature,
        batch_size=ev.batch_size,
        max_new_tokens=config.rollout.max_new_tokens,
        seed=config.seed,
        engine=engine,
        problems=ev.problems,
    )


def policy_digest(model) -> str:
    """sha256 of every parameter and buffer of ``model`` (names, dtypes, shapes and bytes)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        flat = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{flat.dtype}:{tuple(flat.shape)}".encode())
        digest.update(flat.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def initial_evaluation_material(
    model, tokenizer, task, settings: dict[str, Any], environment: dict[str, Any]
) -> dict[str, Any] | None:
    """What decides an evaluation of ``model`` with ``settings`` (the keyword arguments of
    :func:`evaluate`), or None when the code that computes it is not a clean commit (an edited
    tree computes what no commit computes: never reused)."""
    if not environment.get("git_commit") or environment.get("git_dirty") is not False:
        return None
    n, seed, draw = settings["n_problems"], settings["seed"], settings["problems"]
    problems = [repr(p) for p in eval_problems(task, n, seed, draw)]
    return {
        "policy": policy_digest(model),
        "tokenizer": hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode()).hexdigest()
        if hasattr(tokenizer, "backend_tokenizer")
        else repr(tokenizer),
        "task": getattr(task, "name", type(task).__name__),
        "problems": hashlib.sha256(json.dumps(problems).encode()).hexdigest(),
        "settings": settings,
        "commit": environment["git_commit"],
        "torch": torch.__version__,
        "cpu_capability": environment.get("cpu_capability"),
        "kernel_pins": environment.get("kernel_pins"),
        "threads": torch.get_num_threads(),
    }


def reuse_initial_evaluation(
    material: dict[str, Any] | None, compute: Callable[[], dict[str, Any]]
) -> tuple[dict[str, Any], bool]:
    """``(result, reused)``: the cached result of an identical evaluation (``material`` from
    :func:`initial_evaluation_material`), or ``compute()`` stored for the next run. An entry is
    one JSON file written whole (temporary file, then rename); one that cannot be read is
    computed again."""
    if material is None:
        return compute(), False
    path = default_cache_dir() / "evaluations" / f"{cache_key(material)}.json"
    try:
        entry = json.loads(path.read_text())
        if entry.get("material") == json.loads(json.dumps(material, default=str)):
            return entry["result"], True
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    result = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"material": material, "result": result}, default=str))
        os.replace(temporary, path)
    except OSError:
        pass  # a read-only or full cache costs the next run a recomputation, nothing else
    return result, False


def log_evaluations(
    trainer: Trainer, logger: RecordLogger, fractions: list[float], counts: Sequence[int] = ()
) -> bool:
    """Evaluate the trainer's policy once and log it as the evaluation at each budget fraction in
    ``fractions`` (``"fraction"``, kept in ``trainer.evals``) and at each count of trained
    responses in ``counts`` (``"responses"``: the leaderboard tells the two apart by it);
    whether anything was due."""
    if not fractions and not counts:
        return False
    meter, step = trainer.meter, trainer.step
    engine = trainer.config.rollout.backend if trainer.services.sampler is None else "auto"
    settings = evaluation_settings(trainer.config, engine)
    started = time.perf_counter()

    def compute() -> dict[str, Any]:
        with meter.outside_budget():
            return evaluate(trainer.policy, trainer.tokenizer, trainer.task, **settings)

    material = None
    if trainer.reuse_initial_evaluation and meter.counters()["flops"] == 0:
        # the base policy, as every method's run at this seed grades it: computed once
        material = initial_evaluation_material(
            trainer.policy, trainer.tokenizer, trainer.task, settings, capture_environment()
        )
    result, reused = reuse_initial_evaluation(material, compute)
    timing: dict[str, Any] = {"eval": time.perf_counter() - started}
    if reused:
        timing["eval_reused"] = True
    for fraction in fractions:
        entry = {"fraction": fraction, **budget_fields(meter), **result, "step": step}
        trainer.evals.append(entry)
        logger.log({"step": step, "eval": entry, "time": timing})
    for count in counts:
        entry = {"responses": count, **budget_fields(meter), **result, "step": step}
        logger.log({"step": step, "eval": entry, "time": timing})
    return True
