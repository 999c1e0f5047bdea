"""SDPO: who gets a teacher (masking), the distillation signal's zero and direction, the top-K
divergences, the EMA teacher, and which passes the method asks the harness for."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.harness.scoring.scorers import ema_update_
from creditbench.harness.services import HarnessServices
from creditbench.methods.oppo import evidence
from creditbench.methods.registry import get_method
from creditbench.methods.sdpo import (
    SDPO,
    SDPOConfig,
    capped_weight,
    divergence,
    sdpo_token_advantages,
    sibling_index,
    with_tail,
)

from fakes import FakeServices
from strategies import build_batch

F64 = torch.float64
# The one-sample reading that SDPO's defaults were before: the sampled token's advantage under
# the oracle-hint prompt (OPPO's self-oracle evidence).
TOKEN_READING = {"distill": "token", "reprompt": "hint"}


@st.composite
def groups(draw: st.DrawFn):
    """``(rewards [B], group_ids [B])``: 1-3 groups of 1-4 rows, 0/1 rewards, rows shuffled."""
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    ids = torch.tensor([g for g, n in enumerate(sizes) for _ in range(n)])
    ids = ids[
        torch.randperm(len(ids), generator=torch.Generator().manual_seed(draw(st.integers(0, 99))))
    ]
    rewards = torch.tensor([float(draw(st.integers(0, 1))) for _ in range(len(ids))])
    return rewards, ids


def distributions(size: int):
    """Log-probabilities ``[size]`` of a random full distribution (float64)."""
    logits = st.lists(st.floats(-4, 4, allow_nan=False), min_size=size, max_size=size)
    return logits.map(lambda xs: torch.log_softmax(torch.tensor(xs, dtype=F64), -1))


def batch_with(rewards, lengths=None, sizes=None, seed=0):
    sizes = sizes or [len(rewards)]
    lengths = lengths or [3 + i % 3 for i in range(len(rewards))]
    return build_batch(sizes, lengths, rewards, seed=seed)


# --------------------------------------------------------------------------------------------
# Who gets a teacher
# --------------------------------------------------------------------------------------------


@given(groups(), st.booleans())
def test_sibling_is_another_success_of_the_same_group(case, include_self: bool) -> None:
    rewards, ids = case
    sib = sibling_index(rewards, ids, 0.5, include_self)
    for i in range(len(ids)):
        others = [
            j
            for j in range(len(ids))
            if ids[j] == ids[i] and rewards[j] >= 0.5 and (include_self or j != i)
        ]
        if not others:
            assert sib[i] == -1
        else:
            assert int(sib[i]) == others[0]


@given(groups())
def test_rollouts_without_a_successful_sibling_get_no_signal(case) -> None:
    rewards, ids = case
    sizes = torch.bincount(ids).tolist()
    order = ids.argsort(stable=True)
    batch = build_batch(sizes, [4] * len(ids), rewards[order].tolist())
    adv = SDPO(**TOKEN_READING).advantages(batch, FakeServices())
    has = sibling_index(batch.rewards, batch.group_ids) >= 0
    assert (adv[~has] == 0).all()
    # FakeServices' teacher differs from the student on every token: the others all get signal
    assert (adv[has] != 0).any(-1).all() if has.any() else True
    # a lone success has no other success to learn from
    lone = (batch.rewards == 1) & (
        torch.bincount(batch.group_ids, weights=batch.rewards)[batch.group_ids] == 1
    )
    assert (adv[lone] == 0).all()


def test_no_success_in_the_batch_asks_for_no_teacher_pass() -> None:
    services = FakeServices()
    adv = SDPO(**TOKEN_READING).advantages(batch_with([0.0, 0.0, 0.0]), services)
    assert (adv == 0).all() and services.calls == []


# --------------------------------------------------------------------------------------------
# The token-level signal
# --------------------------------------------------------------------------------------------


@given(st.integers(0, 2**16))
def test_a_teacher_equal_to_the_student_gives_zero_signal(seed: int) -> None:
    batch = batch_with([1.0, 1.0, 0.0, 1.0], seed=seed)
    adv = sdpo_token_advantages(batch.old_logprobs, batch.old_logprobs, batch.response_mask, None)
    assert (adv == 0).all()

    class Mirror(FakeServices):  # the "teacher" scores exactly what the student scored
        def score(self, b, prompts=None, model="policy"):
            return b.old_logprobs.clone()

    method = SDPO(**TOKEN_READING)
    adv = method.advantages(batch, Mirror())
    assert (adv == 0).all()
    logprobs = batch.old_logprobs.clone().requires_grad_(True)
    loss, _ = method.loss(logprobs, batch, adv)
    (grad,) = torch.autograd.grad(loss, logprobs)
    assert (grad == 0).all()


@given(st.integers(0, 2**16))
def test_the_update_moves_toward_the_teacher(seed: int) -> None:
    """A token the teacher likes more than the student gets A > 0, and the loss's gradient
    raises its log-prob (descent direction −∂L/∂log π has the sign of A)."""
    batch = batch_with([1.0, 1.0, 0.0], seed=seed)
    services = FakeServices()
    method = SDPO(**TOKEN_READING)
    adv = method.advantages(batch, services)
    teacher = FakeServices().score(batch.select(torch.arange(3)), ["x"] * 3, model="ema")
    mask = batch.response_mask
    torch.testing.assert_close(adv, (teacher - batch.old_logprobs) * mask)
    logprobs = batch.old_logprobs.clone().requires_grad_(True)
    loss, _ = method.loss(logprobs, batch, adv)
    (grad,) = torch.autograd.grad(loss, logprobs)
    on = mask > 0
    assert torch.equal(torch.sign(-grad[on]), torch.sign(adv[on]))
    torch.testing.assert_close(-grad * mask.sum(), adv)  # token-mean, weight 1 on-policy


def test_sampled_token_advantage_is_oppo_self_oracle_evidence() -> None:
    """With the oracle hint as the re-prompt and the current policy as teacher, SDPO's A_t is
    OPPO's δ_t = log π(y_t | x ⊕ y*) − log π(y_t | x) on every rollout that has a teacher."""
    batch = build_batch([4, 3], [5, 2, 6, 4, 3, 3, 1], [1, 0, 1, 0, 0, 1, 0], seed=3)
    services = FakeServices()
    adv = SDPO(teacher="policy", **TOKEN_READING).advantages(batch, services)
    hinted = services.score(batch, services.variant(batch, "oracle_hint"), model="policy")
    delta = evidence(hinted, batch.old_logprobs, batch.response_mask)
    has = sibling_index(batch.rewards, batch.group_ids) >= 0
    torch.testing.assert_close(adv[has], delta[has])
    assert (adv[~has] == 0).all() and (delta[~has] != 0).any()


