"""The tuning rule's choices (tools/campaign/tuning.py), on records made up by hand."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from creditbench.tools.campaign.tuning import (
    eval_counts,
    samples_horizon,
    stage2_suite,
    tuned_suite,
    tuning_table,
)
from creditbench.tools.campaign.tuning_rule import (
    Config,
    best,
    choices_of,
    chosen,
    read_aucs,
    read_reach,
    stage1_best,
    stage2_configs,
)

DEFAULTS = {"grpo": {"eps_low": 0.2}, "gspo": {"eps_low": 3e-4, "eps_high": 4e-4},
            "sdpo": {"reprompt": "solution"}, "vineppo": {"rollouts_per_state": 4},
            "scapo": {"rewrites": ("template", "typo")}}  # fmt: skip


def row(method: str, lr: float, seed: int, auc: float, **options) -> dict:
    config = {"method": method, "train": {"lr": lr},
              "method_options": {**DEFAULTS[method], **options}}  # fmt: skip
    return {"kind": "run", "seed": seed, "auc": auc, "config": json.dumps(config)}


def table(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def stage1(method: str, aucs: dict[float, tuple[float, float]], **options) -> list[dict]:
    return [row(method, lr, s, a, **options) for lr, pair in aucs.items()
            for s, a in zip((22, 23), pair, strict=True)]  # fmt: skip


def test_stage_one_picks_the_best_mean_and_breaks_ties_toward_todays_lr():
    rows = stage1("grpo", {1.5e-5: (0.30, 0.32), 5e-5: (0.35, 0.36), 1.5e-4: (0.37, 0.38)})
    rows += stage1("vineppo", {1.5e-5: (0.20, 0.20), 5e-5: (0.25, 0.25), 1.5e-4: (0.251, 0.252)})
    aucs = read_aucs(table(rows), DEFAULTS)
    assert stage1_best(aucs, "grpo") == Config("grpo", 1.5e-4)
    # 0.2515 against 0.25: under the 0.002 tie, so today's 5e-5 (its suite's 4 continuations
    # are today's options, not a change)
    assert stage1_best(aucs, "vineppo") == Config("vineppo", 5e-5)
    # seeds other than the tuning ones never count
    aucs = read_aucs(table([*rows, row("grpo", 5e-5, 0, 0.99)]), DEFAULTS)
    assert stage1_best(aucs, "grpo") == Config("grpo", 1.5e-4)


def test_a_default_list_read_back_from_json_is_no_change():
    # the records hold a run's options as JSON (a list); a default tuple is the same options
    rows = stage1("scapo", {1.5e-5: (0.30, 0.32), 5e-5: (0.35, 0.36), 1.5e-4: (0.31, 0.30)})
    aucs = read_aucs(table(rows), DEFAULTS)
    assert stage1_best(aucs, "scapo") == Config("scapo", 5e-5)
    changed = read_aucs(table(stage1("scapo", {5e-5: (0.1, 0.1)}, rewrites=["typo"])), DEFAULTS)
    assert [c.options for c in changed] == [(("rewrites", ("typo",)),)]


def test_stage_one_waits_for_every_lr_at_both_seeds():
    rows = stage1("grpo", {1.5e-5: (0.30, 0.32), 5e-5: (0.35, 0.36)})
    rows.append(row("grpo", 1.5e-4, 22, 0.4))
    with pytest.raises(ValueError, match="grpo: stage 1 at lr 0.00015 has 1 of 2 seeds"):
        stage1_best(read_aucs(table(rows), DEFAULTS), "grpo")


def test_stage_two_is_the_knobs_alternatives_or_a_quarter_decade_either_side():
    rows = stage1("grpo", {1.5e-5: (0.30, 0.32), 5e-5: (0.35, 0.36), 1.5e-4: (0.31, 0.30)})
    rows += stage1("gspo", {1.5e-5: (0.30, 0.30), 5e-5: (0.20, 0.20), 1.5e-4: (0.10, 0.10)})
    rows += stage1("sdpo", {1.5e-5: (0.10, 0.10), 5e-5: (0.20, 0.20), 1.5e-4: (0.25, 0.26)})
    aucs = read_aucs(table(rows), DEFAULTS)
    grpo = stage2_configs("grpo", stage1_best(aucs, "grpo"), aucs)
    assert [c.lr for c in grpo] == pytest.approx([5e-5 / 10**0.25, 5e-5 * 10**0.25], rel=1e-3)
    gspo = stage2_configs("gspo", stage1_best(aucs, "gspo"), aucs)
    assert {c.lr for c in gspo} == {1.5e-5}
    assert [dict(c.options)["eps_low"] for c in gspo] == [1e-3, 3e-3]
    # SDPO: its other prompt, and the lr refined toward its better stage-1 neighbour (5e-5 is
    # below 1.5e-4, the best, and there is no point above it: so downward)
    sdpo = stage2_configs("sdpo", stage1_best(aucs, "sdpo"), aucs)
    assert dict(sdpo[0].options) == {"reprompt": "hint"} and sdpo[0].lr == 1.5e-4
    assert sdpo[1].lr == pytest.approx(1.5e-4 / 10**0.25, rel=1e-3) and not sdpo[1].options


def test_the_choice_is_the_best_of_five_with_ties_toward_fewer_changes():
    today = Config("gspo", 5e-5)
    knob = Config("gspo", 5e-5, (("eps_high", 1.33e-3), ("eps_low", 1e-3)))
    assert best({today: [0.30, 0.30], knob: [0.301, 0.302]}) == today  # within the tie
    assert best({today: [0.30, 0.30], knob: [0.31, 0.30]}) == knob


def test_stage_two_suite_gives_each_configuration_its_lr_and_options(tmp_path):
    from creditbench.tools.suite import expand_suite, load_suite, run_config, suite_path

    configs = [Config("gspo", 1.5e-5, (("eps_high", 4e-3), ("eps_low", 3e-3))),
               Config("grpo", 8.9e-5)]  # fmt: skip
    suite = stage2_suite(load_suite(suite_path("tuning")), configs)
    assert "grid" not in suite and suite["seeds"] == [22, 23]
    runs = {run.entry: run_config(run, tmp_path) for run in expand_suite(suite, tmp_path)}
    assert runs["gspo_stage2_1"].train.lr == 1.5e-5
    assert runs["gspo_stage2_1"].method_options["eps_low"] == 3e-3
    assert runs["grpo_stage2_1"].train.lr == 8.9e-5
    assert runs["grpo_stage2_1"].rollout.group_size == 8  # the suite's settings kept


def test_the_tuning_table_puts_each_auc_under_its_seed_and_no_mean_before_both():
    rows = stage1("grpo", {5e-5: (0.35, 0.36)})[::-1]  # the records list seed 23 first
    rows.append(row("grpo", 1.5e-5, 23, 0.30))
    text = tuning_table(read_aucs(table(rows), DEFAULTS), ["grpo"])
    assert "| grpo | lr 5e-05 | 0.3500 | 0.3600 | 0.3550 |" in text
    assert "| grpo | lr 1.5e-05 | — | — | 1 of 2 seeds in |" in text
    # the fewest responses the configuration's runs trained, where the records say
    reach = {Config("grpo", 5e-5): [1504.0, 1472.0]}
    text = tuning_table(read_aucs(table(rows), DEFAULTS), ["grpo"], reach)
    assert "| grpo | lr 5e-05 | 0.3500 | 0.3600 | 0.3550 | 1472 |" in text


def test_the_tuning_table_marks_a_choice_only_once_its_runs_are_in():
    rows = stage1("grpo", {1.5e-5: (0.30, 0.32), 5e-5: (0.35, 0.36)})
    text = tuning_table(read_aucs(table(rows), DEFAULTS), ["grpo"])
    assert "stage 1's best |" not in text and "**chosen**" not in text  # 1.5e-4 not in yet
    rows += stage1("grpo", {1.5e-4: (0.31, 0.30)})
    text = tuning_table(read_aucs(table(rows), DEFAULTS), ["grpo"])
    marked = [line for line in text.splitlines() if line.endswith("best |")]
    assert marked == ["| grpo | lr 5e-05 | 0.3500 | 0.3600 | 0.3550 | — | stage 1's best |"]
    aucs = read_aucs(table(rows), DEFAULTS)
    refined = [c.lr for c in stage2_configs("grpo", stage1_best(aucs, "grpo"), aucs)]
    assert refined == [2.812e-05, 8.891e-05]  # as the stage-2 suite writes them
    rows += [row("grpo", lr, s, 0.37) for lr in refined for s in (22, 23)]
    text = tuning_table(read_aucs(table(rows), DEFAULTS), ["grpo"])
    chosen = [line for line in text.splitlines() if "**chosen**" in line]
    # both refinements at 0.37: a tie, the nearer lr on a log scale is either; fewer changes
    # do not separate them (both change the lr), so the first by the tie-break order wins
    assert len(chosen) == 1 and "0.3700" in chosen[0]


def five(method: str, stage1_aucs: dict, stage2_aucs: list[tuple[float, float]]) -> list[dict]:
    """A method's stage 1 (``{lr: (seed 22, seed 23)}``) and its stage 2 at the AUCs given."""
    rows = stage1(method, stage1_aucs)
    aucs = read_aucs(table(rows), DEFAULTS)
    second = stage2_configs(method, stage1_best(aucs, method), aucs)
    for config, pair in zip(second, stage2_aucs, strict=True):
        for seed, auc in zip((22, 23), pair, strict=True):
            rows.append(row(method, config.lr, seed, auc, **dict(config.options)))
    return rows


