"""Does the accuracy-aware planner earn its name? Against fair baselines, per dataset.

    python benchmarks/planner_accuracy.py --out bench-results/planner_accuracy.json \\
        [--datasets demo,ndpi8,ustc] [--quick] [--seeds 5] [--rounds 20] \\
        [--family hsfl|hsfl-ll] [--train-limit N] [--eval-limit N] [--first-seed S] \\
        [--model-option KEY=VALUE ...] [--data-dir DIR]
    python benchmarks/planner_accuracy.py --combine A.json B.json ... --out ALL.json

Per dataset (the embedded lab capture ``demo``, the nDPI 8-protocol set ``ndpi8`` and
USTC-TFC2016 ``ustc``, prepared from ``../shared/data`` into ``--data-dir`` on first
use; a missing source is skipped with its reason), the CNN over its default view, a
heterogeneous topology (``--clients`` 10, ``--aggregators`` 3, topology seed 0):

1. one study (:func:`flowsplit.planner.study.make_study`): pilots at every legal cut
   pair, budgeted in optimiser steps, on the first seed's partition, evaluated on the
   validation split; the surrogate's predicted validation accuracy at the run's budget;
2. per seed, simulated runs of ``--rounds`` rounds, every one evaluated on the test
   split after every round and on the validation split at the end:

   - ``hsfl``: the fixed cuts (1, 2) with a seeded random assignment (the research's
     baseline);
   - ``hsfl-greedy``: the same cuts, the planner's delay-aware greedy + local search;
   - ``cut-(a,c)``: every legal cut pair with the planner's own assignment for that
     pair (its delay/bytes objective);
   - ``best-fixed``: of those, the pair with the best mean final *validation* accuracy
     over seeds (the oracle the planner approximates, chosen in hindsight);
   - ``acc-aware``: the planner (accuracy guard, 1 pt); its runs are the ``cut-`` runs
     of the pair it chose for each seed (the same cuts and assignment);

3. Spearman's rank correlation between the surrogate's predicted validation accuracy
   and the realised one (mean over seeds) over every legal pair, and the goals:
   acc-aware against hsfl-greedy (paired difference, 95 % t interval: goal, the upper
   end of hsfl-greedy minus acc-aware <= 1 pt), against best-fixed (mean difference
   within 1 pt), Spearman >= 0.8, and delay and bytes against hsfl as ratios with
   intervals next to the research's +3 pt / -20 % / -50 %.

``--quick``: 2 seeds, 4 rounds, 240 training rows, pilots of 4 rounds on 80 rows, a
narrow CNN (embed 8, channels 16/32, hidden 32): a smoke check of every path in a few
minutes, not a measurement. ``--model-option KEY=VALUE`` sets the CNN's options
(``channels=[32,64]``), ``--train-limit`` and ``--pilot-train-limit`` the rows.
``--combine A.json B.json ...`` pools runs on disjoint seeds (``--first-seed``, the
same settings and pilots, checked) into one ``--out``, as one run over all their seeds
would have reported it (best-fixed, Spearman and goals recomputed); it trains nothing.
Every figure is measured on this machine; timings are not the point (the simulated
delay and bytes are the cost model's, independent of load).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import _common

_common.single_thread()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from flowsplit.data.store import load_dataset  # noqa: E402
from flowsplit.experiments.stats import compare_paired, mean_ci, ratio_ci  # noqa: E402
from flowsplit.federated.metrics import evaluate_model  # noqa: E402
from flowsplit.federated.setup import RegistryModel  # noqa: E402
from flowsplit.federated.sim import run_simulation  # noqa: E402
from flowsplit.planner.objective import Weights  # noqa: E402
from flowsplit.planner.plan import PlannerConfig, plan_split  # noqa: E402
from flowsplit.planner.study import (  # noqa: E402
    base_config,
    make_study,
    plan_seed,
    resolve_study_config,
)
from flowsplit.train.config import parse_model_options  # noqa: E402

SHARED = _common.SHARED
SOURCES = {
    "demo": (_common.ROOT / "demo" / "captures", []),
    "ndpi8": (SHARED / "ndpi" / "pcap", _common.NDPI8_OPTIONS),
    "ustc": (SHARED / "ustc-tfc2016", []),
}
PAPER = {"accuracy_pts": 3.0, "delay_change": -0.20, "bytes_change": -0.50}
# Quick: a smoke check of every path in minutes (two seeds, few rows, a narrow CNN,
# pilots on a third of the rows), not a measurement: its pilots are as long as its runs.
QUICK = {
    "seeds": 2,
    "rounds": 4,
    "train_limit": 240,
    "pilot_train_limit": 80,
    "model_options": {"embed": 8, "channels": [16, 32], "hidden": 32},
}
FULL = {
    "seeds": 5,
    "rounds": 20,
    "train_limit": None,
    "pilot_train_limit": None,
    "model_options": {},
}


def prepare(name: str, data_dir: Path) -> tuple[Path | None, str | None]:
    """The prepared dataset directory of ``name`` (prepared once), or a skip reason."""
    src, extra = SOURCES[name]
    out = data_dir / name
    if (out / "manifest.json").is_file():
        return out, None
    if not src.exists():
        return None, f"source {src} not found"
    data_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "flowsplit", "prepare", str(src), "-o", str(out), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return None, f"prepare failed: {(done.stderr or done.stdout).strip()[-300:]}"
    return out, None


def limit_eval_rows(data, limit: int | None) -> dict[str, int]:
    """Keep a seeded subset of ``limit`` rows of the validation and of the test split
    (the others take no part: their split becomes ``"unused"``); rows per split after.

    Evaluation after every round on a large split (USTC's 1,939 test rows) costs more
    than the training of a small ``--train-limit``; every scheme and seed is judged on
    the same subset, so paired differences stay paired."""
    split = data.meta["split"].to_numpy().astype(object)
    if limit is not None:
        rng = np.random.default_rng(12345)
        for name in ("val", "test"):
            rows = np.flatnonzero(split == name)
            if len(rows) > limit:
                split[rng.choice(rows, len(rows) - limit, replace=False)] = "unused"
        data.meta["split"] = split
    return {name: int(np.sum(split == name)) for name in ("train", "val", "test")}


def train(study, seed: int, plan, val) -> dict:
    """One simulated run of ``plan`` (its cuts and assignment): final test and
    validation metrics, total simulated delay and bytes."""
    cfg = study.config
    sfl_cfg = base_config(cfg, seed, cuts=tuple(plan.cuts))
    setup = study.prepare(sfl_cfg, assignment=plan.assignment)
    t0 = time.perf_counter()
    result = run_simulation(setup)
    # The final global model as the server holds it: client, aggregator, server parts.
    model = torch.nn.Sequential(*(m.part for m in setup.tier_modules()))
    model.load_state_dict(result.model_state)
    v = evaluate_model(model, *val, study.dataset.n_classes)
    last, totals = result.history[-1], result.totals()
    return {
        "cuts": list(plan.cuts),
        "assignment": [int(a) for a in plan.assignment],
        "accuracy": float(last["accuracy"]),
        "macro_f1": float(last["macro_f1"]),
        "val_accuracy": float(v["accuracy"]),
        "delay_s": float(totals["delay_total_s"]),
        "bytes": float(totals["bytes_total"]),
        "predicted_delay_s": plan.delay_s * cfg.run.rounds,
        "predicted_bytes": plan.bytes * cfg.run.rounds,
        "wall_s": time.perf_counter() - t0,
    }


def _interval(iv) -> dict:
    return {"mean": iv.mean, "low": iv.low, "high": iv.high, "n": iv.n}


def goal_summary(schemes: dict, rho: float) -> dict:
    """The issue's goals from the per-seed columns of ``schemes`` (``hsfl``,
    ``hsfl-greedy``, ``best-fixed``, ``acc-aware``; seeds in the same order in each)
    and the surrogate's Spearman ``rho``."""

    def col(scheme, key):
        return np.array(schemes[scheme][key], dtype=float)

    vs_greedy = compare_paired(col("hsfl-greedy", "accuracy"), col("acc-aware", "accuracy"))
    vs_best = compare_paired(col("best-fixed", "accuracy"), col("acc-aware", "accuracy"))
    vs_hsfl = compare_paired(col("hsfl", "accuracy"), col("acc-aware", "accuracy"))
    delay_ratio = ratio_ci(col("acc-aware", "delay_s"), col("hsfl", "delay_s"))
    bytes_ratio = ratio_ci(col("acc-aware", "bytes"), col("hsfl", "bytes"))
    # Worst case of (hsfl-greedy - acc-aware): minus the low end of (acc-aware - greedy).
    greedy_worse = -vs_greedy.diff.low if np.isfinite(vs_greedy.diff.low) else float("nan")

    def pts(iv) -> dict:
        return {"mean": 100 * iv.mean, "low": 100 * iv.low, "high": 100 * iv.high, "n": iv.n}

    def change(r) -> dict:
        return {"mean": r.mean - 1, "low": r.low - 1, "high": r.high - 1}

    return {
        "acc_aware_minus_hsfl_greedy_pts": pts(vs_greedy.diff),
        "hsfl_greedy_worse_by_at_most_pts": 100 * greedy_worse,
        "goal_never_worse_than_hsfl_greedy_by_1pt": bool(greedy_worse <= 0.01),
        "acc_aware_minus_best_fixed_pts": 100 * vs_best.diff.mean,
        "acc_aware_minus_best_fixed_ci_pts": pts(vs_best.diff),
        "goal_within_1pt_of_best_fixed": bool(vs_best.diff.mean >= -0.01),
        "goal_spearman_0_8": bool(rho >= 0.8),
        "acc_aware_minus_hsfl_pts": pts(vs_hsfl.diff),
        "delay_change_vs_hsfl": change(delay_ratio),
        "bytes_change_vs_hsfl": change(bytes_ratio),
        "paper": PAPER,
    }


