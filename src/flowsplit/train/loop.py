"""The training loop for the neural models: one process, one device, DDP when launched so.

Read top to bottom: :func:`train_worker` is what every worker process runs (and
what a centralised run runs in-process). It reads the distributed environment,
sets threads, opens the process group, and calls :func:`run_training`:

1. open the dataset: the training rows stay on disk (memory-mapped views), only
   labels and indices are loaded; rank 0 loads the validation rows,
2. build the model with the seed, fit its input scaling, resume if asked,
3. wrap it in DDP (gradients averaged, plain or compressed by ``--comm-hook``; a
   hook times and counts all-reduce bytes, and the exposed part of that time),
4. per epoch: the rows are ordered by (seed, epoch) only, as DistributedSampler
   orders them, each rank takes every N-th of them (all rows, so the ranks' shares
   of the short last step differ by at most one row and each rank's loss is weighed
   by its share; only a last step with fewer rows than ranks sits out, so all ranks
   take the same number of steps and need no ``Join``) and reads its batches from
   disk as it goes
   (:mod:`flowsplit.train.batches`), rank 0 validates, checkpoints and decides
   early stopping, and the decision is broadcast so every rank stops together,
5. rank 0 restores the best weights, tests, writes weights and ``metrics.json``.

With per-worker batch = global batch / N and each rank's loss weighed by its
share of the global step, a step of N workers is the centralised step on the same
global batch up to floating-point summation order, dropout included: by default
(``--dropout-masks global``) each row's mask comes from a stream of its own, the same
in every run (:mod:`flowsplit.train.dropout`).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from flowsplit.config_args import fields_of
from flowsplit.data.augment import augmenter_for
from flowsplit.data.store import load_dataset
from flowsplit.errors import check_finite_loss
from flowsplit.models.registry import build_model, fit_input_scaler, has_input_scaler
from flowsplit.result import RunResult
from flowsplit.terminal import on_terminal
from flowsplit.train.batches import RowReader, epoch_rows, shard_order, step_rows
from flowsplit.train.checkpoint import CHECKPOINT_NAME, load_checkpoint, save_checkpoint
from flowsplit.train.config import TrainConfig
from flowsplit.train.distributed import (
    CommMeter,
    DistEnv,
    ParallelLayout,
    all_reduce_sum,
    apply_ddp,
    broadcast_checkpoint,
    broadcast_flag,
    gather_floats,
    process_group,
    read_dist_env,
)
from flowsplit.train.dropout import MaskSource, use_global_masks
from flowsplit.train.metrics import class_weights, classification_summary, macro_f1
from flowsplit.train.runs import (
    LOG_NAME,
    METRICS_NAME,
    WEIGHTS_NAME,
    environment,
    predict_labels,
    resolve_view,
    save_weights,
    write_run_config,
)
from flowsplit.util import peak_rss_mb

log = logging.getLogger("flowsplit.train")


def train_worker(cfg: TrainConfig, resume: bool = False) -> None:
    """Run one worker of a training job (the whole job when not distributed)."""
    env = read_dist_env()
    layout = ParallelLayout.from_config(cfg, env)
    torch.set_num_threads(layout.threads_per_worker)
    with (
        process_group(layout, env, timeout_s=cfg.timeout_s),
        run_logging(cfg.out, quiet=cfg.quiet, is_main=layout.is_main),
    ):
        # torchrun restarted us after a failure: continue from the last checkpoint if any.
        # Rank 0 decides (only it writes RUN, which need not be on a shared disk).
        if layout.is_main:
            resume = resume or (
                env.restart_count > 0 and (Path(cfg.out) / CHECKPOINT_NAME).exists()
            )
        resume = broadcast_flag(resume, layout)
        run_training(cfg, layout, env, resume=resume)


@dataclass
class _RunData:
    """What a run reads from its dataset: training rows stay on disk, read as needed."""

    ds: Any
    view: str
    train_idx: np.ndarray
    reader: RowReader
    y_train: torch.Tensor  # (N,)
    x_val: np.ndarray | None  # rank 0 only
    y_val: np.ndarray | None
    test_idx: np.ndarray | None
    load_time_s: float


@dataclass
class _RunState:
    """What training changes, epoch by epoch; a checkpoint carries it across restarts."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    weights: torch.Tensor | None  # class weights of the loss
    masks: MaskSource | None = None  # --dropout-masks global
    hist: dict = field(
        default_factory=lambda: {
            "loss": [],
            "val_f1": [],
            "epoch_time": [],
            "data_time": [],
            "comm_time": [],
            "comm_bytes": [],
            "samples": [],
            "wall_before": 0.0,
        }
    )
    best: dict = field(
        default_factory=lambda: {"epoch": -1, "val_f1": -1.0, "state": None, "stale": 0}
    )
    start_epoch: int = 0


