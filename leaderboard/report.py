"""Render a results directory as a leaderboard: Markdown, CSV, PNG plots and one HTML page.

``render(results_dir)`` writes into ``results_dir`` (or ``out_dir``):

- ``leaderboard.md``: per task the accuracy table (ranks, IQM and mean with 95% CIs, probability
  of improvement over GRPO, learning speed between GRPO and oracle credit), the credit
  diagnostics table, the numbers reported by the papers where the task matches, the skipped runs;
- ``leaderboard.csv``: the statistics, one row per task, options, setting and method;
- ``runs.csv``: the tidy table of every collected run (:func:`leaderboard.collect.collect_runs`);
- ``accuracy_vs_budget.png``, ``final_accuracy.png``, ``credit.png`` (when the runs log credit
  diagnostics or filler entropy), ``gain_vs_length.png`` (when runs with several chain lengths
  exist);
- ``leaderboard.html``: the same content in one self-contained page, the plots embedded as
  base64 data URIs, no external assets.

Every file is built in memory first and then written to a temporary name and renamed, so a
failure leaves the previous leaderboard in place, never a half-written one.
"""

from __future__ import annotations

import base64
import html
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from . import plots
from .collect import collect_runs, suite_coverage
from .files import atomic_write_bytes, atomic_write_text
from .papers import reported_results
from .stats import BASELINE, GROUP, ORACLE, ordered_groups, summarize


class LeaderboardError(ValueError):
    """Nothing to render: the results directory is missing or holds no finished run."""


HOW_TO_READ = (
    "How to read: final accuracy is the eval accuracy at the end of the budget; AUC is the "
    "area under accuracy against budget fraction (a run at constant accuracy a scores a). "
    "IQM is the interquartile mean over seeds; brackets are stratified bootstrap 95% "
    "confidence intervals over seeds (n=1: one seed, no interval). Rank: the best remaining "
    "method and every method whose IQM interval overlaps its interval share a rank (=1 means "
    "not significantly different from another method ranked 1). P(>GRPO) is the probability "
    "that a random seed of the method beats a random seed of GRPO. Positions put GRPO at 0 and "
    "oracle credit at 1: learning speed from the mean AUC over trained responses (equal "
    "samples), credit score from the mean credit "
    "AUROC. A position is a ratio to the oracle-GRPO gap, so it is n/a when either end is "
    "missing, when oracle credit is not ahead of GRPO, or when, with several seeds of each, "
    "the 95% interval of the gap reaches 0 (the ratio would be noise). Credit precision is the "
    "share of a failed response's negative credit that falls on its first wrong step (chance: "
    "the share of tokens that are first-wrong-step tokens); credit AUROC ranks tokens by "
    "negative advantage against the first-wrong-step label (0.5: uniform credit). Filler "
    "entropy drift is the last minus the first logged entropy on reward-irrelevant tokens. "
    "Shared-prefix gradient: the net gradient the loss leaves on the tokens every response of "
    "a group shares, relative to its gradient on the other tokens (0: they cancel). Reset at "
    "the first wrong step (RRPO, SRPO): the share of resets placed exactly at the failed "
    "response's true first wrong step."
)


# ---------------------------------------------------------------------------------------------
# Formatting


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt(value, digits: int = 3) -> str:
    return "n/a" if _missing(value) else f"{value:.{digits}f}"


def fmt_interval(row, column: str, n: int) -> str:
    point = row.get(column)
    if _missing(point):
        return "n/a"
    if n < 2:
        return f"{point:.3f} (n=1)"
    return f"{point:.3f} [{row.get(f'{column}_low'):.3f}, {row.get(f'{column}_high'):.3f}]"


def fmt_rank(row, name: str) -> str:
    rank = row.get(f"rank_{name}")
    if _missing(rank):
        return "n/a"
    return f"={int(rank)}" if row.get(f"rank_{name}_shared") else str(int(rank))


# ---------------------------------------------------------------------------------------------
# The document: a list of blocks, written out as Markdown and as HTML


