"""The policy-gradient estimate each method's credit gives, at one fixed policy.

Where the exact-credit reference does not learn faster than GRPO, the question is whether its
gradient is better at all, and if it is, what bounds the update. ``creditbench gradients``
samples ``batches`` batches at the run's starting policy (no step is taken) with the reference
method's rollout, gives every method the same batches, and takes each method's full-batch
gradient of its own loss (one minibatch, one epoch, ratio 1, no gradient clipping). Per method
it reports:

- ``grad_norm``: the median norm, and ``clipped``: the share of batches whose norm exceeds the
  run's ``train.grad_clip`` (where the clip would have shortened the step);
- ``consistency``: the mean cosine between the gradients of two different batches (1: every
  batch points the same way; near 0: a batch's gradient is mostly noise);
- ``agreement``: the cosine between a batch's gradient and the mean gradient of the reference
  method over the *other* batches (an unbiased estimate of the expected gradient when the
  reference is unbiased, as exact credit is);
- ``adam_agreement``: the same for ``sign(g)``, the direction of Adam's first update (Adam
  divides each coordinate by its own scale, so a noisy small coordinate moves as much as a
  strong one);
- ``adam_after``: the direction of Adam's update after the gradients of one half of the
  batches, fed in order at the run's betas (the policy held fixed), against the reference's mean
  gradient over the other half; the mean of the two ways round.

Intervals are mean +- 1.96 standard errors over batches. The numbers answer "does better
credit give a better gradient direction?" separately from "does the optimizer use it?".
"""

from __future__ import annotations

import math
import statistics
import tempfile
from typing import Any

import torch
from torch import Tensor

from creditbench.harness.services.step_plan import StepPlan


class _GradientRecorder:
    """Stands in for the optimizer: keeps the flattened gradient instead of stepping."""

    def __init__(self, params: list[torch.nn.Parameter]) -> None:
        self.params = params
        self.gradient: torch.Tensor | None = None

    def step(self) -> None:
        self.gradient = torch.cat([p.grad.reshape(-1) for p in self.params if p.grad is not None])

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None


def _cosine(a: Tensor, b: Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))


def _mean_interval(values: list[float]) -> tuple[float, float, float]:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def method_gradients(
    trainer, methods: dict[str, Any], batches: int, rollout_by: str
) -> dict[str, list[Tensor]]:
    """``{method: [gradient of batch b]}``: every method's credit on the same ``batches``
    batches, drawn by method ``rollout_by``'s rollout at the trainer's current policy (the
    reference's: the exact-credit oracle estimates its state values there). The gradient is
    the trainer's own update's, whose optimizer step is replaced by keeping the gradient
    (what runs after a step still runs: an EMA teacher moves toward the unchanged policy)."""
    services = trainer.services
    params = [p for p in trainer.policy.parameters() if p.requires_grad]
    out: dict[str, list[Tensor]] = {name: [] for name in methods}
    first = methods[rollout_by]
    for b in range(batches):
        statistics = {
            key for method in methods.values() for key in method.needs.behaviour_statistics
        }
        services.begin_step(
            StepPlan(b, behaviour_statistics=tuple(sorted(statistics)), reference_method=True)
        )
        batch = first.rollout(services)
        for name, method in methods.items():
            advantages = method.advantages(batch, services)
            recorder = _GradientRecorder(params)
            trainer.optimizer = recorder  # the trainer's own update, which then never steps
            trainer.update(method, batch, advantages)
            assert recorder.gradient is not None
            out[name].append(recorder.gradient.clone())
    return out


def adam_direction(gradients: list[Tensor], betas: tuple[float, float], eps: float) -> Tensor:
    """Adam's update direction ``m_hat / (sqrt(v_hat) + eps)`` after ``gradients`` in order."""
    beta1, beta2 = betas
    m = torch.zeros_like(gradients[0])
    v = torch.zeros_like(gradients[0])
    for g in gradients:
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
    t = len(gradients)
    return (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt() + eps)


def gradient_statistics(
    gradients: dict[str, list[Tensor]],
    reference: str,
    grad_clip: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> dict[str, dict[str, Any]]:
    """The per-method figures of the module docstring from :func:`method_gradients`."""
    ref = torch.stack(gradients[reference])
    total = ref.sum(0)
    count = len(ref)
    others = [(total - ref[b]) / (count - 1) for b in range(count)]  # leave-one-out means
    rows: dict[str, dict[str, Any]] = {}
    for name, grads in gradients.items():
        norms = [float(g.norm()) for g in grads]
        agreement = [_cosine(g, o) for g, o in zip(grads, others, strict=True)]
        adam = [_cosine(torch.sign(g), o) for g, o in zip(grads, others, strict=True)]
        pairs = [
            _cosine(grads[i], grads[j]) for i in range(len(grads)) for j in range(i + 1, len(grads))
        ]
        half = len(grads) // 2
        first, second = slice(0, half), slice(half, 2 * half)
        adam_after = statistics.fmean(
            _cosine(adam_direction(grads[a], betas, eps), ref[b].mean(0))
            for a, b in ((first, second), (second, first))
        )
        rows[name] = {
            "grad_norm": statistics.median(norms),
            "clipped": sum(n > grad_clip for n in norms) / len(norms) if grad_clip else 0.0,
            "consistency": _mean_interval(pairs),
            "agreement": _mean_interval(agreement),
            "adam_agreement": _mean_interval(adam),
            "adam_after": adam_after,
        }
    return rows


def run_gradients(
    config_path: str | None, overrides: list[str], methods: list[str], batches: int, reference: str
) -> int:
    """Build the run of the config at its starting policy and print the table."""
    from creditbench.harness.config import build_method_config, load_config
    from creditbench.harness.training.trainer import Trainer
    from creditbench.methods.registry import list_methods

    grad_clip = load_config(config_path, overrides).train.grad_clip
    one_gradient = ["train.grad_clip=0", "train.minibatches=1", "train.ppo_epochs=1"]
    config = load_config(config_path, [*overrides, *one_gradient])
    registry = list_methods()
    built = {name: registry[name](build_method_config(registry[name], {})) for name in methods}
    with tempfile.TemporaryDirectory() as scratch:
        trainer = Trainer(config, scratch)
        trainer.build()
        gradients = method_gradients(trainer, built, batches, reference)
    train = config.train
    rows = gradient_statistics(gradients, reference, grad_clip, tuple(train.adam_betas), 1e-8)
    print(
        f"{batches} batches of {config.rollout.prompts_per_step} x {config.rollout.group_size} "
        f"at the starting policy of task {config.task} {config.task_options}; "
        f"reference gradient: {reference} (mean over the other batches)"
    )
    print(
        f"  {'method':<14} {'grad_norm':>9} {'clipped':>8}  {'consistency':>22}  "
        f"{'agreement':>22}  {'adam_agreement':>22}  {'adam_after':>10}"
    )

    def cell(value: tuple[float, float, float]) -> str:
        return f"{value[0]:.3f} [{value[1]:.3f}, {value[2]:.3f}]"

    for name, row in rows.items():
        print(
            f"  {name:<14} {row['grad_norm']:9.3f} {row['clipped']:8.0%}  "
            f"{cell(row['consistency']):>22}  {cell(row['agreement']):>22}  "
            f"{cell(row['adam_agreement']):>22}  {row['adam_after']:10.3f}"
        )
    return 0
