"""Paper cards: one YAML file per paper, loaded and checked against a small schema.

A card records what a paper says and where it says it: the citation, the methods it proposes
and compares (and whether ``methods/`` registers them), the training recipe, the numbers it
reports table by table, and how ``creditbench reproduce`` scales the recipe down to the CPU
testbed (``cpu_scale``) or refuses to run it at full size (``paper_scale``).

Recipe values are never bare. Each one is either the literal ``unknown`` or a mapping::

    group_size: {value: 16, source: "§4.1", tag: paper}

``tag`` says how the value was obtained: ``paper`` (read in the paper), ``code`` (read in the
authors' code) or ``inferred`` (a reading of our own, stated as such); ``verified: false``
marks a value relayed by a secondary summary and not checked against the paper.

A card file (``cards/<id>.yaml``; `load_cards` reads them all) holds::

    id, title, authors, arxiv ("2402.03300", quoted), year, code (URL or null)
    methods:   - {name, registered, role: proposed | baseline | anchor, label?, note?,
                  method?, options?: {method option: value}}
    recipe:    base_model, training_data, group_size, prompts_per_step, learning_rate,
               max_response_length, temperature, steps_or_budget, kl_coef,
               clip: {eps_low, eps_high} | unknown, aggregation, other?: {name: value}
    results:   - {table, benchmark, metric (pass@k, avg@k, maj@k, accuracy, ...), model,
                  verified, source?, note?, rows: {row label: number | {value, verified}}}
    cpu_scale?:   {methods, budget (a shipped suite whose settings the runs start from; the
                   FLOP amount is planned by `creditbench reproduce`), seeds?, settings?: {dotted
                   run-config key: value}, method_options?: {method: {...}}, compare?, note?}
    paper_scale?: {model, hardware ("K x GPU with >= N GiB"), requires, tag, note?}
    claims?:   - {claim, method, baseline, paper, source, tag, verified?,
                  axis: {value: compute | samples | steps | wall-clock, source, tag, note?},
                  caveats?: [{kind, note}]}
    notes?

A method is ``registered`` only if ``methods/`` registers that name; until then the card
lists it under the name it will take (or the paper's name) with ``registered: false``. A row
that is a registered method with options ("DAPO + Teacher-OPPO") is ``registered`` too, with
``method`` (the registry name), ``options`` and a ``name`` of its own for its runs. The
``anchor`` role marks a method the paper does not compare with but that runs beside it on
the testbed (GRPO, the leaderboard's zero point). Row labels are the paper's; a method's
``label`` says which row is its own, for `Card.results_for`.

A claim is a sentence of the paper the testbed can test: the row ``method`` ahead of the row
``baseline`` (both registered rows of the card). ``paper`` is the paper's own number for it
and ``source`` where it is stated, ``tag`` where that was read. ``axis`` is what the paper
holds equal when it compares the two (:data:`AXES`): ``compute`` (FLOPs or GPU hours),
``samples`` (trained responses or prompts), ``steps`` (optimizer or training steps) or
``wall-clock``, with where that was read; where a paper does not say, an RLVR paper's training
curve is read per step, so the axis is ``steps`` tagged ``inferred``. ``caveats`` say what
limits the testbed's reading (:data:`CAVEATS`: the method's mechanism inert here, a claim
made only under LoRA, only on a mixture-of-experts model or only for a two-agent team, a claim
inferred from an abstract), each with a note; the first three leave the testbed unable to
test the claim (:data:`UNTESTABLE`). The verdict is read from the standard records, on the
claim's axis and in every setting of the board, by :mod:`creditbench.leaderboard.claims`.

Every mistake in a card raises `CardError` naming the file and the field as a dotted path,
for example ``dapo.yaml: recipe.group_size: expected a number or 'unknown'``. The checks
live in `creditbench.reference.card_schema`, the types they build in
`creditbench.reference.card_types`.

This room imports nothing of creditbench but the YAML loader of ``common/`` (besides the
standard library and PyYAML), so the harness and the leaderboard can both read cards.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from creditbench.common.yaml_loading import load_yaml

from .card_schema import card_from_dict

# A card's types live in card_types.py (the schema's checks import them too); they are read
# from here, beside the loaders, as the cards' one public module.
from .card_types import (
    AXES,
    CAVEATS,
    CLAIM_SETTINGS,
    RECIPE_FIELDS,
    UNTESTABLE,
    Card,
    CardError,
    Caveat,
    Claim,
    Comparison,
    CpuScale,
    Method,
    PaperScale,
    Recipe,
    Result,
    ResultTable,
    Sourced,
)

__all__ = [
    "AXES",
    "CARDS_DIR",
    "CAVEATS",
    "CLAIM_SETTINGS",
    "RECIPE_FIELDS",
    "UNTESTABLE",
    "Card",
    "CardError",
    "Caveat",
    "Claim",
    "Comparison",
    "CpuScale",
    "Method",
    "PaperScale",
    "Recipe",
    "Result",
    "ResultTable",
    "Sourced",
    "cards_naming",
    "load_card",
    "load_cards",
]

CARDS_DIR = Path(__file__).parent / "cards"


def load_card(path: str | Path) -> Card:
    """Read and validate one card file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise CardError(f"{path.name}: cannot read the card ({err.strerror})") from None
    try:
        data = load_yaml(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "?"
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise CardError(f"{path.name}: {where}: invalid YAML: {problem}") from None
    return card_from_dict(data, path.name, path)


def load_cards(directory: str | Path | None = None) -> dict[str, Card]:
    """Every ``*.yaml`` card of ``directory`` (default: the shipped cards), by id."""
    folder = Path(directory) if directory is not None else CARDS_DIR
    if not folder.is_dir():
        raise CardError(f"{folder.name}: not a directory of cards")
    return {card.id: card for card in map(load_card, sorted(folder.glob("*.yaml")))}


def cards_naming(method: str, cards: Mapping[str, Card]) -> list[str]:
    """The ids of the cards that list ``method`` as a registered method."""
    return [
        card.id
        for card in cards.values()
        if any(m.registered and m.registry_name == method for m in card.methods)
    ]
