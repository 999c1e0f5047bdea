"""The leaderboard's figures, each returned as PNG bytes (matplotlib's Agg canvas, no pyplot).

Every figure takes the frames of :func:`leaderboard.stats.summarize`; a method keeps one colour
in all of them (GRPO black, oracle credit grey and dashed).
"""

from __future__ import annotations

import io
import json
import math
import re

import numpy as np
import pandas as pd

from .gains import ranked, ranked_without
from .stats import BASELINE, ORACLE, natural_key, ordered_groups


def _figure(n_panels: int, *, width: float = 4.6, height: float = 3.4, columns: int = 3):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    columns = max(1, min(columns, n_panels))
    rows = math.ceil(n_panels / columns)
    fig = Figure(figsize=(width * columns, height * rows), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)  # a renderer from the start: label placement measures text
    axes = fig.subplots(rows, columns, squeeze=False).flatten()
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes[:n_panels]


def _png(fig, drawn: list | None = None) -> bytes:
    """The figure as PNG bytes; ``drawn``, the numbers it plots, goes into the file's
    ``Description`` text (JSON) so a test can check a committed figure against its records."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    metadata = {"Description": json.dumps(drawn)} if drawn is not None else None
    fig.savefig(buffer, format="png", metadata=metadata)
    return buffer.getvalue()


def drawn_numbers(png: bytes) -> list | None:
    """The numbers :func:`_png` stored in a figure (None if it stored none)."""
    from PIL import Image

    text = Image.open(io.BytesIO(png)).info.get("Description")
    return json.loads(text) if text else None


def _style(methods: list[str]) -> dict[str, dict]:
    from matplotlib import colormaps

    others = [m for m in sorted(methods) if m not in (BASELINE, ORACLE)]
    palette = colormaps["tab10" if len(others) <= 10 else "tab20"].colors  # type: ignore[attr-defined]
    style = {
        m: {"color": palette[i % len(palette)], "linestyle": "-"} for i, m in enumerate(others)
    }
    style[BASELINE] = {"color": "black", "linestyle": "-"}
    style[ORACLE] = {"color": "0.45", "linestyle": "--"}
    return style


def group_title(key) -> str:
    task, options, setting = key
    parts = [task] + [p for p in (options, setting) if p != "default"]
    return " · ".join(parts)


CREDIT_PANELS = (
    ("credit_precision", "credit precision\n(share of blame on the first wrong step)"),
    ("credit_auroc", "credit AUROC\n(-advantage vs first-wrong-step label)"),
    ("filler_entropy_drift", "filler entropy drift (nats)\n(last - first logged step)"),
)


def credit_chart(methods: pd.DataFrame) -> bytes | None:
    """Credit precision, credit AUROC and filler entropy drift per method; None without data."""
    panels = [(c, t) for c, t in CREDIT_PANELS if c in methods and methods[c].notna().any()]
    if not panels:
        return None
    groups = ordered_groups(methods)
    # the board's ranking (of the first setting; methods it lacks after), best at the top
    first = list(ranked(groups[0][1])["method"])
    names = (first + sorted(set(methods["method"]) - set(first)))[::-1]
    fig, axes = _figure(len(panels), height=max(2.6, 0.32 * len(names) + 1.4))
    offsets = np.linspace(-0.25, 0.25, len(groups)) if len(groups) > 1 else [0.0]
    from matplotlib.ticker import MaxNLocator

    for ax, (column, title) in zip(axes, panels, strict=True):
        for offset, marker, (key, frame) in zip(offsets, "osD^v<>ph*", groups, strict=False):
            frame = frame.set_index("method").reindex(names)
            y = np.arange(len(names)) + offset
            point = frame[column].to_numpy(dtype=float)
            low = point - frame[f"{column}_low"].to_numpy(dtype=float)
            high = frame[f"{column}_high"].to_numpy(dtype=float) - point
            ax.errorbar(point, y, xerr=[low, high], fmt=marker, capsize=3, label=group_title(key))
        if column == "credit_auroc":
            ax.axvline(0.5, color="0.5", linewidth=1, linestyle=":")
        if column == "filler_entropy_drift":
            ax.axvline(0.0, color="0.5", linewidth=1, linestyle=":")
        ax.set_yticks(np.arange(len(names)), names)
        ax.xaxis.set_major_locator(MaxNLocator(6))
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3, axis="x")
    if len(groups) > 1:
        axes[0].legend(fontsize=7, loc="best")
    return _png(fig)


def length_series(methods: pd.DataFrame) -> tuple[str, pd.DataFrame] | None:
    """The numeric task option that varies between groups otherwise alike (``steps`` first).

    Returns ``(option name, methods rows with an ``option_value`` column)``, or None.
    """
    parsed = methods.copy()
    pairs = parsed["options"].map(
        lambda text: dict(p.split("=", 1) for p in text.split(",")) if text != "default" else {}
    )
    candidates: list[str] = sorted({k for d in pairs for k in d}, key=lambda k: (k != "steps", k))
    for name in candidates:
        values = pairs.map(lambda d, n=name: d.get(n))
        # a group without the option has none (pandas may hold it as NaN, not None)
        numeric = values.map(
            lambda v: isinstance(v, str) and re.fullmatch(r"-?\d+(\.\d+)?", v) is not None
        )
        if not numeric.any():
            continue
        rest = pairs.map(
            lambda d, n=name: ",".join(f"{k}={v}" for k, v in sorted(d.items()) if k != n)
        )
        frame = parsed[numeric].assign(
            option_value=values[numeric].astype(float), rest=rest[numeric]
        )
        counts = frame.groupby(["task", "setting", "rest"])["option_value"].nunique()
        if (counts >= 2).any():
            return name, frame
    return None


def gain_vs_length(methods: pd.DataFrame) -> bytes | None:
    """Gain in AUC over GRPO (mean difference, 95% CI) against chain length; None if n/a."""
    if "gain_auc" not in methods:
        return None
    found = length_series(methods)
    if found is None:
        return None
    name, frame = found
    series = [
        (key, f)
        for key, f in sorted(
            frame.groupby(["task", "setting", "rest"], sort=False),
            key=lambda item: tuple(natural_key(str(k)) for k in item[0]),
        )
        if f["option_value"].nunique() >= 2 and f["gain_auc"].notna().any()
    ]
    if not series:
        return None
    fig, axes = _figure(len(series), width=5.2, height=3.6)
    style = _style(list(methods["method"].unique()))
    for ax, ((task, setting, rest), f) in zip(axes, series, strict=True):
        for method, points in f[f["gain_auc"].notna()].groupby("method", sort=True):
            points = points.sort_values("option_value")
            x = points["option_value"].to_numpy(dtype=float)
            y = points["gain_auc"].to_numpy(dtype=float)
            err = [
                y - points["gain_auc_low"].to_numpy(float),
                points["gain_auc_high"].to_numpy(float) - y,
            ]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=method, **style[method])
        ax.axhline(0.0, color="black", linewidth=1)
        ax.set_xticks(sorted(f["option_value"].unique()))
        ax.set_xlabel(name)
        ax.set_ylabel("AUC gain over GRPO")
        label = " · ".join(p for p in (task, rest, setting) if p and p != "default")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    return _png(fig)


# ---------------------------------------------------------------------------------------------
# One setting at a time: the figures its section of the page shows


def slug(key) -> str:
    """A file-name-safe name of a group: ``chain · steps=8`` -> ``chain-steps-8``."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", group_title(key).replace(" · ", "-")).strip("-")


