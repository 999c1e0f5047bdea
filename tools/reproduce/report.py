"""The table ``creditbench reproduce`` ends with: the paper's numbers, ours, and whether the
ordering of methods agrees.

Ours are the final accuracy (``sampled_accuracy`` when every run has it, as in the leaderboard)
and the area under the accuracy-versus-budget curve, each as the mean over seeds with a
stratified bootstrap 95% interval (:func:`creditbench.leaderboard.stats.bootstrap_interval`).

The ordering is compared pair by pair: for every two methods that the paper's table and our runs
both rank, the pair *agrees* when the paper and we put the same one ahead (a pair the paper ties
is not counted). Kendall's tau-b summarises the pairs (1: the same order, -1: reversed), and
*same winner* says whether the paper's best method is also ours (n/a when either side ties
at the top). A pair is *significant* when the bootstrap interval of our difference of means
excludes 0; with one seed nothing is.
The paper's numbers and ours come from different models, data and budgets: only orderings are
compared, never values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from creditbench.reference.cards import Card, ResultTable


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b of two equally long sequences; None when either is constant."""
    if len(x) != len(y):
        raise ValueError(f"y: must have the length of x ({len(x)}) (got {len(y)})")
    concordant = discordant = tied_x = tied_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = _sign(x[i] - x[j]), _sign(y[i] - y[j])
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tied_x += 1
            elif dy == 0:
                tied_y += 1
            elif dx == dy:
                concordant += 1
            else:
                discordant += 1
    pairs = concordant + discordant
    denominator = math.sqrt((pairs + tied_x) * (pairs + tied_y))
    return (concordant - discordant) / denominator if denominator else None


def order(values: Mapping[str, float]) -> list[list[str]]:
    """Methods from best to worst, tied methods together."""
    groups: list[list[str]] = []
    for name in sorted(values, key=lambda m: (-values[m], m)):
        if groups and values[groups[-1][0]] == values[name]:
            groups[-1].append(name)
        else:
            groups.append([name])
    return groups


def format_order(groups: list[list[str]]) -> str:
    return " > ".join(" = ".join(group) for group in groups)


@dataclass(frozen=True)
class Pair:
    """Two methods; ``paper`` and ``ours`` are +1 when ``first`` is ahead, -1 behind, 0 tied."""

    first: str
    second: str
    paper: int
    ours: int
    significant: bool | None = None

    @property
    def agree(self) -> bool | None:
        return None if self.paper == 0 else self.paper == self.ours


@dataclass(frozen=True)
class Agreement:
    methods: tuple[str, ...]
    paper_order: str
    our_order: str
    pairs: tuple[Pair, ...]
    tau: float | None
    same_winner: bool | None

    @property
    def comparable(self) -> int:
        return sum(p.agree is not None for p in self.pairs)

    @property
    def agreeing(self) -> int:
        return sum(p.agree is True for p in self.pairs)

    @property
    def significant(self) -> int:
        return sum(p.agree is True and p.significant is True for p in self.pairs)


def _winner(values: Mapping[str, float]) -> str | None:
    top = order(values)[0]
    return top[0] if len(top) == 1 else None


def ordering_agreement(
    paper: Mapping[str, float],
    ours: Mapping[str, float],
    samples: Mapping[str, Sequence[float]] | None = None,
    *,
    reps: int = 2000,
) -> Agreement | None:
    """How our ordering of the methods both sides rank matches the paper's (None: fewer than
    two such methods). ``samples``: our per-seed values, for the significance of each pair."""
    methods = [m for m in paper if m in ours and math.isfinite(paper[m]) and math.isfinite(ours[m])]
    if len(methods) < 2:
        return None
    p = {m: paper[m] for m in methods}
    o = {m: ours[m] for m in methods}
    pairs = []
    for i, a in enumerate(methods):
        for b in methods[i + 1 :]:
            significant = None
            if samples is not None and min(len(samples[a]), len(samples[b])) >= 2:
                from creditbench.leaderboard.stats import difference_interval

                gap = difference_interval(samples[a], samples[b], reps=reps)
                significant = gap.low > 0 or gap.high < 0
            pairs.append(Pair(a, b, _sign(p[a] - p[b]), _sign(o[a] - o[b]), significant))
    paper_winner, our_winner = _winner(p), _winner(o)
    return Agreement(
        methods=tuple(methods),
        paper_order=format_order(order(p)),
        our_order=format_order(order(o)),
        pairs=tuple(pairs),
        tau=kendall_tau([p[m] for m in methods], [o[m] for m in methods]),
        same_winner=None if None in (paper_winner, our_winner) else paper_winner == our_winner,
    )


