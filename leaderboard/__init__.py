"""The leaderboard: run directories in, statistics, tables and plots out.

- :mod:`.collect`: every finished run under a results directory as one tidy table;
- :mod:`.stats`: IQM and mean with stratified bootstrap CIs, probability of improvement, ranks;
- :mod:`.credit`: credit precision and AUROC of one batch's advantages (torch only);
- :mod:`.render`: ``leaderboard.md``, ``.csv``, ``.html`` and the PNG plots.

``render`` is the entry point ``creditbench bench`` and ``creditbench leaderboard`` call.
"""

from .collect import collect_runs
from .render import LeaderboardError, render

__all__ = ["LeaderboardError", "collect_runs", "render"]
