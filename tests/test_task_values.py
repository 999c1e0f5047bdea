"""The testbed's own state values (the oracle's ``analytic`` estimator): the task's probes, their
scoring by the policy, and ``creditbench values``, which checks them against Monte Carlo."""

from __future__ import annotations

import math
import random

import pytest
import torch

from creditbench.harness.services.step_plan import StepPlan
from creditbench.harness.tasks.chain import ChainConfig, ChainTask
from creditbench.harness.tasks.chain.grammar import parse_step
from creditbench.tools.cli.main import main
from creditbench.tools.value_check import summarize

TASK = ChainTask()
# One filler and no split form: the continuation of a state is then spelled out in the tests
# below; the default task's continuation (fillers and forms drawn per problem) has its own.
PLAIN = ChainTask(ChainConfig(fillers=("so",), split_rate=0.0))


def probes(ops, prefix_lines=(), start=21, task=PLAIN):
    problem = task.make_problem("p", start, ops)
    prefix = "".join(line + "\n" for line in prefix_lines)
    return problem, task.value_probes(problem, prefix)


def scored(found, line):
    """The text each rendering of ``line`` covers (the end of sequence as ``$``)."""
    out = []
    for r in found.lines[line]:
        text = found.texts[r.text]
        out.append(text[r.start : r.end] + ("$" if r.end > len(text) else ""))
    return out


# --- the task's probes (no model) -------------------------------------------------------------


def test_a_right_state_scores_every_remaining_line_and_both_forms_of_a_product():
    problem, found = probes([("+", 5), ("*", 7), ("-", 4)])  # 21 -> 26 -> 82 -> 78
    assert found.texts[0] == "so 21+5=26\nso 26*7=82\nso 82-4=78\nAnswer: 78"
    assert TASK.grade(problem, found.texts[0]).reward == 1.0
    assert [scored(found, j) for j in range(4)] == [
        ["21+5=26\n"],
        ["26*7=82\n", "26*(3+4)=78+4=82\n"],  # the filler is not scored: any filler is right
        ["82-4=78\n"],
        ["Answer: 78$"],
    ]
    # the other form is a text cut after it, continuing the same lines
    assert found.texts[1] == "so 21+5=26\nso 26*(3+4)=78+4=82\n"
    assert all(not free for free in found.free)  # no cancelling operation: every digit counts


def test_a_problems_states_continue_as_one_typical_trace_whatever_reached_them():
    """The continuation is drawn per problem as the SFT traces are drawn (a filler of the
    task's, the split form at its split rate), never read off the response: every state of a
    problem, however reached, continues in the same lines, and over many problems the fillers
    and forms have the traces' frequencies (an all-"so" continuation is a text the policy
    never saw, and it scored the later lines of the easy base up to ten times too low)."""
    ops = [("+", 5), ("*", 7), ("-", 4), ("*", 6)]
    _, after_then = probes(ops, ["then 21+5=26"], task=TASK)
    _, after_now = probes(ops, ["now 21+5=26"], task=TASK)
    _, start = probes(ops, task=TASK)
    tails = [found.texts[0].split("\n", 1)[1] for found in (after_then, after_now, start)]
    assert tails[0] == tails[1] == tails[2]
    assert len(after_then.lines) == 4  # the state's own line is not a remaining line

    fillers, splits = [], []
    for n in range(200):
        _, found = probes([("+", n % 50), ("*", 7), ("*", 6)], start=n, task=TASK)
        lines = found.texts[0].split("\n")[:3]
        fillers += [line.split(" ", 1)[0] for line in lines]
        splits += ["(" in line for line in lines[1:]]
    for filler in TASK.config.fillers:  # 600 lines, a quarter each: within 0.08 of 0.25
        assert abs(fillers.count(filler) / len(fillers) - 0.25) < 0.08
    assert abs(sum(splits) / len(splits) - TASK.config.split_rate) < 0.08


def test_a_later_last_digit_frees_the_tens_digits_before_it():
    _, found = probes([("+", 25), ("-", 3), ("%", 10), ("+", 4)])  # 21 46 43 3 7
    text = found.texts[0]
    assert text == "so 21+25=46\nso 46-3=43\nso 43%10=3\nso 3+4=7\nAnswer: 7"
    tens = [i for i in range(len(text) - 1) if text[i : i + 2] in ("21", "46", "43")]
    # the tens digits of 21, 46 (twice) and 43 (twice), up to the %10; 3 and 7 are units
    assert sorted(found.free[0]) == tens and len(tens) == 5


