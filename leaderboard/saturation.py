"""A saturating learning curve, fitted in the form ScaleRL fits RL's compute-performance curves.

ScaleRL ("The Art of Scaling Reinforcement Learning Compute for LLMs", arXiv 2510.13786, its
sigmoidal compute-performance curve; read in the paper) models the pass rate after compute C as

    R(C) = R0 + (A - R0) / (1 + (C_mid / C) ** B)

with R0 the start, A the asymptote, C_mid the compute at which half of the gain A - R0 is made
and B the steepness. A recipe can raise the asymptote or only reach it sooner (a smaller C_mid);
which of the two a credit method does is what a reader of a learning curve wants to know.

Here C is the fraction of the budget spent (the curves of one setting share the budget), R0 is
the measured start, held fixed, and the fit is a bounded least-squares fit to the evaluation
points of every seed of a method (scipy's ``curve_fit``). A fit is *identified* only where the
curve has bent: its midpoint lies inside the budget. Past it, the asymptote is an
extrapolation and is reported as such. Intervals resample seeds and refit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import curve_fit

MAX_MIDPOINT = 10.0  # budgets: a midpoint further out than ten budgets is "no bend seen"
EXPONENT_BOUNDS = (0.3, 5.0)  # ours: from barely to sharply sigmoidal; ScaleRL's B are 1-3


@dataclass(frozen=True)
class Saturation:
    """A fitted curve: asymptote A, midpoint C_mid (budget fractions), exponent B."""

    asymptote: float
    midpoint: float
    exponent: float

    @property
    def identified(self) -> bool:
        """The curve bent inside the budget: its midpoint was observed."""
        return math.isfinite(self.midpoint) and self.midpoint <= 1.0


NOT_FITTED = Saturation(math.nan, math.nan, math.nan)


def saturating_curve(c, start: float, asymptote: float, midpoint: float, exponent: float):
    """``R(c) = start + (asymptote - start) / (1 + (midpoint / c) ** exponent)``, ``c > 0``."""
    c = np.asarray(c, dtype=float)
    return start + (asymptote - start) / (1.0 + (midpoint / c) ** exponent)


def fit_saturation(fractions, accuracies, start: float) -> Saturation:
    """The least-squares curve through ``(fraction, accuracy)`` points (``fraction > 0``) from
    ``start``; :data:`NOT_FITTED` when there are fewer than three distinct fractions, the
    points are not finite, or the fit does not converge."""
    x, y = np.asarray(fractions, dtype=float), np.asarray(accuracies, dtype=float)
    keep = (x > 0) & np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(np.unique(x)) < 3 or not math.isfinite(start):
        return NOT_FITTED
    low, high = min(start, float(y.min())), 1.0

    def curve(c, asymptote, midpoint, exponent):
        return saturating_curve(c, start, asymptote, midpoint, exponent)

    first = (min(max(float(y.max()), low + 1e-6), high - 1e-6), float(np.median(x)), 1.0)
    bounds = ([low, 1e-3, EXPONENT_BOUNDS[0]], [high, MAX_MIDPOINT, EXPONENT_BOUNDS[1]])
    try:
        (asymptote, midpoint, exponent), _ = curve_fit(
            curve, x, y, p0=first, bounds=bounds, maxfev=5000
        )
    except (RuntimeError, ValueError):
        return NOT_FITTED
    return Saturation(float(asymptote), float(midpoint), float(exponent))


def seed_interval(
    curves: list[tuple[np.ndarray, np.ndarray]],
    start: float,
    *,
    reps: int = 200,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[Saturation, tuple[float, float], tuple[float, float]]:
    """The fit to every seed's ``(fractions, accuracies)`` pooled, and percentile intervals of
    its asymptote and midpoint over seeds resampled with replacement."""
    if not curves:
        return NOT_FITTED, (math.nan, math.nan), (math.nan, math.nan)

    def pooled(chosen):
        xs = np.concatenate([curves[i][0] for i in chosen])
        ys = np.concatenate([curves[i][1] for i in chosen])
        return fit_saturation(xs, ys, start)

    point = pooled(range(len(curves)))
    rng = np.random.default_rng(seed)
    fits = [pooled(rng.integers(0, len(curves), len(curves))) for _ in range(reps)]
    tail = (1 - level) / 2 * 100

    def interval(values):
        values = np.array([v for v in values if math.isfinite(v)])
        if len(curves) < 2 or len(values) < reps / 2:
            return (math.nan, math.nan)
        return (float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail)))

    return (
        point,
        interval(f.asymptote for f in fits),
        interval(f.midpoint for f in fits),
    )
