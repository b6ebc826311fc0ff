"""All-reduce micro-benchmark on the torch.distributed backend in use.

Times ``dist.all_reduce`` of float32 tensors from a few bytes to tens of MB between
``n_workers`` local processes, so the scaling model gets this machine's latency and
effective bandwidth instead of a guess. Each process pins its thread count, since
on a small machine a second thread pool would time-share the cores it measures.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from flowsplit.train.launch import free_port

DEFAULT_SIZES = (4, 64, 1024, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 32 << 20)


def _iterations_for(n_bytes: int) -> int:
    # Enough calls that tiny messages are timed over milliseconds, few for big ones.
    return max(3, min(200, (8 << 20) // max(n_bytes, 1)))


def _worker(
    rank: int, world: int, port: int, backend: str, sizes, repeats: int, threads: int, out: str
):
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        rows = []
        for n_bytes in sizes:
            x = torch.ones(max(1, n_bytes // 4), dtype=torch.float32)
            iters = _iterations_for(n_bytes)
            for _ in range(2):  # warm-up: connection set-up and buffer allocation
                dist.all_reduce(x)
            samples = []
            for _ in range(repeats):
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    dist.all_reduce(x)
                samples.append((time.perf_counter() - t0) / iters)
            # The slowest rank decides when an all-reduce is over for everyone.
            worst = torch.tensor(samples, dtype=torch.float64)
            dist.all_reduce(worst, op=dist.ReduceOp.MAX)
            rows.append(
                {
                    "bytes": int(x.numel() * 4),
                    "iterations": iters,
                    "time_s": float(statistics.median(worst.tolist())),
                    "samples_s": worst.tolist(),
                }
            )
        if rank == 0:
            Path(out).write_text(json.dumps(rows))
    finally:
        dist.destroy_process_group()


def run_allreduce_benchmark(
    sizes=DEFAULT_SIZES,
    *,
    n_workers: int = 2,
    backend: str = "gloo",
    repeats: int = 5,
    threads_per_worker: int = 1,
) -> dict:
    """Measure all-reduce time against message size; return a JSON-ready record.

    The record holds one row per size (median over ``repeats`` of the slowest rank's
    mean time per call) plus the conditions: backend, workers, threads, host, versions.
    """
    sizes = [int(s) for s in sizes]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "allreduce.json")
        mp.spawn(
            _worker,
            args=(n_workers, free_port(), backend, sizes, repeats, threads_per_worker, out),
            nprocs=n_workers,
            join=True,
        )
        rows = json.loads(Path(out).read_text())
    return {
        "backend": backend,
        "n_workers": n_workers,
        "threads_per_worker": threads_per_worker,
        "repeats": repeats,
        "rows": rows,
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
