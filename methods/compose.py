"""A credit rule on a host recipe: "GRPO + OPPO", "DAPO + OPPO".

A paper that proposes a token-level credit rule usually plugs it into an existing trainer. In
verl, ``algorithm.adv_estimator=<rule>`` replaces the advantage and keeps everything else of the
host recipe: its rollout filter (DAPO's dynamic sampling), its reward shaping (DAPO's overlong
buffer is added to the token-level reward the estimator reads), its clip range and its loss
aggregation. `HostedCredit` does the same for a method here.

The host is an option, not a parent class. The rule's Config (a `HostedConfig`) holds the
rule's own fields, ``base``, the name of the host, and ``host``, the host's own options, nested
as in verl's config (``{base: dapo, host: {eps_high: 0.3}}``); the host is built from them as
any method is, with the host's defaults, so ``base: dapo`` brings clip-higher, ``token-mean``
and dynamic sampling without restating them. The host's `CreditMethod.rollout`
(and the `CreditMethod.group_filter` it amounts to), `CreditMethod.loss` and
`CreditMethod.loss_mask` run unchanged; the rule computes its
advantages from the host's `CreditMethod.outcome_rewards` and leaves zero the responses the
host's `CreditMethod.trained_responses` excludes.

A hosted method's Config lists its hosts in ``hosts``: ``{base name: host method class}``, the
default ``base`` among them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from torch import Tensor

from .base import CreditMethod
from .contract import GroupFilter, Services
from .core import Normalizers, RolloutBatch
from .field_checks import check_finite_numbers

__all__ = ["HostedConfig", "HostedCredit"]


@dataclass
class HostedConfig:
    """The fields every hosted rule's Config has: the host by name, and its options.

    A subclass sets ``hosts`` and the default of ``base``, and adds the rule's own fields.
    An unknown host, or a host option the host's Config refuses, is a ``ValueError`` naming the
    field (``base``, ``host.<option>``), as every Config's range checks are.
    """

    hosts: ClassVar[dict[str, type[CreditMethod]]] = {}

    base: str = ""
    host: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_finite_numbers(self)
        if self.base not in self.hosts:
            known = ", ".join(self.hosts)
            raise ValueError(f"base: must be one of {known} (got {self.base!r})")
        if not isinstance(self.host, Mapping):
            raise ValueError(
                f"host: must be a mapping of {self.base}'s options (got {self.host!r})"
            )
        self.host_config()  # a refused host option fails here, with the config

    def host_config(self) -> Any:
        """The host's Config built from ``host``, its defaults for the rest."""
        host_class = self.hosts[self.base].Config
        known = {f.name for f in fields(host_class)}
        unknown = sorted(set(self.host) - known)
        if unknown:
            listed = ", ".join(sorted(known))
            raise ValueError(f"host.{unknown[0]}: not an option of {self.base} (known: {listed})")
        try:
            return host_class(**self.host)
        except ValueError as err:
            raise ValueError(f"host.{err}") from None


class HostedCredit(CreditMethod):
    """A credit method that runs inside a host method's sampling and loss (see the module)."""

    config: HostedConfig

    def __init__(self, config: HostedConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        if not isinstance(self.config, HostedConfig):
            raise ValueError(f"config: a {type(self).__name__} needs a HostedConfig")
        self.host: CreditMethod = self.config.hosts[self.config.base](self.config.host_config())

    @property
    def needs_reference(self) -> bool:
        """The rule's own need of a reference model, or the host's (a KL term of its loss)."""
        return self.needs.reference_model or self.host.needs_reference

    def rollout(self, services: Services) -> RolloutBatch:
        return self.host.rollout(services)

    def group_filter(self) -> GroupFilter | None:
        return self.host.group_filter()

    def loss_mask(self, batch: RolloutBatch) -> Tensor:
        return self.host.loss_mask(batch)

    def outcome_rewards(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        return self.host.outcome_rewards(batch, services)

    def trained_responses(self, batch: RolloutBatch) -> Tensor:
        return self.host.trained_responses(batch)

    def loss(
        self,
        logprobs: Tensor,
        batch: RolloutBatch,
        advantages: Tensor,
        normalizers: Normalizers | None = None,
        services: Services | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        return self.host.loss(logprobs, batch, advantages, normalizers, services)
