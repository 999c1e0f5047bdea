"""What the tuning rule's choices are written into: stage 2's suite and plan, the tuning table,
the tuned board's suite and OTB's ablation rows' suite (docs/testbed.md, "The tuning rule").

    python -m creditbench.tools.campaign.tuning stage2 RECORDS --out tools/suites/tuning-stage2.yaml
        [--plan tools/campaigns/tuning-stage2.yaml --pin COMMIT]
    python -m creditbench.tools.campaign.tuning table RECORDS --out RECORDS/tuning.md
    python -m creditbench.tools.campaign.tuning tuned RECORDS --out tools/suites/standard-tuned.yaml
        [--ablations tools/suites/otb-ablation.yaml] [--plan tools/campaigns/protocol-2.yaml
        [--ablations-plan tools/campaigns/protocol-2-ablations.yaml]
        [--claims-plan tools/campaigns/protocol-2-claims-rows.yaml] --pin COMMIT]

The choices themselves are made by :mod:`.tuning_rule` from the records. ``stage2`` writes stage
2's suite (:func:`stage2_suite`) and, with ``--plan``, its campaign plan; ``table`` the tuning
table. Once every method's five configurations are in, ``tuned``
writes the board's suite at the chosen configurations (:func:`tuned_suite`), and with
``--ablations`` the suite of OTB's ablation rows at OTB's chosen configuration
(:func:`ablation_suite`, docs/testbed.md, "OTB's ablation rows"), and with ``--plan`` protocol
2's campaign plans (:mod:`.tuning_plans`, docs/testbed.md, "Protocol 2's board"). Every
plan's paths and pin are checked before anything is written.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

from creditbench.tools.campaign.tuning_plans import plan_paths, protocol2_plans, stage2_plan
from creditbench.tools.campaign.tuning_rule import (
    TUNING_SEEDS,
    Config,
    choices_of,
    chosen,
    read_aucs,
    read_reach,
    stage1_best,
    stage2_configs,
    today_options,
)

SAMPLES_POINTS = (0.25, 0.5, 0.75, 1.0)
TUNED_LABEL = "hard"  # the setting the tuning runs measure


def batch_of(suite: dict[str, Any]) -> int:
    """Trained responses a step in ``suite``: prompts a step times the group's size."""
    settings = suite.get("settings") or {}
    return int(settings["rollout.prompts_per_step"]) * int(settings["rollout.group_size"])


