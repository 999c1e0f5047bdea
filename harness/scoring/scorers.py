"""The models a method may score responses with, and what a forward pass of each costs.

``policy`` is the model being trained; ``reference`` a frozen copy of the initial policy (when
the run keeps one); ``teacher`` a frozen stronger checkpoint, loaded on first use; ``ema`` an
exponential moving average of the policy's weights, kept once a method asks for it
(:meth:`Scorers.track_ema`); ``auxiliary`` a second model a method trains itself
(:mod:`.auxiliary`), made on its first fit. :class:`~creditbench.harness.services.HarnessServices`
runs the passes; this class owns the models and charges each forward to the run's budget meter,
a model of another size (the teacher) at its own price.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from creditbench.harness.scoring.auxiliary import AuxiliaryModel, PolicyOptimizer

if TYPE_CHECKING:
    from creditbench.harness.budget import BudgetMeter

MODELS = ("policy", "reference", "teacher", "ema", "auxiliary")


@torch.no_grad()
def ema_update_(average, model, rate: float) -> None:
    """``θ_avg ← (1 − rate)·θ_avg + rate·θ`` in place, parameter by parameter; buffers are
    copied. ``average`` is a copy of ``model`` (same parameter names; tied weights once)."""
    params = dict(model.named_parameters())
    for name, param in average.named_parameters():
        param.lerp_(params[name].detach().to(param.dtype), rate)
    buffers = dict(model.named_buffers())
    for name, buffer in average.named_buffers():
        buffer.copy_(buffers[name])


class Scorers:
    """The scoring models of one run and their budget charges.

    Args:
        policy: the model being trained.
        meter: the run's :class:`~creditbench.harness.budget.BudgetMeter`.
        reference: a frozen copy of the initial policy, or None.
        teacher_loader: a zero-argument callable returning a frozen teacher, or None.
        policy_optimizer: how the policy is trained (an auxiliary model is trained alike), or
            None when the run has no optimizer (no auxiliary model can be made).
    """

    def __init__(
        self,
        policy,
        meter,
        reference=None,
        teacher_loader: Callable[[], Any] | None = None,
        policy_optimizer: PolicyOptimizer | None = None,
    ) -> None:
        self.policy = policy
        self.policy_optimizer = policy_optimizer
        self.meter = meter
        self.reference = reference
        self._teacher_loader = teacher_loader
        self._teacher = None
        self._teacher_meter: BudgetMeter | None = None
        self._ema = None
        self._ema_rate = 0.0
        self.auxiliary: AuxiliaryModel | None = None
        self._auxiliary_state: dict[str, Any] | None = None  # restored before its first fit

    def get(self, name: str):
        """The model called ``name`` (one of :data:`MODELS`); a clear error when it is absent."""
        if name == "policy":
            return self.policy
        if name == "reference":
            if self.reference is None:
                raise ValueError("no reference model in this run (set train.reference_model=true)")
            return self.reference
        if name == "teacher":
            if self._teacher is None:
                if self._teacher_loader is None:
                    raise ValueError("this task has no teacher model")
                from creditbench.harness.budget import BudgetMeter

                self._teacher = self._teacher_loader()
                self._teacher_meter = BudgetMeter.for_model(self._teacher)
            return self._teacher
        if name == "ema":
            if self._ema is None:
                raise ValueError("model: ema needs track_ema(rate) first (no average kept yet)")
            return self._ema
        if name == "auxiliary":
            if self.auxiliary is None:
                raise ValueError("model: auxiliary needs fit_auxiliary(...) first (none made yet)")
            return self.auxiliary.model
        raise ValueError(f"model: must be one of {', '.join(MODELS)} (got {name!r})")

    def auxiliary_for(self, **settings: Any) -> AuxiliaryModel:
        """The auxiliary model, made from the policy as it is now on the first call (with a
        saved state restored into it); later calls must ask for the same settings."""
        if self.auxiliary is None:
            if self.policy_optimizer is None:
                raise ValueError("fit_auxiliary: this run has no policy optimizer to copy")
            self.auxiliary = AuxiliaryModel(self.policy, self.policy_optimizer, **settings)
            if self._auxiliary_state is not None:
                self.auxiliary.load_state_dict(self._auxiliary_state)
                self._auxiliary_state = None
        else:
            self.auxiliary.check_settings(**settings)
        return self.auxiliary

    def auxiliary_state(self) -> dict[str, Any] | None:
        """What a checkpoint keeps of the auxiliary model (None when there is none)."""
        if self.auxiliary is not None:
            return self.auxiliary.state_dict()
        return self._auxiliary_state

    def load_auxiliary_state(self, state: dict[str, Any] | None) -> None:
        """Restore a checkpoint's auxiliary model (now, or at its first fit)."""
        if state is None:
            return
        if self.auxiliary is not None:
            self.auxiliary.load_state_dict(state)
        else:
            self._auxiliary_state = state

    def charge_forward(self, name: str, lengths: Tensor) -> None:
        """Charge a forward pass of model ``name`` over sequences of ``lengths`` [B] tokens."""
        if name != "teacher":  # the reference, the average and the auxiliary: the policy's size
            self.meter.charge_forward_batch(lengths)
            return
        self.get("teacher")
        # priced at the teacher's own size by its meter, paid from the run's budget
        assert self._teacher_meter is not None  # set when the teacher loads
        flops = self._teacher_meter.charge_forward_batch(lengths)
        self.meter.charge_flops(flops, forward_tokens=int(lengths.sum()))

    def track_ema(self, rate: float) -> None:
        """Keep an exponential moving average of the policy's weights, scored as ``model="ema"``.

        The first call copies the policy as it is then (before the first update: the initial
        policy); after each training step's update (all its optimizer steps: once per rollout,
        as SDPO's code updates its teacher once per ``update_policy``) :meth:`after_update`
        moves the copy
        ``θ_ema ← (1 − rate)·θ_ema + rate·θ`` (SDPO's teacher). ``rate`` 0 keeps it frozen.
        Calling again only sets the rate. The averaging itself is not charged (no forward);
        scoring with it is, like a policy forward. The average is not checkpointed: a resumed
        run starts it again from the policy it resumes with.
        """
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate: must be in [0, 1] (got {rate!r})")
        if self._ema is None:
            self._ema = copy.deepcopy(self.policy).requires_grad_(False)
        self._ema_rate = float(rate)

    def after_update(self) -> None:
        """Move the average (if one is kept) after a training step's update of the policy."""
        if self._ema is not None:
            ema_update_(self._ema, self.policy, self._ema_rate)
