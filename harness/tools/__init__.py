"""Tools that use the harness's core and that the core never uses: the step-time benchmark
(`perf`, beside TRL's own step in `perf_compare`), the gradient statistics of a step
(`gradients`), the check of value estimates against the testbed's exact values
(`value_check`) and the side-by-side credit of several methods (`explain`). Each backs one
verb of the CLI; ``tests/test_architecture.py`` checks that nothing of the core imports them.
"""
