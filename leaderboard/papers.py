"""Numbers reported by the papers (from the paper cards in ``reference/``), matched to our tasks.

A card's result table matches a task when their names agree after lower-casing and dropping
everything but letters and digits (``MATH-500`` is ``math500``, ``GSM8K`` is ``gsm8k``). The
testbed (``chain``) matches no paper: nobody else reports on it. Reported numbers come from other
models, data and budgets; the leaderboard prints them beside ours, labelled as reported by the
paper, and never mixes them into our statistics.
"""

from __future__ import annotations

import re
from typing import Any


def normalized(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def reported_results(tasks: set[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Every reported number whose benchmark is one of ``tasks``, and any warnings.

    Each row: ``task``, ``paper`` (title), ``arxiv``, ``table``, ``benchmark``, ``metric``,
    ``model``, ``label`` (the paper's row name), ``method`` (our registry name, or None),
    ``value``, ``verified``. Without the cards module (or with a broken card) the list is
    empty and the warning says why.
    """
    try:
        from creditbench.reference.cards import load_cards
    except ImportError:
        return [], []
    try:
        cards = load_cards()
    except ValueError as err:  # CardError names the file and the field
        return [], [f"paper cards not shown: {err}"]
    wanted = {normalized(task): task for task in tasks}
    rows = []
    for card in cards.values():
        by_label = {m.label: m.name for m in card.methods if m.registered}
        for result in card.results:
            task = wanted.get(normalized(result.benchmark))
            if task is None:
                continue
            for label, value in result.rows.items():
                rows.append(
                    {
                        "task": task,
                        "paper": card.title,
                        "arxiv": card.arxiv,
                        "table": result.table,
                        "benchmark": result.benchmark,
                        "metric": result.metric,
                        "model": result.model,
                        "label": label,
                        "method": by_label.get(label),
                        "value": value,
                        "verified": result.verified and label not in result.unverified_rows,
                    }
                )
    return rows, []