def test_a_later_times_zero_leaves_the_lines_before_it_unscored():
    _, found = probes([("+", 5), ("-", 9), ("*", 0), ("+", 3)])
    assert found.texts[0] == "so 21+5=26\nso 26-9=17\nso 17*0=0\nso 0+3=3\nAnswer: 3"
    assert [scored(found, j) for j in range(len(found.lines))] == [
        ["17*0=0\n"],
        ["0+3=3\n"],
        ["Answer: 3$"],
    ]
    start = found.texts[0].index("17*0")
    assert found.free[0] == {start, start + 1}  # times 0 of anything: its carried value is free


def test_a_wrong_state_is_worth_nothing_unless_a_later_operation_cancels_it():
    _, wrong = probes([("+", 5), ("-", 9), ("+", 3)], ["so 21+5=36"])
    assert wrong is None  # the slip reaches the answer
    _, cancelled = probes([("+", 5), ("-", 9), ("%", 10)], ["so 21+5=36"])  # 26 or 36: 7 left
    assert cancelled is not None
    assert cancelled.texts[0] == "so 21+5=36\nso 36-9=27\nso 27%10=7\nAnswer: 7"
    _, malformed = probes([("+", 5), ("*", 0)], ["so 21+5 is 26"])
    assert malformed is None  # no value to go on from


def test_a_state_holds_whole_lines_only():
    problem = PLAIN.make_problem("p", 21, [("+", 5)])
    with pytest.raises(ValueError, match="^prefix:"):
        PLAIN.value_probes(problem, "so 21+5=26\nAnswer: 26")


# --- scored by the policy ---------------------------------------------------------------------


def _services(tmp, *options):
    from creditbench.harness.config import load_config
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, save_policy
    from creditbench.harness.tasks import get_task
    from creditbench.harness.training.trainer import Trainer

    tokenizer = build_char_tokenizer(task_alphabet(get_task("chain", steps=2)))
    policy = save_policy(build_model("nano", tokenizer, seed=0), tokenizer, tmp / "nano")
    settings = ["task=chain", "task_options.steps=2", f"model.path={policy}", *options]
    trainer = Trainer(load_config(None, settings), str(tmp / "run"))
    trainer.build()
    trainer.services.begin_step(StepPlan(0, reference_method=True))
    return trainer.services


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    return _services(tmp_path_factory.mktemp("values"))


@pytest.fixture(scope="module")
def plain_services(tmp_path_factory):
    """One filler, no split form: a state's continuation is the reference solution's lines."""
    options = ['task_options.fillers=["so"]', "task_options.split_rate=0.0"]
    return _services(tmp_path_factory.mktemp("plain"), *options)


def test_a_state_is_worth_the_policys_probability_of_its_right_lines(plain_services):
    """On a problem of additions and subtractions alone, V(s_k) is the product of the policy's
    probabilities of the remaining lines after their fillers, and of the answer and the end of
    sequence, read off one teacher-forced score of the right solution."""
    index, problem = next(
        (i, p)
        for i, p in enumerate(plain_services.train_problems)
        if all(op[0] in "+-" for op in p.metadata["ops"])
    )
    solution = plain_services.task.reference_solution(problem)
    batch = plain_services.batch_from_responses([index], [solution])
    values = plain_services.task_values(batch)
    logprobs = plain_services.score(batch)[0]  # one token per character, then the end of sequence
    lines = solution.split("\n")
    spans, at = [], 0
    for line in lines[:-1]:
        body = len(parse_step(line).filler)  # the filler is not scored
        spans.append((at + body, at + len(line) + 1))  # the line and its newline
        at += len(line) + 1
    spans.append((at, len(solution) + 1))  # the answer line and the end of sequence
    expected = [
        math.exp(sum(float(logprobs[s:e].sum()) for s, e in spans[k:])) for k in range(len(spans))
    ]
    torch.testing.assert_close(values[0, : len(spans)], torch.tensor(expected), rtol=1e-4, atol=0)
    assert plain_services.stats["value_texts"] == 1.0  # every state continues the same text


def test_every_state_of_a_sampled_batch_gets_a_probability(services):
    from creditbench.methods.values import state_starts

    batch = services.sample_batch()
    values = services.task_values(batch)
    _, valid = state_starts(batch.step_ids)
    assert torch.isnan(values[~valid]).all()
    assert ((values[valid] >= 0) & (values[valid] <= 1)).all()


