"""DDP overhead of ``flowsplit train`` and data-parallel speedup per model.

    python benchmarks/ddp_overhead.py --out bench-results/ddp_overhead.json [--quick]

1. **Overhead**: epoch time of ``flowsplit train --workers 2`` against a minimal
   hand-written torchrun DDP loop (this file, ``--minimal-worker``) on the same
   model, data, global batch, learning rate and threads (1 per worker), measured
   in the same invocation and interleaved (A, B, A, B, ...) so load drifts hit
   both. ``overhead_ratio`` = median flowsplit epoch / median minimal epoch.
2. **Speedup**: for each neural model, the centralised epoch time (best of 1 and
   2 threads) over the epoch time of 2 workers with 1 thread each, same global
   batch. ``speedup`` = best centralised / data-parallel.

Epoch times are read from each run's ``metrics.json`` (training only, no
validation); the first epoch of each run is dropped as warm-up. Every figure is
the median over ``--repeats`` runs. The data set is synthetic by default (all
views, realistic shapes; the minimal loop holds them in memory, flowsplit reads each
batch from the file) or ``--dataset``.
The machine's load is recorded before and after: figures taken on a shared
machine are depressed and noisy. Every run starts in its own session, and
flowsplit's workers, like torchrun's, each lead their own session, so Linux's
per-session fair scheduling (autogroup) treats all the contenders alike.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from flowsplit.util import free_port

MODELS = ("cnn", "lstm", "convlstm", "convgru")


def write_synthetic_dataset(out: Path, n: int, seed: int = 0) -> Path:
    """Flows with every view at the shapes ``flowsplit prepare`` writes, 90 % train."""
    import pandas as pd

    from flowsplit.data.store import write_dataset

    rng = np.random.default_rng(seed)
    n_classes = 8
    y = rng.integers(0, n_classes, n)
    views = {
        "bytes": rng.integers(0, 256, (n, 784), dtype=np.uint8),
        "seq": rng.normal(size=(n, 32, 10)).astype(np.float32),
        "pkt_bytes": rng.integers(0, 256, (n, 16, 64), dtype=np.uint8),
    }
    views["bytes"][:, :16] = (y * 31)[:, None]  # a learnable trace, not that it matters here
    n_train, n_val = int(0.9 * n), int(0.05 * n)
    split = ["train"] * n_train + ["val"] * n_val + ["test"] * (n - n_train - n_val)
    classes = [f"c{i}" for i in range(n_classes)]
    meta = pd.DataFrame(
        {
            "flow_id": [f"f{i}" for i in range(n)],
            "source": "synthetic",
            "group": "g",
            "label": y,
            "label_name": [classes[c] for c in y],
            "split": split,
        }
    )
    return write_dataset(out, meta=meta, classes=classes, views=views)


def flowsplit_epochs(data: Path, model: str, *, workers: int, threads: int, args) -> list[float]:
    """Epoch times (s) of one ``flowsplit train`` run, warm-up epoch dropped."""
    with tempfile.TemporaryDirectory(prefix="ddp-bench-") as tmp:
        run = Path(tmp) / "run"
        cmd = [
            sys.executable,
            "-m",
            "flowsplit",
            "train",
            str(data),
            "--model",
            model,
            "-o",
            str(run),
            "--workers",
            str(workers),
            "--threads",
            str(threads),
            "--epochs",
            str(args.epochs),
            "--batch-size",
            str(args.batch_size),
            "--patience",
            "0",
            "-q",
        ]
        subprocess.run(
            cmd, check=True, env=_env(threads), stdout=subprocess.DEVNULL, start_new_session=True
        )
        metrics = json.loads((run / "metrics.json").read_text())
        return metrics["epoch_times_s"][1:] or metrics["epoch_times_s"]


def minimal_epochs(data: Path, model: str, *, args) -> list[float]:
    """Epoch times of the hand-written loop under torchrun with 2 workers x 1 thread."""
    with tempfile.TemporaryDirectory(prefix="ddp-min-") as tmp:
        out = Path(tmp) / "times.json"
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(free_port()),
            __file__,
            "--minimal-worker",
            "--dataset",
            str(data),
            "--model",
            model,
            "--epochs",
            str(args.epochs),
            "--batch-size",
            str(args.batch_size),
            "--out",
            str(out),
        ]
        subprocess.run(
            cmd, check=True, env=_env(1), stdout=subprocess.DEVNULL, start_new_session=True
        )
        times = json.loads(out.read_text())
        return times[1:] or times


def minimal_worker(args) -> None:
    """The reference: the smallest correct DDP loop over the same in-memory data."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DistributedSampler

    from flowsplit.data.store import load_dataset
    from flowsplit.models.registry import MODEL_SPECS, build_model, fit_input_scaler

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ds = load_dataset(args.dataset)
    view = next(v for v in MODEL_SPECS[args.model].views if ds.has_view(v))  # as flowsplit does
    idx = ds.split_indices("train")
    x = torch.from_numpy(np.asarray(ds.view(view)[idx]))
    y = torch.from_numpy(ds.labels[idx])
    torch.manual_seed(0)
    model = build_model(
        args.model, view=view, input_shape=ds.view_shape(view), n_classes=ds.n_classes
    )
    fit_input_scaler(model, x)
    model = DDP(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sampler = DistributedSampler(
        range(len(x)), num_replicas=world, rank=rank, seed=0, drop_last=True
    )
    per_worker = args.batch_size // world
    times = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler))
        t0 = time.perf_counter()
        for start in range(0, len(order), per_worker):
            rows = order[start : start + per_worker]
            loss = F.cross_entropy(model(x[rows]), y[rows])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        Path(args.out).write_text(json.dumps(times))
    dist.destroy_process_group()


