"""Token gradient cancellation on a tiny tabular softmax policy.

Every response of a group starts with the same token in the same context (context 0,
action 0); after it each response has contexts of its own. The group-relative advantages sum
to zero, so the shared token's gradient cancels exactly when every response gives that token
the same coefficient (notes on arXiv 2604.13088, §1.3 and §1.6):

- token-mean and the constant normaliser of Dr. GRPO cancel, on- and off-policy, as long as
  no clip is active;
- GRPO's 1/|o_i| does not cancel when lengths differ (it does when they are equal);
- GSPO's sequence ratio s_i differs between responses off-policy, so it does not cancel;
- an active clip keeps the gradient of only one sign of advantage, so it does not cancel.

:func:`shared_token_gradient` is the reusable part: it gives the gradient on the shared
context's logits of any loss built from a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch
from torch import Tensor

from creditbench.methods.core import (
    ClipConfig,
    Normalizers,
    RolloutBatch,
    aggregate_loss,
    clipped_surrogate,
    importance_ratio,
)
from creditbench.methods.grpo import grpo_advantages
from creditbench.methods.registry import get_method

VOCAB = 5
LossBuilder = Callable[[Tensor, RolloutBatch], Tensor]
DAPO_CLIP = ClipConfig(eps_low=0.2, eps_high=0.28)


def shared_token_gradient(
    build_loss: LossBuilder,
    lengths: Sequence[int],
    rewards: Sequence[float],
    *,
    drift: float = 0.0,
    shared_drift: float = 0.0,
    seed: int = 0,
) -> Tensor:
    """Gradient ``[V]`` of ``build_loss(logprobs, batch)`` on the logits of the shared context.

    One group of ``G = len(lengths)`` responses from a tabular softmax policy (a logits table
    ``[contexts, V]``, float64). Response ``i`` has ``lengths[i]`` tokens: the shared first
    token (context 0, action 0), then tokens in contexts used by no other token.

    Args:
        build_loss: maps the current policy's log-probs ``[G, T]`` (with gradient) and the
            batch (behaviour log-probs, mask, rewards, one group) to a scalar loss.
        lengths: response lengths, each >= 1.
        rewards: one per response.
        drift: standard deviation of the random change from the behaviour policy's logits to
            the current ones (0: on-policy).
        shared_drift: added to the shared token's logit only (pushes its ratio above 1).
        seed: fixes the behaviour logits, the actions and the drift.
    """
    gen = torch.Generator().manual_seed(seed)
    size, width = len(lengths), max(lengths)
    num_contexts = 1 + sum(n - 1 for n in lengths)
    old_logits = torch.randn(num_contexts, VOCAB, generator=gen, dtype=torch.float64)
    logits = old_logits + drift * torch.randn(
        num_contexts, VOCAB, generator=gen, dtype=torch.float64
    )
    logits[0, 0] += shared_drift
    logits.requires_grad_(True)

    contexts = torch.zeros(size, width, dtype=torch.long)
    actions = torch.randint(0, VOCAB, (size, width), generator=gen)
    actions[:, 0] = 0
    next_context = 1
    for i, n in enumerate(lengths):
        contexts[i, 1:n] = torch.arange(next_context, next_context + n - 1)
        next_context += n - 1
    mask = (torch.arange(width) < torch.tensor(lengths).unsqueeze(-1)).double()

    def token_logprobs(table: Tensor) -> Tensor:
        return table.log_softmax(-1)[contexts, actions] * mask

    batch = RolloutBatch(
        prompt_ids=torch.ones(size, 1, dtype=torch.long),
        prompt_mask=torch.ones(size, 1),
        response_ids=actions * mask.long(),
        response_mask=mask,
        group_ids=torch.zeros(size, dtype=torch.long),
        rewards=torch.tensor(rewards, dtype=torch.float64),
        old_logprobs=token_logprobs(old_logits).detach(),
    )
    (grad,) = torch.autograd.grad(build_loss(token_logprobs(logits), batch), logits)
    return grad[0]


def surrogate(
    aggregation: str,
    *,
    ratio_level: str = "token",
    clip: ClipConfig = DAPO_CLIP,
    scale_by_std: bool = True,
    horizon: float = 64.0,
) -> LossBuilder:
    """The PPO-clip loss with GRPO advantages, built from the core functions."""

    def build(logprobs: Tensor, batch: RolloutBatch) -> Tensor:
        mask = batch.response_mask
        adv = grpo_advantages(batch.rewards, mask, batch.group_ids, scale_by_std=scale_by_std)
        ratio = importance_ratio(logprobs, batch.old_logprobs, mask, ratio_level)  # type: ignore[arg-type]
        per_token, _ = clipped_surrogate(ratio, adv, clip)
        return aggregate_loss(per_token, mask, aggregation, Normalizers.of(mask, horizon))

    return build


UNEQUAL = [5, 9, 13, 20]
EQUAL = [10, 10, 10, 10]
REWARDS = [1.0, 0.0, 1.0, 0.0]
CANCELLING = ["token-mean", "seq-mean-token-sum-norm"]
SMALL_DRIFT = 0.05  # moves every ratio by a few percent: no clip is active
ZERO = 1e-6  # cancelled gradients are ~1e-16 in float64
NOT_ZERO = 1e-5  # uncancelled ones here are 3e-4 and up


def size_of(grad: Tensor) -> float:
    return float(grad.abs().max())


@pytest.mark.parametrize("aggregation", CANCELLING)
@pytest.mark.parametrize("drift", [0.0, SMALL_DRIFT])
@pytest.mark.parametrize("scale_by_std", [True, False])
def test_group_constant_normalisers_cancel(aggregation, drift, scale_by_std) -> None:
    for seed in range(3):
        loss = surrogate(aggregation, scale_by_std=scale_by_std)
        grad = shared_token_gradient(loss, UNEQUAL, REWARDS, drift=drift, seed=seed)
        assert size_of(grad) < ZERO


@pytest.mark.parametrize("drift", [0.0, SMALL_DRIFT])
def test_per_response_length_normaliser_does_not_cancel(drift) -> None:
    loss = surrogate("seq-mean-token-mean")
    assert size_of(shared_token_gradient(loss, UNEQUAL, REWARDS, drift=drift)) > NOT_ZERO


@pytest.mark.parametrize("drift", [0.0, SMALL_DRIFT])
def test_per_response_length_normaliser_cancels_when_lengths_are_equal(drift) -> None:
    loss = surrogate("seq-mean-token-mean")
    assert size_of(shared_token_gradient(loss, EQUAL, REWARDS, drift=drift)) < ZERO


def test_sequence_ratio_does_not_cancel_off_policy() -> None:
    # Equal lengths and wide clip bounds leave sequence coupling as the only cause.
    loss = surrogate("seq-mean-token-mean", ratio_level="sequence", clip=ClipConfig(0.9, 9.0))
    assert size_of(shared_token_gradient(loss, EQUAL, REWARDS)) < ZERO  # on-policy: s_i = 1
    assert size_of(shared_token_gradient(loss, EQUAL, REWARDS, drift=SMALL_DRIFT)) > NOT_ZERO


@pytest.mark.parametrize("aggregation", CANCELLING)
@pytest.mark.parametrize("push", [1.5, -1.5])
def test_active_clip_breaks_cancellation_with_the_predicted_sign(aggregation, push) -> None:
    clip = DAPO_CLIP
    inner = surrogate(aggregation, clip=clip)

    def loss(logprobs: Tensor, batch: RolloutBatch) -> Tensor:
        shared_ratio = (logprobs[:, 0] - batch.old_logprobs[:, 0]).exp()
        outside = shared_ratio > 1 + clip.eps_high if push > 0 else shared_ratio < 1 - clip.eps_low
        assert outside.all(), "the set-up must activate the clip at the shared token"
        return inner(logprobs, batch)

    grad = shared_token_gradient(loss, UNEQUAL, REWARDS, shared_drift=push)
    assert size_of(grad) > NOT_ZERO
    # Above 1 + eps_high only the negative-advantage responses keep their gradient, and
    # descent lowers the shared action's logit (loss gradient > 0); below 1 - eps_low only
    # the positive ones do, and descent raises it (§1.3).
    assert torch.sign(grad[0]) == (1 if push > 0 else -1)


def test_the_helper_takes_a_registered_method() -> None:
    """A method's own loss plugs in; DAPO-style token-mean in GRPO cancels, its default not."""
    grpo = get_method("grpo")

    def method_loss(**overrides) -> LossBuilder:
        method = grpo(**overrides)
        return lambda logprobs, batch: method.loss(logprobs, batch, method.advantages(batch))[0]

    token_mean = shared_token_gradient(method_loss(aggregation="token-mean"), UNEQUAL, REWARDS)
    default = shared_token_gradient(method_loss(), UNEQUAL, REWARDS)
    assert size_of(token_mean) < ZERO
    assert size_of(default) > NOT_ZERO
