"""The tuning rule's choices, made from the records (docs/testbed.md, "The tuning rule").

Stage 1 ran every method at three lrs (``tools/suites/tuning.yaml``) on the tuning seeds; its
best lr is the highest mean AUC over the seeds, a difference under :data:`TIE` resolved toward
today's lr (:func:`stage1_best`). Stage 2 adds two configurations a method at that lr
(:func:`stage2_configs`): a scale- or budget-tied knob's two alternatives
(:data:`KNOB_ALTERNATIVES`), or the lr refined a quarter-decade either side. The chosen
configuration is the best of a method's five, ties resolved toward fewer changes from today's
(:func:`chosen`). A configuration is read from each run's own config (its lr and method
options), never from its name. What the choices are written into (the suites, plans and the
tuning table) is :mod:`.tuning`.
"""

from __future__ import annotations

import json
import math
import statistics
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


def rounded(lr: float) -> float:
    """An lr to 4 significant digits: what the stage-2 suite writes and its runs record, so a
    configuration read back from the records is the one planned, float for float."""
    return float(f"{lr:.4g}")


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
