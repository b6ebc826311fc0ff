"""One flat record per finished run, read from the engines' ``RUN/metrics.json``.

The engines write one schema (:class:`flowsplit.result.RunResult`, read by
:func:`~flowsplit.result.read_result`); this module reduces it to what the
comparison needs: one number per measurement, the test predictions for McNemar, and the
facts the scaling model needs about the workload. A record is a :class:`RunRecord`:
every key is always present (a value the engine did not measure is NaN, never a silent
0), so readers index it and never need a default.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flowsplit.config_args import fields_of
from flowsplit.errors import InputError
from flowsplit.experiments.dp.layout import PLAIN_HOOK
from flowsplit.experiments.dp.result import read_cell_info
from flowsplit.experiments.dp.scaling import Workload
from flowsplit.models.registry import build_model, model_options
from flowsplit.result import METRICS_NAME, RunResult, read_result

CONTENDED_SHARE = 0.15
"""A run during which other processes used more than this share of the CPUs is
"contended": its accuracy counts, its timing is kept out of speedups and the fit."""

# Kept per run in results.json beyond the CSV columns (lists and dicts).
JSON_EXTRA = (
    "epoch_times_s",
    "loss_per_epoch",
    "val_macro_f1_per_epoch",
    "per_class_f1",
    "confusion_matrix",
)

IDENTITY = ("model", "view", "engine", "workers", "threads_per_worker", "seed")
"""What identifies a run: the cell it is of, and how it ran."""

# Columns of results.csv, in order: the run's identity, then time, then quality.
CSV_COLUMNS = (
    *IDENTITY,
    "comm_hook",
    "oversubscribed",
    "epochs_run",
    "epoch_time_s",
    "train_time_s",
    "wall_time_s",
    "samples_per_s",
    "comm_time_s",
    "comm_share",
    "comm_bytes",
    "exposed_comm_s",
    "data_time_s",
    "peak_rss_mb",
    "accuracy",
    "macro_f1",
    "n_train",
    "n_test",
    "foreign_cpu_share",
    "cpu_obtained",
    "contended",
    "run_dir",
)


@dataclass
class RunRecord:
    """One finished training run, flattened (a row of ``results.csv`` plus the lists)."""

    model: str
    view: str
    engine: str
    workers: int
    threads_per_worker: int
    seed: int
    comm_hook: str
    """How DDP all-reduced gradients (``none``: plain float32; also every run without DDP)."""
    oversubscribed: bool
    epochs_run: int
    epoch_time_s: float
    """Typical epoch time (see :func:`typical_epoch_time`)."""
    train_time_s: float
    """Sum of the epoch times."""
    wall_time_s: float
    samples_per_s: float
    comm_time_s: float
    comm_share: float
    """comm_time_s / train_time_s (NaN without training time)."""
    comm_bytes: int
    exposed_comm_s: float
    """All-reduce time not hidden behind backward, all epochs (NaN: not measured)."""
    data_time_s: float
    peak_rss_mb: float
    """Largest peak resident memory over the workers (NaN when none was measured)."""
    accuracy: float
    macro_f1: float
    n_train: int
    n_test: int
    run_dir: str
    y_true: list[int]
    y_pred: list[int]
    test_flow_ids: list[str]
    classes: list[str]
    confusion_matrix: list[list[int]]
    per_class_f1: dict[str, float | None]
    config: dict[str, Any]
    extra: dict[str, Any]
    env: dict[str, Any]
    epoch_times_s: list[float | None]
    loss_per_epoch: list[float | None]
    val_macro_f1_per_epoch: list[float | None]
    foreign_cpu_share: float
    """Share of the CPUs other processes used during the run (NaN: not metered)."""
    cpu_obtained: float
    """CPU the run's processes got per thread they wanted (1.0 = never waited; NaN: unknown)."""
    contended: bool


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


AS_RUN = (
    *IDENTITY,
    "n_train",
    "n_test",
    "confusion_matrix",
    "per_class_f1",
    "config",
    "extra",
    "env",
)
"""The fields a record takes from its run's :class:`RunResult` as they are."""
FLOATS = ("wall_time_s", "samples_per_s", "data_time_s", "accuracy", "macro_f1")
"""... as floats."""
LISTS = ("test_flow_ids", "classes", "loss_per_epoch", "val_macro_f1_per_epoch")
"""... as lists."""


def record_from_metrics(metrics: Mapping[str, Any], *, cores: int, run_dir: str = "") -> RunRecord:
    """Flatten one ``metrics.json`` dict (checked against the schema) into a record."""
    return record_from_result(RunResult.from_dict(dict(metrics)), cores=cores, run_dir=run_dir)


