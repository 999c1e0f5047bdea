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

A method whose credit reads the response token ids (TEMPO, KTAE) runs on verl's legacy
trainer, ``trainer.use_v1=False``: verl hands a registered estimator only rewards, mask, groups
and config, so the plugin wraps ``ray_trainer.compute_advantage`` (which that trainer calls on
the whole batch, on the driver) and the estimator reads the batch's ``responses`` while it runs
(:func:`pass_batches_to_estimators`). verl 0.9.1's default v1 trainer fetches a fixed list of
fields for advantages, without them; the estimator stops there naming the setting. Those
methods are registered only where verl's trainer module imports (with ray).

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

import contextvars
import functools
import sys
from dataclasses import replace
from typing import Any

# verl logs a plugin that fails to import at DEBUG level only: a failed import says why on
# stderr, in every process that loads the plugin, then fails as it would
try:
    import numpy as np
    import torch
    from torch import Tensor
    from verl.trainer.ppo import core_algos

    from creditbench.harness.services.engines import (
        VERL,
        VERL_LEGACY,
        VERL_LEGACY_SETTINGS,
        VERL_MIXED_GROUPS_SETTINGS,
        engine_batch,
        engine_services,
        method_for_engine,
        supported_methods,
    )
    from creditbench.methods.base import CreditMethod
    from creditbench.methods.contract import MIXED_GROUPS
    from creditbench.methods.core import Normalizers
except Exception as failed:
    print(
        f"creditbench: the verl plugin failed to load ({type(failed).__name__}: {failed})",
        file=sys.stderr,
    )
    raise

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


# The batch verl's legacy trainer is computing advantages of, while it does (see
# pass_batches_to_estimators): where a token-level estimator finds the response ids.
_BATCH: contextvars.ContextVar[Any] = contextvars.ContextVar("creditbench_verl_batch", default=None)
# why verl's trainer module did not import here (pass_batches_to_estimators), or None
TRAINER_IMPORT_ERROR: str | None = None


def pass_batches_to_estimators() -> bool:
    """Wrap verl's ``ray_trainer.compute_advantage`` (the legacy trainer's, run on the driver)
    so that an estimator called inside it can read the whole batch (:data:`_BATCH`); verl
    hands a registered estimator only rewards, mask, ``uid`` and config. Idempotent; False
    where verl's trainer module cannot be imported (no ray): the token-level methods are then
    not registered, which the plugin's one line at load shows with the import's error
    (:data:`TRAINER_IMPORT_ERROR`)."""
    global TRAINER_IMPORT_ERROR
    try:
        from verl.trainer.ppo import ray_trainer
    except Exception as err:  # no ray, or a trainer module that fails here: the rest registers
        TRAINER_IMPORT_ERROR = f"{type(err).__name__}: {err}"
        return False
    original = ray_trainer.compute_advantage
    if getattr(original, "passes_the_batch", False):
        return True

    @functools.wraps(original)
    def compute_advantage(data: Any, *args: Any, **kwargs: Any) -> Any:
        token = _BATCH.set(data)
        try:
            return original(data, *args, **kwargs)
        finally:
            _BATCH.reset(token)

    compute_advantage.passes_the_batch = True  # type: ignore[attr-defined]
    ray_trainer.compute_advantage = compute_advantage
    return True


def _response_ids(name: str, response_mask: Tensor) -> Tensor:
    """The response ids of the batch being computed, from the legacy trainer's batch."""
    data = _BATCH.get()
    if data is None or "responses" not in data.batch.keys():
        settings = " ".join(f"{key}={value}" for key, value in VERL_LEGACY_SETTINGS.items())
        raise ValueError(
            f"{name}: its credit reads the response token ids, which verl gives an estimator "
            f"only in its legacy trainer through creditbench's plugin; set {settings}"
        )
    ids = data.batch["responses"]
    if ids.shape != response_mask.shape:
        raise ValueError(
            f"{name}: responses {tuple(ids.shape)} against mask {tuple(response_mask.shape)}"
        )
    return ids


def estimator(method: CreditMethod, max_new_tokens: int | None = None, *, reads_ids: bool = False):
    """verl's advantage-estimator signature around ``method``'s credit; ``max_new_tokens`` is
    the run's generation limit, where the method reads it; ``reads_ids``: the credit reads the
    response token ids (the legacy trainer's, :func:`pass_batches_to_estimators`)."""
    services = engine_services(max_new_tokens)
    name = f"{PREFIX}{method.name}"

    def compute(
        token_level_rewards: Tensor,
        response_mask: Tensor,
        index: Any = None,
        config: Any = None,
        **_: Any,
    ) -> tuple[Tensor, Tensor]:
        if index is None:
            raise ValueError(f"{name}: the batch has no 'uid' groups")
        _check_filter(method, config)
        rewards = (token_level_rewards * response_mask).sum(-1)
        groups = group_ids_of(index).to(rewards.device)
        ids = _response_ids(name, response_mask) if reads_ids else None
        batch = engine_batch(rewards, response_mask, groups, response_ids=ids)
        advantages = method.advantages(batch, services).to(token_level_rewards.dtype)
        advantages = advantages * response_mask
        return advantages, advantages

    compute.__name__ = f"{name}_advantages"
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
    (DAPO). A method whose credit reads the response token ids runs on verl's legacy trainer
    (`VERL_LEGACY_SETTINGS`). ``ValueError`` if the method cannot run inside verl, naming why."""
    reads_ids = False
    try:
        instance = method_for_engine(method, VERL, max_new_tokens, **options)
    except ValueError as err:
        try:
            instance = method_for_engine(method, VERL_LEGACY, max_new_tokens, **options)
        except ValueError:
            raise err from None
        if not SHIM:
            raise ValueError(
                f"{err} (its legacy trainer passes them, but verl's trainer module "
                f"does not import here: {TRAINER_IMPORT_ERROR})"
            ) from None
        reads_ids = True
    spec = (type(instance), instance.config, max_new_tokens)
    if name in _SPECS:  # a module registering at import may be imported again
        if _SPECS[name] != spec:
            raise ValueError(f"{name}: already registered with {_SPECS[name][1]}")
        return name
    core_algos.register_adv_est(name)(estimator(instance, max_new_tokens, reads_ids=reads_ids))
    core_algos.register_policy_loss(name)(policy_loss(instance))
    _SPECS[name] = spec
    return name


def register_all() -> list[str]:
    """Register ``creditbench_<method>`` for every method that runs inside verl (the
    token-level ones where the legacy trainer's shim is in place), with its defaults;
    idempotent (a second call in one process registers nothing new)."""
    names = set(supported_methods(VERL))
    if SHIM:
        names |= set(supported_methods(VERL_LEGACY))
    return [register(f"{PREFIX}{method}", method) for method in sorted(names)]


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
    line = f"creditbench: {len(names)} verl estimators and losses registered ({shown})"
    if not SHIM:
        dropped = sorted(set(supported_methods(VERL_LEGACY)) - set(supported_methods(VERL)))
        line += (
            f"; not {', '.join(dropped)}, whose credit reads the response ids: verl's trainer "
            f"module does not import here ({TRAINER_IMPORT_ERROR})"
        )
    print(line, file=sys.stderr)
    return names


SHIM = pass_batches_to_estimators()
REGISTERED = _announce()