def _accuracy_table(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    headers = [
        "rank",
        "method",
        "seeds",
        "final acc. IQM [95% CI]",
        "final acc. mean [95% CI]",
        "AUC IQM [95% CI]",
        "AUC mean [95% CI]",
        "P(>GRPO) final",
        "P(>GRPO) AUC",
        "learning speed (GRPO 0, oracle 1)",
    ]
    rows = []
    for _, r in frame.sort_values(["rank_final", "method"]).iterrows():
        n = int(r["n_seeds"])
        rows.append(
            [
                fmt_rank(r, "final"),
                r["method"],
                str(n),
                fmt_interval(r, "final_iqm", n),
                fmt_interval(r, "final_mean", n),
                fmt_interval(r, "auc_iqm", n),
                fmt_interval(r, "auc_mean", n),
                fmt(r.get("poi_final"), 2),
                fmt(r.get("poi_auc"), 2),
                fmt(r.get("speed_position"), 2),
            ]
        )
    return headers, rows


def _credit_table(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    headers = [
        "method",
        "credit precision [95% CI]",
        "chance level",
        "credit AUROC [95% CI]",
        "credit score (GRPO 0, oracle 1)",
        "filler entropy drift [95% CI]",
        "shared-prefix gradient, net / rest [95% CI]",
        "reset at the first wrong step [95% CI]",
    ]
    rows = []
    for _, r in frame.sort_values("method").iterrows():
        n = int(r["n_seeds"])
        rows.append(
            [
                r["method"],
                fmt_interval(r, "credit_precision", n),
                fmt(r.get("credit_chance")),
                fmt_interval(r, "credit_auroc", n),
                fmt(r.get("credit_position"), 2),
                fmt_interval(r, "filler_entropy_drift", n),
                fmt_interval(r, "cancel_ratio", n),
                fmt_interval(r, "reset_hits_first_wrong", n),
            ]
        )
    return headers, rows


def _paper_table(frame: pd.DataFrame, papers: list[dict]) -> tuple[list[str], list[list[str]]]:
    ours = {r["method"]: r.get("final_mean") for _, r in frame.iterrows()}
    headers = [
        "paper",
        "table",
        "model",
        "benchmark",
        "metric",
        "row",
        "reported by the paper",
        "ours: final acc. mean (%)",
    ]
    rows = []
    for p in papers:
        mine = ours.get(p["method"]) if p["method"] else None
        mark = "" if p["verified"] else " (unverified)"
        rows.append(
            [
                f"{p['paper']} (arXiv {p['arxiv']})",
                p["table"],
                p["model"],
                p["benchmark"],
                p["metric"],
                p["label"],
                f"{p['value']:g}{mark}",
                "not run" if mine is None or _missing(mine) else f"{100 * mine:.1f}",
            ]
        )
    return headers, rows


def build_blocks(
    results_name: str,
    stats: dict,
    papers: list[dict],
    warnings: list[str],
    figures: dict[str, bytes],
    n_runs: int,
    coverage: Sequence[str] = (),
) -> list[tuple]:
    methods = stats["methods"]
    blocks: list[tuple] = [("h1", f"creditbench leaderboard: {results_name}")]
    blocks.append(
        (
            "p",
            f"{n_runs} finished runs, {methods.groupby(GROUP).ngroups} task settings, "
            f"methods: {', '.join(sorted(methods['method'].unique()))}. "
            f"Baseline: {BASELINE}; upper reference: {ORACLE}.",
        )
    )
    blocks += [("p", sentence) for sentence in coverage]
    blocks.append(("p", HOW_TO_READ))
    for key, frame in ordered_groups(methods):
        metric = frame["accuracy_metric"].iloc[0]
        blocks.append(("h2", plots.group_title(key)))
        blocks.append(
            (
                "p",
                f"Task {key[0]}, options {key[1]}, setting {key[2]}; "
                f"accuracy: {metric} on the eval split.",
            )
        )
        blocks.append(("table", *_accuracy_table(frame)))
        if (frame["n_seeds"] < 2).any():
            blocks.append(
                (
                    "p",
                    "Methods with one seed (n=1) have no interval: their ranks "
                    "are not tested for significance.",
                )
            )
        diagnostics = [
            c
            for c in ("credit_precision", "credit_auroc", "filler_entropy_drift", "cancel_ratio")
            if c in frame and frame[c].notna().any()
        ]
        if diagnostics:
            blocks.append(("h3", "Credit diagnostics"))
            blocks.append(("table", *_credit_table(frame)))
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
            blocks.append(("table", *_paper_table(frame, matching)))
    blocks.append(("h2", "Plots"))
    captions = {
        "accuracy_vs_budget": "Accuracy against budget fraction "
        "(mean over seeds, 95% bootstrap band)",
        "final_accuracy": "Final accuracy: IQM over seeds with its 95% interval",
        "credit": "Credit diagnostics: precision, AUROC, filler entropy drift",
        "gain_vs_length": "Gain in AUC over GRPO against chain length (mean difference, 95% CI)",
    }
    for name, caption in captions.items():
        if name in figures:
            blocks.append(("img", name, caption))
    if warnings:
        blocks.append(("h2", "Skipped runs and warnings"))
        blocks.append(("list", warnings))
    return blocks


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[tuple]) -> str:
    out = []
    for kind, *body in blocks:
        if kind in ("h1", "h2", "h3"):
            out.append(f"{'#' * int(kind[1])} {body[0]}\n")
        elif kind == "p":
            out.append(f"{body[0]}\n")
        elif kind == "table":
            headers, rows = body
            out.append("| " + " | ".join(map(_md_cell, headers)) + " |")
            out.append("|" + "|".join("---" for _ in headers) + "|")
            out.extend("| " + " | ".join(map(_md_cell, row)) + " |" for row in rows)
            out.append("")
        elif kind == "img":
            out.append(f"![{body[1]}]({body[0]}.png)\n")
        elif kind == "list":
            out.extend(f"- {_md_cell(item)}" for item in body[0])
            out.append("")
    return "\n".join(out)


STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em;
       color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }
