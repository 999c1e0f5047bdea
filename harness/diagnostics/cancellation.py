"""Token gradient cancellation: does a loss leave a net gradient on tokens a whole group shares?

Ding et al., "Design Conditions for Intra-Group Learning of Sequence-Level Rewards: Token
Gradient Cancellation" (arXiv 2604.13088). Take a token ``a*`` in a context ``h*`` that every
response of a group contains, such as a token of the prefix all responses to one prompt start
with. Write ``g_it = dL / d log pi(y_it)``, the coefficient the loss gives to the log-prob of
token t of response i. Context and token are the same in every response, so their score
functions are the same too, and the loss moves the parameters through that token by

    (sum_i g_it) * grad log pi(a* | h*).

The reward carries no information about a token every response holds, so this net coefficient
should vanish. With the advantages summing to zero over the group it does whenever every
response gives the token the same weight. GRPO's ``1/|o_i|`` with unequal lengths, GSPO's
sequence ratio off-policy and a clip active for one sign of advantage break it.

Definitions over one batch. Two responses of a group *share* token t when their prompts are
the same and their token ids agree at every position up to and including t: then the context
and the token are the same. A *shared set* is a largest set S of at least two responses of a
group that share token t and carry loss there (``response_mask = 1``). With the token
advantages ``a_i`` of its members (``A[i, t]``) and their coefficients ``g_i = g_it``, write
the loss's coefficients as ``g_i = c_i a_i``: the design condition asks for equal ``c_i``. The
part of the net coefficient that unequal ``c_i`` cause is

    excess = sum_S g_i - cbar * sum_S a_i,   cbar = sum_S sign(a_i) g_i / sum_S |a_i|

(``cbar`` is the ``|a_i|``-weighted mean of ``c_i``; ``excess = sum_S g_i`` when every
``a_i = 0``). It is 0 whenever the ``c_i`` are equal, whatever S, and when S is the whole group
with ``sum_i a_i = 0`` (the paper's case) it is the whole net coefficient ``sum_i g_i``. A
subset of the group may rightly get a net push, ``c * sum_S a_i``: its members' rewards say so.
Summed over every shared set and position:

    cancel_residual    = sum |excess| / sum_S |g_i|        0: the weights are exchangeable;
                                                            at most 2
    cancel_ratio       = sum |excess| / sum |g_it|         the second sum over the loss tokens,
                                                            outside any shared set, of the
                                                            groups that have one
        the drift on shared tokens relative to the gradient on the rest.
    cancel_shared_frac = loss tokens in a shared set / loss tokens of the batch.

Each is NaN when its denominator is 0. Torch only. Computing ``g`` needs one evaluation of the
loss on log-probs the batch already holds (:func:`logprob_gradient`), no model pass.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from creditbench.methods.prefix_tree import prefix_classes

CANCEL_KEYS = ("cancel_residual", "cancel_ratio", "cancel_shared_frac")
"""The keys :func:`cancellation_diagnostics` returns (and the trainer logs per step)."""


def logprob_gradient(loss_of: Callable[[Tensor], Tensor], logprobs: Tensor) -> Tensor:
    """``g = dL / d logprobs``, ``[B, T]``: the coefficient the loss gives each token's log-prob.

    ``loss_of`` maps log-probs ``[B, T]`` to a scalar loss; it is evaluated once on a detached
    copy of ``logprobs``. A loss that does not depend on some entry gives it 0.
    """
    leaf = logprobs.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        loss = loss_of(leaf)
    if not loss.requires_grad:
        return torch.zeros_like(leaf)
    (grad,) = torch.autograd.grad(loss, leaf, allow_unused=True)
    return torch.zeros_like(leaf) if grad is None else grad.detach()


def cancellation_diagnostics(
    token_grad: Tensor,
    advantages: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    prompt_ids: Tensor | None = None,
    prompt_mask: Tensor | None = None,
) -> dict[str, float]:
    """``cancel_residual``, ``cancel_ratio`` and ``cancel_shared_frac`` of one batch.

    Args:
        token_grad: ``[B, T]`` the loss's gradient on each token log-prob
            (:func:`logprob_gradient`).
        advantages: ``[B, T]`` the token advantages the loss was given.
        response_ids: ``[B, T]`` response tokens.
        response_mask: ``[B, T]`` 1 on response tokens.
        group_ids: ``[B]``; responses to one prompt share an id.
        prompt_ids: ``[B, P]``; when given (with ``prompt_mask``), responses with different
            prompts never share a token.
        prompt_mask: ``[B, P]`` 1 on prompt tokens.
    """
    carries = response_mask.detach() > 0
    g = token_grad.detach().to(torch.float64) * carries
    a = advantages.detach().to(torch.float64) * carries
    cls, depth = prefix_classes(response_ids, group_ids, prompt_ids, prompt_mask)
    size = int(cls.max()) + 1 if cls.numel() else 0

    def per_class(values: Tensor, t: int) -> Tensor:
        return torch.zeros(size, dtype=torch.float64).index_add_(0, cls[:, t], values)

    shared = torch.zeros_like(carries)
    excess_total = gross_total = 0.0
    for t in range(depth):
        here = carries[:, t].to(torch.float64)
        count = per_class(here, t)
        in_set = carries[:, t] & (count[cls[:, t]] >= 2)
        if not bool(in_set.any()):
            continue
        shared[:, t] = in_set
        keep = in_set.to(torch.float64)
        gt, at = g[:, t] * keep, a[:, t] * keep
        net, signed = per_class(gt, t), per_class(torch.sign(at) * gt, t)
        total, spread = per_class(at, t), per_class(at.abs(), t)
        cbar = torch.where(spread > 0, signed / spread.clamp(min=1e-300), torch.zeros_like(net))
        excess_total += float((net - cbar * total).abs().sum())
        gross_total += float(gt.abs().sum())
    counted = torch.isin(group_ids, group_ids[shared.any(-1)])
    rest = carries & counted.unsqueeze(-1) & ~shared
    rest_total = float(g[rest].abs().sum())

    def ratio(num: float, den: float) -> float:
        return num / den if den > 0 else float("nan")

    return {
        "cancel_residual": ratio(excess_total, gross_total),
        "cancel_ratio": ratio(excess_total, rest_total),
        "cancel_shared_frac": ratio(float(shared.sum()), float(carries.sum())),
    }


def loss_cancellation(
    loss_of: Callable[[Tensor], Tensor],
    logprobs: Tensor,
    advantages: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    prompt_ids: Tensor | None = None,
    prompt_mask: Tensor | None = None,
) -> dict[str, float]:
    """:func:`cancellation_diagnostics` of the loss ``loss_of`` evaluated at ``logprobs``.

    The trainer passes a method's loss on the step's batch, its advantages and the behaviour
    log-probs: the gradient of the first update of the step, which starts at the behaviour
    policy.
    """
    grad = logprob_gradient(loss_of, logprobs)
    return cancellation_diagnostics(
        grad, advantages, response_ids, response_mask, group_ids, prompt_ids, prompt_mask
    )
