"""A second model a method trains beside the policy: PRIME's implicit process reward model.

It starts as a copy of the initial policy, has its own AdamW optimizer, and takes one step
whenever its method asks (:meth:`AuxiliaryModel.fit`, through ``Services.fit_auxiliary``):
a teacher-forced pass with gradient over the batch, the method's loss per row, a backward and
a step. Every pass is charged to the run's budget meter as the policy's own training pass is
(forward and backward, 3x a forward); its weights and optimizer state are saved in each
checkpoint (``auxiliary.pt``) and restored on resume, so a resumed run continues bit for bit.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from creditbench.harness.scoring.forward import token_logprobs_and_entropy

RowLoss = Callable[[Tensor, Tensor], Tensor]  # (log-probs [b, T] with grad, rows [b]) -> [b]


class AuxiliaryModel:
    """The trainable auxiliary model of a run, created from the policy on first use.

    Args:
        policy: the policy to copy (its weights when the copy is made: the initial policy,
            when the first fit comes before the first update).
        lr, betas, weight_decay, grad_clip: its AdamW settings and gradient-norm clip; fixed
            by the first fit (a later fit with other settings is refused).
    """

    def __init__(
        self,
        policy: Any,
        *,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        weight_decay: float = 0.0,
        grad_clip: float | None = None,
    ) -> None:
        self.model = copy.deepcopy(policy).requires_grad_(True)
        self.model.eval()  # no dropout: the pass that trains is the pass that scores
        self.settings = {
            "lr": float(lr),
            "betas": tuple(float(b) for b in betas),
            "weight_decay": float(weight_decay),
            "grad_clip": None if grad_clip is None else float(grad_clip),
        }
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=lr, betas=betas, weight_decay=weight_decay
        )
        self.steps = 0

    def check_settings(self, **settings: Any) -> None:
        """Refuse a fit whose optimizer settings differ from the model's first fit."""
        wanted = {
            key: (None if value is None else tuple(value) if key == "betas" else float(value))
            for key, value in settings.items()
        }
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
            ``{"aux_loss", "aux_grad_norm"}``.
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
        clip = self.settings["grad_clip"]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, clip if clip else math.inf)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        return out, {"aux_loss": total, "aux_grad_norm": float(grad_norm)}

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "settings": {**self.settings, "betas": list(self.settings["betas"])},
            "steps": self.steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.check_settings(**{**state["settings"], "betas": tuple(state["settings"]["betas"])})
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])