def test_the_choice_waits_for_all_five_then_is_the_best_of_them():
    grid = {1.5e-5: (0.30, 0.32), 5e-5: (0.35, 0.36), 1.5e-4: (0.31, 0.30)}
    rows = five("gspo", grid, [(0.40, 0.40), (0.20, 0.20)])
    aucs = read_aucs(table(rows[:-1]), DEFAULTS)  # stage 2's last run still out
    assert chosen(aucs, "gspo") is None
    aucs = read_aucs(table(rows), DEFAULTS)
    assert chosen(aucs, "gspo") == Config("gspo", 5e-5, (("eps_high", 1.33e-3), ("eps_low", 1e-3)))
    # stage 2 below stage 1's best: the choice stays there
    rows = five("grpo", grid, [(0.30, 0.30), (0.34, 0.35)])
    assert chosen(read_aucs(table(rows), DEFAULTS), "grpo") == Config("grpo", 5e-5)


def test_the_tuned_suite_runs_every_method_under_its_own_name_at_its_choice(tmp_path):
    from creditbench.tools.suite import expand_suite, load_suite, run_config, suite_path

    board = load_suite(suite_path("standard"))
    choices = {"gspo": Config("gspo", 1.5e-5, (("eps_high", 4e-3), ("eps_low", 3e-3))),
               "grpo": Config("grpo", 8.9e-5), "oracle": Config("oracle", 5e-5)}  # fmt: skip
    suite = tuned_suite(board, choices, horizon=160)
    assert suite["seeds"] == board["seeds"]
    runs = [(run.entry, run_config(run, tmp_path)) for run in expand_suite(suite, tmp_path)]
    assert {entry for entry, _ in runs} == {"gspo", "grpo", "oracle"}
    for entry, config in runs:
        assert config.method == entry and config.train.lr == choices[entry].lr
        assert config.rollout.group_size == 8  # the board's settings kept
    gspo = next(config for entry, config in runs if entry == "gspo")
    assert gspo.method_options["eps_low"] == 3e-3
    # both settings of the board, at its seeds, each with its equal-samples evaluations: the
    # hard one up to the horizon, the easy one up to it times 3e12 / 4.5e12, down to a batch
    assert len(runs) == 3 * len(board["tasks"]) * len(board["seeds"])
    counts = {c.task_options["steps"]: tuple(c.budget.eval_responses) for _, c in runs}
    assert counts == {10: (32, 64, 128, 160), 8: (32, 64, 96)}