@given(distributions(5), distributions(5))
def test_sampled_token_gradient_is_unbiased_for_the_reverse_kl(logp, logq) -> None:
    """E_{y~π}[−(log q(y) − log π(y)) ∇ log π(y)] = ∇ KL(π ‖ q) w.r.t. the logits (Prop. 2.1)."""
    logits = logp.clone().requires_grad_(True)
    kl = divergence(torch.log_softmax(logits, -1), logq, 1.0)
    (exact,) = torch.autograd.grad(kl, logits)
    estimate = torch.zeros(5, dtype=F64)
    for y in range(5):
        z = logp.clone().requires_grad_(True)
        log_pi = torch.log_softmax(z, -1)
        adv = sdpo_token_advantages(logq[y], log_pi[y].detach(), torch.ones(()), None)
        (g,) = torch.autograd.grad(-adv * log_pi[y], z)
        estimate += logp[y].exp() * g
    torch.testing.assert_close(estimate, exact, rtol=1e-7, atol=1e-9)


@given(st.lists(st.floats(-30, 30, allow_nan=False), min_size=4, max_size=4))
def test_importance_weight_is_capped_and_detached(drift) -> None:
    old = torch.full((1, 4), -1.0)
    logprobs = (old + torch.tensor([drift])).requires_grad_(True)
    weight = capped_weight(logprobs, old, 2.0)
    assert not weight.requires_grad
    assert (weight <= 2.0).all() and (weight > 0).all()
    expected = torch.tensor(drift).clamp(-20, 20).exp().clamp(max=2.0)
    torch.testing.assert_close(weight[0], expected)


