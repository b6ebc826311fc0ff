"""Split federated learning at the scale of a federation: registered clients vs memory and time.

    python benchmarks/sfl_scale.py --out bench-results/sfl_scale.json

For 1,000, 10,000 and 100,000 registered clients (``--clients``), 100 aggregators and
100 clients sampled per round (``--clients-per-round``), ``hsfl`` with cuts 1,2 of the
registry CNN, 3 rounds, ``--replan every-round`` (the planner's assignment re-planned
for each round's sample, warm-started): each point runs in a fresh process, which
reports its peak resident set size (``ru_maxrss``: everything the run built, the data
set's pages it touched included) and the median wall time of a round (from the end of
one round's record to the next: sampling, planning, training the sample, evaluating),
with its CPU seconds beside it (``round_cpu_s``: steadier on a shared machine).

Data: the embedded capture ``demo/captures`` prepared into a temporary directory. When
it has fewer training rows than ``--rows-per-client`` x clients, a dataset of the same
shape is written instead (the CNN's ``bytes`` view and the capture's classes; training
rows drawn with replacement from the capture's, seeded; validation and test rows the
capture's own), so every point evaluates on the same 323 rows and every sampled client
holds about as many rows: the time of a round grows with the sample, not with the rows.

JSON: ``{"points": [{"clients", "aggregators", "per_round", "peak_rss_mb", "round_s",
...}], "config": ..., "environment": ...}``; each point also gives ``mode`` (``sim``),
``setup_s`` (the run's preparation: partition, topology, model), ``round_s_all`` and
``planning_s`` / ``planning_cpu_s`` (the planner's wall / CPU seconds per round, median).

**Dist points** (``--dist-clients``, default 10,000; ``--dist-clients`` with no value
skips them): the same run in ``--mode dist`` with a pool of ``--client-workers`` (4)
client worker processes and ``--dist-aggregators`` (10: every aggregator is a process
of its own, see docs/sfl-scale.md) aggregators, launched by ``launch_roles`` on
127.0.0.1. ``peak_rss_mb`` is the largest sum, over one poll, of the resident set sizes
(``VmRSS``) of every process of the run (the launcher, the fork server and every role;
polled every 0.25 s); ``peak_pss_mb`` the same for the proportional set sizes (``Pss``
of ``smaps_rollup``: pages shared between the roles, torch's libraries above all, counted
once in all), the memory the run really takes. ``round_s`` is the median over rounds of
the server's time from planning a round to recording it (its log's timestamps: sampling,
planning, training the sample, evaluating, the checkpoint); ``round_cpu_s`` the CPU
seconds every process of the run spent in that time (``utime + stime`` of the tree,
polled; the polls inside the round, so up to 0.5 s of it may be missed);
``startup_s`` the time from the launch to the first round's planning (processes, data,
gloo pairs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # benchmark helpers (environment record, JSON); before numpy/torch

DEFAULT_CLIENTS = (1_000, 10_000, 100_000)


def _prepare_demo(tmp: Path) -> Path:
    out = tmp / "demo"
    demo = _common.ROOT / "demo" / "captures"
    subprocess.run(
        [sys.executable, "-m", "flowsplit", "prepare", str(demo), "-o", str(out), "--quiet"],
        check=True,
    )
    return out


def _resampled(demo: Path, out: Path, n_train: int, seed: int = 0) -> Path:
    """The capture's shape with ``n_train`` training rows drawn from its own (see above)."""
    import numpy as np

    from flowsplit.data.store import load_dataset, write_dataset

    ds = load_dataset(demo)
    train = ds.split_indices("train")
    rest = np.concatenate([ds.split_indices("val"), ds.split_indices("test")])
    pick = np.random.default_rng(seed).choice(train, n_train, replace=True)
    rows = np.concatenate([pick, rest])
    meta = ds.meta.iloc[rows][["source", "group", "label", "label_name", "split"]].copy()
    meta.insert(0, "flow_id", np.arange(len(rows)))
    meta = meta.reset_index(drop=True)
    view = np.asarray(ds.view("bytes"))[rows]
    return write_dataset(out, meta=meta, classes=list(ds.classes), views={"bytes": view})