# ---------------------------------------------------------------------------------------------
# Our numbers


@dataclass(frozen=True)
class Ours:
    """One method's runs: per-seed final accuracy and AUC, and their intervals."""

    metric: str
    final: list[float]
    auc: list[float]
    final_interval: Any
    auc_interval: Any


def our_results(results: Path, runs: Mapping[str, str], *, reps: int = 2000) -> dict[str, Ours]:
    """``{method: Ours}`` from the finished runs named in ``runs`` (run name -> method)."""
    from creditbench.leaderboard.collect import collect_runs
    from creditbench.leaderboard.stats import bootstrap_interval

    table, _ = collect_runs(results)
    if table.empty:
        return {}
    rows = table[(table["kind"] == "run") & table["run"].isin(list(runs))]
    if rows.empty:
        return {}
    metric = "sampled_accuracy"
    if f"final_{metric}" not in rows or rows[f"final_{metric}"].isna().any():
        metric = "greedy_accuracy"
    out = {}
    for method in dict.fromkeys(runs.values()):
        mine = rows[rows["run"].map(runs) == method]
        if mine.empty or f"final_{metric}" not in mine:
            continue
        final = [float(v) for v in mine[f"final_{metric}"]]
        auc = [float(v) for v in mine[f"auc_{metric}"]]
        out[method] = Ours(
            metric=metric,
            final=final,
            auc=auc,
            final_interval=bootstrap_interval(final, "mean", reps=reps),
            auc_interval=bootstrap_interval(auc, "mean", reps=reps),
        )
    return out


# ---------------------------------------------------------------------------------------------
# The paper's numbers


def paper_tables(card: Card, methods: Sequence[str]) -> list[ResultTable]:
    """The result tables to show: the card's ``cpu_scale.compare`` tables, or else every table
    with a number for one of ``methods``."""
    labels = {m.label for m in card.methods if m.name in methods}
    wanted = card.cpu_scale.compare if card.cpu_scale else ()
    if wanted:
        return [
            t
            for t in card.results
            if any(
                t.table == w.table and t.benchmark == w.benchmark and w.model in (None, t.model)
                for w in wanted
            )
        ]
    return [t for t in card.results if labels & set(t.rows)]


def paper_values(card: Card, table: ResultTable, methods: Sequence[str]) -> dict[str, float]:
    """``{method: reported number}`` of ``table`` for the methods it has a row for."""
    label = {m.name: m.label for m in card.methods}
    return {m: table.rows[label.get(m, m)] for m in methods if label.get(m, m) in table.rows}


def _column(table: ResultTable) -> str:
    return f"{table.table}: {table.benchmark} ({table.metric}, {table.model})"


# ---------------------------------------------------------------------------------------------
# Markdown


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _row(cells: Sequence[Any]) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    return [_row(header), _row(["---"] * len(header)), *(_row(r) for r in rows)]


def _interval(iv) -> str:
    if iv is None or not math.isfinite(iv.point):
        return "n/a"
    if iv.n < 2:
        return f"{iv.point:.3f} (1 seed)"
    return f"{iv.point:.3f} [{iv.low:.3f}, {iv.high:.3f}]"


def _yes_no(value: bool | None) -> str:
    return "n/a" if value is None else ("yes" if value else "no")


