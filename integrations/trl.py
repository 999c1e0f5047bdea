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

Two more of TRL's extension points host what its GRPO loop does not do itself. A method with a
loss of its own (`CreditMethod.loss` overridden: DFPO, SDPO, CCPO, ...) trains with it through
``compute_loss``: TRL's forward gives the micro-batch's log-probs, and the method's loss gets
that micro-batch's rows of the generation batch with the whole batch's counts. A method that
samples its own batch (`CreditMethod.group_filter` None: IBPO's repairs, RRPO's resets, CCPO's
two roles, VinePPO's continuations, ...) runs its rollout in ``_generate_and_score_completions``
through `trl_services.TRLRolloutServices`, the harness's services on TRL's model, from the
prompts TRL's sampler chose; its batch becomes TRL's tensors.

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
every mixed group it found). A method's own loss or own rollout runs on one process only; with
its own loss, TRL's ``loss_type``, ``epsilon`` and ``beta`` are not read (its Config decides);
its own rollout samples with the harness's sampler, not TRL's vLLM, grades with the task, not
TRL's reward functions, and an evaluation batch gets TRL's own sampling and advantages.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.utils.data import DataLoader
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import RepeatSampler

from creditbench.harness.config import RolloutConfig
from creditbench.harness.services.engines import (
    ROLLOUT,
    TASK_TEXT,
    TRL,
    engine_batch,
    has_own_loss,
    has_own_loss_mask,
    method_for_engine,
)
from creditbench.harness.services.step_plan import StepPlan
from creditbench.methods.base import CreditMethod
from creditbench.methods.compose import HostedCredit
from creditbench.methods.contract import MIXED_GROUPS, PROBLEM_INDEX
from creditbench.methods.core import Normalizers, RolloutBatch, rows_of_mixed_groups

