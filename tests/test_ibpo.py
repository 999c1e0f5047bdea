"""IBPO: the Levenshtein edit masks, the credit on edited tokens, the repair rollout, and the
budget charged for every repair pass."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from creditbench.methods.alignment import (
    DEL,
    INS,
    MATCH,
    SUB,
    align,
    edit_distance,
    edit_masks,
)
from creditbench.methods.core import RolloutBatch
from creditbench.methods.grpo import grpo_advantages
from creditbench.methods.ibpo import IBPO, IBPOConfig, _join, ibpo_advantages

from fakes import StepServices
from strategies import VOCAB, build_batch, rollout_batches

tokens = st.lists(st.integers(0, 3), max_size=8)


# --------------------------------------------------------------------------------------------
# Alignment
# --------------------------------------------------------------------------------------------


def textbook_distance(a, b) -> int:
    @functools.cache
    def d(i: int, j: int) -> int:
        if i == 0 or j == 0:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))

    return d(len(a), len(b))


def lcs(a, b) -> int:
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a)):
        for j in range(len(b)):
            table[i + 1][j + 1] = (
                table[i][j] + 1 if a[i] == b[j] else max(table[i][j + 1], table[i + 1][j])
            )
    return table[-1][-1]


@pytest.mark.parametrize(
    "a, b, mask_a, mask_b",
    [
        ("kitten", "sitting", [1, 0, 0, 0, 1, 0], [1, 0, 0, 0, 1, 0, 1]),
        ("abcd", "abcd", [0, 0, 0, 0], [0, 0, 0, 0]),
        ("abcd", "acd", [0, 1, 0, 0], [0, 0, 0]),
        ("acd", "abcd", [0, 0, 0], [0, 1, 0, 0]),
        ("abc", "", [1, 1, 1], []),
        ("", "ab", [], [1, 1]),
        ("abc", "xyz", [1, 1, 1], [1, 1, 1]),
        (
            "so 3+4=8\nAnswer: 8",
            "so 3+4=7\nAnswer: 7",
            [0] * 7 + [1] + [0] * 9 + [1],
            [0] * 7 + [1] + [0] * 9 + [1],
        ),
    ],
)
def test_edit_masks_on_hand_made_pairs(a, b, mask_a, mask_b):
    assert edit_masks(a, b) == (mask_a, mask_b)


def test_truncation_keeps_the_first_edits_in_order():
    # three substitutions, at 0, 2 and 4
    assert edit_masks("abcde", "xbydz", max_edits=1) == ([1, 0, 0, 0, 0], [1, 0, 0, 0, 0])
    assert edit_masks("abcde", "xbydz", max_edits=2) == ([1, 0, 1, 0, 0], [1, 0, 1, 0, 0])
    assert edit_masks("abcde", "xbydz", max_edits=9) == edit_masks("abcde", "xbydz")
    with pytest.raises(ValueError, match="max_edits"):
        edit_masks("a", "b", max_edits=-1)


@given(a=tokens, b=tokens)
def test_alignment_rebuilds_both_sequences_at_minimal_cost(a, b):
    ops = align(a, b)
    assert [i for _, i, _ in ops if i >= 0] == list(range(len(a)))
    assert [j for _, _, j in ops if j >= 0] == list(range(len(b)))
    rebuilt_b = [
        b[j] if kind == INS else (a[i] if kind == MATCH else b[j])
        for kind, i, j in ops
        if kind != DEL
    ]
    assert rebuilt_b == list(b)
    for kind, i, j in ops:
        assert kind in (MATCH, SUB, DEL, INS)
        if kind == MATCH:
            assert a[i] == b[j]
        if kind == SUB:
            assert a[i] != b[j]
    assert edit_distance(a, b) == textbook_distance(tuple(a), tuple(b))


@given(a=tokens, b=tokens)
def test_masks_agree_with_the_alignment_counts(a, b):
    ops = align(a, b)
    count = {kind: sum(k == kind for k, _, _ in ops) for kind in (MATCH, SUB, DEL, INS)}
    mask_a, mask_b = edit_masks(a, b)
    assert sum(mask_a) == count[SUB] + count[DEL]
    assert sum(mask_b) == count[SUB] + count[INS]
    matched = len(a) - sum(mask_a)
    assert matched == len(b) - sum(mask_b) == count[MATCH]
    assert matched <= lcs(a, b)
    assert sum(mask_a) + sum(mask_b) >= textbook_distance(tuple(a), tuple(b))
    assert (sum(mask_a) + sum(mask_b) == 0) == (a == b)
    # unedited tokens, read in order on either side, are the same sequence
    assert [x for x, m in zip(a, mask_a, strict=True) if not m] == [
        y for y, m in zip(b, mask_b, strict=True) if not m
    ]


# Tokens a and b never hold: otherwise "" vs "0" with a common tail "0" has two equally short
# alignments, and which one the tie-break picks moves with the tail.
frame = st.lists(st.integers(4, 5), max_size=4)


@given(a=tokens, b=tokens, head=frame, tail=frame)
def test_a_common_prefix_or_suffix_only_shifts_the_masks(a, b, head, tail):
    mask_a, mask_b = edit_masks(a, b)
    longer = edit_masks(head + a + tail, head + b + tail)
    assert longer == (
        [0] * len(head) + mask_a + [0] * len(tail),
        [0] * len(head) + mask_b + [0] * len(tail),
    )


@given(data=st.data())
def test_pure_substitutions_mark_the_same_positions(data):
    a = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=8))
    b = [data.draw(st.integers(0, 3)) for _ in a]
    differ = [int(x != y) for x, y in zip(a, b, strict=True)]
    assume(sum(differ) == textbook_distance(tuple(a), tuple(b)))
    assert edit_masks(a, b) == (differ, differ)


@given(a=tokens, b=tokens, k=st.integers(1, 4))
def test_truncated_masks_nest_and_count_edit_operations(a, b, k):
    full, first_k, first_2k = edit_masks(a, b), edit_masks(a, b, k), edit_masks(a, b, 2 * k)
    for side in (0, 1):
        assert all(
            x <= y <= z for x, y, z in zip(first_k[side], first_2k[side], full[side], strict=True)
        )
    ops = [op for op in align(a, b) if op[0] != MATCH][:k]
    assert sum(first_k[0]) == sum(op[1] >= 0 for op in ops)
    assert sum(first_k[1]) == sum(op[2] >= 0 for op in ops)


# --------------------------------------------------------------------------------------------
# Credit
# --------------------------------------------------------------------------------------------


def scores_of(batch: RolloutBatch, is_repair: torch.Tensor) -> torch.Tensor:
    """GRPO's Â over the sampled rows (what IBPO.advantages computes), 0 on repairs."""
    grpo = grpo_advantages(
        batch.rewards[~is_repair],
        torch.ones(int((~is_repair).sum()), 1),
        batch.group_ids[~is_repair],
    )[:, 0]
    scores = torch.zeros(batch.size)
    scores[~is_repair] = grpo
    return scores


