"""Run records: epoch-time summary, oversubscription, the workload the scaling model sees."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from flowsplit.experiments.dp.compare import Cell
from flowsplit.experiments.dp.records import (
    is_oversubscribed,
    record_from_metrics,
    typical_epoch_time,
    workload_from_records,
)
from tests.experiments.helpers import fake_metrics


def test_typical_epoch_time_drops_the_warm_up_epoch_only_from_three_on():
    assert typical_epoch_time([9.0, 2.0, 4.0]) == pytest.approx(3.0)
    assert typical_epoch_time([9.0, 3.0]) == pytest.approx(6.0)
    assert math.isnan(typical_epoch_time([]))


def test_oversubscription_counts_threads():
    assert not is_oversubscribed(2, 1, 2)
    assert is_oversubscribed(4, 1, 2)
    assert is_oversubscribed(2, 2, 2)
    assert not is_oversubscribed(64, 1, 0)  # unknown cores: never claimed


def test_record_from_metrics_flattens_the_engine_schema():
    # Prepare
    m = fake_metrics(Cell("cnn", 2, 0))
    # Execute
    rec = record_from_metrics(m, cores=2, run_dir="r")
    # Assert
    assert rec.workers == 2 and not rec.oversubscribed
    assert rec.train_time_s == pytest.approx(sum(m["epoch_times_s"]))
    assert rec.comm_share == pytest.approx(m["comm_time_s"] / sum(m["epoch_times_s"]))
    assert rec.peak_rss_mb == 300.0
    assert rec.y_pred == m["test_predictions"]


def test_workload_from_records():
    # DDP: parameters from the engine's extra, 4 bytes each; global batch unless scale_lr.
    rec = record_from_metrics(fake_metrics(Cell("cnn", 1, 0)), cores=2)
    wl = workload_from_records([rec])
    assert (wl.kind, wl.param_bytes, wl.batch_size, wl.global_batch) == ("ddp", 400_000, 64, True)
    # XGBoost: one round per "epoch", one tree per class; no dataset -> 0 features.
    xrec = replace(
        rec, model="xgboost", engine="xgboost-dask", config={"model_options": {"max_depth": 4}}
    )
    xw = workload_from_records([xrec])
    assert (xw.kind, xw.max_depth, xw.n_rounds, xw.trees_per_round) == ("xgboost", 4, 1, 3)


def test_xgboost_workload_counts_bins_and_histogram_bytes(tmp_path):
    # Prepare: 4 statistics with 60 distinct training values each -> 60 bins < max_bin;
    # the 2-worker run counted 1.2 MB of histograms over 4 rounds.
    from flowsplit.data.store import load_dataset
    from tests.experiments.helpers import make_dataset

    ds = load_dataset(make_dataset(tmp_path / "ds"))
    base = record_from_metrics(fake_metrics(Cell("xgboost", 1, 0)), cores=2)
    central = replace(base, engine="centralised", view="stats", comm_bytes=0)
    dist = replace(central, workers=2, engine="xgboost-dask", comm_bytes=1_200_000, epochs_run=4)
    # Execute
    wl = workload_from_records([central, dist], ds)
    # Assert
    assert (wl.n_features, wl.n_bins) == (4, 60)
    assert wl.hist_bytes_per_round == 300_000
