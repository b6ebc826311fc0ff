"""Tables of the data-parallel study (rows and column specs), from its typed result.

Shared by the HTML and Markdown renderings in :mod:`flowsplit.experiments.dp.html`.
"""

from __future__ import annotations

import math

from flowsplit.experiments.dp.analysis import FLOW_STATS_MODEL
from flowsplit.experiments.dp.layout import PLAIN_HOOK
from flowsplit.experiments.dp.result import (
    Analysis,
    CentralComparison,
    CompareResult,
    SameCoresComparison,
)
from flowsplit.experiments.dp.scaling import NETWORK_PRESETS
from flowsplit.experiments.stats import Interval
from flowsplit.report.tables import Column, fmt_ci, fmt_float, fmt_p, fmt_pct

EFFICIENCY_AT = (8, 64, 1024)


def _ci(d: Interval | None, scale: float = 1.0, digits: int = 1) -> str:
    return fmt_ci(d.mean, d.low, d.high, scale, digits) if d else "–"


def _clip(x: float) -> float:
    return min(1.0, max(0.0, x)) if x == x else x


def _score_ci(d: Interval | None) -> str:
    """A score's mean and CI in %, the interval clipped to [0, 100] (a t-interval over a
    few seeds can overshoot a bounded score)."""
    if not d:
        return "–"
    return fmt_ci(d.mean, _clip(d.low), _clip(d.high), 100, 1)


def model_label(model: str) -> str:
    """A model's name in tables; the flow-statistics baseline says what it is."""
    return f"{model} (flow-statistics baseline)" if model == FLOW_STATS_MODEL else model


def speedup_cell(v: CentralComparison) -> str:
    """The measured speedup with its CI, and why it is not claimed when it is not."""
    text = _ci(v.speedup, 1, 2)
    withheld = v.claims.speedup_withheld
    return f"{text}, not claimed: {', '.join(withheld)}" if withheld else text


def same_cores_cell(sc: SameCoresComparison | None, n_workers: int) -> str:
    """The same-cores speedup with its CI (``vs 1 x 2 threads``) on its worker count's row,
    and why it is not claimed when it is not; '–' on the others."""
    if sc is None or sc.n_workers != n_workers:
        return "–"
    text = f"{_ci(sc.speedup, 1, 2)} vs 1 x {sc.central_threads} threads"
    withheld = sc.speedup_withheld
    return f"{text}, not claimed: {', '.join(withheld)}" if withheld else text


def baseline_rows(analysis: Analysis) -> list[dict]:
    """The majority-class row, and a placeholder for XGBoost when the study lacks it."""
    rows = []
    maj = analysis.baselines.majority
    if maj:
        rows.append(
            {
                "model": f"majority class (always {maj.class_name!r})",
                "workers": "–",
                "acc_c": f"{100 * maj.accuracy:.1f}",
                "f1_c": f"{100 * maj.macro_f1:.1f}",
                "verdict": "baseline",
                "f1_verdict": "baseline",
            }
        )
    if FLOW_STATS_MODEL not in analysis.models:
        rows.append(
            {
                "model": model_label(FLOW_STATS_MODEL),
                "workers": "–",
                "verdict": "not run (add xgboost to --models)",
            }
        )
    return rows


def summary_rows(analysis: Analysis) -> list[dict]:
    """One row per model and data-parallel worker count, after the baseline rows."""
    rows = baseline_rows(analysis)
    for model, e in analysis.models.items():
        central = e.central
        acc_c = _score_ci(central.accuracy if central else None)
        f1_c = _score_ci(central.macro_f1 if central else None)
        if not e.vs_central:  # centralised only: still a row, for its scores
            rows.append(
                {
                    "model": model_label(model),
                    "workers": "1",
                    "acc_c": acc_c,
                    "f1_c": f1_c,
                    "verdict": "centralised only",
                }
            )
        for n, v in e.vs_central.items():
            g = e.by_workers[n]
            acc = v.accuracy
            rows.append(
                {
                    "model": model_label(model),
                    "workers": f"{n}" + (" (oversubscribed)" if v.oversubscribed else ""),
                    "acc_c": acc_c,
                    "acc_p": _score_ci(g.accuracy),
                    "diff": _ci(acc.diff_tost or acc.diff, 100, 2),
                    "tost": acc.tost_p,
                    "verdict": v.claims.accuracy_verdict,
                    "f1_c": f1_c,
                    "f1_p": _score_ci(g.macro_f1),
                    "f1_verdict": v.claims.macro_f1_verdict,
                    "speedup": speedup_cell(v),
                    "same_cores": same_cores_cell(e.same_cores, v.n_workers),
                    "eff": v.efficiency.mean,
                    "comm": g.comm_share.mean,
                }
            )
    return rows


