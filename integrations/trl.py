"""creditbench methods inside TRL: a `GRPOTrainer` whose advantages are a method's token credit.

TRL's ``GRPOTrainer`` samples, scores and trains; its loss accepts advantages of shape ``[B, T]``
as well as ``[B]``. :class:`CreditGRPOTrainer` keeps all of TRL (sampling, reward functions,
clipping ``epsilon``/``epsilon_high``, ``loss_type`` aggregation, KL ``beta``, logging) and
replaces the advantages with a creditbench method's, computed on the batch TRL sampled with the
services TRL's model can give (`creditbench.integrations.trl_services`: behaviour and reference
log-probs and statistics, scoring under prompt variants, an auxiliary model's fit)::

    trainer = CreditGRPOTrainer(
        method="tempo",                     # or an instance: get_method("tempo")(td_weight=0.5)
        model=model, reward_funcs=[reward], args=GRPOConfig(...), train_dataset=dataset,
        task=get_task("math"),              # for a method that reads the task's prompt variants
    )

With ``task``, every row of the training set carries ``problem_index``, its index in the
task's train split. Which methods run, and why the others do not, is
`creditbench.harness.services.engines`'s rule (``docs/engines.md`` lists them).

The method sees the whole generation batch of every process, as TRL's own group statistics do:
TRL gathers the rewards of all processes, with the ``num_generations`` completions of a prompt
adjacent in that order; the adapter gathers the prompt and completion ids and masks the same
way (padded to the longest), computes the credit once on the whole batch, and keeps this
process's slice. A method whose loss averages over fewer tokens than the completion
(`CreditMethod.loss_mask`: T-SPMO's credited pairs, the forking tokens) gets it as TRL's
``completion_mask``. DAPO's dynamic sampling (`GroupFilter` ``mixed_groups``) draws more
generation batches from a second pass over the training set until the step has as many mixed
groups as one batch, at most the method's ``max_batches``.

TRL's logs show the method's credit, not TRL's own advantages: the completions table's
``advantage`` column (W&B, ``log_completions``) holds each completion's mean credit over its
tokens (for a method with one value a response, that value), the metric ``credit/token_std``
the mean spread of the credit along a completion (0 for GRPO), and what the method reports
(``services.report``) appears as ``credit/<name>``.

Deviations from the builtin trainer and from TRL's own advantages: the method's Config decides
the credit's scaling (TRL's ``scale_rewards`` is not read;
``multi_objective_aggregation="normalize_then_sum"`` is refused) while TRL's arguments decide
the loss (``loss_type``, ``epsilon``, ``beta``); a completion every reward function scored
``None`` gets advantage 0, as in TRL, but enters its group's statistics with reward 0; every
process runs the method on the whole gathered batch, each scoring pass split between the
processes (`trl_services.RowShards`) but an auxiliary model's fit (PRIME's) run whole on each;
dynamic sampling runs on one process only, and a step still short of mixed groups keeps the
most whole groups whose rows TRL's ``steps_per_generation`` split evenly (the builtin trains
every mixed group it found).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.utils.data import DataLoader
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler

from creditbench.harness.services.engines import TASK_TEXT, TRL, engine_batch, method_for_engine
from creditbench.methods.base import CreditMethod
from creditbench.methods.contract import MIXED_GROUPS, PROBLEM_INDEX
from creditbench.methods.core import RolloutBatch, concat_batches, rows_of_mixed_groups

from .trl_services import RowShards, TRLServices, adamw_like_trl

# the training set's column that gives a row's index in task.problems("train")
PROBLEM_COLUMN = "problem_index"


class CreditGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` with a creditbench method's ``[B, T]`` advantages.

    Args:
        method: a registered method name (with ``method_options`` for its Config) or an
            instance.
        method_options: the method's Config fields, e.g. ``{"std_eps": 1e-4}``.
        task: the creditbench task (a `harness.tasks` task) the training set comes from, for a
            method that reads its prompt variants or problems; the rows then carry
            ``problem_index``.
        *args, **kwargs: ``GRPOTrainer``'s.
    """

    def __init__(
        self,
        *args: Any,
        method: str | CreditMethod = "grpo",
        method_options: dict[str, Any] | None = None,
        task: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        engine = TRL if task is not None else TRL.without(TASK_TEXT)
        self.credit_method = method_for_engine(
            method, engine, self.max_completion_length, **(method_options or {})
        )
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "multi_objective_aggregation: creditbench methods take one reward per completion; "
                "use sum_then_normalize"
            )
        cls = type(self.credit_method)
        self._reference_logprobs = self.credit_method.config.needs_reference_logprobs
        self._own_loss_mask = cls.loss_mask is not CreditMethod.loss_mask
        self._filter = self.credit_method.group_filter()
        self._keeps_mixed_groups = self._filter is not None and self._filter.keep == MIXED_GROUPS
        if self._keeps_mixed_groups:
            if self.accelerator.num_processes > 1:
                raise ValueError(
                    f"method {self.credit_method.name!r}: its dynamic sampling runs on one TRL "
                    "process; on several GPUs use verl, whose algorithm.filter_groups does it"
                )
        self.credit_services = TRLServices(
            policy=self.model,
            tokenizer=self.processing_class,
            max_new_tokens=self.max_completion_length,
            temperature=self.temperature,
            micro_batch_size=self.args.per_device_train_batch_size,
            seed=self.args.seed,
            reference=self._frozen_reference() if self.credit_method.needs_reference else None,
            optimizer=adamw_like_trl(self.args),
            task=task,
            shards=self._row_shards(),
        )
        self._refills: Any = None
        self._gathered_rewards: torch.Tensor | None = None

    def _row_shards(self) -> RowShards:
        """Each process scores its share of the gathered batch's rows (trl_services)."""
        acc = self.accelerator
        if acc.num_processes == 1:
            return RowShards()
        return RowShards(
            acc.process_index, acc.num_processes, lambda t: acc.gather(t.to(acc.device)).cpu()
        )

    def _frozen_reference(self) -> Any:
        """TRL's reference model when it keeps one (``beta`` > 0), else a frozen copy of the
        initial policy."""
        if self.ref_model is not None:
            return self.ref_model
        if hasattr(self.model, "peft_config"):
            raise ValueError(
                f"method {self.credit_method.name!r} scores under the initial policy; with a PEFT "
                "adapter set beta > 0 so that TRL keeps a reference model"
            )
        return copy.deepcopy(self.model).requires_grad_(False)

    # --- one generation batch ------------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        self._gathered_rewards = rewards_per_func  # every process's rows, in gather order
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        output, batch, unscorable = self._draw(inputs, group_size)
        if mode == "train" and self._keeps_mixed_groups:
            output, batch, unscorable = self._keep_mixed_groups(output, batch, unscorable)
        step, max_steps = self.state.global_step, self.state.max_steps
        self.credit_services.begin_step(step, step / max_steps if max_steps else 0.0)
        if self.credit_method.needs.reads_behaviour:
            statistics = self.credit_method.needs.behaviour_statistics
            self.credit_services.score_behaviour(batch, statistics)
        if self._reference_logprobs:
            batch.ref_logprobs = self.credit_services.score(batch, model="reference")
        advantages = self.credit_method.advantages(batch, self.credit_services)
        advantages = advantages * batch.response_mask
        advantages[unscorable] = 0.0
        self._log_credit(advantages, batch.response_mask, mode)
        local_rows, local_width = output["completion_mask"].shape
        start = self.accelerator.process_index * local_rows
        rows = slice(start, start + local_rows)
        device = output["completion_mask"].device
        output["advantages"] = advantages[rows, :local_width].to(device)
        if self._own_loss_mask:  # TRL's loss averages over completion_mask
            mask = self.credit_method.loss_mask(batch)[rows, :local_width]
            output["completion_mask"] = mask.to(output["completion_mask"].dtype).to(device)
            output["num_items_in_batch"] = self.accelerator.gather(mask.sum().to(device)).sum()
        return output

    def _draw(self, inputs, group_size: int) -> tuple[dict, RolloutBatch, torch.Tensor]:
        """TRL's own generation and scoring of ``inputs``, and the whole (gathered) batch as a
        `RolloutBatch` for the method, with the rows no reward function could score."""
        output = super()._generate_and_score_completions(inputs)
        per_func = self._gathered_rewards
        assert per_func is not None, "TRL computed no rewards for this batch"
        self._gathered_rewards = None
        weights = self.reward_weights.to(per_func.device)
        unscorable = torch.isnan(per_func).all(dim=1)
        rewards = torch.nan_to_num(per_func * weights.unsqueeze(0)).sum(dim=1)

        # the method's batch lives on the CPU, as the builtin trainer's: its math (group
        # statistics, scans) is written for it; the scoring passes move rows to the model
        acc = self.accelerator
        pad = self._tokenizer.pad_token_id

        def gathered(key: str, fill: int = 0, left: bool = False) -> torch.Tensor:
            padded = acc.pad_across_processes(output[key], 1, pad_index=fill, pad_first=left)
            return acc.gather(padded).cpu()

        ids, mask = gathered("completion_ids", pad), gathered("completion_mask")
        rewards = rewards.cpu()
        groups = torch.arange(rewards.shape[0]) // group_size
        batch = engine_batch(rewards, mask, groups, response_ids=ids)
        batch.prompt_ids = gathered("prompt_ids", pad, left=True)
        batch.prompt_mask = gathered("prompt_mask", left=True).to(torch.float32)
        ends = torch.isin(ids, torch.tensor(self.eos_token_ids)) & (mask > 0)
        batch.truncated = ~ends.any(dim=1)
        if inputs and PROBLEM_COLUMN in inputs[0]:
            local = torch.tensor([int(row[PROBLEM_COLUMN]) for row in inputs], device=acc.device)
            batch.extras = {PROBLEM_INDEX: acc.gather(local).cpu()}
        return output, batch, unscorable.cpu()

    def _keep_mixed_groups(
        self, output: dict, batch: RolloutBatch, unscorable: torch.Tensor
    ) -> tuple[dict, RolloutBatch, torch.Tensor]:
        """DAPO's dynamic sampling on TRL's batches: keep the groups whose rewards differ,
        drawing more generation batches until there are as many as one batch holds (at most
        the method's ``max_batches`` draws); see the module's Deviations for a short step."""
        assert self._filter is not None  # _keeps_mixed_groups
        group_size = self.num_generations
        target = batch.size // group_size
        draws = [(output, batch, unscorable)]
        kept: list[tuple[dict, RolloutBatch, torch.Tensor]] = []
        found = 0
        limit = self._filter.max_batches or 1_000_000
        for draw in range(limit):
            if draw > 0:
                draws.append(self._draw(self._next_refill(), group_size))
            out, b, bad = draws[-1]
            keep = rows_of_mixed_groups(b.rewards, b.group_ids)
            if bool(keep.any()):
                kept.append(_rows(out, b, bad, keep))
                found += int(keep.sum()) // group_size
            if found >= target:
                break
        if not kept:
            return draws[-1]
        groups = min(found, target)
        split = self.args.steps_per_generation
        while groups and (groups * group_size) % split:
            groups -= 1
        if not groups:
            return draws[-1]
        out, b, bad = _concat(kept, self._tokenizer.pad_token_id)
        first = torch.arange(groups * group_size)
        return _rows(out, b, bad, first)

    def _next_refill(self) -> list[dict]:
        """The next generation batch of prompts from a second pass over the training set, in
        an order of its own (seed + 1), each prompt ``num_generations`` times."""
        if self._refills is None:
            prompts = self.args.generation_batch_size // self.num_generations
            sampler = RepeatSampler(
                data_source=self.train_dataset,
                mini_repeat_count=self.num_generations,
                batch_size=prompts,
                repeat_count=1,
                shuffle=True,
                seed=self.args.seed + 1,
            )
            loader = DataLoader(
                self.train_dataset,
                batch_size=self.args.generation_batch_size,
                sampler=sampler,
                collate_fn=lambda rows: rows,
            )
            self._refills = (loader, iter(loader))
        loader, rows = self._refills
        batch = next(rows, None)
        if batch is None:
            rows = iter(loader)
            self._refills = (loader, rows)
            batch = next(rows)
        return batch

    def _log_credit(self, advantages: torch.Tensor, mask: torch.Tensor, mode: str) -> None:
        """Put the method's credit where TRL logged its own advantages for these completions:
        the last rows of the completions table's ``advantage`` column, and metrics."""
        tokens = mask.sum(-1).clamp(min=1)
        mean = (advantages * mask).sum(-1) / tokens
        spread = (((advantages - mean[:, None]) ** 2 * mask).sum(-1) / tokens).sqrt()
        logged = self._logs["advantages"]
        for _ in range(min(len(mean), len(logged))):  # TRL's own, appended for this batch
            logged.pop()
        logged.extend(mean.tolist())
        self._metrics[mode]["credit/token_std"].append(spread.mean().item())
        for key, value in self.credit_services.stats.items():
            self._metrics[mode][f"credit/{key}"].append(value)


