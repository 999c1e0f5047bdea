"""InT (methods/int.py): the intervention row is the attempt's right prefix plus the one
repaired step, nothing after it; the patch phase trains on those rows alone, with the SFT
credit, and only rows some continuation completes correctly; after it, InT is GRPO."""

from __future__ import annotations

import math

import pytest
import torch

from creditbench.methods.contract import PROBLEM_INDEX
from creditbench.methods.core import RolloutBatch
from creditbench.methods.grpo import GRPO
from creditbench.methods.int import IS_INTERVENTION, InT, intervention, step_starts

from fakes import FakeServices

NL, EOS = 9, 8  # the step delimiter and the end of sequence of these scripted responses


def step_ids_of(tokens: list[int]) -> list[int]:
    """Step index of every token: a step ends at ``NL``; ``NL`` and ``EOS`` are in no step."""
    ids, step = [], 0
    for token in tokens:
        ids.append(-1 if token in (NL, EOS) else step)
        step += token == NL
    return ids


def batch_of(rows: list[list[int]], groups: list[int], rewards: list[float]) -> RolloutBatch:
    width = max(len(r) for r in rows)
    pad = [[0] * (width - len(r)) for r in rows]
    return RolloutBatch(
        prompt_ids=torch.ones(len(rows), 1, dtype=torch.long),
        prompt_mask=torch.ones(len(rows), 1),
        response_ids=torch.tensor([r + p for r, p in zip(rows, pad, strict=True)]),
        response_mask=torch.tensor(
            [[1.0] * len(r) + [0.0] * len(p) for r, p in zip(rows, pad, strict=True)]
        ),
        group_ids=torch.tensor(groups),
        rewards=torch.tensor(rewards),
        old_logprobs=torch.full((len(rows), width), -0.5),
        step_ids=torch.tensor(
            [step_ids_of(r) + [-1] * len(p) for r, p in zip(rows, pad, strict=True)]
        ),
        extras={PROBLEM_INDEX: torch.tensor(groups)},
    )


# Group 0 (problem 0) is unsolved: two failed attempts. Group 1 (problem 1) has one failure and
# one pass. The repairs depart from each attempt at its second step.
ATTEMPTS = {
    0: [1, 2, NL, 3, 4, NL, 5, 6, NL, 7, EOS],
    1: [1, 2, NL, 3, 3, NL, 5, 5, NL, 6, EOS],
    2: [2, 2, NL, 4, 4, NL, 7, EOS],
}
REPAIRS = {
    0: [1, 2, NL, 3, 5, NL, 5, 7, NL, 6, EOS],
    1: [1, 2, NL, 3, 6, NL, 5, 7, NL, 6, EOS],
    2: [2, 2, NL, 4, 5, NL, 6, EOS],
}
PASSED = [2, 2, NL, 4, 5, NL, 6, EOS]
EXPECTED = {0: [1, 2, NL, 3, 5, NL], 1: [1, 2, NL, 3, 6, NL], 2: [2, 2, NL, 4, 5, NL]}


class Scripted(FakeServices):
    """A batch of the attempts above; ``generate`` without prefixes returns each attempt's
    repair, with prefixes a continuation rewarded 1 unless the prefix is in ``dead_ends``."""

    def __init__(self, budget_fraction: float = 0.0, dead_ends: tuple = ()) -> None:
        super().__init__(budget_fraction=budget_fraction)
        self.dead_ends = {tuple(p) for p in dead_ends}
        self.continued: list[tuple[int, ...]] = []

    def sample_batch(self) -> RolloutBatch:
        self.calls.append("sample_batch")
        rows = [ATTEMPTS[0], ATTEMPTS[1], ATTEMPTS[2], PASSED]
        return batch_of(rows, [0, 0, 1, 1], [0.0, 0.0, 0.0, 1.0])

    def generate(self, prompts, n=1, prefixes=None, *, problem_index=None, **options):  # type: ignore[override]
        self.calls.append(f"generate:{len(prompts)}x{n}:{'prefixes' if prefixes else 'plain'}")
        index = torch.as_tensor(problem_index).tolist()
        if prefixes is None:  # proposals: the prompts are the failed rows' repair variants
            rows = [REPAIRS[self.repair_key(k, p)] for k, p in enumerate(index) for _ in range(n)]
            return batch_of(
                rows, [k for k in range(len(index)) for _ in range(n)], [0.0] * len(rows)
            )
        self.continued += [tuple(p) for p in prefixes]
        rewards = [float(tuple(p) not in self.dead_ends) for p in prefixes for _ in range(n)]
        rows = [[*p, 1] for p in prefixes for _ in range(n)]
        return batch_of(rows, [k for k in range(len(prefixes)) for _ in range(n)], rewards)

    def repair_key(self, position: int, problem: int) -> int:
        """The attempt a proposal repairs: problem 0's attempts are rows 0 and 1."""
        return position if problem == 0 else 2

    def task_repair(self, batch: RolloutBatch) -> list[str]:
        self.calls.append("task_repair")
        keys = [self.repair_key(k, p) for k, p in enumerate(batch.extra(PROBLEM_INDEX).tolist())]
        return [" ".join(map(str, REPAIRS[k])) for k in keys]

    def batch_from_responses(self, problem_index, responses):  # type: ignore[override]
        batch = super().batch_from_responses(problem_index, responses)
        rows = [
            [int(t) for t, m in zip(r, k, strict=True) if m]
            for r, k in zip(batch.response_ids.tolist(), batch.response_mask.tolist(), strict=True)
        ]
        batch.step_ids = batch_of(rows, list(range(len(rows))), [0.0] * len(rows)).step_ids
        return batch


