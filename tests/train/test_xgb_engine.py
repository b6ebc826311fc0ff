"""XGBoost engine: one process, and XGBoost's Dask integration on 2 local workers."""

from __future__ import annotations

import numpy as np
import pytest

from flowsplit.cli import main as cli_main
from flowsplit.data.store import load_dataset
from flowsplit.models.xgb import XGBoostClassifier
from flowsplit.result import RunResult
from flowsplit.train.metrics import macro_f1
from tests.train.synth import write_synthetic

ARGS = ["--model", "xgboost", "--boost-rounds", "40", "--threads", "1", "-q"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    # 1500 flows: 300 test flows, so one point of accuracy is three flows.
    return write_synthetic(tmp_path_factory.mktemp("xgb") / "ds", n=1500, n_classes=3)


def test_single_process_run_measures_every_round(data, tmp_path):
    # Execute
    assert cli_main(["train", str(data), "-o", str(tmp_path / "run"), *ARGS]) == 0
    # Assert
    r = RunResult.from_json(tmp_path / "run")
    assert (r.engine, r.workers, r.view, r.comm_bytes, r.comm_time_s) == (
        "centralised",
        1,
        "stats",
        0,
        0.0,
    )
    assert len(r.epoch_times_s) == len(r.loss_per_epoch) == len(r.val_macro_f1_per_epoch)
    assert r.epochs_run == len(r.epoch_times_s) <= 40 and r.accuracy > 0.7
    # The per-round validation F1 (from summed per-round margins) matches direct prediction.
    est = XGBoostClassifier.load_model(tmp_path / "run" / "model.ubj")
    x_val, y_val = load_dataset(data).xy("stats", "val")
    for k in (1, r.epochs_run // 2, r.epochs_run):
        direct = macro_f1(y_val, est.predict(x_val, n_rounds=k), 3)
        assert r.val_macro_f1_per_epoch[k - 1] == pytest.approx(direct)


@pytest.mark.slow
def test_two_dask_workers_match_one_process_within_a_point(data, tmp_path):
    # Execute
    # Balanced class weights: the weights travel with each worker's partition too.
    both = [*ARGS, "--class-weight", "balanced"]
    assert cli_main(["train", str(data), "-o", str(tmp_path / "one"), *both]) == 0
    assert cli_main(["train", str(data), "-o", str(tmp_path / "two"), *both, "--workers", "2"]) == 0
    # Assert
    one, two = RunResult.from_json(tmp_path / "one"), RunResult.from_json(tmp_path / "two")
    assert (two.engine, two.workers, two.backend, len(two.peak_rss_mb)) == (
        "xgboost-dask",
        2,
        "dask",
        2,
    )
    assert abs(one.accuracy - two.accuracy) <= 0.01, (one.accuracy, two.accuracy)
    assert two.comm_bytes > 0 and two.comm_time_s >= 0
    extra = two.extra
    assert extra["sync_time_is_estimate"] and 0 <= extra["sync_fraction"] <= 1
    # Communication is the calibrated share of the rounds' time, never more than they took.
    assert two.comm_time_s == pytest.approx(extra["sync_fraction"] * sum(two.epoch_times_s))
    assert len(extra["calibration_round_times_s"]) == min(20, two.epochs_run)
    assert np.all(np.asarray(two.epoch_times_s) > 0)


def test_xgboost_cannot_resume_and_needs_stats(data, tmp_path, capsys):
    from flowsplit.data.store import write_dataset

    ds = load_dataset(data)
    no_stats = write_dataset(
        tmp_path / "bytes-only",
        meta=ds.meta,
        classes=ds.classes,
        views={"bytes": np.asarray(ds.view("bytes"))},
    )
    assert cli_main(["train", str(no_stats), "-o", str(tmp_path / "r"), *ARGS]) == 2
    assert "xgboost needs one of the views stats" in capsys.readouterr().err


@pytest.mark.slow
def test_an_existing_dask_cluster_is_used_through_its_address(data, tmp_path):
    # Prepare: a one-worker cluster on loopback, started outside flowsplit. Its worker is a
    # thread of this process (no second interpreter to start), reached over TCP all the same.
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tcp://",
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",  # None still binds :8787 on every interface
    ) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        address = cluster.scheduler_address
        # Execute
        rc = cli_main(
            ["train", str(data), "-o", str(tmp_path / "run"), *ARGS, "--dask-scheduler", address]
        )
    # Assert: trained on that cluster's single worker, through the Dask engine
    assert rc == 0
    r = RunResult.from_json(tmp_path / "run")
    assert (r.engine, r.workers, r.backend) == ("xgboost-dask", 1, "dask")
    assert r.accuracy > 0.7
