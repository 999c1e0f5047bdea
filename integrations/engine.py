"""What an engine adapter takes from the method contract: which methods can compute their credit
from what an engine hands over, and that hand-over as a `RolloutBatch`.

An engine (verl, TRL) samples, scores and trains itself; at the point where it computes
advantages it holds a batch of responses and their outcome rewards, nothing of the harness's
services (continuations, scoring under other prompts, step ground truth). A method runs there
when its credit is a function of that batch alone. Whether it is follows from what the method
declares (`CreditMethod`'s class attributes and `CreditMethod.group_filter`) and from one
probe: its advantages on a small fixed batch with no service but the generation limit
(:class:`EngineServices`), and again with other token ids where the engine gives none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor

from creditbench.methods.base import CreditMethod, Services
from creditbench.methods.contract import ALL_GROUPS, MIXED_GROUPS
from creditbench.methods.core import RolloutBatch
from creditbench.methods.registry import get_method, list_methods

TOKEN_IDS = "response_ids"


@dataclass(frozen=True)
class Engine:
    """What an engine offers a method: the fields its advantage call is given besides rewards,
    masks and groups (``gives``, of :data:`TOKEN_IDS`), and the `GroupFilter` rules its own
    sampler applies (``filters``; :data:`ALL_GROUPS`, the plain batch, every engine has)."""

    name: str
    gives: frozenset[str] = frozenset()
    filters: frozenset[str] = frozenset()


# verl 0.9: token_level_rewards, response_mask and uid; its v1 trainer's algorithm.filter_groups
# keeps the groups whose rewards are not all equal (DAPO's dynamic sampling)
VERL = Engine("verl", filters=frozenset({MIXED_GROUPS}))
# the verl 0.9.1 settings that switch that filter on (trainer/ppo/v1/trainer_base.py,
# replay_buffer.py): the v1 trainer drops the groups whose summed reward (before a method's
# shaping: the task's correctness) has zero spread and samples more prompts until the batch is full
VERL_MIXED_GROUPS_SETTINGS = {
    "trainer.use_v1": True,
    "algorithm.filter_groups.enable": True,
    "algorithm.filter_groups.metric": "reward",
}
# TRL 1.16's GRPOTrainer holds the completion ids; it has no group filter
TRL = Engine("TRL", gives=frozenset({TOKEN_IDS}))


class EngineServices:
    """The services an engine offers a method's credit: its generation limit
    (``max_new_tokens``: verl's ``data.max_response_length``, TRL's ``max_completion_length``;
    DAPO's L_max defaults to it), nothing else. Any other service raises NotImplementedError,
    so a method that needs one is found out by the probe."""

    def __init__(self, max_new_tokens: int) -> None:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens: must be >= 1 (got {max_new_tokens})")
        self.max_new_tokens = max_new_tokens

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # Python's own protocol lookups (copy, pickle, hasattr)
            raise AttributeError(name)
        raise NotImplementedError(f"{name}: an engine offers a method only max_new_tokens")


def engine_services(max_new_tokens: int | None) -> Services | None:
    """:class:`EngineServices` for an engine whose generation limit is known, else None."""
    if max_new_tokens is None:
        return None
    return cast(Services, EngineServices(max_new_tokens))


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


def unsupported_reason(
    method: type[CreditMethod] | CreditMethod, engine: Engine, max_new_tokens: int | None = None
) -> str | None:
    """Why ``method`` (a class, with its default Config, or an instance) cannot compute its
    credit inside ``engine``, whose generation limit is ``max_new_tokens`` (None: not known to
    the method), or None when it can."""
    instance = method() if isinstance(method, type) else method
    cls = type(instance)
    if cls.reference:
        return "it is a reference: its credit needs the task's ground truth"
    if cls.requires_extras:
        return f"it reads step ground truth ({', '.join(cls.requires_extras)})"
    kept = instance.group_filter()
    if kept is None:
        return (
            "it samples its own batch through the harness (continuations, resets, several "
            "roles or edited masks)"
        )
    if kept.keep != ALL_GROUPS and kept.keep not in engine.filters:
        return (
            f"its rollout keeps only {kept.keep} (dynamic sampling), a filter {engine.name} lacks"
        )
    if cls.needs_behaviour_logprobs:
        return "its credit reads the behaviour log-probs, which an advantage call is not given"
    if cls.behaviour_statistics:
        read = " and ".join(cls.behaviour_statistics)
        return (
            f"its credit reads the behaviour policy's {read}, which an advantage call is not given"
        )
    if cls.needs_reference_model:
        return "its credit scores under a reference model"
    ids = torch.arange(48).reshape(8, 6) % 5  # no two responses of a group share a prefix
    services = engine_services(max_new_tokens)
    try:
        advantages = instance.advantages(_probe_batch(ids), services)
    except (ValueError, KeyError, NotImplementedError) as err:
        return f"it needs the harness's services ({err})"
    if not bool(torch.isfinite(advantages).all()):
        return "its credit is not finite without the harness's services"
    if TOKEN_IDS not in engine.gives:
        shared = torch.zeros_like(ids)  # every response of a group shares every prefix
        other = instance.advantages(_probe_batch(shared), services)
        if not torch.equal(advantages, other):
            return "its credit reads the response token ids, which the advantage call is not given"
    return None


def supported_methods(
    engine: Engine, max_new_tokens: int | None = None
) -> dict[str, type[CreditMethod]]:
    """The registered methods that run inside ``engine`` with their defaults (see
    :func:`unsupported_reason`), by name."""
    return {
        name: cls
        for name, cls in sorted(list_methods().items())
        if unsupported_reason(cls, engine, max_new_tokens) is None
    }


def method_for_engine(
    method: str | CreditMethod,
    engine: Engine,
    max_new_tokens: int | None = None,
    **options: object,
) -> CreditMethod:
    """An instance of ``method`` (a registered name, with ``options`` for its Config, or an
    instance), after checking that it runs in ``engine`` with generation limit
    ``max_new_tokens``; ``ValueError`` naming the reason if not."""
    if isinstance(method, CreditMethod):
        if options:
            raise ValueError("options: give them to the method's constructor, not with an instance")
        instance = method
    else:
        instance = get_method(method)(**options)
    reason = unsupported_reason(instance, engine, max_new_tokens)
    if reason is not None:
        raise ValueError(f"method {instance.name!r} cannot run inside {engine.name}: {reason}")
    return instance