def record_from_result(r: RunResult, *, cores: int, run_dir: str = "") -> RunRecord:
    """Flatten one training :class:`RunResult` into a comparison record (no CPU metering)."""
    if r.kind != "train":
        raise ValueError(f"the result of a {r.kind!r} run, not of a training run")
    assert r.epoch_times_s is not None and r.comm_time_s is not None  # kind "train" has them
    epochs = list(r.epoch_times_s)
    train_time = float(sum(t for t in epochs if t is not None))
    comm = float(r.comm_time_s)
    return RunRecord(
        **fields_of(r, AS_RUN),
        **{name: float(getattr(r, name)) for name in FLOATS},
        **{name: list(getattr(r, name)) for name in LISTS},
        comm_hook=r.comm_hook or PLAIN_HOOK,
        oversubscribed=is_oversubscribed(r.workers, r.threads_per_worker, cores),
        epochs_run=int(r.epochs_run),
        epoch_time_s=typical_epoch_time(epochs),
        train_time_s=train_time,
        comm_time_s=comm,
        comm_share=comm / train_time if train_time > 0 else math.nan,
        comm_bytes=int(r.comm_bytes),
        exposed_comm_s=math.nan if r.exposed_comm_s is None else float(r.exposed_comm_s),
        peak_rss_mb=max(r.peak_rss_mb) if r.peak_rss_mb else math.nan,
        run_dir=run_dir,
        # Not in the CSV: kept for McNemar, confusion matrices and the scaling model.
        y_true=list(r.test_labels),
        y_pred=list(r.test_predictions),
        epoch_times_s=epochs,
        # Set by read_record from compare_cell.json; unknown here.
        foreign_cpu_share=math.nan,
        cpu_obtained=math.nan,
        contended=False,
    )


def read_record(run_dir: str | Path, *, cores: int) -> RunRecord | None:
    """The record of a finished run; None when ``run_dir`` has no ``metrics.json`` yet.

    A ``metrics.json`` that is there but not a training :class:`RunResult` (another schema
    version, a missing or mistyped field, an SFL run) is an :class:`InputError` naming it:
    a finished run must never look unfinished and be run again.
    """
    if not (Path(run_dir) / METRICS_NAME).is_file():
        return None
    result = read_result(run_dir)
    try:
        rec = record_from_result(result, cores=cores, run_dir=str(run_dir))
    except ValueError as exc:
        raise InputError(Path(run_dir) / METRICS_NAME, str(exc)) from None
    info = read_cell_info(run_dir)  # None: not made by compare, or before the meter
    c = info.contention if info is not None else None
    rec.foreign_cpu_share = c.foreign_share if c else math.nan
    rec.cpu_obtained = c.cpu_obtained(rec.workers, rec.threads_per_worker) if c else math.nan
    rec.contended = bool(rec.foreign_cpu_share > CONTENDED_SHARE)
    return rec


def workload_from_records(records: list[RunRecord], dataset=None) -> Workload | None:
    """The scaling model's view of one model's runs (all runs share the workload).

    DDP: gradient bytes per step from the parameter count (float32), the global batch
    and the training-set size. XGBoost: features, bins, depth, rounds per "epoch"
    (one, since an XGBoost epoch is a round) and one tree per class.
    """
    if not records:
        return None
    r = records[0]
    cfg = r.config
    if r.engine == "xgboost-dask" or r.model == "xgboost":
        # The options the booster was built with: the model's defaults, then the run's.
        opts = {**model_options("xgboost"), **cfg["model_options"]}
        max_bin = int(opts["max_bin"])
        n_features, n_bins = _features_and_bins(dataset, r.view, max_bin)
        # The engine counts the histograms its trees really built (bytes_are_estimate):
        # per round, from the data-parallel runs.
        per_round = [
            rec.comm_bytes / rec.epochs_run
            for rec in records
            if rec.workers > 1 and rec.comm_bytes and rec.epochs_run
        ]
        return Workload(
            r.model,
            n_samples=r.n_train,
            kind="xgboost",
            n_features=n_features,
            n_bins=n_bins,
            max_depth=int(opts["max_depth"]),
            n_rounds=1,
            trees_per_round=max(1, len(r.classes)),
            hist_bytes_per_round=float(np.median(per_round)) if per_round else 0.0,
        )
    n_params = _param_count(r, dataset)
    if n_params is None:
        return None
    return Workload(
        r.model,
        n_samples=r.n_train,
        kind="ddp",
        param_bytes=4 * n_params,
        batch_size=int(cfg["batch_size"]),
        # The engines keep the global batch fixed unless told to scale it.
        global_batch=not bool(cfg["scale_lr"]),
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


def _param_count(record: RunRecord, dataset) -> int | None:
    """Trainable parameters: from the engine if it says, else by building the model."""
    n_params = record.extra.get("n_params")  # extra: engine-specific, absent for XGBoost
    if isinstance(n_params, int):
        return n_params
    if dataset is None:
        return None
    try:
        view = record.view
        model = build_model(
            record.model,
            view=view,
            input_shape=dataset.view_shape(view),
            n_classes=dataset.n_classes,
            **record.config["model_options"],
        )
        return sum(p.numel() for p in model.parameters() if p.requires_grad)
    except Exception:  # noqa: BLE001 - without a count the scaling model is skipped, not fatal
        return None
