"""The tuning rule's choices, made from the records (docs/testbed.md, "The tuning rule").

    python -m creditbench.tools.campaign.tuning stage2 RECORDS --out tools/suites/tuning-stage2.yaml
        [--plan tools/campaigns/tuning-stage2.yaml --pin COMMIT]
    python -m creditbench.tools.campaign.tuning table RECORDS --out RECORDS/tuning.md
    python -m creditbench.tools.campaign.tuning tuned RECORDS --out tools/suites/standard-tuned.yaml
        [--ablations tools/suites/otb-ablation.yaml]

Stage 1 ran every method at three lrs (``tools/suites/tuning.yaml``) on the tuning seeds; its
best lr is the highest mean AUC over the seeds, a difference under :data:`TIE` resolved toward
today's lr. Stage 2 adds two configurations a method at that lr (:func:`stage2_configs`): a
scale- or budget-tied knob's two alternatives (:data:`KNOB_ALTERNATIVES`), or the lr refined a
quarter-decade either side. The chosen configuration is the best of a method's five, ties
resolved toward fewer changes from today's. A configuration is read from each run's own config
(its lr and method options), never from its name. Once every method's five are in, ``tuned``
writes the board's suite at the chosen configurations (:func:`tuned_suite`), and with
``--ablations`` the suite of OTB's ablation rows at OTB's chosen configuration
(:func:`ablation_suite`, docs/testbed.md, "OTB's ablation rows").
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass, field
from typing import Any

TUNING_SEEDS = (22, 23)
STAGE1_LRS = (1.5e-5, 5e-5, 1.5e-4)
TODAY_LR = 5e-5  # the standard suite's lr: ties go toward it
TIE = 0.002  # a mean-AUC difference under this is a tie
REFINE = 10**0.25  # stage 2's lr refinement, a quarter-decade

# The knob alternatives the rule's table gives (docs/testbed.md, "The tuning rule"); SDPO's one
# alternative prompt leaves its second stage-2 configuration to the lr (see stage2_configs)
SEQUENCE_CLIPS = [{"eps_low": 1e-3, "eps_high": 1.33e-3}, {"eps_low": 3e-3, "eps_high": 4e-3}]
KNOB_ALTERNATIVES: dict[str, list[dict[str, Any]]] = {
    "gspo": SEQUENCE_CLIPS,
    "ccpo": SEQUENCE_CLIPS,
    "prime": [{"beta": 0.017}, {"beta": 0.15}],
    "vineppo": [{"rollouts_per_state": 2}, {"rollouts_per_state": 8}],
    "spo": [{"rollouts_per_state": 2}, {"rollouts_per_state": 4}],
    "pppo": [{"continuations": 4}, {"continuations": 16}],
    "int": [{"continuations": 2}, {"continuations": 8}],
    "sdpo": [{"reprompt": "hint"}],
}


@dataclass(frozen=True)
class Config:
    """One tuning configuration of a method: its lr and the options it changes."""

    method: str
    lr: float
    options: tuple[tuple[str, Any], ...] = field(default=())

    def changes(self) -> int:
        """How far from today's: options changed, plus one when the lr is not today's."""
        return len(self.options) + (not math.isclose(self.lr, TODAY_LR))

    def label(self) -> str:
        knobs = ", ".join(f"{k}={v}" for k, v in self.options)
        return f"lr {self.lr:.3g}" + (f", {knobs}" if knobs else "")


def config_of(config: dict[str, Any], defaults: dict[str, dict[str, Any]]) -> Config:
    """A run's configuration from its config (JSON): its method, lr and the options it changes
    from ``defaults`` (each method's default options)."""
    method = config["method"]
    default = defaults.get(method, {})
    changed = tuple(
        sorted(
            (k, _hashable(v))
            for k, v in config.get("method_options", {}).items()
            # JSON gives a list where the default is a tuple (SCAPO's rewrites): the same
            if _hashable(default.get(k, v)) != _hashable(v)
        )
    )
    return Config(method, float(config["train"]["lr"]), changed)


def read_aucs(table, defaults: dict[str, dict[str, Any]]) -> dict[Config, list[float]]:
    """``{configuration: [AUC of each tuning seed]}`` from a records table (``runs.csv``'s
    ``kind == "run"`` rows: ``seed``, ``auc``, ``config`` as JSON). ``defaults``: each method's
    default options, so that a configuration names only the options it changes."""
    by_seed: dict[Config, dict[int, float]] = {}
    for _, row in table[table["kind"] == "run"].iterrows():
        if int(row["seed"]) not in TUNING_SEEDS or row["auc"] != row["auc"]:  # NaN: no AUC
            continue
        key = config_of(json.loads(row["config"]), defaults)
        by_seed.setdefault(key, {})[int(row["seed"])] = float(row["auc"])
    # in seed order, whatever the records' order: the table's columns are the seeds
    return {key: [aucs[seed] for seed in sorted(aucs)] for key, aucs in by_seed.items()}


def read_reach(table, defaults: dict[str, dict[str, Any]]) -> dict[Config, list[float]]:
    """``{configuration: [trained responses by the last evaluation, each tuning run]}``: how
    far along the samples axis each configuration's runs got within the budget."""
    evals = table[table["kind"] == "eval"]
    reached = evals.groupby("run")["responses_trained"].max()
    out: dict[Config, list[float]] = {}
    for _, row in table[table["kind"] == "run"].iterrows():
        if int(row["seed"]) not in TUNING_SEEDS or row["run"] not in reached.index:
            continue
        key = config_of(json.loads(row["config"]), defaults)
        out.setdefault(key, []).append(float(reached[row["run"]]))
    return out


def _hashable(value: Any) -> Any:
    """An option's value as a key part and as compared: a list or tuple as a tuple."""
    if isinstance(value, list | tuple):
        return tuple(_hashable(item) for item in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def best(configs: dict[Config, list[float]]) -> Config:
    """The highest mean AUC; a difference under :data:`TIE` goes to fewer changes from today's,
    then to the lr nearer today's (on a log scale)."""
    means = {c: statistics.mean(v) for c, v in configs.items()}
    top = max(means.values())
    tied = [c for c, m in means.items() if top - m < TIE]
    return min(tied, key=lambda c: (c.changes(), abs(math.log(c.lr / TODAY_LR)), -means[c]))


def stage1_best(aucs: dict[Config, list[float]], method: str) -> Config:
    """A method's stage-1 choice among its three lrs at today's knobs, once both seeds of every
    lr are in (ValueError naming what is missing otherwise)."""
    stage1 = {c: v for c, v in aucs.items() if c.method == method and not c.options}
    for lr in STAGE1_LRS:
        runs = next((v for c, v in stage1.items() if math.isclose(c.lr, lr)), [])
        if len(runs) < len(TUNING_SEEDS):
            raise ValueError(f"{method}: stage 1 at lr {lr:g} has {len(runs)} of 2 seeds")
    return best({c: v for c, v in stage1.items() if any(math.isclose(c.lr, x) for x in STAGE1_LRS)})


def stage2_configs(method: str, chosen: Config, aucs: dict[Config, list[float]]) -> list[Config]:
    """The two stage-2 configurations of ``method`` at its stage-1 lr."""
    knobs = KNOB_ALTERNATIVES.get(method, [])
    out = [Config(method, chosen.lr, tuple(sorted(k.items()))) for k in knobs]
    if len(out) == 2:
        return out
    if not out:  # no knob: the lr a quarter-decade either side
        return [
            Config(method, rounded(chosen.lr / REFINE)),
            Config(method, rounded(chosen.lr * REFINE)),
        ]
    # one alternative (SDPO's prompt): the lr refined toward the better stage-1 neighbour
    means = {
        c.lr: statistics.mean(v) for c, v in aucs.items() if c.method == method and not c.options
    }
    lower = [lr for lr in means if lr < chosen.lr * 0.99]
    upper = [lr for lr in means if lr > chosen.lr * 1.01]
    below = means[max(lower)] if lower else -math.inf
    above = means[min(upper)] if upper else -math.inf
    refined = chosen.lr * REFINE if above > below else chosen.lr / REFINE
    return [*out, Config(method, rounded(refined))]


def stage1_configs(aucs: dict[Config, list[float]], method: str) -> list[Config]:
    """A method's stage-1 configurations in the records: the three lrs at today's knobs."""
    return [
        c
        for c in aucs
        if c.method == method and not c.options and any(math.isclose(c.lr, x) for x in STAGE1_LRS)
    ]


def chosen(aucs: dict[Config, list[float]], method: str) -> Config | None:
    """The rule's choice for ``method``: the best of its five configurations (stage 1's three
    and stage 2's two), once all five are in at both seeds; None before."""
    try:
        first = stage1_best(aucs, method)
    except ValueError:
        return None
    five = [*stage1_configs(aucs, method), *stage2_configs(method, first, aucs)]
    complete = {c: aucs[c] for c in five if len(aucs.get(c, [])) == len(TUNING_SEEDS)}
    return best(complete) if len(complete) == len(five) else None


def choices_of(aucs: dict[Config, list[float]], methods: list[str]) -> dict[str, Config]:
    """Every method's choice (:func:`chosen`); ValueError naming the methods without one."""
    choices = {m: chosen(aucs, m) for m in methods}
    missing = [m for m, c in choices.items() if c is None]
    if missing:
        raise ValueError(f"no choice yet (5 configurations at 2 seeds) for {', '.join(missing)}")
    return {m: c for m, c in choices.items() if c is not None}


# Protocol 2's equal-samples evaluation (docs/testbed.md): the compute axis's four later points,
# a quarter of the horizon apart, so both axes read the curve alike, with the same noise
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


def rounded(lr: float) -> float:
    """An lr to 4 significant digits: what the stage-2 suite writes and its runs record, so a
    configuration read back from the records is the one planned, float for float."""
    return float(f"{lr:.4g}")


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


def stage2_plan(suite_file: str, suite: dict[str, Any], records: str, commit: str) -> str:
    """Stage 2's campaign plan (docs/campaign.md): every configuration of ``suite`` (written to
    ``suite_file``, relative to the repository) pinned to ``commit``, on the tuning seeds in
    the hard setting, its runs kept in ``records`` beside stage 1's, whose tuning table its sync
    renders again."""
    import yaml

    names = [entry["name"] for entry in suite["methods"]]
    plan = {
        "description": (
            f"Stage 2 of the tuning rule (docs/testbed.md): two more configurations a method (a "
            f"scale-tied knob's two alternatives at its stage-1 lr, or that lr a quarter-decade "
            f"either side), hard setting, tuning seeds {TUNING_SEEDS[0]}-{TUNING_SEEDS[-1]} "
            f"({len(names) * len(TUNING_SEEDS)} runs), from one clean commit later than stage "
            "1's (the rule's note on stage 2)."
        ),
        "suite": suite_file,
        "records": {"board": records},
        "pages": {"tuning": f"{records}/tuning.md"},
        "pins": {commit: names},
        "phases": [{"setting": "hard", "seeds": f"{TUNING_SEEDS[0]}-{TUNING_SEEDS[-1]}"}],
    }
    head = (
        "# The tuning rule's stage 2, written with its suite by tools/campaign/tuning.py from "
        "stage 1's records:\n# `creditbench campaign tuning-stage2 --dry-run`.\n"
    )
    return head + yaml.safe_dump(plan, sort_keys=False, width=100)


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


def today_options(suite: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each registered method's options as today's runs use them: its defaults under the suite's
    ``method_options`` (VinePPO's 4 continuations): what a configuration changes is read
    against these."""
    from dataclasses import asdict

    from creditbench.harness.config import build_method_config
    from creditbench.methods.registry import list_methods

    overrides = suite.get("method_options") or {}
    return {
        name: {**asdict(build_method_config(cls, {})), **overrides.get(name, {})}
        for name, cls in list_methods().items()
    }


def plan_paths(out: str, records: str, pin: str) -> tuple[str, str, str]:
    """``(suite file, records folder, commit)`` as stage 2's plan names them: the two paths
    relative to the repository (a plan reads its paths from its root), the commit's full id;
    ValueError naming the argument that cannot be."""
    from pathlib import Path

    from creditbench.tools.campaign.worktrees import REPOSITORY, CheckoutError, resolve_commit

    named = {}
    for flag, value in (("--out", out), ("RECORDS", records)):
        path = Path(value).resolve()
        if not path.is_relative_to(REPOSITORY):
            raise ValueError(f"{flag}: {value} lies outside the repository, where a plan reads")
        named[flag] = path.relative_to(REPOSITORY).as_posix()
    try:
        commit = resolve_commit(pin)
    except CheckoutError as err:
        raise ValueError(f"--pin: {err}") from None
    return named["--out"], named["RECORDS"], commit


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
    parser.add_argument("--plan", help="with stage2: also write its campaign plan to this path")
    parser.add_argument("--pin", help="with --plan: the clean commit stage 2 runs from")
    args = parser.parse_args(argv)
    if args.ablations and args.action != "tuned":
        parser.error("--ablations: with tuned only")
    if (args.plan or args.pin) and (args.action != "stage2" or not (args.plan and args.pin)):
        parser.error("--plan and --pin: with stage2, both together")
    planned = None
    if args.plan:  # checked before anything is written
        try:
            planned = plan_paths(args.out, args.records, args.pin)
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
        suite = tuned_suite(board, choices, horizon)
        atomic_write_text(args.out, yaml.safe_dump(suite, sort_keys=False))
        if args.ablations:
            from creditbench.leaderboard.ablation import OTB_LADDER

            ablations = ablation_suite(suite, choices, OTB_LADDER)
            atomic_write_text(args.ablations, yaml.safe_dump(ablations, sort_keys=False))
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
        suite_file, records, commit = planned
        atomic_write_text(args.plan, stage2_plan(suite_file, suite, records, commit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
