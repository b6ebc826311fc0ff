"""The planner's gains measured on the emulated testbed, beside the predicted ones.

    sudo python benchmarks/testbed_planner.py --out bench-results/testbed_planner.json

On the heterogeneous testbed topology of ``testbed_sfl.py`` (8 clients of 0.05-0.2
cores, 2 aggregators, client links 8-60 Mbit/s), the way a deployment would use it:

1. ``flowsplit sfl probe`` runs once per node under the testbed and writes the measured
   topology (speeds under the quotas, link bandwidths and round trips, stream buffer,
   CPU share and burst);
2. the planner plans on it (``make_study`` + ``plan_seed``, as ``sfl plan``; pilots on
   the same data): ``acc-aware`` and ``delay``, against HSFL at its fixed cuts with a
   random assignment (``hsfl``) and with the greedy assignment (``hsfl-greedy``), for
   every seed;
3. every plan runs for real (``sfl run --plan PLAN --mode dist --probe``, one role per
   node) and its total measured delay (the rounds' measured wall times) and bytes are
   compared with HSFL's and hsfl-greedy's, paired by seed: mean relative difference and
   its 95 % t interval over the seeds, beside the predicted differences (the planner's
   closed-form delay, and the replay of the run's own messages).

Also, the probe's plan against a plan from the true topology (the shaped rates and the
quotas' speed ratios): both run, measured delay compared (``probe_vs_truth``).
Needs root. The machine may be shared with other work (noted in the JSON).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import testbed_sfl as tbs  # noqa: E402

from flowsplit.federated.setup import RegistryModel  # noqa: E402
from flowsplit.federated.system.topology import write_topology  # noqa: E402
from flowsplit.testbed import Testbed, missing_requirement  # noqa: E402

METHODS = ("acc-aware", "delay", "hsfl", "hsfl-greedy")


def run_nodes(tb, argv, out: Path, port: int, timeout_s: float) -> list[int]:
    return tbs.run_roles(tb, argv, out, port=port, timeout_s=timeout_s)


def probe(tb, topo_file: Path, out_toml: Path, args, port: int) -> dict:
    argv = ["flowsplit", "sfl", "probe", args.dataset, "--topology", str(topo_file)]
    argv += ["--model", "cnn", "--cuts", "1,2", "--batch-size", str(args.batch_size)]
    argv += ["--train-limit", str(args.train_limit), "-o", str(out_toml), "--quiet"]
    for opt in tbs.MODEL_OPTIONS:
        argv += ["--model-option", opt]
    codes = run_nodes(tb, argv, out_toml.parent / "probe-run", port, args.run_timeout)
    if any(codes) or not out_toml.is_file():
        raise SystemExit(f"probe failed: exit codes {codes}")
    return json.loads(out_toml.with_suffix(".json").read_text())


def make_plans(
    topology_file: Path, seeds: list[int], args, work: Path, study=None, tag: str = ""
) -> dict:
    """Plan files per (method, seed) on ``topology_file``; and the predicted costs.
    ``study``: one made already (its pilots and surrogate) to plan on this topology."""
    from dataclasses import replace

    from flowsplit.federated.system.topology import read_topology
    from flowsplit.planner.commands import _plan_document
    from flowsplit.planner.study import jsonable, make_study, plan_seed, resolve_study_config

    cfg = resolve_study_config(
        False,
        topology=str(topology_file),
        rounds=args.rounds,
        batch_size=args.batch_size,
        train_limit=args.train_limit,
        pilot_train_limit=args.train_limit,
        fixed_cuts=(1, 2),
        n_pilots=args.pilots,
        pilot_steps=args.pilot_steps,
    )
    opts = dict(o.split("=", 1) for o in tbs.MODEL_OPTIONS)
    opts = {k: json.loads(v) for k, v in opts.items()}
    fn = RegistryModel("cnn", None, opts)
    t0 = time.perf_counter()
    if study is None:
        study = make_study(args.dataset, cfg, model_fn=fn, quiet=True, seed=seeds[0])
    else:
        study = replace(study, topology=read_topology(topology_file))
    out: dict = {"planning_s": None, "plans": {}, "study": study}
    for seed in seeds:
        plans = plan_seed(study, seed)
        for m in METHODS:
            doc = _plan_document(study, cfg, {**plans, "acc-aware": plans[m]}, seed, 0.0)
            path = work / f"plan-{topology_file.stem}{tag}-{m}-{seed}.json"
            path.write_text(json.dumps(jsonable(doc)))
            p = plans[m]
            out["plans"][(m, seed)] = {
                "file": path,
                "cuts": list(p.cuts),
                "scheme": p.scheme,
                "predicted_delay_s": float(p.delay_s),
                "predicted_bytes": float(p.bytes),
                "assignment": [int(a) for a in p.assignment],
            }
    out["planning_s"] = time.perf_counter() - t0
    return out


def run_plan(tb, plan_file: Path, out: Path, args, port: int) -> dict:
    argv = ["flowsplit", "sfl", "run", args.dataset, "--plan", str(plan_file), "--mode", "dist"]
    argv += ["--probe", "--model", "cnn", "--rounds", str(args.rounds), "--timeout", "60"]
    for opt in tbs.MODEL_OPTIONS:
        argv += ["--model-option", opt]
    argv += ["-o", str(out), "--quiet", "--overwrite"]
    codes = run_nodes(tb, argv, out, port, args.run_timeout)
    if any(codes) or not (out / "metrics.json").is_file():
        return {"error": f"exit codes {codes}"}
    m = json.loads((out / "metrics.json").read_text())
    rounds = m["rounds"]
    return {
        "measured_delay_s": float(sum(r["measured_round_s"] for r in rounds)),
        "predicted_replay_s": float(sum(r["predicted_round_s"] for r in rounds)),
        "bytes": int(m["bytes_total"]),
        "accuracy": m.get("accuracy"),
        "rounds": len(rounds),
    }


def paired(values: dict, base: str, key: str, seeds: list[int]) -> dict:
    """Per method: mean relative difference against ``base`` over seeds, 95 % t CI."""
    from scipy import stats

    out = {}
    for m in METHODS:
        if m == base:
            continue
        rel = []
        for s in seeds:
            a, b = values.get((m, s), {}).get(key), values.get((base, s), {}).get(key)
            if a is not None and b:
                rel.append(a / b - 1)
        if len(rel) < 2:
            out[m] = {"n": len(rel), "mean": rel[0] if rel else None}
            continue
        mean, sd = float(np.mean(rel)), float(np.std(rel, ddof=1))
        half = float(stats.t.ppf(0.975, len(rel) - 1)) * sd / math.sqrt(len(rel))
        out[m] = {"n": len(rel), "mean": mean, "ci95": [mean - half, mean + half]}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--dataset", default=None)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--train-limit", type=int, default=384)
    p.add_argument("--run-timeout", type=float, default=240.0)
    p.add_argument("--no-truth", action="store_true", help="skip the plan from the truth")
    p.add_argument("--pilots", type=int, default=3, help="pilot cut pairs of the planner")
    p.add_argument("--pilot-steps", type=int, default=24, help="optimiser steps per pilot")
    p.add_argument("--keep", default=None)
    args = p.parse_args(argv)
    why = missing_requirement()
    if why:
        print(f"testbed_planner: {why}", file=sys.stderr)
        return 2
    _common.single_thread()
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory(prefix="testbed-planner-") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if args.dataset is None:
            args.dataset = str(work / "demo")
            if not Path(args.dataset).is_dir():
                subprocess.run([sys.executable, "-m", "flowsplit", "prepare", str(
                    _common.ROOT / "demo" / "captures"), "-o", args.dataset, "--quiet"],
                    check=True)  # fmt: skip
        truth = tbs.make_topology("heterogeneous")
        truth_file = work / "truth.toml"
        write_topology(truth, truth_file)
        port = 29900
        results: dict = {}
        with Testbed(tbs.testbed_spec(truth)) as tb:
            probed_file = work / "probe" / "probed.toml"
            probed_file.parent.mkdir(parents=True, exist_ok=True)
            probe_doc = probe(tb, truth_file, probed_file, args, port)
            print(f"probe: {probed_file}", flush=True)
            planned = make_plans(probed_file, seeds, args, work)
            print(f"planned in {planned['planning_s']:.0f} s", flush=True)
            for (m, seed), info in planned["plans"].items():
                port += 1
                row = run_plan(tb, info["file"], work / f"run-{m}-{seed}", args, port)
                results[(m, seed)] = {**info, **row}
                print(f"{m:12s} seed {seed} cuts {info['cuts']} {row}", flush=True)
            truth_runs = {}
            if not args.no_truth:
                # The same pilots and surrogate, planned on the true topology instead.
                from_truth = make_plans(
                    truth_file, seeds[:1], args, work, study=planned["study"], tag="-truth"
                )
                port += 1
                info = from_truth["plans"][("acc-aware", seeds[0])]
                row = run_plan(tb, info["file"], work / "run-truth", args, port)
                truth_runs = {"truth_plan": {**info, **row}}
                print(f"truth plan {info['cuts']} {row}", flush=True)
    rows = [
        {"method": m, "seed": s, **{k: v for k, v in r.items() if k != "file"}}
        for (m, s), r in results.items()
    ]
    for r in rows:
        r.pop("assignment", None)
    doc = {
        "benchmark": "testbed_planner",
        "environment": _common.environment(
            note="2-core machine shared with other engineers; testbed quotas 1.5 cores"
        ),
        "topology": "heterogeneous (testbed_sfl.make_topology), planned on its probe",
        "probe": probe_doc,
        "runs": rows,
        "measured_vs_hsfl": {
            "delay": paired(results, "hsfl", "measured_delay_s", seeds),
            "bytes": paired(results, "hsfl", "bytes", seeds),
        },
        "measured_vs_hsfl_greedy": {
            "delay": paired(results, "hsfl-greedy", "measured_delay_s", seeds),
            "bytes": paired(results, "hsfl-greedy", "bytes", seeds),
        },
        "predicted_vs_hsfl": {
            "delay_closed_form": paired(results, "hsfl", "predicted_delay_s", seeds),
            "delay_replay": paired(results, "hsfl", "predicted_replay_s", seeds),
            "bytes": paired(results, "hsfl", "predicted_bytes", seeds),
        },
        "predicted_vs_hsfl_greedy": {
            "delay_closed_form": paired(results, "hsfl-greedy", "predicted_delay_s", seeds),
            "delay_replay": paired(results, "hsfl-greedy", "predicted_replay_s", seeds),
        },
    }
    if truth_runs:
        probe_run = results.get(("acc-aware", seeds[0]), {})
        t = truth_runs["truth_plan"]
        doc["probe_vs_truth"] = {
            "probe_plan": {k: probe_run.get(k) for k in ("cuts", "measured_delay_s")},
            "truth_plan": {k: t.get(k) for k in ("cuts", "measured_delay_s")},
            "same_plan": probe_run.get("cuts") == t.get("cuts")
            and probe_run.get("assignment") == t.get("assignment"),
            "rel_difference": (
                probe_run["measured_delay_s"] / t["measured_delay_s"] - 1
                if probe_run.get("measured_delay_s") and t.get("measured_delay_s")
                else None
            ),
        }
    _common.write_json(args.out, doc)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