def _draw_gains(ax, rows: pd.DataFrame, column: str, style, *, linewidth, markersize) -> None:
    """One row per method, bottom-up: ``column``'s 95% bootstrap interval (thick), its t
    interval (thin, where the rows have one: the rank and the claim rule read both) and point,
    oracle credit (the reference) grey and hollow, and the zero line."""
    for i, row in enumerate(rows.to_dict("records")):
        oracle = row["method"] == ORACLE
        color = "0.45" if oracle else style[row["method"]]["color"]
        if f"{column}_t_low" in row:
            ax.plot([row[f"{column}_t_low"], row[f"{column}_t_high"]], [i, i], color=color,
                    linewidth=1.0, alpha=0.8)  # fmt: skip
        ax.plot([row[f"{column}_low"], row[f"{column}_high"]], [i, i], color=color,
                linewidth=linewidth, alpha=0.6)  # fmt: skip
        face = "white" if oracle else color
        ax.plot([row[column]], [i], "o", color=color, markersize=markersize, markerfacecolor=face)
    ax.axvline(0.0, color="black", linewidth=1)


# what the forest draws per method, best first; stored in its PNG (:func:`drawn_numbers`)
FOREST_COLUMNS = [
    f"gain_{name}{end}"
    for name in ("auc", "final")
    for end in ("", "_low", "_high", "_t_low", "_t_high")
]