def test_the_horizon_is_the_fewest_responses_a_chosen_configuration_reached():
    spo, grpo = Config("spo", 5e-5), Config("grpo", 5e-5)
    reach = {spo: [176.0, 160.0], grpo: [1504.0, 1472.0], Config("spo", 1.5e-4): [96.0, 96.0]}
    # the fewest over the chosen configurations only (SPO's 1.5e-4 was not chosen)
    assert samples_horizon(reach, {"spo": spo, "grpo": grpo}, 32) == 160
    assert samples_horizon({spo: [175.0], grpo: [900.0]}, {"spo": spo, "grpo": grpo}, 32) == 160
    with pytest.raises(ValueError, match="no trained responses recorded for grpo"):
        samples_horizon({spo: [160.0]}, {"spo": spo, "grpo": grpo}, 32)


def test_the_counts_are_the_horizons_quarters_at_whole_batches():
    assert eval_counts(160, 32) == [32, 64, 128, 160]  # 40, 80, 120, 160 to the nearest batch
    assert eval_counts(1024, 32) == [256, 512, 768, 1024]
    assert eval_counts(64, 32) == [32, 64]  # a short horizon: fewer distinct counts
    assert eval_counts(16, 32) == []  # under one batch: nothing to evaluate at


def test_reach_is_read_from_each_runs_last_evaluation():
    rows = stage1("vineppo", {5e-5: (0.3, 0.3)})
    for i, r in enumerate(rows):
        r["run"] = f"run{i}"
    evals = [{"kind": "eval", "run": "run0", "responses_trained": n} for n in (0, 96, 160)]
    evals += [{"kind": "eval", "run": "run1", "responses_trained": n} for n in (0, 128)]
    reach = read_reach(table(rows + evals), DEFAULTS)
    assert reach == {Config("vineppo", 5e-5): [160.0, 128.0]}


