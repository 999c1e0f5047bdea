"""The one message format of every range check on a config: the methods' Configs and the
harness's run config both raise ``ValueError("field: rule (got value)")``.

Imports the standard library only, so that the harness's config (which the CLI reads before
anything heavy loads) can use it without importing torch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence


def check_fields(obj: object, checks: Sequence[tuple[str, bool, str]]) -> None:
    """Raise ``ValueError("field: rule (got value)")`` for the first ``(field, ok, rule)``
    that fails."""
    for field_name, ok, rule in checks:
        if not ok:
            raise ValueError(f"{field_name}: {rule} (got {getattr(obj, field_name)!r})")


def check_finite_numbers(config: object) -> None:
    """Raise ``ValueError("field: must be a finite number (got value)")`` for the first float
    field of the dataclass ``config`` that is NaN or infinite. Every number of every method's
    Config is finite: NaN passes no comparison a range check makes, and an infinite weight or
    clip is never what a recipe means (``clip=False`` is the unclipped loss)."""
    for field_ in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, field_.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{field_.name}: must be a finite number (got {value})")