def repaired(data, *, kind: str = "edit") -> tuple[RolloutBatch, torch.Tensor, torch.Tensor]:
    """A binary-reward batch where some failures with a correct sibling got a repair row.

    ``kind``: ``edit`` (a few random substitutions, insertions, deletions), ``identical`` (the
    failed tokens unchanged) or ``rewrite`` (tokens no failed response holds). Returns the joined
    batch, ``is_repair`` and the failed row of each repair.
    """
    sizes = data.draw(st.lists(st.integers(2, 4), min_size=1, max_size=3))
    lengths = data.draw(st.lists(st.integers(1, 6), min_size=sum(sizes), max_size=sum(sizes)))
    rewards = data.draw(
        st.lists(st.sampled_from([0.0, 1.0]), min_size=sum(sizes), max_size=sum(sizes))
    )
    batch = build_batch(sizes, lengths, rewards, seed=data.draw(st.integers(0, 999)))
    groups = batch.group_ids.tolist()
    candidates = [
        r for r, g in enumerate(groups)
        if rewards[r] == 0 and any(rewards[s] == 1 for s, h in enumerate(groups) if h == g)
    ]  # fmt: skip
    rows = [r for r in candidates if data.draw(st.booleans())]
    fixed_rows = []
    for r in rows:
        seq = batch.response_ids[r, : lengths[r]].tolist()
        if kind == "rewrite":
            seq = [VOCAB + t for t in seq[: data.draw(st.integers(1, len(seq)))]] + [
                VOCAB
            ] * data.draw(st.integers(0, 2))
        elif kind == "edit":
            for _ in range(data.draw(st.integers(1, 3))):
                op, at = (
                    data.draw(st.sampled_from(["sub", "ins", "del"])),
                    data.draw(st.integers(0, len(seq))),
                )
                if op == "ins" or not seq:
                    seq.insert(min(at, len(seq)), data.draw(st.integers(1, VOCAB - 1)))
                elif op == "sub":
                    seq[min(at, len(seq) - 1)] = data.draw(st.integers(1, VOCAB - 1))
                elif len(seq) > 1:
                    del seq[min(at, len(seq) - 1)]
        fixed_rows.append(seq)
    index = torch.tensor(rows, dtype=torch.long)
    fixed = None
    if rows:
        width = max(map(len, fixed_rows))
        ids = torch.full((len(rows), width), 5)
        mask = torch.zeros(len(rows), width)
        for k, seq in enumerate(fixed_rows):
            ids[k, : len(seq)], mask[k, : len(seq)] = torch.tensor(seq), 1.0
        fixed = replace(
            build_batch(
                [len(rows)], [max(1, len(s)) for s in fixed_rows], [1.0] * len(rows), width=width
            ),
            response_ids=ids,
            response_mask=mask,
        )
    joined, is_repair = _join(batch, fixed, index, 0)
    return joined, is_repair, index


