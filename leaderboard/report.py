"""Render a results directory as a leaderboard: Markdown, CSV, PNG plots and one HTML page.

``render(results_dir)`` writes into ``results_dir`` (or ``out_dir``):

- ``leaderboard.md``: per setting the verdict in a sentence or two (:mod:`.verdict`) and the
  oracle's price (:mod:`.oracle_price`: what a charged oracle would score), the gain
  over GRPO as a forest plot, the accuracy table sorted by the AUC gain (:mod:`.tables`), the
  equal-samples axis (:mod:`.samples`: a sentence, and its table where it is measured), the
  curves of GRPO, oracle credit, the best and the worst method, every method in a small panel
  against GRPO, the credit diagnostics table and the numbers reported by the papers where the
  task matches; then the figures across settings (the AUC gains of every setting side by side,
  credit precision against gain) and the skipped runs;
- ``leaderboard.csv``: the statistics, one row per task, options, setting and method;
- ``runs.csv``: the tidy table of every collected run (:func:`leaderboard.collect.collect_runs`);
- per setting ``gain_forest-<setting>.png``, ``curves-<setting>.png`` and
  ``multiples-<setting>.png``; across settings ``gain_overview.png``, ``credit_vs_gain.png``
  and ``credit.png`` (when
  the runs log credit diagnostics), ``gain_vs_length.png`` (when runs with several chain
  lengths exist);
- ``leaderboard.html``: the same content in one self-contained page, the plots embedded as
  base64 data URIs, no external assets.

Every file is built in memory first and then written to a temporary name and renamed, so a
failure leaves the previous leaderboard in place, never a half-written one. Once the new page
is written, the figures the earlier page showed and this one does not (a setting renamed, a
plot no longer drawn) are removed, so the folder shows what its records say and nothing older.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from creditbench.harness.records.files import RunFormatError, atomic_write_bytes, atomic_write_text

from . import plots
from .blocks import to_html, to_markdown
from .board import summarize
from .collect import collect_runs
from .oracle_price import price_sentence
from .papers import reported_results
from .records import spreadsheet_safe
from .samples import samples_sentence, samples_table
from .stats import BASELINE, GROUP, ORACLE, ordered_groups
from .suite_manifests import manifest_folders, suite_coverage, suite_names
from .tables import (
    accuracy_table,
    credit_table,
    gains_table,
    paper_table,
    position_notes,
    wall_time_note,
)
from .verdict import setting_verdict


class LeaderboardError(ValueError):
    """Nothing to render: the results directory is missing or holds no finished run."""


HOW_TO_READ = (
    "How to read: final accuracy is the eval accuracy at the end of the budget; AUC is the "
    "area under accuracy against the share of the budget spent, over the whole budget, each "
    "evaluation placed where it happened (a run at constant accuracy a scores a; the last "
    "step's spending past the budget earns nothing). "
    "A gain over GRPO is read seed by seed (seed s of every method starts from the same base "
    "and draws the same first prompts): the mean gap, its 95% percentile bootstrap interval "
    "in brackets, its 95% t interval after t, and k/n, the seeds of n at which the method is "
    "ahead. ▲: both intervals above 0 over at least 5 seeds (ahead of GRPO); ▼: both below "
    "(behind). Online: the mean reward of the training batches, each graded before its "
    "update. Rank: 1 + the number of rows whose AUC gain is beyond the row's (both of their "
    "intervals above both of its, GRPO's gain the point 0; with one seed, the point stands "
    "for the interval), so where every row has five seeds or more GRPO's rank is 1 + the "
    "methods ahead of it and a method not told apart from GRPO never ranks below it; rows of "
    "one rank share it (=2); where some method has five seeds, a row with fewer is listed "
    "after the ranked rows, unranked (n/a (n<5)): its wide interval would rank it first. "
    "Position: the method's mean AUC gain "
    "over the oracle's, GRPO at 0 and the exact-credit oracle at 1, with a bootstrap interval "
    "over seeds, read on the seeds at which the method, GRPO and the oracle have all run (a "
    "method with more seeds than the oracle has its gain over all of them); n/a unless the "
    "oracle is ahead of GRPO by the same rule (a ratio to a gap "
    "noise could erase is noise). Cost: the FLOPs and the wall time of a step over GRPO's "
    "(runs are matched on FLOPs, so a dearer step means fewer steps; the wall time is each "
    "run's median training step over the pace of its own evaluations (their seconds over their "
    "samples' mean length: the same work in every run of a setting, under the load the run "
    "met, which so divides out), median over seeds; a setting whose runs do not all record "
    "that pace reads the raw steps, on whatever load the runs met). Credit precision "
    "is the share of a failed response's negative credit that falls on its first wrong step "
    "(chance: the share of tokens that are first-wrong-step tokens); credit AUROC ranks tokens by "
    "negative advantage against the first-wrong-step label (0.5: uniform credit), and its "
    "score puts it on the same scale as the position. Filler entropy drift is the last minus "
    "the first logged entropy on reward-irrelevant tokens. Shared-prefix gradient: the net "
    "gradient the loss leaves on the tokens every response of a group shares, relative to its "
    "gradient on the other tokens (0: they cancel). Reset at the first wrong step (RRPO, "
    "SRPO): the share of resets placed exactly at the failed response's true first wrong step."
)


# ---------------------------------------------------------------------------------------------
# The document: a list of blocks, written out as Markdown and as HTML


def _count(n: int, noun: str) -> str:
    """``1 method``, ``3 methods``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


