"""The countdown world inside the harness: its exact values read by the policy's scoring pass,
and the diagnostic of where each mechanism class acts."""

from __future__ import annotations

import math

import pytest
import torch

from creditbench.harness.services.step_plan import StepPlan
from creditbench.harness.tasks.countdown.diagnostics import decision_spans, mechanism_shares
from creditbench.harness.tasks.countdown.values import continuations


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    from creditbench.harness.config import load_config
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, save_policy
    from creditbench.harness.tasks import get_task
    from creditbench.harness.training.trainer import Trainer

    tmp = tmp_path_factory.mktemp("countdown")
    tokenizer = build_char_tokenizer(task_alphabet(get_task("countdown")))
    policy = save_policy(build_model("nano", tokenizer, seed=0), tokenizer, tmp / "nano")
    settings = [
        "task=countdown",
        "task_options.train_size=64",
        "task_options.eval_size=8",
        f"model.path={policy}",
        "rollout.max_new_tokens=80",
        "rollout.prompts_per_step=2",
        "rollout.group_size=4",
    ]
    trainer = Trainer(load_config(None, settings), str(tmp / "run"))
    trainer.build()
    trainer.services.begin_step(StepPlan(0, reference_method=True))
    return trainer.services


def test_a_state_is_worth_the_probability_of_every_solution_through_it(services):
    """V(s_k) of the reference solution's states equals the sum, over the problem's solutions
    through s_k, of the policy's probability of their remaining text then the end of sequence
    or a newline, each read off a teacher-forced score of that solution."""
    index, problem = 0, services.train_problems[0]
    solution = services.task.reference_solution(problem)
    values = services.task_values(services.batch_from_responses([index], [solution]))[0]
    numbers, target = tuple(problem.metadata["numbers"]), int(problem.answer)
    solutions = continuations(numbers, target, 99)
    endings = [s + "\n" for s in solutions]
    scored = services.score(services.batch_from_responses([index] * 2 * len(solutions),
                                                          solutions + endings))  # fmt: skip
    starts = [0] + [i + 1 for i, c in enumerate(solution) if c == "\n"]
    for k, start in enumerate(starts):
        expected = 0.0
        for row, text in enumerate(solutions + endings):
            if text.startswith(solution[:start]):
                width = len(text) + (1 if row < len(solutions) else 0)  # the end of sequence
                expected += math.exp(float(scored[row, start:width].sum()))
        assert float(values[k]) == pytest.approx(expected, rel=1e-4)


def test_a_dead_state_is_worth_nothing_and_every_value_is_a_probability(services):
    batch = services.sample_batch()
    values = services.task_values(batch)
    valid = ~torch.isnan(values)
    assert ((values[valid] >= 0) & (values[valid] <= 1)).all()


def test_the_diagnostic_reads_the_decisions_and_the_tree():
    """Two responses share their first line and part at the second line's first character;
    a third parts at the first character. Token i is character i (a character tokenizer)."""
    texts = ["9-3=6 left 2 6\n6*2=12 left 12\nAnswer: 12", "9-3=6 left 2 6\n6+2=8 left 8"]
    texts.append("9+3=12 left 2 12")
    width = max(map(len, texts))
    ids = torch.full((3, width), 0)
    mask = torch.zeros(3, width)
    for row, text in enumerate(texts):
        ids[row, : len(text)] = torch.tensor([ord(c) for c in text])
        mask[row, : len(text)] = 1.0
    offsets = [[(i, i + 1) for i in range(len(t))] for t in texts]
    entropy = torch.full((3, width), 0.1)
    entropy[:, 0] = 2.0  # the decision characters are the most uncertain: the top 5 of 84
    entropy[:2, 15] = 1.0
    shares = mechanism_shares(
        texts=texts,
        offsets=offsets,
        response_ids=ids,
        response_mask=mask,
        group_ids=torch.tensor([0, 0, 0]),
        entropy=entropy,
        first_wrong_kinds=[None, "dead end", "early stop"],
        rho=0.05,
    )
    assert decision_spans(texts[0]) == [(0, 3), (15, 18)]
    decisions = 3 + 3 + 3 + 3 + 3  # "9-3", "6*2", "9-3", "6+2", "9+3"
    assert shares["decision_tokens"] == pytest.approx(decisions / float(mask.sum()))
    assert shares["groups_parting_at_first_token"] == 0.0  # all three start with "9"
    # the tree branches at "-"/"+" (position 1) for every row and at position 16 for two rows,
    # and where a row ends while another goes on; every branching token here is a decision
    # but the ends
    assert shares["branch_decisions"] > 0.5
    assert shares["entropy_decisions"] == 1.0
    assert shares["failures_at_dead_end"] == 0.5
    assert 0 < shares["shared_prefix"] < 1


def test_the_diagnostic_measures_a_sampled_batch(services):
    from creditbench.harness.tasks.countdown.diagnostics import measure

    shares = measure(services, batches=1)
    for key in ("decision_tokens", "branch_tokens", "entropy_decisions", "shared_prefix"):
        assert 0.0 <= shares[key] <= 1.0, key