def _config(args: argparse.Namespace, **extra):
    """The run every point makes (sim and dist alike), from the benchmark's options."""
    from flowsplit.federated.config import SFLConfig, parse_cuts

    return SFLConfig(
        scheme=args.scheme,
        cuts=parse_cuts(args.cuts),
        rounds=args.rounds,
        batch_size=args.batch_size,
        clients_per_round=args.per_round,
        replan="every-round" if args.replan else "never",
        seed=args.seed,
        threads=args.threads,
        **extra,
    )


def run_point(args: argparse.Namespace) -> dict:
    """One point, in this process (the parent starts one process per point)."""
    import numpy as np
    import torch

    from flowsplit.federated.setup import RegistryModel, prepare_run
    from flowsplit.federated.sim import run_simulation
    from flowsplit.federated.system.presets import resolve_topology
    from flowsplit.planner.replan import replanning_policy

    if args.mode == "dist":
        return run_dist_point(args)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    cfg = _config(args)
    topo = resolve_topology(args.topology, n_clients=args.point, n_aggregators=args.aggregators)
    setup = prepare_run(cfg, dataset=args.dataset, model_fn=RegistryModel("cnn"), topology=topo)
    setup_s = time.perf_counter() - t0
    policy = replanning_policy(cfg) if args.replan else None
    planning_cpu: list[float] = []
    if policy is not None:  # the planner's CPU seconds too (the machine may be shared)
        plan_for = policy.assignment_for_round

        def timed(*a, **kw):
            c0 = time.process_time()
            out = plan_for(*a, **kw)
            planning_cpu.append(time.process_time() - c0)
            return out

        policy.assignment_for_round = timed
    marks = [(time.perf_counter(), time.process_time())]
    result = run_simulation(
        setup,
        policy=policy,
        on_round=lambda rec: marks.append((time.perf_counter(), time.process_time())),
    )
    rounds = np.diff([m[0] for m in marks]).tolist()
    rounds_cpu = np.diff([m[1] for m in marks]).tolist()
    planning = [e["planning_s"] for e in getattr(policy, "log", [])]
    from flowsplit.util import peak_rss_mb

    return {
        "mode": "sim",
        "clients": args.point,
        "aggregators": args.aggregators,
        "per_round": args.per_round,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "round_s": statistics.median(rounds),
        "round_s_all": [round(r, 4) for r in rounds],
        "round_cpu_s": statistics.median(rounds_cpu),
        "round_cpu_s_all": [round(r, 4) for r in rounds_cpu],
        "setup_s": round(setup_s, 3),
        "planning_cpu_s": statistics.median(planning_cpu) if planning_cpu else None,
        "planning_s": statistics.median(planning) if planning else None,
        "planning_s_all": [round(p, 5) for p in planning],
        "training_rows": int(setup.n_samples.sum()),
        "clients_without_rows": int(result.info["sampling"]["clients_without_rows"]),
        "sampled_rows_per_round": [
            int(setup.n_samples[r["sampled"]].sum()) for r in result.history
        ],
        "final_accuracy": result.history[-1]["accuracy"],
        "dataset": args.dataset_kind,
    }