def test_hybrid_weight_interpolates_grpo_and_sdpo() -> None:
    batch = build_batch([3, 2], [3, 4, 2, 3, 3], [1, 1, 0, 0, 1], seed=1)
    sdpo = SDPO(**TOKEN_READING).advantages(batch, FakeServices())
    grpo = SDPO(grpo_weight=1.0, **TOKEN_READING).advantages(batch, FakeServices())
    centred = batch.rewards - torch.tensor([2 / 3] * 3 + [0.5] * 2)
    torch.testing.assert_close(grpo, centred.unsqueeze(-1) * batch.response_mask)
    half = SDPO(grpo_weight=0.25, **TOKEN_READING).advantages(batch, FakeServices())
    torch.testing.assert_close(half, 0.25 * grpo + 0.75 * sdpo)


# --------------------------------------------------------------------------------------------
# Top-K distillation
# --------------------------------------------------------------------------------------------


@given(distributions(6), distributions(6), st.sampled_from([0.0, 0.3, 0.5, 1.0]))
def test_top_k_covering_the_vocabulary_is_the_full_divergence(logp, logq, alpha) -> None:
    full = divergence(logp, logq, alpha)
    index = logp.topk(6).indices  # the student's order; every entry is in
    for tail in (True, False):
        top = divergence(with_tail(logp[index], tail), with_tail(logq[index], tail), alpha)
        torch.testing.assert_close(top, full, rtol=1e-6, atol=1e-8)


@given(distributions(8), distributions(8), st.integers(1, 7))
def test_tail_bucket_closes_the_distribution(logp, logq, k) -> None:
    index = logp.topk(k).indices
    closed = with_tail(logp[index])
    assert closed.shape == (k + 1,)
    torch.testing.assert_close(closed.exp().sum(), torch.tensor(1.0, dtype=F64))
    torch.testing.assert_close(
        with_tail(logp[index], False).exp().sum(), torch.tensor(1.0, dtype=F64)
    )
    for alpha in (0.0, 0.5, 1.0):
        d = divergence(closed, with_tail(logq[index]), alpha)
        assert d >= -1e-12
        assert divergence(closed, closed, alpha).abs() < 1e-12


@given(distributions(5), distributions(5))
def test_alpha_picks_the_divergence(logp, logq) -> None:
    kl = lambda a, b: (a.exp() * (a - b)).sum()  # noqa: E731
    torch.testing.assert_close(divergence(logp, logq, 0.0), kl(logq, logp))
    torch.testing.assert_close(divergence(logp, logq, 1.0), kl(logp, logq))
    torch.testing.assert_close(divergence(logp, logq, 0.5), divergence(logq, logp, 0.5))


def test_the_loss_averages_over_the_distilled_tokens_only() -> None:
    """SDPO's self_distillation_mask: rows without a teacher carry no loss and do not count in
    the token-mean, in the loss and in the normalisers the trainer takes from ``loss_mask``."""
    batch = build_batch([3, 2], [3, 4, 2, 3, 3], [1, 1, 0, 0, 0], seed=2)  # group 2: no success
    services = FakeServices()
    for options in (TOKEN_READING, {}):
        method = SDPO(**options)
        adv = method.advantages(batch, services)
        has = (sibling_index(batch.rewards, batch.group_ids) >= 0).float().unsqueeze(-1)
        torch.testing.assert_close(method.loss_mask(batch), batch.response_mask * has)
        logprobs = batch.old_logprobs.clone().requires_grad_(True)
        loss, _ = method.loss(logprobs, batch, adv, services=services)
        if options is TOKEN_READING:  # on-policy, weight 1: -Σ A log π over distilled tokens
            distilled = batch.response_mask * has
            want = -(adv * logprobs * distilled).sum() / distilled.sum()
            torch.testing.assert_close(loss, want)
    mixed = SDPO(grpo_weight=0.5, **TOKEN_READING)
    mixed.advantages(batch, services)
    torch.testing.assert_close(mixed.loss_mask(batch), batch.response_mask)