# the figures a board may draw: one of each prefix per setting, the others once per board
SETTING_FIGURE_PREFIXES = ("gain_forest-", "curves-", "multiples-")
BOARD_FIGURES = ("gain_overview", "credit_vs_gain", "credit", "gain_vs_length")


def shown_figures(page: Path) -> set[str]:
    """The figures a board's ``leaderboard.md`` shows (names without ``.png``); none if absent."""
    if not page.is_file():
        return set()
    return set(re.findall(r"!\[[^\]]*\]\(([^)/]+)\.png\)", page.read_text(encoding="utf-8")))


def stale_figures(out: Path, earlier: set[str], written: set[str]) -> list[Path]:
    """Figures the earlier page of ``out`` showed (``earlier``) that this render did not write:
    a setting renamed, a plot no longer drawn. Only names a board draws, and only those its own
    earlier page named: any other file in ``out`` is left alone."""
    stale = []
    for name in sorted(earlier - written):
        ours = name in BOARD_FIGURES or name.startswith(SETTING_FIGURE_PREFIXES)
        if ours and (out / f"{name}.png").is_file():
            stale.append(out / f"{name}.png")
    return stale


def setting_figures(stats: dict) -> dict[str, bytes]:
    """Per setting, the figures its section shows: ``gain_forest-<slug>``, ``curves-<slug>``
    (GRPO, oracle, the best and the worst method) and ``multiples-<slug>`` (one panel each)."""
    figures: dict[str, bytes | None] = {}
    curves = stats["curves"]
    for key, frame in ordered_groups(stats["methods"]):
        name = plots.slug(key)
        mask = (curves[GROUP] == pd.Series(key, index=GROUP)).all(axis=1)
        figures[f"gain_forest-{name}"] = plots.gain_forest(frame)
        figures[f"curves-{name}"] = plots.chosen_curves(curves[mask], frame)
        figures[f"multiples-{name}"] = plots.small_multiples(curves[mask])
    return {k: v for k, v in figures.items() if v is not None}