def _descendants(root: int) -> list[int]:
    """``root`` and every process below it (from ``/proc/*/stat``'s parent pids)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _kb(path: Path, field: str) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


class TreeMemory:
    """Polls the memory of this process and all its descendants (see the docstring)."""

    def __init__(self, period_s: float = 0.25):
        import threading

        self.period_s = period_s
        self.peak_rss_kb = self.peak_pss_kb = self.most_processes = 0
        self.cpu: list[tuple[float, float]] = []
        """(unix time, CPU seconds of every process of the tree so far) per poll: a
        process that ended counts with its last polled CPU time."""
        self._ticks: dict[int, int] = {}
        self._tick = os.sysconf("SC_CLK_TCK")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = pss = n = 0
            for pid in _descendants(os.getpid()):
                base = Path("/proc") / str(pid)
                try:
                    rss += _kb(base / "status", "VmRSS:")
                    pss += _kb(base / "smaps_rollup", "Pss:")
                    stat = (base / "stat").read_text().rsplit(")", 1)[1].split()
                    self._ticks[pid] = int(stat[11]) + int(stat[12])  # utime, stime
                    n += 1
                except (OSError, ValueError, IndexError):  # ended between listing and read
                    continue
            self.cpu.append((time.time(), sum(self._ticks.values()) / self._tick))
            self.peak_rss_kb = max(self.peak_rss_kb, rss)
            self.peak_pss_kb = max(self.peak_pss_kb, pss)
            self.most_processes = max(self.most_processes, n)
            self._stop.wait(self.period_s)

    def cpu_between(self, start: float, end: float) -> float | None:
        """CPU seconds the tree spent from ``start`` to ``end`` (unix times; the polls
        nearest inside them; None when no two polls fall between)."""
        inside = [c for t, c in self.cpu if start <= t <= end]
        return inside[-1] - inside[0] if len(inside) > 1 else None

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _log_times(path: Path, pattern: str) -> dict[int, float]:
    """``{round: unix time}`` of the lines of a role's log matching ``pattern`` (a regex
    with the round number as its group); the log's time stamps are local, to the ms."""
    import datetime as dt
    import re

    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.search(pattern, line)
        if m:
            stamp = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            out[int(m.group(1))] = stamp.timestamp()
    return out


