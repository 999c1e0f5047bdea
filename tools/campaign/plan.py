"""A campaign's plan file (``tools/campaigns/*.yaml``) and the one loader that validates it.

::

    description: one line, what the campaign is for
    suite: standard             # the suite it runs: a shipped name, or a YAML path
    methods: [grpo, oracle]     # the suite's methods the campaign runs (default: all of them)
    records:                    # where its finished runs are kept, in the repository
      board: docs/results/standard
      claims_rows: docs/results/claims-rows  # the claims' own rows (optional)
    pages:                      # what --sync renders besides the board (optional)
      claims: docs/results/claims.md         # the claims page
      home: docs/index.md                    # the home page's headline
      methods: docs/methods                  # the method pages' "Where the mechanism acts"
      ablation: docs/methods/otb.md          # OTB's ablation block (scripts/ablation_lines.py)
    pins:                       # commit (full id): the methods it runs, in priority order
      75b6117531395d8098f8fe31a52b8f0225d0c063: [grpo, oracle]
    phases:                     # in order; each runs what is left of it
      - {setting: hard, seeds: 0-9}                     # a suite label; every pinned method
      - {setting: hard, seeds: 10-19, methods: [grpo]}  # seeds the suite does not list, too
      - {setting: easy, seeds: 0-4, methods: [grpo]}    # or some of them
      - {setting: easy, seeds: 5-9, rule: easy-seeds}   # the rows the rule chooses
      - {reproduce: oppo}       # a card's own rows, from its method's pinned commit

A plan belongs to the git repository that holds it (``tools/campaigns/`` of this checkout; a
plan outside any repository belongs to this checkout): the pinned commits are that
repository's, every method of the campaign is pinned to exactly one of them, and relative paths
are read from its root, not from the current folder. Any mistake is a `PlanError` whose one
line names the plan file and the field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from creditbench.tools.campaign.worktrees import REPOSITORY, CheckoutError, resolve_commit

PLAN_KEYS = ("description", "suite", "methods", "records", "pages", "pins", "phases")
RECORDS_KEYS = ("board", "claims_rows")
PAGES_KEYS = ("claims", "home", "methods", "tuning", "ablation")
BENCH_PHASE_KEYS = ("setting", "seeds", "methods", "rule")
RULES = ("easy-seeds",)  # docs/testbed.md, "The easy setting's seeds 5-9" (easy_seeds.py)
FULL_COMMIT = re.compile(r"[0-9a-f]{40}")
PLANS = REPOSITORY / "tools" / "campaigns"


class PlanError(ValueError):
    """A plan file that cannot be run as written; the message names the file and the field."""


@dataclass(frozen=True)
class Phase:
    """One step of a campaign: the runs of one setting at some seeds (a bench of each pinned
    commit), or a card's own rows (``reproduce``)."""

    number: int  # 1-based, as the dry run and the errors count them
    setting: str = ""  # a label of the suite's task entries (hard, easy)
    seeds: tuple[int, ...] = ()
    methods: tuple[str, ...] = ()  # the pinned methods it runs, in the pins' order
    rule: str = ""  # "easy-seeds": only the rows the rule chooses among ``methods``
    reproduce: str = ""  # a card id: its own rows, by ``creditbench reproduce CARD``
    named: bool = False  # the plan names its methods (not every pinned one)

    def describe(self) -> str:
        if self.reproduce:
            return f"phase {self.number}: the claims' own rows of {self.reproduce} (reproduce)"
        seeds = seed_text(self.seeds)
        among = f" of {', '.join(self.methods)}" if self.named else ""
        rule = f", the rows the easy-seeds rule chooses{among}" if self.rule else among
        return f"phase {self.number}: {self.setting} seeds {seeds}{rule}"


