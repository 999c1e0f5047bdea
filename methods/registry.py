"""The method registry: a decorator registers a method class by name."""

from __future__ import annotations

from typing import TypeVar

_REGISTRY: dict[str, type] = {}
_LOADED = False

M = TypeVar("M", bound=type)


def register_method(name: str):
    """Class decorator: make ``cls`` available as ``get_method(name)``.

    Registering a name twice is an error, so two files cannot silently shadow each other.
    """

    def decorate(cls: M) -> M:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(
                f"method name {name!r} is already registered by {_REGISTRY[name].__module__}"
            )
        cls.name = name  # type: ignore[attr-defined]
        _REGISTRY[name] = cls
        return cls

    return decorate


def _load_all() -> None:
    """Import every module of this package once, so that their decorators run."""
    global _LOADED
    if _LOADED:
        return
    import importlib
    import pkgutil

    package = importlib.import_module(__package__ or "methods")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in {"core", "registry", "base"} and not info.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{info.name}")
    _LOADED = True


class UnknownMethodError(KeyError):
    """Raised for a method name nobody registered; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


def get_method(name: str) -> type:
    """The class registered as ``name``."""
    _load_all()
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY))
        raise UnknownMethodError(f"unknown method {name!r}; known methods: {known}")
    return _REGISTRY[name]


def list_methods() -> dict[str, type]:
    """Every registered method, by name, sorted."""
    _load_all()
    return dict(sorted(_REGISTRY.items()))
