"""Dr. GRPO: GRPO Done Right.

Paper: Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective",
arXiv 2503.20783 (2025), §3.2.

Key equations (G responses o_1..o_G to one question q):

    A_i = R(q, o_i) - mean(R(q, o_1), ..., R(q, o_G))           (no division by std)

    J(θ) = E[ 1/G Σ_i Σ_t min( ρ_it A_i, clip(ρ_it, 1-ε, 1+ε) A_i ) ]    (no 1/|o_i|)

GRPO's two normalisers are the paper's two biases: 1/|o_i| makes a long wrong answer cheaper
per token than a short one, and 1/std up-weights questions that are almost always or almost
never solved. Dropping both leaves a sum over tokens, which is divided by a constant L, the
generation budget (verl's ``seq-mean-token-sum-norm``; the authors' code is said to do the
same, not checked here), so that the loss scale does not depend on the batch:

    L(θ) = -1/(G L) Σ_i Σ_t min(...)

Defaults: aggregation ``seq-mean-token-sum-norm`` with L = ``horizon``, by default the run's
generation limit ``rollout.max_new_tokens`` (the paper's generation budget); no KL term (the §3.2
objective has none; verl's Dr. GRPO recipe also sets ``use_kl_loss=False``); ε = 0.2, PPO's
usual value (the paper keeps the clip; its ε was not checked against the paper's text).

Deviations:
    - ``horizon`` = 0 (the default) takes L from the run's generation limit
      (``services.max_new_tokens``), a constant; on a bare batch without services, the batch's
      padded width T. verl's ``seq-mean-token-sum-norm`` divides each micro-batch's token sum
      by its padded width (``loss_mask.shape[-1]``, the max response length when responses are
      padded to it) and has no 1/N_seq; this file keeps the §3.2 objective's 1/G (here 1/N_seq
      over the minibatch), so the two differ by that factor, a learning-rate scale.
    - A group of one gets advantage 0 (``singleton="raw"`` gives verl's raw-reward rule).
    - The paper's other hyper-parameters (learning rate, G, the data) belong to its recipe,
      not to the method; they live in the paper card, not here.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from .base import SINGLETON_RULES, CreditMethod, LossConfig, Needs, check_fields
from .contract import Services
from .core import RolloutBatch, broadcast_to_tokens, group_normalized_scores
from .registry import register_method


def drgrpo_advantages(
    rewards: Tensor, response_mask: Tensor, group_ids: Tensor, *, singleton: str = "zero"
) -> Tensor:
    """Dr. GRPO's mean-centred outcome advantage on every response token.

    Args:
        rewards: ``[B]`` scalar rewards.
        response_mask: ``[B, T]``.
        group_ids: ``[B]``.
        singleton: ``"zero"`` or ``"raw"`` (verl: a lone response keeps its reward).

    Returns:
        ``[B, T]``: ``r_i - mean_g`` on the tokens of response i.
    """
    scores = group_normalized_scores(
        rewards,
        group_ids,
        scale_by_std=False,
        singleton=singleton,  # type: ignore[arg-type]
    )
    return broadcast_to_tokens(scores, response_mask)


@dataclass
class DrGRPOConfig(LossConfig):
    """Dr. GRPO hyper-parameters (loss fields inherited from `LossConfig`).

    ``horizon`` is the constant L of the loss; 0 (the default) means the run's generation
    limit, ``rollout.max_new_tokens``.
    """

    aggregation: str = "seq-mean-token-sum-norm"
    singleton: str = "zero"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self, [("singleton", self.singleton in SINGLETON_RULES, "must be zero or raw")]
        )


@register_method("drgrpo")
class DrGRPO(CreditMethod):
    summary = "GRPO without std scaling and without 1/|o| length normalisation"
    paper = "Understanding R1-Zero-Like Training: A Critical Perspective (arXiv 2503.20783)"
    Config = DrGRPOConfig
    needs = Needs(behaviour_logprobs=False)  # its rollout and advantages never read them
    config: DrGRPOConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        return drgrpo_advantages(
            batch.rewards, batch.response_mask, batch.group_ids, singleton=self.config.singleton
        )
