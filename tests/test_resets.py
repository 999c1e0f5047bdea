"""RRPO and SRPO (methods/resets.py, methods/srpo.py): the 1x4 rollout, masking, separate
normalisation, the GRPO fallback, the uniform reset, the localisation parser, the diagnostics,
and the budget.

Most tests drive the methods with :class:`ResetFakeServices`, which generates from prefixes
and records every row it generates; the budget test uses the real harness services with a
randomly initialised model on the chain task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from creditbench.harness.tasks.chain.prompts import parse_step_answer
from creditbench.methods.core import RolloutBatch
from creditbench.methods.grpo import GRPO
from creditbench.methods.registry import get_method
from creditbench.methods.resets import (
    RRPO,
    ResetConfig,
    attempt_role,
    reset_advantages,
    uniform_reset_steps,
)
from creditbench.methods.rollouts import num_steps, prefix_lengths, true_first_wrong
from creditbench.methods.srpo import SRPO, parse_reset_step

from fakes import StepServices

# --------------------------------------------------------------------------------------------
# A fake harness that generates from prefixes
# --------------------------------------------------------------------------------------------


def steps_of(prompt: int) -> int:
    return 2 + prompt % 4


def wrong_step_of(prompt: int) -> int:
    """The fake's true first wrong step (0-based) of a failed response to ``prompt``."""
    return (3 * prompt) % steps_of(prompt)


