"""Synthetic datasets and a fake training engine for the comparison tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from flowsplit.data.store import write_dataset
from flowsplit.experiments.dp.compare import Cell, CompareConfig, cell_dir
from flowsplit.experiments.dp.scaling import Network, ring_allreduce_time

EVIL_CLASS = '<img src=x onerror="alert(1)">|bad'
CLASSES = ["web", "dns", EVIL_CLASS]
HOST = Network("fake host", 2e-4, 5e8)


def make_dataset(root: Path, n: int = 90) -> Path:
    """A tiny dataset: 3 classes, a 784-byte view and 4 statistics, split 4:1:1 in order."""
    rng = np.random.default_rng(0)
    labels = np.arange(n) % 3
    n_eval = n // 6
    split = np.array(["train"] * (n - 2 * n_eval) + ["val"] * n_eval + ["test"] * n_eval)
    meta = pd.DataFrame(
        {
            "flow_id": np.arange(n),
            "source": [f"cap{i % 5}.pcap" for i in range(n)],
            "group": [f"cap{i % 5}" for i in range(n)],
            "label": labels,
            "label_name": [CLASSES[i] for i in labels],
            "split": split,
        }
    )
    views = {"bytes": rng.integers(0, 256, size=(n, 784), dtype=np.uint8)}
    stats = pd.DataFrame(rng.normal(size=(n, 4)).astype(np.float32), columns=list("abcd"))
    return write_dataset(root, meta=meta, classes=CLASSES, views=views, stats=stats)


def fake_metrics(cell: Cell, *, n_train: int = 60, cores: int = 2) -> dict:
    """metrics.json as an engine would write it, timings from a known scaling law: compute
    2 ms a sample shared by the workers, over ``threads ** 0.7`` for a process of several
    threads (the same-cores cell), times the core sharing, plus a ring all-reduce."""
    rng = np.random.default_rng(1000 * cell.seed + cell.workers)
    n = cell.workers
    threads = cell.threads or 1
    over = max(1.0, n * threads / cores)
    compute = 2e-3 * n_train / n / threads**0.7 * over
    comm = ring_allreduce_time(400_000, n, HOST) * 1 if n > 1 else 0.0  # one step per epoch
    epoch = compute + comm
    y_true = [i % 3 for i in range(15)]
    y_pred = list(y_true)
    for j in rng.choice(15, size=1 + cell.seed % 2, replace=False):
        y_pred[j] = (y_pred[j] + 1) % 3
    acc = float(np.mean(np.array(y_true) == np.array(y_pred)))
    cm = np.zeros((3, 3), int)
    for t, p in zip(y_true, y_pred, strict=True):
        cm[t, p] += 1
    return {
        "schema_version": 2,
        "kind": "train",
        "model": cell.model,
        "view": "bytes",
        "engine": "ddp" if n > 1 else "centralised",
        "workers": n,
        "threads_per_worker": threads,
        "device": "cpu",
        "backend": "gloo",
        "seed": cell.seed,
        "wall_time_s": 5 * epoch + 1,
        "epoch_times_s": [epoch * 1.5]
        + [epoch * (1 + 0.01 * rng.standard_normal()) for _ in range(4)],
        "samples_per_s": n_train / epoch,
        "comm_time_s": 4 * comm,
        "comm_bytes": 4 * 400_000,
        "data_time_s": 0.01,
        "peak_rss_mb": [300.0] * n,
        "accuracy": acc,
        "macro_f1": acc - 0.01,
        "per_class_f1": dict.fromkeys(CLASSES, acc),
        "confusion_matrix": cm.tolist(),
        "classes": CLASSES,
        "loss_per_epoch": [1.0] * 5,
        "val_macro_f1_per_epoch": [0.5] * 5,
        "best_epoch": 4,
        "epochs_run": 5,
        "stopped_early": False,
        "n_train": n_train,
        "n_test": 15,
        "test_labels": y_true,
        "test_predictions": y_pred,
        "test_flow_ids": [str(i) for i in range(75, 90)],
        "config": {"batch_size": 64, "scale_lr": False, "model_options": {}},
        "env": {},
        "extra": {"n_params": 100_000},
    }


def fake_runner(fail: set[str] = frozenset(), calls: list | None = None):
    """A ``run_cell_fn`` writing fake metrics (or failing for the named cells)."""

    def run(cell: Cell, cfg: CompareConfig) -> tuple[bool, str]:
        if calls is not None:
            calls.append(cell.name)
        if cell.name in fail:
            return False, "exit status 1\nRuntimeError: boom"
        d = cell_dir(cfg.out, cell)
        d.mkdir(parents=True, exist_ok=True)
        (d / "metrics.json").write_text(json.dumps(fake_metrics(cell)))
        return True, ""

    return run


def fake_allreduce(out: Path) -> None:
    """A micro-benchmark record generated from ``HOST``, so tests skip the real one."""
    sizes = [4, 1024, 1 << 16, 1 << 20, 1 << 24]
    rows = [
        {"bytes": s, "iterations": 3, "time_s": ring_allreduce_time(s, 2, HOST), "samples_s": []}
        for s in sizes
    ]
    out.mkdir(parents=True, exist_ok=True)
    (out / "allreduce.json").write_text(
        json.dumps(
            {
                "backend": "gloo",
                "n_workers": 2,
                "threads_per_worker": 1,
                "repeats": 1,
                "rows": rows,
                "host": "test",
                "cpu_count": 2,
                "torch": "x",
                "date": "today",
            }
        )
    )