def build_blocks(
    results_name: str,
    stats: dict,
    papers: list[dict],
    warnings: list[str],
    figures: dict[str, bytes],
    n_runs: int,
    coverage: Sequence[str] = (),
    labels: dict[tuple, str] | None = None,
) -> list[tuple]:
    """The page as blocks; ``labels`` names a setting as its suite does (:func:`setting_labels`),
    its options then on the line below the heading."""
    labels = labels or {}
    methods = stats["methods"]
    # a board of one seed a method (the quick suite) has no interval to draw or rank by
    pairs = methods["gain_auc_pairs"] if "gain_auc_pairs" in methods else methods["n_seeds"]
    intervals = bool((pairs > 1).any())
    ranking = (
        "a row's rank is 1 + the rows beyond it by both intervals (how to read: at the end); "
        "brackets are 95% intervals."
        if intervals
        else "one seed a method, so no intervals: by the point estimate, ties sharing a rank."
    )
    blocks: list[tuple] = [("h1", f"creditbench leaderboard: {results_name}")]
    blocks.append(
        (
            "p",
            f"{n_runs} finished runs, {_count(methods.groupby(GROUP).ngroups, 'task setting')}, "
            f"{_count(methods['method'].nunique(), 'method')}. Baseline: {BASELINE}; upper "
            f"reference: {ORACLE}. Ranked by the gain in AUC over GRPO: {ranking}",
        )
    )
    spread = ", 95% intervals" if intervals else " (one seed: points)"
    forest = ", 95% intervals (thick: bootstrap, thin: t)" if intervals else spread
    blocks += [("p", sentence) for sentence in coverage]
    for key, frame in ordered_groups(methods):
        name = plots.slug(key)
        metric = frame["accuracy_metric"].iloc[0]
        if label := labels.get(key):
            blocks.append(("h2", f"The {label} setting · {key[0]}"))
            blocks.append(
                ("p", f"Options: {key[1]}" + ("" if key[2] == "default" else f", {key[2]}"))
            )
        else:
            blocks.append(("h2", plots.group_title(key)))
        blocks.append(("p", setting_verdict(frame)))
        if price := price_sentence(stats.get("oracle_price", pd.DataFrame()), frame):
            blocks.append(("p", price))
        if f"gain_forest-{name}" in figures:
            blocks.append(("img", f"gain_forest-{name}", f"Gain over GRPO per method{forest}"))
        blocks.append(("table", *accuracy_table(frame)))
        blocks.append(
            (
                "p",
                f"Task {key[0]}, options {key[1]}"
                + ("" if key[2] == "default" else f", setting {key[2]}")
                + f"; accuracy: {metric} on the eval split."
                + (" One seed (n=1) has no interval." if (frame["n_seeds"] < 2).any() else "")
                + "".join(f" {note}" for note in position_notes(frame))
                + (f" {note}" if (note := wall_time_note(frame)) else ""),
            )
        )
        blocks.append(("p", samples_sentence(frame)))
        if (samples := samples_table(frame)) is not None:
            blocks.append(("table", *samples))
        blocks.append(("table", *gains_table(frame)))
        if f"curves-{name}" in figures:
            caption = (
                "Accuracy against trained responses: GRPO, oracle credit, the best and the "
                "worst method" + (" (mean over seeds, 95% band)" if intervals else "")
            )
            blocks.append(("img", f"curves-{name}", caption))
        if f"multiples-{name}" in figures:
            blocks.append(("img", f"multiples-{name}", "Every method against GRPO (black)"))
        diagnostics = [
            c
            for c in ("credit_precision", "credit_auroc", "filler_entropy_drift", "cancel_ratio")
            if c in frame and frame[c].notna().any()
        ]
        if diagnostics:
            blocks.append(("h3", "Credit diagnostics"))
            blocks.append(("table", *credit_table(frame)))
        else:
            blocks.append(
                (
                    "p",
                    "Credit diagnostics: these runs log no credit precision, credit "
                    "AUROC or filler entropy.",
                )
            )
        resets = sorted(set(frame["method"]) & {"rrpo", "srpo"})
        if resets:
            blocks.append(("p", RESET_MATCHING.format(methods=" and ".join(resets))))
        matching = [p for p in papers if p["task"] == key[0]]
        if matching:
            blocks.append(("h3", "Reported by the paper"))
            blocks.append(
                (
                    "p",
                    "Numbers reported by the papers (their models, data and budgets; "
                    "not produced here), beside our final accuracy on the same task.",
                )
            )
            blocks.append(("table", *paper_table(frame, matching)))
    blocks.append(("h2", "Across settings"))
    captions = {
        "gain_overview": f"AUC gain over GRPO per method and setting{spread}",
        "credit_vs_gain": "Does better credit placement buy faster learning? Credit precision "
        f"against AUC gain over GRPO, per method and setting{spread}",
        "credit": "Credit diagnostics: precision, AUROC, filler entropy drift",
        "gain_vs_length": f"Gain in AUC over GRPO against chain length{spread}",
    }
    for name, caption in captions.items():
        if name in figures:
            blocks.append(("img", name, caption))
    blocks.append(("h3", "How to read"))
    blocks.append(("p", HOW_TO_READ))
    if warnings:
        blocks.append(("h2", "Skipped runs and warnings"))
        blocks.append(("list", warnings))
    return blocks


