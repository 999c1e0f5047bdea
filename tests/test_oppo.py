"""OPPO: the value recursion's invariants (note §1.9), direction anchoring, and which passes
the method asks the harness for (self-oracle vs teacher-oracle)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.methods.core import group_mean_std, masked_mean
from creditbench.methods.grpo import grpo_advantages
from creditbench.methods.oppo import (
    OPPO,
    OPPOConfig,
    anchor,
    evidence,
    log_odds,
    oppo_advantages,
    value_advantages,
)
from creditbench.methods.registry import get_method

from fakes import FakeServices
from strategies import build_batch, rollout_batches

F64 = torch.float64
REMAINDER = 0.0482  # max|σ''| / 2 = 1 / (12 √3) ≈ 0.04811


@st.composite
def recursions(draw: st.DrawFn, max_evidence: float = 4.0, max_prior: float = 6.0):
    """``(prior [B], delta [B, T], mask [B, T], rewards [B])`` in float64; rows of >= 1 token."""
    size, width = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    value = st.floats(-max_evidence, max_evidence, allow_nan=False)
    delta = torch.tensor([[draw(value) for _ in range(width)] for _ in range(size)], dtype=F64)
    lengths = torch.tensor([draw(st.integers(1, width)) for _ in range(size)])
    mask = (torch.arange(width) < lengths.unsqueeze(-1)).to(F64)
    prior = torch.tensor(
        [draw(st.floats(-max_prior, max_prior, allow_nan=False)) for _ in range(size)], dtype=F64
    )
    rewards = torch.tensor([float(draw(st.integers(0, 1))) for _ in range(size)], dtype=F64)
    return prior, delta * mask, mask, rewards


def _values(prior: torch.Tensor, ell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """V_{t-1} and V_t, both ``[B, T]``."""
    prev = torch.cat([prior.unsqueeze(-1), ell[:, :-1]], dim=-1)
    return torch.sigmoid(prev), torch.sigmoid(ell)


def _last(mask: torch.Tensor) -> torch.Tensor:
    return mask.sum(-1).long() - 1


# --------------------------------------------------------------------------------------------
# The recursion (pure functions)
# --------------------------------------------------------------------------------------------


@given(recursions())
def test_log_odds_add_up_the_evidence(case) -> None:
    prior, delta, mask, _ = case
    ell = log_odds(prior, delta, mask)
    torch.testing.assert_close(ell - prior.unsqueeze(-1), delta.cumsum(-1), rtol=0, atol=1e-12)
    # logit V_t − ℓ_0 is the summed evidence, read back through the sigmoid
    v = torch.sigmoid(ell)
    torch.testing.assert_close(torch.logit(v), ell, rtol=1e-9, atol=1e-9)


@given(recursions(), st.sampled_from(["none", "outcome", "spread"]))
def test_advantages_telescope(case, terminal: str) -> None:
    prior, delta, mask, rewards = case
    ell = log_odds(prior, delta, mask)
    adv = value_advantages(prior, ell, mask, rewards, terminal)
    v0 = torch.sigmoid(prior)
    v_last = torch.sigmoid(ell.gather(-1, _last(mask).unsqueeze(-1)).squeeze(-1))
    target = (v_last if terminal == "none" else rewards) - v0
    torch.testing.assert_close(adv.sum(-1), target, rtol=0, atol=1e-12)
    assert (adv[mask == 0] == 0).all()


@given(recursions())
def test_sign_magnitude_and_first_order_bounds(case) -> None:
    prior, delta, mask, _ = case
    ell = log_odds(prior, delta, mask)
    adv = value_advantages(prior, ell, mask, terminal="none")
    v_prev, _ = _values(prior, ell)
    # sign(A_t) = sign(δ_t): never opposite, and equal wherever the change is resolvable
    assert (adv * delta >= 0).all()
    weight = v_prev * (1 - v_prev)
    resolvable = weight * delta.abs() > 1e-12
    assert torch.equal(torch.sign(adv[resolvable]), torch.sign(delta[resolvable]))
    assert (adv.abs() <= delta.abs() / 4 + 1e-15).all()
    remainder = (adv - weight * delta).abs()
    assert (remainder <= REMAINDER * delta**2 + 1e-12).all()
    # the exact closed form p(1-p)(e^δ - 1) / (1 + p(e^δ - 1))
    closed = weight * torch.expm1(delta) / (1 + v_prev * torch.expm1(delta))
    torch.testing.assert_close(adv, closed * mask, rtol=1e-6, atol=1e-12)


@given(recursions(), st.sampled_from(["outcome", "none"]))
def test_uninformative_oracle_gives_no_credit_before_the_terminal_step(case, terminal) -> None:
    prior, delta, mask, rewards = case
    zero = torch.zeros_like(delta)
    adv = value_advantages(prior, log_odds(prior, zero, mask), mask, rewards, terminal)
    last = _last(mask)
    before = torch.arange(mask.shape[-1]) < last.unsqueeze(-1)
    assert (adv[before] == 0).all()
    expected = rewards - torch.sigmoid(prior) if terminal == "outcome" else 0 * rewards
    torch.testing.assert_close(adv.gather(-1, last.unsqueeze(-1)).squeeze(-1), expected)


@given(
    recursions(max_evidence=50.0),
    st.floats(0.05, 5.0),
    st.floats(0.0, 0.99),
)
def test_decayed_log_odds_stay_within_c_over_one_minus_gamma(case, clip, decay) -> None:
    prior, raw, mask, _ = case
    delta = evidence(raw, torch.zeros_like(raw), mask, clip)
    assert (delta.abs() <= clip).all()
    ell = log_odds(prior, delta, mask, decay)
    assert ((ell - prior.unsqueeze(-1)).abs() <= clip / (1 - decay) + 1e-9).all()
    # γ = 1 is the plain running sum, and the loop agrees with it as γ -> 1
    near = log_odds(prior, delta, mask, 1 - 1e-12)
    torch.testing.assert_close(near, log_odds(prior, delta, mask), rtol=0, atol=1e-8)


def test_decay_skips_a_masked_prefix() -> None:
    """Loss-free positions carry the log-odds unchanged: they neither add evidence nor decay."""
    delta = torch.tensor([[9.0, 9.0, 1.0, 1.0]], dtype=F64)
    mask = torch.tensor([[0.0, 0.0, 1.0, 1.0]], dtype=F64)
    ell = log_odds(torch.zeros(1, dtype=F64), delta, mask, decay=0.5)
    torch.testing.assert_close(ell, torch.tensor([[0.0, 0.0, 1.0, 1.5]], dtype=F64))


def test_worked_example() -> None:
    """V_0 = 1/2, evidence (ln 3, 0): V = (3/4, 3/4), A = (1/4, 0); failed, so V_T := 0 puts
    -3/4 on the last token, and anchoring by R - r̄ < 0 turns the first token to -1/4."""
    delta = torch.tensor([[math.log(3.0), 0.0]], dtype=F64)
    mask = torch.ones(1, 2, dtype=F64)
    prior = torch.zeros(1, dtype=F64)
    ell = log_odds(prior, delta, mask)
    plain = value_advantages(prior, ell, mask, terminal="none")
    torch.testing.assert_close(plain, torch.tensor([[0.25, 0.0]], dtype=F64))
    rewards = torch.zeros(1, dtype=F64)
    outcome = value_advantages(prior, ell, mask, rewards, "outcome")
    torch.testing.assert_close(outcome, torch.tensor([[0.25, -0.75]], dtype=F64))
    anchored = anchor(outcome, torch.tensor([-0.5], dtype=F64))
    torch.testing.assert_close(anchored, torch.tensor([[-0.25, -0.75]], dtype=F64))
    masked = anchor(outcome, torch.tensor([-0.5], dtype=F64), "mask")
    torch.testing.assert_close(masked, torch.tensor([[0.0, -0.75]], dtype=F64))


def test_prior_is_the_clamped_group_success_rate() -> None:
    """An all-correct group starts at V_0 = 1 - 1e-4: the first token's credit is at most
    1e-4 e^|δ|, and with no evidence every token's credit is 0 (R = r̄ after anchoring)."""
    delta = torch.tensor([[2.0, -1.0], [0.5, 0.5]], dtype=F64)
    mask = torch.ones(2, 2, dtype=F64)
    rewards, groups = torch.ones(2, dtype=F64), torch.zeros(2, dtype=torch.long)
    free = oppo_advantages(delta, rewards, groups, mask, terminal="none", anchoring="none")
    assert (free[:, 0].abs() <= 1e-4 * delta[:, 0].abs().exp()).all()
    assert (oppo_advantages(delta, rewards, groups, mask) == 0).all()
    # a mixed group of four with one success: V_0 = 1/4, so the success's total is 3/4
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64)
    zero = torch.zeros(4, 3, dtype=F64)
    adv = oppo_advantages(zero, rewards, torch.zeros(4, dtype=torch.long), torch.ones(4, 3))
    torch.testing.assert_close(adv.sum(-1), torch.tensor([0.75, -0.25, -0.25, -0.25], dtype=F64))


