"""Paper cards: the shipped cards load, malformed ones fail naming file and field, and the
cards and the method registry agree."""

from __future__ import annotations

import copy
import json
import math
import re

import pytest
import yaml

from creditbench.harness.config import load_config
from creditbench.methods.registry import list_methods, method_origin
from creditbench.reference.cards import (
    RECIPE_FIELDS,
    Card,
    CardError,
    cards_naming,
    load_card,
    load_cards,
)
from creditbench.tools.suite import suite_path

PAPERS = {
    "deepseekmath_grpo": "2402.03300",
    "drgrpo": "2503.20783",
    "dapo": "2503.14476",
    "gspo": "2507.18071",
    "rloo": "2402.14740",
    "reinforce_pp": "2501.03262",
    "oppo": "2605.21851",
    "sdpo": "2601.20802",
    "scapo": None,
    "resets": "2605.25507",
    "dfpo": "2604.13088",
    "ibpo": "2605.16302",
    "ccpo": "2603.21563",
    "gtpo": "2508.04349",
    "otb": "2602.07078",
    "ktae": "2505.16826",
    "spo": "2505.23564",
    "pppo": "2512.15274",
    "mig": "2602.01034",
    "int": "2601.14209",
    "opo": "2505.23585",
    "gpg": "2504.02546",
    "passk": "2508.10751",
}


@pytest.fixture(scope="module")
def cards() -> dict[str, Card]:
    return load_cards()


def test_every_paper_has_a_card_that_loads(cards):
    assert set(PAPERS) <= set(cards)
    for card_id, arxiv in PAPERS.items():
        card = cards[card_id]
        assert card.path is not None and card.path.name == f"{card_id}.yaml"
        if arxiv is not None:
            assert card.arxiv.split("v")[0] == arxiv


def test_the_reproducing_page_names_every_card_id(cards):
    """docs/reproducing.md lists the ids `creditbench reproduce` takes; a new card joins it."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "reproducing.md").read_text()
    listed = page.split("Card ids are the file names", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"`([a-z0-9_-]+)`", listed))
    assert named == set(cards), f"missing: {set(cards) - named}, stale: {named - set(cards)}"


def test_every_registered_method_is_named_by_a_card(cards):
    """Every method of this package (not a plugin installed beside it) has its paper's card."""
    for name, cls in list_methods().items():
        if getattr(cls, "reference", False) or method_origin(name).kind != "builtin":
            continue
        assert cards_naming(name, cards), f"no card lists {name!r} with registered: true"


def test_registered_flags_match_the_registry(cards):
    registry = set(list_methods())
    for card in cards.values():
        for method in card.methods:
            if method.registered:
                name = method.registry_name
                assert name in registry, f"{card.id}: {name} is not registered"
                if method.method:  # a registered method with options: a run name of its own
                    assert method.name not in registry, f"{card.id}: {method.name} is registered"
            else:
                assert method.name not in registry, (
                    f"{card.id}: {method.name} is registered now; set registered: true"
                )


def test_every_reported_number_and_recipe_number_is_finite(cards):
    for card in cards.values():
        for table in card.results:
            assert table.rows
            for value in table.rows.values():
                assert isinstance(value, int | float) and math.isfinite(value)
        recipe = card.recipe
        for name in (*RECIPE_FIELDS, "eps_low", "eps_high"):
            sourced = getattr(recipe, name)
            if sourced is not None and not isinstance(sourced.value, str):
                assert math.isfinite(sourced.value), f"{card.id}: recipe.{name}"


def test_cpu_scale_settings_are_valid_run_configs(cards):
    for card in cards.values():
        scale = card.cpu_scale
        if scale is None:
            continue
        suite_path(scale.budget)  # the budget label names a shipped suite
        registered = set(card.registered_methods())
        settings = [f"{key}={json.dumps(value)}" for key, value in scale.settings.items()]
        for row in scale.methods:
            if row not in registered:
                continue
            method = card.method_row(row).registry_name
            options = {**card.method_row(row).options, **scale.method_options.get(row, {})}
            extra = [f"method_options.{k}={json.dumps(v)}" for k, v in options.items()]
            config = load_config(None, [f"method={method}", *settings, *extra])
            assert config.method == method
            for key, value in options.items():
                assert config.method_options[key] == value, f"{card.id}: {method}.{key}"