@dataclass(frozen=True)
class Plan:
    path: Path
    repo: Path  # the repository whose commits are pinned and whose records the plan keeps
    description: str
    suite: str  # as the pinned commits' bench takes it: a shipped name or an absolute path
    suite_runs: list  # the suite's runs (creditbench.tools.suite.Run), as this checkout expands it
    labels: dict[str, tuple[str, ...]]  # a setting (a task entry's label) -> its runs' labels
    methods: tuple[str, ...]
    board: Path
    claims_rows: Path | None
    pages: dict[str, Path]
    pins: dict[str, tuple[str, ...]]  # full commit id -> methods, in the file's order
    phases: tuple[Phase, ...] = field(default_factory=tuple)

    def commit_of(self, method: str) -> str:
        return next(commit for commit, methods in self.pins.items() if method in methods)

    def runs_of(self, phase: Phase, methods: tuple[str, ...] | None = None) -> list:
        """The suite's runs a bench phase covers (of ``methods`` when given)."""
        wanted = phase.methods if methods is None else methods
        labels = self.labels[phase.setting]
        return [
            run
            for run in self.suite_runs
            if run.label in labels and run.entry in wanted and run.seed in phase.seeds
        ]


def plan_path(name: str) -> Path:
    """A shipped plan by name (``standard``: ``tools/campaigns/standard.yaml``) or a YAML path."""
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml") or candidate.exists():
        if not candidate.is_file():
            raise PlanError(f"PLAN: {name} does not exist")
        return candidate
    shipped = PLANS / f"{name}.yaml"
    if not shipped.is_file():
        known = sorted(p.stem for p in PLANS.glob("*.yaml"))
        raise PlanError(f"PLAN: unknown plan {name!r}; shipped: {', '.join(known) or 'none'}")
    return shipped


def load_plan(path: Path) -> Plan:
    """The plan in ``path``, validated (module doc)."""
    from creditbench.harness.config import ConfigError, load_yaml_file

    repo = repository_of(path)
    try:
        data = load_yaml_file(path, "campaign plan")
    except ConfigError as err:
        raise PlanError(str(err)) from None
    if not isinstance(data, dict):
        raise PlanError(f"{path}: a plan is a mapping of {', '.join(PLAN_KEYS)}")

    def fail(where: str, message: str) -> PlanError:
        return PlanError(f"{path}: {where}: {message}")

    unknown = [key for key in data if key not in PLAN_KEYS]
    if unknown:
        raise fail(str(unknown[0]), f"unknown key; known: {', '.join(PLAN_KEYS)}")
    for key in ("suite", "records", "pins", "phases"):
        if key not in data:
            raise fail(key, "missing")
    suite, tasks, suite_runs = _suite(data["suite"], repo, fail)
    entries = list(dict.fromkeys(run.entry for run in suite_runs))
    methods = _names(data.get("methods", entries), "methods", fail)
    outside = [m for m in methods if m not in entries]
    if outside:
        raise fail("methods", f"{outside[0]!r} is not a method of the suite; its: {_few(entries)}")
    pins = _pins(data["pins"], methods, repo, fail)
    records = _paths(data["records"], "records", RECORDS_KEYS, repo, fail)
    if "board" not in records:
        raise fail("records", "board: missing (the folder of the board's finished runs)")
    pages = _paths(data.get("pages") or {}, "pages", PAGES_KEYS, repo, fail)
    labels = _labels(tasks, suite_runs)
    pinned = tuple(m for ms in pins.values() for m in ms)
    phases = _phases(data["phases"], pinned, labels, "claims_rows" in records, fail)
    phase_seeds = {seed for phase in phases for seed in phase.seeds}
    if phase_seeds - {run.seed for run in suite_runs}:  # the runs of every phase, planned
        _, _, suite_runs = _suite(data["suite"], repo, fail, phase_seeds)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise fail("description", "one line of text")
    return Plan(
        path=path,
        repo=repo,
        description=" ".join(description.split()),
        suite=suite,
        suite_runs=suite_runs,
        labels=labels,
        methods=methods,
        board=records["board"],
        claims_rows=records.get("claims_rows"),
        pages=pages,
        pins=pins,
        phases=phases,
    )