def test_a_state_has_one_value_whichever_response_reached_it(services):
    """Two responses share their first line and differ in the second line's filler: the
    shared state's value is the same in both (the continuation does not read the response's
    later lines, the action the state's credit judges)."""
    index, problem = 0, services.train_problems[0]
    solution = services.task.reference_solution(problem)
    first, rest = solution.split("\n", 1)
    filler = parse_step(rest.split("\n", 1)[0]).filler.strip()
    other = next(f for f in TASK.config.fillers if f != filler)
    responses = [solution, first + "\n" + rest.replace(filler, other, 1)]
    values = [  # s_1: the prompt and the first line, each response in a batch of its own
        float(services.task_values(services.batch_from_responses([index], [r]))[0, 1])
        for r in responses
    ]
    # (the untrained policy's values are tiny: compared relatively; rows of other lengths are
    # padded differently, which moves the last digits)
    assert values[0] == pytest.approx(values[1], rel=1e-4)


# --- the check against Monte Carlo ------------------------------------------------------------


def simulated(rng, truth, analytic, samples=64, **extra):
    """Records of states whose true values are ``truth``, valued ``analytic``, each with a
    Monte-Carlo value of ``samples`` draws."""
    out = []
    for p, a in zip(truth, analytic, strict=True):
        mc = sum(rng.random() < p for _ in range(samples)) / samples
        out.append({"analytic": a, "mc": mc, "samples": samples, **extra})
    return out


def test_the_summary_separates_monte_carlo_noise_from_the_estimators_error():
    rng = random.Random(0)
    truth = [rng.random() for _ in range(400)]

    def records(analytic):
        return simulated(rng, truth, analytic)

    exact = summarize(records(truth))
    assert abs(exact["mae"] - exact["noise_mae"]) < 0.01  # all of it is noise
    assert exact["rmse_corrected"] < 0.02 and exact["bias_lo"] < 0 < exact["bias_hi"]
    off = summarize(records([min(p + 0.1, 1.0) for p in truth]))
    assert off["bias_lo"] > 0.05 and off["rmse_corrected"] > 0.07


def test_the_quantiles_tell_a_tail_of_noise_from_a_tail_of_error():
    """Exact values leave quantiles of |analytic - mc| that the noise-alone ones match; a few
    states off by 0.5 put the 99% quantile and the maximum far above theirs."""
    rng = random.Random(1)
    truth = [rng.random() for _ in range(500)]

    def records(analytic):
        return [
            r | {"analytic_own": r["analytic"]} for r in simulated(rng, truth, analytic, credit=0.2)
        ]

    exact = summarize(records(truth))
    for q in ("p50", "p90", "p99"):
        assert abs(exact[f"abs_{q}"] - exact[f"noise_{q}"]) < 0.02
    assert exact["action_max"] == 0.0 and exact["credit_mean"] == pytest.approx(0.2)
    tail = [p if i % 25 else (p + 0.5) % 1.0 for i, p in enumerate(truth)]  # 4% far off
    off = summarize(records(tail))
    assert off["abs_p50"] < 0.06 and off["abs_p99"] > off["noise_p99"] + 0.2
    assert off["abs_max"] > 0.4


