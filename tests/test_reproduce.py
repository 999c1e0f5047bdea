"""``creditbench reproduce``: the recipe mapping of the GRPO-family cards, the paper-scale
refusals, the budget plan, the ordering agreement, and one CPU-scale reproduction end to end."""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import kendalltau

from creditbench.harness.records.rundir import RunDir
from creditbench.harness.tasks import get_task
from creditbench.reference.card_schema import card_from_dict
from creditbench.tools.cli.main import main
from creditbench.tools.reproduce import budget
from creditbench.tools.reproduce import plan as plans
from creditbench.tools.reproduce import run as rp
from creditbench.tools.reproduce.profile import PROFILE_FIELDS
from creditbench.tools.reproduce.recipe import (
    RECIPE_SETTINGS,
    Environment,
    ReproduceError,
    load_card_by_id,
    missing_requirements,
    paper_recipe,
    split_methods,
)
from creditbench.tools.reproduce.report import kendall_tau, ordering_agreement
from creditbench.tools.suite import run_config

GRPO_FAMILY = ("deepseekmath_grpo", "drgrpo", "dapo", "gspo", "rloo", "reinforce_pp")
NO_GPU = Environment(gpus=(), packages=frozenset())
BIG_MACHINE = Environment(gpus=(141.0,) * 8, packages=frozenset({"vllm"}))


def _values(settings) -> dict:
    return {s.key: s.value for s in settings}


# ---------------------------------------------------------------------------------------------
# The paper's recipe


@pytest.mark.parametrize("card_id", GRPO_FAMILY)
def test_recipe_fields_map_onto_run_config_or_are_reported_unknown(card_id):
    card = load_card_by_id(card_id)
    methods, _ = split_methods(card)
    mapping = paper_recipe(card, methods)
    settings = _values(mapping.settings)
    for name, (key, kind) in RECIPE_SETTINGS.items():
        value = getattr(card.recipe, name)
        if value is None:
            assert name in mapping.unknown and key not in settings
        else:
            assert settings[key] == kind(value.value) and name not in mapping.unknown
    proposed = [m.name for m in card.methods if m.role == "proposed"]
    for method in methods:
        options = _values(mapping.options[method])
        for name in ("eps_low", "eps_high", "aggregation", "kl_coef"):
            value = getattr(card.recipe, name)
            if method in proposed and value is not None:
                assert options[name] == value.value, (method, name)
        for key, value in card.cpu_scale.method_options.get(method, {}).items():
            if method not in proposed or getattr(card.recipe, key, None) is None:
                assert options[key] == value, (method, key)
    # the model and data the paper used are never dropped silently
    not_mapped = {s.key for s in mapping.not_mapped}
    assert (card.recipe.base_model is None) == ("base_model" not in not_mapped)
    if card.recipe.training_data is not None:
        assert mapping.task is not None or "training_data" in not_mapped


def test_recipe_specifics_of_the_grpo_family():
    grpo = paper_recipe(load_card_by_id("deepseekmath_grpo"), ["grpo"])
    assert {"kl_coef": 0.04, "kl_kind": "k3"}.items() <= _values(grpo.options["grpo"]).items()
    assert _values(grpo.settings)["train.minibatches"] == 1  # one update per exploration stage
    assert {"temperature", "steps_or_budget", "training_data"} <= set(grpo.unknown)

    dapo = paper_recipe(load_card_by_id("dapo"), ["grpo", "dapo"])
    options = _values(dapo.options["dapo"])
    assert options["eps_high"] == 0.28 and options["overlong_cache_length"] == 4096
    assert options["dynamic_sampling"] is True and options["kl_coef"] == 0.0
    assert _values(dapo.options["grpo"])["eps_high"] == 0.2  # the baseline is not given DAPO's
    assert _values(dapo.settings)["eval.temperature"] == 1.0
    assert "warmup_steps" in {s.key for s in dapo.not_mapped}  # no option of any method
    assert dapo.task is None and "training_data" in {s.key for s in dapo.not_mapped}

    gspo = _values(paper_recipe(load_card_by_id("gspo"), ["grpo", "gspo"]).options["gspo"])
    assert gspo["ratio_level"] == "sequence" and gspo["eps_low"] == 3.0e-4

    rpp = paper_recipe(load_card_by_id("reinforce_pp"), ["reinforce_pp", "reinforce_pp_baseline"])
    assert _values(rpp.options["reinforce_pp"])["gamma"] == 1.0
    assert "reinforce_pp_baseline.gamma" in {s.key for s in rpp.not_mapped}
    assert "kl_coef" in rpp.unknown


