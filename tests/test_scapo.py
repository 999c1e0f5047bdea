"""SCAPO: the drift, the group stability score, and the advantage it lowers (never raises)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.harness.tasks.base import PROMPT_VARIANTS
from creditbench.methods.core import RolloutBatch
from creditbench.methods.grpo import grpo_advantages
from creditbench.methods.registry import get_method
from creditbench.methods.scapo import (
    REWRITES,
    SCAPO,
    scapo_advantages,
    scapo_lambda,
    stability_scores,
    token_drift,
)

from fakes import FakeServices
from strategies import build_batch, rollout_batches

seeds = st.integers(0, 2**31 - 1)


@dataclass
class DriftServices:
    """Services whose rewrite ``k`` lowers every log-prob by a given ``[B, T]`` gap, so the
    drifts a test asks for are known exactly."""

    gaps: dict[str, torch.Tensor]
    step: int = 0
    calls: list[str] = field(default_factory=list)
    budget_fraction: float = 0.0

    def variant(self, batch: RolloutBatch, kind: str, hints=None) -> list[str]:
        self.calls.append(f"variant:{kind}")
        return [kind] * batch.size

    def score(self, batch: RolloutBatch, prompts=None, model: str = "policy") -> torch.Tensor:
        self.calls.append(f"score:{model}")
        return (batch.old_logprobs - self.gaps[prompts[0]]) * batch.response_mask

    def sample_batch(self) -> RolloutBatch:  # pragma: no cover - not used by advantages
        raise NotImplementedError


def random_gaps(batch: RolloutBatch, seed: int, scale: float = 3.0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    shape = batch.response_mask.shape
    return {kind: scale * torch.rand(shape, generator=gen) ** 3 for kind in REWRITES}


def grpo(batch: RolloutBatch) -> torch.Tensor:
    return grpo_advantages(batch.rewards, batch.response_mask, batch.group_ids)


def stability_of(batch: RolloutBatch, gaps: dict[str, torch.Tensor]) -> torch.Tensor:
    # the very drifts SCAPO computes from DriftServices' scores, so that signs of u agree
    old, mask = batch.old_logprobs, batch.response_mask
    drifts = torch.stack([token_drift(old, (old - gaps[k]) * mask) for k in REWRITES])
    return stability_scores(drifts, batch.response_mask, batch.group_ids)


# --------------------------------------------------------------------------------------------
# Registration and config
# --------------------------------------------------------------------------------------------


def test_registered_with_the_papers_defaults() -> None:
    assert get_method("scapo") is SCAPO
    cfg = SCAPO().config
    assert (cfg.eps_low, cfg.eps_high, cfg.aggregation) == (0.2, 0.28, "token-mean")
    assert (cfg.ratio_level, cfg.kl_coef, cfg.lambda0, cfg.sign) == ("token", 0.0, 0.01, "negative")
    assert cfg.rewrites == REWRITES and len(REWRITES) == 4
    assert (cfg.n0_fraction, cfg.n0_steps) == (0.2, None), "N0: 20% of the run, no step count"
    assert set(REWRITES) <= set(PROMPT_VARIANTS), "every rewrite must be a task prompt variant"


@pytest.mark.parametrize(
    ("field_name", "value"),
    [
        ("lambda0", -0.1),
        ("n0_steps", -1),
        ("n0_fraction", -0.1),
        ("n0_fraction", 1.5),
        ("rewrites", ()),
        ("rewrites", ("rewrite_typo", "rewrite_typo")),
        ("zscore_eps", 0.0),
        ("zscore_std", "bessel"),
        ("sign", "both"),
        ("zero_variance_groups", "drop"),
    ],
)
def test_bad_config_names_the_field(field_name: str, value) -> None:
    with pytest.raises(ValueError, match=f"^{field_name}: .*got"):
        SCAPO(**{field_name: value})


def test_needs_services() -> None:
    batch = build_batch([2], [3, 2], [1.0, 0.0])
    with pytest.raises(ValueError, match="services"):
        SCAPO().advantages(batch)


# --------------------------------------------------------------------------------------------
# Drift
# --------------------------------------------------------------------------------------------

logps = st.floats(-30.0, 0.0, allow_nan=False)


@given(a=logps, b=logps)
def test_drift_is_symmetric_bounded_and_the_relative_change(a: float, b: float) -> None:
    la, lb = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    d = token_drift(la, lb)
    assert d == token_drift(lb, la)
    assert 0.0 <= float(d) < 2.0
    # zero exactly when the log-probs agree, down to float64's resolution: a gap of the smallest
    # subnormal (a = 0, b = -5e-324) halves to 0 inside the tanh, a drift below anything a
    # probability can tell apart
    assert (float(d) == 0.0) == (abs(a - b) / 2 == 0.0)
    pa, pb = math.exp(a), math.exp(b)
    assert float(d) == pytest.approx(abs(pa - pb) / ((pa + pb) / 2), rel=1e-9, abs=1e-12)


def test_drift_of_two_zero_probabilities_is_zero() -> None:
    inf = torch.tensor([-math.inf, -math.inf, 0.0])
    other = torch.tensor([-math.inf, 0.0, -math.inf])
    assert token_drift(inf, other).tolist() == [0.0, 2.0, 2.0]


# --------------------------------------------------------------------------------------------
# Stability score
# --------------------------------------------------------------------------------------------


@given(batch=rollout_batches(), seed=seeds)
def test_u_has_mean_zero_and_std_at_most_one_within_each_group(batch, seed: int) -> None:
    u = stability_of(batch, random_gaps(batch, seed)).double()
    mask = batch.response_mask.bool()
    assert (u[~mask] == 0).all()
    for g in batch.group_ids.unique():
        values = u[(batch.group_ids == g).unsqueeze(-1) & mask]
        assert abs(float(values.mean())) < 1e-5
        assert float(values.pow(2).mean().sqrt()) <= 1.0 + 1e-6


@given(batch=rollout_batches(min_groups=2), seed=seeds, other=seeds)
def test_u_of_a_group_ignores_other_groups_and_rewards(batch, seed: int, other: int) -> None:
    gaps = random_gaps(batch, seed)
    mine = batch.group_ids == batch.group_ids[0]
    changed = {k: torch.where(mine.unsqueeze(-1), v, v.flip(0) + 1.0) for k, v in gaps.items()}
    flipped = RolloutBatch(**{**vars(batch), "rewards": 1.0 - batch.rewards})
    torch.testing.assert_close(
        stability_of(flipped, changed)[mine], stability_of(batch, gaps)[mine]
    )


def test_worked_example() -> None:
    """One response of three tokens, drift only on the last: -d z-scores to (1, 1, -2)/sqrt 2,
    which is already standard, so u = (1/sqrt 2, 1/sqrt 2, -sqrt 2) and Ã = A + λ(0, 0, -sqrt 2)
    with A = 0 (a group of one)."""
    batch = build_batch([1], [3], [1.0])
    gaps = {k: torch.tensor([[0.0, 0.0, 1.0]]) for k in REWRITES}
    u = stability_of(batch, gaps)
    r = 1 / math.sqrt(2)
    torch.testing.assert_close(u, torch.tensor([[r, r, -2 * r]]), atol=1e-5, rtol=0)
    got = SCAPO(lambda0=0.5).advantages(batch, DriftServices(gaps))
    torch.testing.assert_close(
        got, torch.tensor([[0.0, 0.0, -0.5 * math.sqrt(2)]]), atol=1e-5, rtol=0
    )


# --------------------------------------------------------------------------------------------
# Advantage
# --------------------------------------------------------------------------------------------


@given(batch=rollout_batches(), seed=seeds, lam=st.sampled_from([0.01, 0.3, 2.0]))
def test_advantage_never_exceeds_grpo_and_equals_it_where_stable(batch, seed, lam) -> None:
    gaps = random_gaps(batch, seed)
    got = SCAPO(lambda0=lam).advantages(batch, DriftServices(gaps))
    base = grpo(batch)
    u = stability_of(batch, gaps)
    mask = batch.response_mask.bool()
    assert (got <= base + 1e-6).all()
    stable = mask & (u >= 0)
    assert torch.equal(got[stable], base[stable])
    unstable = mask & (u < 0)
    torch.testing.assert_close(got[unstable], (base + lam * u)[unstable])


@given(batch=rollout_batches(), seed=seeds, step=st.integers(0, 6), n0=st.integers(0, 4))
def test_after_n0_it_is_grpo_with_no_extra_passes(batch, seed, step, n0) -> None:
    services = DriftServices(random_gaps(batch, seed), step=step)
    got = SCAPO(n0_steps=n0, lambda0=1.0).advantages(batch, services)
    if step >= n0:
        assert torch.equal(got, grpo(batch))
        assert services.calls == []
    else:
        assert len(services.calls) == 2 * len(REWRITES)


# N0 = 20% of the run's budget (§4.1: 120 of 600, 200 of 1,000 policy steps), read from
# services.budget_fraction; the step index says nothing unless n0_steps is set. Each case
# puts the step where a step count of 2 would decide the other way.
@pytest.mark.parametrize(
    ("fraction", "step", "on"),
    [(0.0, 0, True), (0.19, 7, True), (0.2, 0, False), (0.5, 1, False), (1.0, 0, False)],
)
def test_n0_is_a_fifth_of_the_budget_whatever_the_step(fraction, step, on) -> None:
    batch = build_batch([3, 2], [4, 3, 5, 2, 3], [1.0, 0.0, 1.0, 0.0, 1.0])
    gaps = random_gaps(batch, seed=3)
    services = DriftServices(gaps, step=step, budget_fraction=fraction)
    got = SCAPO(lambda0=1.0).advantages(batch, services)
    if on:
        assert len(services.calls) == 2 * len(REWRITES)
        assert not torch.equal(got, grpo(batch))
    else:
        assert services.calls == [] and torch.equal(got, grpo(batch))


def test_a_paper_run_of_600_policy_steps_gets_the_penalty_on_its_first_120() -> None:
    """A budget of 600 optimizer steps: step n (1-based) starts at fraction (n - 1) / 600."""
    on = [scapo_lambda(0.01, (n - 1) / 600, 0.2) > 0 for n in range(1, 601)]
    assert on == [True] * 120 + [False] * 480
    assert SCAPO(n0_fraction=0.5).config.n0_fraction == 0.5


@given(batch=rollout_batches(), fraction=st.floats(0.0, 1.0), step=st.integers(0, 6))
def test_an_explicit_step_count_overrides_the_fraction(batch, fraction, step) -> None:
    services = DriftServices(random_gaps(batch, 0), step=step, budget_fraction=fraction)
    SCAPO(n0_steps=3, lambda0=1.0).advantages(batch, services)
    assert (services.calls != []) == (step < 3)


@given(batch=rollout_batches())
def test_zero_drift_gives_exactly_grpo(batch) -> None:
    zeros = {k: torch.zeros_like(batch.response_mask) for k in REWRITES}
    assert torch.equal(SCAPO(lambda0=1.0).advantages(batch, DriftServices(zeros)), grpo(batch))


@given(batch=rollout_batches(), seed=seeds)
def test_skip_leaves_groups_of_equal_rewards_at_zero(batch, seed: int) -> None:
    gaps = random_gaps(batch, seed)
    got = SCAPO(lambda0=1.0, zero_variance_groups="skip").advantages(batch, DriftServices(gaps))
    applied = SCAPO(lambda0=1.0).advantages(batch, DriftServices(gaps))
    for g in batch.group_ids.unique():
        rows = batch.group_ids == g
        if batch.rewards[rows].unique().numel() == 1:
            assert (got[rows] == 0).all()
        else:
            assert torch.equal(got[rows], applied[rows])


def test_signs_of_the_ablations_and_stop_gradient() -> None:
    adv = torch.zeros(1, 3)
    u = torch.tensor([[1.0, -2.0, 0.5]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert scapo_advantages(adv, u, mask, 1.0).tolist() == [[0.0, -2.0, 0.0]]
    assert scapo_advantages(adv, u, mask, 1.0, sign="positive").tolist() == [[1.0, 0.0, 0.0]]
    assert scapo_advantages(adv, u, mask, 1.0, sign="all").tolist() == [[1.0, -2.0, 0.0]]
    assert not scapo_advantages(adv, u, mask, 1.0).requires_grad


# --------------------------------------------------------------------------------------------
# The passes it asks the harness for
# --------------------------------------------------------------------------------------------


class PromptScoringFakes(FakeServices):
    """FakeServices whose scores also depend on the prompt text, recording the prompts."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.prompts: list[list[str]] = []

    def score(self, batch, prompts=None, model="policy"):
        base = super().score(batch, prompts, model)
        if prompts is None:
            return base
        self.prompts.append(list(prompts))
        shift = torch.tensor([len(p) % 7 / 10 for p in prompts]).unsqueeze(-1)
        return (base - shift) * batch.response_mask


def test_one_policy_scoring_per_rewrite_under_its_variant_prompts() -> None:
    services = PromptScoringFakes(step=0)
    batch = services.sample_batch()
    services.calls.clear()
    got = SCAPO(lambda0=1.0).advantages(batch, services)
    expected = [call for k in REWRITES for call in (f"variant:{k}", "score:policy")]
    assert services.calls == expected
    assert [p[0].split(" of group")[0] for p in services.prompts] == list(REWRITES)
    assert all(len(p) == batch.size for p in services.prompts)
    assert (got <= grpo(batch) + 1e-6).all() and not torch.equal(got, grpo(batch))
    services.budget_fraction, services.calls = 0.2, []
    assert torch.equal(SCAPO().advantages(batch, services), grpo(batch))
    assert services.calls == []