# --------------------------------------------------------------------------------------------
# Anchoring through the method
# --------------------------------------------------------------------------------------------


@given(rollout_batches(), st.sampled_from(["sign", "mask"]), st.sampled_from(["self", "teacher"]))
def test_anchoring_never_opposes_the_outcome(batch, anchoring, oracle) -> None:
    adv = OPPO(anchoring=anchoring, oracle=oracle).advantages(batch, FakeServices())
    mean, _, _ = group_mean_std(batch.rewards, batch.group_ids)
    direction = torch.sign(batch.rewards - mean).unsqueeze(-1)
    assert (adv * direction >= 0).all()
    assert (adv[(direction == 0).expand_as(adv)] == 0).all()
    if anchoring == "sign":  # the magnitude is OPPO's
        free = OPPO(anchoring="none", oracle=oracle).advantages(batch, FakeServices())
        moved = direction != 0
        torch.testing.assert_close((adv.abs() * moved), (free.abs() * moved))


# --------------------------------------------------------------------------------------------
# Services: which passes are asked for
# --------------------------------------------------------------------------------------------


@dataclass
class RecordingServices(FakeServices):
    """FakeServices that also keep the prompts each scoring pass was given."""

    asked: list[tuple[str, Any]] = field(default_factory=list)

    def score(self, batch, prompts=None, model="policy"):
        self.asked.append((model, None if prompts is None else list(prompts)))
        return super().score(batch, prompts, model)