def run_training(cfg: TrainConfig, layout: ParallelLayout, env: DistEnv, *, resume: bool) -> None:
    """Train on this rank (steps 1-5 of the module docstring)."""
    t_start = time.perf_counter()
    out = Path(cfg.out)
    device = torch.device(layout.device)
    data = _open_data(cfg, layout, t_start)
    state = _build_model(cfg, layout, data, device)
    if resume:
        _restore(state, out, layout)
    elif layout.is_main:
        write_run_config(out, cfg, data.ds, view=data.view, layout=_layout_record(layout))
    meter = CommMeter()
    ddp_model = apply_ddp(
        state.model,
        layout=layout,
        comm_meter=meter,
        bucket_cap_mb=cfg.bucket_mb,
        comm_hook=cfg.comm_hook,
    )
    stopped_early = _fit(cfg, layout, env, data, state, ddp_model, meter, device, t_start, resume)
    data.reader.close()
    rss = gather_floats(peak_rss_mb(), layout)
    if not layout.is_main:
        return
    result = _test_and_save(
        cfg,
        layout,
        data,
        state,
        meter,
        device,
        t_start,
        rss=rss,
        stopped_early=stopped_early,
        resumed=resume,
    )
    result.to_json(out / METRICS_NAME)
    log.info(
        "test accuracy %.4f, macro-F1 %.4f (best epoch %d of %d) -> %s",
        result.accuracy,
        result.macro_f1,
        result.best_epoch + 1,  # 1-based, as the per-epoch lines and the report's plots
        result.epochs_run,
        out,
        extra={"summary": True},  # flowsplit train prints its own (see run_logging)
    )


def _restore(state: _RunState, out: Path, layout: ParallelLayout) -> None:
    """Step 2, resumed: weights, optimiser, history and epoch from rank 0's checkpoint."""
    ckpt = broadcast_checkpoint(
        load_checkpoint(out / CHECKPOINT_NAME) if layout.is_main else None, layout
    )
    state.model.load_state_dict(ckpt["model"])
    state.optimizer.load_state_dict(ckpt["optimizer"])
    state.hist, state.best, state.start_epoch = ckpt["history"], ckpt["best"], ckpt["epoch"]
    log.info("resumed %s after epoch %d", out, state.start_epoch)  # epochs done = last, 1-based


def _fit(
    cfg: TrainConfig,
    layout: ParallelLayout,
    env: DistEnv,
    data: _RunData,
    state: _RunState,
    ddp_model: torch.nn.Module,
    meter: CommMeter,
    device: torch.device,
    t_start: float,
    resumed: bool,
) -> bool:
    """Step 4: the epochs, until --epochs or early stopping (True: stopped early)."""
    patience = cfg.effective_patience("torch")
    show = layout.is_main and not cfg.quiet
    bars = show and on_terminal()  # a redirected log gets the per-epoch lines only
    stopped_early = state.best["stale"] >= patience > 0  # a resumed run may already have stopped
    epochs = tqdm(
        total=cfg.epochs, initial=state.start_epoch, desc=cfg.model, unit="epoch", disable=not bars
    )
    for epoch in range(state.start_epoch, cfg.epochs):
        if stopped_early:
            break
        for group in state.optimizer.param_groups:  # a function of the epoch: resumes exactly
            group["lr"] = epoch_lr(layout.lr, epoch, cfg.epochs, cfg.lr_schedule)
        torch.manual_seed(_seed_for(cfg.seed, layout.rank, epoch))  # per-rank randomness
        if state.masks is not None:  # the same stream on every rank
            state.masks.reseed(_seed_for(cfg.seed, 0, epoch))
        meter.reset()
        _train_epoch(cfg, layout, data, state, ddp_model, meter, epoch, device, show=show)
        stop = False
        if layout.is_main:
            stop = _validate_and_checkpoint(cfg, data, state, epoch, device, t_start, patience)
            epochs.update(1)
            epochs.set_postfix(
                loss=f"{state.hist['loss'][-1]:.4f}", val_f1=f"{state.hist['val_f1'][-1]:.4f}"
            )
        stopped_early = broadcast_flag(stop, layout)  # same decision on every rank
        _maybe_simulate_crash(cfg, env, epoch, resumed=resumed)
        if stopped_early:
            log.info("early stop: no better validation macro-F1 for %d epochs", patience)
            break
    epochs.close()
    return stopped_early