def credit(batch, is_repair, **options):
    extras = batch.extras
    return ibpo_advantages(
        scores_of(batch, is_repair),
        batch.response_mask,
        extras["ibpo_edit_mask"],
        extras["ibpo_pair"],
        is_repair,
        **options,
    )


@given(data=st.data())
def test_credit_only_on_edited_tokens_with_the_documented_signs(data):
    batch, is_repair, rows = repaired(data)
    adv, scores = credit(batch, is_repair), scores_of(batch, is_repair)
    edits, mask = batch.extras["ibpo_edit_mask"], batch.response_mask
    paired = batch.extras["ibpo_pair"] >= 0
    assert (adv[paired.unsqueeze(-1) & (edits == 0)] == 0).all(), "credit on an unedited token"
    for k, row in enumerate(rows.tolist()):
        repair = batch.size - len(rows) + k
        assert batch.extras["ibpo_pair"][row] == batch.extras["ibpo_pair"][repair]
        alpha = scores[row].abs()
        assert scores[row] < 0
        torch.testing.assert_close(adv[row][edits[row] > 0], -alpha.expand(int(edits[row].sum())))
        torch.testing.assert_close(
            adv[repair][edits[repair] > 0], alpha.expand(int(edits[repair].sum()))
        )
        assert batch.group_ids[repair] == batch.group_ids[row]
    # every other sampled row keeps GRPO's advantage
    others = ~paired & ~is_repair
    grpo = scores.unsqueeze(-1) * mask
    torch.testing.assert_close(adv[others], grpo[others])
    # the edit masks are those of the alignment of each pair
    for k, row in enumerate(rows.tolist()):
        repair = batch.size - len(rows) + k
        a = batch.response_ids[row][mask[row] > 0].tolist()
        b = batch.response_ids[repair][mask[repair] > 0].tolist()
        mask_a, mask_b = edit_masks(a, b)
        assert edits[row][mask[row] > 0].tolist() == mask_a
        assert edits[repair][mask[repair] > 0].tolist() == mask_b


@given(data=st.data())
def test_an_identical_repair_gives_no_credit(data):
    batch, is_repair, rows = repaired(data, kind="identical")
    adv = credit(batch, is_repair)
    paired = batch.extras["ibpo_pair"] >= 0
    assert (adv[paired] == 0).all()
    assert int(paired.sum()) == 2 * len(rows)


