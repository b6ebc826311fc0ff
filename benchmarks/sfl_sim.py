"""Simulated split federated rounds per second, and what the cost accounting adds.

    python benchmarks/sfl_sim.py --out bench-results/sfl_sim.json [--dataset DIR]

Runs the in-process simulation (100 clients, 10 aggregators by default) three ways
on the same rounds (same plan, same batches, same parts and optimisers):

- ``full``: the simulation as ``flowsplit sfl run`` runs it (role coroutines,
  message copies, cost meter charging every message and computation);
- ``no_meter``: the same with the cost meter switched off;
- ``plain``: the same batches through the same parts in a plain loop (client,
  aggregator and server forward, one backward, three optimiser steps, FedAvg):
  what training without any split-learning machinery costs.

``accounting_overhead`` = full / no_meter - 1 (the meter alone); ``framework_overhead``
= full / plain - 1 (messages, copies and meter together). Both from CPU seconds
(robust to other load on the machine), each the median over ``--repeats`` repeats of
the ratio within one repeat (the three variants run back to back, in rotated order,
``--rounds`` rounds each after one warm-up round); wall seconds and the ratio of
medians alongside. ``accounting_direct_fraction`` times the meter's calls themselves.

Dataset: ``--dataset DIR`` (a prepared dataset); without it the embedded capture
``demo/captures`` is prepared into a temporary directory when it exists, else a
synthetic 784-byte, 20-class set is written (see ``_synthetic``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # benchmark helpers (environment record, JSON)
import numpy as np
import torch
import torch.nn.functional as F

from flowsplit.federated.config import SFLConfig, parse_cuts
from flowsplit.federated.schemes import make_round_plan
from flowsplit.federated.setup import RegistryModel, prepare_run
from flowsplit.federated.sim import SimRuntime
from flowsplit.federated.system.aggregate import fedavg
from flowsplit.federated.system.parts import flatten_state, load_flat_state
from flowsplit.federated.system.presets import resolve_topology


def _synthetic(out: Path, n: int = 4000, n_classes: int = 20, seed: int = 0) -> Path:
    """A USTC-shaped stand-in: 784 payload bytes per flow, a byte pattern per class."""
    import pandas as pd

    from flowsplit.data.store import write_dataset

    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    pattern = (np.arange(784)[None, :] * (y[:, None] + 1) * 37) % 256
    data = np.where(rng.random((n, 784)) < 0.5, pattern, rng.integers(0, 256, (n, 784)))
    split = np.where(np.arange(n) < int(0.8 * n), "train", "test")
    classes = [f"c{k}" for k in range(n_classes)]
    meta = pd.DataFrame(
        {
            "flow_id": np.arange(n),
            "source": "synthetic",
            "group": "g",
            "label": y,
            "label_name": [classes[k] for k in y],
            "split": split,
        }
    )
    return write_dataset(out, meta=meta, classes=classes, views={"bytes": data.astype(np.uint8)})


def _dataset(args: argparse.Namespace, tmp: Path) -> tuple[Path, str]:
    if args.dataset:
        return Path(args.dataset), "given"
    demo = _common.ROOT / "demo" / "captures"
    if demo.is_dir() and any(demo.iterdir()):
        out = tmp / "demo"
        subprocess.run(
            [sys.executable, "-m", "flowsplit", "prepare", str(demo), "-o", str(out), "--quiet"],
            check=True,
        )
        return out, "demo/captures"
    return _synthetic(tmp / "synthetic"), "synthetic"


def _plain_round(rt: SimRuntime, plan) -> None:
    """The round's batches through the same parts and optimisers, no messages, no meter."""
    server, ctx = rt.server, rt.ctx
    cstate, astate = flatten_state(server.client_global), flatten_state(server.aggregator_global)
    order = [int(i) for i in plan.order]
    opts, batches = {}, {}
    for i in order:
        load_flat_state(rt.clients[i].module, cstate)
        opts[i] = ctx.make_optimizer(rt.clients[i].module)
        batches[i] = rt.clients[i].batches(plan.round)
    agg_opts = {}
    for agg in rt.aggregators:
        load_flat_state(agg.module, astate)
        agg_opts[agg.index] = ctx.make_optimizer(agg.module)
    for step in range(plan.max_steps):
        for i in order:
            if step >= plan.n_batches[i]:
                continue
            j = int(ctx.assignment[i])
            xb, yb = next(batches[i])
            out = server.server_module.part(
                rt.aggregators[j].module.part(rt.clients[i].module.part(xb))
            )
            for opt in (opts[i], agg_opts[j], server.server_opt):
                opt.zero_grad()
            F.cross_entropy(out, yb).backward()
            for opt in (opts[i], agg_opts[j], server.server_opt):
                opt.step()
    per_agg: dict[int, list[int]] = {}
    for i in order:
        per_agg.setdefault(int(ctx.assignment[i]), []).append(i)
    c_avg, a_states, counts = [], [], []
    for j, members in per_agg.items():
        states = [flatten_state(rt.clients[i].module) for i in members]
        n = [int(ctx.n_samples[i]) for i in members]
        c_avg.append(fedavg(states, n))
        a_states.append(flatten_state(rt.aggregators[j].module))
        counts.append(sum(n))
    load_flat_state(server.client_global, fedavg(c_avg, counts))
    load_flat_state(server.aggregator_global, fedavg(a_states, counts))