def rows_of(batch: RolloutBatch) -> list[list[int]]:
    return [batch.response_ids[r][batch.response_mask[r] > 0].tolist() for r in range(batch.size)]


def test_the_intervention_row_is_the_right_prefix_and_the_repaired_step_only():
    attempt, repair = ATTEMPTS[0], REPAIRS[0]
    starts = step_starts(torch.tensor(step_ids_of(attempt)), len(attempt))
    repair_starts = step_starts(torch.tensor(step_ids_of(repair)), len(repair))
    got = intervention(attempt, starts, repair, repair_starts)
    assert got == [1, 2, NL, 3, 5, NL]  # no EOS, nothing of the attempt's wrong suffix
    assert starts == [0, 3, 6, 9, 10]  # a step runs to the next one's first token
    assert intervention(attempt, starts, attempt, starts) is None  # a repair that changes nothing
    # a repair that departs only at the answer step: the leak filter drops it
    answer_only = [*attempt[:9], 6, EOS]
    answer_starts = step_starts(torch.tensor(step_ids_of(answer_only)), len(answer_only))
    assert intervention(attempt, starts, answer_only, answer_starts) is None
    kept = intervention(attempt, starts, answer_only, answer_starts, leak_filter=False)
    assert kept == [*attempt[:9], 6]
    # a repair of the very first step: an empty prefix
    first = [2, *attempt[1:]]
    assert intervention(attempt, starts, first, starts) == [2, 2, NL]


def test_the_patch_phase_trains_on_the_filtered_intervention_rows_alone():
    services = Scripted(dead_ends=[EXPECTED[1]])
    method = InT(continuations=2)
    batch = method.rollout(services)
    # pool "unsolved": the failures of group 0 only; the second's continuations all fail
    assert services.continued == [tuple(EXPECTED[0]), tuple(EXPECTED[1])]
    assert rows_of(batch) == [EXPECTED[0]]
    assert batch.extra(IS_INTERVENTION).tolist() == [1.0]
    assert math.isnan(float(batch.rewards[0]))  # no outcome: kept out of the step's accuracy
    adv = method.advantages(batch, services)
    assert torch.equal(adv, batch.response_mask * 1.0)
    scaled = InT(continuations=2, sft_credit=0.5)
    assert torch.equal(scaled.advantages(batch, services), batch.response_mask * 0.5)


def test_pool_all_repairs_failures_of_solved_groups_and_no_filter_keeps_every_proposal():
    services = Scripted(dead_ends=[EXPECTED[1]])
    batch = InT(pool="all", continuations=0).rollout(services)
    assert rows_of(batch) == [EXPECTED[0], EXPECTED[1], EXPECTED[2]]
    assert not any("prefixes" in call for call in services.calls)


def test_after_the_patch_phase_int_is_grpo_and_buys_nothing():
    for services, method in ((Scripted(budget_fraction=0.25), InT()),
                             (Scripted(), InT(sft_fraction=0.0))):  # fmt: skip
        batch = method.rollout(services)
        assert services.calls == ["sample_batch"]
        plain = Scripted().sample_batch()
        assert torch.equal(batch.response_ids, plain.response_ids)
        assert torch.equal(method.advantages(batch, services), GRPO().advantages(plain))


def test_a_patch_step_without_an_unsolved_group_trains_grpo_on_its_batch():
    class AllSolved(Scripted):
        def sample_batch(self) -> RolloutBatch:
            batch = super().sample_batch()
            batch.rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
            return batch

    services = AllSolved()
    batch = InT().rollout(services)
    assert batch.size == 4 and batch.extra(IS_INTERVENTION).sum() == 0
    assert not any(call.startswith("generate") for call in services.calls)
    assert torch.equal(InT().advantages(batch, services), GRPO().advantages(batch))


def test_joint_schedule_adds_the_rows_to_the_grpo_batch():
    services = Scripted()
    method = InT(schedule="joint", continuations=1)
    batch = method.rollout(services)
    flag = batch.extra(IS_INTERVENTION) > 0
    assert flag.tolist() == [False] * 4 + [True, True]
    assert set(batch.group_ids[flag].tolist()).isdisjoint(batch.group_ids[~flag].tolist())
    adv = method.advantages(batch, services)
    plain = Scripted().sample_batch()
    expected = GRPO().advantages(plain)
    assert torch.allclose(adv[~flag][:, : expected.shape[1]], expected)
    assert torch.equal(adv[flag], batch.response_mask[flag])


def test_the_task_operator_takes_the_scripted_repair():
    services = Scripted()
    batch = InT(operator="task", continuations=1).rollout(services)
    assert "task_repair" in services.calls
    assert not any(call.endswith(":plain") for call in services.calls)
    assert rows_of(batch) == [EXPECTED[0], EXPECTED[1]]


@pytest.mark.parametrize(
    "options",
    [{"proposals": 0}, {"continuations": -1}, {"sft_credit": -1.0}, {"sft_fraction": 1.5},
     {"operator": "oracle"}, {"pool": "some"}, {"schedule": "later"}],
)  # fmt: skip
def test_bad_options_name_their_field(options):
    field = next(iter(options))
    with pytest.raises(ValueError, match=f"^{field}:"):
        InT(**options)
