"""Statistics for "is data-parallel training as good as centralised, and how much faster?".

Every function here is pure: arrays in, a small frozen dataclass out. Tests come
from scipy.stats; this module only chooses them, pairs the inputs and handles the
degenerate cases (one seed, identical runs) that real experiments hit. TOST and
McNemar are the textbook formulas on scipy's t, binomial and chi-square
distributions (they used to come from statsmodels, 45 MB installed for these two).

Conventions: ``a`` is the reference (centralised), ``b`` the candidate (data-parallel);
differences are ``b - a``, so a positive difference means data-parallel scored higher.
Scores (accuracy, macro-F1) are fractions in [0, 1]; the TOST margin is in the same
unit (0.01 = 1 percentage point).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats as sps

EQUIVALENT = "equivalent"
NOT_SHOWN = "not shown equivalent"
DIFFERENT = "different"
NOT_ENOUGH_SEEDS = "not enough seeds"
MIN_EQUIVALENCE_SEEDS = 5
"""TOST over fewer paired seeds is not trusted: with 2-4 seeds the seed-to-seed spread is
estimated from 1-3 degrees of freedom, and one lucky draw of near-identical seeds makes a
tiny interval. Below this many seeds the verdict is :data:`NOT_ENOUGH_SEEDS` (a difference
the paired t-test finds is still reported as :data:`DIFFERENT`)."""
TARGET_POWER = 0.8
"""The power :func:`seeds_for_tost` plans for (the usual 80 %)."""
POWER_QUANTILES = 2000
"""Slices of the sample variance's distribution :func:`tost_power` averages over."""
SCORE_BOUNDS = (0.0, 1.0)
"""Range of a score (accuracy, macro-F1, a share): its intervals are clipped to it."""
DIFF_BOUNDS = (-1.0, 1.0)
"""Range of a difference of two scores."""


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval over ``n`` observations."""

    mean: float
    low: float
    high: float
    n: int
    confidence: float = 0.95

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PairedComparison:
    """Reference ``a`` against candidate ``b``, paired by seed."""

    n: int
    mean_a: Interval
    mean_b: Interval
    diff: Interval
    """Mean of ``b - a`` with its t confidence interval."""
    t_stat: float
    t_p: float
    """Two-sided paired t-test (scipy.stats.ttest_rel)."""
    wilcoxon_stat: float
    wilcoxon_p: float
    """Two-sided Wilcoxon signed-rank test (scipy.stats.wilcoxon), exact for small n."""
    margin: float
    tost_p: float
    """TOST p-value for ``-margin < mean(b - a) < margin`` (:func:`tost_paired_p`)."""
    alpha: float
    verdict: str
    note: str = ""
    diff_tost: Interval | None = None
    """Mean of ``b - a`` with its (1 - 2 alpha) interval: TOST shows equivalence exactly
    when this interval lies inside (-margin, margin), so it is the one to show beside the
    verdict (90 % for alpha = 0.05)."""
    sd_diff: float = math.nan
    """Standard deviation of the paired differences ``b - a`` (NaN below two pairs)."""
    seeds_for_power: int | None = None
    """Paired seeds TOST at this margin and alpha would need for :data:`TARGET_POWER`
    if the true difference were 0 and the differences spread as ``sd_diff``
    (:func:`seeds_for_tost`); None when there is no spread to plan with."""


@dataclass(frozen=True)
class McNemarResult:
    """McNemar's test on two classifiers' predictions for the same test samples."""

    n: int
    both_correct: int
    only_a_correct: int
    only_b_correct: int
    both_wrong: int
    statistic: float
    p: float
    exact: bool


def clip_interval(iv: Interval, bounds: tuple[float, float] | None) -> Interval:
    """``iv`` with its bounds clipped to ``bounds`` (a t-interval over a few seeds can
    overshoot the range of a bounded quantity, e.g. an accuracy above 100 %)."""
    if bounds is None:
        return iv
    lo, hi = bounds

    def clip(x: float) -> float:
        return x if math.isnan(x) else min(hi, max(lo, x))

    return Interval(iv.mean, clip(iv.low), clip(iv.high), iv.n, iv.confidence)


def mean_ci(
    values, confidence: float = 0.95, *, bounds: tuple[float, float] | None = None
) -> Interval:
    """Mean and Student-t confidence interval; NaN bounds when fewer than two values.

    ``bounds``: the range of the quantity; the interval is clipped to it.
    """
    iv = _mean_ci(values, confidence)
    return clip_interval(iv, bounds)


def _mean_ci(values, confidence: float) -> Interval:
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0, confidence)
    m = float(x.mean())
    if n < 2:
        return Interval(m, math.nan, math.nan, n, confidence)
    sem = float(x.std(ddof=1) / math.sqrt(n))
    if sem == 0.0:
        return Interval(m, m, m, n, confidence)
    low, high = sps.t.interval(confidence, n - 1, loc=m, scale=sem)
    return Interval(m, float(low), float(high), n, confidence)


def ratio_ci(numerator, denominator, confidence: float = 0.95) -> Interval:
    """Geometric mean of paired ratios ``numerator / denominator`` with a CI.

    Ratios of times are skewed, so the interval is a t-interval on the log ratios,
    exponentiated; it is never negative and is symmetric in the log scale.
    """
    num = np.asarray(numerator, dtype=float)
    den = np.asarray(denominator, dtype=float)
    if num.shape != den.shape:
        raise ValueError(f"paired inputs of different lengths: {num.shape} and {den.shape}")
    ok = np.isfinite(num) & np.isfinite(den) & (num > 0) & (den > 0)
    logs = mean_ci(np.log(num[ok] / den[ok]), confidence)
    return Interval(
        math.exp(logs.mean) if logs.n else math.nan,
        math.exp(logs.low) if not math.isnan(logs.low) else math.nan,
        math.exp(logs.high) if not math.isnan(logs.high) else math.nan,
        logs.n,
        confidence,
    )


def speedup_ci(
    time_reference, time_parallel, n_workers: int, confidence: float = 0.95
) -> tuple[Interval, Interval]:
    """Speedup ``T_ref / T_par`` (paired by seed) and scaling efficiency ``speedup / N``."""
    s = ratio_ci(time_reference, time_parallel, confidence)
    eff = Interval(s.mean / n_workers, s.low / n_workers, s.high / n_workers, s.n, confidence)
    return s, eff


def equivalence_verdict(tost_p: float, t_p: float, alpha: float = 0.05) -> str:
    """Name the outcome: equivalence shown, a difference shown, or neither.

    Equivalence wins when both hold (a tiny but consistent difference inside the
    margin is still equivalent for practical purposes).
    """
    if not math.isnan(tost_p) and tost_p < alpha:
        return EQUIVALENT
    if not math.isnan(t_p) and t_p < alpha:
        return DIFFERENT
    return NOT_SHOWN


def compare_paired(
    a,
    b,
    *,
    margin: float = 0.01,
    alpha: float = 0.05,
    confidence: float = 0.95,
    min_seeds: int = MIN_EQUIVALENCE_SEEDS,
) -> PairedComparison:
    """Paired t-test, Wilcoxon signed-rank and TOST of ``b`` against ``a`` (one pair per seed).

    Scores are fractions, so the intervals of the means are clipped to [0, 1] and those
    of the difference to [-1, 1]. With fewer than ``min_seeds`` pairs the verdict is
    :data:`NOT_ENOUGH_SEEDS` unless the t-test shows a difference (the p-values stay).
    """
    xa, xb = _paired_scores(a, b, margin=margin, alpha=alpha)
    n, d = int(xa.size), xb - xa
    tests = _paired_tests(xa, xb, margin=margin, alpha=alpha)
    verdict, note = _enough_seeds(tests.verdict, tests.note, n, min_seeds)
    return PairedComparison(
        n=n,
        mean_a=mean_ci(xa, confidence, bounds=SCORE_BOUNDS),
        mean_b=mean_ci(xb, confidence, bounds=SCORE_BOUNDS),
        diff=mean_ci(d, confidence, bounds=DIFF_BOUNDS),
        t_stat=tests.t_stat,
        t_p=tests.t_p,
        wilcoxon_stat=tests.wilcoxon_stat,
        wilcoxon_p=tests.wilcoxon_p,
        margin=margin,
        tost_p=tests.tost_p,
        alpha=alpha,
        verdict=verdict,
        note=note,
        diff_tost=mean_ci(d, 1 - 2 * alpha, bounds=DIFF_BOUNDS),
        sd_diff=tests.sd_diff,
        seeds_for_power=tests.seeds_for_power,
    )


def _paired_scores(a, b, *, margin: float, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """``a`` and ``b`` as float arrays, the pairs with a non-finite score left out;
    ValueError for inputs (or a margin or alpha) :func:`compare_paired` cannot take."""
    xa = np.asarray(a, dtype=float)
    xb = np.asarray(b, dtype=float)
    if xa.shape != xb.shape or xa.ndim != 1:
        raise ValueError(f"paired inputs must be 1-D of equal length, got {xa.shape}, {xb.shape}")
    if margin <= 0:
        raise ValueError(f"equivalence margin must be positive, got {margin}")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    ok = np.isfinite(xa) & np.isfinite(xb)
    return xa[ok], xb[ok]


@dataclass(frozen=True)
class _PairedTests:
    """What :func:`_paired_tests` found (NaN: the test was not possible)."""

    verdict: str
    note: str = ""
    t_stat: float = math.nan
    t_p: float = math.nan
    wilcoxon_stat: float = math.nan
    wilcoxon_p: float = math.nan
    tost_p: float = math.nan
    sd_diff: float = math.nan
    seeds_for_power: int | None = None


def _paired_tests(xa: np.ndarray, xb: np.ndarray, *, margin: float, alpha: float) -> _PairedTests:
    """The t-test, Wilcoxon and TOST of the pairs, and the verdict before the seed count
    is checked; with fewer than two pairs or identical differences, no test."""
    n, d = int(xa.size), xb - xa
    if n < 2:
        note = "fewer than two paired seeds: no test possible"
        return _PairedTests(equivalence_verdict(math.nan, math.nan, alpha), note)
    if np.ptp(d) == 0.0:
        # All seeds moved by exactly the same amount: the t statistics divide by zero.
        # The sample is then a constant, so decide against the margin directly.
        note = "all paired differences are identical; tests undefined, verdict from the margin"
        return _PairedTests(EQUIVALENT if abs(d[0]) < margin else DIFFERENT, note)
    sd_diff = float(np.std(d, ddof=1))
    t_res = sps.ttest_rel(xb, xa)
    t_p = float(t_res.pvalue)
    tost_p = tost_paired_p(xb, xa, -margin, margin)
    w_stat = w_p = math.nan
    if np.any(d != 0):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy warns on ties/zeros for small n
            w_res = sps.wilcoxon(xb, xa)
        w_stat, w_p = float(w_res.statistic), float(w_res.pvalue)
    note = ""
    if n < 6:
        note = (
            f"with n = {n} seeds the Wilcoxon test cannot reach p < 0.05 "
            f"(smallest two-sided p = {2 / 2**n:.3f})"
        )
    return _PairedTests(
        verdict=equivalence_verdict(tost_p, t_p, alpha),
        note=note,
        t_stat=float(t_res.statistic),
        t_p=t_p,
        wilcoxon_stat=w_stat,
        wilcoxon_p=w_p,
        tost_p=tost_p,
        sd_diff=sd_diff,
        seeds_for_power=seeds_for_tost(sd_diff, margin, alpha=alpha),
    )


def tost_power(
    n: int, sd: float, margin: float, *, alpha: float = 0.05, true_diff: float = 0.0
) -> float:
    """Probability that the paired TOST (:func:`tost_paired_p`) over ``n`` pairs shows
    ``-margin < mean < margin`` at level ``alpha`` when the differences are normal with
    mean ``true_diff`` and standard deviation ``sd``.

    For normal differences TOST passes when ``|mean - 0| + t_crit * s / sqrt(n) <
    margin`` (the 1 - 2 alpha interval inside the margin), so the power is the normal
    probability of the sample mean's window averaged over the chi-square distribution of
    the sample variance: here a midpoint rule over :data:`POWER_QUANTILES` equally likely
    slices of that distribution (within 1e-5 of a 200,000-slice reference from 2 to 85,600
    pairs; an adaptive integral missed the narrow chi-square peak there and returned 0).
    """
    if n < 2 or not sd > 0 or not margin > 0:
        raise ValueError(f"need n >= 2, sd > 0 and margin > 0; got {n}, {sd}, {margin}")
    df = n - 1
    t_crit = float(sps.t.ppf(1 - alpha, df))
    root_n = math.sqrt(n)
    v = sps.chi2.ppf((np.arange(POWER_QUANTILES) + 0.5) / POWER_QUANTILES, df)
    half = margin - t_crit * sd * np.sqrt(v / df) / root_n  # the mean's window, per slice
    z = root_n / sd
    window = sps.norm.cdf((half - true_diff) * z) - sps.norm.cdf((-half - true_diff) * z)
    return float(np.where(half > 0, window, 0.0).mean())


def seeds_for_tost(
    sd: float,
    margin: float,
    *,
    alpha: float = 0.05,
    power: float = TARGET_POWER,
    true_diff: float = 0.0,
    max_n: int = 100_000,
) -> int | None:
    """The fewest paired seeds with which TOST at ``margin`` reaches ``power``, for
    normal differences of spread ``sd`` around ``true_diff`` (:func:`tost_power`, which
    grows with ``n``). None without spread (``sd`` 0 or NaN), when the true difference
    is not inside the margin (no number of seeds helps), or beyond ``max_n``."""
    if not (sd > 0 and math.isfinite(sd)) or abs(true_diff) >= margin:
        return None

    def enough(n: int) -> bool:
        return tost_power(n, sd, margin, alpha=alpha, true_diff=true_diff) >= power

    lo, hi = 1, 2  # lo is not enough (one pair has no test), hi is a candidate
    while not enough(hi):
        if hi >= max_n:
            return None
        lo, hi = hi, min(max_n, 2 * hi)
    while hi - lo > 1:  # lo is not enough, hi is
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


def _enough_seeds(verdict: str, note: str, n: int, min_seeds: int) -> tuple[str, str]:
    """Withhold every verdict but a shown difference when fewer than ``min_seeds`` pairs."""
    if n >= min_seeds or verdict == DIFFERENT:
        return verdict, note
    why = f"equivalence needs at least {min_seeds} paired seeds, this has {n}"
    return NOT_ENOUGH_SEEDS, f"{why}; {note}" if note else why


def mcnemar_test(y_true, pred_a, pred_b, *, exact_below: int = 25) -> McNemarResult:
    """McNemar's test of two classifiers on the same samples.

    Uses the exact binomial test when the discordant pairs number fewer than
    ``exact_below`` (the chi-square approximation is poor there), else the
    chi-square statistic with continuity correction.
    """
    y = np.asarray(y_true)
    pa = np.asarray(pred_a)
    pb = np.asarray(pred_b)
    if not (y.shape == pa.shape == pb.shape) or y.ndim != 1:
        raise ValueError(
            f"labels and predictions must be 1-D of equal length, got "
            f"{y.shape}, {pa.shape}, {pb.shape}"
        )
    ca = pa == y
    cb = pb == y
    both = int(np.sum(ca & cb))
    only_a = int(np.sum(ca & ~cb))
    only_b = int(np.sum(~ca & cb))
    neither = int(np.sum(~ca & ~cb))
    exact = (only_a + only_b) < exact_below
    if only_a + only_b == 0:
        # No discordant pair: the classifiers agree on every sample's correctness.
        return McNemarResult(int(y.size), both, only_a, only_b, neither, 0.0, 1.0, True)
    statistic, p = mcnemar_p(only_a, only_b, exact=exact)
    return McNemarResult(int(y.size), both, only_a, only_b, neither, statistic, p, exact)


def tost_paired_p(x1, x2, low: float, upp: float) -> float:
    """TOST (two one-sided t-tests) p-value for ``low < mean(x1 - x2) < upp``.

    The larger of the one-sided one-sample t-test p-values of ``H0: mean <= low`` and
    ``H0: mean >= upp`` on the paired differences (``n - 1`` degrees of freedom);
    below ``alpha`` it shows the mean difference lies inside the interval. The same
    value as statsmodels' ``ttost_paired(x1, x2, low, upp)[0]``.
    """
    d = np.asarray(x1, dtype=float) - np.asarray(x2, dtype=float)
    p_low = sps.ttest_1samp(d, low, alternative="greater").pvalue
    p_upp = sps.ttest_1samp(d, upp, alternative="less").pvalue
    return float(max(p_low, p_upp))


def mcnemar_p(only_a: int, only_b: int, *, exact: bool) -> tuple[float, float]:
    """McNemar's ``(statistic, p)`` from the two discordant counts (both positive in sum).

    Exact: the statistic is ``min(only_a, only_b)`` and ``p`` the two-sided binomial
    test of it among ``only_a + only_b`` draws at one half. Otherwise the chi-square
    statistic with Edwards' continuity correction, ``(|only_a - only_b| - 1)^2 /
    (only_a + only_b)``, on one degree of freedom. The same values as statsmodels'
    ``mcnemar(table, exact=exact, correction=True)``.
    """
    n = only_a + only_b
    if exact:
        k = min(only_a, only_b)
        return float(k), float(sps.binomtest(k, n, 0.5).pvalue)
    statistic = (abs(only_a - only_b) - 1) ** 2 / n
    return float(statistic), float(sps.chi2.sf(statistic, 1))
