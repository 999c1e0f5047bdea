"""A credit rule on a host recipe: "GRPO + OPPO", "DAPO + OPPO".

A paper that proposes a token-level credit rule usually plugs it into an existing trainer. In
verl, ``algorithm.adv_estimator=<rule>`` replaces the advantage and keeps everything else of the
host recipe: its rollout filter (DAPO's dynamic sampling), its reward shaping (DAPO's overlong
buffer is added to the token-level reward the estimator reads), its clip range and its loss
aggregation. `HostedCredit` does the same for a method here.

The method's option ``base`` names the host. Its Config is the host's Config (fields and
defaults) plus the rule's own fields, so ``base: dapo`` brings clip-higher, ``token-mean`` and
dynamic sampling without restating them. The host's `CreditMethod.rollout`,
`CreditMethod.loss` and `CreditMethod.loss_mask` run unchanged; the rule computes its
advantages from the host's `CreditMethod.outcome_rewards` and leaves zero the responses the
host's `CreditMethod.trained_responses` excludes.

A hosted method lists its hosts in ``hosts``: ``{base name: (host class, Config class)}``, the
first entry being the default, and each Config class subclasses the host's Config and has a
field ``base`` whose default is that name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from torch import Tensor

from .base import CreditMethod, LossConfig
from .contract import Services
from .core import Normalizers, RolloutBatch

__all__ = ["HostedCredit"]


class HostedCredit(CreditMethod):
    """A credit method that runs inside a host method's sampling and loss (see the module)."""

    hosts: ClassVar[dict[str, tuple[type[CreditMethod], type[LossConfig]]]] = {}

    @classmethod
    def config_class(cls, options: Mapping[str, Any] | None = None) -> type[LossConfig]:
        default = next(iter(cls.hosts))
        base = (options or {}).get("base", default)
        if base not in cls.hosts:
            raise ValueError(f"base: must be one of {', '.join(cls.hosts)} (got {base!r})")
        return cls.hosts[base][1]

    @classmethod
    def config_classes(cls) -> tuple[type[LossConfig], ...]:
        return tuple(config_class for _, config_class in cls.hosts.values())

    def __init__(self, config: LossConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        base = str(getattr(self.config, "base", ""))
        if base not in self.hosts or not isinstance(self.config, self.hosts[base][1]):
            raise ValueError(
                f"base: {type(self.config).__name__} does not host on {base!r}; "
                f"build the config with {type(self).__name__}.config_class(options)"
            )
        # The host shares the config object: its fields are the host's own.
        self.host: CreditMethod = self.hosts[base][0](self.config)

    def rollout(self, services: Services) -> RolloutBatch:
        return self.host.rollout(services)

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