def accuracy_intervals(schemes: dict) -> dict:
    """Each scheme's mean final test accuracy over seeds with its 95 % t interval."""
    return {s: _interval(mean_ci(v["accuracy"])) for s, v in schemes.items()}


def bench_dataset(name: str, path: Path, args, mode: dict) -> dict:
    cfg = resolve_study_config(
        False,
        model="cnn",
        topology="heterogeneous",
        n_clients=args.clients,
        n_aggregators=args.aggregators,
        rounds=mode["rounds"],
        family=args.family,
        train_limit=mode["train_limit"],
        pilot_train_limit=mode["pilot_train_limit"],
        acc_tolerance=args.acc_tolerance,
        pilot_steps=args.pilot_steps,
        batch_size=args.batch_size,
    )
    t0 = time.perf_counter()
    model_fn = RegistryModel("cnn", None, dict(mode["model_options"]))
    data = load_dataset(path)
    eval_rows = limit_eval_rows(data, args.eval_limit)
    study = make_study(data, cfg, model_fn=model_fn, quiet=True, seed=0)
    pilot_s = time.perf_counter() - t0
    probe = study.prepare(base_config(cfg, 0, eval_split="val"))
    val = probe.eval_data()
    legal = study.profile.legal_cuts()
    seeds = list(range(args.first_seed, args.first_seed + mode["seeds"]))
    runs: dict[str, list[dict]] = {"hsfl": [], "hsfl-greedy": [], "acc-aware": []}
    per_cut: dict[tuple[int, int], list[dict]] = {c: [] for c in legal}
    chosen = []
    for seed in seeds:
        plans = plan_seed(study, seed, ("acc-aware", "hsfl", "hsfl-greedy"))
        topo = study.prepare(base_config(cfg, seed)).topology
        for c in legal:
            one = PlannerConfig(
                weights=Weights(0.0, *cfg.planner.weights[1:]),
                family=cfg.planner.family,
                seed=seed,
                batch_size=cfg.run.batch_size,
                mode="weighted",
                only_cuts=(c,),
                fixed_cuts=tuple(cfg.planner.fixed_cuts),
            )
            per_cut[c].append(train(study, seed, plan_split(study.profile, topo, None, one), val))
        for scheme in ("hsfl", "hsfl-greedy"):
            runs[scheme].append(train(study, seed, plans[scheme], val))
        acc_cuts = tuple(plans["acc-aware"].cuts)
        chosen.append(list(acc_cuts))
        # acc-aware's run is its pair's cut- run when the plans agree (the same cuts and
        # objective give the same assignment); checked, else trained on its own.
        twin = per_cut[acc_cuts][-1]
        same = twin["assignment"] == plans["acc-aware"].assignment.tolist()
        run = twin if same else train(study, seed, plans["acc-aware"], val)
        runs["acc-aware"].append({**run, "reused_cut_run": bool(same)})
        print(
            f"{name} seed {seed}: acc-aware {acc_cuts} "
            f"{runs['acc-aware'][-1]['accuracy']:.4f}, hsfl {runs['hsfl'][-1]['accuracy']:.4f}, "
            f"hsfl-greedy {runs['hsfl-greedy'][-1]['accuracy']:.4f}",
            flush=True,
        )
    realised_val = {c: float(np.mean([r["val_accuracy"] for r in per_cut[c]])) for c in legal}
    best = max(legal, key=lambda c: realised_val[c])
    runs["best-fixed"] = per_cut[best]
    pred = [study.predicted_accuracy[c] for c in legal]
    real = [realised_val[c] for c in legal]
    rho = float(spearmanr(pred, real).statistic) if np.ptp(pred) > 0 else float("nan")

    schemes = {
        s: {
            k: [r[k] for r in runs[s]] for k in ("accuracy", "macro_f1", "delay_s", "bytes", "cuts")
        }
        for s in runs
    }
    for c in legal:
        schemes[f"cut-{c[0]},{c[1]}"] = {
            k: [r[k] for r in per_cut[c]] for k in ("accuracy", "macro_f1", "delay_s", "bytes")
        }
    sim_vs_pred = max(
        abs(r["delay_s"] - r["predicted_delay_s"]) / r["delay_s"]
        for rs in per_cut.values()
        for r in rs
    )
    return {
        "schemes": schemes,
        "spearman": rho,
        "cuts": [
            {
                "cuts": list(c),
                "predicted_val_accuracy": study.predicted_accuracy[c],
                "realised_val_accuracy": realised_val[c],
                "test_accuracy_mean": float(np.mean([r["accuracy"] for r in per_cut[c]])),
                "pilot_val_accuracy": next((p.accuracy for p in study.pilots if p.cuts == c), None),
            }
            for c in legal
        ],
        "best_fixed_cuts": list(best),
        "acc_aware_cuts": chosen,
        "surrogate": {
            k: study.surrogate.get(k)
            for k in (
                "target_steps",
                "pilot_steps",
                "noise",
                "spread",
                "separated",
                "backtest",
                "cost",
            )
        },
        "goals": goal_summary(schemes, rho),
        "max_rel_delay_error_sim_vs_plan": sim_vs_pred,
        "accuracy_ci": accuracy_intervals(schemes),
        "config": {
            **cfg.to_dict(),
            "seeds": seeds,
            "dataset_path": str(path),
            "model_options": dict(mode["model_options"]),
            "eval_limit": args.eval_limit,
            "split_rows": eval_rows,
        },
        "n_classes": int(study.dataset.n_classes),
        "pilot_wall_s": pilot_s,
    }


