"""The tools: what a user runs, built on the harness's core and the leaderboard, which never
import them.

- :mod:`.cli`: the ``creditbench`` command, one module per verb;
- :mod:`.suite` (the suites in ``suites/``): what a suite is and the runs it expands to;
  :mod:`.bench` runs them in workers, resumed and rendered as a board (:mod:`.bench_plan`
  plans them);
- :mod:`.reproduce`: a paper card planned, run and reported, or written as a verl or TRL launch;
- :mod:`.perf` (beside TRL's own step in :mod:`.perf_compare`): the step-time benchmark;
- :mod:`.gradients`: the gradient statistics of a step;
- :mod:`.value_check`: value estimates against the testbed's exact values;
- :mod:`.explain`: several methods' credit side by side.

``tests/test_architecture.py`` checks that nothing of the harness, the leaderboard, the methods
or the integrations imports a tool.
"""
