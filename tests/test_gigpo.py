"""GiGPO (arXiv 2505.10978): a step-level advantage over the group's steps taken in the same
state, beside GRPO's episode-level one; the chain's states (the task contract's states part)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from creditbench.methods.core import RolloutBatch
from creditbench.methods.gigpo import GiGPO, GiGPOConfig, step_level_advantages
from creditbench.methods.grpo import GRPO

from fakes import FakeServices
from strategies import rollout_batches

# three responses to one problem (start 16, "last digit" then "add 48"): the first two reach
# the value 6 by the same line, the third slips to 7, so step 1 is taken in two states
RESPONSES = [
    "so 16%10=6\nthen 6+48=54\nAnswer: 54",
    "now 16%10=6\nso 6+48=55\nAnswer: 55",
    "so 16%10=7\nthen 7+48=55\nAnswer: 55",
]


def test_the_chains_state_is_the_step_and_the_value_carried_into_it():
    from creditbench.harness.tasks import get_task

    task = get_task("chain")
    problem = next(p for p in task.problems("train") if p.metadata["start"] == 16)
    keys = [task.state_keys(problem, text) for text in RESPONSES]
    assert keys[0] == ["0:16", "1:6", "2:54"]
    assert keys[1] == ["0:16", "1:6", "2:55"]  # another filler, the same states
    assert keys[2][1] == "1:7"  # a slip leads elsewhere
    assert task.state_keys(problem, "so 16%10=6x\nthen 6+48=54") == ["0:16", None]
    assert "states" in task.capabilities


def text_batch(task, problems, index: int, responses: list[str], rewards: list[float]):
    """``responses`` to ``problems[index]`` as one group's batch, with the harness's text
    services over ``task``."""
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer
    from creditbench.harness.sampling.rollout import pad_layout
    from creditbench.harness.services.text import TaskText
    from creditbench.methods.contract import PROBLEM_INDEX

    n = len(responses)
    tokenizer = build_char_tokenizer(task_alphabet(task))
    tokens = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in responses]
    tokens = [t + [tokenizer.eos_token_id] for t in tokens]
    _, _, ids, mask = pad_layout([[1]] * n, tokens, tokenizer.pad_token_id)
    mask = mask.float()
    group = torch.zeros(n, dtype=torch.long)
    batch = RolloutBatch(ids, mask, ids, mask, group, torch.tensor(rewards), mask * 0)
    batch.extras = {PROBLEM_INDEX: torch.full((n,), index)}
    return batch, TaskText(task, tokenizer, problems)


@pytest.fixture(scope="module")
def chain_batch():
    """The responses above as a batch of the chain task, with the harness's text services."""
    from creditbench.harness.tasks import get_task

    task = get_task("chain")
    problems = task.problems("train")
    index = next(i for i, p in enumerate(problems) if p.metadata["start"] == 16)
    return text_batch(task, problems, index, RESPONSES, [1.0, 0.0, 0.0])


def test_in_each_world_two_paths_to_one_state_share_its_id_at_their_next_line():
    """Countdown (other pairs, the same numbers left) and the ledger (a fixed slip and no slip)
    name their own states; through the text services the next line's tokens share one id."""
    from creditbench.harness.tasks import get_task

    countdown = get_task("countdown")
    make_24 = countdown.make_problem("p", (1, 2, 3, 4), 24)
    ledger = get_task("ledger")
    problem = ledger.problems("eval")[0]
    clean = ledger.reference_solution(problem).split("\n")
    first = clean[0].rsplit("=", 1)
    slipped = f"{first[0]}={(int(first[1]) + 1) % 100}"
    fixed = f"fix {first[0].split(' ', 1)[-1]}={first[1]}"
    worlds = [
        (countdown, make_24, ["2*1=2 left 3 4 2", "3*1=3 left 2 4 3"], "4*3=12 left 2 12"),
        (ledger, problem, [clean[0], f"{slipped}\n{fixed}"], clean[1]),
    ]
    for task, question, paths, next_line in worlds:
        texts = [f"{path}\n{next_line}\n" for path in paths]
        batch, text = text_batch(task, [question], 0, texts, [1.0, 0.0])
        states = torch.where(batch.response_mask > 0, text.state_ids(batch), -1)
        at_next = [states[i, len(t) - len(next_line) - 1] for i, t in enumerate(texts)]
        at_first = [states[i, 0] for i in range(2)]
        assert at_next[0] == at_next[1] >= 0, task.name  # one state, reached two ways
        assert at_first[0] == at_first[1] != at_next[0], task.name


def test_steps_taken_in_one_state_are_compared_with_each_other(chain_batch):
    batch, text = chain_batch
    states = torch.where(batch.response_mask > 0, text.state_ids(batch), -1)
    step = step_level_advantages(states, batch.rewards, batch.group_ids, gamma=0.95)
    first_line = states[0] == states[0, 0]
    # step 0: all three in the start state; returns 0.95² R: z-scored, the pass above
    assert float(step[0][first_line][0]) > 0 > float(step[1][first_line][0])
    # step 1: responses 0 and 1 share "1:6", response 2 is alone in "1:7" (no step signal)
    second = states[2] == states[2][(states[2] >= 0) & (states[2] != states[2, 0])][0]
    assert float(step[2][second].abs().sum()) == 0.0
    one = states[0][(states[0] >= 0) & ~first_line][0]
    assert float(step[0][states[0] == one][0]) > 0 > float(step[1][states[1] == one][0])


class ChainServices(FakeServices):
    def __init__(self, text) -> None:
        super().__init__()
        self.text = text

    def state_ids(self, batch):
        return self.text.state_ids(batch)


def test_the_advantage_is_the_episode_level_plus_omega_times_the_step_level(chain_batch):
    batch, text = chain_batch
    services = ChainServices(text)
    states = torch.where(batch.response_mask > 0, text.state_ids(batch), -1)
    step = step_level_advantages(states, batch.rewards, batch.group_ids, gamma=0.95)
    grpo = GRPO().advantages(batch)
    for omega in (0.0, 0.5, 1.0):
        got = GiGPO(omega=omega).advantages(batch, services)
        torch.testing.assert_close(got, (grpo + omega * step.float()) * batch.response_mask)


@given(batch=rollout_batches())
def test_omega_zero_is_grpo_and_a_lone_state_adds_nothing(batch):
    services = FakeServices()
    torch.testing.assert_close(
        GiGPO(omega=0.0).advantages(batch, services), GRPO().advantages(batch)
    )
    states = torch.where(batch.response_mask > 0, services.state_ids(batch), -1)
    step = step_level_advantages(states, batch.rewards, batch.group_ids, gamma=0.95)
    for row in range(states.shape[0]):
        for state in torch.unique(states[row][states[row] >= 0]).tolist():
            same = (states == state) & (batch.group_ids[:, None] == batch.group_ids[row])
            if int(same.any(-1).sum()) == 1:  # no other response of the group took it
                assert float(step[row][states[row] == state].abs().sum()) == 0.0


def test_a_task_without_states_is_refused_by_name():
    from creditbench.harness.services.text import TaskText
    from creditbench.harness.tasks.base import MissingCapabilityError, TaskBase

    class Plain(TaskBase):
        name = "plain"

    with pytest.raises(MissingCapabilityError, match="states"):
        TaskText(Plain(), None, []).state_ids(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("field,value", [("omega", -1.0), ("gamma", 0.0), ("gamma", 1.5)])
def test_a_bad_option_names_its_field(field, value):
    with pytest.raises(ValueError, match=field):
        GiGPOConfig(**{field: value})
