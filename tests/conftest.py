"""Shared test settings: Hypothesis profiles, one torch thread, a fixed seed per test, the engine
tests collected only in their own step.

Profiles: ``ci`` (200 examples per property, the same examples on every run, no example
database, no deadline), ``dev`` (50, no deadline: shared CPUs make timings noisy) and
``thorough`` (400 fresh examples on every run, twice ``ci``'s and new ones each time, about 12
CPU-minutes over every property: CI's slow step runs them all with it,
``python -m pytest -m property``, so a draw that breaks a property at a float edge is found there
rather than by a newcomer's first ``python -m pytest``; a failure prints the seed and the blob that
replay it). ``HYPOTHESIS_PROFILE`` picks one; otherwise ``ci`` when ``CI`` is set, ``dev`` when not.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile(
    "thorough",
    max_examples=400,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)

# Tiny tensors: more threads only add contention on shared cores.
torch.set_num_threads(1)


def pytest_ignore_collect(collection_path, config):
    """The engine tests import verl and TRL, which the README's test environment lacks: they
    are collected only when ``-m`` selects ``engines`` (their step of ``.ci/run``), where a
    missing engine is an import error, not a skip. Where they are collected the answer is None,
    not False: a False would end the hook's search and override ``--ignore`` and
    ``--ignore-glob`` (the engines step leaves verl's own tests out of its TRL run with one)."""
    if collection_path.name.startswith("test_engine_"):
        selected = "engines" in (config.getoption("markexpr") or "").replace("not engines", "")
        return None if selected else True
    return None


# The smoke subset (``python -m pytest -m smoke``, about a minute on two cores): the method
# contract and its math, configs and the bad-input catalogue, grading, the import rule, the
# leaderboard's statistics, and one short training run replayed against its fixture.
SMOKE_MODULES = {
    "test_core.py",
    "test_contract.py",
    "test_config.py",
    "test_grading.py",
    "test_architecture.py",
    "test_bad_inputs.py",
    "test_leaderboard_stats.py",
}
SMOKE_TESTS = {"test_grpo_replays"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SMOKE_MODULES or item.originalname in SMOKE_TESTS:
            item.add_marker(pytest.mark.smoke)
        # every Hypothesis property, so the slow step can run them all under ``thorough``
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)


@pytest.fixture(autouse=True)
def _fixed_torch_seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def nano_policy(tmp_path_factory):
    """A freshly initialised "nano" policy with the 2-step chain's character tokenizer: the
    smallest model the trainer runs, for tests of the loop rather than of learning."""
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, save_policy
    from creditbench.harness.tasks import get_task

    tokenizer = build_char_tokenizer(task_alphabet(get_task("chain", steps=2)))
    path = tmp_path_factory.mktemp("policy") / "nano"
    return save_policy(build_model("nano", tokenizer, seed=0), tokenizer, path)
