"""Two DDP "nodes" joined by a bandwidth-limited link: epoch time and comm share against the scaling model.

    python benchmarks/shaped_links.py --out bench-results/shaped_links.json \\
        [--mbit 1000,100,10] [--model cnn] [--steps 20] [--epochs 3] [--dataset DIR]
        [--comm-hook none]

Needs root (network namespaces and traffic control); says so and exits 2 without.
The benchmark creates two network namespaces joined by a veth pair (10.231.0.1 and
10.231.0.2), and for each bandwidth puts a token-bucket filter (``tc qdisc ... tbf``;
``netem`` is not available on these kernels) on both ends of the pair. In each
namespace it starts one torchrun node with one worker process (gloo over the veth:
``GLOO_SOCKET_IFNAME``), running the same ``python -m flowsplit.train`` job a
two-machine cluster would run, capped at ``--steps`` optimiser steps an epoch. The
namespaces (and with them the veth pair and its qdiscs) are removed at the end,
also after a failure.

Per bandwidth, from rank 0's ``metrics.json`` and checkpoint history (first epoch
dropped as warm-up, medians over the rest): ``epoch_s``, the all-reduce busy time
``comm_s`` and ``exposed_comm_s``, and ``comm_share`` = exposed / epoch time (the part
of the epoch spent waiting on the link). The prediction is the scaling model's
(``flowsplit.experiments.scaling.ScalingModel``), fitted on the unshaped veth run
(compute per sample, and the per-step synchronisation overhead beyond wire time)
and given a ``Network`` of each bandwidth (latency 50 us): compute + overhead +
ring all-reduce of the measured gradient bytes per step, no overlap with compute.
``max_rel_error`` is the largest ``|predicted - measured| / measured`` of the epoch
time, ``max_comm_rel_error`` the same for the all-reduce time alone (the network
term, which compute-time drift on a shared machine does not blur).

Both nodes share this machine's cores: on a loaded machine compute times are
inflated and noisy (the load average is recorded), which moves the fast links'
figures most; the slow links are dominated by the link.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from _common import ROOT, environment, write_json

from flowsplit.experiments.scaling import Network, ScalingModel, Workload

NS = ("fsl0", "fsl1")
VETH = ("fsl0v", "fsl1v")
ADDR = ("10.231.0.1", "10.231.0.2")
PORT = 29531
LATENCY_S = 50e-6  # a veth hop's latency is tens of microseconds; negligible at these rates


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def create_link() -> None:
    """Two namespaces, each with loopback up and one end of a veth pair."""
    for ns in NS:
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh(
        "ip",
        "link",
        "add",
        VETH[0],
        "netns",
        NS[0],
        "type",
        "veth",
        "peer",
        "name",
        VETH[1],
        "netns",
        NS[1],
    )
    for ns, dev, addr in zip(NS, VETH, ADDR, strict=True):
        sh("ip", "-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")


def remove_link() -> None:
    for ns in NS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def shape(mbit: float | None) -> None:
    """Token-bucket filter at ``mbit`` on both ends (None: unshaped)."""
    for ns, dev in zip(NS, VETH, strict=True):
        subprocess.run(
            ["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"],
            capture_output=True,
            check=False,
        )
        if mbit is None:
            continue
        # The bucket holds 10 ms of traffic (at least 16 KB, a few frames): large enough
        # for the rate to be reached, small enough that bursts do not cheat the limit.
        burst = max(16384, int(mbit * 1e6 / 8 / 100))
        sh(
            "ip",
            "netns",
            "exec",
            ns,
            "tc",
            "qdisc",
            "add",
            "dev",
            dev,
            "root",
            "tbf",
            "rate",
            f"{mbit}mbit",
            "burst",
            str(burst),
            "latency",
            "200ms",
        )


def run_pair(args, work: Path, tag: str) -> dict:
    """One 2-node training job across the link; rank 0's measurements."""
    procs = []
    for rank in (0, 1):
        out = work / f"{tag}-node{rank}"
        cmd = [
            "ip",
            "netns",
            "exec",
            NS[rank],
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "2",
            "--node-rank",
            str(rank),
            "--nproc-per-node",
            "1",
            "--master-addr",
            ADDR[0],
            "--master-port",
            str(PORT),
            "-m",
            "flowsplit.train",
            str(args.dataset),
            "--model",
            args.model,
            "-o",
            str(out),
            "--threads",
            "1",
            "--epochs",
            str(args.epochs),
            "--steps-per-epoch",
            str(args.steps),
            "--batch-size",
            str(args.batch_size),
            "--patience",
            "0",
            "--comm-hook",
            args.comm_hook,
            "-q",
        ]
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "GLOO_SOCKET_IFNAME": VETH[rank],
            "PYTHONPATH": str(ROOT / "src"),
        }
        log = open(work / f"{tag}-node{rank}.log", "w")  # noqa: SIM115 - closed below
        procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    try:
        for proc, _ in procs:
            proc.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        for proc, _ in procs:
            proc.kill()
        raise
    finally:
        for _, log in procs:
            log.close()
    if any(proc.returncode for proc, _ in procs):
        tail = (work / f"{tag}-node0.log").read_text().strip().splitlines()[-3:]
        raise RuntimeError(f"{tag}: training failed: {' | '.join(tail)}")
    run = work / f"{tag}-node0"
    m = json.loads((run / "metrics.json").read_text())
    hist = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=True)["history"]
    keep = slice(1, None) if len(m["epoch_times_s"]) > 1 else slice(None)
    epoch = statistics.median(m["epoch_times_s"][keep])
    comm = statistics.median(hist["comm_time"][keep])
    exposed = statistics.median(hist["exposed_comm"][keep])
    steps = m["samples_per_s"] and round(hist["samples"][-1] / args.batch_size)
    return {
        "epoch_s": epoch,
        "comm_s": comm,
        "exposed_comm_s": exposed,
        "comm_share": exposed / epoch if epoch else None,
        "compute_s": epoch - comm,
        "bytes_per_step": hist["comm_bytes"][-1] / max(steps, 1),
        "steps_per_epoch": steps,
        "macro_f1": m["macro_f1"],
    }


