"""The ScaleRL-form saturating fit: it recovers a known curve and says when one has not bent."""

from __future__ import annotations

import math

import numpy as np
import pytest

from creditbench.leaderboard.saturation import (
    fit_saturation,
    saturating_curve,
    seed_interval,
)


def test_a_known_curve_is_recovered():
    fractions = np.linspace(0.1, 1.0, 10)
    accuracies = saturating_curve(fractions, 0.3, asymptote=0.6, midpoint=0.4, exponent=2.0)
    fit = fit_saturation(fractions, accuracies, start=0.3)
    assert fit.asymptote == pytest.approx(0.6, abs=1e-3)
    assert fit.midpoint == pytest.approx(0.4, abs=1e-3)
    assert fit.exponent == pytest.approx(2.0, abs=1e-2)
    assert fit.identified


def test_a_straight_line_has_not_bent_inside_the_budget():
    fractions = np.array([0.25, 0.5, 0.75, 1.0])
    fit = fit_saturation(fractions, 0.2 + 0.1 * fractions, start=0.2)
    assert not fit.identified  # the midpoint lies past the budget: A is an extrapolation
    assert fit.midpoint > 1.0


def test_too_few_points_are_not_fitted():
    fit = fit_saturation([0.0, 0.5, 1.0], [0.2, 0.3, 0.35], start=0.2)  # the start is not a point
    assert math.isnan(fit.asymptote) and not fit.identified


def test_the_seed_interval_covers_the_pooled_fit():
    rng = np.random.default_rng(0)
    fractions = np.array([0.25, 0.5, 0.75, 1.0])
    truth = saturating_curve(fractions, 0.3, asymptote=0.55, midpoint=0.3, exponent=1.5)
    curves = [(fractions, truth + rng.normal(0, 0.01, 4)) for _ in range(8)]
    fit, asymptote, midpoint = seed_interval(curves, 0.3, reps=100)
    assert asymptote[0] <= fit.asymptote <= asymptote[1]
    assert midpoint[0] <= fit.midpoint <= midpoint[1]
    assert fit.asymptote == pytest.approx(0.55, abs=0.03)
    single, no_interval, _ = seed_interval(curves[:1], 0.3, reps=20)
    assert math.isfinite(single.asymptote) and all(math.isnan(v) for v in no_interval)