@dataclass
class ResetFakeServices(StepServices):
    """Responses of ``steps_of(p)`` steps, 1-3 tokens each; token ``10 * (s + 1) + j`` is the
    j-th token of step s, so a prefix tells its steps. ``reward(p, attempt)`` sets each graded
    response's reward (``attempt`` counts the rows generated for problem p so far).
    ``localizer(p)`` writes the localisation answer for problem p. ``rows`` logs every row
    generated: ``(uid, kind, problem, reward, new_tokens)``.
    """

    prompts: int = 3
    step: int = 0
    seed: int = 0
    reward: Any = None
    localizer: Any = None
    rows: list = field(default_factory=list)
    generated_tokens: int = 0
    texts: dict = field(default_factory=dict)

    def step_prompts(self):
        return [f"q{p}" for p in range(self.prompts)], torch.arange(self.prompts)

    def variant(self, batch, kind, hints=None):
        assert kind == "localize"
        return [f"localize {int(p)}" for p in batch.extras["problem_index"]]

    def decode(self, batch):
        return [self.texts.get(int(u), "") for u in batch.extras["uid"]]

    def generate(self, prompts, n=1, prefixes=None, *, problem_index=None, **options):
        gen = torch.Generator().manual_seed(1000 * self.step + len(self.rows) + self.seed)
        rows = []
        for i, prompt in enumerate(prompts):
            for _ in range(n):
                uid = len(self.rows)
                if prompt.startswith("localize"):
                    p = int(prompt.split()[1])
                    self.texts[uid] = self.localizer(p) if self.localizer else "no idea"
                    rows.append(([7], uid, -1, 0))
                    self.rows.append((uid, "localize", p, None, 1))
                    continue
                p = int(problem_index[i])
                prefix = [int(t) for t in prefixes[i]] if prefixes is not None else []
                done = max((t // 10 for t in prefix), default=0)
                new = [
                    10 * (s + 1) + j
                    for s in range(done, steps_of(p))
                    for j in range(1 + int(torch.randint(0, 3, (), generator=gen)))
                ]
                attempt = sum(1 for r in self.rows if r[2] == p and r[1] != "localize")
                reward = (
                    self.reward(p, attempt)
                    if self.reward
                    else float(torch.rand((), generator=gen) < 0.5)
                )
                kind = "continuation" if prefixes is not None else "fresh"
                self.rows.append((uid, kind, p, reward, len(new)))
                rows.append((prefix + new, uid, p, len(prefix)))
        self.generated_tokens += sum(len(r[0]) - r[3] for r in rows)
        width = max(len(r[0]) for r in rows)
        size = len(rows)
        ids = torch.zeros(size, width, dtype=torch.long)
        mask = torch.zeros(size, width)
        for row, (tokens, *_rest) in enumerate(rows):
            ids[row, : len(tokens)] = torch.tensor(tokens)
            mask[row, : len(tokens)] = 1.0
        step_ids = torch.where(mask > 0, ids // 10 - 1, -1)
        problems = torch.tensor([r[2] for r in rows])
        rewards = torch.tensor(
            [self.rows[r[1]][3] if self.rows[r[1]][3] is not None else float("nan") for r in rows]
        )
        truth = torch.tensor([wrong_step_of(int(p)) if p >= 0 else -5 for p in problems])
        failed = (rewards < 1).unsqueeze(-1)
        extras = {
            "uid": torch.tensor([r[1] for r in rows]),
            "first_wrong_mask": (failed & (step_ids == truth.unsqueeze(-1))).float(),
        }
        if problem_index is not None:
            extras["problem_index"] = problems
        if prefixes is not None:
            widths = torch.tensor([r[3] for r in rows]).unsqueeze(-1)
            extras["prefix_mask"] = (torch.arange(width) < widths).float()
        return RolloutBatch(
            prompt_ids=torch.ones(size, 2, dtype=torch.long),
            prompt_mask=torch.ones(size, 2),
            response_ids=ids,
            response_mask=mask,
            group_ids=torch.arange(len(prompts)).repeat_interleave(n),
            rewards=rewards,
            old_logprobs=-0.1 - (ids % 7).float() / 10 * mask,
            step_ids=step_ids,
            extras=extras,
        )


def parents_of(services: ResetFakeServices, max_fresh: int = 12) -> dict[int, int]:
    """The uid of each problem's parent, replaying the paper's rule on the log: the first failed
    fresh attempt among a problem's first ``max_fresh`` (ResetConfig's); a problem whose
    attempts all passed has none, and the fresh draws that top up its group afterwards (the
    fallback to GRPO) are never parents."""
    out: dict[int, int] = {}
    attempts: dict[int, int] = {}
    for uid, kind, p, reward, _ in services.rows:
        if kind != "fresh":
            continue
        attempts[p] = attempts.get(p, 0) + 1
        if p not in out and reward < 1 and attempts[p] <= max_fresh:
            out[p] = uid
    return out


def roll(method, services) -> RolloutBatch:
    batch = method.rollout(services)
    assert batch.group_ids.shape == (batch.size,)
    return batch


seeds = st.integers(0, 10_000)

# --------------------------------------------------------------------------------------------
# The rollout
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["rrpo", "srpo"])
@given(seed=seeds, prompts=st.integers(1, 4))
@example(seed=1648, prompts=4)  # a problem passed all 12 fresh attempts, then fell back to GRPO
def test_only_continuation_tokens_carry_loss_and_parent_is_not_trained(name, seed, prompts):
    fake = ResetFakeServices(prompts=prompts, seed=seed, localizer=lambda p: f"Step: {1 + p % 3}")
    method = get_method(name)()
    batch = roll(method, fake)
    uids = set(batch.extras["uid"].tolist())
    parents = parents_of(fake)
    assert not uids & set(parents.values()), "a parent is in the trained batch"
    by_uid = {r[0]: r for r in fake.rows}
    prefix = batch.extras["prefix_mask"]
    full = (batch.response_ids > 0).float()  # every real token of the fake is > 0
    for row, uid in enumerate(batch.extras["uid"].tolist()):
        kind, p = by_uid[uid][1], by_uid[uid][2]
        in_g2 = int(batch.group_ids[row]) % 2 == 1
        assert in_g2 == (kind == "continuation")
        # trained tokens are exactly the response's own new tokens
        assert torch.equal(batch.response_mask[row], full[row] * (1 - prefix[row]))
        assert int(batch.response_mask[row].sum()) == by_uid[uid][4]
        if in_g2:  # continuations regenerate at least the reset step
            assert by_uid[uid][4] > 0 and p in parents
    adv = method.advantages(batch, fake)
    assert (adv[prefix > 0] == 0).all()
    logprobs = batch.old_logprobs.clone().requires_grad_(True)
    loss, _ = method.loss(logprobs, batch, adv)
    (grad,) = torch.autograd.grad(loss, logprobs)
    assert (grad[prefix > 0] == 0).all(), "the prefix gets gradient"


@given(seed=seeds)
def test_g2_continues_the_parents_prefix_at_a_step_boundary(seed):
    fake = ResetFakeServices(prompts=3, seed=seed)
    fake_parents: dict[int, torch.Tensor] = {}
    original = fake.generate

    def spy(prompts, n=1, prefixes=None, **options):
        out = original(prompts, n, prefixes, **options)
        for row, uid in enumerate(out.extras["uid"].tolist()):
            fake_parents[uid] = out.response_ids[row, : int(out.response_mask[row].sum())]
        return out

    fake.generate = spy  # type: ignore[method-assign]
    batch = roll(RRPO(), fake)
    parents = parents_of(fake)
    for row in torch.nonzero(batch.group_ids % 2 == 1).flatten().tolist():
        p = int(batch.extras["problem_index"][row])
        width = int(batch.extras["prefix_mask"][row].sum())
        parent = fake_parents[parents[p]]
        assert torch.equal(batch.response_ids[row, :width], parent[:width])
        # a step boundary: the prefix ends where a step of the parent ends
        assert width == 0 or width == len(parent) or parent[width] // 10 != parent[width - 1] // 10


def test_g1_is_the_first_base_size_non_parent_attempts_and_surplus_is_discarded():
    # problem 0 succeeds 6 times then fails: attempts 0-3 fill G1, 4-5 are surplus, 6 is the parent
    fake = ResetFakeServices(prompts=1, reward=lambda p, a: 1.0 if a < 6 else 0.0)
    batch = roll(RRPO(), fake)
    fresh = [r[0] for r in fake.rows if r[1] == "fresh"]
    assert len(fresh) == 7
    g1 = batch.extras["uid"][batch.group_ids % 2 == 0].tolist()
    assert sorted(g1) == fresh[:4]
    assert parents_of(fake) == {0: fresh[6]}
    assert (batch.group_ids % 2 == 1).sum() == 4
    assert RRPO().config.max_fresh == 12


def test_roles_follow_the_paper_order():
    assert attempt_role(False, True, False, False) == "parent"
    assert attempt_role(False, True, True, False) == "base"
    assert attempt_role(True, True, False, False) == "base"
    assert attempt_role(True, True, False, True) == "discard"
    assert attempt_role(False, False, False, False) == "base"  # no step: cannot be a parent


# --------------------------------------------------------------------------------------------
# Advantages, loss, fallback
# --------------------------------------------------------------------------------------------


@given(seed=seeds, prompts=st.integers(1, 4))
def test_g1_and_g2_are_normalised_separately_and_each_sums_to_zero(seed, prompts):
    fake = ResetFakeServices(prompts=prompts, seed=seed)
    method = RRPO()
    batch = roll(method, fake)
    adv = method.advantages(batch, fake)
    per_row = (adv * batch.response_mask).sum(-1) / batch.response_mask.sum(-1).clamp(min=1)
    for g in batch.group_ids.unique():
        rows = batch.group_ids == g
        r = batch.rewards[rows]
        assert abs(float(per_row[rows].sum())) < 1e-5
        if r.std(unbiased=False) > 0:
            expected = (r - r.mean()) / r.std(unbiased=False)
            torch.testing.assert_close(per_row[rows], expected)
        else:
            assert (per_row[rows] == 0).all()
    # changing G2's rewards leaves G1's advantages alone
    g2 = batch.group_ids % 2 == 1
    if g2.any():
        flipped = RolloutBatch(
            **{**vars(batch), "rewards": torch.where(g2, 1 - batch.rewards, batch.rewards)}
        )
        assert torch.equal(method.advantages(flipped)[~g2], adv[~g2])


@given(
    rewards=st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=1, max_size=8),
    scale=st.floats(0.5, 4.0),
    shift=st.floats(-2.0, 2.0),
)
def test_advantages_are_affine_invariant_and_zero_without_variance(rewards, scale, shift):
    r = torch.tensor(rewards)
    ids, mask = torch.zeros(len(rewards), dtype=torch.long), torch.ones(len(rewards), 3)
    a = reset_advantages(r, ids, mask)
    torch.testing.assert_close(reset_advantages(scale * r + shift, ids, mask), a, atol=1e-4, rtol=0)
    if len(set(rewards)) == 1:
        assert (a == 0).all()


def test_fallback_equals_grpo_exactly():
    # every response correct (rewards 1 or 2, so the group still varies): no parent anywhere
    fake = ResetFakeServices(prompts=2, reward=lambda p, a: 1.0 + (a * (p + 1)) % 3 % 2)
    method = RRPO(loss_mode="clip")
    batch = roll(method, fake)
    assert all(r[1] == "fresh" for r in fake.rows)
    assert batch.size == 2 * 8 and len(batch.group_ids.unique()) == 2
    assert (batch.extras["prefix_mask"] == 0).all()
    grpo = GRPO(std_kind="population", std_eps=0.0, dual_clip=3.0)
    adv = method.advantages(batch)
    assert torch.equal(adv, grpo.advantages(batch))
    logprobs = batch.old_logprobs + 0.05
    assert torch.equal(method.loss(logprobs, batch, adv)[0], grpo.loss(logprobs, batch, adv)[0])
    assert fake.stats["reset_fallback_frac"] == 1.0
    # 5 in the first round, 7 more one at a time, 4 to top up
    assert fake.stats["fresh_per_prompt"] == 16


def test_reinforce_loss_is_the_papers_seq_mean_token_mean():
    fake = ResetFakeServices(prompts=2, seed=3)
    method = SRPO()
    batch = roll(method, fake)
    adv = method.advantages(batch)
    logprobs = batch.old_logprobs - 0.3  # off-policy: the REINFORCE loss ignores the ratio
    loss, stats = method.loss(logprobs, batch, adv)
    m = batch.response_mask
    per_seq = (logprobs * m).sum(-1) / m.sum(-1)
    a = (adv * m).sum(-1) / m.sum(-1)
    torch.testing.assert_close(loss, -(a * per_seq).mean())
    assert "reset_fallback_frac" in fake.stats and "reset_fallback_frac" not in stats


@pytest.mark.parametrize(
    "options, field",
    [
        ({"loss_mode": "ppo"}, "loss_mode"),
        ({"base_size": 0}, "base_size"),
        ({"max_fresh": 4}, "max_fresh"),
        ({"steps": "sentence"}, "steps"),
        ({"kl_coef": 0.1}, "kl_coef"),
        ({"localize_temperature": -1.0}, "localize_temperature"),
    ],
)
def test_bad_config_names_the_field(options, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        ResetConfig(**options)


# --------------------------------------------------------------------------------------------
# Reset choice
# --------------------------------------------------------------------------------------------


def test_rrpo_reset_index_is_uniform_chi_square():
    gen = torch.Generator().manual_seed(1234)
    n = 5
    k = uniform_reset_steps(torch.full((20_000,), n), gen)
    counts = torch.bincount(k, minlength=n + 1)
    assert counts[0] == 0 and int(k.max()) == n
    expected = 20_000 / n
    chi2 = float(((counts[1:] - expected) ** 2 / expected).sum())
    assert chi2 < 18.47  # df 4, p = 0.001


def test_rrpo_resets_through_the_method_are_uniform():
    # every attempt fails: problem 0's parent has 2 steps, problem 2's has 4
    fake = ResetFakeServices(prompts=3, reward=lambda p, a: 0.0)
    counts = {0: torch.zeros(2), 2: torch.zeros(4)}
    method = RRPO()
    for step in range(150):
        fake.step, fake.rows, fake.texts = step, [], {}
        batch = roll(method, fake)
        for p in counts:
            row = torch.nonzero(batch.group_ids == 2 * p + 1).flatten()[0]
            prefix = batch.response_ids[row][batch.extras["prefix_mask"][row] > 0]
            k = 1 + (int(prefix.max()) // 10 if prefix.numel() else 0)
            counts[p][k - 1] += 1
    for c in counts.values():
        expected = 150 / len(c)
        chi2 = float(((c - expected) ** 2 / expected).sum())
        assert chi2 < {2: 10.83, 4: 16.27}[len(c)]  # p = 0.001


@given(step_lengths=st.lists(st.integers(0, 3), min_size=1, max_size=6), data=st.data())
def test_prefix_ends_where_step_k_starts(step_lengths, data):
    row: list[int] = []
    for s, length in enumerate(step_lengths):  # a -1 after each step, as the testbed's newlines
        row += [s] * length + [-1]
    step_ids = torch.tensor([row + [-1]])
    n = int(num_steps(step_ids))
    assert n == max((s + 1 for s, length in enumerate(step_lengths) if length), default=0)
    if n == 0:
        return
    k = data.draw(st.integers(1, n))
    cut = int(prefix_lengths(step_ids, torch.tensor([k])))
    kept = step_ids[0, :cut]
    assert (kept < k - 1).all()
    assert cut == 0 if k == 1 else int(step_ids[0, cut]) == k - 1 or step_lengths[k - 2 + 1] == 0


@pytest.mark.parametrize(
    "text, n, expected",
    [
        ("so the first error is \\boxed{3}", 5, 3),
        ("\\boxed{0}", 5, 1),
        ("\\boxed{9}", 5, None),
        ("\\boxed{9} but really step 2", 5, 2),
        ("the first error is in Step 2", 5, 2),
        ("Step: 4", 5, 4),
        ("Step:4", 5, 4),
        ("step 1 looks fine, Step 3 is wrong", 5, 3),
        ("\\boxed{2} then \\boxed{4}", 5, 4),
        ("\\boxed{\\text{2}}", 5, None),
        ("\\boxed{2", 5, None),
        ("\\boxed{\u00b2}", 5, None),
        ("\\boxed{ 3 }", 5, 3),
        ("Step: 0", 5, None),
        ("Step: 6", 5, None),
        ("", 3, None),
        ("garbage !!", 3, None),
        ("Step: 99999999999", 3, None),
    ],
)
def test_localisation_parser(text, n, expected):
    assert parse_reset_step(text, n) == expected


@given(k=st.integers(1, 30), extra=st.integers(0, 5))
def test_parser_agrees_with_the_task_on_its_answer_format(k, extra):
    answer = f"Step: {k}"
    assert parse_reset_step(answer, k + extra) == parse_step_answer(answer)


@given(text=st.text(max_size=40), n=st.integers(1, 9))
def test_parser_never_raises_and_stays_in_range(text, n):
    k = parse_reset_step(text, n)
    assert k is None or 1 <= k <= n


def test_true_first_wrong_step():
    step_ids = torch.tensor([[0, -1, 1, 1, -1, 2], [0, 0, -1, 1, -1, -1], [0, 1, 1, -1, -1, -1]])
    first = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0]]).float()
    assert true_first_wrong(step_ids, first).tolist() == [1, 2, -1]


