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
...}], "config": ..., "environment": ...}``; each point also gives ``setup_s`` (the
run's preparation: partition, topology, model), ``round_s_all`` and ``planning_s`` /
``planning_cpu_s`` (the planner's wall / CPU seconds per round, median).
"""

from __future__ import annotations

import argparse
import json
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


def run_point(args: argparse.Namespace) -> dict:
    """One point, in this process (the parent starts one process per point)."""
    import numpy as np
    import torch

    from flowsplit.federated.config import SFLConfig, parse_cuts
    from flowsplit.federated.setup import RegistryModel, prepare_run
    from flowsplit.federated.sim import run_simulation
    from flowsplit.federated.system.presets import resolve_topology
    from flowsplit.planner.replan import replanning_policy

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    cfg = SFLConfig(
        scheme=args.scheme,
        cuts=parse_cuts(args.cuts),
        rounds=args.rounds,
        batch_size=args.batch_size,
        clients_per_round=args.per_round,
        replan="every-round" if args.replan else "never",
        seed=args.seed,
        threads=args.threads,
    )
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
    return {
        "clients": args.point,
        "aggregators": args.aggregators,
        "per_round": args.per_round,
        "peak_rss_mb": round(_common.peak_rss_mb(), 1),
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("bench-results/sfl_scale.json"))
    p.add_argument("--clients", type=int, nargs="+", default=list(DEFAULT_CLIENTS))
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
        for n in args.clients:
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
            ]
            t0 = time.perf_counter()
            out = subprocess.run(child, check=True, capture_output=True, text=True)
            point = json.loads(out.stdout.strip().splitlines()[-1])
            point["process_s"] = round(time.perf_counter() - t0, 2)
            points.append(point)
            print(
                f"{n:>7} clients: peak {point['peak_rss_mb']:.0f} MB, round "
                f"{point['round_s']:.2f} s, planning {point['planning_s']}",
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
        },
        "environment": _common.environment(),
    }
    _common.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
