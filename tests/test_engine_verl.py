"""Differential tests of the verl adapter: creditbench's estimators and losses, looked up by name
in verl's own registries, against verl's built-in ones on random batches (to 1e-6, float32).

These import verl itself, so they run in their own step of ``.ci/run`` (marker ``engines``),
with verl installed without its dependencies into a folder of its own on ``PYTHONPATH`` (see
``tests/verl_fixtures/make_verl_fixtures.py``), beside ray and what verl's trainer module
imports (CI installs them: the token-level estimators run inside verl's own
``ray_trainer.compute_advantage``). Where ray is missing, a stub module stands in for it for
the rest (only ``verl/protocol.py`` imports it) and the token-level tests are skipped.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from unittest.mock import MagicMock

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.engines

if importlib.util.find_spec("ray") is None and "ray" not in sys.modules:
    _ray = ModuleType("ray")
    _ray.__getattr__ = lambda name: MagicMock(name=f"ray.{name}")  # type: ignore[method-assign]
    sys.modules["ray"] = _ray

import verl  # noqa: E402,F401  (loads the creditbench plugin, as in every verl process)
from verl.trainer.config import AlgoConfig, FilterGroupsConfig  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402

from creditbench.integrations import verl as adapter  # noqa: E402

TOL = dict(atol=1e-6, rtol=1e-6)


def _batch(seed: int, *, singletons: bool) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Token-level rewards ``[B, T]`` (the outcome on each response's last token, dyadic so
    equal rewards have a std of exactly 0), a mask with short rows and holes, and uid labels
    of unequal, non-adjacent groups (some of one when ``singletons``)."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [4, 3, 5, 2] + ([1, 1] if singletons else [])
    labels = np.array([f"q{g}" for g, size in enumerate(sizes) for _ in range(size)], dtype=object)
    labels = labels[torch.randperm(len(labels), generator=gen).numpy()]
    rows, width = len(labels), 9
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
    holes = (torch.rand(rows, width, generator=gen) < 0.1) & (torch.arange(width) > 0)
    mask = mask * (~holes).float()
    outcome = torch.randint(0, 9, (rows,), generator=gen).float() / 8
    rewards = torch.zeros(rows, width)
    last = (mask * torch.arange(1, width + 1)).argmax(-1)
    rewards[torch.arange(rows), last] = outcome
    return rewards, mask, labels


def _estimate(name: str, rewards, mask, labels) -> torch.Tensor:
    # the call verl's ray_trainer.compute_advantage makes for a registered estimator
    fn = core_algos.get_adv_estimator_fn(name)
    advantages, returns = fn(
        token_level_rewards=rewards, response_mask=mask, config=AlgoConfig(), index=labels
    )
    assert torch.equal(advantages, returns)
    return advantages


def test_import_verl_registers_the_batch_only_methods_in_both_registries():
    for method in ("grpo", "drgrpo", "rloo", "gspo"):
        assert f"creditbench_{method}" in core_algos.ADV_ESTIMATOR_REGISTRY
        assert f"creditbench_{method}" in core_algos.POLICY_LOSS_REGISTRY
    assert "creditbench_oracle" not in core_algos.ADV_ESTIMATOR_REGISTRY
    assert adapter.register_all() == adapter.REGISTERED  # a second import adds nothing


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("singletons", [False, True])
def test_grpo_and_drgrpo_match_verls_grpo(seed, singletons):
    rewards, mask, labels = _batch(seed, singletons=singletons)
    grpo = adapter.register("creditbench_grpo_raw", "grpo", singleton="raw")
    drgrpo = adapter.register("creditbench_drgrpo_raw", "drgrpo", singleton="raw")
    for ours, scale in ((grpo, True), (drgrpo, False)):
        theirs, _ = core_algos.compute_grpo_outcome_advantage(
            token_level_rewards=rewards,
            response_mask=mask,
            index=labels,
            norm_adv_by_std_in_grpo=scale,
        )
        torch.testing.assert_close(_estimate(ours, rewards, mask, labels), theirs, **TOL)


@pytest.mark.parametrize("seed", range(6))
def test_rloo_matches_verls_rloo(seed):
    rewards, mask, labels = _batch(seed, singletons=False)
    theirs, _ = core_algos.compute_rloo_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=labels, config=AlgoConfig()
    )
    torch.testing.assert_close(_estimate("creditbench_rloo", rewards, mask, labels), theirs, **TOL)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("singletons", [False, True])
@pytest.mark.parametrize("zero_tail", [False, True])
def test_otb_matches_verls_optimal_token_baseline(seed, singletons, zero_tail):
    from creditbench.methods.otb import otb_advantages

    rewards, mask, labels = _batch(seed, singletons=singletons)
    gen = torch.Generator().manual_seed(100 + seed)
    chosen = 0.02 + 0.96 * torch.rand(mask.shape, generator=gen)  # π of the sampled token
    others = torch.rand(mask.shape, generator=gen) * (1.0 - chosen).square()
    sum_pi_squared = chosen.square() + others  # what some distribution with that π has
    theirs, _ = core_algos.compute_optimal_token_baseline_advantage(
        token_level_rewards=rewards,
        response_mask=mask,
        index=labels,
        old_log_probs=chosen.log(),
        sum_pi_squared=sum_pi_squared,
        handle_zero_tail=zero_tail,
    )
    group_ids = torch.tensor([sorted(set(labels)).index(label) for label in labels])
    ours = otb_advantages(
        rewards.sum(-1), mask, group_ids, chosen.log(), sum_pi_squared, zero_tail=zero_tail
    )
    torch.testing.assert_close(ours, theirs, **TOL)


def test_default_grpo_differs_from_verl_only_on_groups_of_one():
    rewards, mask, labels = _batch(0, singletons=True)
    ours = _estimate("creditbench_grpo", rewards, mask, labels)
    theirs, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=labels
    )
    lone = torch.tensor([(labels == label).sum() == 1 for label in labels])
    torch.testing.assert_close(ours[~lone], theirs[~lone], **TOL)
    assert torch.all(ours[lone] == 0) and torch.any(theirs[lone] != 0)


def _actor(mode: str, clip_c: float, **info) -> ActorConfig:
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=0.2,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        clip_ratio_c=clip_c,
        loss_agg_mode=mode,
    )
    config.global_batch_info.update(info)
    return config


def _losses_and_grads(names, old, new, advantages, mask, mode, config) -> list[tuple]:
    """``(loss, gradient on the log-probs, metrics)`` of each named verl policy loss on the
    same inputs."""
    results = []
    for name in names:
        log_prob = new.clone().requires_grad_(True)
        loss, metrics = core_algos.get_policy_loss_fn(name)(
            old_log_prob=old,
            log_prob=log_prob,
            advantages=advantages,
            response_mask=mask,
            loss_agg_mode=mode,
            config=config,
            rollout_is_weights=None,
        )
        loss.backward()
        results.append((loss.detach(), log_prob.grad, metrics))
    return results


def _loss_inputs(seed: int):
    gen = torch.Generator().manual_seed(100 + seed)
    _, mask, _ = _batch(seed, singletons=False)
    old = -torch.rand(mask.shape, generator=gen) * 3
    delta = torch.randn(mask.shape, generator=gen) * 0.3
    delta += (torch.rand(mask.shape, generator=gen) < 0.15).float() * 1.6  # dual-clip acts
    advantages = torch.randn(mask.shape, generator=gen) * mask
    return old, old + delta, advantages, mask


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    "mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
)
@pytest.mark.parametrize("clip_c", [3.0, 1e9])
@pytest.mark.parametrize("global_counts", [False, True])
def test_losses_match_verls_vanilla_loss_and_gradient(seed, mode, clip_c, global_counts):
    old, new, advantages, mask = _loss_inputs(seed)
    info = {}
    if global_counts:  # a micro-batch of a global batch over two data-parallel ranks
        info = dict(dp_size=2, batch_num_tokens=3 * float(mask.sum()), global_batch_size=40)
    config = _actor(mode, clip_c, **info)
    names = ("vanilla", "creditbench_grpo", "creditbench_rloo", "creditbench_drgrpo")
    results = _losses_and_grads(names, old, new, advantages, mask, mode, config)
    loss0, grad0, metrics0 = results[0]
    assert torch.count_nonzero(grad0) > 0
    for loss, grad, metrics in results[1:]:
        torch.testing.assert_close(loss, loss0, **TOL)
        torch.testing.assert_close(grad, grad0, **TOL)
        assert metrics["actor/ppo_kl"] == pytest.approx(metrics0["actor/ppo_kl"], abs=1e-6)
        # ours counts the dual clip too, which verl reports apart
        clip_frac = metrics["actor/creditbench_clip_frac"]
        dual = metrics0["actor/pg_clipfrac_lower"]
        assert clip_frac == pytest.approx(metrics0["actor/pg_clipfrac"] + dual, abs=1e-6)


def test_gspo_loss_takes_a_sequence_ratio_with_verls_clip():
    old, new, advantages, mask = _loss_inputs(0)
    config = _actor("token-mean", 3.0)
    gspo = core_algos.get_policy_loss_fn("creditbench_gspo")
    vanilla = core_algos.get_policy_loss_fn("vanilla")
    args = dict(old_log_prob=old, advantages=advantages, response_mask=mask, config=config)
    ours, _ = gspo(log_prob=new, loss_agg_mode="token-mean", **args)
    token, _ = vanilla(log_prob=new, loss_agg_mode="token-mean", **args)
    assert not torch.allclose(ours, token)  # a sequence ratio, not verl's token ratio
    same, _ = gspo(log_prob=old, loss_agg_mode="token-mean", **args)  # ratio 1: -mean advantage
    expected = -(advantages * mask).sum() / mask.sum()
    torch.testing.assert_close(same, expected, **TOL)


def _gspo_inputs(seed: int):
    """Whole responses far off-policy (a sequence log-ratio of up to 1.8, a sequence ratio
    up to e^1.8 ~ 6, beyond a dual clip at 3) and advantages that vary along each response,
    with both signs inside one response."""
    gen = torch.Generator().manual_seed(200 + seed)
    _, mask, _ = _batch(seed, singletons=False)
    old = -torch.rand(mask.shape, generator=gen) * 3
    shift = torch.empty(mask.shape[0], 1).uniform_(-1.5, 1.8, generator=gen)
    new = old + shift + torch.randn(mask.shape, generator=gen) * 0.3
    advantages = torch.randn(mask.shape, generator=gen) * mask
    return old, new, advantages, mask


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    "mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
)
@pytest.mark.parametrize("clip", [(3e-4, 4e-4), (0.2, 0.28)])
@pytest.mark.parametrize("global_counts", [False, True])
def test_gspo_matches_verls_gspo_loss_which_has_no_dual_clip(seed, mode, clip, global_counts):
    """verl's ``gspo`` loss (GSPO-token, arXiv 2507.18071 §4.3) never reads ``clip_ratio_c``:
    with verl's default actor config (``clip_ratio_c = 3``) ours must not dual-clip either."""
    old, new, advantages, mask = _gspo_inputs(seed)
    seq_ratio = torch.exp(((new - old) * mask).sum(-1) / mask.sum(-1)).unsqueeze(-1)
    # a dual clip at c = 3 would act here: negative advantages on responses whose ratio is > 3
    assert torch.any((advantages < 0) & (mask > 0) & (seq_ratio > 3.0))
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio_low=clip[0],
        clip_ratio_high=clip[1],
        loss_agg_mode=mode,
    )
    assert config.clip_ratio_c == 3.0  # verl's default, which its vanilla loss dual-clips with
    if global_counts:  # a micro-batch of a global batch over two data-parallel ranks
        config.global_batch_info.update(
            dp_size=2, batch_num_tokens=3 * float(mask.sum()), global_batch_size=40
        )
    names = ("gspo", "creditbench_gspo")
    results = _losses_and_grads(names, old, new, advantages, mask, mode, config)
    (theirs, their_grad, their_metrics), (ours, our_grad, our_metrics) = results
    assert torch.count_nonzero(their_grad) > 0
    torch.testing.assert_close(ours, theirs, **TOL)
    torch.testing.assert_close(our_grad, their_grad, **TOL)
    assert our_metrics["actor/ppo_kl"] == pytest.approx(their_metrics["actor/ppo_kl"], abs=1e-6)
    assert their_metrics["actor/pg_clipfrac_lower"] == 0.0
    clip_frac = our_metrics["actor/creditbench_clip_frac"]
    assert clip_frac == pytest.approx(their_metrics["actor/pg_clipfrac"], abs=1e-6)