def test_compared_tables_rank_at_least_two_of_the_reproduced_methods(cards):
    for card in cards.values():
        if card.cpu_scale is None:
            continue
        for wanted in card.cpu_scale.compare:
            tables = [
                t
                for t in card.results
                if (t.table, t.benchmark) == (wanted.table, wanted.benchmark)
                and wanted.model in (None, t.model)
            ]
            for table in tables:
                ranked = [
                    m
                    for m in card.cpu_scale.methods
                    if any(r.table == table.table for r in card.results_for(m))
                ]
                assert len(ranked) >= 2, f"{card.id}: {wanted} ranks {ranked}"


# ---------------------------------------------------------------------------------------------
# Malformed cards, written to a temporary directory.


def minimal_card() -> dict:
    recipe = {name: "unknown" for name in RECIPE_FIELDS}
    recipe["clip"] = "unknown"
    recipe["group_size"] = {"value": 8, "source": "Table 5", "tag": "paper"}
    return {
        "id": "bad",
        "title": "A paper",
        "authors": ["A. Author"],
        "arxiv": "2501.00001",
        "year": 2025,
        "code": None,
        "methods": [
            {"name": "grpo", "registered": True, "role": "baseline", "label": "GRPO"},
            {"name": "newmethod", "registered": False, "role": "proposed", "label": "New"},
        ],
        "recipe": recipe,
        "results": [
            {
                "table": "Table 2",
                "benchmark": "AIME 2024",
                "metric": "avg@32",
                "model": "Model-7B",
                "verified": True,
                "rows": {"GRPO": 30.0, "New": {"value": 35.5, "verified": False}},
            }
        ],
        "cpu_scale": {
            "methods": ["grpo", "newmethod"],
            "budget": "quick",
            "compare": [{"table": "Table 2", "benchmark": "AIME 2024"}],
        },
        "paper_scale": {
            "model": "org/model",
            "hardware": "4 x GPU with >= 80 GiB",
            "requires": ["vllm"],
            "tag": "inferred",
        },
    }


