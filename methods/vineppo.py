"""VinePPO: PPO whose advantages are Monte-Carlo values at every reasoning step.

Paper: Kazemnejad, Aghajohari, Portelance, Sordoni, Reddy, Courville, Le Roux, "VinePPO:
Refining Credit Assignment in RL Training of LLMs", arXiv 2410.01679 (2024). Code:
McGill-NLP/VinePPO (``math_episode_generator_with_mc_advantages.py``, the ``*_vineppo_*``
configs).

Key equations (γ = 1, the reward at the end; s_k = the prompt and the response's first k steps;
the estimator and its sharing are in :mod:`methods.values`):

    V̂(s_k) = 1/K Σ_{j=1..K} R(τ_j),   τ_j ~ π(· | s_k)        (K rollouts from the state)
    A_k = V̂(s_{k+1}) - V̂(s_k),   V̂(s_n) := R                  (the step's advantage)
    A_t = A_k for every token t of step k, then whitened over the batch's tokens

    L = PPO-clip(ρ_t, A_t), ε = 0.2, token mean over the batch,
        + 1e-4 · mean_i Σ_t min(KL_k3,t(π || π_ref), 10)       (each sequence's sum)

There is no value network: the K continuations from each state are the critic. Identical
states (the group's shared empty response) share their rollouts, as the code's unique value
requests do. The rollouts are charged to the budget like every generation (no scoring pass:
only their rewards are read).

Deviations:
    - K = 9 in the code (``episode_generators/9rolls.jsonnet``) is the default; the testbed
      suites run fewer, stated where they set it.
    - Steps are the task's (``steps: auto``, the task's ``step_spans``), as in the code, where
      the task cuts a response (``split_solution_into_intermediate_steps``,
      ``src/treetune/tasks/gsm8k.py`` and ``math.py``) and ``reasoning_step_delimiter`` (''
      in the configs) only re-joins the steps to check the cut. Testbed: one line per step,
      the answer line last. GSM8K: one line per step, a closing ``#### N`` line joined to the
      step before. MATH and MATH-500: sentences and lines outside LaTeX, after the code's
      ``math_extract_steps_inplace.py``, but ours never cuts inside a formula (the code cuts
      at its newlines) nor breaks a long step (the code breaks parts over 100 characters):
      4.9 steps per reference solution of MATH test against the code's 9.6
      (``harness/tasks/solution_steps.py``). Blank-line chunks only on a task without steps.
    - Every state of a response is valued; the GSM8K configs value only the first 25 after
      the prompt (``max_step_for_value_estimation``, ``polIter_*_vineppo_GSM8K.jsonnet``) and
      fill the rest backward (V = R there); the MATH configs set no cap.
    - A rollout that runs past the generation limit, counted from the response's start,
      scores 0 (the code's unfinished-response reward is 0 too).
    - The KL term is the code's: k3 per token, clamped to [0, 10], summed over each
      response and averaged over responses (``ref_kl.sum(dim=1).mean()`` in treetune's
      ``ppo_trainer.py``; ``kl_penalty_loss_clip_max=10`` in ``configs/trainers/
      klLoss.jsonnet``), not averaged over tokens as the policy loss is
      (``kl_aggregation``, ``kl_clip_max``).
    - The code's learning-rate schedule (3% warm-up, linear decay), sampling temperature 0.6
      and top-p 0.9 are run settings here, not the method's.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from .base import CreditMethod, LossConfig, Needs, check_fields
from .contract import Services
from .core import AGG_MODES, Normalizers, RolloutBatch, aggregate_loss, masked_whiten
from .registry import register_method
from .rollouts import STEP_MODES, with_step_ids
from .values import STATE_VALUES, exact_advantages, mc_state_values


def vineppo_advantages(batch: RolloutBatch, values: Tensor | None, *, whiten: bool) -> Tensor:
    """``[B, T]`` the step advantages V̂(s_{k+1}) - V̂(s_k) on each step's tokens, whitened over
    the batch's response tokens when ``whiten``.

    Args:
        batch: a batch with ``step_ids`` ``[B, T]``.
        values: ``[B, S]`` V̂(s_k) (:data:`STATE_VALUES`), or None (every state read at its
            group's mean reward).
    """
    advantages = exact_advantages(batch, values)
    return masked_whiten(advantages, batch.response_mask) if whiten else advantages


@dataclass
class VinePPOConfig(LossConfig):
    """VinePPO hyper-parameters (loss fields inherited from `LossConfig`)."""

    aggregation: str = "token-mean"
    kl_coef: float = 1e-4
    kl_aggregation: str = "seq-mean-token-sum"
    kl_clip_max: float = 10.0
    rollouts_per_state: int = 9
    whiten: bool = True
    steps: str = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            self,
            [
                (
                    "rollouts_per_state",
                    isinstance(self.rollouts_per_state, int) and self.rollouts_per_state >= 1,
                    "must be an integer >= 1",
                ),
                ("steps", self.steps in STEP_MODES, f"must be one of {', '.join(STEP_MODES)}"),
                ("kl_aggregation", self.kl_aggregation in AGG_MODES, f"one of {AGG_MODES}"),
                ("kl_clip_max", self.kl_clip_max > 0, "must be > 0"),
            ],
        )

    def kl_loss(self, kl: Tensor, mask: Tensor, normalizers: Normalizers | None) -> Tensor:
        """The code's KL term: each token's estimate clamped to [0, ``kl_clip_max``], reduced
        by ``kl_aggregation`` (each sequence's sum, averaged over sequences)."""
        bounded = kl.clamp(0.0, self.kl_clip_max)
        return aggregate_loss(bounded, mask, self.kl_aggregation, normalizers)


@register_method("vineppo")
class VinePPO(CreditMethod):
    summary = "PPO with Monte-Carlo step values: K rollouts from every step boundary"
    paper = "VinePPO: Refining Credit Assignment in RL Training of LLMs (arXiv 2410.01679)"
    Config = VinePPOConfig
    group_local = False  # whitening over the batch mixes groups
    needs = Needs(behaviour_logprobs=False)  # its rollout and advantages never read them
    config: VinePPOConfig

    def rollout(self, services: Services) -> RolloutBatch:
        cfg = self.config
        batch = with_step_ids(services.sample_batch(), services, cfg.steps)
        values = mc_state_values(services, batch, cfg.rollouts_per_state)
        batch.extras = {**(batch.extras or {}), STATE_VALUES: values}
        return batch

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        values = (batch.extras or {}).get(STATE_VALUES)
        return vineppo_advantages(batch, values, whiten=self.config.whiten)