def test_srpo_diagnostic_counts_localisation_hits():
    always_fail = lambda p, a: 0.0  # noqa: E731
    right = ResetFakeServices(
        prompts=4, reward=always_fail, localizer=lambda p: f"Step: {wrong_step_of(p) + 1}"
    )
    method = SRPO()
    roll(method, right)
    stats = right.stats
    assert stats["reset_hits_first_wrong"] == 1.0 and stats["localize_parsed_frac"] == 1.0
    assert stats["reset_clean_frac"] == 1.0
    garbage = ResetFakeServices(prompts=4, reward=always_fail, localizer=lambda p: "hmm")
    roll(method, garbage)  # every answer unparsed: reset at step 1
    truth = [wrong_step_of(p) for p in range(4)]
    assert garbage.stats["reset_hits_first_wrong"] == sum(t == 0 for t in truth) / 4
    assert garbage.stats["localize_parsed_frac"] == 0.0
    assert garbage.stats["reset_position"] == 0.0
    assert sum(r[1] == "localize" for r in garbage.rows) == 4


def test_rrpo_hit_rate_is_about_one_over_the_number_of_steps():
    fake = ResetFakeServices(prompts=4, reward=lambda p, a: 0.0)
    method = RRPO()
    hits = []
    for step in range(100):
        fake.step, fake.rows = step, []
        roll(method, fake)
        hits.append(fake.stats["reset_hits_first_wrong"])
        assert not any(r[1] == "localize" for r in fake.rows)
    expected = sum(1 / steps_of(p) for p in range(4)) / 4
    assert abs(sum(hits) / len(hits) - expected) < 0.08


