"""The home page's headline, computed from the leaderboard's committed records.

``docs/index.md`` opens with the validated board: the gain figure of the standard suite's hard
setting (every method's AUC gain over GRPO with its 95% interval, sorted, the board's own
``gain_forest`` figure) and sentences computed from the intervals: the verdict of
:func:`.verdict.setting_verdict` and each method's position on the GRPO(0) -> oracle(1) scale
where the oracle separates. The block sits between two markers in the page, so it is rewritten
in place and a test can recompute it from ``docs/results/standard/runs.csv``::

    python scripts/home_headline.py docs/results/standard/runs.csv docs/index.md

A second block below it introduces the credit picture: GRPO, the oracle, the board's best
method (the first row of the hard setting's ranking after the references) and OPPO, the seed
papers' self-oracle, large enough to read (:func:`credit_block`). When the board's best
changes, the block names the new method and the picture must be redrawn with the command the
block shows (``--explain`` does it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import NamedTuple

import pandas as pd

from .board import summarize
from .gains import ranked
from .plots import slug
from .stats import BASELINE, ORACLE
from .verdict import setting_verdict

START, END = "<!-- headline: computed from the records; do not edit -->", "<!-- /headline -->"
CREDIT_START = "<!-- credit picture: computed from the records; do not edit -->"
CREDIT_END = "<!-- /credit picture -->"
SEED_METHOD = "oppo"  # the self-oracle the project's seed papers start from
SPARE = "vineppo"  # stands in for the board's best before there is one, or when it is OPPO
PICTURE = "results/credit/few"  # the credit picture's folder, relative to the page
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


def hard_board(records: str | Path, *, reps: int = 2000) -> pd.DataFrame:
    """The board's per-method rows of the hard setting (:func:`.board.summarize`), from the
    records (a ``runs.csv`` or a folder)."""
    from .collect import collect_runs

    table, _ = collect_runs([records])
    hard = setting_rows(table)
    if hard.empty or not (hard["kind"] == "run").any():
        raise HeadlineError(f"{records}: no finished run of the {LABEL} setting")
    return summarize(hard, reps=reps)["methods"]


def leaders(frame: pd.DataFrame) -> list[str]:
    """The first rank of the ranking after GRPO and the oracle, best first: the best method
    and those whose intervals overlap its interval; empty before GRPO's runs."""
    if BASELINE not in set(frame["method"]):
        return []
    rows = ranked(frame[~frame["method"].isin([BASELINE, ORACLE])])
    if rows.empty or not math.isfinite(rows.iloc[0]["rank"]):
        return []
    return [str(m) for m in rows.loc[rows["rank"] == rows.iloc[0]["rank"], "method"]]


def best_method(frame: pd.DataFrame) -> str | None:
    """The first row of the ranking after GRPO and the oracle; None before GRPO's runs."""
    first = leaders(frame)
    return first[0] if first else None


def credit_methods(best: str | None) -> list[str]:
    """The credit picture's columns: GRPO, the oracle, the board's best, the seed method."""
    third = SPARE if best in (None, SEED_METHOD) else best
    return [BASELINE, ORACLE, third, SEED_METHOD]


def credit_command(methods: list[str], folder: str = f"docs/{PICTURE}") -> str:
    """The command that draws the picture of ``methods`` into ``folder``."""
    return (
        "creditbench explain --responses 2 --set rollout.prompts_per_step=2 "
        f"--out {folder} \\\n  --methods {','.join(methods)}"
    )


def credit_block(best: str | None, tied: Sequence[str] = ()) -> str:
    """The Markdown between the credit picture's markers, for the board's best method and the
    methods that share its rank."""
    methods = credit_methods(best)
    third = methods[2]
    seed_text = "OPPO (a self-oracle's evidence)"
    if best == SEED_METHOD:
        third_text = "VinePPO (Monte-Carlo values)"
        seed_text = "OPPO (a self-oracle's evidence; first on the board above after the oracle)"
    elif third == SPARE:
        why = "the board's best joins it once GRPO's runs let the board rank one"
        third_text = f"VinePPO (Monte-Carlo values; {why})"
    elif tied:
        third_text = (
            f"{third}, the first row of the board above after the oracle (it shares its rank "
            f"with {', '.join(tied)}: their intervals overlap)"
        )
    else:
        third_text = f"{third}, first on the board above after the oracle"
    return "\n".join(
        [
            CREDIT_START,
            'What "token-level credit" means, on two failed responses of one batch: four '
            "methods' advantages on the same tokens (red: blame, blue: positive credit, each "
            "method scaled to its own largest |advantage|; underlined: the step checker's first "
            "wrong step). GRPO blames every token alike; the near-exact oracle puts the blame on "
            "the first wrong step and gives each right step the change it made to the chance of "
            f"success (near 0 for most); {third_text}, and {seed_text} each spread it their "
            "own way ([the methods](methods/index.md)).",
            "",
            f"![Token advantages of {', '.join(methods)} on the same failed responses]"
            f"({PICTURE}/credit.png)",
            "",
            f"Made by (a minute or two on two CPU cores; [as a page]({PICTURE}/credit.html)):",
            "",
            "```bash",
            credit_command(methods),
            "```",
            CREDIT_END,
        ]
    )


class Home(NamedTuple):
    headline: str  # the headline block
    credit: str  # the credit picture's block
    methods: list[str]  # the credit picture's columns


def home_blocks(records: str | Path, board: str = "results/standard", *, reps: int = 2000) -> Home:
    """The home page's two blocks, from one computation of the board."""
    frame = hard_board(records, reps=reps)
    first = leaders(frame)
    best = first[0] if first else None
    credit = credit_block(best, first[1:])
    return Home(_headline(frame, records, board), credit, credit_methods(best))


def headline_block(
    records: str | Path, board: str = "results/standard", *, reps: int = 2000
) -> str:
    """The Markdown between the markers, from the records (a ``runs.csv`` or a folder);
    ``board`` is the board's folder relative to the page, where its figure lies."""
    return _headline(hard_board(records, reps=reps), records, board)


def _headline(frame: pd.DataFrame, records: str | Path, board: str) -> str:
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


def rewrite(page: str, block: str, start: str = START, end: str = END) -> str:
    """``page`` with the text between its markers ``start`` and ``end`` replaced by ``block``."""
    if page.count(start) != 1 or page.count(end) != 1:
        raise HeadlineError(f"the page needs exactly one pair of markers {start} ... {end}")
    before, rest = page.split(start)
    _, after = rest.split(end)
    return before + block + after


def current(page: str, start: str = START, end: str = END) -> str | None:
    """The block between the page's markers (markers included), or None without them."""
    if start not in page:
        return None
    before, rest = page.split(start, 1)
    return start + rest.split(end, 1)[0] + end