def _batch():
    return build_batch([3, 2], [4, 2, 5, 3, 3], [1.0, 0.0, 0.0, 1.0, 0.0], seed=7)


def test_self_oracle_scores_the_policy_once_under_the_oracle_hint() -> None:
    batch, services = _batch(), RecordingServices()
    adv = OPPO().advantages(batch, services)
    hinted = FakeServices().variant(batch, "oracle_hint")
    assert services.calls == ["variant:oracle_hint", "score:policy"]
    assert services.asked == [("policy", hinted)]
    # the denominator is the behaviour log-prob already in the batch
    mask = batch.response_mask
    delta = evidence(FakeServices().score(batch, hinted), batch.old_logprobs, mask, 3.0)
    expected = oppo_advantages(delta, batch.rewards, batch.group_ids, mask)
    torch.testing.assert_close(adv, expected)
    shifted = build_batch([3, 2], [4, 2, 5, 3, 3], [1.0, 0.0, 0.0, 1.0, 0.0], seed=7)
    shifted.old_logprobs = shifted.old_logprobs - 0.7
    assert not torch.allclose(OPPO().advantages(shifted, FakeServices()), adv)


def test_teacher_oracle_scores_plain_and_hinted_prompts_with_the_teacher() -> None:
    batch, services = _batch(), RecordingServices()
    adv = OPPO(oracle="teacher").advantages(batch, services)
    hinted = FakeServices().variant(batch, "oracle_hint")
    assert sorted(services.asked, key=repr) == sorted(
        [("teacher", None), ("teacher", hinted)], key=repr
    )
    assert "score:policy" not in services.calls
    # the behaviour log-probs play no part: both terms are the teacher's
    batch.old_logprobs = batch.old_logprobs - 0.7
    torch.testing.assert_close(OPPO(oracle="teacher").advantages(batch, FakeServices()), adv)
    cheaper = RecordingServices()
    OPPO(oracle="teacher", teacher_denominator="policy").advantages(batch, cheaper)
    assert cheaper.asked == [("teacher", hinted)]


