"""Split-learning round delays on the emulated testbed: the cost model against the clock.

    sudo python benchmarks/testbed_sfl.py --out bench-results/testbed_sfl.json

For three topologies (homogeneous, heterogeneous, slow-uplinks; 8 clients, 2
aggregators) and ``sfl``, ``hsfl`` and ``hsfl-ll`` at two cut pairs each, builds the
topology as a testbed (:mod:`flowsplit.testbed`: a network namespace per role, each
directed link shaped to its rate with ``tc``, each role's CPU a cgroup quota in the
ratio of the topology's speeds, 1.5 cores in all) and runs ``flowsplit sfl run --mode
dist --probe`` with one role per node (torchrun's environment). Each role imports and
loads its data unconstrained and joins its node's cgroup once set up
(``FLOWSPLIT_JOIN_CGROUP``), so the quota governs the run, not the start-up.

``--probe`` measures, inside the run and under the quotas, every role's compute speed
(timed training steps of its part: the cost model's compute term comes from this, not
from the topology's FLOP/s) and every assigned link's round trip and bandwidth; each
round's predicted timeline is the replay of the round's messages on that probed
topology (:mod:`flowsplit.federated.system.schedule`). The measured round is the
server's wall time from the round's first message to its averaging. Rounds after the
first are compared (the first pays one-off costs); ``rel_error = |predicted -
measured| / measured`` of their mean.

Beside it, ``calibrated_round_s`` and ``calibrated_rel_error``: the same replay with the
one term the probe measures poorly, the streams' buffering, calibrated on the run's
first (measured, not compared) round (``schedule.calibrate_buffer``); the uncalibrated
prediction uses the probe alone. ``max_rel_error_calibrated`` is their maximum.

Also per run, the probe's accuracy: each probed client-link bandwidth (both
directions) against the rate it was shaped to, and the clients' probed speed ratios
against their quota ratios.

Output: ``{"runs": [{"topology", "scheme", "cuts", "clients", "aggregators",
"predicted_round_s", "measured_round_s", "rel_error", ...}], "max_rel_error", ...}``.
Needs root (the testbed's namespaces, qdiscs and cgroups). The machine may be shared:
other processes compete for the CPU outside the quotas (the testbed's cgroup has a
high CPU weight, so they mostly lose).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

from flowsplit.federated.system import schedule  # noqa: E402
from flowsplit.federated.system.presets import homogeneous  # noqa: E402
from flowsplit.federated.system.topology import Topology, write_topology  # noqa: E402
from flowsplit.testbed import Testbed, TestbedSpec, compare, missing_requirement  # noqa: E402
from flowsplit.testbed.bed import burst_bytes  # noqa: E402

CORE = 1e10
"""FLOP/s a topology's node stands for per core of quota (placeholder: the probe measures)."""
MBIT = 1e6 / 8
MODEL_OPTIONS = ["channels=[16,32]", "embed=8", "hidden=32"]
SCHEMES = {
    "sfl": [(1, 1), (2, 2)],
    "hsfl": [(1, 2), (2, 3)],
    "hsfl-ll": [(1, 2), (1, 3)],
}


def make_topology(name: str, n: int = 8, a: int = 2) -> Topology:
    """The benchmark's topologies: speeds are cores of quota x CORE; links in Mbit/s.

    CPU: clients 0.1 core (heterogeneous: 0.05-0.2), aggregators 0.2, server 0.3: 1.5
    cores in all. Latency is not emulated: the topology's is the testbed's own (the
    probe measures it)."""
    base = homogeneous(n, a)
    client_cores = np.full(n, 0.1)
    ca_mbit = np.full((n, a), 40.0)
    as_mbit = np.full(a, 100.0)
    if name == "heterogeneous":
        client_cores = np.array([0.05, 0.2, 0.1, 0.05, 0.15, 0.1, 0.2, 0.05])[:n]
        rng = np.random.default_rng(1)
        ca_mbit = np.round(np.exp(rng.uniform(np.log(8), np.log(60), (n, a))), 1)
    elif name == "slow-uplinks":
        ca_mbit = np.full((n, a), 8.0)
        as_mbit = np.full(a, 20.0)
    return replace(
        base,
        name=name,
        description=f"testbed benchmark topology {name}",
        client_speed=client_cores * CORE,
        aggregator_speed=np.full(a, 0.2 * CORE),
        server_speed=0.3 * CORE,
        ca_latency=np.full((n, a), 1e-4),
        ca_bandwidth=ca_mbit * MBIT,
        as_latency=np.full(a, 1e-4),
        as_bandwidth=as_mbit * MBIT,
    )


