"""All-reduce micro-benchmark: time against message size on torch.distributed, and the fit.

    python benchmarks/allreduce.py --out bench-results/allreduce.json [--workers 2]

Writes the measurements, the fitted ring model (latency alpha, bandwidth beta) and its
error per size, with the conditions (backend, processes, threads, host, versions, date).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flowsplit.experiments.dp.allreduce import DEFAULT_SIZES, run_allreduce_benchmark
from flowsplit.experiments.dp.scaling import fit_allreduce, ring_allreduce_time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("bench-results/allreduce.json"))
    p.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    p.add_argument("--backend", default="gloo")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="threads per process")
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="bytes, comma list")
    args = p.parse_args(argv)

    sizes = [int(s) for s in args.sizes.split(",")]
    rec = run_allreduce_benchmark(
        sizes,
        n_workers=args.workers,
        backend=args.backend,
        repeats=args.repeats,
        threads_per_worker=args.threads,
    )
    net, max_err = fit_allreduce(
        [r["bytes"] for r in rec["rows"]],
        [r["time_s"] for r in rec["rows"]],
        n_workers=args.workers,
    )
    rec["fit"] = {
        "latency_s": net.latency_s,
        "bandwidth_Bps": net.bandwidth_Bps,
        "max_rel_error": max_err,
    }
    print(f"{'bytes':>10} {'measured s':>12} {'model s':>12} {'error':>7}")
    for r in rec["rows"]:
        model = ring_allreduce_time(r["bytes"], args.workers, net)
        r["model_s"] = model
        print(
            f"{r['bytes']:>10} {r['time_s']:>12.6f} {model:>12.6f} "
            f"{100 * (model - r['time_s']) / r['time_s']:>6.1f}%"
        )
    print(
        f"alpha {net.latency_s * 1e6:.1f} us, beta {net.bandwidth_Bps / 1e6:.0f} MB/s, "
        f"max error {100 * max_err:.1f} %  ({args.backend}, {args.workers} processes, "
        f"{args.threads} thread(s), {rec['cpu_count']} cores)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