@given(data=st.data())
def test_a_full_rewrite_marks_every_token(data):
    batch, is_repair, rows = repaired(data, kind="rewrite")
    adv, mask = credit(batch, is_repair), batch.response_mask
    paired = (batch.extras["ibpo_pair"] >= 0).unsqueeze(-1)
    assert torch.equal(batch.extras["ibpo_edit_mask"] * paired, mask * paired)
    assert ((adv != 0) == (mask > 0))[paired.squeeze(-1)].all()


@given(data=st.data(), beta=st.floats(0, 1))
def test_beta_blends_with_grpo_and_beta_one_is_grpo(data, beta):
    batch, is_repair, _ = repaired(data)
    scores = scores_of(batch, is_repair)
    grpo = scores.unsqueeze(-1) * batch.response_mask
    one = credit(batch, is_repair, beta=1.0)
    torch.testing.assert_close(one[~is_repair], grpo[~is_repair])
    assert (one[is_repair] == 0).all()
    blended = credit(batch, is_repair, beta=beta)
    torch.testing.assert_close(blended, beta * one + (1 - beta) * credit(batch, is_repair))


@given(batch=rollout_batches())
def test_without_repairs_and_by_default_ibpo_is_grpo(batch):
    expected = grpo_advantages(batch.rewards, batch.response_mask, batch.group_ids)
    torch.testing.assert_close(IBPO().advantages(batch), expected)
    torch.testing.assert_close(IBPO(beta=1.0).advantages(batch), expected)
    zero = IBPO(unrepaired="zero", correct_credit="zero").advantages(batch)
    assert (zero == 0).all()


@given(data=st.data())
def test_magnitude_options(data):
    batch, is_repair, rows = repaired(data)
    edits, mask = batch.extras["ibpo_edit_mask"], batch.response_mask
    unit = credit(batch, is_repair, magnitude="unit")
    spread = credit(batch, is_repair, magnitude="redistribute")
    scores = scores_of(batch, is_repair)
    for k, row in enumerate(rows.tolist()):
        repair = batch.size - len(rows) + k
        assert set(unit[row][edits[row] > 0].tolist()) <= {-1.0}
        assert set(unit[repair][edits[repair] > 0].tolist()) <= {1.0}
        for r, sign in ((row, -1.0), (repair, 1.0)):
            if edits[r].sum() > 0:  # each row's total credit is GRPO's |Â|·|y|
                torch.testing.assert_close(
                    spread[r].sum(), sign * scores[row].abs() * mask[r].sum()
                )
    with pytest.raises(ValueError, match="magnitude"):
        credit(batch, is_repair, magnitude="huge")


@pytest.mark.parametrize(
    "field, value",
    [("operator", "oracle"), ("reference", "best"), ("magnitude", "x"), ("beta", 1.5),
     ("repair_candidates", 0), ("max_edits", -1), ("unrepaired", "drop"), ("correct_credit", 1)],
)  # fmt: skip
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"^{field}: "):
        IBPOConfig(**{field: value})


# --------------------------------------------------------------------------------------------
# The rollout, with toy services
# --------------------------------------------------------------------------------------------

# Problem p is solved by a response whose last token is ANSWER[p]; text = tokens as letters.
ANSWER = {0: 3, 1: 4}
PAD = 0


def toy_batch(rows: list[list[int]], problems: list[int], groups: list[int]) -> RolloutBatch:
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), PAD)
    mask = torch.zeros(len(rows), width)
    for k, row in enumerate(rows):
        ids[k, : len(row)], mask[k, : len(row)] = torch.tensor(row), 1.0
    rewards = [float(row[-1] == ANSWER[p]) for row, p in zip(rows, problems, strict=True)]
    return RolloutBatch(
        prompt_ids=torch.tensor([[7, p + 1] for p in problems]),
        prompt_mask=torch.ones(len(rows), 2),
        response_ids=ids,
        response_mask=mask,
        group_ids=torch.tensor(groups),
        rewards=torch.tensor(rewards),
        old_logprobs=-mask,
        extras={"problem_index": torch.tensor(problems)},
    )


