"""Re-planning per round against a static plan, on a network that changes during the run.

    python benchmarks/replan.py --out bench-results/replan.json \\
        [--seeds 5] [--rounds 10] [--clients 10] [--aggregators 3] [--cuts 1,2] \\
        [--scheme hsfl] [--train-limit N] [--trace random|FILE.toml] [--quick]

The embedded lab capture (``demo/captures``, prepared once into ``--data-dir`` with the
data API, as ``flowsplit demo`` does), the CNN over its default view, the
``heterogeneous`` preset topology (``--clients`` 10, ``--aggregators`` 3, topology
seed 0). Per seed ``s``:

1. the trace: :func:`~flowsplit.federated.system.topology.random_trace` over the run's
   rounds with seed ``s`` (congested client-aggregator paths, backbones and access
   links, clients that sit rounds out), or the ``[[trace]]`` tables of ``--trace FILE``;
2. the first plan: the planner's delay-aware greedy and local search for the fixed
   cuts (:func:`~flowsplit.planner.plan.plan_fixed`, rule ``greedy``) on round 1's
   network, with seed ``s``'s shards;
3. two simulated runs from that plan, with the same seed (partition, model, batch
   order, trace), each round charged on that round's network:

   - ``static``: the first plan's assignment for the whole run (the default policy);
   - ``replanned``: :class:`~flowsplit.planner.replan.ReplanPolicy`, the assignment
     re-run before every round on its network, warm-started from the last round's.

Reported per seed: total simulated delay, bytes, final test accuracy and macro-F1,
clients moved; and over seeds the paired difference of total delay (replanned minus
static) with its 95 % t interval (scipy.stats, via flowsplit.experiments.stats), the
ratio with its interval (on log ratios), and the accuracy difference; as a reference,
the first plan's total delay had no link changed (the cost model's, no training) and
the share of the delay the trace added to the static run that re-planning took back.
The simulated
delay and bytes are the cost model's (independent of the machine's load); the
planning time is wall time on this (loaded) machine.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import _common

_common.single_thread()

import numpy as np  # noqa: E402

from flowsplit.experiments.stats import compare_paired, mean_ci, ratio_ci  # noqa: E402
from flowsplit.federated.assignment import AssignmentPolicy  # noqa: E402
from flowsplit.federated.config import SFLConfig, parse_cuts  # noqa: E402
from flowsplit.federated.setup import RegistryModel, prepare_run  # noqa: E402
from flowsplit.federated.sim import run_simulation  # noqa: E402
from flowsplit.federated.system.presets import resolve_topology  # noqa: E402
from flowsplit.federated.system.topology import random_trace, resolve_trace  # noqa: E402
from flowsplit.planner.costs import evaluate_assignment  # noqa: E402
from flowsplit.planner.plan import PlannerConfig, plan_fixed  # noqa: E402
from flowsplit.planner.replan import ReplanPolicy, round_table  # noqa: E402

CAPTURES = _common.ROOT / "demo" / "captures"
QUICK = {"seeds": 2, "rounds": 4, "train_limit": 300}
FULL = {"seeds": 5, "rounds": 10, "train_limit": None}


def demo_dataset(data_dir: Path) -> Path:
    """The embedded capture prepared (once) into ``data_dir / 'demo'``."""
    from flowsplit.data.prepare import PrepareOptions, prepare_dataset

    out = data_dir / "demo"
    if not (out / "manifest.json").is_file():
        prepare_dataset([CAPTURES], out, PrepareOptions())
    return out


def run_once(config: SFLConfig, dataset, topology, assignment, policy) -> dict:
    """One simulated run; per-round delays, totals, final scores and moves."""
    setup = prepare_run(
        config,
        dataset=dataset,
        model_fn=RegistryModel("cnn"),
        topology=topology,
        assignment=assignment,
    )
    t0 = time.perf_counter()
    result = run_simulation(setup, policy=policy)
    wall = time.perf_counter() - t0
    hist, totals = result.history, result.totals()
    log = getattr(policy, "log", [])
    return {
        "delay_s": float(totals["delay_total_s"]),
        "bytes": float(totals["bytes_total"]),
        "accuracy": float(hist[-1]["accuracy"]),
        "macro_f1": float(hist[-1]["macro_f1"]),
        "delay_per_round_s": [float(h["delay_s"]) for h in hist],
        "participants_per_round": [int(h["participants"]) for h in hist],
        "moved_per_round": [len(h.get("reassigned", [])) for h in hist],
        "predicted_delay_per_round_s": [e["delay_s"] for e in log],
        "planning_s": [e["planning_s"] for e in log],
        "wall_s": wall,
    }


def unchanged_network_delay(setup, assignment: np.ndarray) -> float:
    """Total delay of ``assignment`` had no link changed (the trace's clients still out):
    the cost model's prediction, which equals the simulation's delay (tested)."""
    topology, config = setup.topology, setup.config
    base = topology.with_trace(())
    total = 0.0
    for r in range(config.rounds):
        samples = np.where(topology.available_at(r), setup.n_samples, 0)
        table = round_table(
            setup.costs,
            setup.scheme,
            base,
            samples,
            batch_size=config.batch_size,
            local_epochs=config.local_epochs,
        )
        total += evaluate_assignment(table, 0, assignment)[0]
    return float(total)


def bench(args, mode: dict) -> dict:
    dataset = demo_dataset(args.data_dir)
    base = resolve_topology(
        "heterogeneous", n_clients=args.clients, n_aggregators=args.aggregators, seed=0
    )
    cuts = parse_cuts(args.cuts)
    seeds = list(range(mode["seeds"]))
    rows = []
    for seed in seeds:
        if args.trace == "random":
            topology = base.with_trace(random_trace(base, mode["rounds"], seed))
        else:
            topology = resolve_trace(base, args.trace, rounds=mode["rounds"])
        config = SFLConfig(
            scheme=args.scheme,
            cuts=cuts,
            rounds=mode["rounds"],
            seed=seed,
            train_limit=mode["train_limit"],
            batch_size=args.batch_size,
        )
        probe = prepare_run(
            config, dataset=dataset, model_fn=RegistryModel("cnn"), topology=topology
        )
        first = plan_fixed(
            probe.profile,
            probe.topology.at_round(0),
            args.scheme,
            cuts,
            rule="greedy",
            config=PlannerConfig(seed=seed, batch_size=args.batch_size),
        )
        static = run_once(config, dataset, topology, first.assignment, AssignmentPolicy())
        replanned = run_once(config, dataset, topology, first.assignment, ReplanPolicy())
        rows.append(
            {
                "seed": seed,
                "trace_events": len(topology.trace),
                "first_plan": [int(a) for a in first.assignment],
                "first_plan_delay_s": first.delay_s,
                "unchanged_network_delay_s": unchanged_network_delay(probe, first.assignment),
                "static": static,
                "replanned": replanned,
            }
        )
        print(
            f"seed {seed}: {len(topology.trace)} trace events; total delay static "
            f"{static['delay_s']:.3f} s, replanned {replanned['delay_s']:.3f} s "
            f"({replanned['delay_s'] / static['delay_s'] - 1:+.1%}); accuracy "
            f"{static['accuracy']:.4f} / {replanned['accuracy']:.4f}; moves "
            f"{sum(replanned['moved_per_round'])}",
            flush=True,
        )

    def col(kind: str, key: str) -> np.ndarray:
        return np.array([r[kind][key] for r in rows], dtype=float)

    d_static, d_replan = col("static", "delay_s"), col("replanned", "delay_s")
    diff = mean_ci(d_replan - d_static)
    ratio = ratio_ci(d_replan, d_static)
    acc = compare_paired(col("static", "accuracy"), col("replanned", "accuracy"))
    planning = [s for r in rows for s in r["replanned"]["planning_s"]]
    unchanged = np.array([r["unchanged_network_delay_s"] for r in rows])
    # Of the delay the trace added to the static run, the share re-planning took back.
    recovered = (d_static - d_replan) / np.where(d_static > unchanged, d_static - unchanged, np.nan)
    return {
        "per_seed": rows,
        "summary": {
            "delay_total_s": {"static": d_static.tolist(), "replanned": d_replan.tolist()},
            "delay_diff_s": diff.as_dict(),
            "delay_ratio": ratio.as_dict(),
            "delay_change": {"mean": ratio.mean - 1, "low": ratio.low - 1, "high": ratio.high - 1},
            "accuracy": {
                "static": col("static", "accuracy").tolist(),
                "replanned": col("replanned", "accuracy").tolist(),
                "diff": acc.diff.as_dict(),
            },
            "macro_f1": {
                "static": col("static", "macro_f1").tolist(),
                "replanned": col("replanned", "macro_f1").tolist(),
            },
            "bytes": {
                "static": col("static", "bytes").tolist(),
                "replanned": col("replanned", "bytes").tolist(),
            },
            "unchanged_network_delay_s": unchanged.tolist(),
            "share_of_trace_delay_recovered": recovered.tolist(),
            "moves_per_run": [sum(r["replanned"]["moved_per_round"]) for r in rows],
            "planning_s_median": float(np.median(planning)) if planning else None,
            "planning_s_max": float(np.max(planning)) if planning else None,
        },
        "config": {
            "dataset": str(dataset),
            "model": "cnn",
            "topology": "heterogeneous (seed 0)",
            "clients": args.clients,
            "aggregators": args.aggregators,
            "scheme": args.scheme,
            "cuts": list(cuts),
            "trace": "random_trace(topology, rounds, seed) per seed"
            if args.trace == "random"
            else args.trace,
            "batch_size": args.batch_size,
            **mode,
            "seeds": seeds,
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("bench-results/replan.json"))
    p.add_argument("--quick", action="store_true", help="2 seeds, 4 rounds, 300 rows")
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--train-limit", type=int, default=None, help="training rows per run")
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--aggregators", type=int, default=3)
    p.add_argument("--cuts", default="1,2", help="fixed cuts a,c (three tiers by default)")
    p.add_argument("--scheme", default="hsfl", choices=("hsfl", "hsfl-ll"))
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--trace", default="random", help="'random' (seeded per seed) or a TOML file")
    p.add_argument("--data-dir", type=Path, default=Path("bench-results/datasets"))
    args = p.parse_args(argv)
    mode = dict(QUICK if args.quick else FULL)
    for key in ("seeds", "rounds", "train_limit"):
        if getattr(args, key) is not None:
            mode[key] = getattr(args, key)
    t0 = time.perf_counter()
    out = bench(args, mode)
    out["environment"] = _common.environment(wall_s=time.perf_counter() - t0)
    _common.write_json(args.out, out)
    s = out["summary"]
    d, c = s["delay_diff_s"], s["delay_change"]
    print(
        f"total delay, replanned - static: {d['mean']:+.3f} s (95 % CI {d['low']:+.3f} to "
        f"{d['high']:+.3f}, n = {d['n']}); change {c['mean']:+.1%} (CI {c['low']:+.1%} to "
        f"{c['high']:+.1%}); wrote {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
