"""A verl plugin that fails says why, in every process that loads it, whatever verl's log
level: verl itself logs a plugin that fails to import at DEBUG level only (``verl/__init__.py``,
verl 0.9.1), so creditbench's plugin prints one line on stderr. Each check imports verl in a
fresh process, as a Ray worker does; they need verl (the ``engines`` step of ``.ci/run``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("verl", reason="verl 0.9.1 is installed in the engines step of .ci/run")
pytestmark = pytest.mark.engines


def _import_verl(code: str) -> subprocess.CompletedProcess:
    """``import verl`` in a fresh process after ``code``, with verl's own logging at WARN."""
    env = {**os.environ, "VERL_LOGGING_LEVEL": "WARN", "VERL_USE_EXTERNAL_PLUGINS": "auto"}
    script = f"import sys\n{code}\nimport verl\nprint('verl imported')\n"
    return subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )


def test_a_plugin_that_fails_to_import_says_why_and_verl_goes_on():
    broken = "sys.modules['creditbench.harness.services.engines'] = None"
    done = _import_verl(broken)
    assert done.returncode == 0 and "verl imported" in done.stdout  # verl swallows the failure
    lines = [line for line in done.stderr.splitlines() if line.startswith("creditbench:")]
    assert lines == [
        "creditbench: the verl plugin failed to load (ModuleNotFoundError: import of "
        "creditbench.harness.services.engines halted; None in sys.modules)"
    ]


def test_without_verls_trainer_module_the_plugin_names_what_it_dropped_and_the_import_error():
    broken = "sys.modules['verl.trainer.ppo.ray_trainer'] = None"
    check = (
        "\nfrom creditbench.integrations import verl as plugin\n"
        "try:\n    plugin.register('creditbench_tempo_again', 'tempo')\n"
        "except ValueError as err:\n    print('refused:', err)\n"
    )
    done = _import_verl(broken + "\nimport verl" + check)
    assert done.returncode == 0, done.stderr[-2000:]
    why = "ModuleNotFoundError: import of verl.trainer.ppo.ray_trainer halted"
    announced = [line for line in done.stderr.splitlines() if line.startswith("creditbench:")]
    assert len(announced) == 1
    assert "not ktae, tempo, whose credit reads the response ids" in announced[0]
    assert why in announced[0] and "creditbench_tempo" not in announced[0]
    refused = [line for line in done.stdout.splitlines() if line.startswith("refused:")]
    assert len(refused) == 1 and "legacy trainer" in refused[0] and why in refused[0]