def repository_of(path: Path) -> Path:
    """The root of the git repository holding ``path``; this checkout's when none does."""
    import subprocess

    found = subprocess.run(
        ["git", "-C", str(Path(path).absolute().parent), "rev-parse", "--show-toplevel"],
        capture_output=True,
        text=True,
        check=False,
    )
    return Path(found.stdout.strip()) if found.returncode == 0 else REPOSITORY


def _suite(value: Any, repo: Path, fail, seeds: Iterable[int] = ()) -> tuple[str, list, list]:
    """The suite as a bench argument, its task entries, and its runs: at its own seeds and at
    ``seeds`` (a phase may run seeds the suite does not list, as bench's ``--seeds`` does: the
    confirmatory ones)."""
    from creditbench.tools.suite import SuiteError, expand_suite, load_suite, suite_path

    if not isinstance(value, str) or not value:
        raise fail("suite", "a shipped suite's name or a YAML path")
    name = value
    if value.endswith((".yaml", ".yml")):
        name = str(_under(repo, value))  # the pinned commits' bench runs in another folder
    try:
        found = suite_path(name)
        definition = load_suite(found)
        if set(seeds) - set(definition.get("seeds") or ()):
            definition = {**definition, "seeds": sorted({*definition["seeds"], *seeds})}
        return name, list(definition.get("tasks") or []), expand_suite(definition, found)
    except SuiteError as err:
        raise fail("suite", str(err).removeprefix("--suite: ")) from None


def _labels(tasks: list, runs: list) -> dict[str, tuple[str, ...]]:
    """``{a task entry's label: the labels of its runs}`` (``hard``: ``chain-hard-steps=10-...``;
    an entry sweeping an option has one a value); entries without a label cannot be named."""
    labels: dict[str, tuple[str, ...]] = {}
    for entry in tasks:
        if isinstance(entry, dict) and entry.get("label"):
            start = f"{entry['name']}-{entry['label']}"
            found = [r.label for r in runs if r.label == start or r.label.startswith(f"{start}-")]
            labels[str(entry["label"])] = tuple(dict.fromkeys(found))
    return labels


def _under(repo: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else repo / path


def _names(value: Any, where: str, fail) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise fail(where, f"a non-empty list of method names (got {value!r})")
    twice = sorted({v for v in value if value.count(v) > 1})
    if twice:
        raise fail(where, f"{twice[0]!r} is listed twice")
    return tuple(value)


def _few(names: list[str]) -> str:
    return ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")


def _pins(value: Any, methods: tuple[str, ...], repo: Path, fail) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict) or not value:
        raise fail("pins", "a mapping of full commit ids to the methods each runs")
    pins: dict[str, tuple[str, ...]] = {}
    commit_of: dict[str, str] = {}
    for commit, names in value.items():
        if not isinstance(commit, str):  # YAML read digits alone as a number
            raise fail("pins", f"{commit!r}: a full commit id; quote it")
        if not FULL_COMMIT.fullmatch(commit):
            raise fail(
                "pins", f"{commit!r}: a full commit id, 40 hex digits (git rev-parse {commit})"
            )
        try:
            resolve_commit(commit, repo)
        except CheckoutError as err:
            raise fail(f"pins: {commit[:7]}", str(err)) from None
        names = _names(names, f"pins: {commit[:7]}", fail)
        for name in names:
            if name not in methods:
                raise fail(
                    f"pins: {commit[:7]}",
                    f"{name!r} is not a method of the campaign; its: {_few(list(methods))}",
                )
            if name in commit_of:
                raise fail(
                    "pins", f"{name!r} is pinned twice ({commit_of[name][:7]}, {commit[:7]})"
                )
            commit_of[name] = commit
        pins[commit] = names
    missing = [m for m in methods if m not in commit_of]
    if missing:
        raise fail("pins", f"no pinned commit for {', '.join(missing)}: pin each method once")
    return pins