@pytest.mark.parametrize("card_id", GRPO_FAMILY)
def test_paper_plans_are_valid_run_configs(card_id, tmp_path):
    card = load_card_by_id(card_id)
    plan = plans.paper_plan(card, model_dir=str(tmp_path), task="math", steps=3)
    runs = rp.runs_of(plan)
    assert {r.entry for r in runs} == set(plan.methods)
    # 3 steps, up to a whole number of rollout batches (minibatches x ppo_epochs steps each)
    per_batch = plans.optimizer_steps_a_batch(plan)
    steps = plan.budget["amount"]
    assert steps % per_batch == 0 and 3 <= steps < 3 + per_batch
    for run in runs:
        config = run_config(run, tmp_path)
        assert config.rollout.backend == "vllm" and config.device == "cuda"
        assert config.budget.unit == "steps" and config.budget.amount == steps
        for key, value in plan.option_values(run.entry).items():
            assert config.method_options[key] == value
        if card.recipe.group_size is not None:
            assert config.rollout.group_size == card.recipe.group_size.value
        # DAPO's L_max and Dr. GRPO's L stay 0: the method takes the run's generation limit
        # from services.max_new_tokens, so a --set rollout.max_new_tokens moves them too
        assert config.method_options.get("max_response_length", 0) == 0
        assert config.method_options.get("horizon", 0) == 0
    notes = "\n".join(plan.unknown)
    for name in ("temperature", "group_size"):
        if getattr(card.recipe, name) is None:
            assert f"{name}: " in notes and "LLM-scale profile" in notes
    # nothing that changes what a run computes is left to the testbed's defaults
    origins = {s.key: s.origin for s in plan.settings}
    assert set(PROFILE_FIELDS) <= set(origins)
    assert "harness default" not in notes


def test_paper_plans_take_the_card_over_the_profile_and_the_user_over_both(tmp_path):
    card = load_card_by_id("dapo")
    plan = plans.paper_plan(
        card, model_dir=str(tmp_path), task="math", steps=3, overrides=["train.grad_clip=0.5"]
    )
    settings = {s.key: s for s in plan.settings}
    assert settings["train.lr"].value == 1e-6 and settings["train.lr"].origin.startswith("recipe")
    assert settings["rollout.max_new_tokens"].value == 20480  # the card's, not the profile's 3000
    assert settings["train.weight_decay"].origin.startswith("LLM-scale profile: verl")
    assert settings["train.grad_clip"].value == 0.5
    # DAPO evaluates sampled at temperature 1.0, so the profile's greedy evaluation gives way
    assert settings["eval.greedy"].value is False
    assert "eval_temperature" in settings["eval.greedy"].origin
    config = run_config(rp.runs_of(plan)[0], tmp_path)
    assert config.train.lr == 1e-6 and config.train.weight_decay == 0.01
    assert config.rollout.max_new_tokens == 20480 and config.eval.n_problems == 500


def test_a_task_and_steps_the_card_does_not_record_come_from_the_profile_or_the_user(tmp_path):
    card = load_card_by_id("drgrpo")
    given = plans.paper_plan(card, model_dir=str(tmp_path), task="gsm8k", steps=12)
    assert (given.task, given.budget) == ("gsm8k", {"unit": "steps", "amount": 12})
    assert given.origins == {"task": "--task", "budget": "--steps/--budget"}
    profile = plans.paper_plan(card, model_dir=str(tmp_path), steps=3)
    assert profile.task == "math" and "LLM-scale profile" in profile.origins["task"]
    plan = plans.paper_plan(card, model_dir=str(tmp_path), task="gsm8k")
    values = plan.setting_values()
    per_batch = values["train.minibatches"] * values["train.ppo_epochs"]
    batches = plan.budget["amount"] // per_batch
    prompts = values["rollout.prompts_per_step"]
    problems = len(get_task("gsm8k").problems("train"))
    assert (batches - 1) * prompts < 30 * problems <= batches * prompts  # 30 epochs, rounded up
    assert "verl 0.9.1 ppo_trainer.yaml trainer.total_epochs" in plan.origins["budget"]


# ---------------------------------------------------------------------------------------------
# Paper-scale refusals