def gain_forest(frame: pd.DataFrame) -> bytes | None:
    """Gain over GRPO in AUC and in final accuracy per method of one setting, 95% intervals,
    best AUC gain at the top; oracle credit, the reference, in grey with a hollow marker."""
    if "gain_auc" not in frame or frame["gain_auc"].notna().sum() == 0:
        return None
    rows = ranked_without(frame, [BASELINE])[::-1]  # matplotlib draws bottom-up
    fig, axes = _figure(2, width=4.4, height=max(2.4, 0.28 * len(rows) + 1.3), columns=2)
    style = _style(list(frame["method"].unique()))
    for ax, (name, label) in zip(
        axes,
        (("auc", "AUC gain over GRPO"), ("final", "final accuracy gain over GRPO")),
        strict=True,
    ):
        _draw_gains(ax, rows, f"gain_{name}", style, linewidth=2.5, markersize=6)
        labels = [f"{m} (reference)" if m == ORACLE else m for m in rows["method"]]
        ax.set_yticks(np.arange(len(rows)), labels if name == "auc" else [""] * len(rows))
        ax.set_xlabel(label)
        ax.grid(alpha=0.3, axis="x")
    best_first = rows[["method", *FOREST_COLUMNS]][::-1].itertuples(index=False)
    drawn = [[method, *(round(float(v), 6) for v in values)] for method, *values in best_first]
    return _png(fig, drawn)


def chosen_methods(frame: pd.DataFrame) -> list[str]:
    """GRPO, oracle credit, and the best and the worst other method by AUC gain."""
    others = [m for m in ranked(frame)["method"] if m not in (BASELINE, ORACLE)]
    chosen = [m for m in (BASELINE, ORACLE) if m in set(frame["method"])]
    return chosen + list(dict.fromkeys(others[:1] + others[-1:]))


def _x_axis(points: pd.DataFrame) -> tuple[str, str]:
    if "responses" in points and points["responses"].notna().all():
        return "responses", "responses trained on"
    return "budget_fraction", "budget fraction"