SUMMARY_COLS = [
    Column("model", "model"),
    Column("workers", "workers"),
    Column("acc_c", "accuracy centralised %"),
    Column("acc_p", "accuracy data-parallel %"),
    Column("diff", "difference, pt (1-2α CI, as TOST)"),
    Column("tost", "TOST p", fmt_p, "right"),
    Column("verdict", "accuracy verdict"),
    Column("f1_c", "macro-F1 centralised %"),
    Column("f1_p", "macro-F1 data-parallel %"),
    Column("f1_verdict", "macro-F1 verdict"),
    Column("speedup", "speedup (epoch)"),
    Column("same_cores", "speedup vs 1 process, same cores"),
    Column("eff", "efficiency", fmt_pct(0), "right"),
    Column("comm", "comm share", fmt_pct(1), "right"),
]


def stats_rows(analysis: Analysis) -> list[dict]:
    rows = []
    for model, e in analysis.models.items():
        for n, v in e.vs_central.items():
            mc = v.mcnemar
            for metric, c, verdict in (
                ("accuracy", v.accuracy, v.claims.accuracy_verdict),
                ("macro_f1", v.macro_f1, v.claims.macro_f1_verdict),
            ):
                rows.append(
                    {
                        "model": model_label(model),
                        "workers": n,
                        "metric": metric,
                        "n": c.n,
                        "diff": _ci(c.diff, 100, 2),
                        "t_p": c.t_p,
                        "w_p": c.wilcoxon_p,
                        "diff_tost": _ci(c.diff_tost, 100, 2),
                        "tost": c.tost_p,
                        "sd": 100 * c.sd_diff,
                        "need": c.seeds_for_power,
                        "verdict": verdict,
                        "mcnemar": (
                            f"{v.mcnemar_significant} of {len(mc)} seeds p < "
                            f"{analysis.alpha:g} (p: " + ", ".join(fmt_p(m.p) for m in mc) + ")"
                            if metric == "accuracy" and mc
                            else "–"
                        ),
                        "note": c.note,
                    }
                )
    return rows


STATS_COLS = [
    Column("model", "model"),
    Column("workers", "workers"),
    Column("metric", "metric"),
    Column("n", "seeds", align="right"),
    Column("diff", "mean diff, pt (95 % CI)"),
    Column("t_p", "paired t p", fmt_p, "right"),
    Column("w_p", "Wilcoxon p", fmt_p, "right"),
    Column("diff_tost", "1-2α CI, pt (TOST)"),
    Column("tost", "TOST p", fmt_p, "right"),
    Column("sd", "sd of paired diffs, pt", fmt_float(2), "right"),
    Column("need", "seeds TOST needs (80 % power, true diff 0)", align="right"),
    Column("verdict", "verdict"),
    Column("mcnemar", "McNemar"),
    Column("note", "note"),
]


def timing_rows(analysis: Analysis) -> list[dict]:
    rows = []
    for model, e in analysis.models.items():
        for n, g in e.by_workers.items():
            rows.append(
                {
                    "model": model_label(model),
                    "workers": n,
                    "runs": g.n_runs,
                    "epoch": _ci(g.epoch_time_s, 1, 3),
                    "sps": g.samples_per_s.mean,
                    "comm": g.comm_share.mean,
                    "rss": g.peak_rss_mb.mean,
                    "over": "yes" if g.oversubscribed else "no",
                    "cont": f"{g.n_contended} of {g.n_runs}",
                    "cpu": g.cpu_obtained.mean,
                }
            )
    return rows


TIMING_COLS = [
    Column("model", "model"),
    Column("workers", "workers"),
    Column("runs", "runs", align="right"),
    Column("epoch", "time per epoch, s (95 % CI)"),
    Column("sps", "samples/s", fmt_float(0), "right"),
    Column("comm", "comm share", fmt_pct(1), "right"),
    Column("rss", "peak RSS per worker, MB", fmt_float(0), "right"),
    Column("over", "oversubscribed"),
    Column("cont", "contended runs"),
    Column("cpu", "CPU obtained per thread", fmt_pct(0), "right"),
]


def scaling_rows(analysis: Analysis) -> tuple[list[dict], list[dict]]:
    fit_rows, pred_rows = [], []
    for model, e in analysis.models.items():
        s = e.scaling
        if s is None or s.error is not None:
            continue
        for p in s.points:
            fit_rows.append(
                {
                    "model": model,
                    "workers": p.n_workers,
                    "measured": p.measured_s,
                    "predicted": p.predicted_s,
                    "error": p.rel_error,
                    "loo": p.loo_error,
                    "role": ("fit" if p.in_fit else "held out")
                    + (", oversubscribed" if p.oversubscribed else ""),
                    "c_ms": 1e3 * s.param("compute_per_sample_s"),
                    "h_ms": 1e3 * s.param("per_step_s"),
                    "s_ms": 1e3 * s.param("sync_per_step_s"),
                    "cap": s.speedup_cap_fixed_batch,
                    "comm_m": p.measured_comm_share,
                    "comm_p": p.predicted_comm_share,
                }
            )
        for key, rows in s.predictions.items():
            if key == "host":
                continue
            by_n = {r.n_workers: r for r in rows}
            row = {"model": model, "network": NETWORK_PRESETS[key].name}
            for n in EFFICIENCY_AT:
                row[f"eff{n}"] = by_n[n].efficiency if n in by_n else math.nan
            row["comm1024"] = by_n[1024].comm_share if 1024 in by_n else math.nan
            pred_rows.append(row)
    return fit_rows, pred_rows


