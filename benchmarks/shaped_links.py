"""Two DDP "nodes" joined by a bandwidth-limited link: epoch time and comm share against the scaling model.

    python benchmarks/shaped_links.py --out bench-results/shaped_links.json \\
        [--mbit 1000,100,10] [--repeats 3] [--model cnn] [--steps 20] [--dataset DIR]
        [--comm-hook none] [--hooks none,fp16,powersgd --hook-mbit 10 --hook-epochs 15]

Needs root (network namespaces and traffic control); says so and exits 2 without.
The benchmark creates two network namespaces joined by a veth pair (10.231.0.1 and
10.231.0.2) and starts one torchrun node with one worker in each (gloo over the veth:
``GLOO_SOCKET_IFNAME``), running the same ``python -m flowsplit.train`` job a
two-machine cluster would run, capped at ``--steps`` optimiser steps an epoch. Links
are shaped with a token-bucket filter (``tc qdisc ... tbf``; ``netem`` is not available
on these kernels) on both ends of the pair. The namespaces (and with them the veth
pair and its qdiscs) are removed at the end, also after a failure.

**Links** (``--mbit``). One training job; the link changes between epochs (the
benchmark follows rank 0's ``train.log`` and re-shapes when an epoch ends, before the
next epoch's first all-reduce). After one unshaped warm-up epoch, every shaped epoch
is bracketed by unshaped ones: ``U, S_a, U, S_b, U, S_c`` per repeat and a final ``U``
(``2 + 2 x bandwidths x repeats`` epochs), the order of the bandwidths rotated each
repeat. The unshaped epochs on either side calibrate the
scaling model for the shaped epoch between them, so compute time drifting with the
machine's load (other jobs on a shared machine) moves calibration and measurement
together instead of showing up as model error.

The prediction for a shaped epoch is the scaling model's
(``flowsplit.experiments.dp.scaling``): compute (the neighbours' epoch time minus their
exposed all-reduce time) + their per-step synchronisation time (exposed all-reduce on
the unshaped veth, whose wire time for these sizes is microseconds: waiting for the
other node, gloo's own work) + the ring all-reduce of the epoch's measured gradient
payload over ``tbf_network(rate, burst)``: the tbf rate less TCP/IP/Ethernet framing
and ACKs, the first ``burst`` bytes of each step free (the bucket refills during
compute), no overlap with backward (these models fit in DDP's first bucket, so the
all-reduce starts when backward ends). Per bandwidth (medians over the repeats):
``epoch_s``, ``predicted_epoch_s``, ``comm_share`` = exposed all-reduce / epoch time,
``rel_error`` = ``|predicted - measured| / measured`` of the medians, and the same for
the all-reduce time alone (``comm_rel_error``). Wire bytes (the veth's transmit
counter) and TCP retransmissions are recorded per epoch to check the framing figure.

**Comm hooks** (``--hooks``). One full training per hook on a link fixed at
``--hook-mbit`` (default epoch limit and early stopping, no step cap): median epoch
time, exposed all-reduce time, payload and wire bytes per epoch, and the test
accuracy and macro-F1 of the kept model. One seed each.

Both nodes share this machine's cores, so on a loaded machine compute times are
inflated and noisy; the load average before and after is recorded.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from _common import ROOT, environment, write_json
from ddp_overhead import write_synthetic_dataset

from flowsplit.experiments.dp.scaling import Workload, comm_time, tbf_network

NS = ("fsl0", "fsl1")
VETH = ("fsl0v", "fsl1v")
ADDR = ("10.231.0.1", "10.231.0.2")
PORT = 29531
MTU = 1500
# The tbf queue holds 200 ms of traffic at the rate, and at least 4 MiB: more than the
# largest all-reduce message here (a ring of two sends half a bucket each way per phase),
# so TCP never loses packets at the shaper. A shorter queue (200 ms at 10 Mbit/s is
# 250 kB) dropped segments of every LSTM step (1,112 retransmitted over five epochs)
# and stalled on loss recovery, which a bandwidth-and-latency model does not describe.
QUEUE_S = 0.2
QUEUE_MIN_BYTES = 4 << 20
EPOCH_LINE = re.compile(r"epoch (\d+): loss")


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def create_link() -> None:
    """Two namespaces, each with loopback up and one end of a veth pair."""
    for ns in NS:
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "link", "add", VETH[0], "netns", NS[0], "type", "veth", "peer", "name", VETH[1])
    sh("ip", "link", "set", VETH[1], "netns", NS[1])
    for ns, dev, addr in zip(NS, VETH, ADDR, strict=True):
        sh("ip", "-n", ns, "link", "set", dev, "mtu", str(MTU))
        sh("ip", "-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")


def remove_link() -> None:
    for ns in NS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def burst_bytes(mbit: float) -> int:
    """tbf bucket: 10 ms of traffic, at least 16 KB (a few frames)."""
    return max(16384, int(mbit * 1e6 / 8 / 100))


def shape(mbit: float | None) -> None:
    """Token-bucket filter at ``mbit`` on both ends (None: unshaped), both at once."""
    procs = []
    for ns, dev in zip(NS, VETH, strict=True):
        if mbit is None:
            cmd = ["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"]
        else:
            burst = burst_bytes(mbit)
            cmd = ["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf"]
            limit = max(QUEUE_MIN_BYTES, int(QUEUE_S * mbit * 1e6 / 8) + burst)
            cmd += ["rate", f"{mbit:g}mbit", "burst", str(burst), "limit", str(limit)]
        procs.append((subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True), mbit))
    for proc, _ in procs:
        err = proc.communicate()[1]
        # Deleting the root qdisc of an unshaped device fails harmlessly ("no qdisc").
        if proc.returncode and mbit is not None:
            raise RuntimeError(f"tc failed: {err.strip()}")


def counters(pid: int) -> dict:
    """Bytes the node's veth sent and TCP segments it retransmitted (its namespace's /proc)."""
    out = {"tx_bytes": 0, "retrans_segs": 0, "out_segs": 0}
    for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name.strip() in VETH:
            out["tx_bytes"] = int(rest.split()[8])
    rows = [r.split() for r in Path(f"/proc/{pid}/net/snmp").read_text().splitlines()]
    tcp = [r for r in rows if r and r[0] == "Tcp:"]
    values = dict(zip(tcp[0][1:], tcp[1][1:], strict=True))
    out["retrans_segs"] = int(values["RetransSegs"])
    out["out_segs"] = int(values["OutSegs"])
    return out


def train_cmd(args, rank: int, out: Path, *, epochs: int, hook: str, capped: bool) -> list[str]:
    cmd = ["ip", "netns", "exec", NS[rank], sys.executable, "-m", "torch.distributed.run"]
    cmd += ["--nnodes", "2", "--node-rank", str(rank), "--nproc-per-node", "1"]
    cmd += ["--master-addr", ADDR[0], "--master-port", str(PORT)]
    cmd += ["-m", "flowsplit.train", str(args.dataset), "--model", args.model, "-o", str(out)]
    cmd += ["--threads", "1", "--epochs", str(epochs), "--batch-size", str(args.batch_size)]
    cmd += ["--comm-hook", hook, "--seed", str(args.seed)]
    if capped:  # timing: fixed-length epochs, no early stop
        cmd += ["--steps-per-epoch", str(args.steps), "--patience", "0"]
    return cmd


def run_job(args, work: Path, tag: str, *, epochs: int, hook: str, capped: bool, on_epoch=None):
    """One 2-node training job across the link; calls ``on_epoch(k, pid0)`` as epoch k ends.

    Returns rank 0's metrics and history.
    """
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT / "src"),
    }
    run = work / f"{tag}-node0"
    procs, logs = [], []
    for rank in (0, 1):
        out = work / f"{tag}-node{rank}"
        log = open(work / f"{tag}-node{rank}.log", "w")  # noqa: SIM115 - closed below
        logs.append(log)
        cmd = train_cmd(args, rank, out, epochs=epochs, hook=hook, capped=capped)
        node_env = {**env, "GLOO_SOCKET_IFNAME": VETH[rank]}
        procs.append(subprocess.Popen(cmd, env=node_env, stdout=log, stderr=subprocess.STDOUT))
    seen, deadline, pos = 0, time.monotonic() + args.timeout, 0
    try:
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{tag}: training ran past --timeout {args.timeout:g} s")
            train_log = run / "train.log"
            if on_epoch is not None and train_log.exists():
                with open(train_log) as fh:
                    fh.seek(pos)
                    chunk = fh.read()
                # Only whole lines: the logger may be mid-write.
                whole = chunk[: chunk.rfind("\n") + 1]
                pos += len(whole.encode())
                for m in EPOCH_LINE.finditer(whole):
                    assert int(m.group(1)) == seen, (m.group(0), seen)
                    on_epoch(seen, procs[0].pid)
                    seen += 1
            time.sleep(0.01)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    if any(p.returncode for p in procs):
        tail = (work / f"{tag}-node0.log").read_text().strip().splitlines()[-3:]
        raise RuntimeError(f"{tag}: training failed: {' | '.join(tail)}")
    metrics = json.loads((run / "metrics.json").read_text())
    hist = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=True)["history"]
    return metrics, hist


def link_schedule(mbits: list[float], repeats: int) -> list[float | None]:
    """Link of each epoch: an unshaped warm-up, then every shaped epoch between unshaped ones."""
    out: list[float | None] = [None]
    for r in range(repeats):
        k = r % len(mbits)
        for m in mbits[k:] + mbits[:k]:
            out += [None, m]
    out.append(None)
    return out


def delta(marks: list[dict], k: int, key: str) -> int | None:
    """Counter ``key`` over epoch ``k`` (``marks[k]``: as epoch k ended; none for epoch 0)."""
    return marks[k][key] - marks[k - 1][key] if 0 < k < len(marks) else None


def epoch_rows(hist: dict, schedule, batch_size: int, marks: list[dict]) -> list[dict]:
    """Per epoch: link, times, payload and wire bytes, retransmissions."""
    rows = []
    for k, mbit in enumerate(schedule):
        steps = math.ceil(hist["samples"][k] / batch_size)
        rows.append(
            {
                "epoch": k,
                "mbit": mbit,
                "steps": steps,
                "epoch_s": hist["epoch_time"][k],
                "exposed_comm_s": hist["exposed_comm"][k],
                "comm_s": hist["comm_time"][k],
                "payload_bytes": hist["comm_bytes"][k],
                "wire_bytes": delta(marks, k, "tx_bytes"),
                "retrans_segs": delta(marks, k, "retrans_segs"),
            }
        )
    return rows


def predict_epoch(row: dict, calib: list[dict], args) -> dict:
    """The scaling model's epoch and all-reduce time for shaped epoch ``row``.

    ``calib``: the unshaped epochs either side. Compute and per-step synchronisation
    come from them; the link only through the ring all-reduce of ``row``'s payload.
    """
    compute = statistics.mean(c["epoch_s"] - c["exposed_comm_s"] for c in calib)
    sync = statistics.mean(c["exposed_comm_s"] for c in calib)
    steps = row["steps"]
    workload = Workload(
        args.model,
        n_samples=steps * args.batch_size,
        param_bytes=round(row["payload_bytes"] / steps),
        batch_size=args.batch_size,
        global_batch=True,
    )
    net = tbf_network(row["mbit"], burst_bytes(row["mbit"]), mtu=MTU)
    comm = sync + comm_time(workload, 2, net)
    own_compute = row["epoch_s"] - row["exposed_comm_s"]
    return {
        "predicted_epoch_s": compute + comm,
        "predicted_comm_s": comm,
        # The network term alone: the epoch's own compute + the predicted all-reduce.
        "predicted_epoch_own_compute_s": own_compute + comm,
    }


def links_study(args, work: Path, mbits: list[float]) -> dict:
    schedule = link_schedule(mbits, args.repeats)
    marks: list[dict] = []

    def on_epoch(k: int, pid: int) -> None:
        if k + 1 < len(schedule):
            shape(schedule[k + 1])  # first: the next epoch is already starting
        marks.append(counters(pid))

    shape(schedule[0])
    metrics, hist = run_job(
        args,
        work,
        "links",
        epochs=len(schedule),
        hook=args.comm_hook,
        capped=True,
        on_epoch=on_epoch,
    )
    rows = epoch_rows(hist, schedule, args.batch_size, marks)
    return {**summarise(rows, mbits, args), "macro_f1": metrics["macro_f1"]}


def summarise(rows: list[dict], mbits: list[float], args) -> dict:
    """Predictions for each shaped epoch, and per bandwidth the medians over repeats."""
    for k, row in enumerate(rows):
        if row["mbit"] is not None:
            row.update(predict_epoch(row, [rows[k - 1], rows[k + 1]], args))
    unshaped = [r for r in rows[1:] if r["mbit"] is None]
    links = []
    for mbit in mbits:
        mine = [r for r in rows if r["mbit"] == mbit]
        med = {
            key: statistics.median(r[key] for r in mine)
            for key in (
                "epoch_s",
                "predicted_epoch_s",
                "exposed_comm_s",
                "predicted_comm_s",
                "predicted_epoch_own_compute_s",
            )
        }
        wire = [r["wire_bytes"] / r["payload_bytes"] for r in mine if r["wire_bytes"]]
        links.append(
            {
                "mbit": mbit,
                **med,
                "comm_share": statistics.median(r["exposed_comm_s"] / r["epoch_s"] for r in mine),
                "predicted_comm_share": med["predicted_comm_s"] / med["predicted_epoch_s"],
                "rel_error": abs(med["predicted_epoch_s"] - med["epoch_s"]) / med["epoch_s"],
                "rel_error_own_compute": abs(med["predicted_epoch_own_compute_s"] - med["epoch_s"])
                / med["epoch_s"],
                "comm_rel_error": abs(med["predicted_comm_s"] - med["exposed_comm_s"])
                / med["exposed_comm_s"],
                "rel_error_per_repeat": [
                    (r["predicted_epoch_s"] - r["epoch_s"]) / r["epoch_s"] for r in mine
                ],
                "wire_per_payload_byte": statistics.median(wire) if wire else None,
                "retrans_segs": sum(r["retrans_segs"] or 0 for r in mine),
                "repeats": len(mine),
            }
        )
    return {
        "unshaped": {
            "epoch_s": statistics.median(r["epoch_s"] for r in unshaped),
            "exposed_comm_s": statistics.median(r["exposed_comm_s"] for r in unshaped),
            "epochs": len(unshaped),
        },
        "links": links,
        "max_rel_error": max(r["rel_error"] for r in links),
        "max_comm_rel_error": max(r["comm_rel_error"] for r in links),
        "max_rel_error_own_compute": max(r["rel_error_own_compute"] for r in links),
        "epochs": rows,
    }


def hooks_study(args, work: Path, hooks: list[str]) -> list[dict]:
    out = []
    shape(args.hook_mbit)
    for hook in hooks:
        marks: list[dict] = []
        metrics, hist = run_job(
            args,
            work,
            f"hook-{hook}",
            epochs=args.hook_epochs,
            hook=hook,
            capped=False,
            on_epoch=lambda k, pid, marks=marks: marks.append(counters(pid)),
        )
        n = len(hist["epoch_time"])
        keep = slice(1, None) if n > 1 else slice(None)  # first epoch: warm-up
        wire = [
            {key: delta(marks, k, key) for key in ("tx_bytes", "retrans_segs")}
            for k in range(1, len(marks))
        ]
        row = {
            "comm_hook": hook,
            "mbit": args.hook_mbit,
            "epochs_run": n,
            "epoch_s": statistics.median(hist["epoch_time"][keep]),
            "exposed_comm_s": statistics.median(hist["exposed_comm"][keep]),
            "payload_bytes_per_epoch": statistics.median(hist["comm_bytes"][keep]),
            "wire_bytes_per_epoch": statistics.median(w["tx_bytes"] for w in wire)
            if wire
            else None,
            "retrans_segs": sum(w["retrans_segs"] for w in wire),
            "train_s": sum(hist["epoch_time"]),
            "accuracy": metrics["accuracy"],
            "macro_f1": metrics["macro_f1"],
            "best_epoch": metrics["best_epoch"],
        }
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


def reanalyse(args) -> int:
    """``--reanalyse``: the saved epochs through :func:`summarise` again, written to ``--out``."""
    try:
        doc = json.loads(args.reanalyse.read_text())
        rows, mbits = doc["epochs"], [row["mbit"] for row in doc["links"]]
        args.model, args.batch_size = doc["model"], doc["batch_size"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"{args.reanalyse}: not a shaped_links result with epochs ({exc})", file=sys.stderr)
        return 2
    doc.update(summarise(rows, mbits, args))
    doc["reanalysed"] = True
    write_json(args.out, doc)
    for row in doc["links"]:
        print(json.dumps({k: v for k, v in row.items() if k != "rel_error_per_repeat"}))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("bench-results/shaped_links.json"))
    p.add_argument(
        "--mbit", default="1000,100,10", help="bandwidths in Mbit/s, comma-separated ('' : none)"
    )
    p.add_argument("--repeats", type=int, default=3, help="shaped epochs per bandwidth")
    p.add_argument("--model", default="cnn")
    p.add_argument("--dataset", type=Path, help="prepared dataset (default: synthetic, 4000)")
    p.add_argument("--steps", type=int, default=20, help="optimiser steps per epoch (links)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--comm-hook", default="none", choices=("none", "fp16", "bf16", "powersgd"))
    p.add_argument(
        "--hooks",
        default="",
        help="comm hooks to train with on --hook-mbit, e.g. none,fp16,powersgd",
    )
    p.add_argument("--hook-mbit", type=float, default=10.0)
    p.add_argument("--hook-epochs", type=int, default=15, help="epoch limit of the hook runs")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per training job")
    p.add_argument(
        "--reanalyse",
        type=Path,
        metavar="JSON",
        help="recompute the predictions of a saved run's epochs with the current model; no training",
    )
    args = p.parse_args(argv)
    if args.reanalyse is not None:
        return reanalyse(args)
    mbits = [float(m) for m in args.mbit.split(",") if m.strip()]
    hooks = [h for h in args.hooks.split(",") if h.strip()]
    if not mbits and not hooks:
        p.error("nothing to do: give --mbit and/or --hooks")
    if os.geteuid() != 0:
        print("shaped_links.py needs root (ip netns, tc); run it as root", file=sys.stderr)
        return 2
    if not (shutil.which("ip") and shutil.which("tc")):
        print("shaped_links.py needs the ip and tc commands (iproute2)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="shaped-links-"))
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    doc = {
        "benchmark": "shaped_links",
        "model": args.model,
        "dataset": str(args.dataset) if args.dataset else "synthetic-4000",
        "comm_hook": args.comm_hook,
        "steps_per_epoch": args.steps,
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "mtu": MTU,
        "tbf": {
            "burst": "max(16 KB, 10 ms at the rate)",
            "limit": f"max({QUEUE_MIN_BYTES} B, {QUEUE_S:g} s at the rate + burst)",
        },
    }
    try:
        if args.dataset is None:
            args.dataset = write_synthetic_dataset(work / "data", 4000)
        remove_link()  # leftovers of an interrupted run
        create_link()
        if mbits:
            doc.update(links_study(args, work, mbits))
            for row in doc["links"]:
                print(json.dumps({k: v for k, v in row.items() if k != "rel_error_per_repeat"}))
        if hooks:
            doc["comm_hooks"] = hooks_study(args, work, hooks)
        doc["wall_s"] = time.perf_counter() - t0
        doc["load_average_before_after"] = [load_before, os.getloadavg()]
        doc["environment"] = environment()
        write_json(args.out, doc)
    finally:
        remove_link()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