def test_top_k_with_no_teacher_in_the_batch_trains_on_nothing() -> None:
    batch = batch_with([0.0, 0.0, 0.0])
    method, services = SDPO(), FakeServices()
    adv = method.advantages(batch, services)
    loss, _ = method.loss(batch.old_logprobs.clone(), batch, adv, services=services)
    assert float(loss) == 0.0 and services.calls == []


def test_top_k_loss_distils_only_rows_with_a_teacher() -> None:
    batch = build_batch([3, 2], [3, 4, 2, 3, 3], [1, 1, 0, 0, 0], seed=2)
    services = FakeServices()
    method = SDPO(distill="topk", reprompt="hint", top_k=4)
    adv = method.advantages(batch, services)
    assert services.calls == [
        "variant:oracle_hint",
        "track_ema:0.05",
        "distribution:policy",
        "distribution:ema",
    ]
    assert batch.extras["sdpo_topk_index"].shape == (*batch.response_mask.shape, 4)
    logprobs = batch.old_logprobs.clone().requires_grad_(True)
    loss, stats = method.loss(logprobs, batch, adv, services=services)
    assert services.calls[-1] == "distribution:policy:grad"
    assert torch.isfinite(loss) and loss > 0 and stats["is_capped_frac"] == 0.0
    (grad,) = torch.autograd.grad(loss, services.last_grad_input)
    has = torch.tensor([True, True, True, False, False])
    assert (grad[~has] == 0).all() and (grad[has].abs().sum(-1) > 0).any()
    # on the response tokens only
    assert (grad[batch.response_mask == 0] == 0).all()


# --------------------------------------------------------------------------------------------
# Passes asked for, options, config errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (  # SDPO's own defaults: a sibling's full attempt, the top-K distribution
            {},
            [
                "decode",
                "variant:solution_hint",
                "track_ema:0.05",
                "distribution:policy",
                "distribution:ema",
            ],
        ),
        (TOKEN_READING, ["variant:oracle_hint", "track_ema:0.05", "score:ema"]),
        (
            {"ema_rate": 0.01, **TOKEN_READING},
            ["variant:oracle_hint", "track_ema:0.01", "score:ema"],
        ),
        ({"teacher": "policy", **TOKEN_READING}, ["variant:oracle_hint", "score:policy"]),
        (
            {"reprompt": "solution", "distill": "token"},
            ["decode", "variant:solution_hint", "track_ema:0.05", "score:ema"],
        ),
    ],
)
def test_passes_asked_for(options, expected) -> None:
    batch = build_batch([3, 2], [3, 4, 2, 3, 3], [1, 0, 1, 0, 0], seed=4)
    services = FakeServices()
    SDPO(**options).advantages(batch, services)
    assert services.calls == expected


def test_solution_reprompt_shows_another_rows_success() -> None:
    batch = build_batch([3], [3, 4, 2], [1, 0, 1], seed=5)
    texts = FakeServices().decode(batch)
    shown: list = []

    class Spy(FakeServices):
        def variant(self, b, kind, hints=None):
            shown.extend(hints)
            return super().variant(b, kind, hints)

    SDPO(reprompt="solution").advantages(batch, Spy())
    assert shown == [texts[2], texts[0], texts[0]]  # row 0 sees row 2, rows 1 and 2 see row 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("teacher", "frozen"),
        ("ema_rate", 1.5),
        ("reprompt", "answer"),
        ("distill", "logit"),
        ("top_k", 0),
        ("alpha", -0.1),
        ("is_clip", 0.0),
        ("adv_clip", -1.0),
        ("grpo_weight", 2.0),
    ],
)
def test_bad_config_names_the_field(field, value) -> None:
    with pytest.raises(ValueError, match=rf"^{field}: .*\(got "):
        SDPOConfig(**{field: value})
    with pytest.raises(ValueError, match="^grpo_weight: needs token"):
        SDPOConfig(distill="topk", grpo_weight=0.5)