def _model_dir(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text("{}")
    return str(folder)


def test_paper_scale_refuses_in_one_message_naming_model_hardware_and_package(monkeypatch, capsys):
    monkeypatch.setattr(rp, "probe_environment", lambda packages=(): NO_GPU)
    assert main(["reproduce", "dapo", "--scale", "paper"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    card = load_card_by_id("dapo")
    for needed in (card.paper_scale.model, card.paper_scale.hardware, "no CUDA GPU", "vllm"):
        assert needed in err


def test_paper_scale_names_only_what_is_missing(monkeypatch, capsys, tmp_path):
    card = load_card_by_id("deepseekmath_grpo")
    small = Environment(gpus=(24.0,), packages=frozenset({"vllm"}))
    missing = missing_requirements(card, _model_dir(tmp_path), small)
    assert len(missing) == 1 and missing[0].startswith("hardware: 8 x GPU with >= 80 GiB")
    assert "24 GiB" in missing[0]
    assert missing_requirements(card, _model_dir(tmp_path), small, ignore_hardware=True) == []
    assert missing_requirements(card, _model_dir(tmp_path), BIG_MACHINE, engine="verl") == []
    # eight GPUs here, but the builtin trainer would use one of them: refused, verl and TRL named
    one_gpu = missing_requirements(card, _model_dir(tmp_path), BIG_MACHINE)
    assert len(one_gpu) == 1 and "runs on one GPU" in one_gpu[0]
    assert "--engine verl" in one_gpu[0] and "--engine trl" in one_gpu[0]
    big = missing_requirements(card, _model_dir(tmp_path), BIG_MACHINE, ignore_hardware=True)
    assert big == []
    no_model = missing_requirements(card, str(tmp_path / "nowhere"), BIG_MACHINE, engine="trl")
    assert len(no_model) == 1 and "no config.json" in no_model[0]
    gspo = load_card_by_id("gspo")
    unknown_model = missing_requirements(gspo, None, BIG_MACHINE, engine="verl")
    assert len(unknown_model) == 1 and "does not record the paper's model" in unknown_model[0]

    monkeypatch.setattr(rp, "probe_environment", lambda packages=(): BIG_MACHINE)
    argv = ["reproduce", "deepseekmath_grpo", "--model-dir", _model_dir(tmp_path)]
    assert main([*argv, "--task", "gsm8k", "--steps", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "scale: paper" in out  # the default with a GPU
    # no --task, no --steps: the card's data and steps are unknown; the profile's, and says so
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "scale: paper (task math: LLM-scale profile: ours, the nearest task" in out
    assert "the card's is unknown" in out
    budget = re.search(r"budget: (\d+) steps per run \(30 epochs of the task", out)
    assert budget and f"steps_or_budget: {budget[1]} steps (30 epochs" in out


def test_default_scale_without_a_gpu_is_cpu(monkeypatch, capsys):
    monkeypatch.setattr(rp, "probe_environment", lambda packages=(): NO_GPU)
    assert main(["reproduce", "rloo", "--dry-run", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert "scale: cpu" in out and "runs: chain-grpo-s0, chain-grpo-s1, chain-rloo-s0" in out
    assert main(["reproduce", "rloo", "--model-dir", "x", "--dry-run"]) == 2
    assert "--model-dir: only with --scale paper" in capsys.readouterr().err
    assert main(["reproduce", "rloo", "--set", "budget.amount=5", "--dry-run"]) == 2
    assert "--set budget.amount: " in capsys.readouterr().err
    assert main(["reproduce", "no_such_card"]) == 2
    assert "known: " in capsys.readouterr().err


def test_a_suite_or_records_beside_a_recipe_that_reads_neither_is_refused(monkeypatch, capsys):
    """--suite and --records pick the claims' suite and records: a quick look (its own recipe)
    and the paper scale read neither, so asking for them is an error, not a flag ignored."""
    monkeypatch.setattr(rp, "probe_environment", lambda packages=(): NO_GPU)
    quick = ["reproduce", "dapo", "--dry-run", "--minutes", "5"]
    for flag in ("--suite", "--records"):
        assert main([*quick, flag, "standard"]) == 2
        err = capsys.readouterr().err
        assert f"{flag}: only for the claims on a suite" in err and len(err.splitlines()) == 1
        argv = ["reproduce", "dapo", "--scale", "paper", "--dry-run", flag, "standard"]
        assert main(argv) == 2
        assert f"{flag}: only with --scale cpu" in capsys.readouterr().err
    assert main(["reproduce", "dapo", "--dry-run", "--suite", "no-such-suite"]) == 2
    assert "unknown suite 'no-such-suite'" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# The CPU plan


def _card_with(method: str):
    """A minimal valid card whose cpu_scale runs grpo and ``method``."""
    data = yaml.safe_load(load_card_by_id("rloo").path.read_text(encoding="utf-8"))
    data["methods"].append({"name": method, "registered": False, "role": "baseline"})
    data["cpu_scale"]["methods"] = ["grpo", method]
    return card_from_dict(data, "rloo.yaml")


def test_cpu_plan_skips_unimplemented_methods_and_reports_unmapped_options():
    card = _card_with("no_such_method")
    methods, skipped = split_methods(card)
    assert methods == ["grpo"]
    assert skipped == {"no_such_method": "not implemented", "rloo": "not in cpu_scale.methods"}
    plan = plans.cpu_plan(
        load_card_by_id("dapo"), overrides=["method_options.dynamic_sampling=false"]
    )
    assert plan.setting_values()["rollout.group_size"] == 16  # the card's setting
    assert plan.option_values("dapo")["dynamic_sampling"] is False  # the user's, last
    assert plan.option_values("dapo")["eps_high"] == 0.28
    assert "grpo.dynamic_sampling" in {s.key for s in plan.not_mapped}  # grpo has no such option
    assert "dynamic_sampling" not in plan.option_values("grpo")


@given(
    minutes=st.floats(5, 120),
    runs=st.integers(1, 12),
    workers=st.integers(1, 4),
    eval_flops=st.floats(0, 3e12),
)
def test_planned_budget_fills_but_does_not_exceed_the_time(minutes, runs, workers, eval_flops):
    try:
        plan = budget.plan_budget(
            minutes=minutes, runs=runs, workers=workers, eval_flops=eval_flops
        )
    except ReproduceError as err:
        assert str(err).startswith("--minutes: too short")
        share = minutes * 60 / math.ceil(runs / workers)
        assert share <= eval_flops / budget.EVAL_FLOPS_PER_SECOND + budget.RUN_OVERHEAD_SECONDS
        return
    assert plan.minutes <= minutes + 1e-9
    # two significant digits lose at most 10% of the training time
    slack = plan.rounds * plan.train_seconds * 0.1 / 60 / 0.9
    assert plan.minutes >= minutes - slack - 1e-9
    longer = budget.plan_budget(
        minutes=minutes * 2, runs=runs, workers=workers, eval_flops=eval_flops
    )
    assert longer.flops >= plan.flops


def test_given_budget_is_kept_and_bad_values_name_the_option():
    plan = budget.plan_budget(minutes=30, runs=4, workers=2, eval_flops=0, flops=3e12)
    assert plan.flops == 3e12 and plan.rounds == 2
    assert math.isclose(plan.train_seconds, 3e12 / budget.STEP_FLOPS_PER_SECOND)
    for kwargs, flag in (({"flops": -1.0}, "--budget"), ({"workers": 0}, "--workers")):
        with pytest.raises(ReproduceError, match=f"^{flag}: must be"):
            budget.plan_budget(
                **{"minutes": 30, "runs": 4, "workers": 2, "eval_flops": 0, **kwargs}
            )


# ---------------------------------------------------------------------------------------------
# The ordering agreement


def test_ordering_agreement_on_hand_made_cases():
    paper = {"grpo": 30.0, "dapo": 50.0, "drgrpo": 40.0}
    same = ordering_agreement(paper, {"grpo": 0.1, "dapo": 0.3, "drgrpo": 0.2})
    assert (same.agreeing, same.comparable, same.tau, same.same_winner) == (3, 3, 1.0, True)
    assert same.paper_order == same.our_order == "dapo > drgrpo > grpo"

    reversed_ = ordering_agreement(paper, {"grpo": 0.3, "dapo": 0.1, "drgrpo": 0.2})
    assert (reversed_.agreeing, reversed_.tau, reversed_.same_winner) == (0, -1.0, False)

    # one swapped pair of three: 2 of 3 agree, tau = (2 - 1) / 3
    swapped = ordering_agreement(paper, {"grpo": 0.2, "dapo": 0.3, "drgrpo": 0.1})
    assert swapped.agreeing == 2 and math.isclose(swapped.tau, 1 / 3)
    assert swapped.same_winner is True

    # a pair the paper ties is not counted; a tie at the top has no winner
    tied = ordering_agreement({"a": 1.0, "b": 1.0, "c": 0.0}, {"a": 0.5, "b": 0.4, "c": 0.1})
    assert tied.comparable == 2 and tied.agreeing == 2 and tied.same_winner is None
    assert tied.paper_order == "a = b > c"
    ours_tied = ordering_agreement({"a": 2.0, "b": 1.0}, {"a": 0.5, "b": 0.5})
    assert ours_tied.same_winner is None and ours_tied.agreeing == 0 and ours_tied.tau is None

    # methods missing on either side are left out; fewer than two: nothing to compare
    assert ordering_agreement({"a": 1.0, "b": 2.0}, {"a": 0.1, "c": 0.2}) is None
    partial = ordering_agreement({"a": 1.0, "b": 2.0, "x": 3.0}, {"a": 0.1, "b": 0.2})
    assert partial.methods == ("a", "b") and partial.tau == 1.0


def test_pairs_are_significant_only_when_our_interval_excludes_zero():
    paper = {"a": 2.0, "b": 1.0}
    apart = ordering_agreement(paper, {"a": 0.9, "b": 0.1}, {"a": [0.9] * 3, "b": [0.1] * 3})
    assert apart.pairs[0].significant is True and apart.significant == 1
    mixed = {"a": [0.1, 0.9, 0.5], "b": [0.5, 0.1, 0.8]}
    close = ordering_agreement(paper, {"a": 0.5, "b": 0.47}, mixed)
    assert close.pairs[0].significant is False and close.significant == 0
    one_seed = ordering_agreement(paper, {"a": 0.9, "b": 0.1}, {"a": [0.9], "b": [0.1]})
    assert one_seed.pairs[0].significant is None


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=2, max_size=7))
def test_kendall_tau_is_scipys_tau_b(pairs):
    x, y = [float(p[0]) for p in pairs], [float(p[1]) for p in pairs]
    ours = kendall_tau(x, y)
    expected = kendalltau(x, y).statistic
    if math.isnan(expected):
        assert ours is None
    else:
        assert ours is not None and math.isclose(ours, expected, abs_tol=1e-12)


# ---------------------------------------------------------------------------------------------
# End to end at CPU scale


@pytest.fixture(scope="module")
def nano_policy(tmp_path_factory):
    """An untrained nano policy for the chain task: runs take seconds, not minutes."""
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, save_policy
    from creditbench.harness.tasks import get_task

    tokenizer = build_char_tokenizer(task_alphabet(get_task("chain")))
    folder = tmp_path_factory.mktemp("nano") / "policy"
    return save_policy(build_model("nano", tokenizer, seed=0), tokenizer, folder)


def test_cpu_reproduction_end_to_end_writes_the_side_by_side_table(nano_policy, tmp_path, capsys):
    results = tmp_path / "results"
    argv = ["reproduce", "dapo", "--scale", "cpu", "--results", str(results), "--seeds", "1"]
    argv += ["--n-eval", "2", "--workers", "2", "--reps", "50"]
    argv += ["--set", f"model.path={nano_policy}", "--set", "rollout.prompts_per_step=1"]
    argv += ["--set", "rollout.max_new_tokens=12", "--set", "eval.batch_size=8"]
    argv += ["--set", "method_options.max_sampling_rounds=1"]
    assert main([*argv, "--budget", "1e8"]) == 0
    out = capsys.readouterr().out
    card = load_card_by_id("dapo")
    report = (results / "reproduce_dapo.md").read_text(encoding="utf-8")
    assert report in out  # printed and written
    table = card.results[0]
    for method in card.methods:
        row = next(line for line in report.splitlines() if line.startswith(f"| {method.name} "))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == f"{table.rows[method.label]:g}"  # the paper's number
        final = float(cells[2].split()[0])
        assert 0.0 <= final <= 1.0 and cells[4] == "1"  # ours, one seed
    assert "Different tasks, different scales" in report and "Kendall τ" in report
    order = next(line for line in report.splitlines() if line.startswith("| Table 1"))
    assert "dapo > grpo" in order  # the paper's order, whatever ours is

    configs = {name: RunDir(results / name).config() for name in ("chain-grpo-s0", "chain-dapo-s0")}
    assert all(RunDir(results / name).is_finished() for name in configs)
    for config in configs.values():
        assert config["rollout"]["group_size"] == 16 and config["budget"]["amount"] == 1e8
    assert configs["chain-dapo-s0"]["method_options"]["eps_high"] == 0.28
    assert configs["chain-grpo-s0"]["method_options"]["eps_high"] == 0.2
    assert configs["chain-dapo-s0"]["method_options"]["max_response_length"] == 0  # the run's 12

    # a rerun finds every run finished and keeps their budget; another budget is refused
    assert main(argv) == 0
    assert "2 runs, 2 finished, 0 to run" in capsys.readouterr().out
    assert main([*argv, "--budget", "2e8"]) == 2
    assert "--budget: " in capsys.readouterr().err
    assert json.loads((results / "chain-dapo-s0" / "summary.json").read_text())["steps"] >= 1


def test_every_row_of_the_oppo_card_runs(monkeypatch, capsys, tmp_path):
    """Self- and Teacher-OPPO on GRPO and on DAPO: each a row with its own runs and options."""
    monkeypatch.setattr(rp, "probe_environment", lambda packages=(): NO_GPU)
    # --minutes: the quick look (without it the card's claims run on the standard suite)
    assert main(["reproduce", "oppo", "--dry-run", "--seeds", "1", "--minutes", "10"]) == 0
    out = capsys.readouterr().out
    assert "not implemented" not in out
    runs = out.splitlines()[-1].removeprefix("runs: ").split(", ")
    rows = ["grpo", "dapo", "oppo", "oppo_teacher", "dapo_oppo", "dapo_oppo_teacher"]
    assert runs == [f"chain-{row}-s0" for row in rows]
    assert "dapo_oppo_teacher (oppo: DAPO + Teacher-OPPO)" in out

    plan = plans.cpu_plan(load_card_by_id("oppo"), seeds=1)
    configs = {r.entry: run_config(r, tmp_path) for r in rp.runs_of(plan)}
    assert {row: c.method for row, c in configs.items()} == {
        "grpo": "grpo",
        "dapo": "dapo",
        **{row: "oppo" for row in rows[2:]},
    }
    options = {row: c.method_options for row, c in configs.items()}
    assert [options[r]["oracle"] for r in rows[2:]] == ["self", "teacher", "self", "teacher"]
    assert [options[r]["base"] for r in rows[2:]] == ["grpo", "grpo", "dapo", "dapo"]
    from creditbench.methods.oppo import OPPO

    hosts = {row: OPPO(**options[row]).host.config for row in rows[2:]}  # the host's defaults
    assert hosts["dapo_oppo"].eps_high == options["dapo"]["eps_high"] == 0.28
    assert hosts["dapo_oppo"].dynamic_sampling is True
    assert hosts["oppo"].aggregation == options["grpo"]["aggregation"]


def test_a_card_row_that_is_not_registered_is_skipped_as_not_implemented():
    run, skipped = split_methods(load_card_by_id("ccpo"))
    assert skipped["SEPO"] == "not implemented" and "SEPO" not in run


def test_the_planned_eval_cost_counts_the_prompts_as_the_rollout_encodes_them(monkeypatch):
    """With a chat template the rollout prefills the template's tokens too; the planner's eval
    FLOPs count them (they were once the bare prompt text's)."""
    from creditbench.harness.budget import BudgetMeter
    from creditbench.harness.config import load_config
    from creditbench.harness.models import modeling
    from creditbench.harness.sampling.rollout import encode_prompts
    from creditbench.harness.training.evaluation import eval_problems

    config = load_config(None, ["eval.n_problems=4", "eval.k_samples=1"])
    plain = budget.eval_flops_per_run(config)
    build = modeling.build_char_tokenizer
    templated = []

    def with_template(alphabet):
        tokenizer = build(alphabet)
        tokenizer.chat_template = (
            "{% for m in messages %}{{ m.content }}{% endfor %}"
            "{% if add_generation_prompt %}\n\n{% endif %}"
        )
        templated.append(tokenizer)
        return tokenizer

    monkeypatch.setattr(modeling, "build_char_tokenizer", with_template)
    chat = budget.eval_flops_per_run(config)
    tokenizer = templated[0]
    meter = BudgetMeter.for_model(modeling.build_model(config.model.preset, tokenizer, seed=0))
    problems = eval_problems(get_task("chain"), 4, config.seed, config.eval.problems)
    lengths = [len(ids) for ids in encode_prompts(tokenizer, [p.prompt for p in problems])]
    samples = config.eval.k_samples + (1 if config.eval.greedy else 0)
    news = [config.rollout.max_new_tokens] * len(lengths)
    expected = meter.charge_generation(lengths * samples, news * samples)
    assert chat == pytest.approx(expected * len(config.budget.eval_fractions))
    assert chat > plain
