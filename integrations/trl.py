"""creditbench methods inside TRL: a `GRPOTrainer` whose advantages are a method's token credit.

TRL's ``GRPOTrainer`` samples, scores and trains; its loss accepts advantages of shape ``[B, T]``
as well as ``[B]``. :class:`CreditGRPOTrainer` keeps all of TRL (sampling, reward functions,
clipping ``epsilon``/``epsilon_high``, ``loss_type`` aggregation, KL ``beta``, logging) and
replaces only the advantages: those of a creditbench method that computes its credit from the
batch alone (`creditbench.integrations.engine`; TRL gives it the completion token ids too)::

    trainer = CreditGRPOTrainer(
        method="tempo",                     # or an instance: get_method("tempo")(td_weight=0.5)
        model=model, reward_funcs=[reward], args=GRPOConfig(...), train_dataset=dataset,
    )

The method sees the whole generation batch of every process, as TRL's own group statistics do:
TRL gathers the rewards of all processes, with the ``num_generations`` completions of a prompt
adjacent in that order; the adapter gathers the completion ids and masks the same way (padded to
the longest), computes the credit once on the whole batch, and keeps this process's slice.

TRL's logs show the method's credit, not TRL's own advantages: the completions table's
``advantage`` column (W&B, ``log_completions``) holds each completion's mean credit over its
tokens (for a method with one value a response, that value), and the metric
``credit/token_std`` the mean spread of the credit along a completion (0 for GRPO).

Deviations from TRL's own advantages: the method's Config decides the scaling (TRL's
``scale_rewards`` is not read; ``multi_objective_aggregation="normalize_then_sum"`` is refused);
a completion every reward function scored ``None`` gets advantage 0, as in TRL, but enters its
group's statistics with reward 0.
"""

from __future__ import annotations

from typing import Any

import torch
from trl import GRPOTrainer

from creditbench.methods.base import CreditMethod

from .engine import TRL, engine_batch, engine_services, method_for_engine


class CreditGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` with a creditbench method's ``[B, T]`` advantages.

    Args:
        method: a registered method name (with ``method_options`` for its Config) or an
            instance.
        method_options: the method's Config fields, e.g. ``{"std_eps": 1e-4}``.
        *args, **kwargs: ``GRPOTrainer``'s.
    """

    def __init__(
        self,
        *args: Any,
        method: str | CreditMethod = "grpo",
        method_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.credit_services = engine_services(self.max_completion_length)
        self.credit_method = method_for_engine(
            method, TRL, self.max_completion_length, **(method_options or {})
        )
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "multi_objective_aggregation: creditbench methods take one reward per completion; "
                "use sum_then_normalize"
            )
        self._gathered_rewards: torch.Tensor | None = None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        self._gathered_rewards = rewards_per_func  # every process's rows, in gather order
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        per_func = self._gathered_rewards
        assert per_func is not None, "TRL computed no rewards for this batch"
        self._gathered_rewards = None
        weights = self.reward_weights.to(per_func.device)
        unscorable = torch.isnan(per_func).all(dim=1)
        rewards = torch.nan_to_num(per_func * weights.unsqueeze(0)).sum(dim=1)

        ids, mask = output["completion_ids"], output["completion_mask"]
        local_rows, local_width = mask.shape
        all_ids = self.accelerator.gather(self.accelerator.pad_across_processes(ids, dim=1))
        all_mask = self.accelerator.gather(self.accelerator.pad_across_processes(mask, dim=1))
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        groups = torch.arange(rewards.shape[0], device=rewards.device) // group_size
        batch = engine_batch(rewards, all_mask, groups, response_ids=all_ids)
        advantages = self.credit_method.advantages(batch, self.credit_services)
        advantages = advantages * batch.response_mask
        advantages[unscorable] = 0.0
        self._log_credit(advantages, batch.response_mask, mode)
        start = self.accelerator.process_index * local_rows
        output["advantages"] = advantages[start : start + local_rows, :local_width].to(mask.device)
        return output

    def _log_credit(self, advantages: torch.Tensor, mask: torch.Tensor, mode: str) -> None:
        """Put the method's credit where TRL logged its own advantages for these completions:
        the last rows of the completions table's ``advantage`` column, and a metric."""
        tokens = mask.sum(-1).clamp(min=1)
        mean = (advantages * mask).sum(-1) / tokens
        spread = (((advantages - mean[:, None]) ** 2 * mask).sum(-1) / tokens).sqrt()
        logged = self._logs["advantages"]
        for _ in range(min(len(mean), len(logged))):  # TRL's own, appended for this batch
            logged.pop()
        logged.extend(mean.tolist())
        self._metrics[mode]["credit/token_std"].append(spread.mean().item())
