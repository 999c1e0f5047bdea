"""creditbench methods inside verl: advantage estimators and policy losses in verl's registries.

Importing this module registers, for every method that computes its credit from verl's batch
alone (`creditbench.harness.services.engines`), an advantage estimator and a policy loss named
``creditbench_<method>``::

    algorithm.adv_estimator=creditbench_rloo
    actor_rollout_ref.actor.policy_loss.loss_mode=creditbench_rloo

verl looks both up by name in whichever process computes them: the estimator in the trainer
(driver) process, the loss in the actor workers. The module is therefore a ``verl.plugins``
entry point of the creditbench distribution, which ``import verl`` loads in every process
(verl 0.9's ``VERL_USE_EXTERNAL_PLUGINS``, default ``auto``); where plugins are turned off,
``VERL_USE_EXTERNAL_MODULES=creditbench.integrations.verl`` does the same. To run a method with
other options, call :func:`register` from a module of your own loaded the same way.

DAPO runs with verl's own dynamic sampling: its rollout only keeps the groups whose rewards
differ (`CreditMethod.group_filter`), which verl's v1 trainer does with
``trainer.use_v1=True algorithm.filter_groups.enable=True algorithm.filter_groups.metric=reward``
(`VERL_MIXED_GROUPS_SETTINGS`; the reward before shaping, as the paper's condition is on
correctness); the estimator refuses to run with the filter off. Its overlong L_max is the
generation limit, which verl does not hand to an estimator, so it is registered with it:
``register("creditbench_dapo", "dapo", max_new_tokens=20480)`` (``creditbench reproduce dapo
--engine verl`` writes that line).

What each side decides:

- the estimator is the method's `CreditMethod.advantages` on verl's ``token_level_rewards``
  summed per response (the outcome reward), ``response_mask`` and ``uid`` groups; verl's
  ``norm_adv_by_std_in_grpo`` and ``epsilon`` are its own GRPO's switches and are not read
  (``creditbench_drgrpo`` is GRPO without the std);
- the loss is the method's `CreditMethod.loss` (its ratio level, clip or not) with verl's own
  actor settings for what verl owns: ``clip_ratio_low``/``clip_ratio_high`` (else
  ``clip_ratio``), dual-clip ``clip_ratio_c``, ``loss_agg_mode``, ``loss_scale_factor`` and the
  global token and sequence counts that make micro-batch losses add up across data-parallel
  ranks. Set them to the method's published values (its docs page lists them). A method with a
  sequence ratio (GSPO) does not read ``clip_ratio_c``, as verl's own ``gspo`` loss does not:
  its dual clip is its own ``dual_clip`` (off by default).

The returns are the advantages (an outcome reward at γ = 1, as verl's GRPO returns). verl's
rollout-correction weights are refused rather than ignored.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import Tensor
from verl.trainer.ppo import core_algos

from creditbench.harness.services.engines import (
    VERL,
    VERL_MIXED_GROUPS_SETTINGS,
    engine_batch,
    engine_services,
    method_for_engine,
    supported_methods,
)
from creditbench.methods.base import CreditMethod
from creditbench.methods.contract import MIXED_GROUPS
from creditbench.methods.core import Normalizers

PREFIX = "creditbench_"
# what each name was registered with: the method, its config, the generation limit
_SPECS: dict[str, tuple[type[CreditMethod], object, int | None]] = {}


def group_ids_of(index: Any) -> Tensor:
    """``[B]`` int64 group ids from verl's ``uid`` labels (any hashable, usually strings):
    rows with equal labels share an id, in order of first appearance."""
    _, first, inverse = np.unique(np.asarray(index), return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))  # relabel by first appearance
    return torch.as_tensor(order[inverse.reshape(-1)], dtype=torch.long)


def _normalizers(mask: Tensor, info: dict[str, Any], loss_scale_factor: Any) -> Normalizers:
    """verl's ``agg_loss`` divides a micro-batch's sum by the global count and multiplies by
    ``dp_size``; the same loss is ours with the counts divided by ``dp_size``."""
    local = Normalizers.of(mask, loss_scale_factor)
    dp_size = float(info.get("dp_size") or 1)
    tokens, sequences = info.get("batch_num_tokens"), info.get("global_batch_size")
    return Normalizers(
        num_tokens=float(tokens) / dp_size if tokens is not None else local.num_tokens,
        num_sequences=float(sequences) / dp_size if sequences is not None else local.num_sequences,
        horizon=local.horizon,
    )


def _check_filter(method: CreditMethod, config: Any) -> None:
    """Refuse a method whose rollout filters groups (DAPO) when verl's filter is off."""
    kept = method.group_filter()
    if kept is None or kept.keep != MIXED_GROUPS:
        return
    groups = (config.get("filter_groups") if config is not None else None) or {}
    if not groups.get("enable", False):
        raise ValueError(
            f"{PREFIX}{method.name}: its rollout keeps only {kept.keep} (dynamic sampling); "
            "set " + " ".join(f"{key}={value}" for key, value in VERL_MIXED_GROUPS_SETTINGS.items())
        )


