"""Analysis of run records: pairing by seed, verdicts, the claims rules, headlines."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from flowsplit.experiments.dp.analysis import (
    BELOW_MAJORITY,
    CONTENDED,
    FEW_TIMINGS,
    OVERSUBSCRIBED,
    SUPERLINEAR,
    analyse,
    compare_hooks,
    compare_to_central,
    headline,
    majority_baseline,
    summarise_group,
)
from flowsplit.experiments.dp.records import RunRecord
from flowsplit.experiments.dp.result import ModelAnalysis
from flowsplit.experiments.stats import NOT_ENOUGH_SEEDS, NOT_SHOWN, seeds_for_tost
from tests.experiments.synthetic import record_of

# Per-seed accuracy wobble, the same in both modes unless a test says otherwise.
WOBBLE = (0.0, 0.002, -0.001, 0.001, -0.002)


def _rec(seed, workers, acc, t, pred=None, **kw) -> RunRecord:
    return record_of(
        **{
            "model": "m",
            "seed": seed,
            "workers": workers,
            "accuracy": acc,
            "macro_f1": acc,
            "epoch_time_s": t,
            "oversubscribed": False,
            "y_true": [0, 1, 1, 0],
            "y_pred": pred or [0, 1, 1, 0],
            "foreign_cpu_share": 0.0,
            **kw,
        }
    )


def _pair(n_seeds=5, *, acc=0.9, t_central=10.0, t_parallel=5.2, dp_shift=None, **kw):
    """Centralised and 2-worker records; data-parallel differs by ``dp_shift`` per seed."""
    shift = dp_shift or [0.0005 * (-1) ** s for s in range(n_seeds)]
    central = [
        _rec(s, 1, acc + WOBBLE[s], t_central * (1 + 0.01 * s), **kw) for s in range(n_seeds)
    ]
    parallel = [
        _rec(s, 2, acc + WOBBLE[s] + shift[s], t_parallel * (1 + 0.01 * s), **kw)
        for s in range(n_seeds)
    ]
    return central, parallel


def _entry(vs_central: dict) -> ModelAnalysis:
    """A model's typed analysis holding these comparisons (as the report reads them)."""
    return ModelAnalysis(by_workers={}, vs_central=dict(vs_central))


def _compare(central, parallel, majority_rate=0.5):
    return compare_to_central(
        central, parallel, 2, margin=0.01, alpha=0.05, majority_rate=majority_rate
    )


def test_compare_to_central_pairs_by_seed_and_ignores_unpaired_runs():
    # Prepare: seed 9 exists only centralised; times halve exactly.
    central = [_rec(s, 1, 0.90 + 0.001 * s, 10.0) for s in (0, 1, 2, 9)]
    parallel = [
        _rec(s, 2, 0.90 + 0.001 * s + d, 5.0)
        for s, d in zip((2, 0, 1), (0.001, -0.001, 0.0), strict=True)
    ]
    # Execute
    res = compare_to_central(central, parallel, 2, margin=0.01, alpha=0.05)
    # Assert
    assert res.seeds == [0, 1, 2]
    assert res.accuracy.n == 3
    assert res.accuracy.diff.mean == pytest.approx(0.0, abs=1e-12)
    assert res.speedup.mean == pytest.approx(2.0)
    assert res.efficiency.mean == pytest.approx(1.0)
    assert len(res.mcnemar) == 3 and res.mcnemar[0].p == 1.0


def test_clean_five_seed_study_claims_speedup_and_equivalence():
    # Prepare: 5 seeds, 1.92x faster, accuracy within +-0.05 pt.
    central, parallel = _pair()
    # Execute
    v = _compare(central, parallel)
    text = headline("m", _entry({"2": v}), 0.01)
    # Assert
    assert v.claims.speedup_claimed and v.claims.equivalent
    assert text.startswith("2 workers cut m's epoch time 1.92x (95 % CI ")
    assert "accuracy equivalent within +-1 pt (TOST p < 0.001; 90 % CI " in text