def _open_data(cfg: TrainConfig, layout: ParallelLayout, t_start: float) -> _RunData:
    """Step 1: the dataset, memory-mapped; only rank 0 loads the validation rows."""
    ds = load_dataset(cfg.dataset)
    view = resolve_view(cfg, ds)
    train_idx = ds.split_indices("train")
    reader = RowReader(ds.view(view))  # this rank's batches, read as it needs them
    y_train = torch.from_numpy(ds.labels[train_idx])  # (N,)
    x_val = y_val = test_idx = None
    if layout.is_main:
        val_idx, test_idx = ds.split_indices("val"), ds.split_indices("test")
        x_val, y_val = np.asarray(ds.view(view)[val_idx]), ds.labels[val_idx]
    load_time = time.perf_counter() - t_start
    return _RunData(ds, view, train_idx, reader, y_train, x_val, y_val, test_idx, load_time)


def _build_model(
    cfg: TrainConfig, layout: ParallelLayout, data: _RunData, device: torch.device
) -> _RunState:
    """Step 2: the model (same seed on every rank), its input scaling, the optimiser."""
    # Same seed on every rank: identical initial weights (DDP also broadcasts rank 0's).
    torch.manual_seed(cfg.seed)
    model = build_model(
        cfg.model,
        view=data.view,
        input_shape=data.ds.view_shape(data.view),
        n_classes=data.ds.n_classes,
        **cfg.model_options,
    )
    if cfg.init_from:  # flowsplit pretrain's encoder (checked before launch)
        from flowsplit.models.transformer import load_encoder

        load_encoder(model, cfg.init_from)
    masks = None
    if cfg.dropout_masks == "global":
        masks = MaskSource(world_size=layout.world_size, rank=layout.rank)
        use_global_masks(model, masks)
    if has_input_scaler(model):  # the statistics of every training row, on every rank
        fit_input_scaler(model, torch.from_numpy(data.reader.read(data.train_idx)))
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=layout.lr, weight_decay=cfg.weight_decay)
    weights = class_weights(data.y_train.numpy(), data.ds.n_classes, cfg.class_weight_mode)
    weights = None if weights is None else torch.from_numpy(weights).to(device)
    return _RunState(model, optimizer, weights, masks)


def _train_epoch(
    cfg: TrainConfig,
    layout: ParallelLayout,
    data: _RunData,
    state: _RunState,
    ddp_model: torch.nn.Module,
    meter: CommMeter,
    epoch: int,
    device: torch.device,
    *,
    show: bool,
) -> None:
    """Step 4, one epoch on this rank; its loss, times and bytes go to ``state.hist``."""
    ddp_model.train()
    # This rank's rows, in order: a function of (seed, epoch) only.
    n, world, batch = len(data.train_idx), layout.world_size, layout.global_batch
    order = shard_order(n, world, layout.rank, cfg.seed, epoch, batch)
    used = epoch_rows(n, world, batch)  # rows of the epoch on all ranks together
    if cfg.steps_per_epoch is not None:
        order = order[: cfg.steps_per_epoch * layout.per_worker_batch]
        used = min(used, cfg.steps_per_epoch * batch)
    bar = tqdm(total=len(order), unit="sample", leave=False, disable=not (show and on_terminal()))
    augment = augmenter_for(cfg.augment, data.ds, data.view, cfg.seed)  # None: --augment none
    loss_sum, data_time = torch.zeros((), device=device), 0.0
    t0 = time.perf_counter()
    for step, start in enumerate(range(0, len(order), layout.per_worker_batch)):
        td = time.perf_counter()
        rows = order[start : start + layout.per_worker_batch]
        ids = data.train_idx[rows.numpy()]
        xb_np = data.reader.read(ids)
        if augment is not None:  # per row, seeded by (seed, epoch, row): any worker count
            xb_np = augment(xb_np, ids, epoch)
        xb = torch.from_numpy(xb_np)
        xb = xb.to(device, non_blocking=True)  # (b, *view_shape)
        yb = data.y_train[rows].to(device, non_blocking=True)  # (b,)
        data_time += time.perf_counter() - td
        # The sum over this rank's rows, divided by the rows of the whole global step
        # and times N (not a weighted mean): DDP's average over the N ranks is then the
        # centralised loss of the global batch, even with class weights and on a short
        # last step whose shares differ by a row.
        logits = ddp_model(xb)
        ce_sum = F.cross_entropy(
            logits, yb, weight=state.weights, reduction="sum", label_smoothing=cfg.label_smoothing
        )
        loss = ce_sum * (world / step_rows(used, batch, step))
        state.optimizer.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces gradients bucket by bucket, overlapped
        meter.step_done()
        state.optimizer.step()
        loss_sum += ce_sum.detach()
        bar.update(len(rows))
    epoch_time = time.perf_counter() - t0
    bar.close()
    total_loss, n_seen = all_reduce_sum([loss_sum.item(), float(len(order))], layout)
    hist = state.hist
    hist["loss"].append(total_loss / max(n_seen, 1.0))
    # The same loss on every rank: all stop alike.
    check_finite_loss(hist["loss"][-1], f"in epoch {epoch + 1}", layout.lr)
    hist["epoch_time"].append(epoch_time)
    hist["data_time"].append(data_time)
    hist["comm_time"].append(meter.busy_time())
    hist["comm_bytes"].append(meter.n_bytes)
    hist.setdefault("exposed_comm", []).append(meter.exposed_s)
    hist["samples"].append(int(n_seen))


