"""The leaderboard: run directories in, statistics, tables and plots out.

It reads run directories through their format (:mod:`creditbench.harness.records.files`, the
one module of the harness it imports) and nothing of the harness imports it.

- :mod:`.collect`: every finished run under a results directory as one tidy table;
  :mod:`.records` reads a committed ``runs.csv`` back as runs;
- :mod:`.stats`: IQM and mean with stratified bootstrap and t CIs, probability of improvement;
- :mod:`.gains`: gains over GRPO paired by seed, the claim rule, the GRPO(0) -> oracle(1) scale
  and the ranking every table, plot and sentence uses;
- :mod:`.board`: the board's numbers, one row per setting and method;
- :mod:`.tables`, :mod:`.plots`, :mod:`.verdict`: its tables, figures and sentences;
- :mod:`.explain`: the credit picture of one batch, methods side by side;
- :mod:`.validation`: the testbed's validation report, oracle credit against GRPO;
- :mod:`.saturation`: saturating learning-curve fits;
- :mod:`.papers`, :mod:`.claims`: the papers' numbers and claims, checked against the records;
- :mod:`.headline`: the home page's headline;
- :mod:`.report`: ``leaderboard.md``, ``.csv``, ``.html`` and the PNG plots.

``render`` is the entry point ``creditbench bench`` and ``creditbench leaderboard`` call.
"""

from importlib import import_module
from typing import Any

__all__ = ["LeaderboardError", "collect_runs", "render"]

_HOMES = {"collect_runs": ".collect", "render": ".report", "LeaderboardError": ".report"}


def __getattr__(name: str) -> Any:
    # Lazy: a command that only collects runs should not pay for pandas and matplotlib, which
    # only the tables and plots need.
    if name in _HOMES:
        return getattr(import_module(_HOMES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
