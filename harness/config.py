"""Typed run configuration: dataclasses, loaded from YAML with ``a.b.c=value`` overrides.

A run is described by one :class:`RunConfig`. :func:`load_config` reads a YAML file, applies
command-line overrides, checks every key and type against the dataclass annotations, runs each
section's range checks, and validates the method's hyper-parameters with the method's own
``Config`` dataclass (:func:`build_method_config`). Every mistake raises :class:`ConfigError`
with one message naming the dotted field (``rollout.group_size``) or the file and line.

Example::

    cfg = load_config("run.yaml", ["rollout.group_size=4", "method_options.eps_high=0.28"])
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from creditbench.common.yaml_loading import load_yaml
from creditbench.harness.typed import ConfigError, from_dict, to_dict
from creditbench.methods.field_checks import check_fields

__all__ = [
    "BudgetConfig",
    "ConfigError",
    "EvalConfig",
    "ModelConfig",
    "DEFAULT_BUDGET",
    "ResolvedRun",
    "RolloutConfig",
    "RunConfig",
    "TrainConfig",
    "VLLMConfig",
    "apply_override",
    "build_method_config",
    "from_dict",
    "load_config",
    "resolve_method_options",
    "resolve_run",
    "to_dict",
]

# ---------------------------------------------------------------------------------------------
# Sections. Each __post_init__ raises ValueError("field: rule (got value)"); from_dict prefixes
# the section's dotted path, so the user reads "rollout.group_size: must be >= 1 (got 0)".


DTYPES = ("auto", "float32", "bfloat16")
BACKENDS = ("auto", "lean", "hf", "vllm")
BUDGET_UNITS = ("flops", "seconds", "tokens", "steps")
_DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d+)?")
_RUN_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=-]*")


@dataclass
class ModelConfig:
    """The policy: a named preset of the embedded testbed, or a Hugging Face model directory."""

    preset: str = "tiny"
    path: str | None = None
    gguf_file: str | None = None
    dtype: str = "auto"

    def __post_init__(self) -> None:
        check_fields(
            self,
            [
                ("preset", bool(self.preset), "must not be empty"),
                ("dtype", self.dtype in DTYPES, f"must be one of {', '.join(DTYPES)}"),
            ],
        )


# ours: a bound on the responses of one step that no recipe comes near (DAPO samples 8,192 a
# step, verl's default batch 8,192 at 8 a prompt) and that keeps a mistyped size from failing
# with a MemoryError deep in the first rollout
MAX_RESPONSES_PER_STEP = 1 << 20
# ours: above the longest context of any open model (Qwen2.5-1M's 1,010,000 tokens); the bound
# a response length meets before the model is known (then its own context is the bound)
MAX_NEW_TOKENS = 1 << 20
# a seed is an integer in [0, 2**32): what numpy's legacy generator accepts; every verb's --seed
# follows the run config's rule
SEED_LIMIT = 2**32


@dataclass
class RolloutConfig:
    """How each step samples: ``prompts_per_step`` prompts, ``group_size`` responses each.

    ``max_new_tokens``: at most 2**20 here, and below the policy's context (its config's
    ``max_position_embeddings``; 2,048 for the built-in presets), which also holds the prompt:
    checked against the model before the run folder is made.

    ``backend``: ``lean`` (the lean KV-cached sampler, :mod:`creditbench.harness.sampling.lean`:
    the draws of ``generate`` with fewer ops), ``hf`` (transformers ``generate``), ``vllm`` (a
    GPU engine), or ``auto``: lean where it runs the model, else hf.
    """

    prompts_per_step: int = 8
    group_size: int = 8
    max_new_tokens: int = 160
    temperature: float = 1.0
    top_p: float = 1.0
    backend: str = "auto"

    def __post_init__(self) -> None:
        check_fields(
            self,
            [
                ("prompts_per_step", self.prompts_per_step >= 1, "must be >= 1"),
                ("group_size", self.group_size >= 1, "must be >= 1"),
                (
                    "group_size",
                    self.prompts_per_step * self.group_size <= MAX_RESPONSES_PER_STEP,
                    f"times prompts_per_step must be <= {MAX_RESPONSES_PER_STEP:,} a step",
                ),
                ("max_new_tokens", self.max_new_tokens >= 1, "must be >= 1"),
                (
                    "max_new_tokens",
                    self.max_new_tokens <= MAX_NEW_TOKENS,
                    f"must be <= {MAX_NEW_TOKENS:,}, more than any model's context",
                ),
                ("temperature", self.temperature > 0, "must be > 0"),
                ("top_p", 0 < self.top_p <= 1, "must be in (0, 1]"),
                ("backend", self.backend in BACKENDS, f"must be one of {', '.join(BACKENDS)}"),
            ],
        )


OPTIMIZERS = ("adamw", "sgd")
EVAL_DRAWS = ("seeded", "first")  # EvalConfig.problems


@dataclass
class TrainConfig:
    """The optimiser and the PPO-style update.

    ``micro_batch_size`` 0 picks one: 16 rows on a CPU (measured fastest, see
    ``docs/harness.md``), the whole minibatch on a GPU. ``skip_onpolicy_scoring``: when the
    update is exactly on-policy (one epoch, one minibatch) and the method does not read the
    behaviour log-probs before it, take them from the update's own forward instead of a
    separate scoring pass (the same numbers; the pass is neither run nor charged).
    ``optimizer``: ``adamw`` (verl's and TRL's) or ``sgd`` (plain SGD, momentum
    ``sgd_momentum``): with ``grad_clip`` below every batch's gradient norm, every SGD step moves
    the parameters by exactly ``lr * grad_clip`` along the gradient, so only its direction
    differs between methods (the validation's probe of what Adam's per-coordinate scaling does
    to better credit, ``docs/testbed.md``).
    ``shared_prefix_forward``: every teacher-forced pass encodes each distinct prompt of a
    micro-batch once and skips padding columns no row uses (the same numbers up to rounding,
    charged as the full forward; see :mod:`creditbench.harness.scoring.forward`).
    ``record_update_norm``: record each optimizer step's update norm ‖Δθ‖ (``update_norms``
    in the step's record), which costs a copy of the trainable parameters during the step:
    turn it off for a model that barely fits.
    """

    lr: float = 2e-4
    weight_decay: float = 0.0
    optimizer: str = "adamw"
    adam_betas: tuple[float, float] = (0.9, 0.999)
    sgd_momentum: float = 0.0
    grad_clip: float = 1.0
    ppo_epochs: int = 1
    minibatches: int = 1
    micro_batch_size: int = 0
    reference_model: bool = False
    skip_onpolicy_scoring: bool = True
    shared_prefix_forward: bool = True
    record_update_norm: bool = True

    def __post_init__(self) -> None:
        check_fields(
            self,
            [
                ("lr", self.lr > 0, "must be > 0"),
                ("weight_decay", self.weight_decay >= 0, "must be >= 0"),
                (
                    "optimizer",
                    self.optimizer in OPTIMIZERS,
                    f"must be one of {', '.join(OPTIMIZERS)}",
                ),
                ("adam_betas", all(0 <= b < 1 for b in self.adam_betas), "must be in [0, 1)"),
                ("sgd_momentum", 0 <= self.sgd_momentum < 1, "must be in [0, 1)"),
                ("grad_clip", self.grad_clip >= 0, "must be >= 0 (0 turns clipping off)"),
                ("ppo_epochs", self.ppo_epochs >= 1, "must be >= 1"),
                ("minibatches", self.minibatches >= 1, "must be >= 1"),
                ("micro_batch_size", self.micro_batch_size >= 0, "must be >= 0"),
            ],
        )


@dataclass
class VLLMConfig:
    """The vLLM engine of ``rollout.backend: vllm``, on the training GPU beside the policy, its
    optimizer and any reference model (TRL's ``vllm_mode="colocate"``).

    ``gpu_memory_utilization``: the share of the GPU vLLM takes for its weights and KV cache;
    TRL's colocate default 0.3 (``GRPOConfig.vllm_gpu_memory_utilization``), not vLLM's own
    0.9, which assumes the GPU is vLLM's alone. ``sleep``: vLLM's sleep mode, TRL's
    ``vllm_enable_sleep_mode`` (off by default there too): vLLM frees its weights and KV cache
    while the policy trains, and takes them back before it samples (slower, less memory).
    Neither changes what a run computes, so neither is a setting of the leaderboard."""

    gpu_memory_utilization: float = 0.3
    sleep: bool = False

    def __post_init__(self) -> None:
        check_fields(
            self,
            [
                (
                    "gpu_memory_utilization",
                    0 < self.gpu_memory_utilization <= 1,
                    "must be in (0, 1]",
                ),
            ],
        )


@dataclass
class BudgetConfig:
    """The compute budget and the points at which the policy is evaluated.

    ``unit``: ``flops`` (see :mod:`creditbench.harness.budget`), ``seconds`` (wall clock),
    ``tokens`` (generated tokens) or ``steps`` (optimizer steps). ``amount`` 0 means "not set
    here": the suite or the task default sets it before the run starts.

    ``eval_fractions``: shares of the budget; the policy is evaluated after the first step that
    reaches each (the equal-compute axis). ``eval_responses``: counts of trained responses; the
    policy is also evaluated after the first step whose responses trained on so far reach each
    (the equal-samples axis, read only from these evaluations: docs/harness.md). Empty by
    default; evaluations are outside the budget and draw from their own seeds, so adding them
    changes no step of training.
    """

    unit: str = "flops"
    amount: float = 0.0
    eval_fractions: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    eval_responses: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        fractions, counts = self.eval_fractions, self.eval_responses
        check_fields(
            self,
            [
                ("unit", self.unit in BUDGET_UNITS, f"must be one of {', '.join(BUDGET_UNITS)}"),
                ("amount", self.amount >= 0, "must be >= 0 (0: set by the suite or default)"),
                ("eval_fractions", len(fractions) > 0, "must not be empty"),
                ("eval_fractions", all(0 <= f <= 1 for f in fractions), "must lie in [0, 1]"),
                ("eval_fractions", _increasing(fractions), "must be strictly increasing"),
                ("eval_responses", all(n >= 1 for n in counts), "must be counts >= 1"),
                ("eval_responses", _increasing(counts), "must be strictly increasing"),
            ],
        )


def _increasing(values: Sequence[float]) -> bool:
    return all(a < b for a, b in zip(values[:-1], values[1:], strict=True))


@dataclass
class EvalConfig:
    """Evaluation on the eval split: greedy accuracy and mean accuracy over ``k_samples``.

    ``problems``: which ``n_problems`` of a larger split: ``seeded`` draws them with the run
    seed (the same subset at every evaluation of a run, and for every method at that seed, so
    the drawing of problems enters an interval over seeds), ``first`` takes the first ones. A
    split no larger than ``n_problems`` is taken whole either way.
    """

    n_problems: int = 200
    k_samples: int = 4
    greedy: bool = True
    temperature: float = 1.0
    batch_size: int = 64
    problems: str = "seeded"

    def __post_init__(self) -> None:
        check_fields(
            self,
            [
                ("n_problems", self.n_problems >= 1, "must be >= 1"),
                ("k_samples", self.k_samples >= 0, "must be >= 0 (0: no sampled accuracy)"),
                ("temperature", self.temperature > 0, "must be > 0"),
                ("batch_size", self.batch_size >= 1, "must be >= 1"),
                (
                    "problems",
                    self.problems in EVAL_DRAWS,
                    f"must be one of {', '.join(EVAL_DRAWS)}",
                ),
            ],
        )


@dataclass
class RunConfig:
    """One run: one method, one task, one seed, one budget.

    ``seed``: an integer in [0, 2**32) (:data:`SEED_LIMIT`), the same rule as every verb's
    ``--seed``."""

    method: str = "grpo"
    method_options: dict[str, Any] = field(default_factory=dict)
    task: str = "chain"
    task_options: dict[str, Any] = field(default_factory=dict)
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    bootstrap_options: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    device: str = "auto"
    checkpoint_every: int = 10
    output_dir: str = "runs"
    run_name: str | None = None

    def __post_init__(self) -> None:
        name_ok = self.run_name is None or (
            _RUN_NAME_PATTERN.fullmatch(self.run_name) is not None and self.run_name != ".."
        )
        check_fields(
            self,
            [
                ("method", bool(self.method), "must not be empty"),
                ("task", bool(self.task), "must not be empty"),
                ("seed", 0 <= self.seed < SEED_LIMIT, "must be in [0, 2**32)"),
                (
                    "device",
                    _DEVICE_PATTERN.fullmatch(self.device) is not None,
                    "must be auto, cpu, cuda, cuda:N or mps",
                ),
                ("checkpoint_every", self.checkpoint_every >= 1, "must be >= 1"),
                ("output_dir", bool(self.output_dir), "must not be empty"),
                ("run_name", name_ok, "must be letters, digits and ._+=- (no path separators)"),
            ],
        )


# ---------------------------------------------------------------------------------------------
# Method hyper-parameters, digest, saving.


def build_method_config(method_cls: Any, options: Mapping[str, Any] | None) -> Any:
    """The method's ``Config`` built from ``options``, errors naming ``method_options.<key>``."""
    return from_dict(method_cls.Config, dict(options or {}), "method_options")


# ---------------------------------------------------------------------------------------------
# Loading: YAML file, then overrides, then validation and method resolution.


def load_yaml_file(path: Path, what: str = "config file") -> Any:
    """The YAML document in ``path``; `ConfigError` naming the file (and the line and column of
    a syntax error) when it cannot be read, is not UTF-8 text, or is not YAML. A FIFO, socket
    or device is refused before it is opened: reading one waits for a writer, forever."""
    try:
        mode = path.stat().st_mode
    except OSError:
        mode = None  # the read below names what is wrong
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise ConfigError(f"{path}: cannot read {what} (not a regular file)")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read {what} ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start}); save it as UTF-8") from None
    try:
        return load_yaml(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None


def _read_yaml(path: Path) -> dict[str, Any]:
    data = load_yaml_file(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return data


def parse_key_value(text: str, flag: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of a command-line flag, the value read as YAML (``12``, ``[8, 12]``,
    ``text``); ``ConfigError`` naming ``flag`` for anything else."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"{flag}: expected KEY=VALUE (got {text!r})")
    try:
        return key.strip(), yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        raise ConfigError(f"{flag}: the value of {text!r} is not valid YAML") from None


def apply_override(data: dict[str, Any], override: str) -> None:
    """Apply ``a.b.c=value`` to nested ``data`` in place; the value is parsed as YAML."""
    key, sep, raw = override.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ConfigError(f"override {override!r}: expected the form key.path=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        raise ConfigError(f"override {override!r}: the value is not valid YAML") from None
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise ConfigError(f"override {override!r}: {where} is not a mapping")
        node = child
    node[parts[-1]] = value


# The budget of a run whose config leaves budget.amount at 0, per unit: the quick suite's.
# 1.2e12 FLOPs is about 8 steps of 8 prompts x 8 responses on the 8-step chain task with the
# "tiny" base policy; in the validation sweep GRPO gained 9.5 to 22 points of sampled accuracy
# by 1.5e12 at that batch size (`creditbench validate`, docs/testbed.md).
DEFAULT_BUDGET = {"flops": 1.2e12, "tokens": 6.0e4, "steps": 8.0}


@dataclass(frozen=True)
class ResolvedRun:
    """A run's config resolved once: every method option filled in (defaults included), the
    budget amount set, and the method's class and typed ``Config`` built from it."""

    config: RunConfig
    method_cls: Any
    method_config: Any


def resolve_run(cfg: RunConfig, *, default_budget: bool = True) -> ResolvedRun:
    """Check ``cfg.method`` exists, validate its options with its ``Config`` and fill
    ``method_options`` with every field; with ``default_budget``, an amount of 0 becomes the
    unit's :data:`DEFAULT_BUDGET`. Errors are :class:`ConfigError` naming the field."""
    from creditbench.methods.registry import UnknownMethodError, get_method

    try:
        method_cls = get_method(cfg.method)
    except UnknownMethodError as err:
        from creditbench.methods.registry import list_methods

        close = difflib.get_close_matches(cfg.method, list(list_methods()), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"method: {err}{hint}") from None
    method_config = build_method_config(method_cls, cfg.method_options)
    cfg = dataclasses.replace(cfg, method_options=to_dict(method_config))
    if default_budget and cfg.budget.amount <= 0:
        if cfg.budget.unit not in DEFAULT_BUDGET:
            raise ConfigError(f"budget.amount: must be set for unit {cfg.budget.unit!r}")
        budget = dataclasses.replace(cfg.budget, amount=DEFAULT_BUDGET[cfg.budget.unit])
        cfg = dataclasses.replace(cfg, budget=budget)
    return ResolvedRun(cfg, method_cls, method_config)


def resolve_method_options(cfg: RunConfig) -> RunConfig:
    """``cfg`` with ``method_options`` holding every field of the method's Config (the budget
    left as it is): what a saved config or a suite's digest describes."""
    return resolve_run(cfg, default_budget=False).config


def load_config(
    path: str | Path | None, overrides: Sequence[str] = (), *, resolve: bool = True
) -> RunConfig:
    """Read a YAML config (or the defaults when ``path`` is None), apply overrides, validate.

    With ``resolve`` (the default) the method name is checked against the registry and
    ``method_options`` holds every hyper-parameter of the method, defaults included, so the
    saved config describes the run completely.
    """
    data = _read_yaml(Path(path)) if path is not None else {}
    for override in overrides:
        apply_override(data, override)
    cfg = from_dict(RunConfig, data)
    return resolve_method_options(cfg) if resolve else cfg
