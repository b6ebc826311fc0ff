"""One flat record per finished run, read from the engines' ``RUN/metrics.json``.

The engines write one schema (:class:`flowsplit.train.result.RunResult`); this module
reduces it to what the comparison needs: one number per measurement, the test
predictions for McNemar, and the facts the scaling model needs about the workload.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from flowsplit.experiments.scaling import Workload

CELL_INFO = "compare_cell.json"  # written beside metrics.json by `flowsplit compare`
CONTENDED_SHARE = 0.15
"""A run during which other processes used more than this share of the CPUs is
"contended": its accuracy counts, its timing is kept out of speedups and the fit."""

# Kept per run in results.json beyond the CSV columns (lists and dicts).
JSON_EXTRA = (
    "epoch_times_s", "loss_per_epoch", "val_macro_f1_per_epoch", "per_class_f1",
    "confusion_matrix",
)  # fmt: skip

# Columns of results.csv, in order: the run's identity, then time, then quality.
CSV_COLUMNS = (
    "model", "view", "engine", "workers", "threads_per_worker", "seed", "oversubscribed",
    "epochs_run", "epoch_time_s", "train_time_s", "wall_time_s", "samples_per_s",
    "comm_time_s", "comm_share", "comm_bytes", "data_time_s", "peak_rss_mb",
    "accuracy", "macro_f1", "n_train", "n_test", "foreign_cpu_share", "cpu_obtained", "contended",
    "run_dir",
)  # fmt: skip


def typical_epoch_time(epoch_times: list[float]) -> float:
    """Mean epoch time, leaving out the first epoch when there are at least three.

    The first epoch pays one-off costs (allocator warm-up, DDP bucket rebuild, XGBoost's
    quantile sketch) that a long run amortises; with fewer epochs nothing is dropped.
    """
    times = [float(t) for t in epoch_times if t is not None]
    if not times:
        return math.nan
    if len(times) >= 3:
        times = times[1:]
    return sum(times) / len(times)


def is_oversubscribed(workers: int, threads_per_worker: int, cores: int) -> bool:
    """True when the worker threads outnumber the cores, so workers time-share them."""
    return cores > 0 and workers * max(1, threads_per_worker) > cores


def record_from_metrics(metrics: Mapping[str, Any], *, cores: int, run_dir: str = "") -> dict:
    """Flatten one ``metrics.json`` dict into a comparison record."""
    epochs = list(metrics.get("epoch_times_s") or [])
    train_time = float(sum(t for t in epochs if t is not None))
    comm = float(metrics.get("comm_time_s") or 0.0)
    rss = metrics.get("peak_rss_mb") or []
    workers = int(metrics["workers"])
    threads = int(metrics.get("threads_per_worker") or 1)
    return {
        "model": str(metrics["model"]),
        "view": metrics.get("view"),
        "engine": metrics.get("engine"),
        "workers": workers,
        "threads_per_worker": threads,
        "seed": int(metrics["seed"]),
        "oversubscribed": is_oversubscribed(workers, threads, cores),
        "epochs_run": int(metrics.get("epochs_run") or len(epochs)),
        "epoch_time_s": typical_epoch_time(epochs),
        "train_time_s": train_time,
        "wall_time_s": float(metrics.get("wall_time_s") or math.nan),
        "samples_per_s": float(metrics.get("samples_per_s") or math.nan),
        "comm_time_s": comm,
        "comm_share": comm / train_time if train_time > 0 else math.nan,
        "comm_bytes": int(metrics.get("comm_bytes") or 0),
        "data_time_s": float(metrics.get("data_time_s") or 0.0),
        "peak_rss_mb": max(rss) if isinstance(rss, list) and rss else rss or math.nan,
        "accuracy": float(metrics["accuracy"]),
        "macro_f1": float(metrics["macro_f1"]),
        "n_train": int(metrics.get("n_train") or 0),
        "n_test": int(metrics.get("n_test") or 0),
        "run_dir": run_dir,
        # Not in the CSV: kept for McNemar, confusion matrices and the scaling model.
        "y_true": metrics.get("test_labels"),
        "y_pred": metrics.get("test_predictions"),
        "test_flow_ids": metrics.get("test_flow_ids"),
        "classes": metrics.get("classes") or [],
        "confusion_matrix": metrics.get("confusion_matrix"),
        "per_class_f1": metrics.get("per_class_f1") or {},
        "config": metrics.get("config") or {},
        "extra": metrics.get("extra") or {},
        "env": metrics.get("env") or {},
        "epoch_times_s": epochs,
        "loss_per_epoch": metrics.get("loss_per_epoch") or [],
        "val_macro_f1_per_epoch": metrics.get("val_macro_f1_per_epoch") or [],
    }


def read_record(run_dir: str | Path, *, cores: int) -> dict | None:
    """The record of a finished run, or None when ``run_dir`` has no readable metrics."""
    path = Path(run_dir) / "metrics.json"
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
        rec = record_from_metrics(metrics, cores=cores, run_dir=str(run_dir))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    share = obtained = math.nan
    try:
        info = json.loads((Path(run_dir) / CELL_INFO).read_text(encoding="utf-8"))
        c = info["contention"]
        share = float(c["foreign_share"])
        # CPU the run's processes got, per thread it wanted: 1.0 = never waited for a core.
        wanted = c["wall_s"] * rec["workers"] * rec["threads_per_worker"]
        obtained = float(c["own_cpu_s"]) / wanted if wanted > 0 else math.nan
    except (OSError, ValueError, KeyError, TypeError):
        pass  # run not made by compare, or made before the meter existed: unknown
    rec["foreign_cpu_share"] = share
    rec["cpu_obtained"] = obtained
    rec["contended"] = bool(share > CONTENDED_SHARE)
    return rec


def workload_from_records(records: list[Mapping], dataset=None) -> Workload | None:
    """The scaling model's view of one model's runs (all runs share the workload).

    DDP: gradient bytes per step from the parameter count (float32), the global batch
    and the training-set size. XGBoost: features, bins, depth, rounds per "epoch"
    (one, since an XGBoost epoch is a round) and one tree per class.
    """
    if not records:
        return None
    r = records[0]
    cfg = r.get("config") or {}
    n_train = int(r.get("n_train") or 0)
    if r.get("engine") == "xgboost-dask" or r["model"] == "xgboost":
        opts = cfg.get("model_options") or {}
        max_bin = int(opts.get("max_bin", 256))
        n_features, n_bins = _features_and_bins(dataset, r.get("view") or "stats", max_bin)
        # The engine counts the histograms its trees really built (bytes_are_estimate):
        # per round, from the data-parallel runs.
        per_round = [
            rec["comm_bytes"] / rec["epochs_run"]
            for rec in records
            if rec["workers"] > 1 and rec.get("comm_bytes") and rec.get("epochs_run")
        ]
        return Workload(
            r["model"],
            n_samples=n_train,
            kind="xgboost",
            n_features=n_features,
            n_bins=n_bins,
            max_depth=int(opts.get("max_depth", 6)),
            n_rounds=1,
            trees_per_round=max(1, len(r.get("classes") or [])),
            hist_bytes_per_round=float(np.median(per_round)) if per_round else 0.0,
        )
    n_params = _param_count(r, dataset)
    if n_params is None:
        return None
    return Workload(
        r["model"],
        n_samples=n_train,
        kind="ddp",
        param_bytes=4 * n_params,
        batch_size=int(cfg.get("batch_size", 64)),
        # The engines keep the global batch fixed unless told to scale it.
        global_batch=not bool(cfg.get("scale_lr", False)),
    )


def _features_and_bins(dataset, view: str, max_bin: int) -> tuple[int, int]:
    """Feature columns and the mean bins per feature XGBoost can use (a column with
    fewer distinct training values than ``max_bin`` gets one bin per value)."""
    if dataset is None or not dataset.has_view(view):
        return 0, max_bin
    x = np.asarray(dataset.view(view)[dataset.split_indices("train")])
    x = x.reshape(len(x), -1)
    if x.shape[1] == 0:
        return 0, max_bin
    bins = [min(max_bin, len(np.unique(x[:, j]))) for j in range(x.shape[1])]
    return int(x.shape[1]), max(1, round(sum(bins) / len(bins)))


def _param_count(record: Mapping, dataset) -> int | None:
    """Trainable parameters: from the engine if it says, else by building the model."""
    extra = record.get("extra") or {}
    for key in ("n_params", "n_parameters", "parameters"):
        if isinstance(extra.get(key), int):
            return int(extra[key])
    if dataset is None:
        return None
    try:
        from flowsplit.models.registry import build_model

        view = record.get("view")
        model = build_model(
            record["model"],
            view=view,
            input_shape=dataset.view_shape(view),
            n_classes=dataset.n_classes,
            **((record.get("config") or {}).get("model_options") or {}),
        )
        return sum(p.numel() for p in model.parameters() if p.requires_grad)
    except Exception:  # noqa: BLE001 - without a count the scaling model is skipped, not fatal
        return None
