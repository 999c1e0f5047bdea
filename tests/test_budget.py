"""The budget meter: closed forms against per-token loops, units, state, eval fractions."""

from __future__ import annotations

import pytest
import torch

from creditbench.harness.budget import BudgetMeter, count_non_embedding_params, crossed_marks

N, LAYERS, D = 1000, 3, 16


def meter(**kwargs) -> BudgetMeter:
    return BudgetMeter(non_embedding_params=N, n_layers=LAYERS, d_model=D, **kwargs)


def per_token(context: int) -> int:
    """Kaplan et al. 2020, Table 1: C_forward = 2N + 2 n_layer n_ctx d_attn."""
    return 2 * N + 2 * LAYERS * context * D


def forward_loop(lengths) -> int:
    return sum(per_token(t + 1) for n in lengths for t in range(n))


def test_forward_flops_formula():
    m = meter()
    assert m.forward_flops(1, 1) == per_token(1)
    assert m.forward_flops(10, 4.5) == pytest.approx(10 * (2 * N + 2 * LAYERS * 4.5 * D))


def test_charge_forward_per_token_contexts():
    m = meter()
    contexts = [1, 5, 9, 2]
    m.charge_forward(torch.tensor(contexts))
    assert m.flops == sum(per_token(c) for c in contexts)
    assert m.forward_tokens == 4
    assert m.flops_by_category["scoring"] == m.flops


@pytest.mark.parametrize("lengths", [[1], [7, 3, 12], [0, 5], list(range(1, 20))])
def test_forward_batch_closed_form_equals_loop(lengths):
    m = meter()
    m.charge_forward_batch(lengths)
    assert m.flops == forward_loop(lengths)
    assert m.forward_tokens == sum(lengths)


@pytest.mark.parametrize(("prompts", "news"), [([4], [6]), ([3, 10, 1], [0, 7, 2]), ([0], [5])])
def test_generation_is_prefill_plus_decode(prompts, news):
    m = meter()
    m.charge_generation(torch.tensor(prompts), news)
    prefill = forward_loop(prompts)
    decode = sum(
        per_token(p + j) for p, g in zip(prompts, news, strict=True) for j in range(1, g + 1)
    )
    assert m.flops == prefill + decode
    assert m.flops_by_category["generation"] == m.flops
    assert m.generated_tokens == sum(news)


def test_generation_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="prompt lengths"):
        meter().charge_generation([1, 2], [3])


def test_training_is_three_forwards():
    lengths = [5, 9, 2]
    m = meter()
    m.charge_training(lengths)
    assert m.flops == 3 * forward_loop(lengths)
    assert m.trained_tokens == sum(lengths)
    assert m.flops_by_category == {"generation": 0, "scoring": 0, "training": m.flops}


def test_categories_add_up_and_custom_category():
    m = meter()
    m.charge_generation([3], [4])
    m.charge_forward_batch([7])
    m.charge_forward_batch([7], category="reference")
    m.charge_training([7])
    assert sum(m.flops_by_category.values()) == m.flops
    assert m.flops_by_category["reference"] == m.flops_by_category["scoring"]


def test_outside_budget_charges_nothing():
    m = meter(unit="flops", amount=1e9)
    with m.outside_budget():
        m.charge_generation([3], [4])
        m.charge_forward_batch([5])
        m.charge_training([5])
        m.charge_optimizer_step()
    assert m.flops == 0 and m.generated_tokens == 0 and m.optimizer_steps == 0
    m.charge_forward_batch([5])
    assert m.flops == forward_loop([5])


def test_reference_passes_are_counted_and_not_charged():
    m = meter(unit="flops", amount=1e9)
    m.charge_generation([3], [4])
    charged = m.flops
    with m.as_reference():
        m.charge_generation([3], [4])
        m.charge_forward_batch([5])
    assert m.flops == charged and m.generated_tokens == 4 and m.forward_tokens == 0
    assert m.reference["flops"] == charged + forward_loop([5])
    assert m.reference["generated_tokens"] == 4 and m.reference["forward_tokens"] == 5
    assert m.counters()["reference_flops"] == m.reference["flops"]
    restored = meter(unit="flops", amount=1e9)
    restored.load_state_dict(m.state_dict())
    assert restored.reference == m.reference
    assert "reference_flops" not in meter().counters()  # a run without them records none


@pytest.mark.parametrize(
    ("unit", "expected"),
    [("flops", None), ("tokens", 9), ("steps", 2)],
)
def test_spent_in_each_unit(unit, expected):
    m = meter(unit=unit, amount=10)
    m.charge_generation([2, 2], [4, 5])
    m.charge_optimizer_step()
    m.charge_optimizer_step()
    assert m.spent() == (m.flops if expected is None else expected)