@dataclass
class ToyServices(StepServices):
    """Scripted services: ``candidates[k]`` are the repairs generated for the k-th repair prompt."""

    sampled: RolloutBatch
    candidates: list[list[list[int]]] = field(default_factory=list)
    scripted: list[list[int]] = field(default_factory=list)
    step: int = 0
    seed: int = 0
    calls: list[tuple] = field(default_factory=list)

    def sample_batch(self):
        self.calls.append(("sample_batch",))
        return self.sampled

    def decode(self, batch):
        return [
            "".join(chr(97 + t) for t in batch.response_ids[r][batch.response_mask[r] > 0].tolist())
            for r in range(batch.size)
        ]

    def variant(self, batch, kind, hints=None):
        self.calls.append(("variant", kind, tuple(hints)))
        return [f"{kind} {text}" for text in self.decode(batch)]

    def generate(self, prompts, n=1, prefixes=None, *, problem_index=None, **_):
        self.calls.append(("generate", len(prompts), n, tuple(problem_index.tolist())))
        rows = [c for cands in self.candidates for c in cands]
        problems = [
            p
            for p, cands in zip(problem_index.tolist(), self.candidates, strict=True)
            for _ in cands
        ]
        groups = [k for k, cands in enumerate(self.candidates) for _ in cands]
        return toy_batch(rows, problems, groups)

    def task_repair(self, batch):
        self.calls.append(("task_repair", batch.size))
        return self.scripted[: batch.size]

    def batch_from_responses(self, problem_index, responses):
        self.calls.append(("batch_from_responses", tuple(problem_index.tolist()), len(responses)))
        rows = [list(r) if not isinstance(r, str) else [ord(c) - 97 for c in r] for r in responses]
        return toy_batch(rows, problem_index.tolist(), list(range(len(rows))))


def toy_world() -> ToyServices:
    # group 0 (problem 0): two failures, one success; group 1 (problem 1): all wrong
    sampled = toy_batch(
        [[1, 2, 5], [1, 2, 3], [2, 2, 2, 6], [1, 1], [2, 1]], [0, 0, 0, 1, 1], [0, 0, 0, 1, 1]
    )
    return ToyServices(sampled)


def test_policy_operator_keeps_the_smallest_verified_repair():
    services = toy_world()
    services.candidates = [
        [[1, 2, 5], [9, 9, 9, 3], [1, 2, 3]],  # failed 0: identical (wrong), far, minimal
        [[2, 2, 2, 6], [5, 5]],  # failed 2: nothing correct
    ]
    method = IBPO(repair_candidates=3, reference="most_similar")
    batch = method.rollout(services)
    kinds = [c[0] for c in services.calls]
    assert kinds == ["sample_batch", "variant", "generate", "batch_from_responses"]
    assert services.calls[1] == ("variant", "repair", ("bcd", "bcd"))  # the correct sibling
    assert services.calls[2] == ("generate", 2, 3, (0, 0))
    assert services.calls[3] == ("batch_from_responses", (0,), 1)
    assert batch.size == 6
    assert batch.response_ids[5, :3].tolist() == [1, 2, 3]
    assert batch.extras["ibpo_pair"].tolist() == [0, -1, -1, -1, -1, 0]
    assert batch.group_ids[5] == 0
    assert batch.extras["ibpo_edit_mask"][0].tolist() == [0, 0, 1, 0]
    assert batch.extras["ibpo_edit_mask"][5].tolist() == [0, 0, 1, 0]
    adv = method.advantages(batch)
    grpo = grpo_advantages(
        services.sampled.rewards, services.sampled.response_mask, services.sampled.group_ids
    )
    assert adv[0].tolist() == pytest.approx([0, 0, float(grpo[0, 0]), 0])
    assert adv[5].tolist() == pytest.approx([0, 0, -float(grpo[0, 0]), 0])
    torch.testing.assert_close(adv[1:5], grpo[1:5])
    assert services.stats["repair_attempts"] == 2 and services.stats["repair_rate"] == 0.5


