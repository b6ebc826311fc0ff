"""XGBoost engine: one process, or XGBoost's Dask integration on N worker processes.

``--workers N`` starts a ``dask.distributed.LocalCluster`` of N processes bound
to 127.0.0.1 (``--dask-scheduler tcp://HOST:PORT`` uses an existing cluster);
each worker holds one shuffled partition of the rows and the workers build every
tree together, all-reducing gradient histograms through XGBoost's collective.

What is measured, and how:

- **time per round**: a :class:`RoundTimer` callback (update plus the train/val
  metrics early stopping needs), on the worker whose booster comes back;
- **synchronisation time**: XGBoost exposes no timer for its collective calls, so
  it is *estimated*: the first K rounds are re-run by one worker alone on one
  worker's share of the rows (same threads, same evaluation sets), which is the
  compute a worker does per round without any communication or waiting; the
  per-round excess of the distributed run over that is synchronisation (all-reduce
  of histograms and metrics, plus waiting for the slowest worker). ``comm_time_s``
  is that mean excess times the rounds run; details in ``RunResult.extra``;
- **synchronised bytes**: *estimated* histogram payload: each tree all-reduces one
  histogram for the root and one per split (the sibling is derived by
  subtraction), each of (bins over all features) x 16 bytes (a gradient/hessian
  pair of doubles per bin); bins per feature = min(max_bin, distinct values).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import xgboost as xgb

from flowsplit.data.store import load_dataset
from flowsplit.errors import ConfigError
from flowsplit.models.registry import build_estimator
from flowsplit.models.xgb import dask_workers
from flowsplit.result import RunResult
from flowsplit.train.config import TrainConfig
from flowsplit.train.metrics import class_weights, classification_summary, macro_f1
from flowsplit.train.runs import (
    BOOSTER_NAME,
    LOG_NAME,
    METRICS_NAME,
    environment,
    resolve_view,
    write_run_config,
)
from flowsplit.util import available_cores, peak_rss_mb

log = logging.getLogger("flowsplit.train")
CALIBRATION_ROUNDS = 20


class RoundTimer(xgb.callback.TrainingCallback):
    """Seconds per boosting round, kept on the booster (it travels back from Dask workers)."""

    ATTR = "flowsplit_round_times"

    def before_training(self, model):
        self.times: list[float] = []
        return model

    def before_iteration(self, model, epoch, evals_log) -> bool:
        self._t0 = time.perf_counter()
        return False

    def after_iteration(self, model, epoch, evals_log) -> bool:
        self.times.append(time.perf_counter() - self._t0)
        return False

    def after_training(self, model):
        model.set_attr(**{self.ATTR: json.dumps(self.times)})
        return model


def _time_rounds_alone(X, y, X_val, y_val, params: dict, n_rounds: int) -> list[float]:
    """Per-round times of ``n_rounds`` rounds on these rows alone (run on one Dask worker)."""
    from distributed import get_worker

    params = {**params, "nthread": get_worker().state.nthreads}
    dtrain = xgb.DMatrix(X, label=y, nthread=params["nthread"])
    dval = xgb.DMatrix(X_val, label=y_val, nthread=params["nthread"])
    timer = RoundTimer()
    xgb.train(
        params,
        dtrain,
        n_rounds,
        evals=[(dtrain, "train"), (dval, "val")],
        verbose_eval=False,
        callbacks=[timer],
    )
    return timer.times


@contextmanager
def dask_client(cfg: TrainConfig, n_workers: int, threads: int) -> Iterator[tuple]:
    """A Dask client, and the collective config XGBoost needs, for the run."""
    from distributed import Client, LocalCluster
    from xgboost.collective import Config as CollConfig

    if cfg.dask_scheduler:
        try:
            client = Client(cfg.dask_scheduler, timeout=30)
        except OSError as exc:
            raise ConfigError(
                f"cannot reach the Dask scheduler {cfg.dask_scheduler}: {exc}"
            ) from None
        with client:
            yield client, None
        return
    # Dask's own chatter stays out of the terminal: the scheduler and nannies run in this
    # process and log there ("Worker process still alive after 4.0 seconds, killing" at
    # every close), and each worker's XGBoost prints "Task ... got rank N" to its stderr.
    # Both go to the run's log (RUN/train.log) instead; a failure still reaches the user
    # as the task's exception, and the log holds the rest.
    side_log = Path(cfg.out) / LOG_NAME
    quiet = logging.getLogger("distributed")
    saved = (quiet.level, quiet.propagate, list(quiet.handlers))
    handler = logging.FileHandler(side_log, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    for h in saved[2]:
        quiet.removeHandler(h)
    quiet.addHandler(handler)
    quiet.propagate = False
    quiet.setLevel(max(saved[0], logging.WARNING))
    try:
        cluster = LocalCluster(
            n_workers=n_workers,
            threads_per_worker=threads,
            processes=True,
            host=cfg.master_addr,
            dashboard_address="127.0.0.1:0",  # None still binds :8787 on every interface
            silence_logs=logging.ERROR,
        )
        with cluster, Client(cluster) as client:
            client.run(_stderr_to, str(side_log.resolve()))
            yield client, CollConfig(tracker_host_ip=cfg.master_addr)
    finally:
        quiet.removeHandler(handler)
        handler.close()
        for h in saved[2]:
            quiet.addHandler(h)
        quiet.setLevel(saved[0])
        quiet.propagate = saved[1]


def _stderr_to(path: str) -> None:
    """Run on each Dask worker: its file descriptor 2 (native libraries' output included)
    appends to ``path``."""
    import os
    import sys

    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 2)
    os.close(fd)


def train_xgboost(cfg: TrainConfig) -> RunResult:
    """Train, test and write one XGBoost run; returns its :class:`RunResult`."""
    t_start = time.perf_counter()
    out = Path(cfg.out)
    ds = load_dataset(cfg.dataset)
    view = resolve_view(cfg, ds)
    splits = {split: ds.xy(view, split) for split in ("train", "val", "test")}  # (X, y)
    (X_tr, y_tr), (X_val, y_val) = splits["train"], splits["val"]
    load_time = time.perf_counter() - t_start
    distributed = cfg.workers > 1 or cfg.dask_scheduler is not None
    threads = cfg.threads or max(1, available_cores() // cfg.workers)
    est = build_estimator("xgboost", **_estimator_params(cfg, ds.n_classes, threads))
    layout = {
        "world_size": cfg.workers,
        "threads_per_worker": threads,
        "device": "cpu",
        "backend": "dask" if distributed else None,
    }
    write_run_config(out, cfg, ds, view=view, layout=layout)
    weights = class_weights(y_tr, ds.n_classes, cfg.class_weight_mode)
    fit_args = {
        "sample_weight": None if weights is None else weights[y_tr],
        "eval_set": (X_val, y_val),
    }
    extra: dict = {"load_time_s": load_time, "sync_time_is_estimate": distributed}
    t_fit = time.perf_counter()
    if distributed:
        round_times, rss = _fit_on_dask(cfg, est, threads, X_tr, y_tr, fit_args, extra, layout)
    else:
        timer = RoundTimer()
        est.fit(X_tr, y_tr, **fit_args, callbacks=[timer])
        round_times, rss = timer.times, [peak_rss_mb()]
    fit_time = time.perf_counter() - t_fit
    est.booster_.set_attr(**{RoundTimer.ATTR: None})
    extra.update(
        {
            "fit_overhead_s": max(0.0, fit_time - sum(round_times)),
            "bytes_are_estimate": distributed,
            "layout": layout,
            "val_metric_for_early_stopping": "mlogloss",
        }
    )
    result = _test_and_save(cfg, est, ds, view, splits, round_times, rss, extra, t_start=t_start)
    result.to_json(out / METRICS_NAME)
    log.info(
        "xgboost: %d rounds, test accuracy %.4f, macro-F1 %.4f -> %s",
        result.epochs_run,
        result.accuracy,
        result.macro_f1,
        out,
        extra={"summary": True},  # flowsplit train prints its own (see run_logging)
    )
    return result


def _estimator_params(cfg: TrainConfig, n_classes: int, threads: int) -> dict:
    """The :class:`~flowsplit.models.xgb.XGBClassifierModel` arguments of a run."""
    patience = cfg.effective_patience("xgboost")
    return {
        "n_estimators": cfg.rounds,
        "learning_rate": cfg.effective_lr("xgboost"),
        "random_state": cfg.seed,
        "early_stopping_rounds": patience or None,
        "n_classes": n_classes,
        "n_jobs": threads,
        **cfg.model_options,
    }


def _fit_on_dask(
    cfg: TrainConfig,
    est,
    threads: int,
    X_tr: np.ndarray,
    y_tr: np.ndarray,
    fit_args: dict,
    extra: dict,
    layout: dict,
) -> tuple[list[float], list[float]]:
    """Fit on a Dask cluster; returns (round times, peak RSS per worker) and records the
    sync calibration in ``extra`` and the worker count in ``layout``."""
    X_val, y_val = fit_args["eval_set"]
    with dask_client(cfg, cfg.workers, threads) as (client, coll_cfg):
        est.fit(X_tr, y_tr, **fit_args, callbacks=[RoundTimer()], client=client, coll_cfg=coll_cfg)
        round_times = json.loads(est.booster_.attr(RoundTimer.ATTR))
        workers = dask_workers(client)
        extra.update(
            _calibrate_sync(client, workers, est, X_tr, y_tr, X_val, y_val, round_times, cfg.seed)
        )
        rss_by_worker = client.run(peak_rss_mb)
        layout["world_size"] = len(workers)
    return round_times, [rss_by_worker[w] for w in workers]


def _test_and_save(
    cfg: TrainConfig,
    est,
    ds,
    view: str,
    splits: dict[str, tuple[np.ndarray, np.ndarray]],
    round_times: list[float],
    rss: list[float],
    extra: dict,
    *,
    t_start: float,
) -> RunResult:
    """Test the fitted booster, save it, and describe the run as a :class:`RunResult`."""
    X_tr = splits["train"][0]
    X_val, y_val = splits["val"]
    X_te, y_te = splits["test"]
    layout = extra["layout"]
    distributed = layout["backend"] == "dask"
    n_rounds = est.booster_.num_boosted_rounds()
    val_f1 = _f1_per_round(est, X_val, y_val, ds.n_classes)
    y_pred = est.predict(X_te)
    est.save_model(Path(cfg.out) / BOOSTER_NAME)
    comm_bytes = _histogram_bytes(est, X_tr) if distributed else 0
    # The calibration rounds are the first, slowest ones; their sync *share* carries over
    # to the rest of the run, their absolute per-round excess would not.
    comm_time = extra.get("sync_fraction", 0.0) * sum(round_times) if distributed else 0.0
    return RunResult(
        model=cfg.model,
        view=view,
        engine="xgboost-dask" if distributed else "centralised",
        workers=layout["world_size"],
        threads_per_worker=layout["threads_per_worker"],
        device="cpu",
        backend=layout["backend"],
        seed=cfg.seed,
        wall_time_s=time.perf_counter() - t_start,
        epoch_times_s=round_times,
        samples_per_s=len(X_tr) * len(round_times) / max(sum(round_times), 1e-12),
        comm_time_s=comm_time,
        comm_bytes=int(comm_bytes),
        data_time_s=extra["load_time_s"] + extra["fit_overhead_s"],
        peak_rss_mb=rss,
        **classification_summary(y_te, y_pred, ds.classes),
        classes=ds.classes,
        loss_per_epoch=est.evals_result_.get("train", {}).get("mlogloss", []),
        val_macro_f1_per_epoch=val_f1,
        best_epoch=est.best_iteration_,
        epochs_run=n_rounds,
        stopped_early=n_rounds < cfg.rounds,
        n_train=len(X_tr),
        n_test=len(y_te),
        test_labels=y_te.tolist(),
        test_predictions=y_pred.tolist(),
        test_flow_ids=ds.meta["flow_id"].iloc[ds.split_indices("test")].astype(str).tolist(),
        config=cfg.to_dict(),
        env=environment(),
        extra=extra,
    )


def _calibrate_sync(client, workers, est, X, y, X_val, y_val, round_times, seed) -> dict:
    """Estimate synchronisation per round: distributed round minus one worker's share alone."""
    k = min(CALIBRATION_ROUNDS, len(round_times))
    n = len(workers)
    rng = np.random.default_rng(seed)
    share = rng.permutation(len(X))[: max(1, len(X) // n)]
    val_share = rng.permutation(len(X_val))[: max(1, len(X_val) // n)]
    params = {**est.xgb_params(est.n_classes_), "seed": seed}
    alone = client.submit(
        _time_rounds_alone,
        X[share],
        y[share],
        X_val[val_share],
        y_val[val_share],
        params,
        k,
        workers=[workers[0]],
        pure=False,
    ).result()
    excess = [max(0.0, d - a) for d, a in zip(round_times[:k], alone, strict=False)]
    per_round = float(np.mean(excess)) if excess else 0.0
    dist_mean = float(np.mean(round_times[:k])) if k else 0.0
    return {
        "sync_estimate_method": (
            f"mean over the first {k} rounds of (distributed round time - the same round "
            f"trained by one worker alone on 1/{n} of the rows); comm_time_s = that share of "
            "the run's total round time"
        ),
        "calibration_round_times_s": alone,
        "sync_per_round_s": per_round,
        "sync_fraction": per_round / dist_mean if dist_mean else 0.0,
    }


def _histogram_bytes(est, X: np.ndarray) -> int:
    """Estimated histogram payload all-reduced over the whole run (see module docstring)."""
    bins = sum(min(est.max_bin, len(np.unique(X[:, f]))) for f in range(X.shape[1]))
    trees = est.booster_.trees_to_dataframe()
    n_splits = int((trees["Feature"] != "Leaf").sum())
    n_trees = int(trees["Tree"].nunique())
    return (n_trees + n_splits) * bins * 16


def _f1_per_round(est, X: np.ndarray, y: np.ndarray, n_classes: int) -> list[float]:
    """Validation macro-F1 after each round, from per-round margins (one pass per round)."""
    booster = est.booster_
    n_rounds = booster.num_boosted_rounds()
    if len(X) == 0:
        return [0.0] * n_rounds
    dm = xgb.DMatrix(X)
    # Margins of single rounds include the base score once each: subtract it out.
    rounds = [
        booster.predict(dm, output_margin=True, iteration_range=(r, r + 1)) for r in range(n_rounds)
    ]
    if n_rounds >= 2:
        both = booster.predict(dm, output_margin=True, iteration_range=(0, 2))
        base = rounds[0] + rounds[1] - both
    else:
        base = np.zeros_like(rounds[0])
    margin = base.copy()
    out = []
    for r in range(n_rounds):
        margin += rounds[r] - base
        out.append(macro_f1(y, margin.reshape(len(X), n_classes).argmax(1), n_classes))
    return out
