"""Tiny synthetic datasets with every view, written with the real dataset store.

Each class leaves a learnable trace in every view (a byte pattern, a packet-size
level, a statistics offset), so a few epochs give clearly-better-than-chance
models while everything stays small enough to train in well under a second.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from flowsplit.data.store import write_dataset


def write_synthetic(
    out: str | Path,
    *,
    n: int = 96,
    n_classes: int = 3,
    seed: int = 0,
    bytes_len: int = 64,
    seq_shape: tuple[int, int] = (8, 4),
    pkt_shape: tuple[int, int] = (4, 16),
    n_stats: int = 6,
    split: tuple[float, float] = (0.6, 0.2),
    class_share: tuple[float, ...] | None = None,
) -> Path:
    """Write a dataset of ``n`` flows; the first ``split[0]`` are train, then val, then test.

    Classes are balanced unless ``class_share`` gives each class's share of the flows.
    """
    rng = np.random.default_rng(seed)
    if class_share is None:
        y = np.arange(n) % n_classes
    else:
        y = np.repeat(np.arange(n_classes), np.round(np.asarray(class_share) * n).astype(int))
        y = np.resize(y, n)
    rng.shuffle(y)
    noise = rng.integers(0, 256, size=(n, bytes_len))
    pattern = (np.arange(bytes_len)[None, :] * (y[:, None] + 1) * 37) % 256
    bytes_view = np.where(rng.random((n, bytes_len)) < 0.5, pattern, noise).astype(np.uint8)
    t, f = seq_shape
    seq = rng.normal(size=(n, t, f)).astype(np.float32)
    seq[:, :, 0] = (y[:, None] + 1) * 200 + rng.normal(scale=50, size=(n, t))
    pkt = rng.integers(0, 256, size=(n, *pkt_shape)).astype(np.uint8)
    pkt[:, :, : pkt_shape[1] // 2] = ((y + 1) * 60)[:, None, None]
    stats = rng.normal(size=(n, n_stats)).astype(np.float32)
    stats[:, 0] += y * 2.0
    n_train, n_val = int(n * split[0]), int(n * split[1])
    splits = np.array(["train"] * n_train + ["val"] * n_val + ["test"] * (n - n_train - n_val))
    classes = [f"class{i}" for i in range(n_classes)]
    meta = pd.DataFrame(
        {
            "flow_id": [f"f{i:05d}" for i in range(n)],
            "source": "synthetic",
            "group": [f"g{i % 7}" for i in range(n)],
            "label": y.astype(np.int64),
            "label_name": [classes[c] for c in y],
            "split": splits,
        }
    )
    return write_dataset(
        out,
        meta=meta,
        classes=classes,
        views={"bytes": bytes_view, "seq": seq, "pkt_bytes": pkt},
        stats=pd.DataFrame(stats, columns=[f"s{i}" for i in range(n_stats)]),
    )
