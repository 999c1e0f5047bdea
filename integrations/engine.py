"""What an engine adapter takes from the method contract: which methods can compute their credit
from what an engine hands over, and that hand-over as a `RolloutBatch`.

An engine (verl, TRL) samples, scores and trains itself; at the point where it computes
advantages it holds a batch of responses and their outcome rewards, nothing of the harness's
services (continuations, scoring under other prompts, step ground truth). A method runs there
when its credit is a function of that batch alone. Whether it is follows from what the method
declares (`CreditMethod`'s class attributes) and from one probe: its advantages on a small fixed
batch without services, and again with other token ids where the engine gives none.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from creditbench.methods.base import CreditMethod
from creditbench.methods.core import RolloutBatch
from creditbench.methods.registry import get_method, list_methods

# What an engine's advantage call is given besides rewards, masks and groups.
TOKEN_IDS = "response_ids"
VERL_GIVES: frozenset[str] = frozenset()  # verl 0.9: token_level_rewards, response_mask, uid
TRL_GIVES = frozenset({TOKEN_IDS})  # TRL's GRPOTrainer holds the completion ids


def engine_batch(
    rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    *,
    response_ids: Tensor | None = None,
    old_logprobs: Tensor | None = None,
) -> RolloutBatch:
    """A `RolloutBatch` of what an engine holds: rewards ``[B]``, response mask ``[B, T]``,
    group ids ``[B]``, and where it has them the response token ids and the behaviour log-probs
    ``[B, T]``. The prompt is empty (no method that runs in an engine reads it); log-probs it
    does not have are NaN, so that a method reading them fails loudly instead of quietly."""
    size, width = response_mask.shape
    device = response_mask.device
    empty = torch.zeros(size, 0, dtype=torch.long, device=device)
    if response_ids is None:
        response_ids = torch.zeros(size, width, dtype=torch.long, device=device)
    if old_logprobs is None:
        old_logprobs = torch.full((size, width), math.nan, device=device)
    return RolloutBatch(
        prompt_ids=empty,
        prompt_mask=empty,
        response_ids=response_ids,
        response_mask=response_mask.to(torch.float32),
        group_ids=group_ids.to(torch.long),
        rewards=rewards.to(torch.float32),
        old_logprobs=old_logprobs,
    )


def _probe_batch(response_ids: Tensor | None) -> RolloutBatch:
    # two groups of four, one of them mixed and one with a hole in a mask and a short response
    mask = torch.ones(8, 6)
    mask[0, 4:] = 0
    mask[5, 2] = 0
    return engine_batch(
        torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0]),
        mask,
        torch.arange(8) // 4,
        response_ids=response_ids,
    )


def unsupported_reason(method: type[CreditMethod], given: frozenset[str]) -> str | None:
    """Why ``method`` (with its default Config) cannot compute its credit inside an engine whose
    advantage call is given rewards, masks, groups and the fields ``given`` (of
    :data:`TOKEN_IDS`), or None when it can."""
    if method.reference:
        return "it is a reference: its credit needs the task's ground truth"
    if method.requires_extras:
        return f"it reads step ground truth ({', '.join(method.requires_extras)})"
    if method.rollout is not CreditMethod.rollout:
        return (
            "it samples its own batch through the harness (dynamic sampling, continuations, "
            "resets or several roles)"
        )
    if method.needs_behaviour_logprobs:
        return "its credit reads the behaviour log-probs, which an advantage call is not given"
    if method.needs_behaviour_entropy:
        return "its credit reads the behaviour entropy, which an advantage call is not given"
    if method.needs_reference_model:
        return "its credit scores under a reference model"
    ids = torch.arange(48).reshape(8, 6) % 5  # no two responses of a group share a prefix
    instance = method()
    try:
        advantages = instance.advantages(_probe_batch(ids), None)
    except (ValueError, KeyError, NotImplementedError) as err:
        return f"it needs the harness's services ({err})"
    if not bool(torch.isfinite(advantages).all()):
        return "its credit is not finite without the harness's services"
    if TOKEN_IDS not in given:
        shared = torch.zeros_like(ids)  # every response of a group shares every prefix
        other = instance.advantages(_probe_batch(shared), None)
        if not torch.equal(advantages, other):
            return "its credit reads the response token ids, which the advantage call is not given"
    return None


def supported_methods(given: frozenset[str]) -> dict[str, type[CreditMethod]]:
    """The registered methods that run inside an engine giving ``given`` (see
    :func:`unsupported_reason`), by name."""
    return {
        name: cls
        for name, cls in sorted(list_methods().items())
        if unsupported_reason(cls, given) is None
    }


def method_for_engine(
    method: str | CreditMethod, given: frozenset[str], engine: str, **options: object
) -> CreditMethod:
    """An instance of ``method`` (a registered name, with ``options`` for its Config, or an
    instance), after checking that it runs in ``engine``; ``ValueError`` naming the reason if
    not."""
    if isinstance(method, CreditMethod):
        if options:
            raise ValueError("options: give them to the method's constructor, not with an instance")
        instance = method
    else:
        instance = get_method(method)(**options)
    reason = unsupported_reason(type(instance), given)
    if reason is not None:
        raise ValueError(f"method {instance.name!r} cannot run inside {engine}: {reason}")
    return instance
