"""Write the data-parallel study's results and report from a study directory.

Reads ``OUT/compare.json`` (the study's settings), the runs under ``OUT/runs``,
``OUT/allreduce.json`` and ``OUT/workloads.json``; writes ``results.json``,
``results.csv``, ``report.md`` and ``report.html``. Everything is recomputed from
the stored runs, so ``flowsplit report OUT`` after more cells finished (or after a
change of margin) gives the up-to-date report.
"""

from __future__ import annotations

import csv
import io
import json
import math
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from flowsplit import __version__
from flowsplit.data.store import atomic_write_json, atomic_write_text
from flowsplit.errors import InputError
from flowsplit.experiments.analysis import analyse, headline
from flowsplit.experiments.compare import cell_dir, plan_cells
from flowsplit.experiments.records import (
    CONTENDED_SHARE,
    CSV_COLUMNS,
    JSON_EXTRA,
    read_record,
    workload_from_records,
)
from flowsplit.experiments.scaling import NETWORK_PRESETS, Network, Workload, fit_allreduce
from flowsplit.report.tables import Column, fmt_ci, fmt_float, fmt_p, fmt_pct

ERROR_LIMIT = 0.15  # the scaling model is trusted on measured points within +-15 %
EFFICIENCY_AT = (8, 64, 1024)


def write_workloads(out: Path, dataset) -> None:
    """Store each model's workload (parameter bytes, features ...) while the dataset is at hand."""
    cfg = _read_json(out / "compare.json")["config"]
    result = {}
    for model in cfg["models"]:
        recs = [r for r in _records(out, cfg, cores=0) if r["model"] == model]
        wl = workload_from_records(recs, dataset)
        if wl is not None:
            result[model] = wl.as_dict()
    atomic_write_json(out / "workloads.json", result)


def _refresh_workloads(out: Path) -> None:
    """Recount the workloads from the runs when the dataset is still where it was."""
    from flowsplit.data.store import load_dataset

    cfg = _read_json(out / "compare.json")["config"]
    try:
        dataset = load_dataset(cfg["dataset"])
    except InputError:
        return  # dataset moved or deleted: keep the workloads stored with the study
    write_workloads(out, dataset)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(path.parent, f"no {path.name}: not a `flowsplit compare` study") from None


def _records(out: Path, cfg: dict, cores: int) -> list[dict]:
    recs = []
    for cell in plan_cells(cfg["models"], cfg["workers"], cfg["seeds"]):
        rec = read_record(cell_dir(out, cell), cores=cores)
        if rec is not None:
            recs.append(rec)
    return recs


def _host_network(bench: dict | None) -> tuple[Network | None, float]:
    if not bench or len(bench.get("rows", [])) < 2:
        return None, math.nan
    rows = bench["rows"]
    return fit_allreduce([r["bytes"] for r in rows], [r["time_s"] for r in rows],
                         n_workers=int(bench["n_workers"]), name="this machine (gloo)")  # fmt: skip


def build_results(out: str | Path) -> dict:
    """Analyse a study directory; the returned dict is what ``results.json`` holds."""
    out = Path(out)
    meta = _read_json(out / "compare.json")
    cfg, cores = meta["config"], int(meta.get("cores") or 0)
    records = _records(out, cfg, cores)
    bench_path = out / "allreduce.json"
    bench = _read_json(bench_path) if bench_path.is_file() else None
    host, bench_err = _host_network(bench)
    wl_path = out / "workloads.json"
    workloads = {
        m: Workload(**d) for m, d in (_read_json(wl_path) if wl_path.is_file() else {}).items()
    }
    analysis = analyse(records, workloads=workloads, host=host, cores=cores,
                       margin=cfg["margin"], alpha=cfg["alpha"])  # fmt: skip
    status = _read_json(out / "status.json") if (out / "status.json").is_file() else {}
    failures = {
        k: v for k, v in status.get("failures", {}).items()
        if not any(f"{r['model']}/w{r['workers']}/seed{r['seed']}" == k for r in records)
    }  # fmt: skip
    env = next((r["env"] for r in records if r.get("env")), {})
    return {
        "flowsplit_version": __version__,
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": cfg,
        "cores": cores,
        "host": platform.node(),
        "dataset": {"path": cfg["dataset"], "n_train": _first(records, "n_train"),
                    "n_test": _first(records, "n_test"), "classes": _first(records, "classes")},
        "allreduce": {"benchmark": bench, "fit": host.__dict__ if host else None,
                      "fit_max_rel_error": bench_err},
        "networks": {k: v.__dict__ for k, v in NETWORK_PRESETS.items()},
        "analysis": analysis,
        "per_class_f1": per_class_f1(records),
        "summary": summary_lines(analysis, cfg, cores, failures),
        "failures": failures,
        "cells": [{k: r.get(k) for k in (*CSV_COLUMNS, *JSON_EXTRA)} for r in records],
        "env": env,
        "_records": records,  # dropped before writing; the renderer needs predictions
    }  # fmt: skip