def _validate_and_checkpoint(
    cfg: TrainConfig,
    data: _RunData,
    state: _RunState,
    epoch: int,
    device: torch.device,
    t_start: float,
    patience: int,
) -> bool:
    """Rank 0 after an epoch: validate, keep the best weights, checkpoint; True: stop."""
    hist, model = state.hist, state.model
    val_f1 = macro_f1(
        data.y_val,
        predict_labels(model, data.x_val, batch_size=cfg.eval_batch_size, device=device),
        data.ds.n_classes,
    )
    hist["val_f1"].append(val_f1)
    if val_f1 > state.best["val_f1"]:
        weights = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        state.best = {"epoch": epoch, "val_f1": val_f1, "state": weights, "stale": 0}
    else:
        state.best["stale"] += 1
    wall = hist["wall_before"] + time.perf_counter() - t_start
    save_checkpoint(
        Path(cfg.out) / CHECKPOINT_NAME,
        {
            "epoch": epoch + 1,
            "model": model.state_dict(),
            "optimizer": state.optimizer.state_dict(),
            "history": {**hist, "wall_before": wall},
            "best": state.best,
        },
    )
    log.info(
        "epoch %d/%d: loss %.4f, val macro-F1 %.4f%s, %.2f s (comm %.2f s, %.1f MB)",
        epoch + 1,  # 1-based on the console and in train.log, as in the report's plots
        cfg.epochs,
        hist["loss"][-1],
        val_f1,
        " *" if state.best["epoch"] == epoch else "",
        hist["epoch_time"][-1],
        hist["comm_time"][-1],
        hist["comm_bytes"][-1] / 2**20,
    )
    return patience > 0 and state.best["stale"] >= patience


def _test_and_save(
    cfg: TrainConfig,
    layout: ParallelLayout,
    data: _RunData,
    state: _RunState,
    meter: CommMeter,
    device: torch.device,
    t_start: float,
    *,
    rss: Any,
    stopped_early: bool,
    resumed: bool,
) -> RunResult:
    """Step 5 (rank 0): the best weights, tested and saved; the run's :class:`RunResult`."""
    ds, hist, model = data.ds, state.hist, state.model
    model.load_state_dict(state.best["state"])
    x_test, y_test = np.asarray(ds.view(data.view)[data.test_idx]), ds.labels[data.test_idx]
    y_pred = predict_labels(model, x_test, batch_size=cfg.eval_batch_size, device=device)
    save_weights(
        model, Path(cfg.out) / WEIGHTS_NAME, {**fields_of(cfg, ("model",)), "view": data.view}
    )
    summary = classification_summary(y_test, y_pred, ds.classes)
    train_time = sum(hist["epoch_time"])
    return RunResult(
        model=cfg.model,
        view=data.view,
        engine=layout.engine,
        workers=layout.world_size,
        threads_per_worker=layout.threads_per_worker,
        device=device.type,
        backend=layout.backend,
        seed=cfg.seed,
        wall_time_s=hist["wall_before"] + time.perf_counter() - t_start,
        epoch_times_s=hist["epoch_time"],
        samples_per_s=sum(hist["samples"]) / train_time if train_time else 0.0,
        comm_time_s=sum(hist["comm_time"]),
        comm_bytes=int(sum(hist["comm_bytes"])),
        exposed_comm_s=sum(hist.get("exposed_comm", [])) if layout.ddp_enabled else None,
        comm_hook=cfg.comm_hook if layout.ddp_enabled else None,
        data_time_s=sum(hist["data_time"]),
        peak_rss_mb=rss,
        **summary,
        classes=ds.classes,
        loss_per_epoch=hist["loss"],
        val_macro_f1_per_epoch=hist["val_f1"],
        best_epoch=state.best["epoch"],
        epochs_run=len(hist["loss"]),
        stopped_early=bool(stopped_early),
        n_train=len(data.train_idx),
        n_test=len(y_test),
        test_labels=y_test.tolist(),
        test_predictions=y_pred.tolist(),
        test_flow_ids=ds.meta["flow_id"].iloc[data.test_idx].astype(str).tolist(),
        config=cfg.to_dict(),
        env=environment(),
        extra=_extra(cfg, layout, data, state, meter, resumed=resumed),
    )


