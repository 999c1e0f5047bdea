"""The leaderboard's tables: headers and rows of strings, built from ``summarize()`` frames.

Tables are in the board's one ranking (:func:`.gains.ranked`: by the AUC gain over GRPO),
show a gain with its bootstrap and t intervals and k of n seeds ahead in one compact cell
(``+0.054 [+0.037, +0.067] t [+0.030, +0.078] 5/5``), and leave out a column no method of the
setting has a value for, so that they fit a page's width.
"""

from __future__ import annotations

import math

import pandas as pd

from .gains import ranked
from .verdict import gain_text, signed


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


def fmt_rank(row) -> str:
    rank = row.get("rank")
    if missing(rank):
        reason = row.get("rank_missing")
        return f"n/a ({reason})" if isinstance(reason, str) and reason else "n/a"
    return f"={int(rank)}" if row.get("rank_shared") else str(int(rank))


def fmt_gain(row, name: str) -> str:
    """:func:`.verdict.gain_text` with ▲ (ahead of GRPO by the claim rule) or ▼ (behind);
    ``0 (baseline)`` for GRPO."""
    if row["method"] == "grpo":
        return "0 (baseline)"
    if missing(row.get(name)):
        return "n/a"
    mark = " ▲" if row.get(f"{name}_separates") else " ▼" if row.get(f"{name}_reversed") else ""
    return gain_text(row, name) + mark


def fmt_position(row, name: str = "position") -> str:
    point = row.get(name)
    if missing(point):
        return "n/a"
    low, high = row.get(f"{name}_low"), row.get(f"{name}_high")
    if missing(low) or row["method"] == "grpo":
        return fmt(point, 2)
    return f"{fmt(point, 2)} [{fmt(low, 2)}, {fmt(high, 2)}]"


def fmt_cost(row) -> str:
    flops, wall = row.get("flops_per_step_ratio"), row.get("wall_per_step_ratio")
    return f"{fmt(flops, 2)} / {fmt(wall, 2)}"


def _present(frame: pd.DataFrame, column: str) -> bool:
    return column in frame and frame[column].notna().any()


def accuracy_table(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """One setting's methods in rank order: the AUC, its gain over GRPO, the position on the
    GRPO(0) -> oracle(1) scale and the cost per step beside GRPO's."""
    columns = [
        ("rank", lambda r, n: fmt_rank(r)),
        ("method", lambda r, n: r["method"]),
        ("seeds", lambda r, n: str(n)),
        ("AUC, mean", lambda r, n: fmt_interval(r, "auc_mean", n)),
        ("AUC gain over GRPO", lambda r, n: fmt_gain(r, "gain_auc")),
    ]
    if _present(frame[frame["method"] != "grpo"], "position"):  # GRPO's 0 alone says nothing
        columns.append(("position (GRPO 0, oracle 1)", lambda r, n: fmt_position(r)))
    if _present(frame, "flops_per_step_ratio") or _present(frame, "wall_per_step_ratio"):
        columns.append(("FLOPs / wall time a step, × GRPO's", lambda r, n: fmt_cost(r)))
    rows = [
        [cell(r, int(r["n_seeds"])) for _, cell in columns] for _, r in ranked(frame).iterrows()
    ]
    return [h for h, _ in columns], rows


def gains_table(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The final and online accuracy's gains over GRPO, in rank order."""
    online = _present(frame, "gain_online")
    headers = ["method", "final accuracy, mean", "final gain over GRPO"]
    headers += ["online gain over GRPO"] if online else []
    rows = []
    for _, r in ranked(frame).iterrows():
        n = int(r["n_seeds"])
        row = [r["method"], fmt_interval(r, "final_mean", n), fmt_gain(r, "gain_final")]
        rows.append(row + ([fmt_gain(r, "gain_online")] if online else []))
    return headers, rows


def wall_time_note(frame: pd.DataFrame) -> str:
    """Where the wall time a step is read from raw steps (some run records no pace of its
    evaluations), a sentence saying what it then compares; ``""`` otherwise."""
    if "wall_unpaced_runs" not in frame or "wall_per_step_ratio" not in frame:
        return ""
    if not frame["wall_per_step_ratio"].notna().any():
        return ""
    unpaced, runs = int(frame["wall_unpaced_runs"].max()), int(frame["wall_runs"].max())
    if unpaced == 0:
        return ""
    return (
        f"Wall time a step: {unpaced} of the setting's {runs} runs record no pace of their "
        "evaluations, so it is read from the raw steps, each under the load its machine had "
        "then (runs of a loaded machine beside records made on a quieter one look slower)."
    )


def position_notes(frame: pd.DataFrame) -> list[str]:
    """Why positions are n/a, one sentence per distinct reason."""
    if "position_note" not in frame:
        return []
    notes = frame.loc[frame["position"].isna() & (frame["position_note"] != ""), "position_note"]
    return [f"Positions n/a: {note}." for note in dict.fromkeys(notes)]


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
            lambda r, n: fmt_position(r, "credit_position"),
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
        [cell(r, int(r["n_seeds"])) for _, cell in columns] for _, r in ranked(frame).iterrows()
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