def test_contended_runs_give_no_speedup_claim():
    # Prepare: every run was disturbed by other processes (flagged contended).
    central, parallel = _pair(contended=True, foreign_cpu_share=0.55)
    # Execute
    v = _compare(central, parallel)
    text = headline("m", _entry({"2": v}), 0.01)
    # Assert: the speedup is measured but withheld; accuracy still judged.
    assert v.claims.speedup_claimed is False
    assert v.claims.speedup_withheld == [CONTENDED]
    assert v.foreign_cpu_share_median == pytest.approx(0.55)
    assert text.startswith("2 workers: no speedup claimed for m (contended; measured 1.92x)")
    assert "cut" not in text and v.claims.equivalent


def test_oversubscribed_and_superlinear_speedups_are_not_claimed():
    # Prepare: 2 workers 2.5x faster than 1 (125 % efficiency), and an oversubscribed set.
    central, parallel = _pair(t_parallel=4.0)
    over = [replace(r, oversubscribed=True) for r in _pair()[1]]
    # Execute
    fast = _compare(central, parallel)
    shared = _compare(central, over)
    # Assert
    assert fast.claims.efficiency_above_1 and fast.claims.speedup_withheld == [SUPERLINEAR]
    assert "125 % efficiency" in headline("m", _entry({"2": fast}), 0.01)
    assert shared.claims.speedup_withheld == [OVERSUBSCRIBED]


def test_one_undisturbed_pair_is_too_few_for_a_speedup_claim():
    central, parallel = _pair()
    parallel = [replace(r, contended=r.seed > 0) for r in parallel]
    v = _compare(central, parallel)
    assert v.speedup.n == 1 and v.claims.speedup_withheld == [FEW_TIMINGS]


def test_three_seeds_give_no_equivalence_verdict():
    # Prepare: three seeds that agree to 0.05 pt, TOST would pass.
    central, parallel = _pair(3)
    # Execute
    v = _compare(central, parallel)
    text = headline("m", _entry({"2": v}), 0.01)
    # Assert
    assert v.accuracy.tost_p < 0.05
    assert v.claims.accuracy_verdict == NOT_ENOUGH_SEEDS and not v.claims.equivalent
    assert "equivalence not judged: 3 paired seed(s), at least 5 needed" in text
    # The spread alone would need fewer seeds than the rule asks for: the text says both.
    assert v.accuracy.seeds_for_power < 5 and "(a verdict still needs 5)" in text
    assert "equivalent within" not in text


def test_model_below_majority_is_flagged_not_equivalent():
    # Prepare: 45.5 % accuracy against a majority class of 46.6 % (the reviewer's case).
    central, parallel = _pair(acc=0.455)
    # Execute
    v = _compare(central, parallel, majority_rate=0.466)
    text = headline("cnn", _entry({"2": v}), 0.01)
    # Assert: TOST alone would say equivalent; the claims do not.
    assert v.accuracy.verdict == "equivalent"
    assert v.claims.accuracy_verdict == BELOW_MAJORITY
    assert v.claims.macro_f1_verdict == BELOW_MAJORITY
    assert not v.claims.equivalent and not v.claims.above_majority
    assert "not above the majority-class rate of 46.6 %" in text and "equivalent" not in text


def test_barely_above_majority_within_noise_is_not_above():
    # The lower end of the CI decides: 47.0 % +- 1 pt is not above 46.6 %.
    central, parallel = _pair(acc=0.47, dp_shift=[0.0] * 5)
    central = [
        replace(r, accuracy=r.accuracy + d)
        for r, d in zip(central, (0.01, -0.01, 0.01, -0.01, 0.0), strict=True)
    ]
    v = _compare(central, parallel, majority_rate=0.466)
    assert not v.claims.above_majority


def test_majority_baseline_by_hand():
    # Prepare: test labels 0,0,0,1 -> always predicting class "a": accuracy 3/4;
    # F1(a) = 2 * 0.75 / 1.75, F1(b) = 0; macro over the two classes present.
    recs = [record_of(y_true=[0, 0, 0, 1], classes=["a", "b", "c"])]
    # Execute
    maj = majority_baseline(recs)
    # Assert
    assert maj.class_name == "a" and maj.accuracy == 0.75
    assert maj.macro_f1 == pytest.approx((1.5 / 1.75) / 2)
    assert maj.per_class_f1 == {"a": pytest.approx(1.5 / 1.75), "b": 0.0}
    assert majority_baseline([record_of()]) is None


