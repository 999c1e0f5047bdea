"""A second model a method trains beside the policy: PRIME's implicit process reward model.

It starts as a copy of the initial policy, has an optimizer of its own built as the policy's is
(:class:`PolicyOptimizer`: the run's ``train.optimizer`` and its settings, at a multiple of the
policy's learning rate), and takes one step whenever its method asks
(:meth:`AuxiliaryModel.fit`, through ``Services.fit_auxiliary``): a teacher-forced pass with
gradient over the batch, the method's loss per row, a backward and a step. Every pass is
charged to the run's budget meter as the policy's own training pass is (forward and backward,
3x a forward); its weights and optimizer state are saved in each checkpoint
(``auxiliary.pt``) and restored on resume, so a resumed run continues bit for bit.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from creditbench.harness.scoring.forward import token_logprobs_and_entropy

RowLoss = Callable[[Tensor, Tensor], Tensor]  # (log-probs [b, T] with grad, rows [b]) -> [b]


@dataclass(frozen=True)
class PolicyOptimizer:
    """How the run trains its policy, which an auxiliary model copies: ``make(params, lr)``
    builds an optimizer of the run's kind and settings (``train.optimizer``, its betas or
    momentum, its weight decay) at ``lr``; ``lr`` and ``grad_clip`` are the policy's own
    (``train.lr``, ``train.grad_clip``; 0 or None: no clip)."""

    make: Callable[[Iterable[torch.nn.Parameter], float], torch.optim.Optimizer]
    lr: float
    grad_clip: float | None


class AuxiliaryModel:
    """The trainable auxiliary model of a run, created from the policy on first use.

    Args:
        policy: the policy to copy (its weights when the copy is made: the initial policy,
            when the first fit comes before the first update).
        optimizer: how the policy is trained; the copy gets an optimizer of the same kind.
        lr_ratio: its learning rate as a multiple of the policy's.
        grad_clip: its gradient-norm clip; None: the policy's. ``lr_ratio`` and ``grad_clip``
            are fixed by the first fit (a later fit with others is refused).
    """

    def __init__(
        self,
        policy: Any,
        optimizer: PolicyOptimizer,
        *,
        lr_ratio: float,
        grad_clip: float | None = None,
    ) -> None:
        self.model = copy.deepcopy(policy).requires_grad_(True)
        self.model.eval()  # no dropout: the pass that trains is the pass that scores
        self.settings = {
            "lr_ratio": float(lr_ratio),
            "grad_clip": None if grad_clip is None else float(grad_clip),
        }
        self.lr = float(lr_ratio) * optimizer.lr
        self.grad_clip = optimizer.grad_clip if grad_clip is None else float(grad_clip)
        self.optimizer = optimizer.make(self.model.parameters(), self.lr)
        self.steps = 0

    def check_settings(self, **settings: Any) -> None:
        """Refuse a fit whose settings differ from the model's first fit."""
        wanted = {key: None if v is None else float(v) for key, v in settings.items()}
        if wanted != self.settings:
            raise ValueError(
                f"fit_auxiliary: the auxiliary model was built with {self.settings}; "
                f"a fit asked for {wanted}"
            )

    def fit(
        self,
        micro_batches: list[tuple[Tensor, ...]],
        row_loss: RowLoss,
        size: int,
        *,
        temperature: float,
        shared_prefix: bool,
        charge: Callable[[Tensor], Any],
    ) -> tuple[Tensor, dict[str, float]]:
        """One optimizer step on the mean over the batch's ``size`` rows of ``row_loss``.

        Args:
            micro_batches: ``(rows, prompt_ids, prompt_mask, response_ids, response_mask,
                lengths)`` of each micro-batch; ``rows`` ``[b]`` are the batch rows it holds,
                ``lengths`` ``[b]`` the tokens of each sequence (what a pass is charged for).
            row_loss: ``(log-probs [b, T] with gradient, rows [b]) -> [b]`` each row's loss.
            size: the batch's rows, the mean's denominator.
            charge: charges a training pass over sequences of these lengths ``[b]``.

        Returns:
            The log-probs ``[B, T]`` of the pass (before the step), detached, and
            ``{"aux_loss", "aux_grad_norm", "aux_updates"}``: ``aux_updates`` the steps the
            model had taken before this pass (0 on the first: the pass of the initial policy).
        """
        width = micro_batches[0][3].shape[1]
        out = torch.zeros(size, width)
        total = 0.0
        for rows, prompt_ids, prompt_mask, response_ids, response_mask, lengths in micro_batches:
            logprobs, _ = token_logprobs_and_entropy(
                self.model,
                prompt_ids,
                prompt_mask,
                response_ids,
                response_mask,
                temperature=temperature,
                shared_prefix=shared_prefix,
            )
            loss = row_loss(logprobs, rows).sum() / size
            if not torch.isfinite(loss):
                raise ValueError("fit_auxiliary: the loss is not finite")
            loss.backward()
            charge(lengths)
            out[rows] = logprobs.detach()
            total += float(loss.detach())
        params = [p for p in self.model.parameters() if p.requires_grad]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip or math.inf)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        updates_before, self.steps = self.steps, self.steps + 1
        return out, {
            "aux_loss": total,
            "aux_grad_norm": float(grad_norm),
            "aux_updates": float(updates_before),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "settings": dict(self.settings),
            "steps": self.steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.check_settings(**state["settings"])
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])