def test_an_uninformative_oracle_leaves_only_the_terminal_credit() -> None:
    class SamePrompt(FakeServices):
        def score(self, batch, prompts=None, model="policy"):
            return super().score(batch, None, model)

    batch = _batch()
    adv = OPPO(oracle="teacher").advantages(batch, SamePrompt())
    last = _last(batch.response_mask)
    before = torch.arange(batch.response_mask.shape[-1]) < last.unsqueeze(-1)
    assert (adv[before] == 0).all()
    assert (adv.gather(-1, last.unsqueeze(-1)) != 0).all()


def test_base_mix_and_whitening() -> None:
    batch = _batch()
    mixed = OPPO(base_mix=1.0).advantages(batch, FakeServices())
    expected = grpo_advantages(batch.rewards, batch.response_mask, batch.group_ids)
    torch.testing.assert_close(mixed, expected)
    white = OPPO(whiten=True).advantages(batch, FakeServices())
    assert abs(float(masked_mean(white, batch.response_mask))) < 1e-5


def test_needs_services_and_registered() -> None:
    assert get_method("oppo") is OPPO
    with pytest.raises(ValueError, match="services"):
        OPPO().advantages(_batch(), None)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("oracle", "bogus"),
        ("teacher_denominator", "student"),
        ("prior_eps", 0.0),
        ("decay", 1.5),
        ("evidence_clip", -1.0),
        ("terminal", "rescale"),
        ("anchoring", "flip"),
        ("base_mix", 2.0),
    ],
)
def test_bad_options_name_the_field(name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"^{name}: .*got"):
        OPPOConfig(**{name: value})


# --------------------------------------------------------------------------------------------
# Hosts: "GRPO + OPPO" and "DAPO + OPPO" (methods/compose.py)


def test_dapo_host_brings_dapos_fields_and_defaults() -> None:
    from creditbench.harness.config import build_method_config
    from creditbench.methods.dapo import DAPO, DAPOConfig
    from creditbench.methods.grpo import GRPO

    config = build_method_config(OPPO, {"base": "dapo", "oracle": "teacher"})
    assert isinstance(config, OPPOConfig) and config.oracle == "teacher"
    host = OPPO(config).host
    assert isinstance(host, DAPO) and host.config == DAPOConfig()
    assert (host.config.eps_high, host.config.aggregation) == (0.28, "token-mean")
    assert host.config.dynamic_sampling and host.config.overlong_shaping
    grpo_hosted = OPPO(build_method_config(OPPO, {}))
    assert isinstance(grpo_hosted.host, GRPO) and type(grpo_hosted.host) is GRPO
    assert (grpo_hosted.config.base, grpo_hosted.host.config.eps_high) == ("grpo", 0.2)
    assert grpo_hosted.host.config.aggregation == "seq-mean-token-mean"