# --------------------------------------------------------------------------------------------
# The real harness: every generated token is charged
# --------------------------------------------------------------------------------------------


class GradeCounter:
    """The chain task, but each problem's first ``wins`` responses are graded correct."""

    def __init__(self, task, wins: int) -> None:
        self.task, self.wins, self.seen = task, wins, {}

    def __getattr__(self, name):
        return getattr(self.task, name)

    def grade(self, problem, text):
        from creditbench.harness.tasks.base import Grade

        self.seen[problem.id] = self.seen.get(problem.id, 0) + 1
        return Grade(1.0 if self.seen[problem.id] <= self.wins else 0.0, "counted")


@pytest.fixture(scope="module")
def nano():
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model
    from creditbench.harness.tasks import get_task

    task = get_task("chain", steps=2, train_size=16, eval_size=4)
    tokenizer = build_char_tokenizer(task_alphabet(task))
    return task, build_model("nano", tokenizer, seed=0).eval(), tokenizer


def harness_services(nano, wins: int):
    from creditbench.harness.budget import BudgetMeter
    from creditbench.harness.config import RolloutConfig
    from creditbench.harness.services import HarnessServices

    task, model, tokenizer = nano
    return HarnessServices(
        task=GradeCounter(task, wins),
        policy=model,
        tokenizer=tokenizer,
        meter=BudgetMeter.for_model(model),
        rollout=RolloutConfig(prompts_per_step=2, group_size=8, max_new_tokens=10),
        micro_batch_size=64,
        seed=0,
    )


