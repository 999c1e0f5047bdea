"""The home page's first screen, in plain words: the verdict in one sentence, a titled figure
with its setting named, and a compact table of every method's place in each setting.

The numbers are the board's (:func:`.board.summarize` of each setting, as
:mod:`.headline` reads them); the intervals behind each word stay on the board's page, which
the block links to. A method *beats* GRPO where the board's claim rule calls it ahead (both 95%
intervals of its paired AUC gain above zero over at least 5 seed pairs), *falls behind* where
both lie below, and is *level* otherwise: the words are the verdict's (:mod:`.verdict`), never
a point estimate's.

Settings are named as a reader says them ("the hard setting"), with what they are in a second
line (:data:`SETTING_WORDS`) and the option string the records carry beside it.
"""

from __future__ import annotations

import math

import pandas as pd

from .gains import MIN_PAIRS_FOR_A_CLAIM, ranked
from .samples import measured
from .stats import BASELINE, ORACLE

# What each setting of the standard suite is, in words (tools/suites/standard.yaml and
# docs/testbed.md "The frozen protocol"): the reader's name first, the options second.
SETTING_WORDS = {
    "hard": "10-step chains on a base policy that slips, so about a third of GRPO's first "
    "groups fail together",
    "easy": "8-step chains on the shipped base policy",
}
AXIS = "at equal compute (the area under accuracy over one FLOP budget, AUC)"


def _flag(row: pd.Series, column: str) -> bool:
    """A claim-rule column of a row as a boolean (False where absent or NaN)."""
    value = row.get(column)
    return value is not None and value == value and bool(value)


def standing(row: pd.Series) -> str:
    """A method's place against GRPO in words: beats, falls behind, level, or not tested."""
    if row["method"] == BASELINE:
        return "the baseline"
    pairs = row.get("gain_auc_pairs")
    if pairs is None or not math.isfinite(pairs) or pairs < MIN_PAIRS_FOR_A_CLAIM:
        return "not tested"
    if _flag(row, "gain_auc_separates"):
        return "beats GRPO"
    if _flag(row, "gain_auc_reversed"):
        return "behind GRPO"
    return "level"


def _setting_clause(name: str, frame: pd.DataFrame | None) -> str:
    """One setting's part of the verdict sentence."""
    if frame is None or BASELINE not in set(frame["method"]):
        return f"the {name} setting has no GRPO runs yet"
    rows = {str(r["method"]): r for _, r in frame.iterrows()}
    others = [r for m, r in rows.items() if m not in (BASELINE, ORACLE)]
    winners = [r for r in others if standing(r) == "beats GRPO"]
    behind = sum(standing(r) == "behind GRPO" for r in others)
    oracle = rows.get(ORACLE)
    oracle_gain = oracle["gain_auc"] if oracle is not None else math.nan
    if winners:
        wins = ", ".join(
            f"{r['method']} beats GRPO by {r['gain_auc']:+.3f} AUC"
            + (
                f" ({r['position']:.2f} of the way to exact credit's {oracle_gain:+.3f})"
                if math.isfinite(r.get("position", math.nan)) and math.isfinite(oracle_gain)
                else ""
            )
            for r in winners
        )
        clause = f"in the {name} setting {wins}"
    else:
        clause = f"in the {name} setting no credit method beats GRPO"
        if oracle is not None and standing(oracle) == "beats GRPO":
            clause += f" (exact credit, the oracle, does: {oracle_gain:+.3f} AUC)"
    return f"{clause} and {behind} of {len(others)} methods fall behind it"


def verdict_sentence(settings: dict[str, pd.DataFrame | None]) -> str:
    """The verdict in one sentence: what wins, by how much, on which axis, in which setting."""
    clauses = [_setting_clause(name, frame) for name, frame in settings.items()]
    text = "; ".join(clauses)
    return f"**The verdict, {AXIS}:** {text[0].upper()}{text[1:]}."


def figure_title(name: str, frame: pd.DataFrame) -> str:
    """The figure's title, naming its setting in words and as the records' options."""
    options = str(frame["options"].iloc[0])
    words = SETTING_WORDS.get(name, options)
    seeds = int(frame["n_seeds"].max())
    return (
        f"**Figure: every method's gain over GRPO in the {name} setting** ({words}; "
        f"{seeds} seeds; left: AUC, right: final accuracy; dots: means over seeds, bars: 95% "
        f"intervals, thick bootstrap, thin t). Options: `{options}`."
    )


def _position(row: pd.Series | None) -> str:
    if row is None:
        return "not run"
    if row["method"] == BASELINE:
        return "0 (GRPO)"
    if row["method"] == ORACLE:
        return "1 (reference)"
    value = row.get("position", math.nan)
    return f"{value:+.2f}" if isinstance(value, float) and math.isfinite(value) else "n/a"


def compact_table(settings: dict[str, pd.DataFrame | None]) -> str:
    """Method, its position on the GRPO (0) -> oracle (1) scale at equal compute in each
    setting, its standing against GRPO, and its seeds; in the first setting's ranking. An
    equal-samples column joins where a setting measured that axis."""
    present = {
        name: frame
        for name, frame in settings.items()
        if frame is not None and BASELINE in set(frame["method"])  # no GRPO: no position yet
    }
    if not present:
        return ""
    first = next(iter(present.values()))
    order = [str(m) for m in ranked(first)["method"]]
    for frame in present.values():
        order += [str(m) for m in frame["method"] if str(m) not in order]
    rows = {
        name: {str(r["method"]): r for _, r in frame.iterrows()} for name, frame in present.items()
    }
    samples = [name for name, frame in present.items() if measured(frame).any()]
    header = ["method"]
    header += [f"{name}: position" for name in present]
    header += [f"{name}: at equal samples" for name in samples]
    header += [f"{name}: against GRPO" for name in present]
    header += ["seeds (" + " / ".join(present) + ")"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method in order:
        cells = [method]
        cells += [_position(rows[name].get(method)) for name in present]
        for name in samples:
            row = rows[name].get(method)
            value = row.get("samples_position", math.nan) if row is not None else math.nan
            cells.append(f"{value:+.2f}" if math.isfinite(value) else "not measured")
        for name in present:
            row = rows[name].get(method)
            cells.append(standing(row) if row is not None else "not run")
        seeds = [rows[name].get(method) for name in present]
        cells.append(" / ".join(str(int(r["n_seeds"])) if r is not None else "0" for r in seeds))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def axes_note(settings: dict[str, pd.DataFrame | None]) -> str:
    """What the table's positions are, and where the equal-samples axis stands."""
    unmeasured = [n for n, f in settings.items() if f is not None and not measured(f).any()]
    note = (
        "A position is a method's gain over GRPO as a share of exact credit's: GRPO is 0, the "
        "oracle 1, below 0 behind GRPO."
    )
    if unmeasured:
        note += (
            f" At equal samples (trained responses): not measured in the {' and '.join(unmeasured)}"
            f" setting{'s' if len(unmeasured) > 1 else ''} (no run was evaluated at counts of "
            "trained responses)."
        )
    return note