def run_dist_point(args: argparse.Namespace) -> dict:
    """One dist point: the run on a pool of client workers, its whole process tree polled."""
    import numpy as np
    import torch

    from flowsplit.federated.dist import launch_roles
    from flowsplit.federated.setup import RegistryModel, prepare_run
    from flowsplit.federated.system.presets import resolve_topology
    from flowsplit.planner.replan import replanning_policy

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    cfg = _config(args, timeout_s=args.timeout)
    topo = resolve_topology(
        args.topology, n_clients=args.point, n_aggregators=args.dist_aggregators
    )
    model = RegistryModel("cnn")
    setup = prepare_run(cfg, dataset=args.dataset, model_fn=model, topology=topo)
    setup_s = time.perf_counter() - t0
    policy = replanning_policy(cfg) if args.replan else None
    out = Path(tempfile.mkdtemp(prefix="sfl-scale-dist-"))
    launched = time.time()
    with TreeMemory() as memory:
        result = launch_roles(
            setup,
            dataset=args.dataset,
            model_fn=model,
            out_dir=out,
            quiet=True,
            policy=policy,
            client_workers=args.client_workers,
        )
    log = out / "logs" / "server.log"
    planned = _log_times(log, r"server: round (\d+): planning")
    recorded = _log_times(log, r"round (\d+) recorded")
    rounds = [recorded[r] - planned[r] for r in sorted(recorded)]
    rounds_cpu = [memory.cpu_between(planned[r], recorded[r]) for r in sorted(recorded)]
    return {
        "mode": "dist",
        "clients": args.point,
        "aggregators": args.dist_aggregators,
        "per_round": args.per_round,
        "client_workers": args.client_workers,
        "peak_rss_mb": round(memory.peak_rss_kb / 1024, 1),
        "peak_pss_mb": round(memory.peak_pss_kb / 1024, 1),
        "processes": memory.most_processes,
        "round_s": statistics.median(rounds),
        "round_s_all": [round(r, 3) for r in rounds],
        "round_cpu_s": statistics.median([c for c in rounds_cpu if c is not None] or [0.0]),
        "round_cpu_s_all": [None if c is None else round(c, 2) for c in rounds_cpu],
        "execute_s_all": [round(r["wall_s"], 3) for r in result.history],
        "startup_s": round(planned[1] - launched, 2),
        "setup_s": round(setup_s, 3),
        "training_rows": int(setup.n_samples.sum()),
        "sampled_rows_per_round": [
            int(setup.n_samples[r["sampled"]].sum()) for r in result.history
        ],
        "bytes_total_per_round": [int(r["bytes_total"]) for r in result.history],
        "bytes_received_equal": all(
            r["bytes_received_total"] == r["bytes_total"] for r in result.history
        ),
        "final_accuracy": result.history[-1]["accuracy"],
        "dataset": args.dataset_kind,
        "load_average_after": list(np.round(os.getloadavg(), 2)),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("bench-results/sfl_scale.json"))
    p.add_argument("--clients", type=int, nargs="*", default=list(DEFAULT_CLIENTS))
    p.add_argument("--dist-clients", type=int, nargs="*", default=[10_000])
    p.add_argument("--dist-aggregators", type=int, default=10)
    p.add_argument("--client-workers", type=int, default=4)
    p.add_argument("--timeout", type=float, default=120.0, help="dist: --timeout")
    p.add_argument("--aggregators", type=int, default=100)
    p.add_argument("--per-round", "--clients-per-round", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--scheme", default="hsfl")
    p.add_argument("--cuts", default="1,2")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--topology", default="many-clients")
    p.add_argument("--rows-per-client", type=float, default=1.0)
    p.add_argument("--no-replan", dest="replan", action="store_false")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dataset", default=None, help=argparse.SUPPRESS)
    p.add_argument("--dataset-kind", default=None, help=argparse.SUPPRESS)
    p.add_argument("--point", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--mode", default="sim", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    _common.single_thread()
    if args.point is not None:  # a child: one point, JSON on stdout
        print(json.dumps(run_point(args)))
        return 0
    points = []
    with tempfile.TemporaryDirectory(prefix="sfl-scale-") as tmp:
        demo = _prepare_demo(Path(tmp))
        from flowsplit.data.store import load_dataset

        have = len(load_dataset(demo).split_indices("train"))
        todo = [("sim", n) for n in args.clients] + [("dist", n) for n in args.dist_clients]
        for mode, n in todo:
            need = int(round(args.rows_per_client * n))
            if have >= need:
                ds, kind = demo, "demo/captures"
            else:
                ds = _resampled(demo, Path(tmp) / f"resampled-{n}", need, args.seed)
                kind = f"demo/captures resampled to {need} training rows"
            child = [
                sys.executable,
                __file__,
                *(argv if argv is not None else sys.argv[1:]),
                "--point",
                str(n),
                "--dataset",
                str(ds),
                "--dataset-kind",
                kind,
                "--mode",
                mode,
            ]
            t0 = time.perf_counter()
            out = subprocess.run(child, check=True, capture_output=True, text=True)
            point = json.loads(out.stdout.strip().splitlines()[-1])
            point["process_s"] = round(time.perf_counter() - t0, 2)
            points.append(point)
            print(
                f"{mode} {n:>7} clients: peak {point['peak_rss_mb']:.0f} MB, round "
                f"{point['round_s']:.2f} s, planning {point.get('planning_s')}",
                file=sys.stderr,
            )
    result = {
        "points": points,
        "config": {
            "scheme": args.scheme,
            "cuts": args.cuts,
            "model": "cnn",
            "rounds": args.rounds,
            "batch_size": args.batch_size,
            "topology": args.topology,
            "replan": "every-round" if args.replan else "never",
            "rows_per_client": args.rows_per_client,
            "threads": args.threads,
            "dist": {
                "aggregators": args.dist_aggregators,
                "client_workers": args.client_workers,
                "timeout_s": args.timeout,
            },
        },
        "environment": _common.environment(),
    }
    _common.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