def testbed_spec(topo: Topology) -> TestbedSpec:
    return TestbedSpec.from_topology(topo, cpu_budget=1.6, max_cpu=0.3)


def run_roles(
    tb: Testbed,
    argv: list[str],
    out: Path,
    *,
    port: int,
    timeout_s: float,
    dump: bool = False,
) -> list[int]:
    """``argv`` once per node (:func:`flowsplit.testbed.compare.run_roles`); ``dump``:
    each round's raw traces saved under ``out/traces`` (``_sfl_traced.py``)."""
    env = {"FLOWSPLIT_TRACE_DUMP": str(out / "traces")} if dump else None
    return compare.run_roles(tb, argv, out, port=port, timeout_s=timeout_s, env=env)


TRACED = Path(__file__).resolve().parent / "_sfl_traced.py"


def sfl_argv(dataset: str, topo_file: Path, scheme: str, cuts, out: Path, args) -> list[str]:
    head = [sys.executable, str(TRACED)] if args.dump_traces else ["flowsplit"]
    argv = [*head, "sfl", "run", dataset, "--mode", "dist", "--probe"]
    argv += ["--topology", str(topo_file), "--scheme", scheme, "--cuts", f"{cuts[0]},{cuts[1]}"]
    argv += ["--model", "cnn"]
    for opt in MODEL_OPTIONS:
        argv += ["--model-option", opt]
    argv += ["--rounds", str(args.rounds), "--batch-size", str(args.batch_size)]
    argv += ["--train-limit", str(args.train_limit), "--seed", str(args.seed)]
    argv += ["--timeout", "60", "-o", str(out), "--quiet", "--overwrite"]
    return argv


def applied_quotas(topo: Topology) -> np.ndarray:
    """(N,) the CPU share each client's cgroup really has (the testbed rounds a quota up
    to at least 1 ms per period, so a 0.05-core node gets 0.1 core at a 10 ms period)."""
    spec = testbed_spec(topo)
    return np.array(
        [spec.quota_us(spec.node(f"client{i}")) / spec.cpu_period_us for i in range(topo.n_clients)]
    )


def probe_accuracy(probe: dict, topo: Topology) -> dict:
    """Probed link bandwidths (both directions) against their shaped rates, probed bursts
    against the shaper's buckets; the clients' probed CPU shares against their cgroups'
    quotas (share ratios, and each share)."""
    errors, steady, bursts = [], [], []
    for link in probe["links"]:
        if "client" not in link:
            shaped = float(topo.as_bandwidth[link["backbone"]])
        else:
            shaped = float(topo.ca_bandwidth[link["client"], link["aggregator"]])
        if "burst_bytes" in link:
            bursts.append(abs(link["burst_bytes"] / burst_bytes(shaped * 8 / 1e6) - 1))
        for d in ("down", "up"):
            # The effective rate (the faster of a 0.2-s and a 0.4-s transfer: what the
            # topology gets); the steady-state one (extra bytes over extra time) beside.
            errors.append(abs(link[f"{d}_Bps"] / shaped - 1))
            steady.append(abs(link.get(f"{d}_steady_Bps", link[f"{d}_Bps"]) / shaped - 1))
    n = topo.n_clients
    shares = np.array([probe["clients"][str(i)]["cpu_share"] for i in range(n)])
    speeds = np.array([probe["clients"][str(i)]["flops_per_s"] for i in range(n)])
    quota = applied_quotas(topo)
    ratio_err = np.abs((shares / shares.mean()) / (quota / quota.mean()) - 1)
    return {
        "bandwidth_max_rel_error": float(max(errors)),
        "bandwidth_median_rel_error": float(statistics.median(errors)),
        "steady_bandwidth_max_rel_error": float(max(steady)),
        "steady_bandwidth_median_rel_error": float(statistics.median(steady)),
        "burst_median_rel_error": float(np.median(bursts)) if bursts else None,
        "burst_max_rel_error": float(max(bursts)) if bursts else None,
        "client_share_ratio_max_rel_error": float(ratio_err.max()),
        "client_share_max_rel_error": float(np.abs(shares / quota - 1).max()),
        "client_full_speed_spread": float(speeds.max() / speeds.min()),
        "probe_s": probe.get("seconds"),
    }