def _meter_seconds(setup, cfg: SFLConfig, rounds: int) -> tuple[float, float, int]:
    """Seconds spent inside the meter's charge calls, the rounds' seconds, and calls."""
    import flowsplit.federated.sim as sim_module

    rt = SimRuntime(setup)
    rt.execute_round(make_round_plan(cfg, 0, rt.n_samples))
    spent = [0.0, 0]
    meter = rt.ctx.meter

    def timed(fn):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            spent[0] += time.perf_counter() - t0
            spent[1] += 1
            return out

        return wrapper

    meter.charge_message = timed(meter.charge_message)
    meter.charge_compute = timed(meter.charge_compute)
    original = sim_module.message_nbytes
    sim_module.message_nbytes = timed(original)
    try:
        wall, _ = _time_rounds(rt.execute_round, rt, cfg, rounds)
    finally:
        sim_module.message_nbytes = original
    return spent[0], wall, spent[1]


def _time_rounds(fn, runtime: SimRuntime, cfg: SFLConfig, rounds: int) -> tuple[float, float]:
    wall = cpu = 0.0
    for r in range(1, rounds + 1):  # round 0 was the warm-up
        plan = make_round_plan(cfg, r, runtime.n_samples)
        w0, c0 = time.perf_counter(), time.process_time()
        fn(plan)
        cpu += time.process_time() - c0
        wall += time.perf_counter() - w0
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("bench-results/sfl_sim.json"))
    p.add_argument("--dataset", default=None, help="prepared dataset directory")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--aggregators", type=int, default=10)
    p.add_argument("--scheme", default="hsfl", choices=("hsfl",))
    p.add_argument("--cuts", default="1,2")
    p.add_argument("--model", default="cnn")
    p.add_argument("--view", default=None, help="dataset view (default: the model's)")
    p.add_argument("--model-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--train-limit", type=int, default=2000, help="training rows (0: all)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--rounds", type=int, default=2, help="timed rounds per repeat")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    _common.single_thread()
    torch.set_num_threads(args.threads)
    import json

    options = {}
    for item in args.model_option:
        key, _, raw = item.partition("=")
        options[key] = json.loads(raw)
    with tempfile.TemporaryDirectory() as tmp:
        ds_path, ds_kind = _dataset(args, Path(tmp))
        cfg = SFLConfig(
            scheme=args.scheme,
            cuts=parse_cuts(args.cuts),
            rounds=args.rounds + 1,
            batch_size=args.batch_size,
            train_limit=args.train_limit or None,
            seed=0,
        )
        topo = resolve_topology(
            "many-clients", n_clients=args.clients, n_aggregators=args.aggregators
        )
        model_fn = RegistryModel(args.model, args.view, options)
        setup = prepare_run(cfg, dataset=ds_path, model_fn=model_fn, topology=topo)
        samples = {}
        for label in ("full", "no_meter", "plain"):
            samples[label] = {"wall": [], "cpu": []}
        labels = ["full", "no_meter", "plain"]
        for rep in range(args.repeats):
            # Rotate the order, so that no variant always runs first (or last) in a repeat.
            for label in labels[rep % 3 :] + labels[: rep % 3]:
                rt = SimRuntime(setup, meter_enabled=label != "no_meter")
                if label == "plain":
                    fn = lambda plan, rt=rt: _plain_round(rt, plan)  # noqa: E731
                else:
                    fn = rt.execute_round
                fn(make_round_plan(cfg, 0, rt.n_samples))  # warm-up
                wall, cpu = _time_rounds(fn, rt, cfg, args.rounds)
                samples[label]["wall"].append(wall)
                samples[label]["cpu"].append(cpu)
        in_meter, meter_wall, calls = _meter_seconds(setup, cfg, args.rounds)
    med = {k: {m: statistics.median(v[m]) for m in v} for k, v in samples.items()}
    plan = make_round_plan(cfg, 1, setup.n_samples)
    result = {
        "rounds_per_s": args.rounds / med["full"]["wall"],
        "rounds_per_cpu_s": args.rounds / med["full"]["cpu"],
        # Paired within a repeat (the variants run back to back), then the median over
        # repeats: robust to the slow drifts of a shared machine, which a ratio of
        # medians taken over different moments is not.
        "accounting_overhead": statistics.median(
            f / n - 1
            for f, n in zip(samples["full"]["cpu"], samples["no_meter"]["cpu"], strict=True)
        ),
        "accounting_overhead_of_medians": med["full"]["cpu"] / med["no_meter"]["cpu"] - 1,
        "accounting_overhead_wall": med["full"]["wall"] / med["no_meter"]["wall"] - 1,
        "framework_overhead": statistics.median(
            f / n - 1 for f, n in zip(samples["full"]["cpu"], samples["plain"]["cpu"], strict=True)
        ),
        "framework_overhead_wall": med["full"]["wall"] / med["plain"]["wall"] - 1,
        "accounting_direct_fraction": in_meter / meter_wall,
        "accounting_calls_per_round": calls / args.rounds,
        "accounting_us_per_call": 1e6 * in_meter / max(calls, 1),
        "median_s_per_round": {
            k: {m: v / args.rounds for m, v in d.items()} for k, d in med.items()
        },
        "samples_s": samples,
        "batches_per_round": int(plan.n_batches.sum()),
        "training_rows": int(setup.n_samples.sum()),
        "config": {
            **cfg.to_dict(),
            "clients": args.clients,
            "aggregators": args.aggregators,
            "model": args.model,
            "view": setup.view,
            "model_options": options,
            "timed_rounds": args.rounds,
            "repeats": args.repeats,
            "dataset": str(ds_path) if args.dataset else ds_kind,
            "topology": "many-clients",
        },
        "environment": _common.environment(torch_threads=torch.get_num_threads()),
    }
    _common.write_json(args.out, result)
    print(
        f"{result['rounds_per_s']:.3f} rounds/s; accounting +{100 * result['accounting_overhead']:.2f} %"
        f" (CPU), whole split machinery +{100 * result['framework_overhead']:.1f} % -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