def test_the_tuned_suite_waits_until_every_method_has_its_choice():
    grid = {1.5e-5: (0.30, 0.32), 5e-5: (0.35, 0.36), 1.5e-4: (0.31, 0.30)}
    rows = five("grpo", grid, [(0.30, 0.30), (0.34, 0.35)]) + stage1("gspo", grid)
    aucs = read_aucs(table(rows), DEFAULTS)
    with pytest.raises(ValueError, match="no choice yet .* for gspo$"):
        choices_of(aucs, ["grpo", "gspo"])
    assert choices_of(aucs, ["grpo"]) == {"grpo": Config("grpo", 5e-5)}


def test_the_ablation_rows_run_at_otbs_choice_each_with_its_rungs_change(tmp_path):
    from creditbench.leaderboard.ablation import OTB_LADDER
    from creditbench.tools.campaign.tuning import ablation_suite
    from creditbench.tools.suite import expand_suite, load_suite, run_config, suite_path

    board = load_suite(suite_path("standard"))
    choices = {"grpo": Config("grpo", 5e-5), "otb": Config("otb", 1.5e-4, (("zero_tail", False),))}
    tuned = tuned_suite(board, choices, horizon=160)
    suite = ablation_suite(tuned, choices, OTB_LADDER)
    runs = {}
    for run in expand_suite(suite, tmp_path):
        runs.setdefault(run.entry, []).append(run_config(run, tmp_path))
    # the inner rungs only: GRPO and OTB are the tuned board's own rows
    assert set(runs) == {"otb_norm", "otb_uniform"}
    for configs in runs.values():
        assert {c.train.lr for c in configs} == {1.5e-4}  # OTB's chosen lr, not GRPO's
        counts = {c.task_options["steps"]: tuple(c.budget.eval_responses) for c in configs}
        assert counts == {10: (32, 64, 128, 160), 8: (32, 64, 96)}  # the tuned evaluations
    norm, uniform = runs["otb_norm"][0], runs["otb_uniform"][0]
    assert norm.method == "drgrpo" and norm.method_options["aggregation"] == "token-mean"
    # a rung of another method does not take OTB's options; OTB's own rung keeps them
    entries = {entry["name"]: entry for entry in suite["methods"]}
    assert entries["otb_norm"]["options"] == {"aggregation": "token-mean"}
    assert entries["otb_uniform"]["options"] == {"weighting": "uniform", "zero_tail": False}
    assert uniform.method == "otb" and uniform.method_options["weighting"] == "uniform"
    assert uniform.method_options["zero_tail"] is False