def one_run(tb, topo, topo_file, scheme, cuts, out, args, port) -> dict:
    argv = sfl_argv(args.dataset, topo_file, scheme, cuts, out, args)
    start = time.monotonic()
    codes = run_roles(tb, argv, out, port=port, timeout_s=args.run_timeout, dump=args.dump_traces)
    wall = time.monotonic() - start
    row = {"topology": topo.name, "scheme": scheme, "cuts": list(cuts)}
    row |= {"clients": topo.n_clients, "aggregators": topo.n_aggregators, "wall_s": wall}
    if any(codes) or not (out / "metrics.json").is_file():
        row["error"] = f"exit codes {codes}; logs in {out.parent / (out.name + '-logs')}"
        return row
    return row | measured_row(out, topo, args.dump_traces)


def measured_row(out: Path, topo: Topology, traces: bool, reanalyse: bool = False) -> dict:
    """A finished run's figures; ``reanalyse``: the prediction replayed again from its
    dumped traces with this code's model (the run's own kept as ``..._in_run``)."""
    metrics = json.loads((out / "metrics.json").read_text())
    rounds = metrics["rounds"][1:] or metrics["rounds"]
    pred = float(np.mean([r["predicted_round_s"] for r in rounds]))
    meas = float(np.mean([r["measured_round_s"] for r in rounds]))
    row = {
        "predicted_round_s": pred,
        "measured_round_s": meas,
        "rel_error": abs(pred - meas) / meas,
        "bound_round_s_nominal": float(np.mean([r["delay_s"] for r in rounds])),
        "phases": {k: [r["timing"][k] for r in rounds] for k in ("predicted", "measured")},
        "bytes_total": metrics["bytes_total"],
        "probe": probe_accuracy(json.loads((out / "probe.json").read_text()), topo),
    }
    calibrated = [r["calibrated_round_s"] for r in rounds if "calibrated_round_s" in r]
    if calibrated and len(calibrated) == len(rounds):
        row |= calibrated_figures(float(np.mean(calibrated)), meas, metrics["rounds"][0])
    if traces:
        row["ablation"] = ablation(out / "traces")
    if reanalyse:
        pred_now = meas * (1 + row["ablation"]["all"])
        row["predicted_round_s_in_run"] = pred
        row["predicted_round_s"] = pred_now
        row["rel_error"] = abs(pred_now - meas) / meas
        row |= calibrated_from_traces(out / "traces")
    return row


def calibrated_figures(calibrated: float, measured: float, first_round: dict) -> dict:
    """The prediction with the stream buffer calibrated on the first (measured) round."""
    buffer = first_round["timing"]["calibration"][schedule.BUFFER_KEY]
    return {
        "calibrated_round_s": calibrated,
        "calibrated_rel_error": abs(calibrated - measured) / measured,
        "calibrated_buffer_bytes": buffer,
    }


