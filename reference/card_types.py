"""The parts of a paper card as Python values: the vocabulary a card is written in (tags,
roles, metrics, axes, caveats, recipe fields) and the frozen dataclasses a checked card is made of.

:mod:`.cards` describes the file format and loads the files; :mod:`.card_schema` checks a card's
mapping field by field into these types. Both import this module, and it imports neither, so
the three form no cycle.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLAIM_SETTINGS = ("hard", "easy")  # the standard suite's labels (tools/suites/standard.yaml)
# What a paper holds equal when it compares two methods (module doc)
AXES = ("compute", "samples", "steps", "wall-clock")
# What limits the testbed's reading of a claim: kind -> the words every page prints
CAVEATS = {
    "inert": "mechanism inert here",
    "lora": "a LoRA-only claim",
    "moe": "an MoE-only claim",
    "two-agent": "a two-agent claim",
    "abstract": "a claim inferred from an abstract",
}
# The caveats that leave the testbed unable to make the claim's comparison at all
UNTESTABLE = ("lora", "moe", "two-agent")
UNKNOWN = "unknown"
TAGS = ("paper", "code", "inferred")
ROLES = ("proposed", "baseline", "anchor")
NAMED_METRICS = ("accuracy", "tests_passed", "unknown")
METRIC_PATTERN = re.compile(r"^(pass|avg|maj|discovery)@\d+$")
ARXIV_PATTERN = re.compile(r"^\d{4}\.\d{4,5}(v\d+)?$")
IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")
SETTING_KEY = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
HARDWARE_PATTERN = re.compile(r"^(?:(\d+) x )?GPU with >= (\d+) GiB$")

# Recipe fields and the kind of value each holds.
RECIPE_FIELDS = {
    "base_model": "text",
    "training_data": "text",
    "group_size": "number",
    "prompts_per_step": "number",
    "learning_rate": "number",
    "max_response_length": "number",
    "temperature": "number",
    "steps_or_budget": "text or number",
    "kl_coef": "number",
    "aggregation": "text",
}


class CardError(ValueError):
    """A card breaks the schema; the message names the file and the field (dotted path)."""


@dataclass(frozen=True)
class Sourced:
    """A recipe value with its provenance. ``unknown`` values are `None` instead."""

    value: Any
    source: str
    tag: str
    verified: bool = True
    note: str = ""


@dataclass(frozen=True)
class Recipe:
    """The paper's training recipe; a field is `None` where the card says ``unknown``."""

    base_model: Sourced | None
    training_data: Sourced | None
    group_size: Sourced | None
    prompts_per_step: Sourced | None
    learning_rate: Sourced | None
    max_response_length: Sourced | None
    temperature: Sourced | None
    steps_or_budget: Sourced | None
    kl_coef: Sourced | None
    eps_low: Sourced | None
    eps_high: Sourced | None
    aggregation: Sourced | None
    other: dict[str, Sourced | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Method:
    """A method the paper proposes or compares; ``label`` is how the paper's tables name its
    row. With ``registered`` true, ``methods/`` runs it: ``name`` is its registry name, or,
    when the row is a registered method with options (Teacher-OPPO is ``oppo`` with
    ``oracle: teacher``), ``method`` is the registry name, ``options`` its method options and
    ``name`` the row's own run name."""

    name: str
    registered: bool
    role: str
    label: str
    note: str = ""
    method: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def registry_name(self) -> str:
        """The registered method the row runs (``method``, else ``name``)."""
        return self.method or self.name


@dataclass(frozen=True)
class ResultTable:
    """One benchmark column of one table of the paper: a number per row (method)."""

    table: str
    benchmark: str
    metric: str
    model: str
    rows: dict[str, float]
    verified: bool
    unverified_rows: frozenset[str] = frozenset()
    source: str = ""
    note: str = ""


@dataclass(frozen=True)
class Result:
    """One reported number, as `Card.results_for` returns it."""

    table: str
    benchmark: str
    metric: str
    model: str
    label: str
    value: float
    verified: bool


@dataclass(frozen=True)
class Comparison:
    """A result table whose ordering of methods a CPU-scale reproduction is compared to."""

    table: str
    benchmark: str
    model: str | None = None


@dataclass(frozen=True)
class CpuScale:
    """The recipe scaled to the embedded testbed: which methods, which relative settings
    (dotted run-config keys), per-method options, the budget label (a shipped suite whose
    per-run budget is used), the seeds, and the paper tables to compare orderings with."""

    methods: tuple[str, ...]
    budget: str
    seeds: tuple[int, ...] = (0, 1, 2)
    settings: dict[str, Any] = field(default_factory=dict)
    method_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    compare: tuple[Comparison, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class Caveat:
    """What limits the testbed's reading of a claim: a kind of :data:`CAVEATS` and why."""

    kind: str
    note: str

    @property
    def label(self) -> str:
        """The caveat's words, as every page prints them."""
        return CAVEATS[self.kind]

    @property
    def untestable(self) -> bool:
        """Whether it leaves the testbed unable to test the claim (:data:`UNTESTABLE`)."""
        return self.kind in UNTESTABLE


@dataclass(frozen=True)
class Claim:
    """A claim of the paper the testbed tests: ``method`` (a card row) ahead of ``baseline``
    at equal ``axis`` (its ``value`` one of :data:`AXES`); ``paper`` is the paper's number,
    ``source`` where, ``tag`` how it was read; ``caveats`` what limits the testbed's reading."""

    claim: str
    method: str
    baseline: str
    paper: str
    source: str
    tag: str
    axis: Sourced
    verified: bool = True
    caveats: tuple[Caveat, ...] = ()

    @property
    def untestable(self) -> tuple[Caveat, ...]:
        """The caveats that leave the testbed unable to test it (none: it can be tested)."""
        return tuple(c for c in self.caveats if c.untestable)


@dataclass(frozen=True)
class PaperScale:
    """What the full recipe needs, so that ``reproduce --scale paper`` can refuse clearly."""

    model: str | None
    hardware: str
    requires: tuple[str, ...]
    tag: str
    note: str = ""

    @property
    def gpu_count(self) -> int:
        match = HARDWARE_PATTERN.match(self.hardware)
        return int(match.group(1) or 1) if match else 1

    @property
    def gpu_memory_gib(self) -> int:
        match = HARDWARE_PATTERN.match(self.hardware)
        return int(match.group(2)) if match else 0


@dataclass(frozen=True)
class Card:
    id: str
    title: str
    authors: tuple[str, ...]
    arxiv: str
    year: int
    code: str | None
    methods: tuple[Method, ...]
    recipe: Recipe
    results: tuple[ResultTable, ...]
    cpu_scale: CpuScale | None = None
    paper_scale: PaperScale | None = None
    claims: tuple[Claim, ...] = ()
    notes: str = ""
    path: Path | None = None

    def method_names(self) -> list[str]:
        """The names of every method of the card, in card order."""
        return [method.name for method in self.methods]

    def registered_methods(self) -> list[str]:
        """The names of the rows ``methods/`` runs (a registry name, or a row's run name)."""
        return [method.name for method in self.methods if method.registered]

    def method_row(self, name: str) -> Method:
        """The row named ``name``; KeyError naming the card's rows when it has none."""
        for method in self.methods:
            if method.name == name:
                return method
        raise KeyError(f"{self.id}: no method row {name!r}; rows: {', '.join(self.method_names())}")

    def results_for(self, method: str) -> list[Result]:
        """Every number reported for ``method`` (a method name or a row label), table order."""
        label = next((m.label for m in self.methods if m.name == method), method)
        found = []
        for table in self.results:
            if label in table.rows:
                found.append(
                    Result(
                        table=table.table,
                        benchmark=table.benchmark,
                        metric=table.metric,
                        model=table.model,
                        label=label,
                        value=table.rows[label],
                        verified=table.verified and label not in table.unverified_rows,
                    )
                )
        return found