def chosen_curves(curves: pd.DataFrame, frame: pd.DataFrame) -> bytes | None:
    """Accuracy against trained responses, mean over seeds with a 95% band, for the few
    methods a reader compares first (:func:`chosen_methods`), on one axis."""
    methods = chosen_methods(frame)
    points = curves[curves["method"].isin(methods)]
    if points.empty:
        return None
    x_name, x_label = _x_axis(points)
    fig, (ax,) = _figure(1, width=6.4, height=3.8)
    style = _style(list(frame["method"].unique()))
    for method in methods:
        line = points[points["method"] == method].sort_values("budget_fraction")
        x = line[x_name].to_numpy(dtype=float)
        ax.plot(x, line["accuracy"], label=method, marker="o", markersize=3, **style[method])
        ax.fill_between(x, line["low"], line["high"], color=style[method]["color"], alpha=0.15)
    ax.set_xlabel(x_label)
    ax.set_ylabel("accuracy (eval)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return _png(fig)


def small_multiples(curves: pd.DataFrame) -> bytes | None:
    """One small panel per method of one setting: its accuracy curve and band over GRPO's
    (black), on shared axes, instead of every method on one crowded axis."""
    methods = sorted(m for m in curves["method"].unique() if m != BASELINE)
    if not methods:
        return None
    x_name, x_label = _x_axis(curves)
    fig, axes = _figure(len(methods), width=2.6, height=2.0, columns=5)
    style = _style(list(curves["method"].unique()))
    base = curves[curves["method"] == BASELINE].sort_values("budget_fraction")
    low, high = curves["low"].min(), curves["high"].max()
    for ax, method in zip(axes, methods, strict=True):
        if not base.empty:
            ax.plot(base[x_name], base["accuracy"], color="black", linewidth=1, label=BASELINE)
        line = curves[curves["method"] == method].sort_values("budget_fraction")
        x = line[x_name].to_numpy(dtype=float)
        color = style[method]["color"]
        ax.plot(x, line["accuracy"], color=color, linewidth=1.6)
        ax.fill_between(x, line["low"], line["high"], color=color, alpha=0.2)
        ax.set_ylim(low - 0.02, high + 0.02)
        ax.set_title(method, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.supxlabel(f"{x_label} (GRPO in black)", fontsize=9)
    fig.supylabel("accuracy (eval)", fontsize=9)
    return _png(fig)


def spread_labels(ax, labels: list[tuple[str, float, float]], fontsize: float = 6) -> list:
    """Name each point ``(text, x, y)`` beside it, moving a label up past the ones already
    placed that it would overlap (methods near chance precision and zero gain crowd one spot);
    a moved label gets a thin line to its point. Returns the text artists."""
    fig = ax.figure
    ax.autoscale_view()
    fig.canvas.draw()  # fixes the transform from data to pixels
    renderer = fig.canvas.get_renderer()
    placed: list = []  # the boxes (pixels) of the labels drawn so far
    texts = []
    for text, x, y in sorted(labels, key=lambda item: (item[2], item[1])):
        offset = [3.0, 3.0]
        artist = ax.annotate(
            text, (x, y), fontsize=fontsize, xytext=offset, textcoords="offset points"
        )
        for _ in range(60):
            box = artist.get_window_extent(renderer)
            hit = next((b for b in placed if box.overlaps(b)), None)
            if hit is None:
                break
            offset[1] += (hit.y1 - box.y0 + 1.0) * 72.0 / fig.dpi  # pixels to points
            artist.set_position(tuple(offset))
        if offset[1] > 3.0:  # moved: a thin line back to its point
            ax.annotate(
                "", (x, y), xytext=(offset[0], offset[1]), textcoords="offset points",
                arrowprops={"arrowstyle": "-", "linewidth": 0.4, "color": "0.5"},
            )  # fmt: skip
        placed.append(artist.get_window_extent(renderer))
        texts.append(artist)
    return texts


def credit_vs_gain(methods: pd.DataFrame) -> bytes | None:
    """Does better credit placement buy faster learning? Per method and setting, credit
    precision (x) against AUC gain over GRPO (y), each with its 95% interval."""
    needed = ("credit_precision", "gain_auc")
    if not all(c in methods for c in needed):
        return None
    points = methods.dropna(subset=list(needed))
    if points.empty:
        return None
    groups = ordered_groups(points)
    fig, (ax,) = _figure(1, width=6.4, height=4.2)
    labels: list[tuple[str, float, float]] = []
    for marker, (key, frame) in zip("osD^v<>ph*" * 3, groups, strict=False):
        x = frame["credit_precision"].to_numpy(dtype=float)
        y = frame["gain_auc"].to_numpy(dtype=float)
        xerr = [
            x - frame["credit_precision_low"].to_numpy(float),
            frame["credit_precision_high"].to_numpy(float) - x,
        ]
        yerr = [
            y - frame["gain_auc_low"].to_numpy(float),
            frame["gain_auc_high"].to_numpy(float) - y,
        ]
        ax.errorbar(
            x, y, xerr=xerr, yerr=yerr, fmt=marker, capsize=2, alpha=0.8, label=group_title(key)
        )
        labels += zip(frame["method"], x, y, strict=True)
    spread_labels(ax, labels)
    ax.axhline(0.0, color="black", linewidth=1)
    ax.set_xlabel("credit precision (share of blame on the first wrong step)")
    ax.set_ylabel("AUC gain over GRPO")
    ax.grid(alpha=0.3)
    if len(groups) > 1:
        ax.legend(fontsize=7, loc="best")
    return _png(fig)


def gain_overview(methods: pd.DataFrame) -> bytes | None:
    """The headline: AUC gain over GRPO per method with its 95% interval, one panel per setting,
    each panel sorted best first, oracle credit (the reference) hollow and grey."""
    if "gain_auc" not in methods:
        return None
    groups = [(k, f) for k, f in ordered_groups(methods) if f["gain_auc"].notna().any()]
    if not groups:
        return None
    rows = max(len(f) for _, f in groups)
    fig, axes = _figure(len(groups), width=3.6, height=max(2.4, 0.22 * rows + 1.2), columns=4)
    style = _style(list(methods["method"].unique()))
    low = float(methods["gain_auc_low"].min())
    high = float(methods["gain_auc_high"].max())
    for ax, (key, frame) in zip(axes, groups, strict=True):
        ordered = ranked_without(frame, [BASELINE])[::-1]
        _draw_gains(ax, ordered, "gain_auc", style, linewidth=2.2, markersize=5)
        labels = [f"{m} (ref.)" if m == ORACLE else m for m in ordered["method"]]
        ax.set_yticks(np.arange(len(ordered)), labels, fontsize=7)
        ax.set_xlim(low - 0.01, high + 0.01)
        ax.set_title(group_title(key), fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(alpha=0.3, axis="x")
    fig.supxlabel("AUC gain over GRPO (mean difference over seeds, 95% interval)", fontsize=8)
    return _png(fig)