def calibrated_from_traces(traces: Path) -> dict:
    """:func:`calibrated_figures` again from dumped traces with this code's model: the
    buffer calibrated on round 1, rounds 2.. predicted with it."""
    import pickle

    rounds = [pickle.loads(f.read_bytes()) for f in sorted(traces.glob("round*.pkl"))]
    if len(rounds) < 2:
        return {}
    pred, meas, buffer = [], [], None
    for d in rounds:
        topo, n = d["predict_on"], d["predict_on"].n_aggregators
        trace = schedule.rescale_compute(d["traces"], d["topology"], topo)
        measured = schedule.timeline(d["traces"], n)["round_s"]
        if buffer is None:
            buffer = schedule.calibrate_buffer(trace, topo, measured)
            continue
        topo = schedule.with_buffer(topo, buffer)
        pred.append(schedule.timeline(schedule.replay(trace, topo), n)["round_s"])
        meas.append(measured)
    first = {"timing": {"calibration": {schedule.BUFFER_KEY: buffer}}}
    return calibrated_figures(float(np.mean(pred)), float(np.mean(meas)), first)


ABLATIONS = {
    "none_of_the_transport_costs": ("byte_cpu_s", "busy_wake_s"),
    "without_byte_cpu": ("byte_cpu_s",),
    "without_busy_sender": ("busy_wake_s",),
}