@pytest.mark.parametrize("name", ["rrpo", "srpo"])
def test_budget_charges_every_generated_token(nano, name):
    # 6 wins per problem: round one (5) all correct, attempt 6 surplus, attempt 7 the parent
    from creditbench.harness.sampling.rollout import sequence_lengths

    services = harness_services(nano, wins=6)
    calls = []
    original = services.generate

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        prefix = (out.extras or {}).get("prefix_mask", torch.zeros_like(out.response_mask))
        new = int((out.response_mask.sum(-1) - prefix.sum(-1)).sum())
        tok = services.tokenizer
        length = sequence_lengths(out.response_ids, tok.eos_token_id, tok.pad_token_id)
        context = int(out.prompt_mask.sum() + length.sum())
        calls.append((out.size, new, context))
        return out

    services.generate = spy
    method = get_method(name)()
    batch = method.rollout(services)
    rows = sum(c[0] for c in calls)
    # per prompt: 7 fresh attempts, 4 continuations, and one localisation call for SRPO
    assert rows == 2 * (7 + 4 + (name == "srpo"))
    assert services.meter.generated_tokens == sum(c[1] for c in calls)
    # every generated row was scored once, the parent, the surplus and the localisation too
    assert services.meter.forward_tokens == sum(c[2] for c in calls)
    assert batch.size == 2 * 8
    assert int(batch.response_mask.sum()) < sum(c[1] for c in calls)
    assert services.stats["fresh_per_prompt"] == 7


def test_delimited_step_ids_cut_after_each_delimiter(nano):
    from creditbench.harness.sampling.rollout import pad_layout

    services = harness_services(nano, wins=0)
    tokenizer = services.tokenizer
    texts = ["ab\n\ncd\n\ne", "abc", "a\n\n"]
    tokens = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    tokens[1] = tokens[1] + [tokenizer.eos_token_id]
    _, _, ids, mask = pad_layout([[1]] * 3, tokens, tokenizer.pad_token_id)
    batch = RolloutBatch(ids, mask, ids, mask, torch.arange(3), torch.zeros(3), mask * 0)
    out = services.delimited_step_ids(batch, "\n\n").tolist()
    assert out[0] == [0, 0, 0, 0, 1, 1, 1, 1, 2]
    assert out[1][:4] == [0, 0, 0, -1]
    assert out[2][:3] == [0, 0, 0] and set(out[2][3:]) == {-1}
