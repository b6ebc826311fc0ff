"""Training on data that outgrows memory: peak RSS per worker and epoch time against dataset size.

    python benchmarks/train_scale.py --out bench-results/train_scale.json \\
        [--sizes 100000,1000000,10000000] [--workers 1,2] [--steps 20] [--workdir /tmp]

For each size N, a synthetic dataset of N training flows (``bytes`` view, 784
bytes a flow, 8 classes; validation and test 1000 flows each) is written with the
dataset store's streaming writer under ``--workdir`` and removed afterwards. Then
``flowsplit train --model cnn`` runs once per worker count with 1 thread per
worker, global batch 64, one epoch capped at ``--steps`` optimiser steps
(``--steps-per-epoch``), and the run's ``metrics.json`` gives each worker's peak
resident memory and the training throughput.

``epoch_s`` is the time of the capped epoch as measured; ``full_epoch_s`` is the
time a whole epoch over N flows would take at the measured throughput (an
extrapolation, labelled as such: a full epoch over 10^7 flows on two cores takes
hours). Each rank reads only its shard, batch by batch, from the view's file, so
the resident memory per worker should not grow with N by the view's 784 bytes a
flow; what does grow with N is the per-flow metadata every worker loads (flow ids,
splits, labels). (Before, every worker loaded the whole training split: N x 784
bytes each, 7.3 GiB per worker at 10^7 flows.)

Timings taken on a shared machine are depressed and noisy; the load average is
recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from _common import ROOT, environment, single_thread, write_json  # noqa: E402

N_CLASSES = 8
HELD_OUT = 1000  # validation and test flows each
CHUNK = 200_000  # rows written per append
ROW_BYTES = 784


def write_dataset_streaming(out: Path, n_train: int, seed: int = 0) -> Path:
    """A dataset of ``n_train`` + 2 x 1000 flows, bytes view only, written chunk by chunk."""
    from flowsplit.data.store import DatasetWriter

    rng = np.random.default_rng(seed)
    classes = [f"c{i}" for i in range(N_CLASSES)]
    n = n_train + 2 * HELD_OUT
    with DatasetWriter(out, {"bytes": ((ROW_BYTES,), np.uint8)}) as writer:
        for start in range(0, n, CHUNK):
            stop = min(n, start + CHUNK)
            y = rng.integers(0, N_CLASSES, stop - start)
            rows = rng.integers(0, 256, (stop - start, ROW_BYTES), dtype=np.uint8)
            rows[:, :16] = (y * 31)[:, None]  # a learnable trace
            pos = np.arange(start, stop)
            split = np.where(
                pos < n_train, "train", np.where(pos < n_train + HELD_OUT, "val", "test")
            )
            meta = pd.DataFrame(
                {
                    "flow_id": [f"f{i}" for i in pos],
                    "source": "synthetic",
                    "group": "g",
                    "label": y,
                    "label_name": np.asarray(classes)[y],
                    "split": split,
                }
            )
            writer.append(meta, {"bytes": rows})
        return writer.finish(classes=classes)


def train_once(data: Path, workers: int, steps: int) -> dict:
    """One capped epoch of ``flowsplit train``; what its metrics.json says about memory and time."""
    with tempfile.TemporaryDirectory(prefix="train-scale-") as tmp:
        run = Path(tmp) / "run"
        cmd = [
            sys.executable,
            "-m",
            "flowsplit",
            "train",
            str(data),
            "--model",
            "cnn",
            "-o",
            str(run),
            "--workers",
            str(workers),
            "--threads",
            "1",
            "--epochs",
            "1",
            "--batch-size",
            "64",
            "--patience",
            "0",
            "--steps-per-epoch",
            str(steps),
            "-q",
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            return {"workers": workers, "error": proc.stderr.strip().splitlines()[-1:]}
        m = json.loads((run / "metrics.json").read_text())
    samples = m["samples_per_s"]
    return {
        "workers": workers,
        "peak_rss_mb": m["peak_rss_mb"],
        "steps": steps,
        "epoch_s": m["epoch_times_s"][0],
        "samples_per_s": samples,
        "full_epoch_s": m["n_train"] / samples if samples else None,
        "full_epoch_is_extrapolated": True,
        "load_time_s": m["extra"].get("load_time_s"),
        "wall_s": wall,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("bench-results/train_scale.json"))
    p.add_argument("--sizes", default="100000,1000000,10000000", help="training flows, comma-sep")
    p.add_argument("--workers", default="1,2", help="worker counts, comma-separated")
    p.add_argument("--steps", type=int, default=20, help="optimiser steps per measured epoch")
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    args = p.parse_args(argv)
    single_thread()
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    results = []
    load_before = os.getloadavg()
    for n in sizes:
        need = 2.2 * (n + 2 * HELD_OUT) * ROW_BYTES  # the raw rows, then the final file
        free = shutil.disk_usage(args.workdir).free
        if need > free:
            results.append(
                {
                    "n_train": n,
                    "skipped": f"needs {need / 2**30:.1f} GiB of disk, "
                    f"{free / 2**30:.1f} GiB free in {args.workdir}",
                }
            )
            print(results[-1], flush=True)
            continue
        root = Path(tempfile.mkdtemp(prefix="train-scale-", dir=args.workdir))
        try:
            t0 = time.perf_counter()
            data = write_dataset_streaming(root / "data", n)
            entry = {
                "n_train": n,
                "dataset_mb": ROW_BYTES * (n + 2 * HELD_OUT) / 2**20,
                "write_s": time.perf_counter() - t0,
                "runs": [train_once(data, w, args.steps) for w in workers],
            }
            results.append(entry)
            print(json.dumps(entry), flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    write_json(
        args.out,
        {
            "benchmark": "train_scale",
            "model": "cnn",
            "view": "bytes",
            "steps_per_epoch": args.steps,
            "sizes": results,
            "load_average_before_after": [load_before, os.getloadavg()],
            "environment": environment(root=str(ROOT)),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
