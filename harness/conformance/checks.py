"""The contract every method keeps, checked on random batches.

Each check takes the method's registry ``name``; `pytest_generate_tests` parametrises it over
the methods `runner.run_checks` was asked to check, or over every registered method when pytest
runs this module (or a test module that imports its checks) directly, so a method added later
is checked with no new test code. A method is built with its default config and gets
:class:`~creditbench.harness.conformance.fakes.FakeServices`; batches carry the step ground
truth a method lists in ``Needs.step_truth``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import sys

import pytest
import torch
from hypothesis import assume, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from torch import Tensor

from creditbench.harness.conformance.fakes import FakeServices
from creditbench.harness.conformance.runner import SELECTED_METHODS
from creditbench.harness.conformance.strategies import (
    pad_more,
    permute_groups,
    permute_within_groups,
    perturb_group_rewards,
    rollout_batches,
)
from creditbench.methods.base import CreditMethod, LossConfig
from creditbench.methods.contract import ALL_GROUPS, MIXED_GROUPS, STEP_TRUTH_KEYS
from creditbench.methods.core import Normalizers, RolloutBatch
from creditbench.methods.registry import get_method, list_methods, register_method

seeds = st.integers(0, 2**31 - 1)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every check that takes a method ``name`` once per method to check, and every check
    that takes ``reducing`` once per such method that declares a `Reduction`."""
    selected = metafunc.config.stash.get(SELECTED_METHODS, None)
    names = list(list_methods()) if selected is None else selected
    if "name" in metafunc.fixturenames:
        metafunc.parametrize("name", names)
    if "reducing" in metafunc.fixturenames:
        metafunc.parametrize("reducing", [n for n in names if get_method(n).reduces_to])


@functools.cache
def batches_for(
    name: str, min_groups: int = 1, binary: bool = False
) -> st.SearchStrategy[RolloutBatch]:
    """Batches a method can take: with extras if it reads them, with or without otherwise;
    with ``binary``, pass/fail rewards only."""
    cls = get_method(name)
    extras = True if cls.needs.step_truth else None
    return rollout_batches(
        extras=extras,
        statistics=cls.needs.behaviour_statistics,
        min_groups=min_groups,
        binary=binary,
    )


def advantages_of(name: str, batch: RolloutBatch) -> Tensor:
    return get_method(name)().advantages(batch, FakeServices())


# What each check asks of a method, and where the fix usually lies: a failure names the promise
# the method broke, not the tensors that differed.
PROMISES = {
    "within_groups": (
        "reordering a group's responses reorders their advantages and changes nothing else",
        "compute from each response's own tokens and its group's statistics, never from row "
        "positions",
    ),
    "groups": (
        "reordering the groups, or renaming their ids, changes nothing",
        "treat group_ids as names (torch.unique, masks), never as indices or an order",
    ),
    "leakage": (
        "a group's advantages depend on its own responses only (group_local = True)",
        "compute every statistic per group, or declare group_local = False",
    ),
    "padding": (
        "padding the batch wider changes no advantage",
        "mask every sum, mean and count with response_mask",
    ),
    "blind": (
        "Needs(behaviour_logprobs=False): rollout and advantages never read "
        "batch.old_logprobs (the harness leaves them NaN until the update)",
        "set Needs(behaviour_logprobs=True), or stop reading old_logprobs before the update",
    ),
    "filter": (
        "group_filter() describes the rollout: it keeps whole groups of plain batches",
        "make the rollout match the declared filter, or return None from group_filter()",
    ),
    "micro_batches": (
        "the loss of a batch split into micro-batches, each given the whole batch's counts, "
        "adds up to the loss of the whole batch",
        "aggregate with the Normalizers passed to loss() instead of this micro-batch's counts",
    ),
}


def assert_same(actual: Tensor, expected: Tensor, promise: str | None = None) -> None:
    """``actual`` equals ``expected`` to the conformance tolerance; when not, with ``promise``
    (a key of :data:`PROMISES`) the error names what the method promised and how to fix it,
    with the first lines of the tensors' difference."""
    try:
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)
    except AssertionError as err:
        if promise is None:
            raise
        what, fix = PROMISES[promise]
        detail = " ".join(line.strip() for line in str(err).strip().splitlines()[:3])
        raise AssertionError(f"broken promise: {what}. Fix: {fix}. ({detail})") from None


