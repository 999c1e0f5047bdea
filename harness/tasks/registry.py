"""The task registry: a decorator registers a task's builder (``**options -> task``) by name.

As for methods (`methods.registry`), the names come from two places, loaded on the first
look-up: the built-in tasks below (the testbed and the math data sets), then the
``creditbench.tasks`` entry points of installed distributions, so that a researcher can try a
task without forking. An entry point's value is a module whose `register_task` decorator
registers its builders (``mytask = "mypkg.mytask"``), or a builder itself
(``mytask = "mypkg.mytask:build"``), registered under the entry point's name with the first
line of its docstring as description. A plugin that cannot be loaded, or that registers a name
already taken, stops the look-up with a `PluginError` naming the distribution and the entry
point.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from importlib import metadata
from types import ModuleType
from typing import Any

from creditbench.harness.tasks.base import undeclared_capabilities
from creditbench.methods.registry import (
    Origin,
    PluginError,
    describe_error,
    distribution_of,
    plugin_error,
)

ENTRY_POINT_GROUP = "creditbench.tasks"

Builder = Callable[..., Any]
_BUILDERS: dict[str, tuple[str, Builder]] = {}
_ORIGINS: dict[str, Origin] = {}
_LOADED = False


class DuplicateTaskError(ValueError):
    """A task name registered twice, so two packages cannot silently shadow each other."""


class UnknownTaskError(KeyError):
    """A task name nobody registered; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


def register_task(name: str, description: str) -> Callable[[Builder], Builder]:
    """Register ``builder(**options) -> task`` as task ``name``; a name registered twice is
    refused (`DuplicateTaskError`)."""

    def decorate(builder: Builder) -> Builder:
        if name in _BUILDERS:
            raise DuplicateTaskError(f"task {name!r} is already registered ({_ORIGINS[name]})")
        _BUILDERS[name] = (description, builder)
        module = getattr(builder, "__module__", "")
        kind = "builtin" if module == __name__ else "module"
        _ORIGINS[name] = Origin(kind, module)
        return builder

    return decorate


# --- the built-in tasks --------------------------------------------------------------------


@register_task(
    "chain", "synthetic multi-step arithmetic chains with step ground truth (the testbed)"
)
def _chain(**options: Any) -> Any:
    from creditbench.harness.tasks.chain import ChainConfig, ChainTask

    known = {f.name for f in fields(ChainConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(
            f"{unknown[0]}: unknown option of task chain; known: {', '.join(sorted(known))}"
        )
    return ChainTask(ChainConfig(**options))


@register_task(
    "ledger",
    "running balances whose slips a later fix line can correct, 2-16 items (recoverable errors, "
    "varied lengths)",
)
def _ledger(**options: Any) -> Any:
    from creditbench.harness.tasks.ledger import LedgerConfig, LedgerTask

    known = {f.name for f in fields(LedgerConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(
            f"{unknown[0]}: unknown option of task ledger; known: {', '.join(sorted(known))}"
        )
    return LedgerTask(LedgerConfig(**options))


@register_task(
    "countdown",
    "make a target from four numbers, one pair a line; dead ends checked exactly (branching "
    "decisions)",
)
def _countdown(**options: Any) -> Any:
    from creditbench.harness.tasks.countdown import CountdownConfig, CountdownTask

    known = {f.name for f in fields(CountdownConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(
            f"{unknown[0]}: unknown option of task countdown; known: {', '.join(sorted(known))}"
        )
    return CountdownTask(CountdownConfig(**options))


def _math(name: str) -> Builder:
    def build(**options: Any) -> Any:
        from creditbench.harness.tasks.math_data import MathTask

        known = ("source", "hub_config", "prompt_template", "limit", "timeout_s")
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(
                f"{unknown[0]}: unknown option of task {name}; known: {', '.join(known)}"
            )
        return MathTask(name, **options)

    return build


register_task("gsm8k", "GSM8K grade-school word problems, train and test, answers '#### N'")(
    _math("gsm8k")
)
register_task("math", "MATH competition problems, train and test, answers in \\boxed{}")(
    _math("math")
)
register_task("math500", "MATH-500, the 500-problem test subset of MATH")(_math("math500"))
register_task("mawps", "MAWPS SingleOp one-operation word problems, numeric answers")(
    _math("mawps")
)


# --- plugins -------------------------------------------------------------------------------


def _load_plugins() -> None:
    """Register the tasks of every ``creditbench.tasks`` entry point, once."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        origin = Origin("plugin", distribution_of(entry_point))
        for name in _register_plugin(entry_point, origin):
            _ORIGINS[name] = origin


def _register_plugin(entry_point: metadata.EntryPoint, origin: Origin) -> list[str]:
    """Load one entry point; the names of the tasks it registered."""

    def refuse(problem: str) -> PluginError:
        return plugin_error(entry_point, origin, ENTRY_POINT_GROUP, problem)

    before = set(_BUILDERS)
    try:
        loaded = entry_point.load()
    except DuplicateTaskError as err:
        raise refuse(f"refused, it registers a name that is taken: {err}") from err
    except Exception as err:  # whatever the plugin's own code raised while it was imported
        raise refuse(f"importing it raised {describe_error(err)}") from err
    if isinstance(loaded, ModuleType):
        names = sorted(set(_BUILDERS) - before)
        if not names:
            raise refuse(
                "the module registers no task (decorate a builder with "
                "@register_task(NAME, DESCRIPTION), or point the entry point at module:builder)"
            )
        return names
    if not callable(loaded):
        raise refuse(f"{loaded!r} is not a task builder (a callable taking the options)")
    if entry_point.name in _BUILDERS:
        raise refuse(f"refused, its name is taken: task {entry_point.name!r}")
    description = (loaded.__doc__ or entry_point.name).strip().splitlines()[0]
    register_task(entry_point.name, description)(loaded)
    return [entry_point.name]


# --- look-ups ------------------------------------------------------------------------------


def list_tasks() -> dict[str, str]:
    """Every task name with a one-line description."""
    _load_plugins()
    return {name: description for name, (description, _) in _BUILDERS.items()}


def task_origin(name: str) -> Origin:
    """Where task ``name`` comes from: builtin, a plugin's distribution, or a module."""
    _load_plugins()
    if name not in _ORIGINS:
        raise UnknownTaskError(f"unknown task {name!r}; known tasks: {', '.join(_BUILDERS)}")
    return _ORIGINS[name]


def get_task(name: str, **options: Any) -> Any:
    """The task ``name`` built with ``options``.

    Raises:
        UnknownTaskError: ``name`` is not registered.
        ValueError: an option is unknown or invalid (the message names it).
        MissingPackageError: a package the data source needs is not installed.
    """
    _load_plugins()
    if name not in _BUILDERS:
        raise UnknownTaskError(f"unknown task {name!r}; known tasks: {', '.join(_BUILDERS)}")
    task = _BUILDERS[name][1](**options)
    undeclared = undeclared_capabilities(task)
    if undeclared:  # a task written before capabilities: its steps would silently be ignored
        raise ValueError(
            f"task {name!r} implements {'; '.join(undeclared)} but does not declare it: add "
            "it to the task's capabilities (harness/tasks/base.py, Task)"
        )
    return task