def write(tmp_path, data, name="bad.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def test_the_minimal_card_loads_and_answers_queries(tmp_path):
    card = load_card(write(tmp_path, minimal_card()))
    assert card.method_names() == ["grpo", "newmethod"]
    assert card.registered_methods() == ["grpo"]
    assert card.recipe.group_size.value == 8 and card.recipe.learning_rate is None
    (grpo,) = card.results_for("grpo")
    assert (grpo.label, grpo.value, grpo.verified) == ("GRPO", 30.0, True)
    (new,) = card.results_for("newmethod")
    assert (new.label, new.value, new.verified) == ("New", 35.5, False)
    assert card.results_for("New") == [new]  # a row label works too
    assert card.results_for("other") == []
    assert (card.paper_scale.gpu_count, card.paper_scale.gpu_memory_gib) == (4, 80)
    assert card.cpu_scale.seeds == (0, 1, 2)


def _set(path: str, value):
    """A mutation that sets the field at dotted ``path`` (list indices as numbers)."""

    def mutate(data):
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        node = data
        for part in parents:
            node = node[part]
        node[last] = value

    return mutate


def _delete(path: str):
    def mutate(data):
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        node = data
        for part in parents:
            node = node[part]
        del node[last]

    return mutate


MALFORMED = [
    (_delete("title"), "title: missing required field"),
    (_delete("recipe.group_size"), "recipe.group_size: missing required field"),
    (_delete("results.0.metric"), "results[0].metric: missing required field"),
    (_set("recipe.group_size", 16), "recipe.group_size: expected a number or 'unknown'"),
    (
        _set("recipe.group_size", {"value": "sixteen", "source": "x", "tag": "paper"}),
        "recipe.group_size.value: expected a number",
    ),
    (
        _set("recipe.group_size", {"value": "1e-6", "source": "x", "tag": "paper"}),
        "write 1.0e-6",
    ),
    (
        _set("recipe.group_size", {"value": 8, "source": "x", "tag": "guess"}),
        "recipe.group_size.tag: expected one of paper, code, inferred",
    ),
    (_set("recipe.clip", {"eps_low": "unknown"}), "recipe.clip.eps_high: missing"),
    (_set("results.0.metric", "pass@one"), "results[0].metric: expected pass@k"),
    (_set("results.0.metric", 1), "results[0].metric: expected pass@k"),
    (_set("results.0.rows.GRPO", "high"), "results[0].rows.GRPO: expected a number"),
    (_set("results.0.rows.GRPO", float("nan")), "results[0].rows.GRPO: expected a finite"),
    (_set("results.0.rows.New.value", float("inf")), "results[0].rows.New.value: expected a fin"),
    (_set("results.0.verified", "yes"), "results[0].verified: expected true or false"),
    (_set("results.0.rows", {}), "results[0].rows: expected a non-empty mapping"),
    (_set("arxiv", 2501.00001), "arxiv: expected an id like"),
    (_set("year", "2025"), "year: expected a year"),
    (_set("code", "github.com/x"), "code: expected a URL or null"),
    (_set("id", "other"), "id: must equal the file name"),
    (_set("colour", "red"), "colour: unknown field"),
    (_set("methods.1.registered", "no"), "methods[1].registered: expected true or false"),
    (_set("methods.1.role", "rival"), "methods[1].role: expected one of"),
    (_set("methods.1.name", "grpo"), "methods[1].name: 'grpo' is listed twice"),
    (_set("methods.0.name", "Fancy GRPO"), "methods[0].name: a registered method needs"),
    (_set("methods.1.method", "oppo"), "methods[1].method: only a registered row names"),
    (_set("methods.0.options", {"eps_high": 0.3}), "methods[0].options: options need the row's"),
    (
        _set(
            "methods.0",
            {"name": "Teacher X", "registered": True, "role": "proposed", "method": "oppo"},
        ),
        "methods[0].name: a registered method needs a run name",
    ),
    (
        _set(
            "methods.0",
            {"name": "x", "registered": True, "role": "proposed", "method": "oppo", "options": [1]},
        ),
        "methods[0].options: expected a mapping",
    ),
    (_set("cpu_scale.methods", ["grpo", "ppo"]), "cpu_scale.methods[1]: 'ppo' is not one"),
    (_set("cpu_scale.settings", {"groupsize": 4}), "cpu_scale.settings.groupsize: expected a"),
    (_set("cpu_scale.method_options", {"ppo": {}}), "cpu_scale.method_options.ppo: 'ppo' is"),
    (_set("cpu_scale.seeds", []), "cpu_scale.seeds: expected a non-empty list"),
    (_set("cpu_scale.compare.0.table", "Table 9"), "cpu_scale.compare[0]: no result table"),
    (_set("paper_scale.hardware", "a big GPU"), "paper_scale.hardware: expected 'GPU with"),
    (_set("paper_scale.requires", "vllm"), "paper_scale.requires: expected a non-empty list"),
]


@pytest.mark.parametrize("mutate, message", MALFORMED)
def test_a_malformed_card_names_file_and_field(tmp_path, mutate, message):
    data = copy.deepcopy(minimal_card())
    mutate(data)
    with pytest.raises(CardError) as caught:
        load_card(write(tmp_path, data))
    text = str(caught.value)
    assert text.startswith("bad.yaml: "), text
    assert message in text, text


def test_invalid_yaml_names_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("id: broken\ntitle: [unclosed\n", encoding="utf-8")
    with pytest.raises(CardError, match=r"^broken\.yaml: line \d+: invalid YAML"):
        load_card(path)


def test_load_cards_reads_a_directory_and_fails_on_a_bad_card(tmp_path):
    good = minimal_card()
    good["id"] = "good"
    write(tmp_path, good, "good.yaml")
    assert list(load_cards(tmp_path)) == ["good"]
    bad = minimal_card()
    del bad["results"][0]["model"]
    write(tmp_path, bad)
    with pytest.raises(CardError, match=r"^bad\.yaml: results\[0\]\.model: missing"):
        load_cards(tmp_path)


def test_a_row_can_be_a_registered_method_with_options(tmp_path):
    data = copy.deepcopy(minimal_card())
    data["methods"].append(
        {
            "name": "grpo_wide",
            "registered": True,
            "role": "proposed",
            "method": "grpo",
            "options": {"eps_high": 0.3},
            "label": "GRPO wide",
        }
    )
    card = load_card(write(tmp_path, data))
    row = card.method_row("grpo_wide")
    assert (row.registry_name, dict(row.options)) == ("grpo", {"eps_high": 0.3})
    assert card.method_row("grpo").registry_name == "grpo"
    assert "grpo_wide" in card.registered_methods()
    assert cards_naming("grpo", {"bad": card}) == ["bad"]


def test_a_key_given_twice_is_refused_naming_it(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("id: a\nyear: 2025\nyear: 2026\n")
    with pytest.raises(
        CardError, match=r"^twice\.yaml: line 3: invalid YAML: duplicate key 'year'"
    ):
        load_card(path)
