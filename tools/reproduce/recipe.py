"""A paper card read for ``creditbench reproduce``: which methods run, how the card's recipe and
per-method options map onto run-config fields, and what the paper scale needs of the machine.

Every value a reproduction sets is a :class:`Setting` that says where it comes from, so the plan
printed before the runs (and repeated in the report) can be checked line by line against the
card. Nothing the card marks ``unknown`` is filled in here: it is listed, and the harness keeps
its default (or the command line sets it).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from creditbench.reference.cards import Card, CardError, Recipe, Sourced, load_cards

# Recipe fields that map onto a run-config field, and the type the field takes.
RECIPE_SETTINGS = {
    "group_size": ("rollout.group_size", int),
    "prompts_per_step": ("rollout.prompts_per_step", int),
    "learning_rate": ("train.lr", float),
    "max_response_length": ("rollout.max_new_tokens", int),
    "temperature": ("rollout.temperature", float),
}
# Recipe fields that are options of the proposed method(s).
RECIPE_METHOD_OPTIONS = ("kl_coef", "eps_low", "eps_high", "aggregation")
# recipe.other entries named otherwise than the option or setting they mean.
OTHER_OPTION_ALIASES = {"kl_estimator": "kl_kind", "discount": "gamma"}
OTHER_SETTINGS = {
    "updates_per_rollout": ("train.minibatches", int),
    "eval_temperature": ("eval.temperature", float),
}
# Training data a card names that is one of our tasks (compared lower-case, letters and digits).
DATA_TASKS = {"gsm8k": "gsm8k", "math": "math", "math500": "math500"}


class ReproduceError(ValueError):
    """A user error: an unknown card, a bad option, missing paper-scale requirements."""


@dataclass(frozen=True)
class Setting:
    """One value a reproduction sets (a dotted run-config key or a method option), and why."""

    key: str
    value: Any
    origin: str


# ---------------------------------------------------------------------------------------------
# Cards and methods


def load_card_by_id(card_id: str) -> Card:
    """The shipped card ``card_id``; an unknown id names the known ones."""
    try:
        cards = load_cards()
    except CardError as err:
        raise ReproduceError(f"card: {err}") from None
    if card_id not in cards:
        raise ReproduceError(f"CARD: unknown card {card_id!r}; known: {', '.join(sorted(cards))}")
    return cards[card_id]


def split_methods(card: Card) -> tuple[list[str], dict[str, str]]:
    """(rows to run, {row: why it is skipped}), rows by their card name.

    The rows to run are the card's ``cpu_scale.methods`` (its registered rows when it has no
    ``cpu_scale``) whose registered method the registry implements now (a row with ``method``
    runs that method with the row's ``options``); every other row of the card is skipped, as
    "not implemented" or "not in cpu_scale.methods".
    """
    from creditbench.methods.registry import list_methods

    registry = list_methods()

    def runnable(name: str) -> bool:
        row = card.method_row(name)
        return row.registered and row.registry_name in registry

    wanted = list(card.cpu_scale.methods) if card.cpu_scale else card.registered_methods()
    run = [m for m in wanted if runnable(m)]
    skipped = {m: "not implemented" for m in wanted if not runnable(m)}
    for method in card.methods:
        if method.name not in wanted:
            why = "not in cpu_scale.methods" if runnable(method.name) else "not implemented"
            skipped.setdefault(method.name, why)
    return run, skipped


def row_settings(card: Card, row: str) -> list[Setting]:
    """The options a card row sets itself (``methods[i].options``: Teacher-OPPO's oracle)."""
    index = card.method_names().index(row)
    options = card.method_row(row).options
    return [Setting(k, v, f"card methods[{index}].options") for k, v in options.items()]


def method_fields(method: str) -> set[str]:
    """The option names of a registered method: the fields of its Config and, for a rule hosted
    on another method (`methods.compose`), the fields of any of its hosts' Configs, which go
    into its ``host`` option."""
    from creditbench.methods.registry import get_method

    config = get_method(method).Config
    names = {f.name for f in dataclasses.fields(config)}
    for host in getattr(config, "hosts", {}).values():
        names |= {f.name for f in dataclasses.fields(host.Config)}
    return names


def nest_host_options(method_cls: Any, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the keys the method's Config lacks moved into ``host`` (a hosted rule's
    host options), so a card's clip range reaches the host's loss."""
    own = {f.name for f in dataclasses.fields(method_cls.Config)}
    if "host" not in own:
        return options
    nested = {k: v for k, v in options.items() if k in own}
    host = {**nested.get("host", {}), **{k: v for k, v in options.items() if k not in own}}
    return {**nested, "host": host} if host else nested


def map_options(
    method: str, wanted: Sequence[Setting], base: Sequence[Setting] = ()
) -> tuple[list[Setting], list[Setting]]:
    """Split ``wanted`` options of the registered ``method`` into (mapped, not mapped).

    An option maps when the method's Config has the field and accepts the value together with
    ``base`` and the options mapped before it; a later value of a key replaces an earlier one.
    A rejected option carries the reason in its ``origin``.
    """
    from creditbench.harness.config import ConfigError, build_method_config
    from creditbench.methods.registry import get_method

    method_cls = get_method(method)
    mapped: dict[str, Setting] = {s.key: s for s in base}
    rejected = []
    for item in wanted:
        trial = {k: s.value for k, s in mapped.items()} | {item.key: item.value}
        if item.key not in method_fields(method):
            reason = f"{item.origin}; {method} has no option {item.key}"
            rejected.append(dataclasses.replace(item, origin=reason))
            continue
        try:
            build_method_config(method_cls, nest_host_options(method_cls, trial))
        except (ConfigError, ValueError, TypeError) as err:
            rejected.append(dataclasses.replace(item, origin=f"{item.origin}; rejected: {err}"))
            continue
        mapped.pop(item.key, None)
        mapped[item.key] = item
    return list(mapped.values()), rejected


# ---------------------------------------------------------------------------------------------
# The paper's recipe


def _sourced(name: str, value: Sourced) -> str:
    flags = [value.tag] + ([] if value.verified else ["unverified"])
    return f"recipe.{name} ({value.source}; {', '.join(flags)})"


def _as(kind: type, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {value!r}")
    if kind is int:
        if value != int(value):
            raise ValueError(f"expected a whole number, got {value!r}")
        return int(value)
    return float(value)


@dataclass
class RecipeMapping:
    """A card's recipe as shared run-config settings and per-method options."""

    settings: list[Setting]
    options: dict[str, list[Setting]]
    not_mapped: list[Setting]
    unknown: list[str]
    task: str | None
    steps: int | None


def paper_recipe(card: Card, methods: Sequence[str]) -> RecipeMapping:
    """Map ``card.recipe`` onto run-config fields for ``methods`` (card rows).

    Shared settings: group size, prompts per step, learning rate, maximum response length and
    temperature (``RECIPE_SETTINGS``), and the ``recipe.other`` entries of ``OTHER_SETTINGS``.
    The training data becomes the task when it is one of ours, a numeric ``steps_or_budget``
    a budget in optimizer steps. Method options: the card's ``cpu_scale.method_options`` for
    every method; then, for the methods the paper proposes, the recipe's KL weight, clip range,
    aggregation and every ``recipe.other`` entry named like an option of the method (or aliased
    in ``OTHER_OPTION_ALIASES``). Baselines keep their own defaults: the recipe is the
    proposed method's. Fields marked unknown are listed in ``unknown``, never filled in; values
    with no run-config field or option are listed in ``not_mapped`` with the reason.
    """
    recipe: Recipe = card.recipe
    settings: list[Setting] = []
    not_mapped: list[Setting] = []
    unknown: list[str] = []
    task: str | None = None
    steps: int | None = None
    for name in ("base_model", "training_data", *RECIPE_SETTINGS, "steps_or_budget"):
        value = getattr(recipe, name)
        if value is None:
            unknown.append(name)
            continue
        origin = _sourced(name, value)
        if name in RECIPE_SETTINGS:
            key, kind = RECIPE_SETTINGS[name]
            try:
                settings.append(Setting(key, _as(kind, value.value), origin))
            except ValueError as err:
                not_mapped.append(Setting(name, value.value, f"{origin}; {err}"))
        elif name == "training_data":
            task = DATA_TASKS.get(re.sub(r"[^a-z0-9]", "", str(value.value).lower()))
            if task is None:
                not_mapped.append(Setting(name, value.value, f"{origin}; not one of our tasks"))
        elif name == "steps_or_budget":
            try:
                steps = _as(int, value.value)
            except ValueError:
                not_mapped.append(Setting(name, value.value, f"{origin}; not a number of steps"))
        else:
            not_mapped.append(Setting(name, value.value, f"{origin}; --model-dir holds it"))
    wanted: list[Setting] = []
    for name in RECIPE_METHOD_OPTIONS:
        value = getattr(recipe, name)
        if value is None:
            unknown.append("clip" if name.startswith("eps_") else name)
        else:
            wanted.append(Setting(name, value.value, _sourced(name, value)))
    for name, value in recipe.other.items():
        if value is None:
            unknown.append(f"other.{name}")
        elif name in OTHER_SETTINGS:
            key, kind = OTHER_SETTINGS[name]
            settings.append(Setting(key, _as(kind, value.value), _sourced(f"other.{name}", value)))
        else:
            option = OTHER_OPTION_ALIASES.get(name, name)
            wanted.append(Setting(option, value.value, _sourced(f"other.{name}", value)))
    proposed = [m.name for m in card.methods if m.role == "proposed" and m.name in methods]
    registry = {m: card.method_row(m).registry_name for m in methods}
    fields = {m: method_fields(registry[m]) for m in proposed}
    card_options = card.cpu_scale.method_options if card.cpu_scale else {}
    options: dict[str, list[Setting]] = {}
    for method in methods:
        base = row_settings(card, method) + [
            Setting(k, v, "card cpu_scale.method_options")
            for k, v in card_options.get(method, {}).items()
        ]
        base, rejected = map_options(registry[method], base)
        if method in proposed:
            ours = [s for s in wanted if s.key in fields[method]]
            base, more = map_options(registry[method], ours, base)
            rejected += more
            rejected += [
                dataclasses.replace(s, origin=f"{s.origin}; {method} has no option {s.key}")
                for s in wanted
                if s.key not in fields[method] and any(s.key in f for f in fields.values())
            ]
        options[method] = base
        not_mapped += [dataclasses.replace(s, key=f"{method}.{s.key}") for s in rejected]
    nobody = "no run-config field, and no option of a proposed method that runs"
    not_mapped += [
        dataclasses.replace(s, origin=f"{s.origin}; {nobody}")
        for s in wanted
        if not any(s.key in f for f in fields.values())
    ]
    return RecipeMapping(settings, options, not_mapped, list(dict.fromkeys(unknown)), task, steps)


# ---------------------------------------------------------------------------------------------
# Paper-scale requirements


@dataclass(frozen=True)
class Environment:
    """What this machine offers: the memory (GiB) of each visible CUDA GPU, and which of the
    packages asked about are importable."""

    gpus: tuple[float, ...]
    packages: frozenset[str]


def probe_environment(packages: Sequence[str] = ("vllm",)) -> Environment:
    import torch

    gpus: tuple[float, ...] = ()
    if torch.cuda.is_available():
        gpus = tuple(
            torch.cuda.get_device_properties(i).total_memory / 2**30
            for i in range(torch.cuda.device_count())
        )
    found = frozenset(p for p in packages if importlib.util.find_spec(p) is not None)
    return Environment(gpus=gpus, packages=found)


def missing_requirements(
    card: Card,
    model_dir: str | None,
    env: Environment,
    *,
    ignore_hardware: bool = False,
    engine: str = "builtin",
) -> list[str]:
    """What ``--scale paper`` lacks here, one phrase each (model, hardware, packages); empty when
    nothing is missing. ``ignore_hardware`` accepts fewer or smaller GPUs than the card's
    estimate (a GPU is still needed). The ``builtin`` engine trains on one GPU, so a card that
    needs several is refused there (unless ``ignore_hardware``), with verl and TRL named."""
    scale = card.paper_scale
    if scale is None:
        return [f"paper_scale: the card {card.id} says nothing of the paper-scale setup"]
    missing = []
    if model_dir is None:
        if scale.model is None:
            missing.append(
                "model: the card does not record the paper's model (paper_scale.model is "
                "unknown), so name one with --model-dir DIR"
            )
        else:
            missing.append(f"model: {scale.model} in a local directory (--model-dir DIR)")
    elif not (Path(model_dir) / "config.json").is_file():
        missing.append(f"model: --model-dir {model_dir} is not a model directory (no config.json)")
    if not env.gpus:
        missing.append(f"hardware: {scale.hardware} (found no CUDA GPU)")
    elif not ignore_hardware:
        large = [g for g in env.gpus if g >= scale.gpu_memory_gib]
        if len(large) < scale.gpu_count:
            found = ", ".join(f"{g:.0f} GiB" for g in env.gpus)
            missing.append(
                f"hardware: {scale.hardware} (found {len(env.gpus)} x GPU: {found}; "
                "--ignore-hardware tries anyway)"
            )
        elif engine == "builtin" and scale.gpu_count > 1:
            missing.append(
                f"hardware: the builtin trainer runs on one GPU and the card's recipe needs "
                f"{scale.gpu_count} (--engine verl or --engine trl writes a launch for "
                f"{scale.gpu_count}; --ignore-hardware runs it on one)"
            )
    for package in scale.requires:
        if package not in env.packages:
            hint = '-e ".[vllm]" in the clone' if package == "vllm" else package
            missing.append(f"package: {package} (pip install {hint})")
    return missing


def refusal(card: Card, missing: Sequence[str]) -> str:
    """The one-line message ``--scale paper`` refuses with."""
    return (
        f"--scale paper: card {card.id} needs what this machine lacks: "
        + "; ".join(missing)
        + f". `creditbench reproduce {card.id} --scale cpu` runs it on the testbed instead."
    )
