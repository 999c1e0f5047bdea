"""The leaderboard's figures, each returned as PNG bytes (matplotlib's Agg canvas, no pyplot).

Every figure takes the frames of :func:`leaderboard.stats.summarize`; a method keeps one colour
in all of them (GRPO black, oracle credit grey and dashed).
"""

from __future__ import annotations

import io
import math
import re

import numpy as np
import pandas as pd

from .stats import BASELINE, ORACLE, natural_key, ordered_groups


def _figure(n_panels: int, *, width: float = 4.6, height: float = 3.4, columns: int = 3):
    from matplotlib.figure import Figure

    columns = max(1, min(columns, n_panels))
    rows = math.ceil(n_panels / columns)
    fig = Figure(figsize=(width * columns, height * rows), dpi=110, layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).flatten()
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes[:n_panels]


def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


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


def accuracy_vs_budget(curves: pd.DataFrame) -> bytes:
    """Mean accuracy against budget fraction per method, with its 95% bootstrap band."""
    groups = ordered_groups(curves)
    fig, axes = _figure(len(groups))
    style = _style(list(curves["method"].unique()))
    for ax, (key, frame) in zip(axes, groups, strict=True):
        for method, points in frame.groupby("method", sort=True):
            points = points.sort_values("budget_fraction")
            x = points["budget_fraction"].to_numpy(dtype=float)
            ax.plot(x, points["accuracy"], label=method, marker="o", markersize=3, **style[method])
            ax.fill_between(
                x, points["low"], points["high"], color=style[method]["color"], alpha=0.15
            )
        ax.set_title(group_title(key), fontsize=10)
        ax.set_xlabel("budget fraction")
        ax.set_ylabel("accuracy (eval)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    return _png(fig)


def final_accuracy_intervals(methods: pd.DataFrame) -> bytes:
    """Final-accuracy IQM per method with its 95% interval, best at the top."""
    groups = ordered_groups(methods)
    height = max(2.4, 0.32 * max(len(f) for _, f in groups) + 1.2)
    fig, axes = _figure(len(groups), height=height)
    style = _style(list(methods["method"].unique()))
    for ax, (key, frame) in zip(axes, groups, strict=True):
        frame = frame.sort_values("final_iqm")
        y = np.arange(len(frame))
        for i, row in enumerate(frame.itertuples()):
            color = style[row.method]["color"]
            ax.plot(
                [row.final_iqm_low, row.final_iqm_high],
                [i, i],
                color=color,
                linewidth=5,
                alpha=0.35,
            )
            ax.plot([row.final_iqm], [i], marker="|", markersize=14, color=color)
        ax.set_yticks(y, frame["method"])
        ax.set_title(group_title(key), fontsize=10)
        ax.set_xlabel("final accuracy: IQM and 95% CI")
        ax.grid(alpha=0.3, axis="x")
    return _png(fig)


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
    names = sorted(methods["method"].unique())
    groups = ordered_groups(methods)
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
        numeric = values.map(
            lambda v: v is not None and re.fullmatch(r"-?\d+(\.\d+)?", v) is not None
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