def test_stage_twos_plan_pins_every_configuration_and_loads_as_a_campaign(tmp_path):
    from creditbench.tools.campaign.plan import load_plan
    from creditbench.tools.campaign.tuning_plans import stage2_plan
    from creditbench.tools.campaign.worktrees import resolve_commit
    from creditbench.tools.suite import load_suite, suite_path

    configs = [Config("gspo", 5e-5, (("eps_high", 1.33e-3), ("eps_low", 1e-3))),
               Config("grpo", 2.812e-5), Config("grpo", 8.891e-5)]  # fmt: skip
    suite = stage2_suite(load_suite(suite_path("tuning")), configs)
    suite_file = tmp_path / "tuning-stage2.yaml"
    suite_file.write_text(yaml.safe_dump(suite, sort_keys=False))
    head = resolve_commit("HEAD")
    plan_file = tmp_path / "tuning-stage2-plan.yaml"
    plan_file.write_text(stage2_plan(str(suite_file), suite, "docs/results/tuning", head))
    plan = load_plan(plan_file)  # the campaign's own loader and its checks
    assert plan.pins == {head: ("gspo_stage2_1", "grpo_stage2_1", "grpo_stage2_2")}
    assert [(phase.setting, phase.seeds) for phase in plan.phases] == [("hard", (22, 23))]
    assert plan.board.as_posix().endswith("docs/results/tuning")
    assert plan.pages["tuning"].as_posix().endswith("docs/results/tuning/tuning.md")
    assert len(plan.runs_of(plan.phases[0], plan.pins[head])) == 6  # 3 configurations x 2 seeds


def test_stage_twos_plan_arguments_are_checked_before_anything_is_written(tmp_path, capsys):
    from creditbench.tools.campaign.tuning import main
    from creditbench.tools.campaign.worktrees import REPOSITORY

    inside = REPOSITORY / "tools" / "suites" / "not-written-by-this-test.yaml"
    plan = tmp_path / "plan.yaml"
    records = str(REPOSITORY / "docs" / "results" / "tuning")
    for argv, said in (
        ([records, "--out", str(tmp_path / "s.yaml"), "--pin", "HEAD"], "--out: "),
        ([records, "--out", str(inside), "--pin", "no-such-commit"], "--pin: commit"),
    ):
        argv = ["stage2", *argv, "--plan", str(plan)]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"tuning: {said}") and len(err.splitlines()) == 1, err
    assert not inside.exists() and not plan.exists() and not (tmp_path / "s.yaml").exists()
    # flags that belong to another action, or --pin without --plan: argparse's exit 2
    for argv in (
        ["table", records, "--out", str(tmp_path / "t.md"), "--ablations", str(tmp_path / "a")],
        ["stage2", records, "--out", str(tmp_path / "s.yaml"), "--pin", "HEAD"],
        ["table", records, "--out", str(tmp_path / "t.md"), "--plan", str(plan), "--pin", "HEAD"],
        ["tuned", records, "--out", str(tmp_path / "s.yaml"), "--ablations-plan", str(plan)],
        ["tuned", records, "--out", str(tmp_path / "s.yaml"), "--claims-plan", str(plan)],
        [
            "stage2",
            records,
            "--out",
            str(tmp_path / "s.yaml"),
            "--claims-plan",
            str(plan),
            "--plan",
            str(plan),
            "--pin",
            "HEAD",
        ],  # fmt: skip
    ):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
    assert not any(tmp_path.iterdir())