def _extra(
    cfg: TrainConfig,
    layout: ParallelLayout,
    data: _RunData,
    state: _RunState,
    meter: CommMeter,
    *,
    resumed: bool,
) -> dict:
    """``RunResult.extra`` of a neural run: how it ran, beyond the common fields."""
    return {
        "load_time_s": data.load_time_s,
        "layout": _layout_record(layout),
        "comm_calls_last_epoch": meter.n_calls,
        **fields_of(cfg, ("comm_hook", "bucket_mb")),
        "exposed_comm_per_epoch_s": state.hist.get("exposed_comm", []),
        "uneven_shards": "weighted",
        "resumed": bool(resumed),
        "n_params": sum(p.numel() for p in state.model.parameters() if p.requires_grad),
    }


def _layout_record(layout: ParallelLayout) -> dict:
    return {
        "world_size": layout.world_size,
        "threads_per_worker": layout.threads_per_worker,
        "global_batch": layout.global_batch,
        "per_worker_batch": layout.per_worker_batch,
        "lr": layout.lr,
        "device": layout.device,
        "backend": layout.backend,
    }


def epoch_lr(base: float, epoch: int, epochs: int, schedule: str) -> float:
    """Learning rate of ``epoch``: constant, or cosine from ``base`` towards 0 over ``epochs``."""
    if schedule == "constant":
        return base
    return base * 0.5 * (1.0 + math.cos(math.pi * epoch / epochs))


def _seed_for(seed: int, rank: int, epoch: int) -> int:
    """A seed for per-rank randomness that depends only on (seed, rank, epoch)."""
    return int(np.random.SeedSequence([seed, rank, epoch]).generate_state(1)[0])


def _maybe_simulate_crash(cfg: TrainConfig, env: DistEnv, epoch: int, *, resumed: bool) -> None:
    """Testing hook (``fail_after_epoch``): die after an epoch, as a killed worker would."""
    if cfg.fail_after_epoch != epoch or resumed:
        return
    if env.world_size > 1 or env.agent_store:
        if env.rank == env.world_size - 1:  # one worker dies; the launcher sees it
            os.kill(os.getpid(), signal.SIGKILL)
        return
    raise RuntimeError(f"simulated crash after epoch {epoch} (fail_after_epoch)")


class _TqdmHandler(logging.Handler):
    """Log lines that do not break the progress bars."""

    def emit(self, record: logging.LogRecord) -> None:
        tqdm.write(self.format(record))


CLI_SUMMARY_ENV = "FLOWSPLIT_CLI_SUMMARY"
"""Set (to 1) by ``flowsplit train`` while it runs: it prints the run's one summary line
itself, so the engine's own last line ("test accuracy ... -> RUN") goes to the log file
only. An environment variable, so DDP and Dask worker processes see it too; under
torchrun (``python -m flowsplit.train``) it is unset and that line is the summary."""


def _console_summary(record: logging.LogRecord) -> bool:
    """The console's filter: an engine's summary line only when no CLI prints one."""
    return not (getattr(record, "summary", False) and os.environ.get(CLI_SUMMARY_ENV) == "1")


@contextmanager
def run_logging(out: str | Path, *, quiet: bool, is_main: bool):
    """The main rank logs to ``RUN/train.log`` and the console; other ranks only warn."""
    handlers: list[logging.Handler] = []
    console = _TqdmHandler()
    console.setLevel(logging.WARNING if (quiet or not is_main) else logging.INFO)
    console.addFilter(_console_summary)
    handlers.append(console)
    if is_main:
        Path(out).mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(Path(out) / LOG_NAME, encoding="utf-8")
        fh.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        handlers.append(fh)
    prev = (log.level, log.propagate)
    log.setLevel(logging.INFO)
    log.propagate = False
    for h in handlers:
        log.addHandler(h)
    try:
        yield
    finally:
        for h in handlers:
            log.removeHandler(h)
            h.close()
        log.setLevel(prev[0])
        log.propagate = prev[1]
