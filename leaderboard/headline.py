"""The home page's headline, computed from the leaderboard's committed records.

``docs/index.md`` opens with the validated board, on its first screen (:mod:`.home`): the
verdict in one plain sentence (what beats GRPO, by how much, on the compute axis, in each
setting), the hard setting's gain figure titled with the setting's name and options (the
board's own ``gain_forest`` figure), and a compact table of every method's position in each
setting, its standing against GRPO and its seeds. The intervals behind the words are on the
board's page, which the block links to. The block sits between two markers in the page, so it
is rewritten in place and a test can recompute it from ``docs/results/standard/runs.csv``::

    python scripts/home_headline.py docs/results/standard/runs.csv docs/index.md

A second block below it introduces the credit picture: GRPO, the oracle, the board's best
method (the first method of the hard setting's ranking that is neither reference) and OPPO, the
seed papers' self-oracle, large enough to read (:func:`credit_block`). When the board's best
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
from .gains import ranked, ranked_without
from .home import axes_note, compact_table, figure_title, verdict_sentence
from .plots import slug
from .samples import measured, samples_sentence
from .stats import BASELINE, ORACLE
from .verdict import setting_verdict

START, END = "<!-- headline: computed from the records; do not edit -->", "<!-- /headline -->"
CREDIT_START = "<!-- credit picture: computed from the records; do not edit -->"
CREDIT_END = "<!-- /credit picture -->"
SEED_METHOD = "oppo"  # the self-oracle the project's seed papers start from
SPARE = "vineppo"  # stands in for the board's best before there is one, or when it is OPPO
PICTURE = "results/credit/few"  # the credit picture's folder, relative to the page
TASK, LABEL = "chain", "hard"  # the standard suite's hard setting (tools/suites/standard.yaml)
EASY = "easy"  # its easy setting: a sentence after the hard one's


class HeadlineError(ValueError):
    """The records or the page cannot give a headline (the message says which)."""


def setting_rows(table: pd.DataFrame, label: str = LABEL) -> pd.DataFrame:
    """The rows of the runs (and their evaluations) of the setting ``label``, by run name."""
    prefix = f"{TASK}-{label}-"
    names = table["run"].map(lambda name: PurePosixPath(str(name)).name)
    return table[names.str.startswith(prefix)]


def _positions(frame: pd.DataFrame) -> str:
    rows = ranked_without(frame, [BASELINE, ORACLE])
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
    return _hard(_table(records), records, reps)


def _table(records: str | Path) -> pd.DataFrame:
    """The runs' table of the records (:func:`.collect.collect_runs`), read once per page."""
    from .collect import collect_runs

    return collect_runs([records])[0]


def _hard(table: pd.DataFrame, records: str | Path, reps: int) -> pd.DataFrame:
    frame = setting_board(table, LABEL, reps=reps)
    if frame is None:
        raise HeadlineError(f"{records}: no finished run of the {LABEL} setting")
    return frame


def setting_board(table: pd.DataFrame, label: str, *, reps: int = 2000) -> pd.DataFrame | None:
    """The board's per-method rows of the setting ``label`` of the runs' ``table``; None
    without a finished run."""
    rows = setting_rows(table, label)
    if rows.empty or not (rows["kind"] == "run").any():
        return None
    return summarize(rows, reps=reps)["methods"]


def easy_sentence(frame: pd.DataFrame | None) -> str:
    """The easy setting in a paragraph after the hard one's: its verdict and positions; empty
    before GRPO's easy runs."""
    if frame is None or BASELINE not in set(frame["method"]):
        return ""
    # the equal-samples axis where it is measured (the hard setting's sentence says when not)
    samples = f" {samples_sentence(frame)}" if measured(frame).any() else ""
    return (
        f"\n\nIn the easy setting ({frame['method'].nunique()} methods, {seeds_each(frame)}): "
        f"{setting_verdict(frame)} {_positions(frame)}{samples}"
    )


def seeds_each(frame: pd.DataFrame) -> str:
    """How many seeds the rows hold, as the headline says it: "10 seeds each", or "5 to 10
    seeds each" while (or where, by the easy seeds' rule) rows differ."""
    fewest, most = int(frame["n_seeds"].min()), int(frame["n_seeds"].max())
    if most == 1:
        return "one seed each"
    return f"{most} seeds each" if fewest == most else f"{fewest} to {most} seeds each"


class Best(NamedTuple):
    """The board's best method besides the references, where the board's one ranking puts it."""

    method: str
    rank: str  # as the board prints it: "3", or "=2" when shared
    sharing: list[str]  # the other rows at its rank (references included), best first


