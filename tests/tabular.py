"""A group of responses from a tiny tabular softmax policy whose first token is shared.

Every response starts with the same token in the same context (context 0, action 0); after it
each response has contexts of its own. The gradient of a loss on the shared context's logits
is then the exact parameter-space gradient through the shared token, the ground truth for
token gradient cancellation (notes on arXiv 2604.13088, §1.3 and §1.6) that
:mod:`creditbench.harness.diagnostics.cancellation` measures in log-prob space.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from creditbench.methods.core import RolloutBatch

VOCAB = 5
LossBuilder = Callable[[Tensor, RolloutBatch], Tensor]


@dataclass
class TabularGroup:
    """One group: ``logits`` ``[contexts, V]`` (float64, with gradient), the batch (behaviour
    log-probs, mask, rewards, one group id) and the map from a logits table to the responses'
    token log-probs ``[G, T]``."""

    logits: Tensor
    batch: RolloutBatch
    contexts: Tensor
    actions: Tensor

    def token_logprobs(self, table: Tensor | None = None) -> Tensor:
        table = self.logits if table is None else table
        return table.log_softmax(-1)[self.contexts, self.actions] * self.batch.response_mask


def tabular_group(
    lengths: Sequence[int],
    rewards: Sequence[float],
    *,
    drift: float = 0.0,
    shared_drift: float = 0.0,
    seed: int = 0,
) -> TabularGroup:
    """A group of ``G = len(lengths)`` responses; response ``i`` has ``lengths[i]`` tokens.

    Args:
        lengths: response lengths, each >= 1.
        rewards: one per response.
        drift: standard deviation of the random change from the behaviour policy's logits to
            the current ones (0: on-policy).
        shared_drift: added to the shared token's logit only (pushes its ratio above 1).
        seed: fixes the behaviour logits, the actions and the drift.
    """
    gen = torch.Generator().manual_seed(seed)
    size, width = len(lengths), max(lengths)
    num_contexts = 1 + sum(n - 1 for n in lengths)
    old_logits = torch.randn(num_contexts, VOCAB, generator=gen, dtype=torch.float64)
    logits = old_logits + drift * torch.randn(
        num_contexts, VOCAB, generator=gen, dtype=torch.float64
    )
    logits[0, 0] += shared_drift
    logits.requires_grad_(True)

    contexts = torch.zeros(size, width, dtype=torch.long)
    actions = torch.randint(0, VOCAB, (size, width), generator=gen)
    actions[:, 0] = 0
    next_context = 1
    for i, n in enumerate(lengths):
        contexts[i, 1:n] = torch.arange(next_context, next_context + n - 1)
        next_context += n - 1
    mask = (torch.arange(width) < torch.tensor(lengths).unsqueeze(-1)).double()
    # Distinct ids after the shared first token, so only position 0 is a shared prefix.
    response_ids = torch.where(mask > 0, VOCAB * contexts + actions + 1, 0)
    response_ids[:, 0] = 1
    batch = RolloutBatch(
        prompt_ids=torch.ones(size, 1, dtype=torch.long),
        prompt_mask=torch.ones(size, 1),
        response_ids=response_ids,
        response_mask=mask,
        group_ids=torch.zeros(size, dtype=torch.long),
        rewards=torch.tensor(rewards, dtype=torch.float64),
        old_logprobs=torch.zeros(size, width, dtype=torch.float64),
    )
    group = TabularGroup(logits, batch, contexts, actions)
    batch.old_logprobs = group.token_logprobs(old_logits).detach()
    return group


def shared_token_gradient(
    build_loss: LossBuilder,
    lengths: Sequence[int],
    rewards: Sequence[float],
    *,
    drift: float = 0.0,
    shared_drift: float = 0.0,
    seed: int = 0,
) -> Tensor:
    """Gradient ``[V]`` of ``build_loss(logprobs, batch)`` on the logits of the shared context.

    ``build_loss`` maps the current policy's log-probs ``[G, T]`` (with gradient) and the
    batch to a scalar loss; the other arguments are :func:`tabular_group`'s.
    """
    group = tabular_group(lengths, rewards, drift=drift, shared_drift=shared_drift, seed=seed)
    loss = build_loss(group.token_logprobs(), group.batch)
    (grad,) = torch.autograd.grad(loss, group.logits)
    return grad[0]
