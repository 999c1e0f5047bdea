"""PURE (arXiv 2504.15275): min-form credit on PRIME's implicit process rewards."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.methods.pure import PUREConfig, min_form_returns, pure_advantages, step_sums

step_rewards = st.lists(st.floats(-1, 1), min_size=1, max_size=8)


@given(rewards=step_rewards)
def test_at_temperature_zero_a_steps_value_is_the_worst_step_ahead(rewards):
    r = torch.tensor([rewards], dtype=torch.float64)
    got = min_form_returns(r, torch.ones_like(r, dtype=torch.bool), 0.0)[0].tolist()
    assert got == pytest.approx([min(rewards[k:]) for k in range(len(rewards))])


@given(rewards=step_rewards, temperature=st.floats(0.01, 2.0))
def test_the_softmin_value_never_leaves_the_rewards_range(rewards, temperature):
    """The value is bounded by the PRM's range, however many high-reward steps a response
    strings together (the sum-form return of k steps of reward 1 is k): the paper's argument
    against reward hacking. The first state's value is a weighted mean of the step rewards."""
    r = torch.tensor([rewards], dtype=torch.float64)
    first = float(min_form_returns(r, torch.ones_like(r, dtype=torch.bool), temperature)[0, 0])
    assert min(rewards) - 1e-9 <= first <= max(rewards) + 1e-9


def test_a_cold_softmin_is_the_minimum_and_many_good_steps_do_not_add_up():
    r = torch.tensor([[0.9, 0.9, 0.9, -0.5, 0.9]], dtype=torch.float64)
    present = torch.ones_like(r, dtype=torch.bool)
    assert float(min_form_returns(r, present, 0.01)[0, 0]) == pytest.approx(-0.5, abs=1e-6)
    hacked = torch.tensor([[0.9] * 20], dtype=torch.float64)
    assert float(
        min_form_returns(hacked, torch.ones_like(hacked, dtype=torch.bool), 0.1)[0, 0]
    ) == (pytest.approx(0.9))


def test_the_advantage_by_hand():
    # two responses of one group, two steps each; steps 0,0,1,1 | 0,1,1,-1 (padding)
    step_ids = torch.tensor([[0, 0, 1, 1], [0, 1, 1, -1]])
    mask = (step_ids >= 0).float()
    r = torch.tensor([[0.5, -0.2], [0.1, 0.3]], dtype=torch.float64)
    adv = pure_advantages(
        r, step_ids, torch.tensor([0.0, 1.0]), torch.tensor([7, 7]), mask, temperature=0.0
    )
    # min-form values: response 0 [-0.2, -0.2], response 1 [0.1, 0.3]; baselines: the other's
    # first value (0.1 and -0.2); outcome terms 0 - 1 = -1 and 1 - 0 = +1
    expected = torch.tensor([[-0.3 - 1, -0.3 - 1, -0.3 - 1, -0.3 - 1], [1.3, 1.5, 1.5, 0.0]])
    torch.testing.assert_close(adv, expected.float(), rtol=1e-6, atol=1e-6)
    without = pure_advantages(
        r,
        step_ids,
        torch.tensor([0.0, 1.0]),
        torch.tensor([7, 7]),
        mask,
        verifiable=False,
        temperature=0.0,
    )
    torch.testing.assert_close(without[1, :3], torch.tensor([0.3, 0.5, 0.5]))


def test_step_sums_add_each_steps_tokens():
    ids = torch.tensor([[0, 0, 1, -1]])
    got = step_sums(torch.tensor([[1.0, 2.0, 4.0, 8.0]]), ids, 2)
    assert got.tolist() == [[3.0, 4.0]]


@pytest.mark.parametrize(
    "field,value",
    [("temperature", -1.0), ("beta", 0.0), ("verifiable", "yes"), ("prm_lr_ratio", 0)],
)
def test_a_bad_option_names_its_field(field, value):
    with pytest.raises(ValueError, match=field):
        PUREConfig(**{field: value})


def test_it_trains_and_reads_the_implicit_prm_never_the_step_checker():
    from creditbench.methods.pure import PURE

    from fakes import FakeServices
    from strategies import build_batch

    batch = build_batch([3], [4, 5, 3], [1.0, 0.0, 0.0])
    services = FakeServices()
    adv = PURE().advantages(batch, services)
    assert "fit_auxiliary" in services.calls and adv.shape == batch.response_mask.shape
    assert PURE.needs.step_truth == () and PURE.needs.reference_model