def test_fraction_and_exhausted():
    m = meter(unit="steps", amount=4)
    assert m.fraction() == 0 and not m.exhausted()
    for _ in range(3):
        m.charge_optimizer_step()
    assert m.fraction() == 0.75 and not m.exhausted()
    m.charge_optimizer_step()
    m.charge_optimizer_step()
    assert m.fraction() == 1.25 and m.exhausted()
    with pytest.raises(ValueError, match="budget amount is not set"):
        meter(amount=0).fraction()


def test_wall_clock_accumulates_only_while_running():
    m = meter(unit="seconds", amount=100)
    assert m.seconds == 0.0
    with m.clock():
        sum(range(10000))
    after_block = m.seconds
    assert after_block > 0
    assert m.seconds == after_block  # stopped outside the block
    m.start()
    with m.outside_budget():
        paused = m.seconds
        sum(range(10000))
        assert m.seconds == paused
    assert m.running
    m.pause()
    assert m.spent() == m.seconds


def test_state_dict_round_trip_continues_counting():
    m = meter(unit="flops", amount=1e7)
    m.charge_generation([3, 4], [5, 6])
    m.charge_training([8, 10])
    m.charge_optimizer_step()
    with m.clock():
        pass
    state = m.state_dict()
    restored = meter(unit="flops", amount=1e7)
    restored.load_state_dict(state)
    assert restored.state_dict() == state
    m.charge_forward_batch([4])
    restored.charge_forward_batch([4])
    assert restored.flops == m.flops and restored.flops_by_category == m.flops_by_category
    with pytest.raises(ValueError, match="shape"):
        BudgetMeter(non_embedding_params=N + 1, n_layers=LAYERS, d_model=D).load_state_dict(state)


def test_resumed_clock_adds_to_saved_seconds():
    m = meter(unit="seconds", amount=100)
    with m.clock():
        sum(range(10000))
    state = m.state_dict()
    resumed = meter(unit="seconds", amount=100)
    resumed.load_state_dict(state)
    with resumed.clock():
        sum(range(10000))
    assert resumed.seconds > state["seconds"]


def test_eval_fractions_crossed():
    fractions = [0.0, 0.25, 0.5, 0.75, 1.0]
    m = meter(unit="steps", amount=8)
    assert m.fraction_crossed(None, fractions) == [0.0]  # before training
    seen = []
    for _ in range(10):
        before = m.fraction()
        m.charge_optimizer_step()
        seen += m.fraction_crossed(before, fractions)
    assert seen == [0.25, 0.5, 0.75, 1.0]  # each one exactly once, at the first step >= f
    assert crossed_marks(0.1, 0.8, fractions) == [0.25, 0.5, 0.75]
    assert crossed_marks(0.25, 0.3, fractions) == []


def test_count_non_embedding_params_excludes_tied_and_untied_embeddings():
    class Toy(torch.nn.Module):
        def __init__(self, tied: bool):
            super().__init__()
            self.embed = torch.nn.Embedding(50, 8)
            self.body = torch.nn.Linear(8, 8)
            self.head = torch.nn.Linear(8, 50, bias=False)
            if tied:
                self.head.weight = self.embed.weight

        def get_input_embeddings(self):
            return self.embed

        def get_output_embeddings(self):
            return self.head

    assert count_non_embedding_params(Toy(tied=True)) == 8 * 8 + 8
    assert count_non_embedding_params(Toy(tied=False)) == 8 * 8 + 8


def test_meter_for_a_transformers_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=40,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(config)
    m = BudgetMeter.for_model(model, unit="steps", amount=3)
    total = sum(p.numel() for p in model.parameters())
    assert m.non_embedding_params == total - 40 * 16
    assert (m.n_layers, m.d_model, m.unit, m.amount) == (2, 16, "steps", 3.0)


def test_charge_flops_of_another_model_counts_only_inside_budget():
    teacher = BudgetMeter(non_embedding_params=5 * N, n_layers=2 * LAYERS, d_model=D)
    m = meter()
    price = teacher.charge_forward_batch([6, 4])
    m.charge_flops(price, forward_tokens=10)
    assert m.flops == m.flops_by_category["scoring"] == price > forward_loop([6, 4])
    assert m.forward_tokens == 10
    with m.outside_budget():
        m.charge_flops(price, forward_tokens=10)
    assert m.flops == price
