"""VinePPO: Monte-Carlo step values as the critic, charged like every generation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from creditbench.methods.registry import get_method
from creditbench.methods.values import STATE_VALUES, exact_advantages
from creditbench.methods.vineppo import VinePPO, VinePPOConfig, vineppo_advantages

from fakes import FakeServices
from strategies import rollout_batches


def test_registered_with_the_codes_defaults():
    cls = get_method("vineppo")
    assert cls is VinePPO and not cls.reference and not cls.group_local
    cfg = VinePPOConfig()
    assert cfg.rollouts_per_state == 9 and cfg.whiten and cfg.kl_coef == 1e-4
    assert cfg.aggregation == "token-mean" and cfg.eps_low == cfg.eps_high == 0.2
    with pytest.raises(ValueError, match="^rollouts_per_state:"):
        VinePPOConfig(rollouts_per_state=0)


def test_its_value_rollouts_are_charged_not_a_reference_block():
    services = FakeServices(seed=2)
    batch = VinePPO(rollouts_per_state=3).rollout(services)
    assert "reference_passes" not in services.calls
    assert any(call.startswith("generate:") for call in services.calls)
    assert services.stats["value_rollouts"] == 3 * services.stats["value_states"]
    assert batch.extra(STATE_VALUES).shape[0] == batch.size


@given(batch=rollout_batches(extras=True))
def test_a_steps_tokens_share_its_advantage_and_whitening_centres_the_batch(batch):
    values = torch.rand(batch.size, int(batch.step_ids.max()) + 1)
    batch.extras[STATE_VALUES] = values
    raw = vineppo_advantages(batch, values, whiten=False)
    torch.testing.assert_close(raw, exact_advantages(batch, values))
    mask = batch.response_mask > 0
    for row in range(batch.size):
        for step in batch.step_ids[row][mask[row]].unique():
            on_step = raw[row][(batch.step_ids[row] == step) & mask[row]]
            assert torch.all(on_step == on_step[0])  # one advantage per step
    whitened = VinePPO().advantages(batch)
    if mask.sum() > 1 and raw[mask].std() > 1e-3:
        assert abs(float(whitened[mask].mean())) < 1e-4
        assert float(whitened[mask].std()) == pytest.approx(1.0, abs=1e-3)
    assert torch.all(whitened[~mask] == 0)


@given(batch=rollout_batches())
def test_its_kl_term_is_each_sequences_clamped_sum_averaged_over_sequences(batch):
    """The code's ``kl_ctl * clamp(ref_kl * mask, 0, 10).sum(dim=1).mean()``: a per-sequence
    sum, not the policy loss's token mean (which made the 1e-4 weight act ~length x weaker)."""
    batch.ref_logprobs = (batch.old_logprobs - 3.0 * torch.rand(batch.old_logprobs.shape)).clamp(
        max=-1e-3
    )
    logprobs = batch.old_logprobs.clone().requires_grad_(True)
    method = VinePPO()
    advantages = torch.zeros_like(batch.response_mask)
    loss, stats = method.loss(logprobs, batch, advantages)
    log_ratio = batch.ref_logprobs - batch.old_logprobs
    k3 = (log_ratio.exp() - log_ratio - 1).clamp(0.0, 10.0) * batch.response_mask
    expected = k3.sum(-1).mean()
    assert stats["kl_ref"] == pytest.approx(float(expected), rel=1e-4, abs=1e-6)
    torch.testing.assert_close(loss.detach(), 1e-4 * expected, rtol=1e-4, atol=1e-9)