# TRL's per-row output tensors: prompt-side (left-padded), completion-side (right-padded)
_PROMPT_KEYS = ("prompt_ids", "prompt_mask")


def _rows(
    output: dict, batch: RolloutBatch, unscorable: torch.Tensor, index: torch.Tensor
) -> tuple[dict, RolloutBatch, torch.Tensor]:
    """Rows ``index`` (bool or long ``[B]``) of one process's TRL output and of the batch."""
    taken = {
        key: value[index.to(value.device)]
        if isinstance(value, torch.Tensor) and value.ndim >= 1
        else value
        for key, value in output.items()
    }
    mask = taken["completion_mask"]
    taken["num_items_in_batch"] = mask.sum()
    return taken, batch.select(index), unscorable[index.to(unscorable.device)]


def _concat(
    parts: list[tuple[dict, RolloutBatch, torch.Tensor]], pad_id: int
) -> tuple[dict, RolloutBatch, torch.Tensor]:
    """Several draws' rows as one: TRL's prompt tensors left-padded, the others right-padded
    to the widest; the batch by `methods.core.concat_batches`, which keeps groups apart."""
    merged: dict[str, Any] = {}
    for key, first in parts[0][0].items():
        if not isinstance(first, torch.Tensor) or first.ndim == 0:
            continue
        values = [out[key] for out, _, _ in parts]
        width = max(v.shape[1] for v in values) if first.ndim >= 2 else 0
        fill = pad_id if key in ("prompt_ids", "completion_ids") else 0
        padded = []
        for v in values:
            if v.ndim >= 2 and v.shape[1] < width:
                extra = v.new_full((v.shape[0], width - v.shape[1], *v.shape[2:]), fill)
                v = torch.cat([extra, v] if key in _PROMPT_KEYS else [v, extra], dim=1)
            padded.append(v)
        merged[key] = torch.cat(padded)
    merged["num_items_in_batch"] = merged["completion_mask"].sum()
    batch = concat_batches([b for _, b, _ in parts])
    return merged, batch, torch.cat([bad for _, _, bad in parts])