def per_class_f1(records: list[dict]) -> dict:
    """Mean test F1 of each class over seeds, per model and worker count."""
    acc: dict = {}
    for r in records:
        slot = acc.setdefault(r["model"], {}).setdefault(str(r["workers"]), {})
        for cls, f1 in (r.get("per_class_f1") or {}).items():
            if f1 is not None:
                slot.setdefault(cls, []).append(float(f1))
    return {
        m: {n: {c: float(np.mean(v)) for c, v in by_c.items()} for n, by_c in by_n.items()}
        for m, by_n in acc.items()
    }


def per_class_table(results: dict) -> tuple[list[dict], list[Column]]:
    """Rows = classes; columns = each model centralised and at its headline worker count."""
    classes = results["dataset"]["classes"] or []
    cols = [Column("class", "class")]
    rows = [{"class": c} for c in classes]
    for model, by_n in results["per_class_f1"].items():
        entry = results["analysis"]["models"][model]
        ok = [int(n) for n, v in entry["vs_central"].items() if not v["oversubscribed"]]
        for n in ("1", str(max(ok)) if ok else None):
            if n is None or n not in by_n:
                continue
            key = f"{model}@{n}"
            label = f"{model} {'centralised' if n == '1' else n + ' workers'}"
            cols.append(Column(key, label, fmt_pct(1), "right"))
            for row in rows:
                row[key] = by_n[n].get(row["class"], math.nan)
    return rows, cols


def _first(records: list[dict], key: str) -> Any:
    return records[0].get(key) if records else None


def summary_lines(analysis: dict, cfg: dict, cores: int, failures: dict) -> list[str]:
    """Plain-language findings, most important first."""
    lines = []
    models = analysis["models"]
    for model, entry in models.items():
        line = headline(model, entry, cfg["margin"])
        if line:
            lines.append(line)
    over = sorted({int(n) for e in models.values() for n, g in e["by_workers"].items()
                   if g["oversubscribed"]})  # fmt: skip
    if over:
        lines.append(
            f"Runs with {', '.join(map(str, over))} workers x {cfg['threads']} thread(s) exceed "
            f"this machine's {cores} cores: their timing is oversubscribed, shown but kept out "
            "of speedup claims and of the scaling fit."
        )
    n_runs = sum(g["n_runs"] for e in models.values() for g in e["by_workers"].values())
    n_cont = sum(g["n_contended"] for e in models.values() for g in e["by_workers"].values())
    fallback = any(g["timing_contended"] for e in models.values() for g in e["by_workers"].values())
    if n_cont:
        lines.append(
            f"{n_cont} of {n_runs} runs shared the CPUs with other processes (more than "
            f"{100 * CONTENDED_SHARE:.0f} % of the cores' time): their accuracy counts; their "
            "timing is left out of speedups and of the scaling fit"
            + (
                ", except where no undisturbed run exists: those timings (and the speedups and "
                "fit built on them) are unreliable; rerun with --rerun-contended on a quiet machine."
                if fallback
                else "."
            )
        )
    errs = {m: e["scaling"]["max_abs_error"] for m, e in models.items()
            if "max_abs_error" in (e.get("scaling") or {})}  # fmt: skip
    if errs:
        worst = max(errs, key=errs.get)
        ok = "within" if errs[worst] <= ERROR_LIMIT else "outside"
        line = (
            f"Scaling model error on the measured points: at most {100 * errs[worst]:.1f} % "
            f"({worst}), {ok} the +-{100 * ERROR_LIMIT:.0f} % target"
        )
        loo = {m: models[m]["scaling"]["max_abs_loo_error"] for m in errs}
        loo = {m: v for m, v in loo.items() if not math.isnan(v)}
        if loo:
            lw = max(loo, key=loo.get)
            line += (
                f"; predicting each worker count from the others: at most "
                f"{100 * loo[lw]:.1f} % ({lw})"
            )
        lines.append(line + ".")
        for key in ("10gbe", "ib100"):
            reach = {m: _reach(models[m], key) for m in errs}
            net = NETWORK_PRESETS[key].name
            lines.append(f"Predicted on {net}: scaling efficiency stays >= 50 % up to " + ", ".join(
                f"{n} workers for {m}" for m, n in reach.items()) + ".")  # fmt: skip
    if failures:
        lines.append(f"{len(failures)} run(s) failed and are missing from the statistics: "
                     + ", ".join(sorted(failures)) + ".")  # fmt: skip
    return lines