def combine(paths: list[Path]) -> dict:
    """Pool runs of the same datasets and settings on disjoint seeds (``--first-seed``)
    into one document, as if run at once: per-seed columns joined (in seed order),
    best-fixed chosen again on the pooled mean validation accuracy, Spearman and the
    goals recomputed. Refused unless the settings (seeds apart) and the surrogate's
    predictions (the pilots, on seed 0's partition in every run) agree exactly."""
    docs = [(p, json.loads(Path(p).read_text(encoding="utf-8"))) for p in paths]
    names = sorted({n for _, d in docs for n in d["datasets"]})
    out: dict = {"combined_from": [str(p) for p, _ in docs], "datasets": {}, "skipped": {}}
    for name in names:
        parts = sorted(
            ((p, d["datasets"][name]) for p, d in docs if name in d["datasets"]),
            key=lambda pd: pd[1]["config"]["seeds"][0],
        )
        seeds = [s for _, part in parts for s in part["config"]["seeds"]]
        if len(set(seeds)) != len(seeds):
            raise SystemExit(f"planner_accuracy --combine: {name}: seeds overlap ({seeds})")
        first = parts[0][1]
        settings = {k: v for k, v in first["config"].items() if k != "seeds"}
        pred = {tuple(c["cuts"]): c["predicted_val_accuracy"] for c in first["cuts"]}
        pilot = {tuple(c["cuts"]): c.get("pilot_val_accuracy") for c in first["cuts"]}
        for p, part in parts[1:]:
            other = {k: v for k, v in part["config"].items() if k != "seeds"}
            # A setting one file lacks (a newer option) counts as None, its default.
            diff = sorted(
                k for k in settings.keys() | other.keys() if settings.get(k) != other.get(k)
            )
            if diff:
                raise SystemExit(
                    f"planner_accuracy --combine: {p}: {name} settings differ ({diff})"
                )
            if {tuple(c["cuts"]): c["predicted_val_accuracy"] for c in part["cuts"]} != pred:
                raise SystemExit(
                    f"planner_accuracy --combine: {p}: {name} pilots predict otherwise"
                )
        schemes = {
            s: {k: [v for _, part in parts for v in part["schemes"][s][k]] for k in cols}
            for s, cols in first["schemes"].items()
        }
        legal = list(pred)
        n = [len(part["config"]["seeds"]) for _, part in parts]
        realised = {
            c: float(
                np.average(
                    [
                        next(x for x in part["cuts"] if tuple(x["cuts"]) == c)[
                            "realised_val_accuracy"
                        ]
                        for _, part in parts
                    ],
                    weights=n,
                )
            )
            for c in legal
        }
        best = max(legal, key=lambda c: realised[c])
        schemes["best-fixed"] = {
            **schemes[f"cut-{best[0]},{best[1]}"],
            "cuts": [list(best)] * len(seeds),
        }
        p_col, r_col = [pred[c] for c in legal], [realised[c] for c in legal]
        rho = float(spearmanr(p_col, r_col).statistic) if np.ptp(p_col) > 0 else float("nan")
        out["datasets"][name] = {
            "schemes": schemes,
            "spearman": rho,
            "cuts": [
                {
                    "cuts": list(c),
                    "predicted_val_accuracy": pred[c],
                    "realised_val_accuracy": realised[c],
                    "test_accuracy_mean": float(np.mean(schemes[f"cut-{c[0]},{c[1]}"]["accuracy"])),
                    "pilot_val_accuracy": pilot[c],
                }
                for c in legal
            ],
            "best_fixed_cuts": list(best),
            "acc_aware_cuts": [c for _, part in parts for c in part["acc_aware_cuts"]],
            "surrogate": first["surrogate"],
            "goals": goal_summary(schemes, rho),
            "max_rel_delay_error_sim_vs_plan": max(
                part["max_rel_delay_error_sim_vs_plan"] for _, part in parts
            ),
            "accuracy_ci": accuracy_intervals(schemes),
            "config": {**first["config"], "seeds": seeds},
            "n_classes": first["n_classes"],
            "parts": [
                {
                    "file": str(p),
                    "seeds": part["config"]["seeds"],
                    "wall_s": part.get("wall_s"),
                    "load_average_1_5_15": part.get("load_average_1_5_15"),
                    "started": dict(docs)[p].get("started"),
                }
                for p, part in parts
            ],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("bench-results/planner_accuracy.json"))
    p.add_argument("--datasets", default="demo,ndpi8,ustc")
    p.add_argument(
        "--quick",
        action="store_true",
        help="2 seeds, 4 rounds, 240 rows (pilots 80), a narrow CNN: a smoke check",
    )
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="run seeds FIRST..FIRST+SEEDS-1 (the pilots stay on seed 0's partition), "
        "to add seeds to an earlier run",
    )
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--train-limit", type=int, default=None, help="training rows per run")
    p.add_argument("--pilot-train-limit", type=int, default=None, help="training rows per pilot")
    p.add_argument(
        "--eval-limit",
        type=int,
        default=None,
        help="validation and test rows (a seeded subset of each split; default all)",
    )
    p.add_argument("--pilot-steps", type=int, default=None, help="default: 1/4 of a run's")
    p.add_argument(
        "--model-option",
        action="append",
        metavar="KEY=VALUE",
        help="CNN option, e.g. channels=[32,64] (repeatable; replaces quick mode's)",
    )
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--aggregators", type=int, default=3)
    p.add_argument("--family", default="hsfl", choices=("hsfl", "hsfl-ll"))
    p.add_argument("--acc-tolerance", type=float, default=0.01, help="accuracy, 0.01 = 1 pt")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--data-dir", type=Path, default=Path("bench-results/datasets"))
    p.add_argument(
        "--combine",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="pool the --out files of runs on disjoint seeds (same settings) into --out "
        "and recompute best-fixed, Spearman and the goals; runs nothing",
    )
    args = p.parse_args(argv)
    if args.combine:
        doc = combine(args.combine)
        _common.write_json(args.out, {**doc, "environment": _common.environment()})
        for name, v in doc["datasets"].items():
            g = v["goals"]["acc_aware_minus_hsfl_greedy_pts"]
            print(
                f"{name} (seeds {v['config']['seeds']}): spearman {v['spearman']:.2f}, "
                f"acc-aware - hsfl-greedy {g['mean']:+.2f} pt [{g['low']:+.2f}, {g['high']:+.2f}]"
            )
        print(f"wrote {args.out}")
        return 0
    mode = dict(QUICK if args.quick else FULL)
    for key in ("seeds", "rounds", "train_limit", "pilot_train_limit"):
        if getattr(args, key) is not None:
            mode[key] = getattr(args, key)
    if args.model_option:
        mode["model_options"] = parse_model_options(args.model_option)
    t0 = time.perf_counter()
    # The code a long run ran on is the one at its start (others may commit meanwhile).
    started = {"date": _common.environment()["date"], "git_commit": _common.git_commit()}
    out: dict = {
        "started": started,
        "datasets": {},
        "skipped": {},
        "mode": {**mode, "quick": args.quick, "family": args.family},
    }
    for name in [n.strip() for n in args.datasets.split(",") if n.strip()]:
        if name not in SOURCES:
            raise SystemExit(f"planner_accuracy: unknown dataset {name!r} ({', '.join(SOURCES)})")
        path, why = prepare(name, args.data_dir)
        if path is None:
            out["skipped"][name] = why
            print(f"{name}: skipped ({why})", flush=True)
            continue
        t_set = time.perf_counter()
        out["datasets"][name] = bench_dataset(name, path, args, mode)
        out["datasets"][name]["wall_s"] = time.perf_counter() - t_set
        out["datasets"][name]["load_average_1_5_15"] = list(os.getloadavg())
        g = out["datasets"][name]["goals"]
        print(
            f"{name}: spearman {out['datasets'][name]['spearman']:.2f}, acc-aware - "
            f"hsfl-greedy {g['acc_aware_minus_hsfl_greedy_pts']['mean']:+.2f} pt, - best-fixed "
            f"{g['acc_aware_minus_best_fixed_pts']:+.2f} pt",
            flush=True,
        )
        _common.write_json(args.out, {**out, "environment": _common.environment()})
    out["wall_s"] = time.perf_counter() - t0
    out["environment"] = _common.environment()
    _common.write_json(args.out, out)
    print(f"wrote {args.out} ({out['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
