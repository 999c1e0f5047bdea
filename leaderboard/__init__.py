"""The leaderboard: run directories in, statistics, tables and plots out.

- :mod:`.collect`: every finished run under a results directory as one tidy table;
- :mod:`.stats`: IQM and mean with stratified bootstrap and t CIs, probability of improvement;
- :mod:`.gains`: gains over GRPO paired by seed, the claim rule, the GRPO(0) -> oracle(1) scale
  and the ranking every table, plot and sentence uses;
- :mod:`.board`: the board's numbers, one row per setting and method;
- :mod:`.credit`: credit precision and AUROC of one batch's advantages (torch only);
- :mod:`.cancellation`: token-gradient cancellation of one batch's loss (torch only);
- :mod:`.validation`: the testbed's validation report, oracle credit against GRPO;
- :mod:`.report`: ``leaderboard.md``, ``.csv``, ``.html`` and the PNG plots.

``render`` is the entry point ``creditbench bench`` and ``creditbench leaderboard`` call.
"""

from importlib import import_module
from typing import Any

__all__ = ["LeaderboardError", "collect_runs", "render"]

_HOMES = {"collect_runs": ".collect", "render": ".report", "LeaderboardError": ".report"}


def __getattr__(name: str) -> Any:
    # Lazy: the trainer imports the torch-only :mod:`.credit` every run, and should not pay
    # for pandas and matplotlib, which only the tables and plots need.
    if name in _HOMES:
        return getattr(import_module(_HOMES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