def test_host_options_reach_the_host_and_are_checked_by_its_config() -> None:
    from creditbench.harness.config import ConfigError, build_method_config

    config = build_method_config(OPPO, {"base": "dapo", "host": {"eps_high": 0.3}})
    assert OPPO(config).host.config.eps_high == 0.3
    assert not hasattr(config, "eps_high")  # OPPO's Config holds OPPO's fields, not the host's
    with pytest.raises(ConfigError, match=r"^method_options\.host\.eps_high: .*got"):
        build_method_config(OPPO, {"host": {"eps_high": -1.0}})
    with pytest.raises(
        ConfigError, match=r"^method_options\.host\.overlong_shaping: not an option of grpo"
    ):
        build_method_config(OPPO, {"host": {"overlong_shaping": False}})
    assert OPPO(base="grpo", host={"kl_coef": 0.1}).needs_reference  # the host's KL term


def test_an_unknown_host_or_a_mismatched_config_names_the_field() -> None:
    from creditbench.harness.config import ConfigError, build_method_config

    with pytest.raises(ConfigError, match=r"^method_options\.base: must be one of grpo, dapo"):
        build_method_config(OPPO, {"base": "gspo"})
    with pytest.raises(ValueError, match="^base: must be one of grpo, dapo"):
        OPPOConfig(base="ppo")


def test_dapo_host_samples_with_dynamic_sampling() -> None:
    """DAPO's rollout runs: every group of the batch has mixed rewards."""
    services = FakeServices(seed=3)
    batch = OPPO(base="dapo").rollout(services)
    assert services.calls.count("sample_batch") >= 1
    _, std, _ = group_mean_std(batch.rewards, batch.group_ids, std_kind="population")
    assert (std > 0).all()
    grpo_services = FakeServices(seed=3)
    OPPO().rollout(grpo_services)
    assert grpo_services.calls == ["sample_batch"]


def test_dapo_host_scores_the_shaped_reward_and_trains_on_dapos_responses() -> None:
    """R is the task reward plus DAPO's overlong punishment; an all-equal group gets 0."""
    # groups: [1, 0, 0] mixed, [1, 1] all-correct; lengths near the limit of 8 are penalised
    batch = build_batch([3, 2], [8, 2, 5, 3, 8], [1.0, 0.0, 0.0, 1.0, 1.0], seed=7)
    services = FakeServices(max_new_tokens=8)
    hosted = OPPO(base="dapo", anchoring="none")
    shaped = hosted.outcome_rewards(batch, services)
    assert shaped[0] < 1.0 and shaped[1] == 0.0 and shaped[4] < 1.0
    adv = hosted.advantages(batch, services)
    mask = batch.response_mask
    hinted = FakeServices().score(batch, FakeServices().variant(batch, "oracle_hint"))
    delta = evidence(hinted, batch.old_logprobs, mask, 3.0)
    expected = oppo_advantages(delta, shaped, batch.group_ids, mask, anchoring="none")
    torch.testing.assert_close(adv[:3], expected[:3])
    assert (adv[3:] == 0).all() and (expected[3:] != 0).any()
    no_shaping = OPPO(base="dapo", host={"overlong_shaping": False})
    torch.testing.assert_close(no_shaping.outcome_rewards(batch, services), batch.rewards)


def test_dapo_host_uses_dapos_loss_and_mixes_with_dapos_advantage() -> None:
    from creditbench.methods.dapo import DAPO

    batch = build_batch([3, 2], [4, 2, 5, 3, 3], [1.0, 0.0, 0.0, 1.0, 0.0], seed=7)
    services = FakeServices()
    hosted = OPPO(base="dapo", base_mix=1.0)
    torch.testing.assert_close(
        hosted.advantages(batch, services), DAPO().advantages(batch, services)
    )
    logprobs = batch.old_logprobs + 0.1 * batch.response_mask
    adv = torch.randn(batch.response_mask.shape, generator=torch.Generator().manual_seed(0))
    adv = adv * batch.response_mask
    ours, _ = hosted.loss(logprobs, batch, adv, services=services)
    dapos, _ = DAPO().loss(logprobs, batch, adv, services=services)
    grpo_hosted, _ = OPPO().loss(logprobs, batch, adv, services=services)
    torch.testing.assert_close(ours, dapos)
    assert not torch.allclose(ours, grpo_hosted)  # token-mean and clip-higher differ
