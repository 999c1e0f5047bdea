"""OPO: on-policy RL with the optimal reward baseline, a length-weighted group mean.

Paper: Hao, Dong, Wu, Huang, Chi and Wei, "On-Policy RL with Optimal Reward Baseline",
arXiv 2505.23585 (2025). The abstract and §1 were read: OPO is two things, exact on-policy
training (every gradient step on freshly sampled responses) and "a practically feasible
formulation of the optimal reward baseline that minimizes gradient variance"; the
implementation is verl's ``opo`` estimator (volcengine/verl,
``verl/trainer/ppo/core_algos.py``, ``compute_opo_outcome_advantage``), which the abstract
names.

Key equations (K responses y_1..y_K to one prompt x, rewards r_i, lengths l_i in tokens):

    b* = E[ ||∇ log π(y|x)||² r ] / E[ ||∇ log π(y|x)||² ]     (the variance-minimising baseline)
    ||∇ log π(y|x)||² ∝ l_y                                      (tokens' gradients orthogonal,
                                                                  of similar norm)
    b = Σ_i l_i r_i / Σ_i l_i,        A_i = r_i - b              (every token of y_i gets A_i)

No division by a standard deviation; no KL term, no clip needed on an exactly on-policy step
(the ratio is 1). The first two lines are read in third-party transcriptions of the paper's
§2 (tagged so on the page); the third is verl's code.

Defaults: token-mean aggregation and no KL (verl's actor defaults, which OPO's example keeps);
PPO-clip ε = 0.2 stays on, inert where the update is exactly on-policy.

Deviations:
    - Exact on-policy training is the run's setting, not the method's: one optimizer step per
      sampled batch (``train.minibatches: 1``, ``train.ppo_epochs: 1``). The board's protocol
      takes 4 minibatches of one batch for every method, so OPO's row there tests the
      baseline alone; the clip then acts as it does for GRPO.
    - A group of one gets baseline 0 (its advantage is its reward), as in verl
      (``singleton="raw"``); ``singleton="zero"`` gives it advantage 0, the rule of GRPO here.
    - ``baseline="mean"`` (ours, an ablation) uses the plain group mean: Dr. GRPO's advantage
      with OPO's token-mean loss, so a row can tell the length weights' share.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import SINGLETON_RULES, CreditMethod, LossConfig, Needs, check_fields
from .contract import Reduction, Services
from .core import RolloutBatch, broadcast_to_tokens
from .registry import register_method

BASELINES = ("length_weighted", "mean")


def length_weighted_baselines(
    rewards: Tensor, lengths: Tensor, group_ids: Tensor, *, weighted: bool = True
) -> Tensor:
    """``[B]`` each response's group baseline ``Σ l r / Σ l`` over its group (``rewards``,
    ``lengths`` and ``group_ids`` ``[B]``); with ``weighted=False`` the plain group mean.
    0 for a group of one, as verl gives it."""
    r = rewards.double()
    w = lengths.double() if weighted else torch.ones_like(r)
    baselines = torch.zeros_like(r)
    for group in torch.unique(group_ids):
        rows = group_ids == group
        if int(rows.sum()) < 2:
            continue
        baselines[rows] = (w[rows] * r[rows]).sum() / w[rows].sum().clamp(min=1e-12)
    return baselines


def opo_advantages(
    rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    *,
    weighted: bool = True,
    singleton: str = "raw",
) -> Tensor:
    """``[B, T]`` ``A_i = r_i - Σ_j l_j r_j / Σ_j l_j`` on the tokens of response i, 0 on
    padding; ``rewards`` ``[B]``, ``response_mask`` ``[B, T]`` (l_i its row sum), ``group_ids``
    ``[B]``. A group of one keeps its reward (``singleton="raw"``) or gets 0 (``"zero"``)."""
    lengths = response_mask.sum(-1)
    baselines = length_weighted_baselines(rewards, lengths, group_ids, weighted=weighted)
    scores = rewards.double() - baselines
    if singleton == "zero":
        alone = (group_ids[:, None] == group_ids[None, :]).sum(-1) == 1
        scores = torch.where(alone, torch.zeros_like(scores), scores)
    return broadcast_to_tokens(scores.to(rewards.dtype), response_mask)


@dataclass
class OPOConfig(LossConfig):
    """OPO's settings: ``baseline`` (``length_weighted``, the method; ``mean``, the ablation
    without its weights) and ``singleton`` (a group of one keeps its reward, verl's rule, or
    gets 0). Loss fields: `LossConfig`'s (ε 0.2, token-mean, no KL)."""

    baseline: str = "length_weighted"
    singleton: str = "raw"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self,
            [
                ("baseline", self.baseline in BASELINES, f"must be one of {', '.join(BASELINES)}"),
                ("singleton", self.singleton in SINGLETON_RULES, "must be zero or raw"),
            ],
        )


@register_method("opo")
class OPO(CreditMethod):
    summary = "the group's rewards weighted by response length as baseline (verl's opo)"
    paper = "On-Policy RL with Optimal Reward Baseline (arXiv 2505.23585)"
    Config = OPOConfig
    needs = Needs(behaviour_logprobs=False)  # its rollout and advantages never read them
    # with the plain mean, OPO's advantage is Dr. GRPO's (r - mean, no std); the loss's
    # aggregation is not part of the advantage
    reduces_to = (
        Reduction("drgrpo", {"baseline": "mean", "singleton": "zero"}, "ours: equal lengths"),
    )
    config: OPOConfig

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        return opo_advantages(
            batch.rewards,
            batch.response_mask,
            batch.group_ids,
            weighted=self.config.baseline == "length_weighted",
            singleton=self.config.singleton,
        )
