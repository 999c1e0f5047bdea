"""Differential tests of the methods verl ships as estimators of its own (OPO's ``opo``, GPG's
``gpg``, and ``grpo_passk``): this package's functions against verl's on random batches, to
1e-6 in float32.

They import verl, so they run in the engines step of ``.ci/run`` (marker ``engines``), with verl
on ``PYTHONPATH`` as ``tests/test_engine_verl.py`` has it; where ray is missing a stub stands in
for it (only ``verl/protocol.py`` imports it, and these tests never reach it).
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

from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402

TOL = dict(atol=1e-6, rtol=1e-6)


def _batch(
    seed: int, *, singletons: bool, binary: bool = False
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, torch.Tensor]:
    """Token-level rewards ``[B, T]`` (the outcome on each response's last token), a mask with
    short rows and holes, uid labels of unequal, non-adjacent groups (some of one when
    ``singletons``), and the same groups as creditbench's integer ``group_ids``."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [4, 3, 5, 2, 6] + ([1, 1] if singletons else [])
    labels = np.array([f"q{g}" for g, size in enumerate(sizes) for _ in range(size)], dtype=object)
    labels = labels[torch.randperm(len(labels), generator=gen).numpy()]
    rows, width = len(labels), 9
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
    holes = (torch.rand(rows, width, generator=gen) < 0.1) & (torch.arange(width) > 0)
    mask = mask * (~holes).float()
    if binary:
        outcome = (torch.rand(rows, generator=gen) < 0.5).float()
    else:
        outcome = torch.randint(0, 9, (rows,), generator=gen).float() / 8
    rewards = torch.zeros(rows, width)
    last = (mask * torch.arange(1, width + 1)).argmax(-1)
    rewards[torch.arange(rows), last] = outcome
    group_ids = torch.tensor([sorted(set(labels)).index(label) for label in labels])
    return rewards, mask, labels, group_ids


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("singletons", [False, True])
def test_opo_matches_verls_opo(seed, singletons):
    from creditbench.methods.opo import opo_advantages

    rewards, mask, labels, group_ids = _batch(seed, singletons=singletons)
    theirs, _ = core_algos.compute_opo_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=labels, config=AlgoConfig()
    )
    ours = opo_advantages(rewards.sum(-1), mask, group_ids)  # singleton="raw", verl's rule
    torch.testing.assert_close(ours, theirs, **TOL)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("singletons", [False, True])
@pytest.mark.parametrize("binary", [False, True])
def test_gpg_with_verls_alpha_matches_verls_gpg(seed, singletons, binary):
    """verl's α is B over the responses whose reward is not 0 (``alpha="nonzero"``); the file's
    default, B / (B - M) over mixed groups, is the paper's (see methods/gpg.py)."""
    from creditbench.methods.gpg import gpg_advantages

    rewards, mask, labels, group_ids = _batch(seed, singletons=singletons, binary=binary)
    theirs, _ = core_algos.compute_gpg_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=labels, config=AlgoConfig()
    )
    ours = gpg_advantages(rewards.sum(-1), mask, group_ids, alpha="nonzero")
    torch.testing.assert_close(ours, theirs, **TOL)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("scale", [True, False])
def test_passk_with_verls_estimator_matches_verls_grpo_passk(seed, scale):
    """verl's ``grpo_passk`` (attributed in verl to arXiv 2503.19595, not to the Pass@k
    training paper whose closed form is the file's default): the best response of each group
    gets r_max - r_second, divided by the group's std unless ``norm_adv_by_std_in_grpo`` is
    off. Ties are broken by torch.topk in both; verl refuses groups of one, so none here."""
    from creditbench.methods.passk import best_minus_second

    rewards, mask, labels, group_ids = _batch(seed, singletons=False)
    config = AlgoConfig(norm_adv_by_std_in_grpo=scale)
    theirs, _ = core_algos.compute_grpo_passk_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=labels, config=config
    )
    outcome = rewards.sum(-1)
    ours = torch.zeros_like(outcome)
    for group in torch.unique(group_ids):
        rows = (group_ids == group).nonzero().squeeze(-1)
        ours[rows] = best_minus_second(outcome[rows], scale_by_std=scale)
    torch.testing.assert_close(ours[:, None] * mask, theirs, **TOL)


def test_passk_through_the_method_matches_verls_grpo_passk():
    from creditbench.methods.passk import PassK

    from strategies import build_batch

    rewards, mask, labels, group_ids = _batch(0, singletons=False)
    theirs, _ = core_algos.compute_grpo_passk_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=labels, config=AlgoConfig()
    )
    batch = build_batch([len(labels)], [mask.shape[1]] * len(labels), rewards.sum(-1).tolist())
    batch.group_ids = group_ids
    batch.response_mask = mask
    ours = PassK(estimator="max_minus_second").advantages(batch)
    torch.testing.assert_close(ours, theirs, **TOL)
