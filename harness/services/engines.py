"""What an engine adapter takes from the method contract: which methods can compute their credit
from what an engine hands over, and that hand-over as a `RolloutBatch`.

An engine (verl, TRL) samples, scores and trains itself; at the point where it computes
advantages it holds a batch of responses and their outcome rewards. What else it offers a
method differs: verl's estimator call gets nothing more; the TRL adapter scores with TRL's
own model (behaviour and reference log-probs, prompt variants of a creditbench task, an
auxiliary model's fit: `creditbench.integrations.trl_services`). No engine offers the
harness's sampling (continuations, resets, several roles) or the step ground truth, and each
trains with its own loss; the TRL adapter adds both (a method's own rollout, through the
harness's services on TRL's model, and its own loss). Whether a method runs follows from what
it declares (`CreditMethod`'s class attributes, `CreditMethod.group_filter`, whether it
overrides the loss) and from one probe: its advantages on a small fixed batch with the
services the engine offers and no others (:class:`EngineServices`), and again with other token
ids where the engine gives none. A method with a rollout of its own is not probed: where an
engine runs it (TRL, with a task), it runs with the harness's own services.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, cast

import torch
from torch import Tensor

from creditbench.methods.base import CreditMethod, Services
from creditbench.methods.compose import HostedCredit
from creditbench.methods.contract import ALL_GROUPS, BEHAVIOUR_STATISTICS, MIXED_GROUPS
from creditbench.methods.core import RolloutBatch
from creditbench.methods.registry import get_method, list_methods

# What an engine may give a method besides rewards, masks and groups (`Engine.gives`):
TOKEN_IDS = "response_ids"  # the response token ids
BEHAVIOUR = "behaviour"  # behaviour log-probs and `BEHAVIOUR_STATISTICS` from a scoring pass
REFERENCE = "reference"  # reference log-probs (a frozen initial policy) and score(model=...)
SCORING = "scoring"  # score / distribution of the batch under the policy, other prompts
AUXILIARY = "auxiliary"  # fit_auxiliary: a second model the method trains (PRIME)
TASK_TEXT = "task_text"  # a creditbench task's variants, problems and answers for each row
PROGRESS = "progress"  # the step, the budget fraction, per-step generators and report()
LOSS_MASK = "loss_mask"  # the loss averages over the method's `loss_mask`, not the whole response
EMA = "ema"  # track_ema: a moving average of the policy, scored as model="ema" (SDPO's teacher)
LOSS = "loss"  # the engine trains with the method's own `CreditMethod.loss`
ROLLOUT = "rollout"  # the method's own `CreditMethod.rollout`, with the harness's services


@dataclass(frozen=True)
class Engine:
    """What an engine offers a method: what its advantage call is given besides rewards,
    masks and groups (``gives``: :data:`TOKEN_IDS`, :data:`BEHAVIOUR`, :data:`REFERENCE`,
    :data:`SCORING`, :data:`AUXILIARY`, :data:`TASK_TEXT`, :data:`PROGRESS`, :data:`LOSS_MASK`),
    :data:`EMA`, :data:`LOSS`, :data:`ROLLOUT`), and the `GroupFilter` rules its
    own sampler applies (``filters``; :data:`ALL_GROUPS`, the plain batch, every engine has)."""

    name: str
    gives: frozenset[str] = frozenset()
    filters: frozenset[str] = frozenset()

    def without(self, *given: str) -> Engine:
        """This engine when it cannot give ``given`` (TRL without a creditbench task)."""
        return replace(self, gives=self.gives - set(given))


# verl 0.9: token_level_rewards, response_mask and uid; its v1 trainer's algorithm.filter_groups
# keeps the groups whose rewards are not all equal (DAPO's dynamic sampling)
VERL = Engine("verl", filters=frozenset({MIXED_GROUPS}))
# verl 0.9.1's legacy trainer (trainer.use_v1=False, main_ppo_v0), whose compute_advantage
# holds the whole batch: creditbench's plugin passes an estimator its response ids through it
# (integrations/verl.py); the v1 trainer fetches a fixed list of fields for advantages
# (trainer_base._compute_advantage), without them. The legacy trainer has no group filter.
VERL_LEGACY = Engine("verl's legacy trainer", gives=frozenset({TOKEN_IDS}))
VERL_LEGACY_SETTINGS = {"trainer.use_v1": False}
# the verl 0.9.1 settings that switch that filter on (trainer/ppo/v1/trainer_base.py,
# replay_buffer.py): the v1 trainer drops the groups whose summed reward (before a method's
# shaping: the task's correctness) has zero spread and samples more prompts until the batch is full
VERL_MIXED_GROUPS_SETTINGS = {
    "trainer.use_v1": True,
    "algorithm.filter_groups.enable": True,
    "algorithm.filter_groups.metric": "reward",
}
# TRL 1.16's GRPOTrainer holds the completion ids and the model; the adapter scores with it
# (creditbench.integrations.trl_services) and keeps DAPO's mixed groups with refills of its own,
# on one process. TASK_TEXT needs the trainer's `task=` (the reproduce launch gives it), and so
# does ROLLOUT: a method's own rollout samples and grades through the harness's services on TRL's
# model (creditbench.integrations.trl), on one process; LOSS: the adapter's compute_loss calls
# the method's own loss.
TRL = Engine(
    "TRL",
    gives=frozenset(
        {
            TOKEN_IDS,
            BEHAVIOUR,
            REFERENCE,
            SCORING,
            AUXILIARY,
            TASK_TEXT,
            PROGRESS,
            LOSS_MASK,
            EMA,
            LOSS,
            ROLLOUT,
        }
    ),
    filters=frozenset({MIXED_GROUPS}),
)


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


# The services each capability stands for (a model name of score/distribution is checked apart)
SERVICES_OF = {
    SCORING: ("score", "distribution", "decode"),
    AUXILIARY: ("fit_auxiliary",),
    TASK_TEXT: ("variant", "problems", "answer_texts"),
    PROGRESS: ("step", "budget_fraction", "generator", "report"),
    EMA: ("track_ema",),
}
MODELS_OF = {"policy": SCORING, "reference": REFERENCE, "auxiliary": AUXILIARY, "ema": EMA}


class _ProbeServices:
    """The probe's stand-in for what ``engine`` offers: its generation limit (when known) and
    harmless values of the right shape (zero log-probs, empty texts) for the services of its
    capabilities; every other service raises NotImplementedError, as at run time."""

    def __init__(self, max_new_tokens: int | None, engine: Engine) -> None:
        self._limit = max_new_tokens
        self._offered = {name for cap in engine.gives for name in SERVICES_OF.get(cap, ())}
        self._gives = engine.gives

    @property
    def max_new_tokens(self) -> int:
        if self._limit is None:
            raise ValueError("max_response_length: the engine's generation limit is not known")
        return self._limit

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._offered:
            if name.startswith("__"):
                raise AttributeError(name)
            if name in SERVICES_OF[TASK_TEXT]:
                raise NotImplementedError(f"{name}: the task's text needs a creditbench task")
            raise NotImplementedError(f"{name}: not offered by this engine")
        fakes: dict[str, Any] = {
            "step": 0,
            "budget_fraction": 0.0,
            "generator": lambda stream: torch.Generator().manual_seed(int(stream)),
            "report": lambda stats: None,
            "track_ema": lambda rate: None,
            "decode": lambda batch: ["" for _ in range(batch.size)],
            "variant": lambda batch, kind, hints=None: ["" for _ in range(batch.size)],
            "answer_texts": lambda batch: ["" for _ in range(batch.size)],
            "problems": lambda batch: [None for _ in range(batch.size)],
            "score": self._score,
            "distribution": self._distribution,
            "fit_auxiliary": lambda batch, row_loss, **_: (
                torch.zeros_like(batch.response_mask),
                {"aux_loss": 0.0, "aux_grad_norm": 0.0, "aux_updates": 0.0},
            ),
        }
        return fakes[name]

    def _model(self, model: str) -> None:
        if MODELS_OF.get(model) not in self._gives:
            raise NotImplementedError(f"score(model={model!r}): not offered by this engine")

    def _score(self, batch: RolloutBatch, prompts: Any = None, model: str = "policy") -> Tensor:
        self._model(model)
        return torch.zeros_like(batch.response_mask)

    def _distribution(
        self,
        batch: RolloutBatch,
        prompts: Any = None,
        model: str = "policy",
        *,
        top_k: int | None = None,
        indices: Tensor | None = None,
        grad: bool = False,
    ) -> tuple[Tensor, Tensor]:
        self._model(model)
        width = indices.shape[-1] if indices is not None else (top_k or 4)
        shape = (*batch.response_mask.shape, width)
        return torch.zeros(shape), torch.zeros(shape, dtype=torch.long)


def _probe_batch(response_ids: Tensor | None, engine: Engine) -> RolloutBatch:
    # two groups of four, one of them mixed and one with a hole in a mask and a short response;
    # behaviour (and reference) log-probs and statistics where the engine scores them
    mask = torch.ones(8, 6)
    mask[0, 4:] = 0
    mask[5, 2] = 0
    scored = BEHAVIOUR in engine.gives
    batch = engine_batch(
        torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0]),
        mask,
        torch.arange(8) // 4,
        response_ids=response_ids,
        old_logprobs=-torch.ones(8, 6) * mask if scored else None,
    )
    if scored:
        batch.extras = {key: torch.full((8, 6), 0.5) * mask for key in BEHAVIOUR_STATISTICS}
    if REFERENCE in engine.gives:
        batch.ref_logprobs = -torch.ones(8, 6) * mask
    return batch


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
    if cls.needs.step_truth:
        return f"it reads step ground truth ({', '.join(cls.needs.step_truth)})"
    kept = instance.group_filter()
    own_rollout = kept is None
    if own_rollout and ROLLOUT not in engine.gives:
        if engine.name == TRL.name:  # TRL without a task (`CreditGRPOTrainer`'s task=)
            return (
                "it samples its own batch through the harness (continuations, resets, several "
                "roles or edited masks), which needs a creditbench task"
            )
        return (
            "it samples its own batch through the harness (continuations, resets, several "
            "roles or edited masks)"
        )
    if kept is not None and kept.keep != ALL_GROUPS and kept.keep not in engine.filters:
        return (
            f"its rollout keeps only {kept.keep} (dynamic sampling), a filter {engine.name} lacks"
        )
    if has_own_loss(instance) and LOSS not in engine.gives:
        return f"it trains with a loss of its own, and {engine.name} trains with its own loss"
    if has_own_loss_mask(instance) and LOSS_MASK not in engine.gives:
        return f"its loss averages over a token mask of its own, which {engine.name}'s loss lacks"
    if BEHAVIOUR not in engine.gives:
        if cls.needs.behaviour_logprobs:
            return "its credit reads the behaviour log-probs, which an advantage call is not given"
        if cls.needs.behaviour_statistics:
            read = " and ".join(cls.needs.behaviour_statistics)
            return (
                f"its credit reads the behaviour policy's {read}, which an advantage call "
                "is not given"
            )
    if instance.needs_reference and REFERENCE not in engine.gives:
        return "its credit scores under a reference model"
    if own_rollout:  # the harness's own services run it (`ROLLOUT`): nothing left to probe
        return None
    ids = torch.arange(48).reshape(8, 6) % 5  # no two responses of a group share a prefix
    services = None  # verl without a known limit: the advantage call gets no services at all
    if max_new_tokens is not None or engine.gives - {TOKEN_IDS}:
        services = cast(Services, _ProbeServices(max_new_tokens, engine))
    try:
        advantages = instance.advantages(_probe_batch(ids, engine), services)
    except (ValueError, KeyError, NotImplementedError) as err:
        return f"it needs the harness's services ({err})"
    if not bool(torch.isfinite(advantages).all()):
        return "its credit is not finite without the harness's services"
    if TOKEN_IDS not in engine.gives:
        shared = torch.zeros_like(ids)  # every response of a group shares every prefix
        other = instance.advantages(_probe_batch(shared, engine), services)
        if not torch.equal(advantages, other):
            return "its credit reads the response token ids, which the advantage call is not given"
    return None


def _loss_owner(method: CreditMethod) -> type[CreditMethod]:
    """The class whose loss trains ``method``: a hosted rule's host (`methods.compose`)."""
    return type(method.host) if isinstance(method, HostedCredit) else type(method)


def has_own_loss(method: CreditMethod) -> bool:
    """``method`` trains with a loss other than `CreditMethod.loss`, the clipped surrogate an
    engine's own loss computes (DFPO's, SDPO's; a hosted rule's host decides)."""
    return _loss_owner(method).loss is not CreditMethod.loss


def has_own_loss_mask(method: CreditMethod) -> bool:
    """``method``'s loss averages over a mask of its own (`CreditMethod.loss_mask`)."""
    return _loss_owner(method).loss_mask is not CreditMethod.loss_mask


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
