"""Analysis of run records: pairing by seed, verdicts, headlines."""

from __future__ import annotations

import math

import pytest

from flowsplit.experiments.analysis import compare_to_central, headline, summarise_group


def _rec(seed, workers, acc, t, pred=None):
    return {"model": "m", "seed": seed, "workers": workers, "accuracy": acc, "macro_f1": acc,
            "epoch_time_s": t, "oversubscribed": False, "y_true": [0, 1, 1, 0],
            "y_pred": pred or [0, 1, 1, 0]}  # fmt: skip


def test_compare_to_central_pairs_by_seed_and_ignores_unpaired_runs():
    # Prepare: seed 9 exists only centralised; times halve exactly.
    central = [_rec(s, 1, 0.90 + 0.001 * s, 10.0) for s in (0, 1, 2, 9)]
    parallel = [_rec(s, 2, 0.90 + 0.001 * s + d, 5.0)
                for s, d in zip((2, 0, 1), (0.001, -0.001, 0.0), strict=True)]  # fmt: skip
    # Execute
    res = compare_to_central(central, parallel, 2, margin=0.01, alpha=0.05)
    # Assert
    assert res["seeds"] == [0, 1, 2]
    assert res["accuracy"]["n"] == 3
    assert res["accuracy"]["diff"]["mean"] == pytest.approx(0.0, abs=1e-12)
    assert res["speedup"]["mean"] == pytest.approx(2.0)
    assert res["efficiency"]["mean"] == pytest.approx(1.0)
    assert len(res["mcnemar"]) == 3 and res["mcnemar"][0]["p"] == 1.0


def test_headline_reads_like_the_brief():
    entry = {"vs_central": {"2": {
        "n_workers": 2, "oversubscribed": False,
        "speedup": {"mean": 1.9, "low": 1.8, "high": 2.0},
        "accuracy": {"verdict": "equivalent", "tost_p": 0.01, "t_p": 0.5, "note": "",
                     "diff": {"mean": 0.001}}}}}  # fmt: skip
    text = headline("ConvLSTM", entry, 0.01)
    assert text == (
        "2 workers cut ConvLSTM's epoch time 1.90x (95 % CI 1.80-2.00x); "
        "accuracy equivalent within +-1 pt (TOST p = 0.010)."
    )


def test_headline_inverts_slowdowns_and_skips_oversubscribed():
    slow = {"n_workers": 2, "oversubscribed": False,
            "speedup": {"mean": 0.5, "low": 0.25, "high": 1.0},
            "accuracy": {"verdict": "not shown equivalent", "tost_p": 0.3, "t_p": 0.4,
                         "note": "", "diff": {"mean": -0.02}}}  # fmt: skip
    over = {**slow, "n_workers": 4, "oversubscribed": True}
    text = headline("cnn", {"vs_central": {"2": slow, "4": over}}, 0.01)
    assert text.startswith("2 workers made cnn's epochs 2.00x slower (95 % CI 1.00-4.00x)")
    assert headline("cnn", {"vs_central": {"4": over}}, 0.01) is None
    assert not math.isnan(slow["speedup"]["mean"])


def test_contended_runs_count_for_accuracy_but_not_for_speedup():
    # Prepare: seed 1's parallel run was slowed by other processes (flagged contended).
    central = [_rec(s, 1, 0.9, 10.0) for s in (0, 1, 2)]
    parallel = [_rec(0, 2, 0.9, 5.0), {**_rec(1, 2, 0.9, 20.0), "contended": True},
                _rec(2, 2, 0.9, 5.0)]  # fmt: skip
    # Execute
    res = compare_to_central(central, parallel, 2, margin=0.01, alpha=0.05)
    group = summarise_group(parallel)
    # Assert
    assert res["seeds"] == [0, 2] and res["speedup"]["mean"] == pytest.approx(2.0)
    assert res["accuracy"]["n"] == 3
    assert group["n_contended"] == 1
    assert group["epoch_time_s"]["mean"] == pytest.approx(5.0)
    assert group["accuracy"]["n"] == 3