RESET_MATCHING = (
    "Compute matching of {methods}: this table compares at equal FLOPs, so the failed parent, "
    "the discarded fresh attempts and the localisation call are paid from the same budget as "
    "the trained responses. The resets paper matches compute differently, by trained sequences "
    "per prompt (8 for every method: GRPO with 8 responses, RRPO/SRPO with 4 fresh and 4 "
    "continuations); `fresh_per_prompt` in each run's metrics.jsonl gives the fresh attempts "
    "they needed."
)


# ---------------------------------------------------------------------------------------------
# Entry point


def provenance(table: pd.DataFrame) -> str:
    """Which code and packages produced the runs: one sentence from their records."""
    runs = table[table["kind"] == "run"] if "commit" in table else table.iloc[0:0]
    commits: dict[str, int] = {}
    packages: dict[str, set[str]] = {}
    dirty = 0
    for row in runs.to_dict("records"):
        commit = str(row.get("commit") or "")[:12]
        if not commit or commit == "nan":
            continue
        commits[commit] = commits.get(commit, 0) + 1
        dirty += bool(row.get("git_dirty"))
        for package, version in json.loads(row.get("packages") or "{}").items():
            packages.setdefault(package, set()).add(str(version))
    if not commits:
        return "No run records its environment."
    code = ", ".join(f"{c} ({n} runs)" for c, n in sorted(commits.items()))
    versions = "; ".join(f"{p} {', '.join(sorted(v))}" for p, v in sorted(packages.items()))
    edits = f"; {dirty} with uncommitted changes" if dirty else ""
    return f"Code: git commit {code}{edits}." + (f" Packages: {versions}." if versions else "")


def setting_labels(table: pd.DataFrame) -> dict[tuple, str]:
    """``{(task, options, setting): label}``: the name a suite gives a setting (``label: hard``
    in tools/suites/standard.yaml), read from its runs' names (``chain-hard-steps=10-...-grpo-s0``:
    the word after the task, before the options), where every run of the setting carries the
    same one and no other setting of the board does (a grid under one label, the tuning
    suite's learning rates, keeps its option strings). A reader says "the hard setting"; the
    options stay on the line below."""
    runs = table[table["kind"] == "run"]
    labels: dict[tuple, str] = {}
    for key, group in runs.groupby(GROUP, sort=False):
        found: set[str] = set()
        for name in group["run"].astype(str):
            rest = name.rsplit("/", 1)[-1].removeprefix(f"{key[0]}-")
            word, _, options = rest.partition("-")
            found.add(word if word and "=" not in word and "=" in options else "")
        if len(found) == 1 and (label := found.pop()):
            labels[key] = label
    shared = {label for label in labels.values() if list(labels.values()).count(label) > 1}
    return {key: label for key, label in labels.items() if label not in shared}