def _reach(entry: dict, network: str) -> int:
    rows = entry["scaling"]["predictions"].get(network, [])
    good = [r["n_workers"] for r in rows if r["efficiency"] >= 0.5]
    return max(good) if good else 1


# --- tables ------------------------------------------------------------------------
def _ci(d: dict | None, scale: float = 1.0, digits: int = 1) -> str:
    return fmt_ci(d["mean"], d["low"], d["high"], scale, digits) if d else "–"


def _score_ci(d: dict | None) -> str:
    """A score's mean and CI in %, the interval clipped to [0, 100] (a t-interval over a
    few seeds can overshoot a bounded score)."""
    if not d:
        return "–"
    clip = {k: min(1.0, max(0.0, d[k])) if d[k] == d[k] else d[k] for k in ("low", "high")}
    return fmt_ci(d["mean"], clip["low"], clip["high"], 100, 1)


def summary_rows(analysis: dict) -> list[dict]:
    rows = []
    for model, e in analysis["models"].items():
        central = e["by_workers"].get("1")
        for n, v in e["vs_central"].items():
            g = e["by_workers"][n]
            acc = v["accuracy"]
            rows.append({
                "model": model, "workers": f"{n}" + (" (oversubscribed)" if v["oversubscribed"]
                                                      else ""),
                "acc_c": _score_ci(central and central["accuracy"]),
                "acc_p": _score_ci(g["accuracy"]), "diff": _ci(acc["diff"], 100, 2),
                "tost": acc["tost_p"], "verdict": acc["verdict"],
                "f1_c": _score_ci(central and central["macro_f1"]),
                "f1_p": _score_ci(g["macro_f1"]), "f1_verdict": v["macro_f1"]["verdict"],
                "speedup": _ci(v["speedup"], 1, 2), "eff": v["efficiency"]["mean"],
                "comm": g["comm_share"]["mean"],
            })  # fmt: skip
    return rows


SUMMARY_COLS = [
    Column("model", "model"), Column("workers", "workers"),
    Column("acc_c", "accuracy centralised %"), Column("acc_p", "accuracy data-parallel %"),
    Column("diff", "difference, pt"), Column("tost", "TOST p", fmt_p, "right"),
    Column("verdict", "accuracy verdict"), Column("f1_c", "macro-F1 centralised %"),
    Column("f1_p", "macro-F1 data-parallel %"), Column("f1_verdict", "macro-F1 verdict"),
    Column("speedup", "speedup (epoch)"), Column("eff", "efficiency", fmt_pct(0), "right"),
    Column("comm", "comm share", fmt_pct(1), "right"),
]  # fmt: skip


def stats_rows(analysis: dict) -> list[dict]:
    rows = []
    for model, e in analysis["models"].items():
        for n, v in e["vs_central"].items():
            for metric in ("accuracy", "macro_f1"):
                c = v[metric]
                mc = v["mcnemar"]
                rows.append({
                    "model": model, "workers": n, "metric": metric, "n": c["n"],
                    "diff": _ci(c["diff"], 100, 2), "t_p": c["t_p"], "w_p": c["wilcoxon_p"],
                    "tost": c["tost_p"], "verdict": c["verdict"],
                    "mcnemar": (f"{v['mcnemar_significant']} of {len(mc)} seeds p < "
                                f"{analysis['alpha']:g} (p: "
                                + ", ".join(fmt_p(m["p"]) for m in mc) + ")"
                                if metric == "accuracy" and mc else "–"),
                    "note": c["note"],
                })  # fmt: skip
    return rows


STATS_COLS = [
    Column("model", "model"), Column("workers", "workers"), Column("metric", "metric"),
    Column("n", "seeds", align="right"), Column("diff", "mean diff, pt (95 % CI)"),
    Column("t_p", "paired t p", fmt_p, "right"), Column("w_p", "Wilcoxon p", fmt_p, "right"),
    Column("tost", "TOST p", fmt_p, "right"), Column("verdict", "verdict"),
    Column("mcnemar", "McNemar"), Column("note", "note"),
]  # fmt: skip


def timing_rows(analysis: dict) -> list[dict]:
    rows = []
    for model, e in analysis["models"].items():
        for n, g in e["by_workers"].items():
            rows.append({
                "model": model, "workers": n, "runs": g["n_runs"],
                "epoch": _ci(g["epoch_time_s"], 1, 3), "sps": g["samples_per_s"]["mean"],
                "comm": g["comm_share"]["mean"], "rss": g["peak_rss_mb"]["mean"],
                "over": "yes" if g["oversubscribed"] else "no",
                "cont": f"{g['n_contended']} of {g['n_runs']}",
                "cpu": g.get("cpu_obtained", {}).get("mean", math.nan),
            })  # fmt: skip
    return rows