# --------------------------------------------------------------------------------------------
# Advantages
# --------------------------------------------------------------------------------------------


@given(data=st.data())
def test_advantages_shape_finite_and_zero_off_mask(name: str, data: st.DataObject) -> None:
    batch = data.draw(batches_for(name))
    before = {key: value.clone() for key, value in vars(batch).items() if isinstance(value, Tensor)}
    before.update({f"extras[{k}]": v.clone() for k, v in (batch.extras or {}).items()})
    adv = advantages_of(name, batch)
    assert adv.shape == batch.response_mask.shape
    assert adv.is_floating_point()
    assert torch.isfinite(adv).all()
    assert (adv[batch.response_mask == 0] == 0).all(), "non-zero advantage on a masked position"
    after = {key: value for key, value in vars(batch).items() if isinstance(value, Tensor)}
    after.update({f"extras[{k}]": v for k, v in (batch.extras or {}).items()})
    for key, value in before.items():
        assert torch.equal(after[key], value), f"advantages() modified batch.{key}"


@given(data=st.data(), seed=seeds)
def test_equivariant_under_permuting_responses_within_a_group(
    name: str, data: st.DataObject, seed: int
) -> None:
    batch = data.draw(batches_for(name))
    permuted, index = permute_within_groups(batch, seed)
    assert_same(advantages_of(name, permuted), advantages_of(name, batch)[index], "within_groups")


@given(data=st.data(), seed=seeds, relabel=st.booleans())
def test_equivariant_under_permuting_groups(
    name: str, data: st.DataObject, seed: int, relabel: bool
) -> None:
    batch = data.draw(batches_for(name))
    permuted, index = permute_groups(batch, seed, relabel=relabel)
    assert_same(advantages_of(name, permuted), advantages_of(name, batch)[index], "groups")


@given(data=st.data())
def test_no_leakage_across_groups(name: str, data: st.DataObject) -> None:
    if not get_method(name).group_local:
        pytest.skip(f"{name} sets group_local = False: its advantages mix groups")
    batch = data.draw(batches_for(name, min_groups=2))
    group = data.draw(st.sampled_from(batch.group_ids.unique().tolist()))
    size = int((batch.group_ids == group).sum())
    dyadic = st.integers(-8, 8).map(lambda k: k / 4)
    new_rewards = data.draw(st.lists(dyadic, min_size=size, max_size=size))
    changed = perturb_group_rewards(batch, group, new_rewards)
    others = batch.group_ids != group
    mine, before = advantages_of(name, changed)[others], advantages_of(name, batch)[others]
    assert_same(mine, before, "leakage")


@given(data=st.data(), extra=st.integers(1, 5), seed=seeds)
def test_independent_of_padding_length(
    name: str, data: st.DataObject, extra: int, seed: int
) -> None:
    batch = data.draw(batches_for(name))
    width = batch.response_mask.shape[-1]
    padded = advantages_of(name, pad_more(batch, extra, seed))
    assert padded.shape == (batch.size, width + extra)
    assert (padded[:, width:] == 0).all()
    assert_same(padded[:, :width], advantages_of(name, batch), "padding")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_method_that_skips_the_scoring_pass_never_reads_behaviour_logprobs(
    name: str, seed: int
) -> None:
    """``Needs(behaviour_logprobs=False)`` lets the harness leave ``old_logprobs`` NaN until
    the update: the method's rollout and advantages must come out the same without them."""
    cls = get_method(name)
    if cls.needs.behaviour_logprobs:
        pytest.skip(f"{name} reads the behaviour log-probs before the update")

    class BlindServices(FakeServices):
        def sample_batch(self) -> RolloutBatch:
            sampled = super().sample_batch()
            return dataclasses.replace(sampled, old_logprobs=sampled.old_logprobs * math.nan)

    batch = cls().rollout(FakeServices(seed=seed))
    blind = dataclasses.replace(batch, old_logprobs=torch.full_like(batch.old_logprobs, math.nan))
    expected = cls().advantages(batch, FakeServices(seed=seed))
    assert_same(cls().advantages(blind, FakeServices(seed=seed)), expected, "blind")
    rolled = cls().rollout(BlindServices(seed=seed))
    assert_same(cls().advantages(rolled, BlindServices(seed=seed)), expected, "blind")


