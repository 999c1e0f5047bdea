"""What a suite is: a YAML file of methods x seeds x task settings, and the runs it expands to.

A suite is a YAML file in ``tools/suites/`` (or any path)::

    description: one line
    methods: all             # every registered method that is not a reference, or a list
                             # of names and named variants:
                             #   {name: dapo_oppo, method: oppo, options: {base: dapo}}
                             # a variant may fix config fields of its own runs (they win over
                             # the suite's and the task entry's settings):
                             #   {name: gspo_tuned, method: gspo, settings: {train.lr: 1.5e-4}}
    references: [oracle]     # reference methods to add ("all": every one), default none
    method_options: {vineppo: {rollouts_per_state: 4}}   # options of a method wherever it
                             # runs (a variant's own options win)
    seeds: [0, 1, 2]
    tasks:
      - name: chain
        options: {steps: [4, 8]}      # a list sweeps the option
    grid: {rollout.prompts_per_step: [4, 16]}   # config fields swept for every run
    settings: {eval.n_problems: 200}  # config fields fixed for every run
    budget: {unit: flops, amount: 2.0e13}

A task entry may also carry its own ``grid`` (replacing the suite's for that entry) and
``settings`` (added to the suite's), so one suite can sweep lengths at one batch size and batch
sizes at one length, and a ``label`` that names its runs (``chain-hard-steps=8-grpo-s0``): two
entries of one task that differ only in their settings (a base policy stopped earlier) need one.

``expand_suite`` turns it into :class:`Run` s, each a ``creditbench train`` config; ``--only``
patterns select some (``select_runs``), and ``RESULTS/suite-<name>.json`` lists every run of the
suite (``write_manifest``). Running them is :mod:`.bench`'s.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

SUITE_KEYS = (
    "description",
    "methods",
    "references",
    "method_options",
    "seeds",
    "tasks",
    "grid",
    "settings",
    "budget",
)


class SuiteError(ValueError):
    """A suite file or a bench argument is wrong; the message names the key."""


@dataclass
class Run:
    name: str
    method: str
    task: str
    seed: int
    overrides: list[str]  # key=value, values as JSON
    label: str  # the task setting and grid point, for the summary table
    entry: str = ""  # the suite's name for the method: its registry name or a variant's name

    def __post_init__(self) -> None:
        self.entry = self.entry or self.method


def suite_path(name: str) -> Path:
    """A shipped suite by name, or a YAML file path."""
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml") or candidate.exists():
        if not candidate.is_file():
            raise SuiteError(f"--suite: {name} does not exist")
        return candidate
    shipped = resources.files("creditbench.tools") / "suites" / f"{name}.yaml"
    if not shipped.is_file():
        known = sorted(
            p.name[:-5]
            for p in (resources.files("creditbench.tools") / "suites").iterdir()
            if p.name.endswith(".yaml")
        )
        raise SuiteError(f"--suite: unknown suite {name!r}; known: {', '.join(known)}")
    return Path(str(shipped))


def load_suite(path: Path) -> dict[str, Any]:
    from creditbench.harness.config import ConfigError, load_yaml_file

    try:
        data = load_yaml_file(path, "suite")
    except ConfigError as err:
        raise SuiteError(str(err)) from None
    if not isinstance(data, dict):
        raise SuiteError(f"{path}: a suite is a mapping")
    for key in data:
        if key not in SUITE_KEYS:
            raise SuiteError(f"{path}: unknown key {key!r}; known: {', '.join(SUITE_KEYS)}")
    return data


def _sweep(mapping: dict[str, Any]) -> list[dict[str, Any]]:
    """Every combination of a mapping whose list values are swept."""
    keys = list(mapping)
    values = [v if isinstance(v, list) else [v] for v in mapping.values()]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]


def _slug(mapping: dict[str, Any]) -> str:
    parts = [f"{k.split('.')[-1]}={v}" for k, v in mapping.items()]
    return re.sub(r"[^A-Za-z0-9._+=-]", "", "-".join(parts))


def _mapping(value: Any, path: Path, where: str) -> dict[str, Any]:
    """``value`` as a mapping (absent or null: empty); `SuiteError` naming ``where`` when it is
    anything else."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SuiteError(
            f"{path}: {where}: a mapping of keys to values (got {type(value).__name__})"
        )
    return dict(value)