def _env(threads: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "GLOO_SOCKET_IFNAME": "lo"}


def _environment() -> dict:
    import torch

    from flowsplit import __version__

    return {
        "flowsplit": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": len(os.sched_getaffinity(0)),
        "load_avg": os.getloadavg(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("bench-results/ddp_overhead.json"))
    p.add_argument("--dataset", type=Path, help="prepared dataset (default: synthetic)")
    p.add_argument("--n", type=int, default=4096, help="synthetic flows (default 4096)")
    p.add_argument("--models", default=",".join(MODELS), help="models for the speedup")
    p.add_argument("--overhead-model", default="cnn", help="model for the overhead ratio")
    p.add_argument("--epochs", type=int, default=3, help="epochs per run (first is dropped)")
    p.add_argument("--batch-size", type=int, default=64, help="global batch size")
    p.add_argument("--repeats", type=int, default=3, help="runs per measurement")
    p.add_argument("--quick", action="store_true", help="1024 flows, 2 epochs, 1 repeat")
    p.add_argument("--minimal-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.minimal_worker:
        minimal_worker(args)
        return 0
    if args.quick:
        args.n, args.epochs, args.repeats = 1024, 2, 1
    models = [m for m in args.models.split(",") if m]
    t_start = time.perf_counter()
    env_before = _environment()
    with tempfile.TemporaryDirectory(prefix="ddp-data-") as tmp:
        data = args.dataset or write_synthetic_dataset(Path(tmp) / "data", args.n)
        ours, ref = [], []
        for _ in range(args.repeats):  # interleaved, so drifting load hits both alike
            ours.append(
                statistics.median(
                    flowsplit_epochs(data, args.overhead_model, workers=2, threads=1, args=args)
                )
            )
            ref.append(statistics.median(minimal_epochs(data, args.overhead_model, args=args)))
            print(f"overhead run: flowsplit {ours[-1]:.3f} s, minimal {ref[-1]:.3f} s", flush=True)
        per_model = {}
        for model in models:
            runs = {"central_1t": [], "central_2t": [], "ddp_2x1t": []}
            for _ in range(args.repeats):
                for key, (w, t) in (
                    ("central_1t", (1, 1)),
                    ("central_2t", (1, 2)),
                    ("ddp_2x1t", (2, 1)),
                ):
                    runs[key].append(
                        statistics.median(
                            flowsplit_epochs(data, model, workers=w, threads=t, args=args)
                        )
                    )
            med = {k: statistics.median(v) for k, v in runs.items()}
            best = min(med["central_1t"], med["central_2t"])
            per_model[model] = {
                "epoch_time_s": med,
                "runs_s": runs,
                "speedup": best / med["ddp_2x1t"],
            }
            print(
                f"{model}: centralised {best:.2f} s/epoch, 2 workers "
                f"{med['ddp_2x1t']:.2f} s/epoch, speedup {per_model[model]['speedup']:.2f}x",
                flush=True,
            )
    result = {
        "overhead_ratio": statistics.median(ours) / statistics.median(ref),
        "speedup": {m: per_model[m]["speedup"] for m in models},
        "overhead": {
            "model": args.overhead_model,
            "flowsplit_epoch_s": ours,
            "minimal_epoch_s": ref,
            "workers": 2,
            "threads_per_worker": 1,
        },
        "per_model": per_model,
        "config": {
            "dataset": str(args.dataset or f"synthetic n={args.n}"),
            "epochs": args.epochs,
            "dropped_warmup_epochs": 1,
            "global_batch": args.batch_size,
            "repeats": args.repeats,
            "statistic": "median",
            "lr": 1e-3,
        },
        "environment": {"before": env_before, "after": _environment()},
        "bench_time_s": time.perf_counter() - t_start,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"overhead ratio {result['overhead_ratio']:.3f}; speedup {result['speedup']} -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