def test_rollout_correction_weights_are_refused_not_ignored():
    old, new, advantages, mask = _loss_inputs(0)
    with pytest.raises(ValueError, match="rollout_correction"):
        core_algos.get_policy_loss_fn("creditbench_grpo")(
            old,
            new,
            advantages,
            mask,
            "token-mean",
            _actor("token-mean", 3.0),
            torch.ones_like(mask),
        )


def test_a_method_that_needs_the_harness_is_refused_with_its_reason():
    with pytest.raises(ValueError, match="oracle.*cannot run inside verl: it is a reference"):
        adapter.register("creditbench_oracle", "oracle")
    with pytest.raises(ValueError, match="otb.*cannot run inside verl.*behaviour log-probs"):
        adapter.register("creditbench_otb", "otb")


needs_verls_trainer = pytest.mark.skipif(
    not adapter.SHIM, reason="verl's trainer module (ray) is not installed here"
)


@needs_verls_trainer
@pytest.mark.parametrize("method", ["tempo", "ktae"])
def test_a_token_level_method_runs_in_verls_own_compute_advantage(method):
    """verl's legacy trainer computes advantages with ``ray_trainer.compute_advantage`` on the
    whole batch; the plugin passes its response ids to the estimator, whose credit equals the
    method's own on the same ids, rewards and groups."""
    from tensordict import TensorDict
    from verl import DataProto
    from verl.trainer.ppo import ray_trainer

    from creditbench.harness.services.engines import engine_batch
    from creditbench.methods.registry import get_method

    rewards, mask, labels = _batch(3, singletons=False)
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 7, mask.shape, generator=gen) * mask.long()  # shared prefixes, too
    ids[:, :2] = 1
    data = DataProto(
        batch=TensorDict(
            {"responses": ids, "response_mask": mask, "token_level_rewards": rewards},
            batch_size=[len(labels)],
        ),
        non_tensor_batch={"uid": labels},
    )
    out = ray_trainer.compute_advantage(
        data, adv_estimator=f"creditbench_{method}", config=AlgoConfig()
    )
    groups = adapter.group_ids_of(labels)
    batch = engine_batch((rewards * mask).sum(-1), mask, groups, response_ids=ids)
    expected = get_method(method)().advantages(batch) * mask
    torch.testing.assert_close(out.batch["advantages"], expected, **TOL)
    shared = engine_batch((rewards * mask).sum(-1), mask, groups)  # the ids matter
    assert not torch.allclose(get_method(method)().advantages(shared) * mask, expected)