def test_protocol_twos_plans_follow_its_rule_and_load_as_campaigns(tmp_path):
    """docs/testbed.md, "Protocol 2's board": GRPO and the oracle first, every method's hard
    seeds, easy 0-4, the easy-seeds rule's 5-9, the confirmatory 10-19 of the scale's ends; the
    records apart from the published board's; the ablation rows on hard and easy 0-9."""
    from creditbench.leaderboard.ablation import OTB_LADDER
    from creditbench.tools.campaign.plan import load_plan
    from creditbench.tools.campaign.tuning import ablation_suite
    from creditbench.tools.campaign.tuning_plans import protocol2_plans
    from creditbench.tools.campaign.worktrees import resolve_commit
    from creditbench.tools.suite import load_suite, suite_path

    choices = {"otb": Config("otb", 5e-5), "grpo": Config("grpo", 5e-5),
               "oracle": Config("oracle", 5e-5), "dapo": Config("dapo", 1.5e-4),
               "gtpo": Config("gtpo", 1.5e-4), "forking": Config("forking", 5e-5)}  # fmt: skip
    suite = tuned_suite(load_suite(suite_path("standard")), choices, horizon=160)
    ablations = ablation_suite(suite, choices, OTB_LADDER)
    files = {}
    for name, data in (("tuned", suite), ("ablations", ablations)):
        files[name] = tmp_path / f"{name}.yaml"
        files[name].write_text(yaml.safe_dump(data, sort_keys=False))
    head = resolve_commit("HEAD")
    texts = protocol2_plans(str(files["tuned"]), suite, str(files["ablations"]), ablations, head)
    loaded = []
    for name, text in zip(("board", "ablation-rows", "claims-rows"), texts, strict=True):
        (tmp_path / f"{name}.yaml").write_text(text)
        loaded.append(load_plan(tmp_path / f"{name}.yaml"))
    board, rows, claims = loaded
    assert board.pins == {head: ("grpo", "oracle", "dapo", "forking", "gtpo", "otb")}
    phases = [(p.setting, p.seeds[0], p.seeds[-1], p.methods, p.rule) for p in board.phases]
    assert phases == [
        ("hard", 0, 9, ("grpo", "oracle"), ""),
        ("easy", 0, 4, ("grpo", "oracle"), ""),
        ("hard", 0, 9, ("grpo", "oracle", "dapo", "forking", "gtpo", "otb"), ""),
        ("easy", 0, 4, ("grpo", "oracle", "dapo", "forking", "gtpo", "otb"), ""),
        ("easy", 5, 9, ("grpo", "oracle", "dapo", "forking", "gtpo", "otb"), "easy-seeds"),
        ("hard", 10, 19, ("grpo", "oracle"), ""),
        ("easy", 10, 19, ("grpo", "oracle"), ""),
    ]
    assert len(board.runs_of(board.phases[-1])) == 20  # the confirmatory seeds are planned
    assert board.board.as_posix().endswith("docs/results/protocol-2") and not board.pages
    assert rows.pins == {head: ("otb_norm", "otb_uniform")}
    assert rows.board.as_posix().endswith("docs/results/protocol-2-ablations")
    assert sum(len(rows.runs_of(p)) for p in rows.phases) == 2 * 2 * 10
    # the claims' own rows: GTPO's card (the suite has no OPPO to host OPPO's), on the tuned
    # suite by reproduce --suite, into records of their own, the board's read for the seeds
    assert claims.pins == {head: ("gtpo",)} and [p.reproduce for p in claims.phases] == ["gtpo"]
    assert claims.board == board.board
    assert claims.claims_rows.as_posix().endswith("docs/results/protocol-2-claims-rows")
    from creditbench.tools.campaign.run import phase_steps, step_argv

    (step,), waits = phase_steps(claims, claims.phases[0], [tmp_path / "no-records-yet"])
    assert {r.entry for r in step.runs} == {"grpo_s"} and len(step.runs) == 20
    # before the board's runs are in, the rows' seeds are not known: it waits, training nothing
    assert waits.startswith("the board's runs of ") and "are not in its records yet" in waits
    argv = step_argv(claims, claims.phases[0], step, tmp_path / "work", workers=2, threads=1)
    assert argv[:2] == ["reproduce", "gtpo"]
    assert argv[argv.index("--suite") + 1] == str(files["tuned"])


