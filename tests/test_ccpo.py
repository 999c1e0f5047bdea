"""CCPO: counterfactual credit of the thinker, the v1 running normaliser, roles and services."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import Tensor

from creditbench.methods.ccpo import (
    CCPO,
    SOLVER,
    THINKER,
    CCPOConfig,
    RunningStat,
    ccpo_advantages,
    counterfactual_bonus,
    role_for_step,
    running_rewards,
    signed_outcome,
    solo_baseline,
    strip_final_boxed,
)
from creditbench.methods.core import RolloutBatch, group_mean_std

from strategies import build_batch, permute_within_groups

OFFSET = 100  # problem_index of prompt p is OFFSET + p, so a mix-up shows


@dataclass
class TeamFake:
    """Services for a thinker-solver step: outcomes come from tables ``[P][G]``.

    ``solo[p][k]`` grades the k-th solo answer to prompt p, ``joint[p][k]`` the answer given
    the k-th hint. ``calls`` logs every request, ``generated`` counts the sampled responses.
    """

    solo: list[list[float]]
    joint: list[list[float]]
    step: int = 0
    calls: list[tuple] = field(default_factory=list)
    generated: int = 0

    def _batch(self, prompts: int, n: int, rewards: list[float], graded: bool) -> RolloutBatch:
        lengths = [2 + (3 * row) % 5 for row in range(prompts * n)]
        batch = build_batch(
            [n] * prompts, lengths, rewards, seed=len(self.calls),
            with_steps=graded, with_extras=graded,
        )  # fmt: skip
        self.generated += batch.size
        return batch

    def sample_batch(self) -> RolloutBatch:
        self.calls.append(("sample_batch",))
        size, width = len(self.solo), len(self.solo[0])
        batch = self._batch(size, width, [r for row in self.solo for r in row], graded=True)
        batch.extras["problem_index"] = torch.arange(size).repeat_interleave(width) + OFFSET
        return batch

    def variant(self, batch: RolloutBatch, kind: str, hints=None) -> list[str]:
        self.calls.append(("variant", kind))
        index = batch.extras["problem_index"].tolist()
        if kind == "thinker":
            return [f"think p{p}" for p in index]
        return [f"solve p{p} with {h}" for p, h in zip(index, hints, strict=True)]

    def decode(self, batch: RolloutBatch) -> list[str]:
        seen: dict[int, int] = {}
        out = []
        for p in batch.extras["problem_index"].tolist():
            seen[p] = seen.get(p, -1) + 1
            out.append(f"h{p}.{seen[p]}")
        return out

    def generate(self, prompts, n=1, prefixes=None, *, problem_index=None, **options):
        self.calls.append(("generate", n, problem_index is not None, options))
        if problem_index is None:
            return self._batch(len(prompts), n, [math.nan] * (len(prompts) * n), graded=False)
        rewards = []
        for text, p in zip(prompts, problem_index.tolist(), strict=True):
            q, k = map(int, re.search(r"with h(\d+)\.(\d+)", text).groups())
            assert q == p, "a hint went to another problem"
            rewards += [self.joint[p - OFFSET][k]] * n
        batch = self._batch(len(prompts), n, rewards, graded=True)
        batch.extras["problem_index"] = torch.as_tensor(problem_index).repeat_interleave(n)
        return batch


outcome_tables = st.integers(1, 3).flatmap(
    lambda p: st.integers(1, 4).flatmap(
        lambda g: st.tuples(
            *[st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=g, max_size=g),
                       min_size=p, max_size=p)] * 2
        )
    )
)  # fmt: skip


def team_step(solo, joint, step=0, **options) -> tuple[RolloutBatch, TeamFake, CCPO]:
    fake = TeamFake(solo, joint, step=step)
    method = CCPO(**options)
    return method.rollout(fake), fake, method


def rows_of(batch: RolloutBatch, role: int) -> Tensor:
    return batch.extras["ccpo_role"] == role


# --------------------------------------------------------------------------------------------
# The counterfactual credit
# --------------------------------------------------------------------------------------------

signs = st.lists(st.sampled_from([-1.0, 1.0]), min_size=1, max_size=8)


@given(joint=signs, data=st.data())
def test_event_bonus_is_helped_minus_hurt(joint: list[float], data: st.DataObject) -> None:
    n = len(joint)
    baseline = data.draw(st.lists(st.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0]), min_size=n,
                                  max_size=n))  # fmt: skip
    j, b = torch.tensor(joint), torch.tensor(baseline)
    bonus = counterfactual_bonus(j, b, "event")
    for jk, bk, got in zip(joint, baseline, bonus.tolist(), strict=True):
        want = 1.0 if jk > 0 and bk < 0 else -1.0 if jk < 0 and bk > 0 else 0.0
        assert got == want
    agree = (torch.sign(j) == torch.sign(b)) | (b == 0)
    assert (bonus[agree] == 0).all()
    assert (bonus[b == -1] >= 0).all(), "when every solo fails the thinker can only gain"
    assert (bonus[b == 1] <= 0).all(), "when every solo succeeds the thinker can only lose"
    r_think = j + 0.2 * bonus
    assert ((r_think - j).abs() <= 0.2 + 1e-6).all()


@given(tables=outcome_tables, credit=st.sampled_from(["event", "difference", "running"]))
def test_a_hint_that_changes_nothing_gets_no_credit(tables, credit: str) -> None:
    solo, _ = tables  # the team answers exactly as the solver alone does
    batch, _, _ = team_step(solo, solo, train_roles="both", credit=credit, solo_baseline="paired")
    assert (batch.extras["ccpo_bonus"] == 0).all()
    think, solve = rows_of(batch, THINKER), rows_of(batch, SOLVER)
    if credit != "running":  # first batch of running: raw Δ = 0 vs raw R_joint
        reward = batch.extras["ccpo_reward"]
        torch.testing.assert_close(reward[think], reward[solve])
    else:
        assert (batch.extras["ccpo_reward"][think] == 0).all()


@given(tables=outcome_tables)
def test_a_neutral_hint_has_zero_mean_difference_credit_per_prompt(tables) -> None:
    solo, _ = tables
    j = signed_outcome(torch.tensor([r for row in solo for r in row]))
    groups = torch.arange(len(solo)).repeat_interleave(len(solo[0]))
    bonus = counterfactual_bonus(j, solo_baseline(j, groups, "group_mean"), "difference")
    sums = torch.zeros(len(solo), dtype=torch.float64).index_add_(0, groups, bonus.double())
    assert sums.abs().max() < 1e-6


@given(tables=outcome_tables)
def test_helped_and_hurt_counts_match_the_tables(tables) -> None:
    solo, joint = tables
    batch, _, _ = team_step(solo, joint, train_roles="thinker")
    helped = hurt = 0
    for solo_row, joint_row in zip(solo, joint, strict=True):
        base = sum(2 * r - 1 for r in solo_row) / len(solo_row)
        helped += sum(r > 0 and base < 0 for r in joint_row)
        hurt += sum(r == 0 and base > 0 for r in joint_row)
    bonus = batch.extras["ccpo_bonus"]
    assert int((bonus == 1).sum()) == helped and int((bonus == -1).sum()) == hurt
    outcome = signed_outcome(batch.rewards)
    torch.testing.assert_close(batch.extras["ccpo_reward"], outcome + 0.2 * bonus)


@given(tables=outcome_tables)
def test_the_solver_reward_ignores_the_solo_path(tables) -> None:
    solo, joint = tables
    flipped = [[1.0 - r for r in row] for row in solo]
    a, _, _ = team_step(solo, joint, train_roles="solver")
    b, _, _ = team_step(flipped, joint, train_roles="solver")
    assert torch.equal(a.extras["ccpo_reward"], b.extras["ccpo_reward"])
    assert torch.equal(a.extras["ccpo_reward"], signed_outcome(a.rewards))


# --------------------------------------------------------------------------------------------
# v1's running normaliser
# --------------------------------------------------------------------------------------------

batches = st.lists(st.lists(st.sampled_from([-1.0, 0.0, 1.0]), min_size=1, max_size=6),
                   min_size=1, max_size=5)  # fmt: skip


@given(stream=batches, decay=st.sampled_from([0.0, 0.5, 0.99]))
def test_running_stat_update_rule(stream: list[list[float]], decay: float) -> None:
    stat = RunningStat(decay)
    mean = m2 = 0.0
    for index, values in enumerate(stream):
        v = torch.tensor(values)
        batch_mean = sum(values) / len(values)
        batch_var = sum((x - batch_mean) ** 2 for x in values) / len(values)
        if index == 0:
            mean, m2 = batch_mean, batch_var
        else:
            mean, m2 = decay * mean + (1 - decay) * batch_mean, decay * m2 + (1 - decay) * batch_var
        stat.update(v)
        assert stat.mean == pytest.approx(mean, abs=1e-6)
        assert stat.m2 == pytest.approx(m2, abs=1e-6)
        assert stat.std == (pytest.approx(math.sqrt(m2)) if m2 > 1e-6 else 1.0)
    assert stat.updates == len(stream) and stat.seen == sum(map(len, stream))


@given(stream=batches, min_samples=st.integers(0, 12))
def test_running_rewards_use_the_statistics_of_earlier_batches(stream, min_samples) -> None:
    stats = {key: RunningStat() for key in ("delta", "joint", "solo")}
    for values in stream:
        delta = torch.tensor(values)
        joint = (delta > 0).float()
        solo = (delta < 0).float()
        before = {key: RunningStat(**vars(s)) for key, s in stats.items()}
        r_think, r_solve, gate = running_rewards(delta, joint, solo, stats, min_samples=min_samples)
        d = before["delta"]
        if d.updates >= 1 and d.seen >= min_samples:
            want = torch.tanh((delta - d.mean) / (d.std + d.eps))
            torch.testing.assert_close(r_think, want)
            assert (r_think.abs() <= 1).all()
            assert 0.0 <= gate <= 1.0
            assert gate == pytest.approx(0.5 * (1 + math.tanh(d.mean / (d.std + d.eps) / 2)))
            z_j, z_s = before["joint"].normalize(joint), before["solo"].normalize(solo)
            torch.testing.assert_close(r_solve, gate * z_j + (1 - gate) * z_s)
        else:  # warm-up: raw values
            assert torch.equal(r_think, delta) and torch.equal(r_solve, joint) and gate == 1.0


@given(mean=st.floats(-5, 5), m2=st.floats(0, 10), eta=st.floats(0, 20))
def test_gate_is_in_unit_interval_and_half_at_zero_mean(mean, m2, eta) -> None:
    stats = {key: RunningStat(mean=mean, m2=m2, updates=1, seen=50) for key in ("delta", "joint")}
    stats["solo"] = RunningStat(updates=1, seen=50)
    _, _, gate = running_rewards(torch.zeros(3), torch.zeros(3), torch.zeros(3), stats, eta=eta)
    assert 0.0 <= gate <= 1.0
    stats["delta"] = RunningStat(mean=0.0, m2=m2, updates=1, seen=50)
    assert running_rewards(torch.zeros(2), torch.zeros(2), torch.zeros(2), stats, eta=eta)[2] == 0.5


def test_running_credit_state_carries_across_steps() -> None:
    solo, joint = [[0.0, 0.0, 1.0, 0.0]] * 3, [[1.0, 0.0, 1.0, 1.0]] * 3
    fake = TeamFake(solo, joint)
    method = CCPO(credit="running", train_roles="thinker", min_samples=1)
    first = method.rollout(fake).extras["ccpo_reward"]
    assert torch.equal(first, torch.tensor([1.0, 0.0, 0.0, 1.0] * 3)), "warm-up: raw Δ"
    second = method.rollout(fake).extras["ccpo_reward"]
    d = first
    std = math.sqrt(float(d.var(unbiased=False)))
    torch.testing.assert_close(second, torch.tanh((d - d.mean()) / (std + 1e-6)))


# --------------------------------------------------------------------------------------------
# Roles, groups and services
# --------------------------------------------------------------------------------------------


def test_roles_alternate_in_turns() -> None:
    assert [role_for_step(s, 3) for s in range(8)] == [0, 0, 0, 1, 1, 1, 0, 0]
    assert [role_for_step(s, 2, "solver") for s in range(5)] == [1, 1, 0, 0, 1]
    solo, joint = [[0.0, 1.0]] * 2, [[1.0, 1.0]] * 2
    for step, role in ((0, THINKER), (9, THINKER), (10, SOLVER), (20, THINKER)):
        batch, _, _ = team_step(solo, joint, step=step)
        assert batch.size == 4 and (batch.extras["ccpo_role"] == role).all()


@given(tables=outcome_tables)
def test_both_roles_train_in_separate_groups(tables) -> None:
    solo, joint = tables
    size, width = len(solo), len(solo[0])
    batch, _, method = team_step(solo, joint, train_roles="both")
    think, solve = rows_of(batch, THINKER), rows_of(batch, SOLVER)
    assert int(think.sum()) == int(solve.sum()) == size * width
    assert not set(batch.group_ids[think].tolist()) & set(batch.group_ids[solve].tolist())
    _, _, count = group_mean_std(batch.rewards, batch.group_ids)
    assert (count == width).all(), "one group per (role, prompt)"
    adv = method.advantages(batch)
    assert (adv[batch.response_mask == 0] == 0).all()
    for role in (think, solve):  # a role's advantages come from its own rows alone
        alone = method.advantages(batch.select(role))
        torch.testing.assert_close(adv[role], alone)
    totals = (adv.sum(-1) / batch.response_mask.sum(-1)).double()
    sums = torch.zeros(int(batch.group_ids.max()) + 1, dtype=torch.float64)
    assert sums.index_add_(0, batch.group_ids, totals).abs().max() < 1e-5
    moved, index = permute_within_groups(batch, seed=size)
    torch.testing.assert_close(method.advantages(moved), adv[index])


def test_every_pass_goes_through_services() -> None:
    solo, joint = [[0.0, 1.0, 0.0]] * 2, [[1.0, 1.0, 0.0]] * 2
    batch, fake, _ = team_step(solo, joint, train_roles="both", thinker_max_new_tokens=24)
    kinds = [call for call in fake.calls if call[0] != "variant"]
    assert kinds == [
        ("sample_batch",),
        ("generate", 3, False, {"max_new_tokens": 24}),  # thinker: text only, ungraded
        ("generate", 1, True, {}),  # one graded answer per hint
    ]
    assert [c[1] for c in fake.calls if c[0] == "variant"] == ["thinker", "solver"]
    assert fake.generated == 3 * 2 * 3, "joint, hint and solo samples, G per prompt each"
    assert (batch.extras["problem_index"] >= OFFSET).all()
    assert torch.isfinite(batch.rewards).all(), "thinker rows carry the team's outcome"
    loss, stats = CCPO().loss(batch.old_logprobs.clone(), batch, CCPO().advantages(batch))
    assert torch.isfinite(loss) and {"cf_bonus", "solo_reward"} <= set(stats)


def test_a_helpful_hint_is_credited_and_a_harmful_one_blamed() -> None:
    solo = [[0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]]
    joint = [[1.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 1.0]]
    batch, _, method = team_step(solo, joint, train_roles="thinker")
    assert batch.extras["ccpo_bonus"].tolist() == [1, 1, 0, 1, 0, -1, 0, 0]
    scores = method.advantages(batch)[:, 0]
    assert scores[0] > scores[2] and scores[5] < scores[4]


@pytest.mark.parametrize(
    ("field_name", "value"),
    [("credit", "shapley"), ("solo_baseline", "max"), ("bonus_coef", -0.1),
     ("train_roles", "solo"), ("alternate_period", 0), ("start_with", "judge"),
     ("thinker_max_new_tokens", -1), ("ema_decay", 1.0), ("alpha", 0.0), ("eta", -1.0),
     ("min_samples", -1)],
)  # fmt: skip
def test_bad_config_names_the_field(field_name: str, value) -> None:
    with pytest.raises(ValueError, match=rf"^{field_name}: .*\(got {re.escape(repr(value))}\)"):
        CCPOConfig(**{field_name: value})


def test_advantages_are_centred_without_std_by_default() -> None:
    rewards = torch.tensor([1.2, -0.8, 1.0, -1.0])
    mask, groups = torch.ones(4, 2), torch.tensor([0, 0, 1, 1])
    adv = ccpo_advantages(rewards, mask, groups)
    assert adv[:, 0].tolist() == pytest.approx([1.0, -1.0, 1.0, -1.0])
    scaled = ccpo_advantages(rewards, mask, groups, scale_by_std=True)
    assert scaled[0, 0] == pytest.approx(1 / math.sqrt(2), rel=1e-4)


# --------------------------------------------------------------------------------------------
# What the solver is shown of the thought
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("thought", "shown"),
    [
        ("plan: split 7. \\boxed{42}", "plan: split 7."),
        ("plan \\boxed{\\frac{1}{2}} \n", "plan"),  # nested braces (the v3 regex keeps these)
        ("so \\boxed{3} is wrong; redo", "so \\boxed{3} is wrong; redo"),  # not final: kept
        ("x \\boxed{1} y \\boxed{2}", "x \\boxed{1} y"),  # only the final box
        ("no box here  ", "no box here"),
        ("unclosed \\boxed{4", "unclosed \\boxed{4"),
    ],
)
def test_strip_final_boxed(thought: str, shown: str) -> None:
    assert strip_final_boxed(thought) == shown


@dataclass
class BoxingTeamFake(TeamFake):
    """A TeamFake whose thinker ends every thought with its answer in a box, and which keeps
    the solver's prompts."""

    solver_prompts: list[str] = field(default_factory=list)

    def decode(self, batch: RolloutBatch) -> list[str]:
        return [f"{text} so \\boxed{{17}} " for text in super().decode(batch)]

    def variant(self, batch: RolloutBatch, kind: str, hints=None) -> list[str]:
        prompts = super().variant(batch, kind, hints)
        if kind == "solver":
            self.solver_prompts += prompts
        return prompts


def test_the_solver_is_not_shown_the_thinkers_final_box() -> None:
    fake = BoxingTeamFake([[0.0, 1.0]] * 2, [[1.0, 0.0]] * 2)
    batch = CCPO(train_roles="both").rollout(fake)
    assert len(fake.solver_prompts) == 4 and batch.size == 8
    assert all(p.endswith(" so") and "boxed" not in p for p in fake.solver_prompts)