def samples_horizon(
    reach: dict[Config, list[float]], choices: dict[str, Config], batch: int
) -> int:
    """The tuned setting's horizon H: the fewest trained responses any chosen configuration's
    tuning runs reached within the budget (the fewer of its seeds), down to a whole batch;
    ValueError naming a choice whose runs say nothing of it."""
    missing = [m for m, c in choices.items() if not reach.get(c)]
    if missing:
        raise ValueError(f"no trained responses recorded for {', '.join(missing)}")
    fewest = min(min(reach[c]) for c in choices.values())
    return int(fewest // batch) * batch


def eval_counts(horizon: int, batch: int) -> list[int]:
    """The counts of trained responses protocol 2 evaluates at: the quarters of ``horizon``,
    each at the nearest whole batch (one at least), none past the horizon, distinct."""
    counts = {max(batch, round(horizon * q / batch) * batch) for q in SAMPLES_POINTS}
    return sorted(c for c in counts if c <= horizon)


def variant(name: str, config: Config) -> dict[str, Any]:
    """A suite's variant entry running ``config``: its method, the options it changes (the
    knobs' alternatives: plain values) and its lr."""
    entry: dict[str, Any] = {"name": name, "method": config.method}
    if config.options:
        entry["options"] = dict(config.options)
    entry["settings"] = {"train.lr": config.lr}
    return entry


def tuned_suite(
    board_suite: dict[str, Any], choices: dict[str, Config], horizon: int
) -> dict[str, Any]:
    """The board's suite with every method, references included, at its chosen configuration:
    one variant a method, named as the method (so its runs and rows keep the method's name),
    with its lr and the options it changes; the suite's settings otherwise. Each setting
    evaluates also at counts of trained responses (:func:`eval_counts`): the tuned setting up to
    ``horizon``, another up to the horizon scaled by its budget, down to a whole batch."""
    suite = {k: v for k, v in board_suite.items() if k not in ("methods", "references")}
    suite["description"] = (
        f"{board_suite.get('description', '').strip()} At the tuning rule's chosen "
        "configurations (docs/results/tuning/tuning.md), with protocol 2's equal-samples "
        "evaluations, written from the tuning records by tools/campaign/tuning.py."
    ).strip()
    batch = batch_of(board_suite)
    amounts = {s.get("label"): float(s["settings"]["budget.amount"]) for s in board_suite["tasks"]}
    settings_entries = []
    for setting in board_suite["tasks"]:  # a suite's task entries are its settings
        scaled = horizon * float(setting["settings"]["budget.amount"]) / amounts[TUNED_LABEL]
        own = horizon if setting.get("label") == TUNED_LABEL else int(scaled // batch) * batch
        fields = {**setting["settings"], "budget.eval_responses": eval_counts(own, batch)}
        settings_entries.append({**setting, "settings": fields})
    suite["tasks"] = settings_entries
    variants = [variant(method, config) for method, config in sorted(choices.items())]
    suite["methods"], suite["references"] = variants, []
    return suite


def ablation_suite(tuned: dict[str, Any], choices: dict[str, Config], ladder) -> dict[str, Any]:
    """The suite of a ladder's inner rungs (:mod:`creditbench.leaderboard.ablation`): the tuned
    suite's settings and evaluations, one variant a rung, each at the top rung's chosen lr and,
    for a rung of the top rung's own method, its chosen options too, under the rung's options.
    The bottom and top rungs are the tuned board's own rows and are not run again."""
    top = choices[ladder[-1].row]
    variants = []
    for rung in ladder[1:-1]:
        options = dict(top.options) if rung.method == top.method else {}
        config = Config(rung.method, top.lr, tuple(sorted({**options, **rung.options}.items())))
        variants.append(variant(rung.row, config))
    suite = {k: v for k, v in tuned.items() if k not in ("methods", "references")}
    suite["description"] = (
        f"The ablation rows between {ladder[0].row} and {ladder[-1].row} (docs/testbed.md, "
        f"\"OTB's ablation rows\"), at {ladder[-1].row}'s chosen configuration and the tuned "
        "board's settings, written with the tuned suite by tools/campaign/tuning.py."
    )
    suite["methods"], suite["references"] = variants, []
    return suite


def stage2_suite(stage1_suite: dict[str, Any], configs: list[Config]) -> dict[str, Any]:
    """Stage 2 as a suite: stage 1's settings, no lr grid, one variant a configuration (its
    options and its lr), the references' among them."""
    suite = {k: v for k, v in stage1_suite.items() if k not in ("grid", "methods", "references")}
    suite["description"] = (
        "Stage 2 of the tuning rule (docs/testbed.md): two more configurations a method (a "
        "scale-tied knob's two alternatives at its stage-1 lr, or that lr a quarter-decade "
        "either side), written from stage 1's records by tools/campaign/tuning.py."
    )
    variants: list[dict[str, Any]] = []
    for config in configs:
        index = sum(1 for v in variants if v["method"] == config.method) + 1
        variants.append(variant(f"{config.method}_stage2_{index}", config))
    suite["methods"], suite["references"] = variants, []
    return suite


def tuning_table(
    aucs: dict[Config, list[float]],
    methods: list[str],
    reach: dict[Config, list[float]] | None = None,
) -> str:
    """The tuning table: each method's configurations with their seeds' AUC and mean, and the
    fewest trained responses its runs reached (``reach``: protocol 2's samples horizon is the
    least of the chosen ones'). A method whose five configurations are all in at both seeds
    has its **chosen** one marked; one whose stage 1 is in, its stage-1 best ("stage 1");
    until then, no mark."""
    reach = reach or {}
    lines = [
        "# The tuning table",
        "",
        "Each method's tuning configurations with their AUC over the FLOP budget on the tuning "
        "seeds (the [tuning rule](../../testbed.md#the-tuning-rule-every-method-tuned-alike-"
        "written-before-its-runs)), and the fewest responses its runs trained within the budget "
        "(the least of the chosen ones' is protocol 2's [samples horizon](../../testbed.md#"
        "protocol-2s-equal-samples-evaluation-the-rule-written-before-its-runs)); written from "
        "the records by `tools/campaign/tuning.py`.",
        "",
        "| method | configuration | AUC, seed 22 | seed 23 | mean | responses trained | the rule |",
        "|---|---|---|---|---|---|---|",
    ]
    for method in methods:
        mine = {c: v for c, v in aucs.items() if c.method == method}
        complete = {c: v for c, v in mine.items() if len(v) == len(TUNING_SEEDS)}
        marks: dict[Config, str] = {}
        choice = chosen(aucs, method)
        if choice is not None:
            marks[choice] = "**chosen**"
        else:
            try:
                marks[stage1_best(aucs, method)] = "stage 1's best"
            except ValueError:
                pass
        for config in sorted(mine, key=lambda c: (c.options, c.lr)):
            if config in complete:
                cells = " | ".join(f"{v:.4f}" for v in mine[config])
                cells += f" | {statistics.mean(mine[config]):.4f}"
            else:  # a seed still running: no mean of the seeds that are in
                done = len(mine[config])
                cells = " | ".join(["—"] * len(TUNING_SEEDS)) + f" | {done} of 2 seeds in"
            trained = f"{min(reach[config]):.0f}" if reach.get(config) else "—"
            mark = marks.get(config, "")
            lines.append(f"| {method} | {config.label()} | {cells} | {trained} | {mark} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import yaml

    from creditbench.harness.records.files import atomic_write_text
    from creditbench.leaderboard.collect import collect_runs
    from creditbench.tools.suite import load_suite, suite_path

    parser = argparse.ArgumentParser(prog="python -m creditbench.tools.campaign.tuning")
    parser.add_argument("action", choices=("stage2", "table", "tuned"))
    parser.add_argument("records", help="the tuning runs' records folder (docs/results/tuning)")
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--ablations", help="with tuned: also write OTB's ablation rows' suite to this path"
    )
    parser.add_argument(
        "--plan", help="with stage2 or tuned: also write its campaign plan to this path"
    )
    parser.add_argument(
        "--ablations-plan", help="with tuned and --ablations: the ablation rows' campaign plan"
    )
    parser.add_argument(
        "--claims-plan", help="with tuned and --plan: the claims' own rows' campaign plan"
    )
    parser.add_argument("--pin", help="with a plan: the clean commit its runs come from")
    args = parser.parse_args(argv)
    if args.ablations and args.action != "tuned":
        parser.error("--ablations: with tuned only")
    if args.ablations_plan and not (args.ablations and args.plan):
        parser.error("--ablations-plan: with tuned, --ablations and --plan")
    if args.claims_plan and not (args.action == "tuned" and args.plan):
        parser.error("--claims-plan: with tuned and --plan")
    if (args.plan or args.pin) and (args.action == "table" or not (args.plan and args.pin)):
        parser.error("--plan and --pin: with stage2 or tuned, both together")
    paths = {"--out": args.out, "RECORDS": args.records}
    if args.ablations_plan:
        paths["--ablations"] = args.ablations
    planned = None
    if args.plan:  # checked before anything is written
        try:
            planned = plan_paths(paths, args.pin)
        except ValueError as err:
            print(f"tuning: {err}", file=sys.stderr)
            return 2
    stage1_suite = load_suite(suite_path("tuning"))
    table, _ = collect_runs([args.records])
    aucs = read_aucs(table, today_options(stage1_suite))
    methods = sorted({c.method for c in aucs})
    if args.action == "table":
        reach = read_reach(table, today_options(stage1_suite))
        atomic_write_text(args.out, tuning_table(aucs, methods, reach))
        return 0
    if args.action == "tuned":
        board = load_suite(suite_path("standard"))
        wanted = sorted(today_options(board))  # every registered method, references included
        try:
            choices = choices_of(aucs, wanted)
            reach = read_reach(table, today_options(stage1_suite))
            horizon = samples_horizon(reach, choices, batch_of(board))
        except ValueError as err:
            print(f"tuning: {err}", file=sys.stderr)
            return 2
        from creditbench.leaderboard.ablation import OTB_LADDER

        suite = tuned_suite(board, choices, horizon)
        ablations = ablation_suite(suite, choices, OTB_LADDER)
        atomic_write_text(args.out, yaml.safe_dump(suite, sort_keys=False))
        if args.ablations:
            atomic_write_text(args.ablations, yaml.safe_dump(ablations, sort_keys=False))
        if planned is not None:
            named, commit = planned
            ablation_file = named.get("--ablations", "")
            plans = protocol2_plans(named["--out"], suite, ablation_file, ablations, commit)
            atomic_write_text(args.plan, plans[0])
            if args.ablations_plan:
                atomic_write_text(args.ablations_plan, plans[1])
            if args.claims_plan:
                atomic_write_text(args.claims_plan, plans[2])
        return 0
    try:
        chosen = {m: stage1_best(aucs, m) for m in methods}
    except ValueError as err:
        print(f"tuning: stage 1 is not complete: {err}", file=sys.stderr)
        return 2
    configs = [c for m in methods for c in stage2_configs(m, chosen[m], aucs)]
    suite = stage2_suite(stage1_suite, configs)
    atomic_write_text(args.out, yaml.safe_dump(suite, sort_keys=False))
    if planned is not None:
        named, commit = planned
        text = stage2_plan(named["--out"], suite, named["RECORDS"], commit)
        atomic_write_text(args.plan, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