def expand_suite(suite: dict[str, Any], path: Path, extra: Sequence[str] = ()) -> list[Run]:
    """The runs of a suite, in a fixed order."""
    from creditbench.methods.registry import list_methods

    registry = list_methods()
    methods = suite.get("methods", "all")
    if methods == "all":
        methods = [n for n, cls in registry.items() if not cls.reference]
    references = suite.get("references") or []
    if references == "all":
        references = [n for n, cls in registry.items() if cls.reference]
    if not isinstance(methods, list) or not isinstance(references, list):
        raise SuiteError(f"{path}: methods and references are 'all' or a list of names")
    if not methods and not references:
        raise SuiteError(f"{path}: methods: name at least one method (or 'all')")
    defaults = suite.get("method_options") or {}
    if not isinstance(defaults, dict) or not all(
        isinstance(v, dict) and k in registry for k, v in defaults.items()
    ):
        raise SuiteError(
            f"{path}: method_options: a mapping of registered method names to option mappings"
        )
    entries = [
        (name, method, {**defaults.get(method, {}), **options}, settings)
        for name, method, options, settings in (
            method_entry(item, registry, path) for item in [*methods, *references]
        )
    ]
    names = [name for name, _, _, _ in entries]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SuiteError(f"{path}: methods: {twice[0]!r} is listed twice")
    seeds = suite.get("seeds", [0])
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    ):
        raise SuiteError(f"{path}: seeds: a non-empty list of integers (got {seeds!r})")
    tasks = suite.get("tasks", [{"name": "chain"}])
    if not isinstance(tasks, list) or not tasks:
        raise SuiteError(
            f"{path}: tasks: a non-empty list of task entries (leave it out for the chain task)"
        )
    fixed = _mapping(suite.get("settings"), path, "settings")
    budget = _mapping(suite.get("budget"), path, "budget")
    fixed.update({f"budget.{k}": v for k, v in budget.items()})
    grid = _sweep(_mapping(suite.get("grid"), path, "grid"))
    runs = []
    for task_spec in tasks:
        if not isinstance(task_spec, dict) or "name" not in task_spec:
            raise SuiteError(f"{path}: tasks: each entry needs a name")
        unknown = set(task_spec) - {"name", "label", "options", "grid", "settings"}
        if unknown:
            raise SuiteError(
                f"{path}: tasks: unknown key {sorted(unknown)[0]!r}; known: name, label, "
                "options, grid, settings"
            )
        tag = task_spec.get("label", "")
        if tag and not re.fullmatch(r"[a-z][a-z0-9]*", str(tag)):
            raise SuiteError(f"{path}: tasks: a label is a-z, 0-9 (got {tag!r})")
        where = f"tasks: {task_spec['name']}"
        task_grid = (
            _sweep(_mapping(task_spec["grid"], path, f"{where}: grid"))
            if "grid" in task_spec
            else grid
        )
        task_fixed = {**fixed, **_mapping(task_spec.get("settings"), path, f"{where}: settings")}
        for options in _sweep(_mapping(task_spec.get("options"), path, f"{where}: options")):
            for point in task_grid:
                parts = (task_spec["name"], tag, _slug(options), _slug(point))
                label = "-".join(x for x in parts if x)
                for entry, method, method_options, own in entries:
                    for seed in seeds:
                        settings = {**task_fixed, **point, **own, "task_options": options}
                        overrides = [f"{k}={json.dumps(v)}" for k, v in settings.items()]
                        overrides += [
                            f"method_options.{k}={json.dumps(v)}" for k, v in method_options.items()
                        ]
                        runs.append(
                            Run(
                                name=f"{label}-{entry}-s{seed}",
                                method=method,
                                task=task_spec["name"],
                                seed=seed,
                                overrides=[*overrides, *extra],
                                label=label,
                                entry=entry,
                            )
                        )
    names = [run.name for run in runs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SuiteError(
            f"{path}: tasks: two runs are both named {twice[0]!r}; give the task entries "
            "that differ only in their settings a label"
        )
    return runs


def method_entry(item: Any, registry: dict[str, Any], path: Path) -> tuple[str, str, dict, dict]:
    """(run name, registry name, method options, config settings) of a suite's method entry:
    a registry name, or a named variant ``{name, method, options, settings}``."""
    settings: Any = {}
    if isinstance(item, dict):
        unknown = set(item) - {"name", "method", "options", "settings"}
        if unknown or "name" not in item or "method" not in item:
            raise SuiteError(
                f"{path}: methods: a variant is {{name, method, options, settings}} (got {item!r})"
            )
        name, method, options = item["name"], item["method"], item.get("options") or {}
        settings = item.get("settings") or {}
        if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            raise SuiteError(f"{path}: methods: a variant's name is a-z, 0-9, _ (got {name!r})")
        if not isinstance(options, dict):
            raise SuiteError(f"{path}: methods: {name}.options must be a mapping")
        if not isinstance(settings, dict) or not all(isinstance(k, str) for k in settings):
            raise SuiteError(
                f"{path}: methods: {name}.settings must map config fields (train.lr) to values"
            )
    elif isinstance(item, str):
        name, method, options = item, item, {}
    else:
        raise SuiteError(f"{path}: methods: expected a name or a variant, got {item!r}")
    if method not in registry:
        raise SuiteError(
            f"{path}: methods: unknown method {method!r}; known: {', '.join(registry)}"
        )
    return name, method, dict(options), dict(settings)


def run_config(run: Run, results: Path):
    from creditbench.harness.config import load_config

    base = [f"method={run.method}", f"task={run.task}", f"seed={run.seed}"]
    base += [f"output_dir={json.dumps(str(results))}", f"run_name={run.name}"]
    return load_config(None, [*base, *run.overrides])


def select_runs(runs: list[Run], patterns: list[str]) -> list[Run]:
    """The runs whose names match a glob in ``patterns`` (all runs when there are none), in the
    order of the first pattern each matches, so ``--only '*-grpo-*' --only '*'`` runs GRPO first.
    """
    if not patterns:
        return runs
    matches = [r for p in patterns for r in runs if fnmatch.fnmatchcase(r.name, p)]
    selected = list({r.name: r for r in matches}.values())  # a dict keeps first insertions
    if not selected:
        example = runs[0].name if runs else "none"
        raise SuiteError(
            f"--only: {', '.join(patterns)} matches no run of the suite (names look like {example})"
        )
    return selected


def suite_manifest(suite: str, runs: Iterable[tuple[str, str]], plan: str | None = None) -> dict:
    """A suite manifest's JSON (``suite-<name>.json``, read by
    :func:`creditbench.leaderboard.suite_manifests.read_suite_manifest`): the suite's runs as ``(run
    name, setting)`` and, for a campaign that runs part of it by a rule, the rule."""
    manifest: dict = {"suite": suite}
    if plan:
        manifest["plan"] = plan
    manifest["runs"] = [{"name": name, "setting": setting} for name, setting in runs]
    return manifest


def write_manifest(results_dir: Path, path: Path, runs: list[Run]) -> None:
    """Record every run of the suite, so a partly run folder says what it is missing. The runs
    an earlier manifest of the same suite lists stay listed (another ``--seeds`` set of it in
    the same folder adds to them)."""
    from creditbench.harness.records.rundir import atomic_write_text
    from creditbench.leaderboard.suite_manifests import read_suite_manifest

    results_dir.mkdir(parents=True, exist_ok=True)
    target = results_dir / f"suite-{path.stem}.json"
    earlier = read_suite_manifest(target)  # none yet, or unreadable: this suite's runs replace it
    listed = dict(earlier.runs) if earlier is not None else {}
    listed |= {r.name: r.label for r in runs}
    text = json.dumps(suite_manifest(path.stem, listed.items()), indent=1) + "\n"
    atomic_write_text(target, text)


# Bounds of ``--seeds``, checked before a range is expanded (``0-1000000000`` would fill the
# memory): a seed is a config's (below 2**32, harness/config.py), and 10,000 runs a setting and
# method is more than any campaign here plans (the standard board's 20 seeds; ours).
MAX_SEED = 2**32 - 1
MAX_SEEDS = 10_000


def parse_seeds(text: str) -> list[int]:
    """``--seeds``: comma-separated seeds and inclusive ranges, ``10-19`` or ``0,2,5-7``; each
    seed at most :data:`MAX_SEED`, at most :data:`MAX_SEEDS` of them."""
    seeds: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high) if dash else int(low)
        except ValueError:
            first, last = -1, -1
        if first < 0 or last < first:
            raise SuiteError(f"--seeds: {text!r}: seeds and ranges like 10-19 or 0,2,5-7")
        if last > MAX_SEED:
            raise SuiteError(f"--seeds: {text!r}: a seed is at most {MAX_SEED} (got {last})")
        if len(seeds) + last - first + 1 > MAX_SEEDS:
            raise SuiteError(f"--seeds: {text!r}: at most {MAX_SEEDS} seeds")
        seeds.extend(range(first, last + 1))
    return list(dict.fromkeys(seeds))
