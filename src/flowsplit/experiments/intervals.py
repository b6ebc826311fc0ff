"""Interval figures in words, as every study page and the overview write them:
``95.0 % (95 % CI 94.1-95.9)``, ``1.70x (95 % CI 1.60-1.80)``, ``+0.10 pt (...)``,
``-30 % (95 % CI -35 to -25 %)``, and "the same on all N seeds" for a zero-width
interval over seeds."""

from __future__ import annotations

import math
from collections.abc import Callable

from flowsplit.experiments.stats import Interval


def interval_parts(d: Interval | None) -> tuple[float, float, float]:
    """(mean, low, high) of an interval, NaN where missing."""
    return (math.nan,) * 3 if d is None else (d.mean, d.low, d.high)


def pct_ci(d: Interval | None) -> str:
    """``95.0 % (95 % CI 94.1-95.9)`` from a score interval (fractions), the interval
    clipped to 0-100 % (a t-interval over a few seeds can overshoot it)."""
    return in_words(
        d,
        lambda m: f"{100 * m:.1f} %",
        lambda lo, hi: f"95 % CI {100 * max(0.0, lo):.1f}-{100 * min(1.0, hi):.1f}",
        same_seeds=True,
    )


def same_on_every_seed(d: Interval | None) -> str:
    """``the same on all 3 seeds`` when an interval over seeds has no width because
    every seed scored alike (a model that ignores the seed, such as XGBoost without
    subsampling): a zero-width "95 % CI" would read as certainty, while it says
    nothing of the test set's own sampling error. Empty otherwise."""
    m, lo, hi = interval_parts(d)
    n = None if d is None else d.n
    if isinstance(n, int) and n >= 2 and not math.isnan(lo) and hi - lo <= 1e-12 * max(1.0, abs(m)):
        return f"the same on all {n} seeds"
    return ""


def times_ci(d: Interval | None) -> str:
    """``1.70x (95 % CI 1.60-1.80)``."""
    return in_words(d, lambda m: f"{m:.2f}x", lambda lo, hi: f"95 % CI {lo:.2f}-{hi:.2f}")


def pts_ci(d: Interval | None, label: str = "95 % CI") -> str:
    """``+0.10 pt (90 % CI -0.20 to +0.40)`` from a difference interval (fractions)."""
    return in_words(
        d,
        lambda m: f"{100 * m:+.2f} pt",
        lambda lo, hi: f"{label} {100 * lo:+.2f} to {100 * hi:+.2f}",
    )


def change_ci(d: Interval | None) -> str:
    """``-30 % (95 % CI -35 to -25 %)`` from a ratio interval."""
    return in_words(
        d,
        lambda m: f"{100 * (m - 1):+.0f} %",
        lambda lo, hi: f"95 % CI {100 * (lo - 1):+.0f} to {100 * (hi - 1):+.0f} %",
        same_seeds=True,
    )


def in_words(
    d: Interval | None,
    mean: Callable[[float], str],
    ci: Callable[[float, float], str],
    *,
    same_seeds: bool = False,
    shown: Callable[[float], bool] = lambda v: not math.isnan(v),
) -> str:
    """``MEAN (CI)`` of an interval, an en dash without a mean, ``MEAN`` alone without
    bounds (a value is there when ``shown``: by default, not NaN); ``same_seeds``: "the
    same on all N seeds" for a zero-width one over seeds."""
    m, lo, hi = interval_parts(d)
    if not shown(m):
        return "–"
    text = mean(m)
    same = same_on_every_seed(d) if same_seeds else ""
    if same:
        return f"{text} ({same})"
    return f"{text} ({ci(lo, hi)})" if shown(lo) else text
