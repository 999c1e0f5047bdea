"""The one message format of every range check on a config: the methods' Configs and the
harness's run config both raise ``ValueError("field: rule (got value)")``.

Imports the standard library only, so that the harness's config (which the CLI reads before
anything heavy loads) can use it without importing torch.
"""

from __future__ import annotations

from collections.abc import Sequence


def check_fields(obj: object, checks: Sequence[tuple[str, bool, str]]) -> None:
    """Raise ``ValueError("field: rule (got value)")`` for the first ``(field, ok, rule)``
    that fails."""
    for field_name, ok, rule in checks:
        if not ok:
            raise ValueError(f"{field_name}: {rule} (got {getattr(obj, field_name)!r})")