FIT_COLS = [
    Column("model", "model"),
    Column("workers", "workers", align="right"),
    Column("measured", "measured epoch, s", fmt_float(3), "right"),
    Column("predicted", "model epoch, s", fmt_float(3), "right"),
    Column("error", "error", fmt_pct(1), "right"),
    Column("role", "point"),
    Column("loo", "error, this count left out of the fit", fmt_pct(1), "right"),
    Column("c_ms", "c: compute, ms/sample", fmt_float(3), "right"),
    Column("h_ms", "h: per step, ms", fmt_float(2), "right"),
    Column("s_ms", "s: sync per step, ms", fmt_float(2), "right"),
    Column("cap", "speedup cap, fixed batch", fmt_float(1), "right"),
    Column("comm_m", "comm share measured", fmt_pct(1), "right"),
    Column("comm_p", "comm share model", fmt_pct(1), "right"),
]
PRED_COLS = [
    Column("model", "model"),
    Column("network", "network"),
    *[Column(f"eff{n}", f"efficiency at {n}", fmt_pct(0), "right") for n in EFFICIENCY_AT],
    Column("comm1024", "comm share at 1024", fmt_pct(0), "right"),
]


def per_class_table(results: CompareResult) -> tuple[list[dict], list[Column]]:
    """Rows = classes; columns = each model centralised and at its headline worker count."""
    classes = results.dataset.classes or []
    cols = [Column("class", "class")]
    rows: list[dict] = [{"class": c} for c in classes]
    maj = results.analysis.baselines.majority
    if maj:
        cols.append(Column("majority", f"majority class ({maj.class_name})", fmt_pct(1), "right"))
        for row, c in zip(rows, classes, strict=True):
            row["majority"] = maj.per_class_f1.get(c, math.nan)
    for model, by_n in results.per_class_f1.items():
        entry = results.analysis.models[model]
        ok = [int(n) for n, v in entry.vs_central.items() if not v.oversubscribed]
        for n in ("1", str(max(ok)) if ok else None):
            if n is None or n not in by_n:
                continue
            key = f"{model}@{n}"
            label = f"{model_label(model)} {'centralised' if n == '1' else n + ' workers'}"
            cols.append(Column(key, label, fmt_pct(1), "right"))
            for row, c in zip(rows, classes, strict=True):
                row[key] = by_n[n].get(c, math.nan)
    return rows, cols


def _mb(d: Interval | None) -> float:
    return d.mean / 1e6 if d else math.nan


def hook_rows(analysis: Analysis) -> list[dict]:
    """One row per model, worker count and communication hook: time, bytes, exposed
    communication and scores, and a hook's paired differences from the plain all-reduce
    of the same seeds (``analysis.comm_hooks``, empty for a study without hooks)."""
    rows = []
    for model, by_n in analysis.comm_hooks.items():
        for n, by_hook in by_n.items():
            for hook, g in by_hook.items():
                vs = g.vs_plain
                row = {
                    "model": model,
                    "workers": n,
                    "hook": hook + (" (reference)" if hook == PLAIN_HOOK else ""),
                    "seeds": ", ".join(map(str, g.seeds)),
                    "epoch": _ci(g.epoch_time_s, 1, 3)
                    + (" (contended)" if g.timing_contended else ""),
                    "ratio": vs.epoch_time_ratio.mean if vs else math.nan,
                    "mb": _mb(g.comm_bytes_per_epoch),
                    "comm": g.comm_time_per_epoch_s.mean,
                    "exposed": g.exposed_comm_per_epoch_s.mean,
                    "acc": _score_ci(g.accuracy),
                    "f1": _score_ci(g.macro_f1),
                }
                if vs:
                    for c, short in ((vs.accuracy, "acc"), (vs.macro_f1, "f1")):
                        row[f"d_{short}"] = _ci(c.diff_tost or c.diff, 100, 2)
                        row[f"v_{short}"] = c.verdict
                rows.append(row)
    return rows


HOOK_COLS = [
    Column("model", "model"),
    Column("workers", "workers"),
    Column("hook", "comm hook"),
    Column("seeds", "seeds"),
    Column("epoch", "time per epoch, s (95 % CI)"),
    Column("ratio", "epoch time / plain", fmt_float(2), "right"),
    Column("mb", "all-reduce MB per epoch (rank 0)", fmt_float(2), "right"),
    Column("comm", "all-reduce s per epoch", fmt_float(3), "right"),
    Column("exposed", "exposed comm s per epoch", fmt_float(3), "right"),
    Column("acc", "accuracy %"),
    Column("d_acc", "accuracy - plain, pt (1-2α CI)"),
    Column("v_acc", "accuracy vs plain"),
    Column("f1", "macro-F1 %"),
    Column("d_f1", "macro-F1 - plain, pt (1-2α CI)"),
    Column("v_f1", "macro-F1 vs plain"),
]
