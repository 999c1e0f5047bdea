"""The method registry: a decorator registers a method class by name.

The names come from two places, loaded in this order on the first look-up:

1. the modules of this package: the built-in methods (a look-up of one name, where no plugin is
   installed, imports only the module of that name when there is one: ``get_method("grpo")``
   reads ``grpo.py``, not all 30 files; `list_methods` and a name another module registers
   import them all);
2. the ``creditbench.methods`` entry points of installed distributions (plugins), so that a
   researcher can try a method without forking. The entry point's value is a module whose
   `register_method` decorator registers the method (``mymethod = "mypkg.mymethod"``), or a
   `CreditMethod` subclass (``mymethod = "mypkg.mymethod:MyMethod"``), registered under the
   entry point's name unless it registered itself.

A plugin that cannot be loaded stops the look-up with a `PluginError` naming the distribution
and the entry point, rather than being skipped with a warning: a benchmark must never run a
quietly smaller set of methods, and which of two ``grpo`` a run got must never depend on the
order in which packages were installed.

Importing this module imports the standard library only, so that the CLI can import it at
start-up for free; the methods, and torch with them, load on the first look-up.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import TypeVar

ENTRY_POINT_GROUP = "creditbench.methods"
_PACKAGE = __package__ or "methods"

M = TypeVar("M", bound=type)


@dataclass(frozen=True)
class Origin:
    """Where a registered method comes from.

    Attributes:
        kind: ``builtin`` (a module of this package), ``plugin`` (an installed distribution's
            entry point) or ``module`` (code that called `register_method` itself: a test, a
            notebook).
        source: the distribution and its version for a plugin (``mypkg 0.1.0``), the
            registering module otherwise.
    """

    kind: str
    source: str

    def __str__(self) -> str:
        return "builtin" if self.kind == "builtin" else f"{self.kind}: {self.source}"


_REGISTRY: dict[str, type] = {}
_ORIGINS: dict[str, Origin] = {}
_LOADED = False


class DuplicateMethodError(ValueError):
    """Raised when a name is registered twice, so two files cannot silently shadow each
    other."""


class PluginError(ValueError):
    """Raised for a plugin that cannot be loaded; the message names the distribution, the
    entry point and the problem."""


class UnknownMethodError(KeyError):
    """Raised for a method name nobody registered; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


def _origin_of(cls: type) -> Origin:
    """A class's origin as its module tells it; `_load_plugins` marks the plugins' own."""
    if cls.__module__.startswith(f"{_PACKAGE}."):
        return Origin("builtin", cls.__module__)
    return Origin("module", cls.__module__)


def register_method(name: str) -> Callable[[M], M]:
    """Class decorator: make ``cls`` available as ``get_method(name)``.

    Registering a name twice is an error (`DuplicateMethodError`).
    """

    def decorate(cls: M) -> M:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise DuplicateMethodError(
                f"method name {name!r} is already registered by {_REGISTRY[name].__module__}"
            )
        cls.name = name  # type: ignore[attr-defined]
        _REGISTRY[name] = cls
        _ORIGINS[name] = _origin_of(cls)
        return cls

    return decorate


# --------------------------------------------------------------------------------------------
# Loading: the package's own modules, then the plugins
# --------------------------------------------------------------------------------------------


def _load_all() -> None:
    """Import every module of this package once, so that their decorators run, then the
    plugins."""
    global _LOADED
    if _LOADED:
        return
    package = importlib.import_module(_PACKAGE)
    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in {"core", "registry", "base"} and not info.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{info.name}")
    _load_plugins()
    _LOADED = True


def _load_plugins() -> None:
    """Register the methods of every ``creditbench.methods`` entry point, recording each one's
    distribution as its origin."""
    for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        origin = Origin("plugin", distribution_of(entry_point))
        for name in _register_plugin(entry_point, origin):
            if _ORIGINS[name].kind != "builtin":  # an entry point naming a built-in leaves it one
                _ORIGINS[name] = origin


def distribution_of(entry_point: metadata.EntryPoint) -> str:
    """``name version`` of the distribution that declares ``entry_point``."""
    dist = entry_point.dist
    return f"{dist.name} {dist.version}" if dist is not None else "(unknown distribution)"


