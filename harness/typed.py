"""Dataclasses from plain data (YAML, JSON, command-line overrides), checked against annotations.

:func:`from_dict` builds a dataclass, nested ones included, checking every key and type against
its annotations; unknown keys fail with a suggestion and every error names the dotted field.
:func:`to_dict` is the inverse, giving plain JSON/YAML-safe data. Both work for any dataclass:
the run config and each method's hyper-parameter ``Config``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """Bad user input in a configuration: the message names the field, or the file and line."""


def _describe(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _coerce(value: Any, tp: Any, path: str) -> Any:
    """``value`` checked (and converted: list -> tuple, int -> float) against annotation ``tp``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return _coerce(value, option, path)
            except ConfigError as err:
                errors.append(str(err))
        if len(options) == 1:
            raise ConfigError(errors[0])
        names = " or ".join(getattr(o, "__name__", str(o)) for o in options)
        raise ConfigError(f"{path}: expected {names}, got {_describe(value)}")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return from_dict(tp, value, path)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {_describe(value)}")
        return value
    if tp is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"{path}: expected an integer, got {_describe(value)}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads "1e-4" as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ConfigError(f"{path}: expected a number, got {_describe(value)}")
        if not math.isfinite(value):
            raise ConfigError(f"{path}: must be a finite number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {_describe(value)}")
        return value
    if tp is dict or origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {_describe(value)}")
        value_type = args[1] if args else Any
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(f"{path}: keys must be strings, got {_describe(key)}")
            out[key] = _coerce(item, value_type, f"{path}.{key}")
        return out
    if tp in (list, tuple) or origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {_describe(value)}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ConfigError(f"{path}: expected {len(args)} items, got {len(value)}")
            items = [
                _coerce(v, a, f"{path}[{i}]")
                for i, (v, a) in enumerate(zip(value, args, strict=True))
            ]
        else:
            item_type = args[0] if args else Any
            items = [_coerce(v, item_type, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if (tp is tuple or origin is tuple) else items
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{path}: must be one of {', '.join(map(str, args))}, got {value!r}")
        return value
    raise ConfigError(f"{path}: unsupported annotation {tp!r}")  # a bug in a Config class


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def from_dict(cls: type, data: Any, path: str = "") -> Any:
    """Build dataclass ``cls`` from a mapping, checking keys and types against its annotations.

    Nested dataclasses, ``X | None``, ``tuple`` (from a list), ``dict`` and ``list`` fields are
    handled; missing keys take the field's default. The dataclass's own ``__post_init__`` range
    checks run, and their ``ValueError`` comes back as :class:`ConfigError` naming the path.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or 'config'}: expected a mapping, got {_describe(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            message = f"unknown key {_join(path, str(key))!r}"
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
            if close:
                message += f"; did you mean {_join(path, close[0])!r}?"
            else:
                message += f"; known keys: {', '.join(fields)}"
            raise ConfigError(message)
        kwargs[key] = _coerce(value, hints[key], _join(path, key))
    for name, f in fields.items():
        no_default = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if name not in kwargs and no_default:
            raise ConfigError(f"{_join(path, name)}: missing required key")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except ValueError as err:
        message = str(err)
        head = message.split(":", 1)[0].split(".", 1)[0]  # "host.eps_high: ..." names host
        if path and head in fields:
            raise ConfigError(f"{path}.{message}") from None
        raise ConfigError(f"{path}: {message}" if path else message) from None


def to_dict(obj: Any) -> Any:
    """A dataclass (or nested containers of them) as plain JSON/YAML-safe data."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj
