"""The demo's one-page overview: the advice rules and the files it writes."""

from __future__ import annotations

import json

from flowsplit.report.overview import advise, write_overview

DP = [
    {"model": "cnn", "accuracy": 0.95, "macro_f1": 0.94, "workers": 2, "speedup": 1.7,
     "timing_reliable": True, "verdict": "equivalent", "tost_p": 0.004, "diff_pts": 0.1},
    {"model": "lstm", "accuracy": 0.97, "macro_f1": 0.96, "workers": 2, "speedup": 1.1,
     "timing_reliable": True, "verdict": "equivalent", "tost_p": 0.01, "diff_pts": 0.0},
    {"model": "xgboost", "accuracy": 0.90, "macro_f1": 0.89, "workers": 2, "speedup": 1.9,
     "timing_reliable": False, "verdict": "not shown equivalent", "tost_p": 0.3, "diff_pts": -2},
]  # fmt: skip
SFL = [
    {"scheme": "hsfl", "cuts": "1,2", "accuracy": 0.900, "delay_s": 50.0, "bytes": 4e8,
     "acc_vs_hsfl_pts": None, "delay_vs_hsfl": None, "bytes_vs_hsfl": None},
    {"scheme": "acc-aware", "cuts": "1,3", "accuracy": 0.895, "delay_s": 30.0, "bytes": 3e8,
     "acc_vs_hsfl_pts": -0.5, "delay_vs_hsfl": -0.4, "bytes_vs_hsfl": -0.25},
    {"scheme": "delay", "cuts": "2,2", "accuracy": 0.850, "delay_s": 10.0, "bytes": 1e8,
     "acc_vs_hsfl_pts": -5.0, "delay_vs_hsfl": -0.8, "bytes_vs_hsfl": -0.75},
]  # fmt: skip


def test_advice_follows_the_stated_rules():
    advice = advise(DP, SFL)
    # The best centralised macro-F1 is lstm's, not the best speedup's.
    assert advice[0].startswith("Use lstm")
    # Only cnn is both >= 1.2x faster and equivalent; lstm is too slow, xgboost not equivalent.
    pays = [a for a in advice if a.startswith("Data parallelism pays")]
    assert len(pays) == 1 and "cnn" in pays[0] and "1.70x" in pays[0]
    # Split learning: the fastest scheme within 1 pt of the best accuracy (delay is 5 pt off).
    sfl = [a for a in advice if a.startswith("For split learning")]
    assert len(sfl) == 1 and "acc-aware" in sfl[0] and "-40 % delay" in sfl[0]


def test_advice_says_so_when_no_model_gains_from_data_parallelism():
    slow = [dict(r, speedup=1.05) for r in DP]
    advice = advise(slow, [])
    assert any(a.startswith("No model was both faster") for a in advice)
    assert not any(a.startswith("For split learning") for a in advice)


def test_overview_writes_three_files_escaping_capture_names(tmp_path):
    # Prepare: a class name straight from a capture folder, and a split-learning study only.
    manifest = {"n_flows": 10, "classes": ["<script>x</script>", "dns"],
                "splits": {"train": 6, "val": 2, "test": 2}, "split_by": "file"}  # fmt: skip
    sfl_dir = tmp_path / "sfl"
    sfl_dir.mkdir()
    res = {"schemes": {"hsfl": {"cuts": [[1, 2]], "final_accuracy": {"mean": 0.9},
                                "delay_total_s": {"mean": 12.0}, "bytes_total": {"mean": 2e6}}},
           "vs_hsfl": {}}  # fmt: skip
    (sfl_dir / "results.json").write_text(json.dumps(res))
    # Execute
    page = write_overview(tmp_path / "out", manifest=manifest, dp_dir=None, sfl_dir=sfl_dir,
                          timings={"prepare": 1.0})  # fmt: skip
    # Assert
    html = page.read_text()
    assert "<script>x</script>" not in html and "&lt;script&gt;" in html
    assert 'href="../sfl/report.html"' in html
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert doc["data_parallel"] == [] and doc["split_learning"][0]["scheme"] == "hsfl"
    assert doc["advice"][0].startswith("For split learning use hsfl (cuts 1,2)")
    assert (tmp_path / "out" / "report.md").read_text().count("not run") == 1


def test_rows_read_nulls_as_nan_and_skip_oversubscribed_worker_counts():
    import math

    from flowsplit.report.overview import data_parallel_rows

    res = {"config": {"margin": 0.02}, "analysis": {"models": {"cnn": {
        "by_workers": {"1": {"accuracy": {"mean": 0.9}, "macro_f1": {"mean": 0.8}}},
        "vs_central": {
            "2": {"speedup": {"mean": 1.8}, "accuracy": {"verdict": "equivalent", "tost_p": None,
                                                         "diff": {"mean": None}}},
            "4": {"speedup": {"mean": 2.5}, "oversubscribed": True, "accuracy": {}},
        }}}}}  # fmt: skip
    (row,) = data_parallel_rows(res)
    assert row["workers"] == 2 and row["speedup"] == 1.8 and row["margin_pts"] == 2.0
    assert math.isnan(row["tost_p"]) and math.isnan(row["diff_pts"])
