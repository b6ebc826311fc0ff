"""Statistics against values worked out by hand or with scipy directly."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from flowsplit.experiments.stats import (
    DIFFERENT,
    EQUIVALENT,
    NOT_ENOUGH_SEEDS,
    NOT_SHOWN,
    SCORE_BOUNDS,
    compare_paired,
    equivalence_verdict,
    mcnemar_p,
    mcnemar_test,
    mean_ci,
    ratio_ci,
    seeds_for_tost,
    speedup_ci,
    tost_paired_p,
    tost_power,
)


def test_mean_ci_matches_hand_computed_t_interval():
    # Prepare: mean 3, sd sqrt(2.5), sem sqrt(0.5); t(0.975, 4) = 2.7764451
    values = [1, 2, 3, 4, 5]
    half = 2.7764451052 * math.sqrt(0.5)
    # Execute
    ci = mean_ci(values)
    # Assert
    assert ci.mean == pytest.approx(3.0)
    assert ci.low == pytest.approx(3.0 - half, rel=1e-8)
    assert ci.high == pytest.approx(3.0 + half, rel=1e-8)
    assert ci.n == 5


def test_mean_ci_of_one_value_has_no_interval():
    ci = mean_ci([0.9])
    assert ci.mean == 0.9 and math.isnan(ci.low) and math.isnan(ci.high)


def test_compare_paired_small_differences_are_equivalent():
    # Prepare: differences b - a = [.001, -.002, .003, 0, .002]
    a = np.array([0.90, 0.91, 0.92, 0.93, 0.94])
    d = np.array([0.001, -0.002, 0.003, 0.0, 0.002])
    b = a + d
    margin = 0.01
    # Expected TOST by hand: two one-sided t-tests on the mean difference.
    dd = b - a  # recomputed so float rounding matches what the function sees
    mean, sem = dd.mean(), dd.std(ddof=1) / math.sqrt(5)
    p_lower = sps.t.sf((mean + margin) / sem, 4)
    p_upper = sps.t.cdf((mean - margin) / sem, 4)
    # Execute
    res = compare_paired(a, b, margin=margin)
    # Assert
    assert res.diff.mean == pytest.approx(0.0008, abs=1e-12)
    assert res.t_p == pytest.approx(sps.ttest_rel(b, a).pvalue, rel=1e-10)
    assert res.tost_p == pytest.approx(max(p_lower, p_upper), rel=1e-8)
    assert res.wilcoxon_p == pytest.approx(sps.wilcoxon(b, a).pvalue, rel=1e-10)
    # Zero dropped; |d| ranks 1, 2.5, 2.5, 4; negative ranks sum to 2.5.
    assert res.wilcoxon_stat == pytest.approx(2.5)
    assert res.verdict == EQUIVALENT
    assert "Wilcoxon" in res.note  # n = 5 cannot reach 0.05


def test_compare_paired_consistent_drop_is_different():
    # Prepare: data-parallel loses 5 points on every seed, give or take 0.1.
    a = np.array([0.95, 0.96, 0.94, 0.955, 0.945])
    b = a - 0.05 + np.array([0.001, -0.001, 0.0005, 0.0, -0.0005])
    # Execute
    res = compare_paired(a, b, margin=0.01)
    # Assert
    assert res.t_p < 1e-6
    assert res.tost_p > 0.5
    assert res.verdict == DIFFERENT


def test_compare_paired_noisy_is_not_shown_equivalent():
    # Prepare: differences of +-4 points around zero: neither equal nor different.
    a = np.array([0.90, 0.90, 0.90, 0.90, 0.90])
    b = a + np.array([0.04, -0.04, 0.03, -0.035, 0.01])
    # Execute
    res = compare_paired(a, b, margin=0.01)
    # Assert
    assert res.verdict == NOT_SHOWN
    assert res.t_p > 0.05 and res.tost_p > 0.05


def test_compare_paired_identical_runs_decide_from_margin():
    a = [0.9, 0.92, 0.91, 0.93, 0.94]
    res = compare_paired(a, a, margin=0.01)
    assert res.verdict == EQUIVALENT
    assert math.isnan(res.t_p) and "identical" in res.note
    shifted = compare_paired(a, [x - 0.02 for x in a], margin=0.01)
    assert shifted.verdict == DIFFERENT
    # Three identical seeds are not enough to call it equivalent.
    few = compare_paired(a[:3], a[:3], margin=0.01)
    assert few.verdict == NOT_ENOUGH_SEEDS and "at least 5 paired seeds, this has 3" in few.note


def test_compare_paired_one_seed_is_not_tested():
    res = compare_paired([0.9], [0.91])
    assert res.verdict == NOT_ENOUGH_SEEDS and math.isnan(res.t_p)


def test_three_seeds_get_no_equivalence_verdict_even_when_tost_rejects():
    # Prepare: three seeds that agree to 0.1 pt: TOST alone would call them equivalent.
    a = np.array([0.90, 0.91, 0.92])
    b = a + np.array([0.001, -0.001, 0.0005])
    # Execute
    res = compare_paired(a, b, margin=0.01)
    # Assert: the test is reported, the verdict withheld; with 3 allowed it would pass.
    assert res.tost_p < 0.05
    assert res.verdict == NOT_ENOUGH_SEEDS
    assert compare_paired(a, b, margin=0.01, min_seeds=3).verdict == EQUIVALENT
    # A clear difference is still reported with few seeds.
    assert compare_paired(a, a - 0.05 + b - a, margin=0.01).verdict == DIFFERENT


def test_score_intervals_are_clipped_to_their_range():
    # Prepare: three seeds near 100 %: the t-interval's upper end passes 100 %.
    values = [0.99, 1.0, 1.0]
    # Execute
    raw = mean_ci(values)
    clipped = mean_ci(values, bounds=SCORE_BOUNDS)
    # Assert
    assert raw.high > 1.0 and clipped.high == 1.0
    assert clipped.low == pytest.approx(raw.low) and clipped.mean == pytest.approx(raw.mean)
    res = compare_paired([0.99, 1.0, 1.0], [1.0, 1.0, 0.99])
    assert res.mean_a.high <= 1.0 and res.mean_b.high <= 1.0


def test_equivalence_verdict_prefers_equivalence():
    assert equivalence_verdict(0.01, 0.02) == EQUIVALENT
    assert equivalence_verdict(0.2, 0.02) == DIFFERENT
    assert equivalence_verdict(0.2, 0.3) == NOT_SHOWN
    assert equivalence_verdict(math.nan, math.nan) == NOT_SHOWN


def test_mcnemar_exact_matches_binomial_by_hand():
    # Prepare: 10 samples; a right on 0..7, b right on 0, 1 and 8.
    y = np.zeros(10, dtype=int)
    a = np.ones(10, dtype=int)
    a[:8] = 0
    b = np.ones(10, dtype=int)
    b[[0, 1, 8]] = 0
    # only a correct: 2..7 -> 6; only b correct: 8 -> 1; both: 0, 1; neither: 9.
    # Exact two-sided: 2 * P(X <= 1 | n=7, 1/2) = 2 * 8 / 128.
    # Execute
    res = mcnemar_test(y, a, b)
    # Assert
    assert (res.both_correct, res.only_a_correct, res.only_b_correct, res.both_wrong) == (
        2,
        6,
        1,
        1,
    )
    assert res.exact
    assert res.p == pytest.approx(0.125)


def test_mcnemar_chi_square_with_continuity_correction():
    # Prepare: 20 samples only a gets right, 10 only b, 70 both.
    y = np.zeros(100, dtype=int)
    a = np.zeros(100, dtype=int)
    b = np.zeros(100, dtype=int)
    a[20:30] = 1  # a wrong where only b is right
    b[:20] = 1  # b wrong where only a is right
    # Execute
    res = mcnemar_test(y, a, b)
    # Assert: (|20 - 10| - 1)^2 / 30 = 2.7
    assert not res.exact
    assert res.statistic == pytest.approx(2.7)
    assert res.p == pytest.approx(sps.chi2.sf(2.7, 1))


def test_mcnemar_agreeing_classifiers():
    y = np.array([0, 1, 2])
    res = mcnemar_test(y, y, y)
    assert res.p == 1.0 and res.only_a_correct == res.only_b_correct == 0


def test_speedup_is_geometric_mean_of_paired_ratios():
    # Prepare: ratios 2, 12/7, 2 -> logs; CI by hand in log space.
    ref = [10.0, 12.0, 11.0]
    par = [5.0, 7.0, 5.5]
    logs = np.log(np.array(ref) / np.array(par))
    sem = logs.std(ddof=1) / math.sqrt(3)
    half = sps.t.ppf(0.975, 2) * sem
    # Execute
    s, eff = speedup_ci(ref, par, n_workers=2)
    # Assert
    assert s.mean == pytest.approx(math.exp(logs.mean()))
    assert s.low == pytest.approx(math.exp(logs.mean() - half))
    assert s.high == pytest.approx(math.exp(logs.mean() + half))
    assert eff.mean == pytest.approx(s.mean / 2)


def test_ratio_ci_constant_ratio_has_zero_width():
    r = ratio_ci([10, 20], [5, 10])
    assert (r.mean, r.low, r.high) == pytest.approx((2.0, 2.0, 2.0))


def test_compare_paired_rejects_bad_input():
    with pytest.raises(ValueError, match="equal length"):
        compare_paired([1, 2], [1])
    with pytest.raises(ValueError, match="margin"):
        compare_paired([1, 2], [1, 2], margin=0)


def test_tost_verdict_matches_its_own_one_minus_two_alpha_interval():
    # The reviewer's case: the 95 % CI crosses -1 pt, yet TOST (alpha 0.05) shows
    # equivalence, because TOST is the 90 % interval lying inside the margin.
    a = np.full(5, 0.9)
    b = a + np.array([-0.002, -0.012, 0.0, -0.006, -0.001])
    res = compare_paired(a, b, margin=0.01)
    d = b - a
    half90 = sps.t.ppf(0.95, 4) * d.std(ddof=1) / math.sqrt(5)
    assert res.verdict == EQUIVALENT and res.tost_p < 0.05
    assert res.diff.low < -0.01  # the 95 % interval alone would look inconclusive
    assert res.diff_tost.low == pytest.approx(d.mean() - half90, rel=1e-9)
    assert res.diff_tost.low > -0.01 and res.diff_tost.high < 0.01
    with pytest.raises(ValueError, match="alpha"):
        compare_paired(a, b, alpha=0.7)


def test_tost_upper_test_binds_closed_form_t4():
    # Prepare: differences [4, 6, 5, 7, 3] thousandths: mean 0.005, sem sqrt(5e-7),
    # so against the upper margin 0.01 t = -0.005 / sqrt(5e-7) = -sqrt(50) on 4 df.
    # Student t with 4 df: F(t) = 1/2 + 3/8 * t/sqrt(1 + t^2/4) * (1 - t^2 / (12 (1 + t^2/4))),
    # so F(-sqrt(50)) = 1/2 - 3/8 * 10/(3 sqrt 3) * 56/81 = 1/2 - 70 / (81 sqrt 3).
    a = np.zeros(5)
    b = np.array([0.004, 0.006, 0.005, 0.007, 0.003])
    expected = 0.5 - 70 / (81 * math.sqrt(3))  # 0.0010553...
    # Execute
    p = tost_paired_p(b, a, -0.01, 0.01)
    res = compare_paired(np.full(5, 0.5), 0.5 + b, margin=0.01, min_seeds=5)
    # Assert: the lower test (t = +sqrt(450)) is far smaller, so the upper one is the p-value.
    assert p == pytest.approx(expected, rel=1e-9)
    assert res.tost_p == pytest.approx(expected, rel=1e-6)  # 0.5 + b rounds the differences
    assert res.verdict == EQUIVALENT


def test_tost_lower_test_binds_and_swapping_the_pair_mirrors_it():
    # Same differences negated: now the lower bound -0.01 is the one 0.005 away.
    b = np.zeros(5)
    a = np.array([0.004, 0.006, 0.005, 0.007, 0.003])
    expected = 0.5 - 70 / (81 * math.sqrt(3))
    assert tost_paired_p(b, a, -0.01, 0.01) == pytest.approx(expected, rel=1e-9)
    # A margin the mean lies outside: the upper test's t > 0, so p > 1/2.
    assert tost_paired_p(a, b, -0.004, 0.004) > 0.5


def test_mcnemar_exact_by_hand():
    # 0 against 5 discordant: 2 * P(X <= 0 | n=5, 1/2) = 2 / 32.
    assert mcnemar_p(0, 5, exact=True) == (0.0, pytest.approx(0.0625))
    assert mcnemar_p(5, 0, exact=True) == (0.0, pytest.approx(0.0625))
    # 2 against 9: 2 * (1 + 11 + 55) / 2048.
    assert mcnemar_p(9, 2, exact=True) == (2.0, pytest.approx(2 * 67 / 2048))
    # 3 against 3: 2 * P(X <= 3 | n=6) = 2 * 42 / 64 > 1, so the p-value is 1.
    assert mcnemar_p(3, 3, exact=True) == (3.0, pytest.approx(1.0))


def test_mcnemar_chi_square_balanced_counts_by_hand():
    # 15 against 15 with the continuity correction: (|0| - 1)^2 / 30 = 1/30;
    # chi-square with 1 df: P(X > x) = erfc(sqrt(x / 2)).
    stat, p = mcnemar_p(15, 15, exact=False)
    assert stat == pytest.approx(1 / 30)
    assert p == pytest.approx(math.erfc(math.sqrt(1 / 60)), rel=1e-12)
    # 40 against 10: (30 - 1)^2 / 50 = 16.82.
    stat, p = mcnemar_p(40, 10, exact=False)
    assert stat == pytest.approx(16.82)
    assert p == pytest.approx(math.erfc(math.sqrt(16.82 / 2)), rel=1e-9)


def _simulated_tost_power(n: int, sd: float, margin: float, true_diff: float, trials: int) -> float:
    """Share of simulated normal paired differences for which TOST shows equivalence."""
    rng = np.random.default_rng(12345)
    d = rng.normal(true_diff, sd, size=(trials, n))
    m, s = d.mean(axis=1), d.std(axis=1, ddof=1)
    t_crit = sps.t.ppf(0.95, n - 1)
    half = t_crit * s / np.sqrt(n)
    return float(np.mean((m - half > -margin) & (m + half < margin)))


@pytest.mark.parametrize(("sd", "true_diff"), [(0.02, 0.0), (0.006, 0.0), (0.01, 0.004)])
def test_tost_power_and_the_seeds_it_needs_match_simulation(sd, true_diff):
    # Execute
    n = seeds_for_tost(sd, 0.01, true_diff=true_diff)
    # Assert: the power formula agrees with simulated TOST at n and at n - 1 seeds, and
    # n is the first count that reaches 80 % (simulation error about 0.6 pt at 5000 trials).
    assert n is not None and n > 2
    for k in (n - 1, n):
        sim = _simulated_tost_power(k, sd, 0.01, true_diff, 5000)
        assert tost_power(k, sd, 0.01, true_diff=true_diff) == pytest.approx(sim, abs=0.02)
    assert tost_power(n, sd, 0.01, true_diff=true_diff) >= 0.8
    assert tost_power(n - 1, sd, 0.01, true_diff=true_diff) < 0.8


def test_seeds_for_tost_edge_cases_and_the_comparison_carries_it():
    assert seeds_for_tost(0.0, 0.01) is None  # no spread: nothing to plan with
    assert seeds_for_tost(0.01, 0.01, true_diff=0.012) is None  # outside the margin
    assert seeds_for_tost(1e-4, 0.01) == 2  # the smallest count with a test is enough
    # Many pairs: the sample sd is then close to sd, so the power tends to the normal
    # window 2 * Phi((margin - z * se) / se) - 1 with se = sd / sqrt(n) (about 0.931 here).
    se = 0.5 / math.sqrt(30_000)
    window = 2 * sps.norm.cdf((0.01 - sps.norm.ppf(0.95) * se) / se) - 1
    assert tost_power(30_000, 0.5, 0.01) == pytest.approx(window, abs=0.005)
    # What the report's Method says: 5 seeds at +-1 pt pass 80 % of the time up to sd ~0.6 pt.
    assert tost_power(5, 0.006, 0.01) > 0.8 > tost_power(5, 0.0065, 0.01)
    # Paired differences with sd 2 pt (as the LSTM's on nDPI8): about 36 seeds at +-1 pt.
    a = np.array([0.80, 0.82, 0.84, 0.86, 0.88])
    d = np.array([-0.02, 0.02, 0.0, -0.02, 0.02])  # sd exactly 0.02
    c = compare_paired(a, a + d, margin=0.01)
    assert c.sd_diff == pytest.approx(float(np.std(d, ddof=1)))
    assert c.seeds_for_power == seeds_for_tost(c.sd_diff, 0.01)
    assert c.sd_diff == pytest.approx(0.02) and 30 <= c.seeds_for_power <= 40