@needs_verls_trainer
def test_a_token_level_estimator_outside_the_legacy_trainer_names_the_setting():
    """verl's v1 trainer calls the estimator without the batch: it says what to set."""
    rewards, mask, labels = _batch(0, singletons=False)
    with pytest.raises(ValueError, match="creditbench_tempo.*token ids.*trainer.use_v1=False"):
        _estimate("creditbench_tempo", rewards, mask, labels)


def test_uid_labels_become_group_ids_by_first_appearance():
    ids = adapter.group_ids_of(np.array(["b", "a", "b", "c", "a"], dtype=object))
    assert ids.tolist() == [0, 1, 0, 2, 1]


def _dapo_batch() -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Two mixed groups of four: the outcome on each response's last token, lengths that
    reach DAPO's overlong zone of a 10-token limit (L_cache 2)."""
    lengths = torch.tensor([3, 9, 10, 5, 8, 2, 10, 7])
    mask = (torch.arange(10)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(8, 10)
    rewards[torch.arange(8), lengths - 1] = torch.tensor([1.0, 0, 1, 0, 0, 0, 1, 1])
    return rewards, mask, np.array(["a"] * 4 + ["b"] * 4, dtype=object)


def test_dapo_runs_on_verls_filter_with_its_overlong_shaping_and_refuses_it_off():
    from creditbench.methods.registry import get_method

    with pytest.raises(ValueError, match="max_response_length"):
        adapter.register("creditbench_dapo_nolimit", "dapo")  # verl gives no L_max
    name = adapter.register("creditbench_dapo_10", "dapo", max_new_tokens=10)
    rewards, mask, labels = _dapo_batch()
    fn = core_algos.get_adv_estimator_fn(name)
    on = AlgoConfig(filter_groups=FilterGroupsConfig(enable=True, metric="reward"))
    got, _ = fn(token_level_rewards=rewards, response_mask=mask, config=on, index=labels)
    ours = get_method("dapo")(max_response_length=10)
    batch = engine_batch_of(rewards, mask, labels)
    assert torch.allclose(got, ours.advantages(batch, None) * mask, **TOL)
    shaped = ours.outcome_rewards(batch, None)
    assert shaped[2] == 0.0 and shaped[1] == pytest.approx(-0.5)  # at L_max: -1; one short: -1/2
    with pytest.raises(ValueError, match="trainer.use_v1=True algorithm.filter_groups.enable=True"):
        fn(token_level_rewards=rewards, response_mask=mask, config=AlgoConfig(), index=labels)


def engine_batch_of(rewards, mask, labels):
    from creditbench.harness.services.engines import engine_batch

    return engine_batch(rewards.sum(-1), mask, adapter.group_ids_of(labels))


def launched_runs(folder) -> list[list[str]]:
    """The verl overrides of every run a written ``launch.sh`` starts, as verl's command line
    receives them (bash's quoting undone)."""
    import shlex

    script = (folder / "launch.sh").read_text().replace("\\\n", " ")
    return [
        shlex.split(line)[3:]
        for line in script.splitlines()
        if line.startswith("python -m verl.trainer.main_ppo")
    ]


def verl_checks(overrides: list[str]):
    """Compose ``overrides`` through verl's own Hydra config (``ppo_trainer``, which rejects a
    key it lacks) and run the checks verl's ``main_ppo`` runs before anything starts; returns
    the composed config."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
    validate_config(config, need_reference_policy(config), need_critic(config))
    # what the workers read later: no mandatory value (verl's ???) left unset in the sections
    # a run without a reward model or critic uses, and the rollout's settings accepted by
    # verl's own dataclass
    for section in ("actor_rollout_ref", "data", "algorithm", "trainer"):
        OmegaConf.to_container(config[section], resolve=True, throw_on_missing=True)
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    return config


@pytest.mark.parametrize("card", ["drgrpo", "dapo", "tempo"])
def test_every_run_of_a_reproduce_launch_passes_verls_own_config_checks(card, tmp_path):
    if card == "tempo" and not adapter.SHIM:
        pytest.skip("its plan registers a token-level estimator: verl's trainer module (ray)")
    from creditbench.tools.cli.main import main

    args = ["reproduce", card, "--scale", "paper", "--task", "math", "--steps", "16"]
    assert main([*args, "--engine", "verl", "--results", str(tmp_path)]) == 0
    folder = tmp_path / "verl"
    runs = launched_runs(folder)
    assert runs
    for overrides in runs:
        config = verl_checks(overrides)
        assert config.actor_rollout_ref.rollout.name == "vllm"
        assert list(config.trainer.logger) == ["console"]  # no W&B login needed
        assert config.actor_rollout_ref.actor.use_dynamic_bsz
        # every MATH prompt fits: no prompt is cut or stops the run
        assert config.data.max_prompt_length >= 4381 and config.data.truncation == "error"
        gpus = config.trainer.n_gpus_per_node * config.trainer.nnodes
        assert gpus == {"drgrpo": 8, "dapo": 8, "tempo": 4}[card]  # the card's GPUs
        # a token-level row runs on the legacy trainer, whose compute_advantage has the ids,
        # and so does the baseline beside it: one trainer a launch
        assert config.trainer.use_v1 is (card != "tempo")
    if card == "dapo":  # the paper's warm-up and evaluation top-p, and verl's filter batches
        assert config.actor_rollout_ref.actor.optim.lr_warmup_steps == 20
        assert config.actor_rollout_ref.rollout.val_kwargs.top_p == 0.7
        assert config.actor_rollout_ref.rollout.tensor_model_parallel_size == 4  # 32B
        assert config.data.gen_batch_size == 3 * config.data.train_batch_size
    spec = importlib.util.spec_from_file_location(
        "creditbench_plan", folder / "creditbench_plan.py"
    )
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    for row in ("grpo", card):
        assert f"creditbench_{card}_{row}" in core_algos.ADV_ESTIMATOR_REGISTRY
        assert f"creditbench_{card}_{row}" in core_algos.POLICY_LOSS_REGISTRY


def test_verls_checks_catch_a_launch_without_what_verl_requires(tmp_path):
    """The check above can fail: the launch without the settings verl 0.9.1 requires (the
    rollout engine; micro-batches) is refused by verl's own code, and a key verl lacks by
    Hydra."""
    from creditbench.tools.cli.main import main

    args = ["reproduce", "drgrpo", "--scale", "paper", "--task", "math", "--steps", "16"]
    assert main([*args, "--engine", "verl", "--results", str(tmp_path)]) == 0
    overrides = launched_runs(tmp_path / "verl")[0]
    for dropped in ("actor_rollout_ref.rollout.name=", "actor_rollout_ref.actor.use_dynamic_bsz="):
        with pytest.raises(Exception, match="rollout.name|micro_batch_size"):
            verl_checks([o for o in overrides if not o.startswith(dropped)])
    with pytest.raises(Exception, match="no_such_key"):
        verl_checks([*overrides, "trainer.no_such_key=1"])


def test_loading_the_plugin_says_what_it_registered_in_one_line(capsys):
    """verl logs a plugin that fails to import at DEBUG level only: the plugin says in one
    line, in every process that loads it (``_announce`` runs at import), what it registered."""
    names = adapter._announce()  # registering again registers nothing new
    err = capsys.readouterr().err.strip().splitlines()
    assert names == adapter.REGISTERED and len(err) == 1
    assert err[0].startswith(f"creditbench: {len(names)} verl estimators and losses registered (")
    assert "creditbench_grpo" in err[0]


def test_a_plugin_that_cannot_register_says_why_before_failing(capsys, monkeypatch):
    def broken():
        raise RuntimeError("a broken install")

    monkeypatch.setattr(adapter, "register_all", broken)
    with pytest.raises(RuntimeError, match="a broken install"):
        adapter._announce()
    err = capsys.readouterr().err.strip()
    assert err == "creditbench: the verl plugin failed to register (a broken install)"