def test_the_tuned_command_writes_the_board_and_ablation_suites_from_complete_records(
    tmp_path, monkeypatch
):
    """The command end to end on made-up records of every registered method's five
    configurations (each run's config as the records hold it, its reach in evaluation rows):
    the board's suite at each choice and the ablation rows' suite at OTB's."""
    from creditbench.leaderboard import collect
    from creditbench.tools.campaign.tuning import main
    from creditbench.tools.campaign.tuning_rule import STAGE1_LRS, today_options
    from creditbench.tools.suite import load_suite, suite_path

    defaults = today_options(load_suite(suite_path("tuning")))
    rows, index = [], 0

    def add(method: str, lr: float, options: dict, auc: float) -> None:
        nonlocal index
        for seed in (22, 23):
            index += 1
            config = {"method": method, "train": {"lr": lr},
                      "method_options": {**defaults[method], **options}}  # fmt: skip
            name = f"run{index}"
            rows.append({"kind": "run", "run": name, "seed": seed, "auc": auc,
                         "config": json.dumps(config)})  # fmt: skip
            rows.append({"kind": "eval", "run": name, "responses_trained": 160 + 32 * (index % 3)})

    for method in defaults:  # stage 1: 5e-5 best everywhere, then stage 2 below it but OTB's
        for lr in STAGE1_LRS:
            add(method, lr, {}, 0.4 if lr == 5e-5 else 0.3)
        aucs = read_aucs(pd.DataFrame([r for r in rows if r["kind"] == "run"]), defaults)
        for config in stage2_configs(method, stage1_best(aucs, method), aucs):
            better = method == "otb" and config.lr > 5e-5
            add(method, config.lr, dict(config.options), 0.45 if better else 0.35)
    monkeypatch.setattr(collect, "collect_runs", lambda sources: (pd.DataFrame(rows), []))
    out, ablations = tmp_path / "tuned.yaml", tmp_path / "ablations.yaml"
    argv = ["tuned", "records", "--out", str(out), "--ablations", str(ablations)]
    assert main(argv) == 0
    suite, rows_suite = yaml.safe_load(out.read_text()), yaml.safe_load(ablations.read_text())
    lrs = {entry["name"]: entry["settings"]["train.lr"] for entry in suite["methods"]}
    assert set(lrs) == set(defaults) and lrs["grpo"] == 5e-5 and lrs["otb"] > 5e-5
    assert {e["name"]: e["settings"]["train.lr"] for e in rows_suite["methods"]} == {
        "otb_norm": lrs["otb"], "otb_uniform": lrs["otb"]
    }  # fmt: skip
    # the horizon: the fewest responses a chosen configuration reached, 160, in quarters
    assert suite["tasks"][0]["settings"]["budget.eval_responses"] == [32, 64, 128, 160]
