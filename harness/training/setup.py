"""What a run is built from: its checks before anything is written, and its models.

:func:`check_run` refuses, with a :class:`ConfigError` naming the field, whatever a user can get
wrong that the config alone cannot tell (a task the method cannot run on, a task without a
built-in base policy). :func:`build_models` loads the policy (the shipped or cached base policy
of the testbed, or a Hugging Face directory), the frozen reference when a KL term needs it, the
optimizer, the budget meter and the services a method sees.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from creditbench.harness.budget import BudgetMeter
from creditbench.harness.config import ConfigError, RunConfig
from creditbench.harness.sampling.rollout import use_lean
from creditbench.harness.scoring.auxiliary import PolicyOptimizer
from creditbench.harness.services import HarnessServices
from creditbench.harness.tasks.base import is_step_checked
from creditbench.methods.base import CreditMethod
from creditbench.methods.contract import STEP_TRUTH_KEYS


def load_task(config: RunConfig) -> Any:
    """The run's task, or ConfigError naming ``task``."""
    from creditbench.harness.tasks import get_task

    try:
        return get_task(config.task, **config.task_options)
    except (KeyError, TypeError, ValueError) as err:
        message = err.args[0] if err.args else str(err)
        raise ConfigError(f"task: {message}") from None


def _check_model_folder(path: Path, gguf_file: str | None) -> None:
    """ConfigError naming ``model.path`` unless it is a folder a model loads from: a
    transformers folder (``config.json``) or one holding ``model.gguf_file``; checked before a
    run directory is made, so a corrected path finds nothing half-written."""
    if not path.is_dir():
        state = "does not exist" if not path.exists() else "is a file"
        raise ConfigError(f"model.path: {path} {state}; give a local model folder")
    wanted = gguf_file or "config.json"
    if not (path / wanted).is_file():
        raise ConfigError(f"model.path: {path} has no {wanted}; is it a model folder?")
    if gguf_file is None:
        from creditbench.harness.models.modeling import check_model_config

        try:
            check_model_config(path / wanted)
        except ConfigError as err:
            raise ConfigError(f"model.path: {err}") from None