def ablation(traces: Path) -> dict:
    """The model's relative error (signed, mean of rounds 2..) with parts of the transport
    costs left out: each round's traced messages replayed on the probed topology less
    those keys (the run's own prediction has them all)."""
    import pickle

    rounds = [pickle.loads(f.read_bytes()) for f in sorted(traces.glob("round*.pkl"))]
    rounds = rounds[1:] or rounds
    out = {}
    for name, keys in {"all": (), **ABLATIONS}.items():
        pred, meas = [], []
        for d in rounds:
            topo = d["predict_on"]
            extra = {k: v for k, v in topo.extra.items() if not k.endswith(keys or ("-",))}
            topo = replace(topo, extra=extra)
            trace = schedule.rescale_compute(d["traces"], d["topology"], d["predict_on"])
            n = topo.n_aggregators
            pred.append(schedule.timeline(schedule.replay(trace, topo), n)["round_s"])
            meas.append(schedule.timeline(d["traces"], n)["round_s"])
        out[name] = float(np.mean(pred) / np.mean(meas) - 1)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--dataset", default=None, help="prepared dataset (default: demo captures)")
    p.add_argument("--topologies", default="homogeneous,heterogeneous,slow-uplinks")
    p.add_argument("--schemes", default="sfl,hsfl,hsfl-ll")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--train-limit", type=int, default=384)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-timeout", type=float, default=240.0)
    p.add_argument("--keep", default=None, help="keep run directories here")
    p.add_argument(
        "--dump-traces",
        action="store_true",
        help="save each round's raw event traces under the run directory (with --keep)",
    )
    p.add_argument(
        "--reanalyse",
        default=None,
        metavar="DIR",
        help="no runs: the runs kept in DIR (--keep with --dump-traces) predicted again "
        "from their traces with this code's model",
    )
    p.add_argument(
        "--only", default=None, help="only these runs: SCHEME:A,C;... (e.g. 'hsfl:2,3;hsfl-ll:1,3')"
    )
    args = p.parse_args(argv)
    why = missing_requirement()
    if why:
        print(f"testbed_sfl: {why}", file=sys.stderr)
        return 2
    _common.single_thread()
    only = None
    if args.only:
        only = set()
        for item in args.only.split(";"):
            scheme, _, cuts = item.partition(":")
            only.add((scheme, tuple(int(c) for c in cuts.split(","))))
    runs = []
    if args.reanalyse:
        for tname in args.topologies.split(","):
            topo = make_topology(tname)
            for scheme in args.schemes.split(","):
                for cuts in SCHEMES[scheme]:
                    out = Path(args.reanalyse) / f"{tname}-{scheme}-{cuts[0]}{cuts[1]}"
                    row = {"topology": tname, "scheme": scheme, "cuts": list(cuts)}
                    row |= {"clients": topo.n_clients, "aggregators": topo.n_aggregators}
                    if not (out / "metrics.json").is_file():
                        runs.append(row | {"error": f"no finished run in {out}"})
                        continue
                    runs.append(row | measured_row(out, topo, True, reanalyse=True))
                    print(f"{tname:14s} {scheme:8s} {cuts} err {runs[-1]['rel_error']:.3f}")
    with tempfile.TemporaryDirectory(prefix="testbed-sfl-") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        if args.dataset is None and not args.reanalyse:
            args.dataset = str(work / "demo")
            if not Path(args.dataset).is_dir():
                subprocess.run(
                    [sys.executable, "-m", "flowsplit", "prepare", str(_common.ROOT / "demo" /
                     "captures"), "-o", args.dataset, "--quiet"], check=True)  # fmt: skip
        port = 29600
        for tname in [] if args.reanalyse else args.topologies.split(","):
            topo = make_topology(tname)
            topo_file = work / f"{tname}.toml"
            write_topology(topo, topo_file)
            with Testbed(testbed_spec(topo)) as tb:
                for scheme in args.schemes.split(","):
                    for cuts in SCHEMES[scheme]:
                        if only is not None and (scheme, tuple(cuts)) not in only:
                            continue
                        port += 1
                        out = work / f"{tname}-{scheme}-{cuts[0]}{cuts[1]}"
                        row = one_run(tb, topo, topo_file, scheme, cuts, out, args, port)
                        runs.append(row)
                        print(
                            f"{tname:14s} {scheme:8s} {cuts} predicted "
                            f"{row.get('predicted_round_s', float('nan')):.3f} s measured "
                            f"{row.get('measured_round_s', float('nan')):.3f} s err "
                            f"{row.get('rel_error', float('nan')):.3f} calibrated "
                            f"{row.get('calibrated_rel_error', float('nan')):.3f} "
                            f"{row.get('error', '')} ({row['wall_s']:.0f} s)",
                            flush=True,
                        )
    ok = [r for r in runs if "rel_error" in r]
    burst_errs = [r["probe"]["burst_median_rel_error"] for r in ok]
    burst_errs = [e for e in burst_errs if e is not None]
    result = {
        "benchmark": "testbed_sfl",
        "environment": _common.environment(
            note="2-core machine shared with other engineers; testbed quotas 1.5 cores"
        ),
        "settings": {
            "model": "cnn " + " ".join(MODEL_OPTIONS),
            "rounds": args.rounds,
            "compared": "mean of rounds 2.. (predicted: replay on the probed topology)",
            "batch_size": args.batch_size,
            "train_limit": args.train_limit,
            "reanalysed_from": args.reanalyse,
        },
        "runs": runs,
        "max_rel_error": max((r["rel_error"] for r in ok), default=None),
        "max_rel_error_calibrated": max(
            (r["calibrated_rel_error"] for r in ok if "calibrated_rel_error" in r), default=None
        ),
        "mean_rel_error": float(np.mean([r["rel_error"] for r in ok])) if ok else None,
        "failed_runs": len(runs) - len(ok),
        "probe_bandwidth_max_rel_error": max(
            (r["probe"]["bandwidth_max_rel_error"] for r in ok), default=None
        ),
        "probe_client_share_ratio_max_rel_error": max(
            (r["probe"]["client_share_ratio_max_rel_error"] for r in ok), default=None
        ),
        "probe_bandwidth_median_rel_error": float(
            np.median([r["probe"]["bandwidth_median_rel_error"] for r in ok])
        )
        if ok
        else None,
        "probe_burst_median_rel_error": float(np.median(burst_errs)) if burst_errs else None,
    }
    with_ablation = [r for r in ok if "ablation" in r]
    if with_ablation:
        result["ablation_max_abs_rel_error"] = {
            k: max(abs(r["ablation"][k]) for r in with_ablation)
            for k in with_ablation[0]["ablation"]
        }
    _common.write_json(args.out, result)
    print(
        f"wrote {args.out}: max_rel_error {result['max_rel_error']}, calibrated on round 1: "
        f"{result['max_rel_error_calibrated']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