from .trl_batches import concat_draws, on_device, take_rows
from .trl_services import RowShards, TRLRolloutServices, TRLServices, adamw_like_trl

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

    # for the type checker: what a built GRPOTrainer holds, which TRL types loosely (the base
    # TrainingArguments, optional lengths and models, any dataset or processor, the logs as a
    # Collection)
    args: GRPOConfig
    model: Any
    train_dataset: Any
    processing_class: Any
    num_generations: int
    max_completion_length: int
    _logs: Any

    def __init__(
        self,
        *args: Any,
        method: str | CreditMethod = "grpo",
        method_options: dict[str, Any] | None = None,
        task: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        engine = TRL if task is not None else TRL.without(TASK_TEXT, ROLLOUT)
        self.credit_method = method_for_engine(
            method, engine, self.max_completion_length, **(method_options or {})
        )
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "multi_objective_aggregation: creditbench methods take one reward per completion; "
                "use sum_then_normalize"
            )
        method = self.credit_method
        # a KL term of the loss's configuration (a hosted rule's host holds it)
        loss_config = method.host.config if isinstance(method, HostedCredit) else method.config
        self._reference_logprobs = loss_config.needs_reference_logprobs
        self._own_loss_mask = has_own_loss_mask(method)
        self._own_loss = has_own_loss(method)
        self._filter = method.group_filter()
        self._own_rollout = self._filter is None
        self._keeps_mixed_groups = self._filter is not None and self._filter.keep == MIXED_GROUPS
        if self.accelerator.num_processes > 1:
            one_process = {
                "its dynamic sampling": self._keeps_mixed_groups,
                "its own rollout": self._own_rollout,
                "its own loss": self._own_loss,
            }
            for what, needed in one_process.items():
                if needed:
                    raise ValueError(
                        f"method {method.name!r}: {what} runs on one TRL process (the adapter "
                        "computes it on the whole batch, which it does not split)"
                    )
        self._refills: Any = None
        self._gathered_rewards: torch.Tensor | None = None
        self._row_logs: list[dict[str, list]] = []  # TRL's completions-log rows of each draw
        self._credit_step: tuple[RolloutBatch, torch.Tensor, Normalizers] | None = None
        self._updated_at = 0  # the global step of the last generation batch's updates
        if self._own_rollout:
            self.credit_services = self._rollout_services(task)
            return
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

    def _rollout_services(self, task: Any) -> TRLRolloutServices:
        """The harness's services on TRL's model, for a method that samples its own batch."""
        if PROBLEM_COLUMN not in self.train_dataset.column_names:
            raise ValueError(
                f"train_dataset: method {self.credit_method.name!r} samples its own batch from "
                f"the task's problems, so every row needs the {PROBLEM_COLUMN!r} column"
            )
        args = self.args
        rollout = RolloutConfig(
            # GRPOConfig's __post_init__ always sets generation_batch_size
            prompts_per_step=args.generation_batch_size // self.num_generations,  # type: ignore[operator]
            group_size=self.num_generations,
            max_new_tokens=self.max_completion_length,
            temperature=self.temperature,
            top_p=args.top_p,
        )

        def more_prompts() -> list[int]:
            rows = self._next_refill()[:: self.num_generations]
            return [int(row[PROBLEM_COLUMN]) for row in rows]

        return TRLRolloutServices(
            task=task,
            policy=self.accelerator.unwrap_model(self.model),
            tokenizer=self.processing_class,
            rollout=rollout,
            micro_batch_size=args.per_device_train_batch_size,
            seed=args.seed,
            more_prompts=more_prompts,
            reference=self._frozen_reference() if self.credit_method.needs_reference else None,
            optimizer=adamw_like_trl(args),
        )

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
        step, max_steps = self.state.global_step, self.state.max_steps
        if step > self._updated_at:  # the last generation batch's optimizer steps are done
            self.credit_services.on_policy_updated()
            self._updated_at = step
        if mode == "train" and self._own_rollout:
            return self._own_rollout_batch(inputs, step, max_steps)
        if self._own_rollout:  # evaluation: TRL's own sampling, advantages and loss
            return super()._generate_and_score_completions(inputs)
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        self._row_logs = []
        output, batch, unscorable = self._draw(inputs, group_size)
        picked = [(0, row) for row in range(batch.size)]
        if mode == "train" and self._keeps_mixed_groups:
            output, batch, unscorable, picked = self._keep_mixed_groups(output, batch, unscorable)
        self.credit_services.begin_step(step, step / max_steps if max_steps else 0.0)
        if self.credit_method.needs.reads_behaviour:
            statistics = self.credit_method.needs.behaviour_statistics
            self.credit_services.score_behaviour(batch, statistics)
        if self._reference_logprobs:
            batch.ref_logprobs = self.credit_services.score(batch, model="reference")
        advantages = self.credit_method.advantages(batch, self.credit_services)
        advantages = advantages * batch.response_mask
        advantages[unscorable] = 0.0
        self._log_rows(picked)
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
        if self._own_loss and mode == "train":
            self._keep_for_loss(batch, advantages, output, torch.arange(rows.start, rows.stop))
        return output

    def _own_rollout_batch(self, inputs, step: int, max_steps: int) -> dict:
        """A method's own rollout (`TRLRolloutServices`) from the prompts TRL chose for this
        generation batch, its credit, and the batch as TRL's output: what TRL trains on."""
        services = self.credit_services
        assert isinstance(services, TRLRolloutServices)
        firsts = inputs[:: self.num_generations]  # TRL repeats a prompt num_generations times
        services.prompts.first = [int(row[PROBLEM_COLUMN]) for row in firsts]
        method = self.credit_method
        services.begin_step(StepPlan(step, behaviour_statistics=method.needs.behaviour_statistics))
        services.budget_fraction = step / max_steps if max_steps else 0.0
        batch = method.rollout(services)
        advantages = method.advantages(batch, services) * batch.response_mask
        if batch.size % self.args.steps_per_generation:
            raise ValueError(
                f"steps_per_generation: {method.name!r}'s rollout gave {batch.size} rows, which "
                f"{self.args.steps_per_generation} optimizer steps do not split evenly"
            )
        prompts = self.processing_class.batch_decode(batch.prompt_ids, skip_special_tokens=True)
        self._row_logs = [
            {
                "prompt": prompts,
                "completion": services.decode(batch),
                "rewards/task": batch.rewards.tolist(),
            }
        ]
        self._log_rows([(0, row) for row in range(batch.size)])
        self._log_credit(advantages, batch.response_mask, "train")
        device = self.accelerator.device
        mask = method.loss_mask(batch) if self._own_loss_mask else batch.response_mask
        output = {
            "prompt_ids": batch.prompt_ids.to(device),
            "prompt_mask": batch.prompt_mask.to(torch.int).to(device),
            "completion_ids": batch.response_ids.to(device),
            "completion_mask": mask.to(torch.int).to(device),
            "advantages": advantages.to(device),
            "num_items_in_batch": mask.sum().to(device),
            "old_per_token_logps": batch.old_logprobs.to(device),
        }
        if self.beta != 0.0:
            assert batch.ref_logprobs is not None, "the services score under the reference model"
            output["ref_per_token_logps"] = batch.ref_logprobs.to(device)
        if self._own_loss:
            self._keep_for_loss(batch, advantages, output, torch.arange(batch.size))
        return output

    # --- the method's own loss ---------------------------------------------------------------

    def _keep_for_loss(
        self, batch: RolloutBatch, advantages: torch.Tensor, output: dict, rows: torch.Tensor
    ) -> None:
        """Keep the generation batch for `compute_loss`, and tag TRL's rows with their rows of
        it (``credit_rows``), which TRL's shuffle and split carry along."""
        normalizers = Normalizers.of(self.credit_method.loss_mask(batch))
        self._credit_step = (batch, advantages, normalizers)
        output["credit_rows"] = rows.to(output["completion_ids"].device)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """TRL's loss, or the method's own (`CreditMethod.loss`: DFPO's, SDPO's) on this
        micro-batch's rows of the generation batch, with TRL's forward for the log-probs and
        the whole batch's counts, so that the micro-batches of an optimizer step add up to its
        loss as in the builtin trainer."""
        if not (self._own_loss and "credit_rows" in inputs):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        assert self._credit_step is not None
        batch, advantages, normalizers = self._credit_step
        rows = inputs["credit_rows"].cpu()
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        logprobs, _, _ = self._get_per_token_logps_and_entropies(
            model,
            torch.cat([prompt_ids, completion_ids], dim=1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1),
            completion_ids.size(1),
        )
        micro = on_device(batch.select(rows), logprobs.device)
        width = micro.response_mask.shape[1]
        logprobs = torch.nn.functional.pad(logprobs, (0, width - logprobs.shape[1]))
        loss, stats = self.credit_method.loss(
            logprobs,
            micro,
            advantages[rows].to(logprobs.device),
            normalizers,
            services=self.credit_services,
        )
        for key, value in stats.items():
            self._metrics["train"][f"credit/{key}"].append(value)
        # an optimizer step is steps_per_generation / gradient_accumulation_steps of the batch,
        # whose counts the normalizers hold
        return loss * self.args.steps_per_generation / self.current_gradient_accumulation_steps

    def _draw(self, inputs, group_size: int) -> tuple[dict, RolloutBatch, torch.Tensor]:
        """TRL's own generation and scoring of ``inputs``, and the whole (gathered) batch as a
        `RolloutBatch` for the method, with the rows no reward function could score."""
        output = super()._generate_and_score_completions(inputs)
        per_func = self._gathered_rewards
        assert per_func is not None, "TRL computed no rewards for this batch"
        self._gathered_rewards = None
        self._row_logs.append(self._take_logged_rows(per_func.shape[0]))
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
    ) -> tuple[dict, RolloutBatch, torch.Tensor, list[tuple[int, int]]]:
        """DAPO's dynamic sampling on TRL's batches: keep the groups whose rewards differ,
        drawing more generation batches until there are as many as one batch holds (at most
        the method's ``max_batches`` draws); see the module's Deviations for a short step.
        Also returns the (draw, row) each kept row comes from, for TRL's completions log."""
        assert self._filter is not None  # _keeps_mixed_groups
        group_size = self.num_generations
        target = batch.size // group_size
        draws = [(output, batch, unscorable)]
        kept: list[tuple[dict, RolloutBatch, torch.Tensor]] = []
        picked: list[tuple[int, int]] = []
        found = 0
        limit = self._filter.max_batches or 1_000_000
        for draw in range(limit):
            if draw > 0:
                draws.append(self._draw(self._next_refill(), group_size))
            out, b, bad = draws[-1]
            keep = rows_of_mixed_groups(b.rewards, b.group_ids)
            if bool(keep.any()):
                kept.append(take_rows(out, b, bad, keep))
                picked.extend((draw, int(row)) for row in keep.nonzero().flatten())
                found += int(keep.sum()) // group_size
            if found >= target:
                break
        last = (*draws[-1], [(len(draws) - 1, row) for row in range(draws[-1][1].size)])
        if not kept:
            return last
        groups = min(found, target)
        split = self.args.steps_per_generation
        while groups and (groups * group_size) % split:
            groups -= 1
        if not groups:
            return last
        out, b, bad = concat_draws(kept, self._tokenizer.pad_token_id)
        first = torch.arange(groups * group_size)
        return (*take_rows(out, b, bad, first), picked[: groups * group_size])

    def _next_refill(self) -> list[dict]:
        """The next generation batch of prompts from a second pass over the training set, in
        an order of its own (seed + 1), each prompt ``num_generations`` times."""
        if self._refills is None:
            prompts = self.args.generation_batch_size // self.num_generations  # type: ignore[operator]
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

    # --- TRL's completions log -----------------------------------------------------------------

    def _take_logged_rows(self, rows: int) -> dict[str, list]:
        """Take back the last ``rows`` rows TRL just logged for a draw (prompt, completion, each
        reward, extra columns; its own advantages are dropped), to log again only the rows the
        method trains on (:meth:`_log_rows`), beside their credit."""
        logs = self._logs
        columns = {"prompt": logs["prompt"], "completion": logs["completion"]}
        columns |= {f"rewards/{name}": values for name, values in logs["rewards"].items()}
        columns |= {f"extra/{name}": values for name, values in logs["extra"].items()}
        taken = {}
        for column, values in [*columns.items(), ("advantages", logs["advantages"])]:
            tail = [values.pop() for _ in range(min(rows, len(values)))]
            taken[column] = tail[::-1]
        taken.pop("advantages")
        return taken

    def _log_rows(self, picked: list[tuple[int, int]]) -> None:
        """Log the rows the method trains on, ``(draw, row)`` of the step's draws, in order."""
        for column in self._row_logs[0] if self._row_logs else {}:
            kind, _, name = column.partition("/")
            target = self._logs[kind] if not name else self._logs[kind][name]
            target.extend(self._row_logs[draw][column][row] for draw, row in picked)
        self._row_logs = []

    def _log_credit(self, advantages: torch.Tensor, mask: torch.Tensor, mode: str) -> None:
        """Log the method's credit for the rows :meth:`_log_rows` logged: the completions
        table's ``advantage`` column (each row's mean credit), and metrics."""
        tokens = mask.sum(-1).clamp(min=1)
        mean = (advantages * mask).sum(-1) / tokens
        spread = (((advantages - mean[:, None]) ** 2 * mask).sum(-1) / tokens).sqrt()
        self._logs["advantages"].extend(mean.tolist())
        self._metrics[mode]["credit/token_std"].append(spread.mean().item())
        for key, value in self.credit_services.stats.items():
            self._metrics[mode][f"credit/{key}"].append(value)