def board_best(frame: pd.DataFrame) -> Best | None:
    """The first method of the board's ranking (:func:`.gains.ranked`, the board's own, with
    GRPO and the oracle in it) that is neither; None before GRPO's runs or any ranked method."""
    if BASELINE not in set(frame["method"]):
        return None
    rows = ranked(frame)
    methods = rows[~rows["method"].isin([BASELINE, ORACLE]) & rows["rank"].notna()]
    if methods.empty:
        return None
    first = methods.iloc[0]
    same = rows[(rows["rank"] == first["rank"]) & (rows["method"] != first["method"])]
    label = f"={int(first['rank'])}" if len(same) else str(int(first["rank"]))
    return Best(str(first["method"]), label, [str(m) for m in same["method"]])


def credit_methods(best: str | None) -> list[str]:
    """The credit picture's columns: GRPO, the oracle, the board's best, the seed method."""
    third = SPARE if best in (None, SEED_METHOD) else best
    return [BASELINE, ORACLE, third, SEED_METHOD]


def credit_argv(methods: Sequence[str], folder: str = f"docs/{PICTURE}") -> list[str]:
    """``creditbench explain``'s arguments that draw the picture of ``methods`` into ``folder``."""
    return [
        "explain",
        "--responses",
        "2",
        "--set",
        "rollout.prompts_per_step=2",
        "--out",
        folder,
        "--methods",
        ",".join(methods),
    ]


def credit_command(methods: Sequence[str]) -> str:
    """The command of :func:`credit_argv` as the page shows it, on two lines."""
    argv = credit_argv(methods)
    return f"creditbench {' '.join(argv[:-2])} \\\n  {' '.join(argv[-2:])}"


def _place(best: Best) -> str:
    """Where the board puts ``best``: its rank and the rows that share it; where GRPO is one of
    them, the method is first by its point estimate only, and the sentence says so."""
    if not best.sharing:
        return f"the board's best method besides the references, at rank {best.rank}"
    shared = f"with {', '.join(best.sharing)} (as many rows beyond each of them)"
    if BASELINE in best.sharing:
        return (
            "first, by its point estimate, of the methods the board ranks level with GRPO: "
            f"rank {best.rank} {shared}"
        )
    return f"the board's best method besides the references, at rank {best.rank} {shared}"


def credit_block(best: Best | None) -> str:
    """The Markdown between the credit picture's markers, for the board's best method."""
    methods = credit_methods(best.method if best else None)
    seed_text = "OPPO (a self-oracle's evidence)"
    if best is None:
        third_text = (
            "VinePPO (Monte-Carlo values; the board's best joins it once the board ranks a "
            "method against GRPO)"
        )
    elif best.method == SEED_METHOD:
        third_text = "VinePPO (Monte-Carlo values)"
        seed_text = f"OPPO (a self-oracle's evidence; {_place(best)})"
    else:
        third_text = f"{best.method}, {_place(best)}"
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
    """The home page's two blocks, from one reading of the records and one computation of
    each setting's board."""
    table = _table(records)
    frame = _hard(table, records, reps)
    best = board_best(frame)
    methods = credit_methods(best.method if best else None)
    easy = setting_board(table, EASY, reps=reps)
    return Home(_headline(frame, records, board, easy), credit_block(best), methods)


def headline_block(
    records: str | Path, board: str = "results/standard", *, reps: int = 2000
) -> str:
    """The Markdown between the markers, from the records (a ``runs.csv`` or a folder);
    ``board`` is the board's folder relative to the page, where its figure lies."""
    return home_blocks(records, board, reps=reps).headline


def _headline(
    frame: pd.DataFrame, records: str | Path, board: str, easy: pd.DataFrame | None = None
) -> str:
    """The first screen (:mod:`.home`): the verdict in a sentence, the hard setting's titled
    figure, a compact table of both settings; the intervals behind them are on the board."""
    keys = frame[["task", "options", "setting"]].drop_duplicates()
    if len(keys) != 1:
        raise HeadlineError(f"{records}: the {LABEL} setting's runs differ in their settings")
    key = tuple(keys.iloc[0])
    n_methods = frame["method"].nunique()
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
    settings = {LABEL: frame, EASY: easy}
    figure = f"{board}/gain_forest-{slug(key)}.png"
    return "\n".join(
        [
            START,
            verdict_sentence(settings),
            "",
            figure_title(LABEL, frame),
            "",
            f"![AUC gain over GRPO per method, {LABEL} setting, best first; 95% intervals, "
            f"thick: bootstrap, thin: t]({figure})",
            "",
            compact_table(settings),
            "",
            f"{axes_note(settings)} Every interval behind these words, each setting's full "
            f"verdict and Holm's correction over its rows: [the standard board]({board}/"
            "leaderboard.md).",
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