def test_task_operator_and_options_that_skip_or_drop_repairs():
    services = toy_world()
    services.scripted = ["bcd", "ccd"]  # repairs of rows 0 and 2 (letters are tokens)
    batch = IBPO(operator="task").rollout(services)
    assert [c[0] for c in services.calls] == ["sample_batch", "task_repair", "batch_from_responses"]
    assert batch.size == 7 and batch.extras["ibpo_repair"].tolist() == [0] * 5 + [1, 1]

    dropped = IBPO(operator="task", train_repairs=False).rollout(services)
    assert dropped.size == 5
    assert dropped.extras["ibpo_edit_mask"][0].tolist() == [0, 0, 1, 0]
    assert (IBPO().advantages(dropped)[0] != 0).tolist() == [False, False, True, False]

    services.calls.clear()
    plain = IBPO(beta=1.0).rollout(services)
    assert services.calls == [("sample_batch",)] and plain.size == 5


# --------------------------------------------------------------------------------------------
# The harness: every repair pass is charged
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def harness():
    from creditbench.harness.budget import BudgetMeter
    from creditbench.harness.config import RolloutConfig
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model
    from creditbench.harness.services import HarnessServices
    from creditbench.harness.tasks import get_task

    task = get_task("chain", steps=2, train_size=16, eval_size=4)
    tokenizer = build_char_tokenizer(task_alphabet(task))
    policy = build_model("nano", tokenizer, seed=0)

    def make() -> HarnessServices:
        meter = BudgetMeter.for_model(policy)
        rollout = RolloutConfig(prompts_per_step=1, group_size=3, max_new_tokens=8)
        return HarnessServices(
            task=task, policy=policy, tokenizer=tokenizer, meter=meter, rollout=rollout,
            micro_batch_size=8, seed=0,
        )  # fmt: skip

    return task, make


def test_batch_from_responses_grades_and_charges_a_forward_pass(harness):
    task, make = harness
    services = make()
    problem = services.train_problems[0]
    good = task.reference_solution(problem)
    bad = good[:-1] + str((int(good[-1]) + 1) % 10)
    batch = services.batch_from_responses([0, 0], [good, bad])
    assert batch.rewards.tolist() == [1.0, 0.0]
    assert services.decode(batch) == [good, bad]
    tokens = int(batch.prompt_mask.sum() + batch.response_mask.sum())
    assert services.meter.forward_tokens == tokens
    assert services.meter.generated_tokens == 0
    assert services.task_repair(batch.select(torch.tensor([1]))) == [good]
    with pytest.raises(ValueError, match="responses"):
        services.batch_from_responses([0], [good, bad])


@pytest.mark.parametrize("operator", ["task", "policy"])
def test_every_repair_pass_is_charged(harness, operator):
    task, make = harness
    services = make()
    problem = services.train_problems[0]
    good = task.reference_solution(problem)
    bad = good[:-1] + str((int(good[-1]) + 1) % 10)
    sampled = services.batch_from_responses([0, 0, 0], [good, bad, bad])
    sampled = replace(sampled, group_ids=torch.zeros(3, dtype=torch.long))
    before = services.meter.counters()
    services.sample_batch = lambda: sampled
    batch = IBPO(operator=operator, repair_candidates=2).rollout(services)
    meter = services.meter
    if operator == "task":  # two scripted repairs, scored under the plain prompt
        repairs = batch.select(batch.extras["ibpo_repair"] > 0)
        assert repairs.size == 2 and (repairs.rewards == 1).all()
        charged = int(repairs.prompt_mask.sum() + repairs.response_mask.sum())
        assert meter.forward_tokens - before["forward_tokens"] == charged
        assert meter.generated_tokens == before["generated_tokens"]
    else:  # the random policy's repairs fail, yet their generation and scoring are paid for
        assert meter.generated_tokens - before["generated_tokens"] > 0
        assert meter.forward_tokens > before["forward_tokens"]
    assert meter.flops > before["flops"]
