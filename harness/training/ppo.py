"""The PPO-style policy update: epochs x minibatches x micro-batches, AdamW, gradient clipping.

Each minibatch is one optimizer step. Its loss is aggregated with the counts of the whole
minibatch (:class:`methods.core.Normalizers`), so the gradients of its micro-batches add up to
the gradient of the minibatch however it is split. Every training pass is charged to the
budget meter; a non-finite loss or gradient stops the update before the optimizer steps.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from creditbench.harness.diagnostics.step import rows_in_mixed_groups
from creditbench.harness.scoring.forward import token_logprobs_and_entropy
from creditbench.methods.core import Normalizers, RolloutBatch


class NonFiniteError(RuntimeError):
    """A method produced a NaN or infinite advantage, loss or gradient; the step is discarded."""


def check_finite(tensor: Tensor, what: str, method: str, step: int) -> None:
    """Raise :class:`NonFiniteError` naming the method and the tensor if any entry is NaN/inf."""
    bad = ~torch.isfinite(tensor.detach())
    if bool(bad.any()):
        raise NonFiniteError(
            f"method {method!r} produced a non-finite {what} at step {step} "
            f"({int(bad.sum())} of {tensor.numel()} entries are NaN or infinite); "
            "the step was discarded and nothing was checkpointed"
        )


def check_advantages(method: Any, batch: RolloutBatch, advantages: Tensor, step: int) -> None:
    """A method's advantages have the batch's ``[B, T]`` shape and are finite, or the step stops
    with the method's name (``ValueError``, :class:`NonFiniteError`)."""
    name = method.name or type(method).__name__
    if advantages.shape != batch.response_mask.shape:
        raise ValueError(
            f"method {name!r}: advantages have shape {tuple(advantages.shape)}, "
            f"expected {tuple(batch.response_mask.shape)}"
        )
    check_finite(advantages, "advantage tensor", name, step)


def ppo_update(
    policy,
    optimizer: torch.optim.Optimizer,
    method,
    batch: RolloutBatch,
    advantages: Tensor,
    *,
    train,
    micro_batch_size: int,
    temperature: float,
    meter,
    lengths: Tensor,
    seed: int,
    step: int,
    services=None,
    behaviour_from_update: bool = False,
) -> dict[str, Any]:
    """Run ``train.ppo_epochs`` x ``train.minibatches`` optimizer steps on one batch.

    Args:
        train: the run's :class:`~creditbench.harness.config.TrainConfig`.
        lengths: ``[B]`` prompt + response tokens of each row, what the meter charges.
        seed: seeds the minibatch shuffle (epoch ``e`` uses ``seed + e``).
        step: the step number, for diagnostics.
        services: the step's services, handed to ``method.loss`` (a loss may run a pass).
        behaviour_from_update: the batch's behaviour log-probs were not scored: each
            micro-batch's first forward (before the one optimizer step of an exactly
            on-policy update) is the behaviour policy's, so it fills ``batch.old_logprobs``.

    Returns:
        Token-weighted means of the method's loss statistics (``clip_frac``, ``approx_kl``,
        ...), the mean minibatch ``loss`` and ``grad_norm``, and the first epoch's ``entropy``
        (and ``filler_entropy`` when the batch marks filler tokens). Per optimizer step, in
        order: ``grad_norms`` (before clipping) and, with ``train.record_update_norm``,
        ``update_norms`` ‖Δθ‖ (with their mean ``update_norm``); and
        ``minibatches_without_mixed_group``, the optimizer steps whose minibatch holds no row
        of a group with mixed outcomes (outcome credit, GRPO's, is exactly 0 on all of it).
    """
    name = method.name or type(method).__name__
    params = [p for p in policy.parameters() if p.requires_grad]
    totals: dict[str, float] = {}
    weights: dict[str, float] = {}
    entropy_sum = filler_entropy_sum = filler_tokens = 0.0
    grad_norms, update_norms, losses = [], [], []
    mixed = rows_in_mixed_groups(batch.rewards, batch.group_ids)
    without_mixed = 0
    if behaviour_from_update and (train.ppo_epochs, train.minibatches) != (1, 1):
        raise ValueError("behaviour_from_update: only for one epoch of one minibatch")
    loss_mask = method.loss_mask(batch)  # what the loss averages over (the response mask)
    for epoch in range(train.ppo_epochs):
        if train.minibatches > 1:
            gen = torch.Generator().manual_seed(seed + epoch)
            order = torch.randperm(batch.size, generator=gen)
        else:
            order = torch.arange(batch.size)
        for minibatch in order.chunk(train.minibatches):
            if train.shared_prefix_forward:  # a group's rows in one micro-batch share a prompt
                minibatch = minibatch[torch.argsort(batch.group_ids[minibatch], stable=True)]
            without_mixed += int(not bool(mixed[minibatch].any()))
            normalizers = Normalizers.of(loss_mask[minibatch])
            minibatch_loss = 0.0
            for rows in minibatch.split(micro_batch_size):
                micro = batch.select(rows)
                logprobs, entropy = token_logprobs_and_entropy(
                    policy,
                    micro.prompt_ids,
                    micro.prompt_mask,
                    micro.response_ids,
                    micro.response_mask,
                    temperature=temperature,
                    shared_prefix=train.shared_prefix_forward,
                )
                if behaviour_from_update:  # the same pass on the same layout: ratio 1 exactly
                    micro.old_logprobs = logprobs.detach()
                    batch.old_logprobs[rows] = micro.old_logprobs
                loss, stats = method.loss(
                    logprobs, micro, advantages[rows], normalizers, services=services
                )
                check_finite(loss, "loss", name, step)
                loss.backward()
                meter.charge_training(lengths[rows])
                minibatch_loss += float(loss.detach())
                tokens = float(micro.response_mask.sum())
                for key, value in stats.items():
                    if key != "pg_loss":
                        totals[key] = totals.get(key, 0.0) + value * tokens
                        weights[key] = weights.get(key, 0.0) + tokens
                if epoch == 0:
                    entropy_sum += float(entropy.sum())
                    filler = (micro.extras or {}).get("filler_mask")
                    if filler is not None:
                        filler_entropy_sum += float((entropy * filler).sum())
                        filler_tokens += float(filler.sum())
            grad_norm = torch.nn.utils.clip_grad_norm_(params, train.grad_clip or math.inf)
            check_finite(grad_norm, "gradient", name, step)
            before = [p.detach().clone() for p in params] if train.record_update_norm else None
            optimizer.step()
            if before is not None:
                moved = [(p.detach() - b).pow(2).sum() for p, b in zip(params, before, strict=True)]
                update_norms.append(float(torch.stack(moved).sum().sqrt()))
            optimizer.zero_grad(set_to_none=True)
            meter.charge_optimizer_step()
            grad_norms.append(float(grad_norm))
            losses.append(minibatch_loss)
    out: dict[str, Any] = {key: totals[key] / max(weights[key], 1.0) for key in totals}
    out["loss"] = sum(losses) / len(losses)
    out["grad_norm"] = sum(grad_norms) / len(grad_norms)
    out["grad_norms"] = grad_norms
    if update_norms:
        out["update_norms"] = update_norms
        out["update_norm"] = sum(update_norms) / len(update_norms)
    out["minibatches_without_mixed_group"] = without_mixed
    out["entropy"] = entropy_sum / max(float(batch.response_mask.sum()), 1.0)
    if filler_tokens > 0:
        out["filler_entropy"] = filler_entropy_sum / filler_tokens
    return out