def check_run(config: RunConfig, method_cls: Any, task: Any) -> None:
    """ConfigError for a method that needs step ground truth the task cannot supply, and, when
    the policy is the built-in base policy, for a task or bootstrap option it cannot serve."""
    if config.model.dtype == "bfloat16":
        # measured by scripts/bf16_adamw.py: 10 AdamW steps at lr 1e-6 changed 1.9% of bf16
        # weights and 92.8% of fp32 ones; the rest of the updates round away
        raise ConfigError(
            "model.dtype: bfloat16 weights lose the optimizer's small updates (10 AdamW steps "
            "at lr 1e-6 change 1.9% of them, 92.8% in float32: scripts/bf16_adamw.py); train "
            "in float32: on a GPU every forward pass already computes in bf16 (autocast)"
        )
    supplies = set(STEP_TRUTH_KEYS) if is_step_checked(task) else set()
    missing = [key for key in method_cls.needs.step_truth if key not in supplies]
    if missing:
        raise ConfigError(
            f"method: {config.method!r} needs step ground truth ({', '.join(missing)}) "
            f"that task {config.task!r} cannot supply"
        )
    if config.model.path is not None:
        _check_model_folder(Path(config.model.path), config.model.gguf_file)
        if config.model.gguf_file is None:
            check_context(config.rollout.max_new_tokens, Path(config.model.path), "rollout")
        return
    check_context(config.rollout.max_new_tokens, None, "rollout")
    from creditbench.harness.models.bootstrap import as_bootstrap_config, task_alphabet

    try:
        task_alphabet(task)
    except ValueError:
        raise ConfigError(
            f"model.path: task {config.task!r} has no built-in base policy; "
            "give a Hugging Face model directory"
        ) from None
    try:
        as_bootstrap_config(config)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def model_context(model_dir: Path | None) -> int | None:
    """The longest sequence the model in ``model_dir`` takes (``max_position_embeddings`` of its
    ``config.json``, or GPT-2's ``n_positions``); the built-in presets' when ``model_dir`` is
    None; None when its config names none."""
    from creditbench.harness.models.modeling import MAX_POSITIONS

    if model_dir is None:
        return MAX_POSITIONS
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # the loader names what is wrong with it
    for key in ("max_position_embeddings", "n_positions"):
        value = config.get(key) if isinstance(config, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def check_context(max_new_tokens: int, model_dir: Path | None, flag: str) -> None:
    """ConfigError naming ``<flag>.max_new_tokens`` (or the flag itself) when the responses
    asked for leave the model's context no room for a prompt: a mistyped 10**9 allocated
    32 GB in the first rollout and failed there, after the run folder was made."""
    context = model_context(model_dir)
    if context is not None and max_new_tokens >= context:
        field = f"{flag}.max_new_tokens" if not flag.startswith("--") else flag
        raise ConfigError(
            f"{field}: must be below the model's context of {context:,} tokens, which also "
            f"holds the prompt (got {max_new_tokens:,})"
        )


def resolve_device(name: str) -> torch.device:
    """The torch device of ``device``: ``auto`` is a GPU where one is usable, else the CPU. A
    GPU asked for and not usable here is a :class:`ConfigError` naming the field."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(
            f"device: mps is not available here (torch {torch.__version__}, Apple GPUs only); "
            "use device=cpu, or device=auto"
        )
    if device.type == "cuda":
        if not torch.cuda.is_available():
            built = "without CUDA" if torch.version.cuda is None else "and no GPU is visible"
            raise ConfigError(
                f"device: {name} is not available here (torch {torch.__version__} {built}); "
                "use device=cpu, or device=auto to take a GPU where there is one"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(
                f"device: {name} does not exist here ({torch.cuda.device_count()} GPU(s))"
            )
    return device


def needs_reference(config: RunConfig, method: CreditMethod | None = None) -> bool:
    """A frozen reference model is loaded when asked for (``train.reference_model``), when the
    method says it scores with one (``Needs.reference_model``), or when the method's resolved
    Config, its defaults included, has a term that reads reference log-probs
    (``LossConfig.needs_reference_logprobs``: a positive KL weight). ``method`` is the run's,
    when built already; else it is built from the config (only its own file is imported)."""
    if config.train.reference_model:
        return True
    if method is None:
        from creditbench.harness.config import build_method_config
        from creditbench.methods.registry import UnknownMethodError, get_method

        try:
            method_cls = get_method(config.method)
        except UnknownMethodError:
            return False
        method = method_cls(build_method_config(method_cls, config.method_options))
    return method.needs_reference


@dataclass
class Models:
    """Everything a run trains with, built by :func:`build_models`."""

    policy: Any
    tokenizer: Any
    base_path: Path
    reference: Any
    optimizer: torch.optim.Optimizer
    meter: BudgetMeter
    services: HarnessServices
    micro_batch_size: int


def build_optimizer(policy, train, lr: float | None = None) -> torch.optim.Optimizer:
    """The optimizer ``train.optimizer`` names, over the parameters of ``policy`` (a model or
    an iterable of parameters), at ``lr`` (default ``train.lr``)."""
    params = policy.parameters() if hasattr(policy, "parameters") else policy
    lr = train.lr if lr is None else lr
    if train.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=lr, momentum=train.sgd_momentum, weight_decay=train.weight_decay
        )
    return torch.optim.AdamW(
        params, lr=lr, betas=tuple(train.adam_betas), weight_decay=train.weight_decay
    )


def policy_optimizer(train) -> PolicyOptimizer:
    """How ``train`` trains the policy, for an auxiliary model to copy."""
    return PolicyOptimizer(
        make=lambda params, lr: build_optimizer(params, train, lr),
        lr=train.lr,
        grad_clip=train.grad_clip,
    )


def base_policy_path(config: RunConfig) -> Path:
    """The policy's directory: ``model.path``, or the testbed's shipped or cached base policy."""
    if config.model.path is not None:
        return Path(config.model.path)
    from creditbench.harness.models.bootstrap import ensure_base_policy

    return ensure_base_policy(config.task, config.task_options, config)


# Rows per forward when train.micro_batch_size is 0. On a CPU the elementwise ops of a
# training pass are memory-bound: at 64 rows of ~250 tokens their tensors leave the cache, and a
# forward+backward of the tiny preset took 1.98 s against 1.49 s in four passes of 16 (2 cores;
# 8 and 32 rows: 1.55 s). A GPU takes the whole minibatch.
CPU_MICRO_BATCH = 16


def auto_micro_batch(config: RunConfig, device: torch.device) -> int:
    """Rows per training and scoring forward when ``train.micro_batch_size`` is 0."""
    rows = config.rollout.prompts_per_step * config.rollout.group_size
    return min(rows, CPU_MICRO_BATCH) if device.type == "cpu" else rows


def teacher_loader(config: RunConfig, device: torch.device):
    """A zero-argument loader of the frozen teacher (OPPO's teacher oracle), used on demand."""

    def load() -> Any:
        from creditbench.harness.models.bootstrap import ensure_teacher_policy
        from creditbench.harness.models.modeling import load_policy

        path = ensure_teacher_policy(config.task, config.task_options, config)
        model, _ = load_policy(path, device=device)
        return model.requires_grad_(False)

    return load


def build_models(
    config: RunConfig, task: Any, device: torch.device, method: CreditMethod | None = None
) -> Models:
    """Load the policy and build what trains it; the policy stays in eval mode (no dropout),
    so the training pass and the scoring pass agree. ``method`` is the run's, when built."""
    from creditbench.harness.models.modeling import load_policy

    path = base_policy_path(config)
    dtype = torch.bfloat16 if config.model.dtype == "bfloat16" else torch.float32
    policy, tokenizer = load_policy(
        path, dtype=dtype, device=device, gguf_file=config.model.gguf_file
    )
    policy.eval()
    reference = None
    if needs_reference(config, method):
        reference = copy.deepcopy(policy).requires_grad_(False)
    # what trains the policy, the rows a pass takes, the teacher (loaded on demand) and how an
    # auxiliary model trains: read from the config alone, before the meter and the sampler
    optimizer = build_optimizer(policy, config.train)
    micro = config.train.micro_batch_size or auto_micro_batch(config, device)
    teacher = teacher_loader(config, device) if is_step_checked(task) else None
    auxiliary_optimizer = policy_optimizer(config.train)
    meter = BudgetMeter.for_model(policy, unit=config.budget.unit, amount=config.budget.amount)
    sampler = None
    if config.rollout.backend != "vllm":
        try:
            use_lean(policy, config.rollout.backend)
        except ValueError as err:  # "engine: ..." is rollout.backend to the user
            raise ConfigError(f"rollout.backend: {str(err).removeprefix('engine: ')}") from None
    if config.rollout.backend == "vllm":
        from creditbench.harness.sampling.rollout import VLLMBackend

        sampler = VLLMBackend(path, tokenizer, memory=config.vllm, seed=config.seed)
    services = HarnessServices(
        task=task,
        policy=policy,
        tokenizer=tokenizer,
        meter=meter,
        rollout=config.rollout,
        micro_batch_size=micro,
        seed=config.seed,
        shared_prefix=config.train.shared_prefix_forward,
        reference=reference,
        teacher_loader=teacher,
        sampler=sampler,
        policy_optimizer=auxiliary_optimizer,
    )
    return Models(policy, tokenizer, path, reference, optimizer, meter, services, micro)
