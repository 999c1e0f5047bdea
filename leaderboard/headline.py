"""The home page's headline, computed from the leaderboard's committed records.

``docs/index.md`` opens with the validated board: the gain figure of the standard suite's hard
setting (every method's AUC gain over GRPO with its 95% interval, sorted, the board's own
``gain_forest`` figure) and sentences computed from the intervals: the verdict of
:func:`.verdict.setting_verdict` and each method's position on the GRPO(0) -> oracle(1) scale
where the oracle separates. The block sits between two markers in the page, so it is rewritten
in place and a test can recompute it from ``docs/results/standard/runs.csv``::

    python scripts/home_headline.py docs/results/standard/runs.csv docs/index.md
"""

from __future__ import annotations

import math
from pathlib import Path, PurePosixPath

import pandas as pd

from .board import summarize
from .gains import ranked
from .plots import slug
from .stats import BASELINE, ORACLE
from .verdict import setting_verdict

START, END = "<!-- headline: computed from the records; do not edit -->", "<!-- /headline -->"
TASK, LABEL = "chain", "hard"  # the standard suite's hard setting (tools/suites/standard.yaml)


class HeadlineError(ValueError):
    """The records or the page cannot give a headline (the message says which)."""


def setting_rows(table: pd.DataFrame, label: str = LABEL) -> pd.DataFrame:
    """The rows of the runs (and their evaluations) of the setting ``label``, by run name."""
    prefix = f"{TASK}-{label}-"
    names = table["run"].map(lambda name: PurePosixPath(str(name)).name)
    return table[names.str.startswith(prefix)]


def _positions(frame: pd.DataFrame) -> str:
    rows = ranked(frame[~frame["method"].isin([BASELINE, ORACLE])])
    placed = [r for _, r in rows.iterrows() if math.isfinite(r.get("position", math.nan))]
    if not placed:
        notes = sorted({str(n) for n in frame.get("position_note", []) if isinstance(n, str) and n})
        why = f" ({'; '.join(notes)})" if notes else ""
        return f"No method is placed on the GRPO (0) → oracle (1) scale yet{why}."
    text = ", ".join(
        f"{r['method']} {r['position']:+.2f} [{r['position_low']:+.2f}, {r['position_high']:+.2f}]"
        for r in placed
    )
    return (
        "Positions on the GRPO (0) → oracle (1) scale (the ratio of the paired mean AUC gains, "
        f"bootstrap 95% interval over seeds): {text}."
    )


def headline_block(
    records: str | Path, board: str = "results/standard", *, reps: int = 2000
) -> str:
    """The Markdown between the markers, from the records (a ``runs.csv`` or a folder);
    ``board`` is the board's folder relative to the page, where its figure lies."""
    from .collect import collect_runs

    table, _ = collect_runs([records])
    hard = setting_rows(table)
    if hard.empty or not (hard["kind"] == "run").any():
        raise HeadlineError(f"{records}: no finished run of the {LABEL} setting")
    stats = summarize(hard, reps=reps)
    frame = stats["methods"]
    keys = frame[["task", "options", "setting"]].drop_duplicates()
    if len(keys) != 1:
        raise HeadlineError(f"{records}: the {LABEL} setting's runs differ in their settings")
    key = tuple(keys.iloc[0])
    n_methods = frame["method"].nunique()
    seeds = int(frame["n_seeds"].max())
    if BASELINE not in set(frame["method"]):  # a campaign's first records: no gain to show yet
        return "\n".join(
            [
                START,
                f"The hard setting of the frozen protocol: {n_methods} methods have finished "
                f"runs, GRPO not yet, so no gain over it can be shown; the board fills in as "
                "the campaign's runs are committed.",
                END,
            ]
        )
    figure = f"{board}/gain_forest-{slug(key)}.png"
    return "\n".join(
        [
            START,
            f"![AUC gain over GRPO per method, hard setting, 95% intervals, best first]({figure})",
            "",
            f"The hard setting of the frozen protocol, {n_methods} methods, "
            + ("one seed each" if seeds == 1 else f"up to {seeds} seeds each")
            + f". {setting_verdict(frame)} {_positions(frame)}",
            END,
        ]
    )


def rewrite(page: str, block: str) -> str:
    """``page`` with the text between its markers replaced by ``block``."""
    if page.count(START) != 1 or page.count(END) != 1:
        raise HeadlineError("the page needs exactly one pair of headline markers")
    before, rest = page.split(START)
    _, after = rest.split(END)
    return before + block + after


def current(page: str) -> str | None:
    """The block between the page's markers (markers included), or None without them."""
    if START not in page:
        return None
    before, rest = page.split(START, 1)
    return START + rest.split(END, 1)[0] + END