def test_analyse_carries_both_baselines():
    central, parallel = _pair()
    xgb = [replace(r, model="xgboost") for r in central]
    res = analyse([*central, *parallel, *xgb], workloads={}, host=None, cores=2)
    base = res.baselines
    assert base.majority.accuracy == 0.5
    assert base.flow_stats.model == "xgboost"
    assert base.flow_stats.accuracy.mean == pytest.approx(0.9)
    assert res.models["m"].above_majority is True


def test_headline_inverts_slowdowns_and_skips_oversubscribed():
    central, parallel = _pair(t_parallel=20.0)
    slow = _compare(central, parallel)
    over = replace(slow, n_workers=4, oversubscribed=True)
    text = headline("cnn", _entry({"2": slow, "4": over}), 0.01)
    assert text.startswith("2 workers made cnn's epochs 2.00x slower (95 % CI ")
    assert headline("cnn", _entry({"4": over}), 0.01) is None


def test_contended_runs_count_for_accuracy_but_not_for_speedup():
    # Prepare: seed 1's parallel run was slowed by other processes (flagged contended).
    central = [_rec(s, 1, 0.9, 10.0) for s in (0, 1, 2)]
    parallel = [
        _rec(0, 2, 0.9, 5.0),
        replace(_rec(1, 2, 0.9, 20.0), contended=True),
        _rec(2, 2, 0.9, 5.0),
    ]
    # Execute
    res = compare_to_central(central, parallel, 2, margin=0.01, alpha=0.05)
    group = summarise_group(parallel)
    # Assert
    assert res.seeds == [0, 2] and res.speedup.mean == pytest.approx(2.0)
    assert res.accuracy.n == 3
    assert group.n_contended == 1
    assert group.epoch_time_s.mean == pytest.approx(5.0)
    assert group.accuracy.n == 3


def test_group_score_intervals_are_clipped():
    runs = [_rec(s, 1, a, 1.0) for s, a in enumerate((0.99, 1.0, 1.0))]
    g = summarise_group(runs)
    assert g.accuracy.high == 1.0 and not math.isnan(g.accuracy.low)


def test_unmetered_runs_give_no_speedup_claim():
    # Runs whose contention was never measured are not known to be undisturbed.
    central, parallel = _pair(foreign_cpu_share=math.nan)
    v = _compare(central, parallel)
    assert v.claims.speedup_withheld == ["contention not measured"]
    assert v.timing_contended is True


def test_not_shown_verdict_names_the_seeds_tost_would_need():
    # Prepare: paired differences of sd 2 pt (as the LSTM's on nDPI8) around 0.
    central, parallel = _pair(5, dp_shift=[-0.02, 0.02, 0.0, -0.02, 0.02])
    # Execute
    v = _compare(central, parallel)
    text = headline("m", _entry({"2": v}), 0.01)
    # Assert: the seeds follow from the observed spread, and the sentence says so.
    need = seeds_for_tost(v.accuracy.sd_diff, 0.01)
    assert v.claims.accuracy_verdict == NOT_SHOWN
    assert v.accuracy.seeds_for_power == need and 30 <= need <= 45
    assert f"needs about {need} paired seeds for 80 % power" in text
    # An equivalent comparison's headline does not ask for more seeds.
    c2, p2 = _pair(5)
    assert "paired seeds for" not in headline("m", _entry({"2": _compare(c2, p2)}), 0.01)


def test_a_hooks_epoch_time_ratio_is_flagged_when_the_plain_runs_were_disturbed():
    # Prepare: 3 seeds of plain all-reduce, every one contended, and 3 clean fp16 seeds.
    runs = [
        _rec(s, 2, 0.9, 10.0, comm_hook="none", contended=True, foreign_cpu_share=0.5, epochs_run=5)
        for s in range(3)
    ] + [_rec(s, 2, 0.9, 8.0, comm_hook="fp16", contended=False, epochs_run=5) for s in range(3)]
    # Execute
    g = compare_hooks(runs, margin=0.01, alpha=0.05)["m"]["2"]
    # Assert: the hook's own timings are clean, but the ratio rests on disturbed plain
    # runs (all seeds used, as no seed is clean on both sides), so it is flagged.
    assert g["fp16"].timing_contended is False and g["none"].timing_contended is True
    vs = g["fp16"].vs_plain
    assert vs.timing_contended is True and vs.seeds == [0, 1, 2]
    assert vs.epoch_time_ratio.mean == pytest.approx(0.8)