def _register_plugin(entry_point: metadata.EntryPoint, origin: Origin) -> list[str]:
    """Load one entry point; the names of the methods it registered."""

    def refuse(problem: str) -> PluginError:
        return plugin_error(entry_point, origin, ENTRY_POINT_GROUP, problem)

    try:
        loaded = entry_point.load()
    except DuplicateMethodError as err:
        raise refuse(f"refused, it registers a name that is taken: {err}") from err
    except Exception as err:  # whatever the plugin's own code raised while it was imported
        raise refuse(f"importing it raised {describe_error(err)}") from err

    if isinstance(loaded, ModuleType):
        module = loaded.__name__
        names = [
            name
            for name, cls in _REGISTRY.items()
            if cls.__module__ == module or cls.__module__.startswith(f"{module}.")
        ]
        if not names:
            raise refuse(
                "the module registers no method (decorate the class with "
                "@register_method(NAME), or point the entry point at module:Class)"
            )
        return names

    from .base import CreditMethod  # here, since base imports torch (see the docstring)

    if not (isinstance(loaded, type) and issubclass(loaded, CreditMethod)):
        raise refuse(f"{loaded!r} is not a CreditMethod subclass")
    names = [name for name, cls in _REGISTRY.items() if cls is loaded]
    if names:  # the class registered itself with the decorator
        return names
    try:
        register_method(entry_point.name)(loaded)
    except DuplicateMethodError as err:
        raise refuse(f"refused, its name is taken: {err}") from err
    return [entry_point.name]


def plugin_error(
    entry_point: metadata.EntryPoint, origin: Origin, group: str, problem: str
) -> PluginError:
    """The one message for a plugin that cannot be loaded: its distribution, its entry point
    and group, the problem, and how to get rid of it (the task registry's plugins too)."""
    dist = entry_point.dist
    uninstall = f" (pip uninstall {dist.name})" if dist is not None else ""
    return PluginError(
        f"plugin {origin.source}, entry point {entry_point.name} = {entry_point.value!r} "
        f"(group {group}): {problem}; fix the plugin or uninstall it{uninstall}"
    )


def describe_error(err: BaseException) -> str:
    """``Type: message, at file:line``, the line being the innermost one outside the import
    machinery and this file: for a mistake in the plugin, the plugin's own line."""
    machinery = (str(Path(importlib.__file__).parent), __file__)
    frames = [
        frame
        for frame in traceback.extract_tb(err.__traceback__)
        if not frame.filename.startswith(("<", *machinery))
    ]
    where = f", at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(err).__name__}: {err}{where}"


# --------------------------------------------------------------------------------------------
# Look-ups
# --------------------------------------------------------------------------------------------


def _installed_plugins() -> bool:
    """Whether any distribution declares a ``creditbench.methods`` entry point."""
    return bool(metadata.entry_points(group=ENTRY_POINT_GROUP))


def _load(name: str) -> None:
    """Make ``name`` known with as few imports as keep the rules above: its own module when the
    package has one and no plugin is installed (a plugin's name could clash with any built-in,
    so with plugins everything loads, as before), else everything."""
    if name in _REGISTRY or _LOADED:
        return
    if name.isidentifier() and not _installed_plugins():
        if importlib.util.find_spec(f"{_PACKAGE}.{name}") is not None:
            importlib.import_module(f"{_PACKAGE}.{name}")
            if name in _REGISTRY:
                return
    _load_all()


def get_method(name: str) -> type:
    """The class registered as ``name``."""
    _load(name)
    if name not in _REGISTRY:  # everything is loaded by now: the message lists every name
        known = ", ".join(sorted(_REGISTRY))
        raise UnknownMethodError(f"unknown method {name!r}; known methods: {known}")
    return _REGISTRY[name]


def list_methods() -> dict[str, type]:
    """Every registered method, by name, sorted."""
    _load_all()
    return dict(sorted(_REGISTRY.items()))


def method_origin(name: str) -> Origin:
    """Where the method registered as ``name`` comes from: builtin, or a plugin's distribution
    and version."""
    cls = get_method(name)
    return _ORIGINS.get(name) or _origin_of(cls)