class FreshDraws(FakeServices):
    """Fake services whose every ``sample_batch`` call draws another batch, as the harness
    draws other problems; ``draws`` keeps them."""

    def sample_batch(self) -> RolloutBatch:
        batch = FakeServices(seed=self.seed + 1000 * len(self.calls)).sample_batch()
        self.calls.append("sample_batch")
        self.__dict__.setdefault("draws", []).append(batch)
        return batch


def _groups(batch: RolloutBatch) -> list[frozenset[tuple[tuple[int, ...], float]]]:
    """Each group of ``batch`` as the set of its responses (token ids, reward)."""
    rows = [
        (tuple(batch.response_ids[i][batch.response_mask[i] > 0].tolist()), float(r))
        for i, r in enumerate(batch.rewards)
    ]
    return [
        frozenset(rows[i] for i in torch.nonzero(batch.group_ids == g).flatten().tolist())
        for g in torch.unique(batch.group_ids)
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_declared_group_filter_is_what_the_rollout_does(name: str, seed: int) -> None:
    """A method whose ``group_filter`` says its rollout only keeps whole groups of plain
    batches (so that an engine's own filter can stand in for it) draws nothing but plain
    batches, at most ``max_batches`` of them, and returns whole groups of them, no more groups
    than one batch holds: the first batch itself for ``ALL_GROUPS``; for ``MIXED_GROUPS``,
    only groups whose rewards differ (unless no draw had one)."""
    cls = get_method(name)
    kept = cls().group_filter()
    if kept is None:
        pytest.skip(f"{name} samples its own batch, with no group filter it amounts to")
    services = FreshDraws(seed=seed)
    batch = cls().rollout(services)
    draws = services.__dict__.get("draws", [])
    assert set(services.calls) <= {"sample_batch"}, "a group filter only draws plain batches"
    assert 1 <= len(draws) and (not kept.max_batches or len(draws) <= kept.max_batches)
    drawn = {group for draw in draws for group in _groups(draw)}
    returned = _groups(batch)
    assert set(returned) <= drawn, "the rollout returned rows that are not whole groups"
    assert len(returned) <= len(_groups(draws[0])), "more groups than one batch holds"
    if kept.keep == ALL_GROUPS:
        assert_same(batch.response_ids, draws[0].response_ids, "filter")
        assert_same(batch.rewards, draws[0].rewards, "filter")
        return
    assert kept.keep == MIXED_GROUPS

    def mixed(group: frozenset[tuple[tuple[int, ...], float]]) -> bool:
        return len({reward for _, reward in group}) > 1

    if any(mixed(group) for group in drawn):
        assert all(mixed(group) for group in returned), "an unmixed group was kept"


def response_sums(adv: Tensor, batch: RolloutBatch) -> Tensor:
    """``[B]`` each response's advantages summed over its tokens."""
    return (adv * batch.response_mask).sum(-1)


# 50 examples a method (ours): these two run for every registered method, and a sign error
# shows on the first mixed group; the structural checks above keep the profile's count.
@settings(max_examples=50)
@given(data=st.data())
def test_direction_a_passed_response_gets_more_credit(name: str, data: st.DataObject) -> None:
    """In every group of pass/fail outcomes that differ, no response with the group's best
    outcome (the method's own, after its reward shaping: DAPO's overlong punishment) gets a
    smaller response-summed advantage than one with its worst: the method pushes towards what
    the verifier prefers. Ties are allowed (a method may leave a response's tokens out, as the
    forking-token rule does); a flipped sign is not. A method that cannot promise this says why
    in ``opt_outs["direction"]``."""
    cls = get_method(name)
    if "direction" in cls.opt_outs:
        pytest.skip(f"{name}: {cls.opt_outs['direction']}")
    batch = data.draw(batches_for(name, binary=True))
    method = cls()
    services = FakeServices()
    sums = response_sums(method.advantages(batch, services), batch)
    outcomes = method.outcome_rewards(batch, services)
    for group in batch.group_ids.unique():
        rows = batch.group_ids == group
        scored = outcomes[rows]
        if scored.max() == scored.min():
            continue
        best = sums[rows][scored == scored.max()]
        worst = sums[rows][scored == scored.min()]
        assert float(best.min()) >= float(worst.max()) - 1e-5, (
            f"{name} gives a response with the group's best outcome {float(scored.max()):g} a "
            f"summed advantage of {float(best.min()):+.4g}, below the {float(worst.max()):+.4g} "
            f"of one with its worst {float(scored.min()):g}: the update would push away from "
            "what the verifier prefers. Check the sign of the advantages; a method whose credit "
            'cannot promise this declares opt_outs = {"direction": "why"}'
        )


@settings(max_examples=50)
@given(data=st.data())
def test_reduction_a_declared_reduction_gives_the_targets_advantages(
    reducing: str, data: st.DataObject
) -> None:
    """Under each `Reduction` it declares, the method's advantages are its target's (with the
    target's defaults) on every batch."""
    name = reducing
    batch = data.draw(batches_for(name))
    for reduction in get_method(name).reduces_to:
        reduced = get_method(name)(**dict(reduction.options))
        target = get_method(reduction.target)()
        try:
            assert_same(
                reduced.advantages(batch, FakeServices()), target.advantages(batch, FakeServices())
            )
        except AssertionError as err:
            raise AssertionError(
                f"{name} with {dict(reduction.options)} should give {reduction.target}'s "
                f"advantages ({reduction.source}), but: {err}"
            ) from None


def test_reduction_the_defaults_differ_from_the_target(reducing: str) -> None:
    """With its defaults the method's advantages differ from each declared target's on some
    batch: a method that ignored the option it declares the reduction by would equal its
    target everywhere."""
    name = reducing
    for reduction in get_method(name).reduces_to:

        def differs(batch: RolloutBatch, target: str = reduction.target) -> bool:
            mine = get_method(name)().advantages(batch, FakeServices())
            theirs = get_method(target)().advantages(batch, FakeServices())
            return not torch.allclose(mine, theirs, rtol=1e-4, atol=1e-5)

        try:
            find(batches_for(name), differs, settings=settings(max_examples=300, database=None))
        except NoSuchExample:
            raise AssertionError(
                f"{name}'s defaults give {reduction.target}'s advantages on every batch tried: "
                f"the options {dict(reduction.options)} it declares the reduction by change "
                "nothing. Does the method read them?"
            ) from None


# --------------------------------------------------------------------------------------------
# Loss
# --------------------------------------------------------------------------------------------


def current_logprobs(batch: RolloutBatch, seed: int) -> Tensor:
    """Log-probs of a policy that drifted a little from the behaviour policy, with gradient."""
    gen = torch.Generator().manual_seed(seed)
    drift = 0.1 * torch.randn(batch.old_logprobs.shape, generator=gen)
    return (batch.old_logprobs + drift).clamp(max=-1e-4).requires_grad_(True)


@given(data=st.data(), seed=seeds)
def test_default_loss_is_finite_and_adds_up_over_micro_batches(
    name: str, data: st.DataObject, seed: int
) -> None:
    batch = data.draw(batches_for(name))
    method, services = get_method(name)(), FakeServices()
    adv = method.advantages(batch, services)
    logprobs = current_logprobs(batch, seed)
    loss, stats = method.loss(logprobs, batch, adv, services=services)
    assert loss.shape == ()
    assert torch.isfinite(loss), "loss is not finite"
    assert all(isinstance(v, float) for v in stats.values()), "stats must be plain floats"
    # A loss may reach the policy through a pass of its own (SDPO's top-K distribution) and
    # not through the sampled tokens' log-probs at all: then their gradient is zero.
    (grad,) = torch.autograd.grad(loss, logprobs, allow_unused=True)
    grad = torch.zeros_like(logprobs) if grad is None else grad
    assert torch.isfinite(grad).all(), "gradient is not finite"
    assert (grad[batch.response_mask == 0] == 0).all(), "loss has gradient on a masked position"

    # The loss of a batch split into micro-batches, each given the whole batch's counts (as the
    # trainer counts them: over the method's loss mask), adds up to the loss of the whole batch.
    in_first = torch.tensor([data.draw(st.booleans()) for _ in range(batch.size)])
    normalizers = Normalizers.of(method.loss_mask(batch))
    total = torch.zeros(())
    for part in (in_first, ~in_first):
        if part.any():
            part_loss, _ = method.loss(
                logprobs[part], batch.select(part), adv[part], normalizers, services=services
            )
            total = total + part_loss.detach()
    assert_same(total, loss.detach(), "micro_batches")


@given(data=st.data(), seed=seeds)
def test_a_positive_kl_weight_gets_and_reads_reference_logprobs(
    name: str, data: st.DataObject, seed: int
) -> None:
    """A default Config with a positive KL weight (a ``kl_coef*`` field) says it reads the
    reference (``needs_reference_logprobs``), so the harness keeps a reference model and gives
    every batch its log-probs; and the method's advantages or loss do read them."""
    method, services = get_method(name)(), FakeServices()
    cfg = method.config
    weights = [
        field.name
        for field in dataclasses.fields(cfg)
        if field.name.startswith("kl_coef") and getattr(cfg, field.name) > 0
    ]
    if not weights:
        return
    assert cfg.needs_reference_logprobs, (
        f"{', '.join(weights)} > 0 but Config.needs_reference_logprobs is False: the run would "
        "load no reference model and the KL term would silently be off; extend the property"
    )
    batch = data.draw(batches_for(name))
    # a few tokens: whitening one or two values leaves nothing the reference could move
    assume(batch.response_mask.sum() >= 4)
    gen = torch.Generator().manual_seed(seed)
    logprobs = current_logprobs(batch, seed).detach()

    def outputs(ref: Tensor) -> tuple[Tensor, Tensor]:
        batch.ref_logprobs = ref
        adv = method.advantages(batch, services)
        return adv, method.loss(logprobs, batch, adv, services=services)[0]

    near = (batch.old_logprobs - 0.05).clamp(max=-1e-3)
    far = (near - 1.0 - torch.rand(near.shape, generator=gen)).clamp(max=-1e-3)
    (adv_a, loss_a), (adv_b, loss_b) = outputs(near), outputs(far)
    moved = not torch.allclose(adv_a, adv_b) or not torch.allclose(loss_a, loss_b)
    assert moved, f"{', '.join(weights)} > 0 but neither advantages nor loss read the reference"


# --------------------------------------------------------------------------------------------
# Registry and documentation
# --------------------------------------------------------------------------------------------


def test_registering_a_taken_name_is_an_error(name: str) -> None:
    registered = get_method(name)

    class Impostor(CreditMethod):
        summary = "shadows another method"

    with pytest.raises(ValueError, match=re.escape(name)):
        register_method(name)(Impostor)
    assert get_method(name) is registered


def test_method_is_documented(name: str) -> None:
    cls = get_method(name)
    assert cls.name == name
    assert cls.summary.strip() and "\n" not in cls.summary, "summary must be one line"
    assert "arXiv" in cls.paper, "paper: 'Title (arXiv id)'"
    docs = (sys.modules[cls.__module__].__doc__ or "") + (cls.__dict__.get("__doc__") or "")
    assert "Deviations" in docs, "the method's docstring must say what it chose (Deviations)"
    # the loss settings are a LossConfig, unless the method's loss is another's (a rule hosted
    # on a host method, methods/compose.py)
    assert dataclasses.is_dataclass(cls.Config) and isinstance(cls.Config, type)
    assert issubclass(cls.Config, LossConfig) or cls.loss is not CreditMethod.loss
    assert isinstance(cls(), CreditMethod)
    assert set(cls.needs.step_truth) <= set(STEP_TRUTH_KEYS), "unknown key in Needs.step_truth"