def test_the_command_values_the_policy_of_a_checkpoint(tmp_path, capsys):
    """``--checkpoint`` loads the saved weights: the states of the shipped base policy of the
    default task have values a random model of the same shape does not give them; a folder
    without weights is refused."""
    import csv

    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, save_policy
    from creditbench.harness.tasks import get_task

    tokenizer = build_char_tokenizer(task_alphabet(get_task("chain")))
    random_policy = save_policy(build_model("tiny", tokenizer, seed=1), tokenizer, tmp_path / "r")
    settings = ["rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=160"]
    argv = ["values", "--batches", "1", "--states", "4", "--samples", "2"]
    argv += [f"--set={s}" for s in settings]
    start, later = tmp_path / "start.csv", tmp_path / "later.csv"
    assert main([*argv, "--out", str(start)]) == 0
    assert main([*argv, "--out", str(later), "--checkpoint", str(random_policy)]) == 0
    assert f"checkpoint {random_policy}" in capsys.readouterr().out
    values = [[float(r["analytic"]) for r in csv.DictReader(f.open())] for f in (start, later)]
    assert max(values[0]) > 0.05 and max(values[1]) < 1e-3
    assert main([*argv, "--checkpoint", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--checkpoint" in err and "model.safetensors" in err


def test_the_command_refuses_a_single_continuation(capsys):
    assert main(["values", "--samples", "1"]) == 2
    assert "--samples" in capsys.readouterr().err


def test_the_command_writes_one_row_per_compared_state(tmp_path, capsys):
    import csv

    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, save_policy
    from creditbench.harness.tasks import get_task

    tokenizer = build_char_tokenizer(task_alphabet(get_task("chain", steps=2)))
    policy = save_policy(build_model("nano", tokenizer, seed=0), tokenizer, tmp_path / "nano")
    out = tmp_path / "values.csv"
    settings = ["task=chain", "task_options.steps=2", f"model.path={policy}"]
    settings += ["rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=12"]
    argv = ["values", "--batches", "1", "--states", "3", "--samples", "2", "--out", str(out)]
    assert main([*argv, *(f"--set={s}" for s in settings)]) == 0
    rows = list(csv.DictReader(out.open()))
    # at most 3 states; at least the empty response of each of the 2 prompts, each once
    assert 2 <= len(rows) <= 3 and {row["samples"] for row in rows} == {"2"}
    assert len({(row["problem"], row["state"]) for row in rows}) == len(rows)
    for row in rows:
        assert 0.0 <= float(row["analytic"]) <= 1.0 and float(row["mc"]) in (0.0, 0.5, 1.0)
    assert f"{len(rows)} states of 1 batches" in capsys.readouterr().out
    # the same check again, its Monte Carlo taken from the first: the same states and values
    again = tmp_path / "again.csv"
    argv_again = [*argv[:-2], "--out", str(again), "--mc-from", str(out)]
    assert main([*argv_again, *(f"--set={s}" for s in settings)]) == 0
    assert list(csv.DictReader(again.open())) == rows
    other = [*settings, "seed=7"]  # other prompts, other states: refused, named
    assert main([*argv_again, *(f"--set={s}" for s in other)]) == 2
    assert "--mc-from" in capsys.readouterr().err


def test_earlier_records_join_their_states_values_and_the_summary_measures_the_move(tmp_path):
    """The same states valued before the estimator's continuation changed are joined in
    order, each checked to be the same state; the summary gives how far the values moved."""
    from creditbench.tools.value_check import read_records, with_earlier

    header = "batch,problem,state,right_so_far,analytic,credit,mc,samples\n"
    now, before, other = tmp_path / "now.csv", tmp_path / "before.csv", tmp_path / "other.csv"
    now.write_text(header + "0,3,1,1,0.40,0.1,0.375,64\n0,3,1,0,0.20,-0.2,0.25,64\n")
    before.write_text(header + "0,3,1,1,0.50,0.1,0.375,64\n0,3,1,0,0.20,0.0,0.25,64\n")
    other.write_text(header + "0,3,1,1,0.50,0.1,0.375,64\n0,4,1,0,0.20,0.0,0.25,64\n")
    joined = with_earlier(read_records(now), read_records(before))
    assert [(r["analytic"], r["analytic_own"]) for r in joined] == [(0.4, 0.5), (0.2, 0.2)]
    figures = summarize(joined)
    assert figures["action_max"] == pytest.approx(0.1)
    assert figures["credit_mean"] == pytest.approx(0.15)
    with pytest.raises(ValueError, match="not the same states"):
        with_earlier(read_records(now), read_records(other))


def test_a_one_digit_result_a_later_last_digit_wipes_may_carry_any_tens_digit():
    """``26-24=2`` before a ``%10``: ``26-24=42`` is right too (the tens digit is wiped), and
    a policy trained on outcomes writes it; each tens digit is a rendering of its own, scored
    in a text cut after it, so the unit digit is read after the tens digit the policy wrote."""
    _, found = probes([("+", 5), ("-", 24), ("%", 10)])  # 21 -> 26 -> 2 -> 2
    assert scored(found, 1) == ["26-24=2\n", *(f"26-24={d}2\n" for d in range(1, 10))]
    assert all(found.texts[r.text].endswith(f"{d}2\n") for d, r in enumerate(found.lines[1][1:], 1))
    _, two_digits = probes([("+", 5), ("-", 3), ("%", 10)])  # 23: its tens digit is free already
    assert scored(two_digits, 1) == ["26-3=23\n"]