th { background: #f3f3f3; }
figure { margin: 1em 0; } img { max-width: 100%; }
p { line-height: 1.45; }
"""


def to_html(blocks: list[tuple], figures: dict[str, bytes], title: str) -> str:
    esc = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{esc(title)}</title>",
        f"<style>{STYLE}</style>",
        "</head>",
        "<body>",
    ]
    for kind, *body in blocks:
        if kind in ("h1", "h2", "h3"):
            out.append(f"<{kind}>{esc(body[0])}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{esc(body[0])}</p>")
        elif kind == "table":
            headers, rows = body
            out.append("<table>")
            out.append("<tr>" + "".join(f"<th>{esc(str(h))}</th>" for h in headers) + "</tr>")
            out.extend(
                "<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>" for row in rows
            )
            out.append("</table>")
        elif kind == "img":
            data = base64.b64encode(figures[body[0]]).decode("ascii")
            out.append(
                f'<figure><img alt="{esc(body[1])}" src="data:image/png;base64,{data}">'
                f"<figcaption>{esc(body[1])}</figcaption></figure>"
            )
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{esc(item)}</li>" for item in body[0]) + "</ul>")
    out += ["</body>", "</html>", ""]
    return "\n".join(out)


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


def provenance(root: Path, runs) -> str:
    """Which code and packages produced the runs: one sentence from their environment.json."""
    commits: dict[str, int] = {}
    packages: dict[str, set[str]] = {}
    dirty = 0
    for rel in runs:
        try:
            env = json.loads((root / rel / "environment.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        commit = str(env.get("git_commit") or "unknown")[:12]
        commits[commit] = commits.get(commit, 0) + 1
        dirty += bool(env.get("git_dirty"))
        for package, version in (env.get("packages") or {}).items():
            packages.setdefault(package, set()).add(str(version))
    if not commits:
        return "No run records its environment."
    code = ", ".join(f"{c} ({n} runs)" for c, n in sorted(commits.items()))
    versions = "; ".join(f"{p} {', '.join(sorted(v))}" for p, v in sorted(packages.items()))
    edits = f"; {dirty} with uncommitted changes" if dirty else ""
    return f"Code: git commit {code}{edits}. Packages: {versions}."


def render(
    results_dir: str | Path, out_dir: str | Path | None = None, *, reps: int = 2000
) -> dict[str, Path]:
    """Write the leaderboard of ``results_dir``; returns ``{name: path}`` of every file written.

    Names: ``markdown``, ``csv``, ``runs_csv``, ``html`` and one per plot
    (``accuracy_vs_budget``, ``final_accuracy``, ``credit``, ``gain_vs_length``). Warnings
    (skipped runs, duplicates) go to stderr and into the page.

    Raises:
        LeaderboardError: ``results_dir`` is missing or holds no finished run.
    """
    root = Path(results_dir)
    try:
        table, warnings = collect_runs(root)
    except FileNotFoundError:
        raise LeaderboardError(f"{root}: no such results directory") from None
    n_runs = int((table["kind"] == "run").sum())
    if n_runs == 0:
        detail = f"; skipped: {'; '.join(warnings[:5])}" if warnings else ""
        raise LeaderboardError(f"{root}: holds no finished run{detail}")
    stats = summarize(table, reps=reps)
    papers, paper_warnings = reported_results(set(stats["methods"]["task"]))
    warnings = warnings + paper_warnings
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    drawn = {
        "accuracy_vs_budget": plots.accuracy_vs_budget(stats["curves"]),
        "final_accuracy": plots.final_accuracy_intervals(stats["methods"]),
        "credit": plots.credit_chart(stats["methods"]),
        "gain_vs_length": plots.gain_vs_length(stats["methods"]),
    }
    figures = {name: png for name, png in drawn.items() if png is not None}
    name = root.resolve().name
    coverage = suite_coverage(root, set(table.loc[table["kind"] == "run", "run"]))
    blocks = build_blocks(name, stats, papers, warnings, figures, n_runs, coverage)
    blocks.append(("h2", "Provenance"))
    blocks.append(("p", provenance(root, table["run"].unique())))
    texts = {
        "markdown": ("leaderboard.md", to_markdown(blocks)),
        "csv": ("leaderboard.csv", stats["methods"].to_csv(index=False)),
        "runs_csv": ("runs.csv", table.to_csv(index=False)),
        "html": ("leaderboard.html", to_html(blocks, figures, f"creditbench leaderboard: {name}")),
    }
    out = Path(out_dir) if out_dir is not None else root
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for key, png in figures.items():
        paths[key] = out / f"{key}.png"
        atomic_write_bytes(paths[key], png)
    for key, (file_name, text) in texts.items():
        paths[key] = out / file_name
        atomic_write_text(paths[key], text)
    return paths