def estimator(method: CreditMethod, max_new_tokens: int | None = None):
    """verl's advantage-estimator signature around ``method``'s credit; ``max_new_tokens`` is
    the run's generation limit, where the method reads it."""
    services = engine_services(max_new_tokens)

    def compute(
        token_level_rewards: Tensor,
        response_mask: Tensor,
        index: Any = None,
        config: Any = None,
        **_: Any,
    ) -> tuple[Tensor, Tensor]:
        if index is None:
            raise ValueError(f"{PREFIX}{method.name}: the batch has no 'uid' groups")
        _check_filter(method, config)
        rewards = (token_level_rewards * response_mask).sum(-1)
        batch = engine_batch(rewards, response_mask, group_ids_of(index).to(rewards.device))
        advantages = method.advantages(batch, services).to(token_level_rewards.dtype)
        advantages = advantages * response_mask
        return advantages, advantages

    compute.__name__ = f"{PREFIX}{method.name}_advantages"
    return compute


def policy_loss(method: CreditMethod):
    """verl's policy-loss signature around ``method``'s loss, with verl's clip and aggregation."""

    def compute(
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, Any]]:
        if rollout_is_weights is not None:
            raise ValueError(
                f"{PREFIX}{method.name}: rollout-correction weights are not supported by "
                "creditbench losses; set algorithm.rollout_correction to null"
            )
        if config is None:
            raise ValueError(f"{PREFIX}{method.name}: verl passed no actor config")
        clip = config.get("clip_ratio", 0.2)
        low, high = config.get("clip_ratio_low"), config.get("clip_ratio_high")
        # verl's dual clip is its token-ratio losses' (vanilla): its sequence-ratio loss
        # (compute_policy_loss_gspo) never reads clip_ratio_c, and GSPO has no dual clip
        # (arXiv 2507.18071, Eq. 5); a sequence-ratio method keeps its own dual_clip
        dual_clip = method.config.dual_clip
        if method.config.ratio_level != "sequence":
            dual_clip = config.get("clip_ratio_c", 3.0)
        cfg = replace(
            method.config,
            eps_low=clip if low is None else low,
            eps_high=clip if high is None else high,
            dual_clip=dual_clip,
            aggregation=loss_agg_mode,
        )
        info = dict(config.get("global_batch_info") or {})
        normalizers = _normalizers(response_mask, info, config.get("loss_scale_factor"))
        rewards = torch.zeros(response_mask.shape[0], device=response_mask.device)
        groups = torch.arange(response_mask.shape[0], device=response_mask.device)
        batch = engine_batch(rewards, response_mask, groups, old_logprobs=old_log_prob)
        loss, stats = type(method)(cfg).loss(log_prob, batch, advantages, normalizers, None)
        # verl's pg_clipfrac leaves out the dual clip, which our clip_frac counts: the two keep
        # their own names; approx_kl is verl's ppo_kl
        metrics = {"actor/ppo_kl": stats.pop("approx_kl", 0.0)}
        metrics.update({f"actor/{PREFIX}{key}": value for key, value in stats.items()})
        return loss, metrics

    compute.__name__ = f"{PREFIX}{method.name}_policy_loss"
    return compute


def register(
    name: str, method: str | CreditMethod, max_new_tokens: int | None = None, **options: Any
) -> str:
    """Register ``method`` (a registered name with ``options`` for its Config, or an instance)
    as verl advantage estimator and policy loss ``name``; returns ``name``. ``max_new_tokens``:
    the run's ``data.max_response_length``, for a method that reads the generation limit
    (DAPO). ``ValueError`` if the method cannot run inside verl, naming why."""
    instance = method_for_engine(method, VERL, max_new_tokens, **options)
    spec = (type(instance), instance.config, max_new_tokens)
    if name in _SPECS:  # a module registering at import may be imported again
        if _SPECS[name] != spec:
            raise ValueError(f"{name}: already registered with {_SPECS[name][1]}")
        return name
    core_algos.register_adv_est(name)(estimator(instance, max_new_tokens))
    core_algos.register_policy_loss(name)(policy_loss(instance))
    _SPECS[name] = spec
    return name


def register_all() -> list[str]:
    """Register ``creditbench_<method>`` for every method that runs inside verl, with its
    defaults; idempotent (a second call in one process registers nothing new)."""
    return [register(f"{PREFIX}{method}", method) for method in supported_methods(VERL)]


def _announce() -> list[str]:
    """Register every method and say so in one line on stderr, in every process that loads the
    plugin: verl logs a plugin that fails to import at DEBUG level only, so without this line a
    broken install shows up later as an unknown estimator. A failure is one line too."""
    try:
        names = register_all()
    except Exception as err:  # the plugin must not fail silently: say why, then fail
        print(f"creditbench: the verl plugin failed to register ({err})", file=sys.stderr)
        raise
    shown = ", ".join(names)
    print(
        f"creditbench: {len(names)} verl estimators and losses registered ({shown})",
        file=sys.stderr,
    )
    return names


REGISTERED = _announce()