TIMING_COLS = [
    Column("model", "model"), Column("workers", "workers"), Column("runs", "runs", align="right"),
    Column("epoch", "time per epoch, s (95 % CI)"),
    Column("sps", "samples/s", fmt_float(0), "right"),
    Column("comm", "comm share", fmt_pct(1), "right"),
    Column("rss", "peak RSS per worker, MB", fmt_float(0), "right"),
    Column("over", "oversubscribed"),
    Column("cont", "contended runs"),
    Column("cpu", "CPU obtained per thread", fmt_pct(0), "right"),
]  # fmt: skip


def scaling_rows(analysis: dict) -> tuple[list[dict], list[dict]]:
    fit_rows, pred_rows = [], []
    for model, e in analysis["models"].items():
        s = e.get("scaling")
        if not s or "points" not in s:
            continue
        for p in s["points"]:
            fit_rows.append({
                "model": model, "workers": p["n_workers"], "measured": p["measured_s"],
                "predicted": p["predicted_s"], "error": p["rel_error"],
                "loo": p.get("loo_error", math.nan),
                "role": ("fit" if p["in_fit"] else "held out")
                + (", oversubscribed" if p["oversubscribed"] else ""),
                "c_ms": 1e3 * s["model"]["compute_per_sample_s"],
                "h_ms": 1e3 * s["model"]["per_step_s"],
                "s_ms": 1e3 * s["model"]["sync_per_step_s"],
                "cap": s.get("speedup_cap_fixed_batch", math.nan),
                "comm_m": p["measured_comm_share"], "comm_p": p["predicted_comm_share"],
            })  # fmt: skip
        for key, rows in s["predictions"].items():
            if key == "host":
                continue
            by_n = {r["n_workers"]: r for r in rows}
            row = {"model": model, "network": NETWORK_PRESETS[key].name}
            for n in EFFICIENCY_AT:
                row[f"eff{n}"] = by_n[n]["efficiency"] if n in by_n else math.nan
            row["comm1024"] = by_n.get(1024, {}).get("comm_share", math.nan)
            pred_rows.append(row)
    return fit_rows, pred_rows


FIT_COLS = [
    Column("model", "model"), Column("workers", "workers", align="right"),
    Column("measured", "measured epoch, s", fmt_float(3), "right"),
    Column("predicted", "model epoch, s", fmt_float(3), "right"),
    Column("error", "error", fmt_pct(1), "right"), Column("role", "point"),
    Column("loo", "error, this count left out of the fit", fmt_pct(1), "right"),
    Column("c_ms", "c: compute, ms/sample", fmt_float(3), "right"),
    Column("h_ms", "h: per step, ms", fmt_float(2), "right"),
    Column("s_ms", "s: sync per step, ms", fmt_float(2), "right"),
    Column("cap", "speedup cap, fixed batch", fmt_float(1), "right"),
    Column("comm_m", "comm share measured", fmt_pct(1), "right"),
    Column("comm_p", "comm share model", fmt_pct(1), "right"),
]  # fmt: skip
PRED_COLS = [
    Column("model", "model"), Column("network", "network"),
    *[Column(f"eff{n}", f"efficiency at {n}", fmt_pct(0), "right") for n in EFFICIENCY_AT],
    Column("comm1024", "comm share at 1024", fmt_pct(0), "right"),
]  # fmt: skip


def render_report(out: str | Path) -> Path:
    """Write results.json, results.csv, report.md and report.html; return the HTML path."""
    from flowsplit.experiments.compare_html import render_html, render_markdown

    out = Path(out)
    _refresh_workloads(out)
    results = build_results(out)
    records = results.pop("_records")
    atomic_write_json(out / "results.json", _finite(results))
    buf = io.StringIO()
    writer = csv.DictWriter(
        buf, fieldnames=list(CSV_COLUMNS), lineterminator="\n", extrasaction="ignore"
    )
    writer.writeheader()
    writer.writerows(results["cells"])
    atomic_write_text(out / "results.csv", buf.getvalue())
    atomic_write_text(out / "report.md", render_markdown(results))
    path = out / "report.html"
    atomic_write_text(path, render_html(results, records))
    return path


def _finite(obj: Any) -> Any:
    """Strict JSON: NaN and infinities become null."""
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    if isinstance(obj, float | np.floating):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj
