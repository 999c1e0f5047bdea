"""The plan of one training step: which model passes its batches get, decided once, before the
rollout, from what the method declares (`CreditMethod`'s requirements) and how the run updates
(``train``), and handed to the services for the step (`HarnessServices.begin_step`) and to the
update. Nothing of it is read back or reset through another object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepPlan:
    """One step's passes.

    Attributes:
        step: the 0-based training step.
        behaviour_from_update: the update's first forward gives the behaviour log-probs (an
            exactly on-policy update of a method that never reads them before): the step's
            batches skip their scoring pass and carry NaN until the update fills them.
        behaviour_statistics: statistics of the behaviour distribution the scoring pass
            computes beside the log-probs (`Needs.behaviour_statistics`).
        reference_method: the method is a reference (its passes run uncharged, in
            ``Services.reference_passes``).
    """

    step: int
    behaviour_from_update: bool = False
    behaviour_statistics: tuple[str, ...] = ()
    reference_method: bool = False

    @classmethod
    def for_method(cls, step: int, method: Any, train: Any) -> StepPlan:
        """The plan of ``method``'s step ``step`` under the run's ``train`` settings: the
        behaviour log-probs come from the update when ``train.skip_onpolicy_scoring`` is on,
        the update is one epoch of one minibatch and the method reads neither the log-probs
        nor statistics of the behaviour distribution."""
        on_policy = train.ppo_epochs == 1 and train.minibatches == 1
        from_update = train.skip_onpolicy_scoring and on_policy and not method.needs.reads_behaviour
        return cls(
            step=step,
            behaviour_from_update=from_update,
            behaviour_statistics=tuple(method.needs.behaviour_statistics),
            reference_method=type(method).reference,
        )
