"""From per-run records to the study's findings: statistics, speedups, scaling fits.

Input: flat records, one per finished run (see :mod:`flowsplit.experiments.records`),
each with at least ``model``, ``workers``, ``seed``, ``accuracy``, ``macro_f1``,
``epoch_time_s``, ``comm_share``, ``oversubscribed`` and, for McNemar, ``y_true`` and
``y_pred``. Output: one JSON-ready dict (the content of ``results.json`` minus the
cells). Pure: no files, no clocks.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from flowsplit.experiments.scaling import (
    NETWORK_PRESETS,
    Network,
    Workload,
    fit_scaling,
    relative_errors,
    steps_per_epoch,
)
from flowsplit.experiments.stats import (
    compare_paired,
    mcnemar_test,
    mean_ci,
    speedup_ci,
)

PREDICT_WORKERS = tuple(2**k for k in range(11))  # 1 ... 1024
ERROR_LIMIT = 0.15  # the scaling model is trusted on measured points within +-15 %


def _by(records: Iterable[Mapping], *keys: str) -> dict:
    out: dict = defaultdict(list)
    for r in records:
        out[tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]].append(r)
    return out


def _paired(ref: Sequence[Mapping], other: Sequence[Mapping], key: str):
    """Values of ``key`` for the seeds both groups finished, in seed order."""
    a = {r["seed"]: r for r in ref}
    b = {r["seed"]: r for r in other}
    seeds = sorted(set(a) & set(b))
    return seeds, [a[s][key] for s in seeds], [b[s][key] for s in seeds]


def timing_runs(runs: Sequence[Mapping]) -> tuple[list[Mapping], bool]:
    """The runs whose timing counts (not contended), or all of them, flagged, if none is."""
    clean = [r for r in runs if not r.get("contended")]
    return (clean, False) if clean else (list(runs), bool(runs))


def summarise_group(runs: Sequence[Mapping]) -> dict:
    """Means and CIs of one (model, workers) group over its seeds.

    Accuracy uses every run; times use the runs that were not contended.
    """
    out = {"n_runs": len(runs), "seeds": sorted(r["seed"] for r in runs)}
    timed, timing_contended = timing_runs(runs)
    out["n_contended"] = sum(1 for r in runs if r.get("contended"))
    out["timing_contended"] = timing_contended
    for key in ("accuracy", "macro_f1", "peak_rss_mb", "cpu_obtained"):
        vals = [r.get(key) for r in runs if r.get(key) is not None]
        out[key] = mean_ci(vals).as_dict()
    for key in ("epoch_time_s", "wall_time_s", "samples_per_s", "comm_share", "comm_time_s"):
        vals = [r.get(key) for r in timed if r.get(key) is not None]
        out[key] = mean_ci(vals).as_dict()
    out["oversubscribed"] = any(r.get("oversubscribed") for r in runs)
    out["threads_per_worker"] = max((r.get("threads_per_worker") or 1) for r in runs)
    return out


def compare_to_central(
    central: Sequence[Mapping],
    parallel: Sequence[Mapping],
    n_workers: int,
    *,
    margin: float,
    alpha: float,
) -> dict:
    """Data-parallel runs on ``n_workers`` against centralised runs, paired by seed."""
    out: dict = {"n_workers": n_workers}
    for key in ("accuracy", "macro_f1"):
        seeds, a, b = _paired(central, parallel, key)
        out[key] = compare_paired(a, b, margin=margin, alpha=alpha).as_dict()
    c_timed, c_flag = timing_runs(central)
    p_timed, p_flag = timing_runs(parallel)
    seeds, t_ref, t_par = _paired(c_timed, p_timed, "epoch_time_s")
    if not seeds:  # no seed with clean timings on both sides: use all, flagged
        seeds, t_ref, t_par = _paired(central, parallel, "epoch_time_s")
        c_flag = True
    speed, eff = speedup_ci(t_ref, t_par, n_workers)
    out["seeds"] = seeds
    out["timing_contended"] = c_flag or p_flag
    out["speedup"] = speed.as_dict()
    out["efficiency"] = eff.as_dict()
    out["oversubscribed"] = any(r.get("oversubscribed") for r in parallel)
    mc = []
    a_by_seed = {r["seed"]: r for r in central}
    for r in sorted(parallel, key=lambda r: r["seed"]):
        ref = a_by_seed.get(r["seed"])
        if ref is None or ref.get("y_pred") is None or r.get("y_pred") is None:
            continue
        if list(ref["y_true"]) != list(r["y_true"]):
            continue  # not the same test set: McNemar would be meaningless
        res = mcnemar_test(ref["y_true"], ref["y_pred"], r["y_pred"]).as_dict()
        mc.append({"seed": r["seed"], **res})
    out["mcnemar"] = mc
    out["mcnemar_significant"] = sum(1 for m in mc if m["p"] < alpha)
    return out


def _comm_per_epoch(run: Mapping) -> float:
    """Measured all-reduce seconds per epoch (the engines report the total over epochs)."""
    epochs = run.get("epochs_run") or 0
    comm = run.get("comm_time_s")
    return float(comm) / epochs if epochs and comm is not None else math.nan


def fit_model_scaling(
    runs: Sequence[Mapping],
    workload: Workload,
    host: Network,
    *,
    cores: int,
    networks: Mapping[str, Network],
    predict_workers: Sequence[int] = PREDICT_WORKERS,
) -> dict:
    """Fit the scaling model to one model's runs and predict larger clusters.

    Oversubscribed runs stay out of the fit (their time measures core sharing, not
    scaling) but their error is still shown, against the host model that charges
    the sharing. The error is reported per worker count on the mean over seeds, both
    for the fit and leaving that worker count out of the fit (when two others remain).
    """
    threads = max((r.get("threads_per_worker") or 1) for r in runs)
    fit_runs = [r for r in timing_runs(runs)[0] if not r.get("oversubscribed")] or list(runs)

    def fit(group_runs: Sequence[Mapping]):
        # Fit to the mean over seeds at each worker count, the numbers the errors are
        # reported on (a per-seed fit on relative residuals leans towards the fastest seeds).
        groups = sorted(_by(group_runs, "workers").items())
        return fit_scaling(
            workload,
            [n for n, _ in groups],
            [float(np.mean([r["epoch_time_s"] for r in g])) for _, g in groups],
            host,
            comm_times_s=[float(np.nanmean([_comm_per_epoch(r) for r in g])) for _, g in groups],
            cores=cores,
            threads_per_worker=threads,
        )

    model = fit(fit_runs)
    timed = timing_runs(runs)[0]
    points = []
    for n, group in sorted(_by(runs, "workers").items()):
        group = timing_runs(group)[0]
        measured = float(np.mean([r["epoch_time_s"] for r in group]))
        err = relative_errors(model, [n], [measured])[0]
        pred = model.predict(n)
        # Leave this worker count out, fit to the others (oversubscribed ones included,
        # charged for core sharing), predict it: the check the fit cannot game.
        others = [r for r in timed if r["workers"] != n]
        loo = math.nan
        if len({r["workers"] for r in others}) >= 2:
            loo = relative_errors(fit(others), [n], [measured])[0]
        comm = [r.get("comm_share") for r in group if r.get("comm_share") is not None]
        points.append(
            {
                "n_workers": n,
                "measured_s": measured,
                "predicted_s": pred["epoch_time_s"],
                "rel_error": err,
                "loo_error": loo,
                "in_fit": any(r in fit_runs for r in group),
                "oversubscribed": any(r.get("oversubscribed") for r in group),
                "measured_comm_share": float(np.mean(comm)) if comm else math.nan,
                "predicted_comm_share": pred["comm_share"],
            }
        )
    # This machine as measured: its cores, its sync overhead, the global batch it ran.
    base = model.predict(1)["epoch_time_s"]
    host_rows = []
    for n in sorted({int(r["workers"]) for r in runs}):
        row = model.predict(n)
        host_rows.append({**row, "speedup": base / row["epoch_time_s"],
                          "efficiency": base / row["epoch_time_s"] / n, "network": host.name})  # fmt: skip
    # A cluster: every worker has its own cores; each keeps the centralised batch (global
    # batch = batch x N, the usual linear-scaling practice), since a fixed global batch
    # cannot be split over more workers than it has samples.
    cluster = model
    if workload.kind == "ddp" and workload.global_batch:
        cluster = replace(model, workload=replace(workload, global_batch=False))
    predictions = {"host": host_rows}
    predictions.update({key: cluster.curve(predict_workers, net) for key, net in networks.items()})
    steps = steps_per_epoch(workload, 1)
    serial = model.per_step_s * steps + model.fixed_s
    return {
        "model": model.as_dict(),
        "points": points,
        "max_abs_error": max(abs(p["rel_error"]) for p in points),
        "max_abs_error_fit": max((abs(p["rel_error"]) for p in points if p["in_fit"]), default=0),
        "max_abs_loo_error": max(
            (abs(p["loo_error"]) for p in points if not math.isnan(p["loo_error"])),
            default=math.nan,
        ),
        "speedup_cap_fixed_batch": base / serial if serial > 0 else math.inf,
        "cluster_batch": "per worker" if cluster is not model else "global",
        "predictions": predictions,
    }


def analyse(
    records: Sequence[Mapping],
    *,
    workloads: Mapping[str, Workload],
    host: Network | None,
    cores: int,
    margin: float = 0.01,
    alpha: float = 0.05,
    networks: Mapping[str, Network] = NETWORK_PRESETS,
) -> dict:
    """All findings per model: groups, comparisons to centralised, scaling fit."""
    models: dict = {}
    for model, runs in _by(records, "model").items():
        by_n = _by(runs, "workers")
        entry: dict = {
            "by_workers": {str(n): summarise_group(g) for n, g in sorted(by_n.items())},
            "vs_central": {},
        }
        central = by_n.get(1, [])
        for n, group in sorted(by_n.items()):
            if n != 1 and central:
                entry["vs_central"][str(n)] = compare_to_central(
                    central, group, n, margin=margin, alpha=alpha
                )
        if host is not None and model in workloads:
            try:
                entry["scaling"] = fit_model_scaling(
                    runs, workloads[model], host, cores=cores, networks=networks
                )
            except ValueError as exc:
                entry["scaling"] = {"error": str(exc)}
        models[model] = entry
    return {"margin": margin, "alpha": alpha, "cores": cores, "models": models}


def headline(model: str, entry: Mapping, margin: float) -> str | None:
    """One plain sentence for a model, from its largest non-oversubscribed comparison."""
    cands = [v for v in entry["vs_central"].values() if not v["oversubscribed"]]
    if not cands:
        return None
    best = max(cands, key=lambda v: v["n_workers"])
    s = best["speedup"]
    acc = best["accuracy"]
    n = best["n_workers"]
    if math.isnan(s["mean"]):
        return None
    if s["mean"] >= 1:
        time_part = f"{n} workers cut {model}'s epoch time {s['mean']:.2f}x"
        lo, hi = s["low"], s["high"]
    else:  # say "slower" and invert the interval with it
        time_part = f"{n} workers made {model}'s epochs {1 / s['mean']:.2f}x slower"
        lo, hi = 1 / s["high"], 1 / s["low"]
    if not math.isnan(lo):
        time_part += f" (95 % CI {lo:.2f}-{hi:.2f}x)"
    pts = f"+-{100 * margin:g} pt"
    tost = acc["tost_p"]
    p_txt = (
        ("TOST p < 0.001" if tost < 0.001 else f"TOST p = {tost:.3f}")
        if not math.isnan(tost)
        else acc["note"] or "no test"
    )
    verdict = acc["verdict"]
    diff = 100 * acc["diff"]["mean"]
    if verdict == "equivalent":
        acc_part = f"accuracy equivalent within {pts} ({p_txt})"
    elif verdict == "different":
        t_p = acc["t_p"]
        t_txt = "< 0.001" if t_p < 0.001 else f"= {t_p:.3f}"
        acc_part = f"accuracy differs by {diff:+.2f} pt (paired t p {t_txt})"
    else:
        acc_part = f"accuracy not shown equivalent within {pts} ({p_txt}; mean diff {diff:+.2f} pt)"
    return f"{time_part}; {acc_part}."