def predict(base: dict, mbit: float, args) -> dict:
    """The scaling model's epoch time and comm share on a link of ``mbit`` Mbit/s.

    Fitted on the unshaped run: compute ``c`` from its epoch minus all-reduce time, and
    the per-step synchronisation overhead ``s`` from its all-reduce time (on a veth the
    wire time of a few hundred KB is microseconds, so all of it is overhead: gloo's
    progress threads, waiting for the other node on a shared machine). The link enters
    only through the ring all-reduce term of the measured gradient bytes.
    """
    steps = base["steps_per_epoch"]
    n_samples = steps * args.batch_size
    workload = Workload(
        args.model,
        n_samples=n_samples,
        param_bytes=int(base["bytes_per_step"]),
        batch_size=args.batch_size,
        global_batch=True,
        bucket_bytes=int(25 * 2**20),
    )
    model = ScalingModel(
        workload,
        compute_per_sample_s=2 * base["compute_s"] / n_samples,  # one worker's rate
        per_step_s=0.0,
        network=Network(f"tbf {mbit:g} Mbit/s", LATENCY_S, mbit * 1e6 / 8),
        sync_per_step_s=base["comm_s"] / steps,
    )
    return model.predict(2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("bench-results/shaped_links.json"))
    p.add_argument("--mbit", default="1000,100,10", help="bandwidths in Mbit/s, comma-separated")
    p.add_argument("--model", default="cnn")
    p.add_argument("--dataset", type=Path, help="prepared dataset (default: synthetic, 4000)")
    p.add_argument("--steps", type=int, default=20, help="optimiser steps per epoch")
    p.add_argument("--epochs", type=int, default=3, help="epochs (the first is warm-up)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--comm-hook", default="none", choices=("none", "fp16", "bf16", "powersgd"))
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per training job")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("shaped_links.py needs root (ip netns, tc); run it as root", file=sys.stderr)
        return 2
    if not (shutil.which("ip") and shutil.which("tc")):
        print("shaped_links.py needs the ip and tc commands (iproute2)", file=sys.stderr)
        return 2
    mbits = [float(m) for m in args.mbit.split(",")]
    work = Path(tempfile.mkdtemp(prefix="shaped-links-"))
    load_before = os.getloadavg()
    try:
        if args.dataset is None:
            sys.path.insert(0, str(Path(__file__).parent))
            from ddp_overhead import write_synthetic_dataset

            args.dataset = write_synthetic_dataset(work / "data", 4000)
        remove_link()  # leftovers of an interrupted run
        create_link()
        t0 = time.perf_counter()
        shape(None)
        base = run_pair(args, work, "unshaped")
        print(json.dumps({"unshaped": base}), flush=True)
        links = []
        for mbit in mbits:
            shape(mbit)
            row = {"mbit": mbit, **run_pair(args, work, f"{mbit:g}mbit")}
            pred = predict(base, mbit, args)
            row["predicted_epoch_s"] = pred["epoch_time_s"]
            row["predicted_comm_share"] = pred["comm_share"]
            # The network term alone: measured all-reduce time against the model's.
            row["predicted_comm_s"] = pred["comm_s"]
            row["comm_rel_error"] = abs(pred["comm_s"] - row["comm_s"]) / row["comm_s"]
            row["rel_error"] = abs(row["predicted_epoch_s"] - row["epoch_s"]) / row["epoch_s"]
            links.append(row)
            print(json.dumps(row), flush=True)
        doc = {
            "benchmark": "shaped_links",
            "model": args.model,
            "comm_hook": args.comm_hook,
            "steps_per_epoch": args.steps,
            "batch_size": args.batch_size,
            "unshaped": base,
            "links": links,
            "max_rel_error": max(r["rel_error"] for r in links) if links else None,
            "max_comm_rel_error": max(r["comm_rel_error"] for r in links) if links else None,
            "wall_s": time.perf_counter() - t0,
            "load_average_before_after": [load_before, os.getloadavg()],
            "environment": environment(),
        }
        write_json(args.out, doc)
    finally:
        remove_link()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