def _paths(value: Any, where: str, keys: tuple[str, ...], repo: Path, fail) -> dict[str, Path]:
    if not isinstance(value, dict):
        raise fail(where, f"a mapping of {', '.join(keys)} to paths")
    out = {}
    for key, path in value.items():
        if key not in keys:
            raise fail(f"{where}: {key}", f"unknown key; known: {', '.join(keys)}")
        if not isinstance(path, str) or not path:
            raise fail(f"{where}: {key}", f"a path (got {path!r})")
        out[key] = _under(repo, path)
    return out


def _phases(
    value: Any, pinned: tuple[str, ...], labels: dict, claims_rows: bool, fail
) -> tuple[Phase, ...]:
    if not isinstance(value, list) or not value:
        raise fail("phases", "a non-empty list of phases")
    phases = []
    for number, item in enumerate(value, start=1):
        where = f"phases: phase {number}"
        if isinstance(item, dict) and "reproduce" in item:
            if not claims_rows:
                raise fail(f"{where}: reproduce", "the plan names no records: claims_rows for it")
            phases.append(_reproduce_phase(item, number, pinned, where, fail))
            continue
        if not isinstance(item, dict):
            raise fail(where, "a mapping: {setting, seeds, methods, rule} or {reproduce: CARD}")
        unknown = [key for key in item if key not in BENCH_PHASE_KEYS]
        if unknown:
            known = ", ".join(BENCH_PHASE_KEYS)
            raise fail(f"{where}: {unknown[0]}", f"unknown key; known: {known}, or reproduce")
        setting = item.get("setting")
        if setting not in labels:
            raise fail(f"{where}: setting", f"{setting!r}; the suite's: {', '.join(labels)}")
        seeds = _seeds(item.get("seeds"), f"{where}: seeds", fail)
        methods = pinned
        if "methods" in item:
            chosen = _names(item["methods"], f"{where}: methods", fail)
            unpinned = [m for m in chosen if m not in pinned]
            if unpinned:
                raise fail(f"{where}: methods", f"{unpinned[0]!r} is not pinned (pins)")
            methods = tuple(m for m in pinned if m in chosen)  # benches go in the pins' order
        rule = item.get("rule", "")
        if rule and rule not in RULES:
            raise fail(f"{where}: rule", f"{rule!r}; known: {', '.join(RULES)}")
        if rule and setting != "easy":
            raise fail(f"{where}: rule", "the easy-seeds rule chooses seeds of the easy setting")
        phases.append(Phase(number, str(setting), seeds, methods, rule, named="methods" in item))
    return tuple(phases)


def _reproduce_phase(item: dict, number: int, pinned: tuple[str, ...], where: str, fail) -> Phase:
    from creditbench.reference.cards import CardError, load_cards

    if set(item) != {"reproduce"}:
        extra = sorted(set(item) - {"reproduce"})[0]
        raise fail(f"{where}: {extra}", "a reproduce phase is {reproduce: CARD} alone")
    card = item["reproduce"]
    try:
        cards = load_cards()
    except CardError as err:
        raise fail(f"{where}: reproduce", str(err)) from None
    if card not in cards:
        raise fail(f"{where}: reproduce", f"no card {card!r}; cards: {_few(sorted(cards))}")
    if card not in pinned:  # its own rows run from the commit that ran its method's rows
        raise fail(f"{where}: reproduce", f"the card's method {card!r} is not pinned (pins)")
    return Phase(number, reproduce=card)


def _seeds(value: Any, where: str, fail) -> tuple[int, ...]:
    from creditbench.tools.suite import SuiteError, parse_seeds

    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, list) and value and all(_is_seed(s) for s in value):
        return tuple(dict.fromkeys(value))
    if isinstance(value, str):
        try:
            return tuple(parse_seeds(value))
        except SuiteError:
            pass
    raise fail(where, f"{value!r}: seeds and ranges like 0-4 or 0,2,5-7, or a list")


def _is_seed(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def seed_text(seeds: tuple[int, ...]) -> str:
    """``(0, 1, 2, 3, 4)`` -> ``0-4``; other sets as a comma list: the bench's ``--seeds``."""
    if len(seeds) > 1 and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))