def test_registered() -> None:
    assert get_method("sdpo") is SDPO


# --------------------------------------------------------------------------------------------
# The harness side: the EMA copy and the distribution service
# --------------------------------------------------------------------------------------------


@given(st.floats(0, 1), st.integers(0, 999))
def test_ema_update_math(rate: float, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    average = torch.nn.Linear(3, 2)
    for p in (*model.parameters(), *average.parameters()):
        p.data = torch.randn(p.shape, generator=gen)
    before = [p.detach().clone() for p in average.parameters()]
    ema_update_(average, model, rate)
    for old, new, target in zip(before, average.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(new.detach(), (1 - rate) * old + rate * target.detach())


def test_ema_updates_a_tied_weight_once() -> None:
    model = torch.nn.Sequential(torch.nn.Embedding(4, 3), torch.nn.Linear(3, 4, bias=False))
    model[1].weight = model[0].weight
    average = torch.nn.Sequential(torch.nn.Embedding(4, 3), torch.nn.Linear(3, 4, bias=False))
    average[1].weight = average[0].weight
    average[0].weight.data.zero_()
    ema_update_(average, model, 0.5)
    torch.testing.assert_close(average[1].weight, 0.5 * model[0].weight.detach())


@pytest.fixture(scope="module")
def services():
    from creditbench.harness.budget import BudgetMeter
    from creditbench.harness.config import RolloutConfig
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model
    from creditbench.harness.tasks import get_task

    task = get_task("chain", steps=2)
    tokenizer = build_char_tokenizer(task_alphabet(task))
    policy = build_model("nano", tokenizer, seed=0).eval()
    rollout = RolloutConfig(prompts_per_step=2, group_size=2, max_new_tokens=10)
    return HarnessServices(
        task=task,
        policy=policy,
        tokenizer=tokenizer,
        meter=BudgetMeter.for_model(policy, unit="steps", amount=10),
        rollout=rollout,
        micro_batch_size=3,
        seed=0,
    )


def test_ema_model_follows_the_policy_and_is_charged(services) -> None:
    batch = services.sample_batch()
    with pytest.raises(ValueError, match="^model: ema needs track_ema"):
        services.score(batch, model="ema")
    services.track_ema(0.25)
    torch.testing.assert_close(services.score(batch, model="ema"), batch.old_logprobs)
    with pytest.raises(ValueError, match=r"^rate: .*\(got 2"):
        services.track_ema(2.0)
    start = {n: p.detach().clone() for n, p in services.policy.named_parameters()}
    with torch.no_grad():
        for p in services.policy.parameters():
            p.add_(0.1)
    services.on_policy_updated()
    ema = dict(services.scorers.get("ema").named_parameters())
    for name, p in services.policy.named_parameters():
        torch.testing.assert_close(ema[name], 0.75 * start[name] + 0.25 * p.detach())
    flops = services.meter.flops
    services.score(batch, model="ema")
    assert services.meter.flops > flops
    with torch.no_grad():
        for name, p in services.policy.named_parameters():
            p.copy_(start[name])


def test_distribution_agrees_with_score_and_keeps_the_graph(services) -> None:
    batch = services.sample_batch()
    full, index = services.distribution(batch)
    mask = batch.response_mask
    picked = full.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1) * mask
    torch.testing.assert_close(picked, services.score(batch), rtol=1e-5, atol=1e-5)
    top, top_index = services.distribution(batch, top_k=3)
    torch.testing.assert_close(top, full.gather(-1, top_index) * mask.unsqueeze(-1))
    assert (top[..., :-1] >= top[..., 1:]).all()
    flops = services.meter.flops
    again, _ = services.distribution(batch, indices=top_index, grad=True)
    assert services.meter.flops > flops
    torch.testing.assert_close(again.detach(), top)
    again.sum().backward()
    assert any(p.grad is not None for p in services.policy.parameters())
    services.policy.zero_grad(set_to_none=True)
    with pytest.raises(ValueError, match="^grad: only the policy"):
        services.distribution(batch, model="reference", grad=True)
