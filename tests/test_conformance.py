"""The contract every registered method keeps, checked on random batches.

The checks live in the installed package, `creditbench.harness.conformance.checks`, so that
``creditbench conformance NAME`` runs the very same ones on a method outside this repository.
Importing them here is how pytest collects them with the tests; their `pytest_generate_tests`
comes along and parametrises them over every registered method, a method added later included.
"""

from __future__ import annotations

import pytest

from creditbench.harness.conformance.checks import *  # noqa: F403 (every check, by design)
from creditbench.methods import registry
from creditbench.methods.registry import UnknownMethodError, get_method, list_methods


def test_unknown_method_lists_the_known_ones() -> None:
    with pytest.raises(UnknownMethodError) as info:
        get_method("no-such-method")
    message = str(info.value)
    assert "no-such-method" in message
    for name in list_methods():
        assert name in message


def test_the_behaviour_logprob_check_catches_a_method_that_reads_them() -> None:
    """A method that says it never reads ``old_logprobs`` but does fails the check."""
    from creditbench.harness.conformance import checks
    from creditbench.methods.grpo import GRPO

    class Peeking(GRPO):
        name = "peeking"

        def advantages(self, batch, services=None):
            return super().advantages(batch, services) + 0.0 * batch.old_logprobs

    registry._REGISTRY["peeking"] = Peeking
    try:
        with pytest.raises(AssertionError) as failed:
            checks.test_a_method_that_skips_the_scoring_pass_never_reads_behaviour_logprobs(
                "peeking", 0
            )
        # the failure says which promise broke and how to fix it, not "Tensor-likes ..." alone
        message = str(failed.value)
        assert message.startswith("broken promise: Needs(behaviour_logprobs=False)")
        assert "Fix: set Needs(behaviour_logprobs=True)" in message
    finally:
        del registry._REGISTRY["peeking"]


@pytest.mark.parametrize("lie", ["continues", "unfiltered", "unbounded"])
def test_the_group_filter_check_catches_a_rollout_that_does_more(lie: str) -> None:
    """A method whose declared filter is not what its rollout does fails the check: one that
    asks for continuations, one that keeps unmixed groups, one past its bound."""
    from creditbench.harness.conformance import checks
    from creditbench.methods.contract import MIXED_GROUPS, GroupFilter
    from creditbench.methods.dapo import DAPO

    class Lying(DAPO):
        name = "lying"

        def rollout(self, services):
            if lie == "continues":
                services.generate(["x"])
            if lie == "unbounded":
                for _ in range(3):
                    services.sample_batch()
            return services.sample_batch()

        def group_filter(self):
            return GroupFilter(MIXED_GROUPS, max_batches=2)

    registry._REGISTRY["lying"] = Lying
    try:
        with pytest.raises(AssertionError):
            for seed in range(3):
                checks.test_a_declared_group_filter_is_what_the_rollout_does("lying", seed)
    finally:
        del registry._REGISTRY["lying"]


def test_the_direction_check_catches_a_flipped_sign() -> None:
    """GRPO with its advantages negated passes every structural check but pushes away from
    what the verifier prefers: the direction check fails it."""
    from creditbench.harness.conformance import checks
    from creditbench.methods.grpo import GRPO

    class Flipped(GRPO):
        name = "flipped"

        def advantages(self, batch, services=None):
            return -super().advantages(batch, services)

    registry._REGISTRY["flipped"] = Flipped
    try:
        with pytest.raises(AssertionError, match="the update would push away"):
            checks.test_direction_a_passed_response_gets_more_credit("flipped")
        checks.test_equivariant_under_permuting_groups("flipped")  # the old checks pass it
    finally:
        del registry._REGISTRY["flipped"]


def test_the_reduction_checks_catch_a_method_that_ignores_its_knob() -> None:
    """TEMPO that declares λ = 0 is GRPO but never reads λ is GRPO everywhere: the declared
    reduction holds, and the check that its defaults differ from GRPO fails it."""
    from creditbench.harness.conformance import checks
    from creditbench.methods.grpo import GRPO
    from creditbench.methods.tempo import TEMPO

    class Deaf(TEMPO):
        name = "deaf"

        def advantages(self, batch, services=None):
            return GRPO.advantages(self, batch, services)

    registry._REGISTRY["deaf"] = Deaf
    try:
        checks.test_reduction_a_declared_reduction_gives_the_targets_advantages("deaf")
        with pytest.raises(AssertionError, match="change nothing. Does the method read them"):
            checks.test_reduction_the_defaults_differ_from_the_target("deaf")
    finally:
        del registry._REGISTRY["deaf"]


def test_the_reduction_check_catches_a_wrong_declaration() -> None:
    """A reduction the options do not give (TEMPO at λ = 0.5 is not GRPO) fails."""
    from creditbench.harness.conformance import checks
    from creditbench.methods.contract import Reduction
    from creditbench.methods.tempo import TEMPO

    class Boastful(TEMPO):
        name = "boastful"
        reduces_to = (Reduction("grpo", {"td_weight": 0.5}, "a wrong claim"),)

    registry._REGISTRY["boastful"] = Boastful
    try:
        with pytest.raises(AssertionError, match="should give grpo's advantages"):
            checks.test_reduction_a_declared_reduction_gives_the_targets_advantages("boastful")
    finally:
        del registry._REGISTRY["boastful"]


def test_every_method_keeps_the_direction_promise_or_says_why_not() -> None:
    """Each registered method either is checked for direction or gives a reason of substance
    for its opt-out (the meaning checks' part (c))."""
    for name, cls in list_methods().items():
        reason = cls.opt_outs.get("direction", "")
        assert set(cls.opt_outs) <= {"direction"}, f"{name}: unknown opt-out"
        assert not cls.opt_outs or len(reason.split()) >= 12, f"{name}: say why, in a sentence"
