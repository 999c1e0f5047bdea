"""The schema of a paper card, checked field by field by hand (no jsonschema dependency).

`card_from_dict` turns parsed YAML into a `Card`; every check raises `CardError` with the
file name and the dotted path of the field, e.g. ``results[2].metric``. The field list and
the value forms are documented in `creditbench.reference.cards`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .card_types import (
    ARXIV_PATTERN,
    AXES,
    CAVEATS,
    HARDWARE_PATTERN,
    IDENTIFIER,
    METRIC_PATTERN,
    NAMED_METRICS,
    RECIPE_FIELDS,
    ROLES,
    SETTING_KEY,
    TAGS,
    UNKNOWN,
    Card,
    CardError,
    Caveat,
    Claim,
    Comparison,
    CpuScale,
    Method,
    PaperScale,
    Recipe,
    ResultTable,
    Sourced,
)


class _Checker:
    def __init__(self, file_name: str) -> None:
        self.file = file_name

    def fail(self, where: str, message: str) -> CardError:
        return CardError(f"{self.file}: {where}: {message}")

    def mapping(
        self, data: Any, where: str, required: Iterable[str], optional: Iterable[str] = ()
    ) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise self.fail(where or "top level", f"expected a mapping, got {_kind(data)}")
        required, optional = tuple(required), tuple(optional)
        for key in required:
            if key not in data:
                raise self.fail(_join(where, key), "missing required field")
        for key in data:
            if key not in required and key not in optional:
                known = ", ".join((*required, *optional))
                raise self.fail(_join(where, str(key)), f"unknown field (known: {known})")
        return data

    def text(self, value: Any, where: str, *, allow_empty: bool = False) -> str:
        if not isinstance(value, str) or (not allow_empty and not value.strip()):
            raise self.fail(where, f"expected a non-empty string, got {_kind(value)}")
        return value

    def boolean(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(where, f"expected true or false, got {_kind(value)}")
        return value

    def number(self, value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            hint = " (write 1.0e-6, not 1e-6: YAML reads the latter as text)"
            raise self.fail(where, f"expected a number, got {_kind(value)}" + _hint(value, hint))
        if not math.isfinite(value):
            raise self.fail(where, f"expected a finite number, got {value!r}")
        return value

    def choice(self, value: Any, where: str, options: tuple[str, ...]) -> str:
        if value not in options:
            raise self.fail(where, f"expected one of {', '.join(options)}, got {value!r}")
        return value

    def text_list(self, value: Any, where: str, *, allow_empty: bool = False) -> tuple[str, ...]:
        if not isinstance(value, list) or (not value and not allow_empty):
            raise self.fail(where, f"expected a non-empty list of strings, got {_kind(value)}")
        return tuple(self.text(item, f"{where}[{i}]") for i, item in enumerate(value))

    def scalar_or_list(self, value: Any, where: str) -> Any:
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            spot = f"{where}[{i}]" if isinstance(value, list) else where
            if isinstance(item, float) and not math.isfinite(item):
                raise self.fail(spot, f"expected a finite number, got {item!r}")
            if item is not None and not isinstance(item, str | int | float | bool):
                raise self.fail(spot, f"expected a number, string or boolean, got {_kind(item)}")
        return value

    def sourced(self, data: Any, where: str, kind: str) -> Sourced | None:
        if data == UNKNOWN:
            return None
        expected = (
            f"expected {_article(kind)} or 'unknown' (as {{value: ..., source: ..., tag: ...}})"
        )
        if not isinstance(data, dict):
            raise self.fail(where, f"{expected}, got {_kind(data)}")
        self.mapping(data, where, ("value", "source", "tag"), ("verified", "note"))
        value = data["value"]
        spot = f"{where}.value"
        if kind == "number":
            self.number(value, spot)
        elif kind == "text":
            self.text(value, spot)
        elif kind == "text or number":
            if not isinstance(value, str):
                self.number(value, spot)
        else:
            self.scalar_or_list(value, spot)
        return Sourced(
            value=value,
            source=self.text(data["source"], f"{where}.source"),
            tag=self.choice(data["tag"], f"{where}.tag", TAGS),
            verified=self.boolean(data.get("verified", True), f"{where}.verified"),
            note=self.text(data.get("note", ""), f"{where}.note", allow_empty=True),
        )


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, dict | list):
        return f"a {type(value).__name__}"
    return f"{type(value).__name__} {value!r}"


def _hint(value: Any, hint: str) -> str:
    return hint if isinstance(value, str) and re.fullmatch(r"-?\d+e-?\d+", value) else ""


def _article(kind: str) -> str:
    return {"number": "a number", "text": "a string"}.get(kind, kind)


def _metric(check: _Checker, value: Any, where: str) -> str:
    if not isinstance(value, str) or not (value in NAMED_METRICS or METRIC_PATTERN.match(value)):
        raise check.fail(
            where,
            f"expected pass@k, avg@k, maj@k, discovery@k or one of "
            f"{', '.join(NAMED_METRICS)}, got {_kind(value)}",
        )
    return value


def _recipe(check: _Checker, data: Any) -> Recipe:
    check.mapping(data, "recipe", (*RECIPE_FIELDS, "clip"), ("other",))
    values = {
        name: check.sourced(data[name], f"recipe.{name}", kind)
        for name, kind in RECIPE_FIELDS.items()
    }
    clip = data["clip"]
    if clip == UNKNOWN:
        eps_low = eps_high = None
    else:
        check.mapping(clip, "recipe.clip", ("eps_low", "eps_high"))
        eps_low = check.sourced(clip["eps_low"], "recipe.clip.eps_low", "number")
        eps_high = check.sourced(clip["eps_high"], "recipe.clip.eps_high", "number")
    other = data.get("other") or {}
    if not isinstance(other, dict):
        raise check.fail("recipe.other", f"expected a mapping, got {_kind(other)}")
    extra = {}
    for key, value in other.items():
        if not isinstance(key, str) or not IDENTIFIER.match(key):
            raise check.fail(f"recipe.other.{key}", "names must be lower_case identifiers")
        extra[key] = check.sourced(value, f"recipe.other.{key}", "a value")
    return Recipe(**values, eps_low=eps_low, eps_high=eps_high, other=extra)


def _methods(check: _Checker, data: Any) -> tuple[Method, ...]:
    if not isinstance(data, list) or not data:
        raise check.fail("methods", f"expected a non-empty list, got {_kind(data)}")
    methods: list[Method] = []
    for i, item in enumerate(data):
        where = f"methods[{i}]"
        optional = ("label", "note", "method", "options")
        check.mapping(item, where, ("name", "registered", "role"), optional)
        name = check.text(item["name"], f"{where}.name")
        registered = check.boolean(item["registered"], f"{where}.registered")
        if registered and not IDENTIFIER.match(name):
            what = "a run name" if "method" in item else "its registry name"
            raise check.fail(
                f"{where}.name", f"a registered method needs {what} (a-z, 0-9, _), got {name!r}"
            )
        if name in {m.name for m in methods}:
            raise check.fail(f"{where}.name", f"{name!r} is listed twice")
        method = ""
        if "method" in item:
            if not registered:
                raise check.fail(f"{where}.method", "only a registered row names a method")
            method = check.text(item["method"], f"{where}.method")
            if not IDENTIFIER.match(method):
                raise check.fail(f"{where}.method", f"expected a registry name, got {method!r}")
        options = item.get("options", {})
        if "options" in item and not method:
            raise check.fail(f"{where}.options", "options need the row's method")
        if not isinstance(options, dict):
            raise check.fail(f"{where}.options", f"expected a mapping, got {_kind(options)}")
        for key, value in options.items():
            check.scalar_or_list(value, f"{where}.options.{key}")
        methods.append(
            Method(
                name=name,
                registered=registered,
                role=check.choice(item["role"], f"{where}.role", ROLES),
                label=check.text(item.get("label", name), f"{where}.label"),
                note=check.text(item.get("note", ""), f"{where}.note", allow_empty=True),
                method=method,
                options=dict(options),
            )
        )
    return tuple(methods)


def _results(check: _Checker, data: Any) -> tuple[ResultTable, ...]:
    if not isinstance(data, list):
        raise check.fail("results", f"expected a list, got {_kind(data)}")
    tables = []
    for i, item in enumerate(data):
        where = f"results[{i}]"
        required = ("table", "benchmark", "metric", "model", "rows", "verified")
        check.mapping(item, where, required, ("source", "note"))
        rows_data = item["rows"]
        if not isinstance(rows_data, dict) or not rows_data:
            raise check.fail(
                f"{where}.rows", f"expected a non-empty mapping, got {_kind(rows_data)}"
            )
        rows, unverified = {}, set()
        for label, cell in rows_data.items():
            spot = f"{where}.rows.{label}"
            check.text(label, spot)
            if isinstance(cell, dict):
                check.mapping(cell, spot, ("value",), ("verified", "note"))
                if not check.boolean(cell.get("verified", True), f"{spot}.verified"):
                    unverified.add(label)
                check.text(cell.get("note", ""), f"{spot}.note", allow_empty=True)
                cell, spot = cell["value"], f"{spot}.value"
            rows[label] = check.number(cell, spot)
        tables.append(
            ResultTable(
                table=check.text(item["table"], f"{where}.table"),
                benchmark=check.text(item["benchmark"], f"{where}.benchmark"),
                metric=_metric(check, item["metric"], f"{where}.metric"),
                model=check.text(item["model"], f"{where}.model"),
                rows=rows,
                verified=check.boolean(item["verified"], f"{where}.verified"),
                unverified_rows=frozenset(unverified),
                source=check.text(item.get("source", ""), f"{where}.source", allow_empty=True),
                note=check.text(item.get("note", ""), f"{where}.note", allow_empty=True),
            )
        )
    return tuple(tables)


def _cpu_scale(
    check: _Checker, data: Any, methods: tuple[Method, ...], results: tuple[ResultTable, ...]
) -> CpuScale:
    where = "cpu_scale"
    optional = ("seeds", "settings", "method_options", "compare", "note")
    check.mapping(data, where, ("methods", "budget"), optional)
    names = check.text_list(data["methods"], f"{where}.methods")
    known = {m.name for m in methods}
    for i, name in enumerate(names):
        if name not in known:
            raise check.fail(f"{where}.methods[{i}]", f"{name!r} is not one of the card's methods")
    budget = check.text(data["budget"], f"{where}.budget")
    if not IDENTIFIER.match(budget):
        raise check.fail(
            f"{where}.budget", f"expected a suite name such as 'quick', got {budget!r}"
        )
    seeds = data.get("seeds", [0, 1, 2])
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
    ):
        raise check.fail(
            f"{where}.seeds", f"expected a non-empty list of seeds >= 0, got {seeds!r}"
        )
    settings = data.get("settings") or {}
    if not isinstance(settings, dict):
        raise check.fail(f"{where}.settings", f"expected a mapping, got {_kind(settings)}")
    for key, value in settings.items():
        if not isinstance(key, str) or not SETTING_KEY.match(key):
            raise check.fail(
                f"{where}.settings.{key}", "expected a dotted config key like rollout.group_size"
            )
        check.scalar_or_list(value, f"{where}.settings.{key}")
    options = data.get("method_options") or {}
    if not isinstance(options, dict):
        raise check.fail(f"{where}.method_options", f"expected a mapping, got {_kind(options)}")
    for name, values in options.items():
        spot = f"{where}.method_options.{name}"
        if name not in names:
            raise check.fail(spot, f"{name!r} is not in {where}.methods")
        if not isinstance(values, dict):
            raise check.fail(spot, f"expected a mapping, got {_kind(values)}")
        for key, value in values.items():
            check.scalar_or_list(value, f"{spot}.{key}")
    compare = []
    for i, item in enumerate(data.get("compare") or []):
        spot = f"{where}.compare[{i}]"
        check.mapping(item, spot, ("table", "benchmark"), ("model",))
        wanted = Comparison(item["table"], item["benchmark"], item.get("model"))
        if not any(
            t.table == wanted.table
            and t.benchmark == wanted.benchmark
            and wanted.model in (None, t.model)
            for t in results
        ):
            raise check.fail(spot, f"no result table matches {item!r}")
        compare.append(wanted)
    return CpuScale(
        methods=names,
        budget=budget,
        seeds=tuple(seeds),
        settings=dict(settings),
        method_options={name: dict(values) for name, values in options.items()},
        compare=tuple(compare),
        note=check.text(data.get("note", ""), f"{where}.note", allow_empty=True),
    )


def _paper_scale(check: _Checker, data: Any) -> PaperScale:
    where = "paper_scale"
    check.mapping(data, where, ("model", "hardware", "requires", "tag"), ("note",))
    hardware = check.text(data["hardware"], f"{where}.hardware")
    if not HARDWARE_PATTERN.match(hardware):
        raise check.fail(
            f"{where}.hardware",
            f"expected 'GPU with >= N GiB' or 'K x GPU with >= N GiB', got {hardware!r}",
        )
    model = check.text(data["model"], f"{where}.model")
    return PaperScale(
        model=None if model == UNKNOWN else model,
        hardware=hardware,
        requires=check.text_list(data["requires"], f"{where}.requires", allow_empty=True),
        tag=check.choice(data["tag"], f"{where}.tag", TAGS),
        note=check.text(data.get("note", ""), f"{where}.note", allow_empty=True),
    )


def _axis(check: _Checker, data: Any, where: str) -> Sourced:
    """A claim's axis: ``{value: one of AXES, source, tag, verified?, note?}``; never
    ``unknown`` (where a paper does not say, the axis is read and tagged ``inferred``)."""
    check.mapping(data, where, ("value", "source", "tag"), ("verified", "note"))
    return Sourced(
        value=check.choice(data["value"], f"{where}.value", AXES),
        source=check.text(data["source"], f"{where}.source"),
        tag=check.choice(data["tag"], f"{where}.tag", TAGS),
        verified=check.boolean(data.get("verified", True), f"{where}.verified"),
        note=check.text(data.get("note", ""), f"{where}.note", allow_empty=True),
    )


def _caveats(check: _Checker, data: Any, where: str) -> tuple[Caveat, ...]:
    if not isinstance(data, list):
        raise check.fail(where, f"expected a list of {{kind, note}}, got {_kind(data)}")
    caveats: list[Caveat] = []
    for i, item in enumerate(data):
        spot = f"{where}[{i}]"
        check.mapping(item, spot, ("kind", "note"))
        kind = check.choice(item["kind"], f"{spot}.kind", tuple(CAVEATS))
        if kind in {c.kind for c in caveats}:
            raise check.fail(f"{spot}.kind", f"{kind!r} is listed twice")
        caveats.append(Caveat(kind, check.text(item["note"], f"{spot}.note")))
    return tuple(caveats)


def _claims(check: _Checker, data: Any, methods: tuple[Method, ...]) -> tuple[Claim, ...]:
    if not isinstance(data, list):
        raise check.fail("claims", f"expected a list, got {_kind(data)}")
    runnable = {m.name for m in methods if m.registered}
    claims = []
    for i, item in enumerate(data):
        where = f"claims[{i}]"
        required = ("claim", "method", "baseline", "paper", "source", "tag", "axis")
        check.mapping(item, where, required, ("verified", "caveats"))
        rows = {}
        for key in ("method", "baseline"):
            rows[key] = check.text(item[key], f"{where}.{key}")
            if rows[key] not in runnable:
                raise check.fail(
                    f"{where}.{key}",
                    f"{rows[key]!r} is not a registered row of the card "
                    f"(registered: {', '.join(sorted(runnable))})",
                )
        if rows["method"] == rows["baseline"]:
            raise check.fail(f"{where}.baseline", "must differ from the claim's method")
        claims.append(
            Claim(
                claim=check.text(item["claim"], f"{where}.claim"),
                method=rows["method"],
                baseline=rows["baseline"],
                paper=check.text(item["paper"], f"{where}.paper"),
                source=check.text(item["source"], f"{where}.source"),
                tag=check.choice(item["tag"], f"{where}.tag", TAGS),
                axis=_axis(check, item["axis"], f"{where}.axis"),
                verified=check.boolean(item.get("verified", True), f"{where}.verified"),
                caveats=_caveats(check, item.get("caveats", []), f"{where}.caveats"),
            )
        )
    return tuple(claims)


def card_from_dict(data: Any, file_name: str, path: Path | None = None) -> Card:
    """Validate parsed YAML ``data`` (the contents of ``file_name``) and build the `Card`."""
    check = _Checker(file_name)
    required = ("id", "title", "authors", "arxiv", "year", "code", "methods", "recipe", "results")
    check.mapping(data, "", required, ("cpu_scale", "paper_scale", "claims", "notes"))
    card_id = check.text(data["id"], "id")
    stem = Path(file_name).stem
    if card_id != stem:
        raise check.fail(
            "id", f"must equal the file name without .yaml ({stem!r}), got {card_id!r}"
        )
    arxiv = data["arxiv"]
    if not isinstance(arxiv, str) or not ARXIV_PATTERN.match(arxiv):
        raise check.fail("arxiv", f"expected an id like '2402.03300' in quotes, got {_kind(arxiv)}")
    year = data["year"]
    if isinstance(year, bool) or not isinstance(year, int) or not 1990 <= year <= 2100:
        raise check.fail("year", f"expected a year such as 2025, got {_kind(year)}")
    code = data["code"]
    if code is not None and not (
        isinstance(code, str) and code.startswith(("https://", "http://"))
    ):
        raise check.fail("code", f"expected a URL or null, got {_kind(code)}")
    methods = _methods(check, data["methods"])
    results = _results(check, data["results"])
    cpu = data.get("cpu_scale")
    paper = data.get("paper_scale")
    return Card(
        id=card_id,
        title=check.text(data["title"], "title"),
        authors=check.text_list(data["authors"], "authors"),
        arxiv=arxiv,
        year=year,
        code=code,
        methods=methods,
        recipe=_recipe(check, data["recipe"]),
        results=results,
        cpu_scale=None if cpu is None else _cpu_scale(check, cpu, methods, results),
        paper_scale=None if paper is None else _paper_scale(check, paper),
        claims=_claims(check, data.get("claims", []), methods),
        notes=check.text(data.get("notes", ""), "notes", allow_empty=True),
        path=path,
    )
