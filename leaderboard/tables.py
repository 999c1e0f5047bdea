"""The leaderboard's tables: headers and rows of strings, built from ``summarize()`` frames.

Tables are sorted by the ranking statistic (the AUC gain over GRPO, :func:`.verdict.by_gain`),
show the IQM with its interval in one compact cell (``0.512 [0.490, 0.530]``), and leave out a
column no method of the setting has a value for, so that they fit a page's width.
"""

from __future__ import annotations

import math

import pandas as pd

from .verdict import by_gain, signed


def missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt(value, digits: int = 3) -> str:
    return "n/a" if missing(value) else f"{value:.{digits}f}"


def fmt_interval(row, column: str, n: int, *, sign: bool = False) -> str:
    """``0.512 [0.490, 0.530]``; the point alone with one seed (no interval)."""
    point = row.get(column)
    if missing(point):
        return "n/a"
    show = signed if sign else fmt
    if n < 2:
        return show(point)
    return f"{show(point)} [{show(row.get(f'{column}_low'))}, {show(row.get(f'{column}_high'))}]"


def fmt_rank(row, name: str) -> str:
    rank = row.get(f"rank_{name}")
    if missing(rank):
        return "n/a"
    return f"={int(rank)}" if row.get(f"rank_{name}_shared") else str(int(rank))


def _present(frame: pd.DataFrame, column: str) -> bool:
    return column in frame and frame[column].notna().any()


def accuracy_table(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """One setting's methods, best AUC gain over GRPO first."""
    columns = [
        ("rank (AUC)", lambda r, n: fmt_rank(r, "auc")),
        ("method", lambda r, n: r["method"]),
        ("seeds", lambda r, n: str(n)),
        ("AUC gain over GRPO", lambda r, n: fmt_interval(r, "gain_auc", n, sign=True)),
        ("AUC, IQM", lambda r, n: fmt_interval(r, "auc_iqm", n)),
        ("final accuracy, IQM", lambda r, n: fmt_interval(r, "final_iqm", n)),
        ("P(>GRPO), AUC", lambda r, n: fmt(r.get("poi_auc"), 2)),
    ]
    if _present(frame, "speed_position"):
        columns.append(
            ("learning speed (GRPO 0, oracle 1)", lambda r, n: fmt(r["speed_position"], 2))
        )
    rows = []
    for _, r in by_gain(frame).iterrows():
        n = int(r["n_seeds"])
        rows.append([cell(r, n) for _, cell in columns])
        if r["method"] == "grpo":
            rows[-1][3] = "0 (baseline)"
    return [h for h, _ in columns], rows


def credit_table(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Where each method puts its credit, in the order of the accuracy table."""

    def precision(r, n):
        text = fmt_interval(r, "credit_precision", n)
        chance = r.get("credit_chance")
        return text if missing(chance) else f"{text}, chance {fmt(chance)}"

    candidates = [
        ("credit_precision", "credit precision", precision),
        ("credit_auroc", "credit AUROC", lambda r, n: fmt_interval(r, "credit_auroc", n)),
        (
            "credit_position",
            "credit score (GRPO 0, oracle 1)",
            lambda r, n: fmt(r["credit_position"], 2),
        ),
        (
            "filler_entropy_drift",
            "filler entropy drift",
            lambda r, n: fmt_interval(r, "filler_entropy_drift", n, sign=True),
        ),
        (
            "cancel_ratio",
            "shared-prefix gradient, net / rest",
            lambda r, n: fmt_interval(r, "cancel_ratio", n),
        ),
        (
            "reset_hits_first_wrong",
            "reset at the first wrong step",
            lambda r, n: fmt_interval(r, "reset_hits_first_wrong", n),
        ),
    ]
    columns = [("method", lambda r, n: r["method"])]
    columns += [(h, cell) for column, h, cell in candidates if _present(frame, column)]
    rows = [
        [cell(r, int(r["n_seeds"])) for _, cell in columns] for _, r in by_gain(frame).iterrows()
    ]
    return [h for h, _ in columns], rows


def paper_table(frame: pd.DataFrame, papers: list[dict]) -> tuple[list[str], list[list[str]]]:
    ours = {r["method"]: r.get("final_mean") for _, r in frame.iterrows()}
    headers = ["paper", "table", "model, benchmark, metric", "row", "reported", "ours (%)"]
    rows = []
    for p in papers:
        mine = ours.get(p["method"]) if p["method"] else None
        mark = "" if p["verified"] else " (unverified)"
        rows.append(
            [
                f"{p['paper']} (arXiv {p['arxiv']})",
                p["table"],
                f"{p['model']}, {p['benchmark']}, {p['metric']}",
                p["label"],
                f"{p['value']:g}{mark}",
                "not run" if mine is None or missing(mine) else f"{100 * mine:.1f}",
            ]
        )
    return headers, rows
