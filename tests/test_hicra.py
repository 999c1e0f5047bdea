"""HICRA (arXiv 2509.03646): GRPO's advantage raised by α|Â| on the planning tokens; on the
testbed, a step's statement before its first "=" (ours)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from creditbench.methods.core import RolloutBatch
from creditbench.methods.grpo import GRPO
from creditbench.methods.hicra import HICRA, HICRAConfig, hicra_advantages, planning_mask

from fakes import FakeServices
from strategies import rollout_batches

RESPONSES = [
    "so 16+48=64\nthen 64*(4+5)=56+20=76\nAnswer: 76",
    "now 16+48=64\nAnswer: 64",
]


class ChainText(FakeServices):
    """Fake services whose step ids are the testbed's text services' on chain responses."""

    def __init__(self, text) -> None:
        super().__init__()
        self.text = text

    def delimited_step_ids(self, batch, delimiter):
        return self.text.delimited_step_ids(batch, delimiter)


@pytest.fixture(scope="module")
def chain():
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer
    from creditbench.harness.sampling.rollout import pad_layout
    from creditbench.harness.services.text import TaskText
    from creditbench.harness.tasks import get_task

    task = get_task("chain", steps=2, train_size=4, eval_size=2)
    tokenizer = build_char_tokenizer(task_alphabet(task))
    tokens = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in RESPONSES]
    tokens = [t + [tokenizer.eos_token_id] for t in tokens]
    _, _, ids, mask = pad_layout([[1]] * len(tokens), tokens, tokenizer.pad_token_id)
    mask = mask.float()
    batch = RolloutBatch(
        ids, mask, ids, mask, torch.tensor([0, 0]), torch.tensor([1.0, 0.0]), mask * 0
    )
    text = TaskText(task, tokenizer, task.problems("train"))
    return batch, ChainText(text), tokenizer


def test_the_planning_tokens_are_each_steps_statement(chain):
    batch, services, tokenizer = chain
    lines = services.delimited_step_ids(batch, "\n")
    segments = services.delimited_step_ids(batch, "=")
    planning = planning_mask(lines, segments)
    for row, text in enumerate(RESPONSES):
        ids = batch.response_ids[row][planning[row] > 0].tolist()
        got = tokenizer.decode(ids)
        statements = "".join(line.split("=")[0] + "=" for line in text.split("\n") if "=" in line)
        assert got == statements  # "so 16+48=" "then 64*(4+5)=": the answer line is none


def test_a_pass_gains_and_a_failure_loses_alpha_on_its_plan_alone(chain):
    batch, services, _ = chain
    adv = HICRA(alpha=0.2).advantages(batch, services)
    grpo = GRPO().advantages(batch)
    planning = planning_mask(
        services.delimited_step_ids(batch, "\n"), services.delimited_step_ids(batch, "=")
    ).bool()
    mask = batch.response_mask.bool()
    torch.testing.assert_close(
        adv[planning & mask], (grpo * (1 + 0.2 * grpo.sign()))[planning & mask]
    )
    torch.testing.assert_close(adv[~planning], grpo[~planning])
    assert float(adv[0][planning[0]].min()) > float(grpo[0, 0]) > 0  # the pass's plan: more
    assert float(grpo[1, 0]) < float(adv[1][planning[1]].max()) < 0  # the failure's: less blame


@given(batch=rollout_batches(), alpha=st.floats(0.0, 0.99), data=st.data())
def test_amplification_keeps_every_sign_and_alpha_zero_is_grpo(batch, alpha, data):
    planning = torch.tensor(
        data.draw(
            st.lists(
                st.sampled_from([0.0, 1.0]),
                min_size=batch.response_mask.numel(),
                max_size=batch.response_mask.numel(),
            )
        )
    ).view_as(batch.response_mask)
    scores = GRPO().advantages(batch)[:, 0]
    base = GRPO().advantages(batch)
    got = hicra_advantages(scores, batch.response_mask, planning, alpha)
    assert torch.all(got * base >= 0)
    assert torch.all(got.abs() <= base.abs() * (1 + alpha) + 1e-6)
    torch.testing.assert_close(hicra_advantages(scores, batch.response_mask, planning, 0.0), base)


def test_without_services_it_refuses():
    batch = next(iter([None]))
    with pytest.raises(ValueError, match="services"):
        HICRA().advantages(batch)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "field,value", [("alpha", 1.0), ("alpha", -0.1), ("planning_delimiter", "")]
)
def test_a_bad_option_names_its_field(field, value):
    with pytest.raises(ValueError, match=field):
        HICRAConfig(**{field: value})