def render(
    sources: str | Path | Sequence[str | Path],
    out_dir: str | Path | None = None,
    *,
    reps: int = 2000,
    records_only: bool = False,
) -> dict[str, Path]:
    """Write the leaderboard of ``sources``; returns ``{name: path}`` of every file written.
    With ``records_only``, only ``runs.csv`` (the records of a folder whose pages come from
    elsewhere, such as ``creditbench validate``'s report).

    ``sources`` is a results directory, a committed ``runs.csv`` (:mod:`.records`) or several of
    either; ``out_dir`` defaults to the first source when it is a directory. Names:
    ``markdown``, ``csv``, ``runs_csv``, ``html`` and one per figure (its file name without
    ``.png``). Warnings (skipped runs, duplicates) go
    to stderr and into the page.

    Raises:
        LeaderboardError: a source is missing or unreadable, or none holds a finished run.
    """
    paths_in = [Path(sources)] if isinstance(sources, (str, Path)) else [Path(s) for s in sources]
    if not paths_in:
        raise LeaderboardError("no results directory or runs.csv given")
    for source in paths_in:
        if not source.exists():
            raise LeaderboardError(f"{source}: no such results directory or runs.csv")
    if out_dir is None and not paths_in[0].is_dir():
        raise LeaderboardError(
            f"{paths_in[0]}: is a file, not a results folder; a runs.csv is read with --out "
            "naming where to write the board"
        )
    try:
        table, warnings = collect_runs(paths_in)
    except (FileNotFoundError, RunFormatError) as err:
        raise LeaderboardError(str(err)) from None
    where = ", ".join(str(p) for p in paths_in)
    n_runs = int((table["kind"] == "run").sum())
    if n_runs == 0:
        detail = f"; skipped: {'; '.join(warnings[:5])}" if warnings else ""
        raise LeaderboardError(f"{where}: holds no finished run{detail}")
    out = Path(out_dir) if out_dir is not None else paths_in[0]
    if records_only:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "runs.csv", spreadsheet_safe(table).to_csv(index=False))
        return {"runs_csv": out / "runs.csv"}
    stats = summarize(table, reps=reps)
    papers, paper_warnings = reported_results(set(stats["methods"]["task"]))
    warnings = warnings + paper_warnings
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    drawn = {
        "gain_overview": plots.gain_overview(stats["methods"]),
        "credit_vs_gain": plots.credit_vs_gain(stats["methods"]),
        "credit": plots.credit_chart(stats["methods"]),
        "gain_vs_length": plots.gain_vs_length(stats["methods"]),
    }
    figures = setting_figures(stats)
    figures.update({name: png for name, png in drawn.items() if png is not None})
    finished = set(table.loc[table["kind"] == "run", "run"])
    folders = manifest_folders(paths_in)
    coverage = suite_coverage(folders, finished)
    # the board is named after the suites it shows, else after the folder it is written to
    suites = suite_names(folders)
    name = f"suite {', '.join(suites)}" if suites else out.resolve().name
    labels = setting_labels(table)
    blocks = build_blocks(name, stats, papers, warnings, figures, n_runs, coverage, labels)
    blocks.append(("h2", "Provenance"))
    blocks.append(("p", provenance(table)))
    texts = {
        "markdown": ("leaderboard.md", to_markdown(blocks)),
        "csv": ("leaderboard.csv", spreadsheet_safe(stats["methods"]).to_csv(index=False)),
        "runs_csv": ("runs.csv", spreadsheet_safe(table).to_csv(index=False)),
        "html": ("leaderboard.html", to_html(blocks, figures, f"creditbench leaderboard: {name}")),
    }
    out.mkdir(parents=True, exist_ok=True)
    earlier = shown_figures(out / "leaderboard.md")
    paths: dict[str, Path] = {}
    for key, png in figures.items():
        paths[key] = out / f"{key}.png"
        atomic_write_bytes(paths[key], png)
    for key, (file_name, text) in texts.items():
        paths[key] = out / file_name
        atomic_write_text(paths[key], text)
    # after the new page is in place, so a crash never leaves a page without its figures
    for path in stale_figures(out, earlier, set(figures)):
        print(f"removed {path.name}: a figure of an earlier render, not drawn now", file=sys.stderr)
        path.unlink()
    return paths