def render_report(
    plan,
    results: Path,
    runs: Mapping[str, str],
    *,
    reps: int = 2000,
    plan_lines: Sequence[str] = (),
) -> str:
    """The Markdown report of a reproduction (``plan``: a :class:`reproduce_plan.Plan`)."""
    card: Card = plan.card
    ours = our_results(results, runs, reps=reps)
    tables = paper_tables(card, plan.methods)
    labels = {m.name: m.label for m in card.methods}
    metric = next(iter(ours.values())).metric.replace("_", " ") if ours else "accuracy"
    scale = "CPU scale" if plan.scale == "cpu" else "paper scale"
    values = plan.setting_values()
    amount = f"{plan.budget['amount']:.2g}".replace("e+", "e")
    if plan.scale == "cpu":
        policy = (
            f"the policy of {values['model.path']}"
            if values.get("model.path")
            else f"the shipped {values.get('model.preset', 'tiny')} base policy"
        )
        unit = "FLOPs" if plan.budget["unit"] == "flops" else plan.budget["unit"]
        where = f"the embedded chain testbed ({policy}), {amount} {unit} per run"
        caveat = "The two cannot be compared as numbers; only the ordering of methods can."
    else:
        where = f"task {plan.task} with the model of --model-dir, {amount} "
        where += f"{plan.budget['unit']} per run"
        caveat = (
            "The numbers are comparable only where the model, data, evaluation and budget "
            "match the paper's too; compare the ordering of methods first."
        )
    lines = [
        f"# Reproducing `{card.id}` at {scale}",
        "",
        f"**{card.title}** (arXiv {card.arxiv}); card `reference/cards/{card.id}.yaml`.",
        "",
        "> **Different tasks, different scales.** The *paper* columns are the numbers the paper "
        "reports for its own models, data and budgets. The *ours* columns come from "
        f"{where}. {caveat}",
        "",
        "## Side by side",
        "",
    ]
    header = ["method", *(f"paper: {_column(t)}" for t in tables)]
    header += [f"ours: final {metric}", "ours: AUC", "seeds"]
    rows = []
    for method in plan.methods:
        label = labels.get(method, method)
        name = method if label == method else f"{method} (paper: {label})"
        cells: list[Any] = [name]
        for t in tables:
            value = t.rows.get(label)
            mark = "" if value is None or (t.verified and label not in t.unverified_rows) else "*"
            cells.append("-" if value is None else f"{value:g}{mark}")
        mine = ours.get(method)
        cells += [
            _interval(mine.final_interval) if mine else "no finished run",
            _interval(mine.auc_interval) if mine else "n/a",
            len(mine.final) if mine else 0,
        ]
        rows.append(cells)
    lines += _table(header, rows)
    if any(not t.verified or t.unverified_rows for t in tables):
        lines += ["", "\\* relayed by a secondary source, not checked against the paper."]
    lines += [
        "",
        f"Ours: mean over seeds [95% stratified bootstrap interval]; AUC is the area under "
        f"{metric} against the budget fraction. Paper: as reported, from the card.",
        "",
        "## Does the ordering agree?",
        "",
    ]
    found = []
    for t in tables:
        paper = paper_values(card, t, plan.methods)
        points = {m: ours[m].final_interval.point for m in paper if m in ours}
        samples = {m: ours[m].final for m in points}
        agreement = ordering_agreement(paper, points, samples, reps=reps)
        if agreement is not None:
            found.append((t, agreement))
    if found:
        rows = []
        for t, a in found:
            tau = "n/a" if a.tau is None else f"{a.tau:+.2f}"
            pairs = f"{a.agreeing}/{a.comparable} ({a.significant} significant)"
            rows.append(
                [_column(t), a.paper_order, a.our_order, pairs, tau, _yes_no(a.same_winner)]
            )
        header = ["paper table", "paper's order", f"our order (final {metric})"]
        lines += _table(header + ["pairs that agree", "Kendall τ", "same winner"], rows)
        lines += [
            "",
            "A pair agrees when both put the same method ahead; it is significant when the "
            "bootstrap interval of our difference excludes 0.",
        ]
    elif not ours:
        lines.append("No run has finished yet: there is no ordering of ours to compare.")
    else:
        why = card.cpu_scale.note if card.cpu_scale and card.cpu_scale.note else ""
        lines.append(
            "No table of the paper ranks two of the methods that ran, so there is no ordering "
            "to compare; the table above shows what the paper reports beside our numbers."
            + (f" The card: {why.strip()}" if why else "")
        )
    lines += ["", "## What ran", "", "```", *plan_lines, "```", ""]
    lines.append(
        f"Rerun `creditbench reproduce {card.id} --scale {plan.scale} --results {results}` "
        "to finish or extend it: finished runs are skipped, interrupted ones resume."
    )
    return "\n".join(lines) + "\n"
