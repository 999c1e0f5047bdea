"""Run the conformance checks on chosen methods: what ``creditbench conformance NAME`` does.

pytest imports ``checks.py`` from its file, under a name of its own
(``harness.conformance.checks``) rather than the installed one. So the methods to check travel
in the run's ``config.stash`` under a key defined here, in a module that ``checks.py`` imports
by its installed name: one key, however ``checks.py`` itself was imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

SELECTED_METHODS = pytest.StashKey[list[str]]()
"""The methods `run_checks` was asked to check; absent when pytest runs the checks itself."""

CHECKS = Path(__file__).with_name("checks.py")
HYPOTHESIS_PROFILE = "creditbench-conformance"


class _CheckOnly:
    """pytest plugin: the checks run on these methods only, with this many examples each."""

    def __init__(self, names: Sequence[str], max_examples: int) -> None:
        self.names = list(names)
        self.max_examples = max_examples

    def pytest_configure(self, config: pytest.Config) -> None:
        # Imported here, once pytest has loaded Hypothesis's plugin: before, it could not
        # rewrite the plugin's asserts and would warn.
        from hypothesis import HealthCheck, settings

        config.stash[SELECTED_METHODS] = self.names
        settings.register_profile(
            HYPOTHESIS_PROFILE,
            max_examples=self.max_examples,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        settings.load_profile(HYPOTHESIS_PROFILE)


def run_checks(names: Sequence[str], *, max_examples: int = 100) -> int:
    """Run every conformance check on the registered methods ``names``, with pytest's report
    on stdout; pytest's exit code (0 when every check passed, 1 when one failed).

    Hypothesis tries ``max_examples`` batches per check, the same ones on every run
    (derandomised), so that a pass or a failure is reproducible; it keeps no example database
    and has no deadline, since a shared machine makes timings noisy. This sets Hypothesis's
    default settings for the rest of the process.
    """
    args = [
        str(CHECKS),
        "-v",  # one line per check and method: what passed is as plain as what failed
        "-rfEs",  # and the reason of every skip (a check that does not apply to the method)
        "--import-mode=importlib",  # leaves sys.path alone; the default would prepend a folder
        "-p",
        "no:cacheprovider",  # writes no .pytest_cache beside the installed package
    ]
    return int(pytest.main(args, plugins=[_CheckOnly(names, max_examples)]))
