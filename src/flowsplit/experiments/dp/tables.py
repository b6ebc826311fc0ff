"""Tables of the data-parallel study (rows and column specs), from its typed result.

Read by the report page, :mod:`flowsplit.experiments.dp.page`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from flowsplit.experiments.dp.analysis import FLOW_STATS_MODEL
from flowsplit.experiments.dp.layout import PLAIN_HOOK
from flowsplit.experiments.dp.result import (
    Analysis,
    CentralComparison,
    CompareResult,
    GroupSummary,
    HookGroup,
    ModelAnalysis,
    SameCoresComparison,
    ScalingFit,
    ScalingPoint,
)
from flowsplit.experiments.dp.scaling import NETWORK_PRESETS
from flowsplit.experiments.stats import Interval, PairedComparison
from flowsplit.report.page import Column, fmt_ci, fmt_float, fmt_p, fmt_pct, rows_of

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


class _Versus(NamedTuple):
    """A model's centralised runs against its runs on ``n`` workers (``v`` None: the model
    has no data-parallel runs, its row shows the centralised scores)."""

    model: str
    entry: ModelAnalysis
    n: str = "1"
    v: CentralComparison | None = None

    @property
    def group(self) -> GroupSummary:
        return self.entry.by_workers[self.n]


def _central_score(x: _Versus, metric: str) -> str:
    central = x.entry.central
    return _score_ci(getattr(central, metric) if central else None)


def _workers_cell(x: _Versus) -> str:
    return x.n + (" (oversubscribed)" if x.v and x.v.oversubscribed else "")


def _of_versus(get):
    """A summary column's value: ``get(x)`` on a data-parallel row, None on the others."""
    return lambda x: get(x) if x.v else None


SUMMARY_COLS = [
    Column("model", "model", of=lambda x: model_label(x.model)),
    Column("workers", "workers", of=_workers_cell),
    Column("acc_c", "accuracy centralised %", of=lambda x: _central_score(x, "accuracy")),
    Column(
        "acc_p", "accuracy data-parallel %", of=_of_versus(lambda x: _score_ci(x.group.accuracy))
    ),
    Column(
        "diff",
        "difference, pt (1-2α CI, as TOST)",
        of=_of_versus(lambda x: _ci(x.v.accuracy.diff_tost or x.v.accuracy.diff, 100, 2)),
    ),
    Column("tost", "TOST p", fmt_p, "right", of=_of_versus(lambda x: x.v.accuracy.tost_p)),
    Column(
        "verdict",
        "accuracy verdict",
        of=lambda x: x.v.claims.accuracy_verdict if x.v else "centralised only",
    ),
    Column("f1_c", "macro-F1 centralised %", of=lambda x: _central_score(x, "macro_f1")),
    Column(
        "f1_p", "macro-F1 data-parallel %", of=_of_versus(lambda x: _score_ci(x.group.macro_f1))
    ),
    Column("f1_verdict", "macro-F1 verdict", of=_of_versus(lambda x: x.v.claims.macro_f1_verdict)),
    Column("speedup", "speedup (epoch)", of=_of_versus(lambda x: speedup_cell(x.v))),
    Column(
        "same_cores",
        "speedup vs 1 process, same cores",
        of=_of_versus(lambda x: same_cores_cell(x.entry.same_cores, x.v.n_workers)),
    ),
    Column("eff", "efficiency", fmt_pct(0), "right", of=_of_versus(lambda x: x.v.efficiency.mean)),
    Column(
        "comm", "comm share", fmt_pct(1), "right", of=_of_versus(lambda x: x.group.comm_share.mean)
    ),
]


def summary_rows(analysis: Analysis) -> list[dict]:
    """One row per model and data-parallel worker count (a model without any: its
    centralised row), after the baseline rows."""
    items = []
    for model, e in analysis.models.items():
        if not e.vs_central:  # centralised only: still a row, for its scores
            items.append(_Versus(model, e))
        items += [_Versus(model, e, n, v) for n, v in e.vs_central.items()]
    return baseline_rows(analysis) + rows_of(items, SUMMARY_COLS)


class _Test(NamedTuple):
    """One metric's paired tests of a model on ``n`` workers against centralised."""

    model: str
    n: str
    v: CentralComparison
    metric: str
    c: PairedComparison
    verdict: str
    alpha: float


def _mcnemar_cell(t: _Test) -> str:
    mc = t.v.mcnemar
    if t.metric != "accuracy" or not mc:
        return "–"
    return (
        f"{t.v.mcnemar_significant} of {len(mc)} seeds p < {t.alpha:g} (p: "
        + ", ".join(fmt_p(m.p) for m in mc)
        + ")"
    )


STATS_COLS = [
    Column("model", "model", of=lambda t: model_label(t.model)),
    Column("workers", "workers", of=lambda t: t.n),
    Column("metric", "metric", of=lambda t: t.metric),
    Column("n", "seeds", align="right", of=lambda t: t.c.n),
    Column("diff", "mean diff, pt (95 % CI)", of=lambda t: _ci(t.c.diff, 100, 2)),
    Column("t_p", "paired t p", fmt_p, "right", of=lambda t: t.c.t_p),
    Column("w_p", "Wilcoxon p", fmt_p, "right", of=lambda t: t.c.wilcoxon_p),
    Column("diff_tost", "1-2α CI, pt (TOST)", of=lambda t: _ci(t.c.diff_tost, 100, 2)),
    Column("tost", "TOST p", fmt_p, "right", of=lambda t: t.c.tost_p),
    Column("sd", "sd of paired diffs, pt", fmt_float(2), "right", of=lambda t: 100 * t.c.sd_diff),
    Column(
        "need",
        "seeds TOST needs (80 % power, true diff 0)",
        align="right",
        of=lambda t: t.c.seeds_for_power,
    ),
    Column("verdict", "verdict", of=lambda t: t.verdict),
    Column("mcnemar", "McNemar", of=_mcnemar_cell),
    Column("note", "note", of=lambda t: t.c.note),
]


def stats_rows(analysis: Analysis) -> list[dict]:
    tests = [
        _Test(model, n, v, metric, c, verdict, analysis.alpha)
        for model, e in analysis.models.items()
        for n, v in e.vs_central.items()
        for metric, c, verdict in (
            ("accuracy", v.accuracy, v.claims.accuracy_verdict),
            ("macro_f1", v.macro_f1, v.claims.macro_f1_verdict),
        )
    ]
    return rows_of(tests, STATS_COLS)


class _Group(NamedTuple):
    model: str
    n: str
    g: GroupSummary


TIMING_COLS = [
    Column("model", "model", of=lambda x: model_label(x.model)),
    Column("workers", "workers", of=lambda x: x.n),
    Column("runs", "runs", align="right", of=lambda x: x.g.n_runs),
    Column("epoch", "time per epoch, s (95 % CI)", of=lambda x: _ci(x.g.epoch_time_s, 1, 3)),
    Column("sps", "samples/s", fmt_float(0), "right", of=lambda x: x.g.samples_per_s.mean),
    Column("comm", "comm share", fmt_pct(1), "right", of=lambda x: x.g.comm_share.mean),
    Column(
        "rss", "peak RSS per worker, MB", fmt_float(0), "right", of=lambda x: x.g.peak_rss_mb.mean
    ),
    Column("over", "oversubscribed", of=lambda x: "yes" if x.g.oversubscribed else "no"),
    Column("cont", "contended runs", of=lambda x: f"{x.g.n_contended} of {x.g.n_runs}"),
    Column(
        "cpu", "CPU obtained per thread", fmt_pct(0), "right", of=lambda x: x.g.cpu_obtained.mean
    ),
]


def timing_rows(analysis: Analysis) -> list[dict]:
    groups = [
        _Group(model, n, g) for model, e in analysis.models.items() for n, g in e.by_workers.items()
    ]
    return rows_of(groups, TIMING_COLS)


class _Point(NamedTuple):
    model: str
    fit: ScalingFit
    p: ScalingPoint


def _role(x: _Point) -> str:
    return ("fit" if x.p.in_fit else "held out") + (
        ", oversubscribed" if x.p.oversubscribed else ""
    )


def _ms(name: str):
    """A fitted parameter of the scaling model, in milliseconds."""
    return lambda x: 1e3 * x.fit.param(name)


FIT_COLS = [
    Column("model", "model", of=lambda x: x.model),
    Column("workers", "workers", align="right", of=lambda x: x.p.n_workers),
    Column("measured", "measured epoch, s", fmt_float(3), "right", of=lambda x: x.p.measured_s),
    Column("predicted", "model epoch, s", fmt_float(3), "right", of=lambda x: x.p.predicted_s),
    Column("error", "error", fmt_pct(1), "right", of=lambda x: x.p.rel_error),
    Column("role", "point", of=_role),
    Column(
        "loo",
        "error, this count left out of the fit",
        fmt_pct(1),
        "right",
        of=lambda x: x.p.loo_error,
    ),
    Column("c_ms", "c: compute, ms/sample", fmt_float(3), "right", of=_ms("compute_per_sample_s")),
    Column("h_ms", "h: per step, ms", fmt_float(2), "right", of=_ms("per_step_s")),
    Column("s_ms", "s: sync per step, ms", fmt_float(2), "right", of=_ms("sync_per_step_s")),
    Column(
        "cap",
        "speedup cap, fixed batch",
        fmt_float(1),
        "right",
        of=lambda x: x.fit.speedup_cap_fixed_batch,
    ),
    Column(
        "comm_m", "comm share measured", fmt_pct(1), "right", of=lambda x: x.p.measured_comm_share
    ),
    Column(
        "comm_p", "comm share model", fmt_pct(1), "right", of=lambda x: x.p.predicted_comm_share
    ),
]


def scaling_rows(analysis: Analysis) -> tuple[list[dict], list[dict]]:
    points, pred_rows = [], []
    for model, e in analysis.models.items():
        s = e.scaling
        if s is None or s.error is not None:
            continue
        points += [_Point(model, s, p) for p in s.points]
        for key, rows in s.predictions.items():
            if key == "host":
                continue
            by_n = {r.n_workers: r for r in rows}
            row = {"model": model, "network": NETWORK_PRESETS[key].name}
            for n in EFFICIENCY_AT:
                row[f"eff{n}"] = by_n[n].efficiency if n in by_n else math.nan
            row["comm1024"] = by_n[1024].comm_share if 1024 in by_n else math.nan
            pred_rows.append(row)
    return rows_of(points, FIT_COLS), pred_rows


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


class _Hook(NamedTuple):
    model: str
    n: str
    hook: str
    g: HookGroup


def _vs_plain(metric: str, text):
    """A hook's paired difference from the plain all-reduce (None: it is the plain one)."""
    return lambda x: text(getattr(x.g.vs_plain, metric)) if x.g.vs_plain else None


def _hook_score_cols(metric: str, short: str, label: str) -> list[Column]:
    """A score of a hook's runs, its paired difference from the plain all-reduce's and
    the verdict on it."""
    return [
        Column(short, f"{label} %", of=lambda x: _score_ci(getattr(x.g, metric))),
        Column(
            f"d_{short}",
            f"{label} - plain, pt (1-2α CI)",
            of=_vs_plain(metric, lambda c: _ci(c.diff_tost or c.diff, 100, 2)),
        ),
        Column(f"v_{short}", f"{label} vs plain", of=_vs_plain(metric, lambda c: c.verdict)),
    ]


def _group_mean(name: str):
    return lambda x: getattr(x.g, name).mean


HOOK_COLS = [
    Column("model", "model", of=lambda x: x.model),
    Column("workers", "workers", of=lambda x: x.n),
    Column(
        "hook", "comm hook", of=lambda x: x.hook + (" (reference)" if x.hook == PLAIN_HOOK else "")
    ),
    Column("seeds", "seeds", of=lambda x: ", ".join(map(str, x.g.seeds))),
    Column(
        "epoch",
        "time per epoch, s (95 % CI)",
        of=lambda x: _ci(x.g.epoch_time_s, 1, 3) + (" (contended)" if x.g.timing_contended else ""),
    ),
    Column(
        "ratio",
        "epoch time / plain",
        fmt_float(2),
        "right",
        of=lambda x: x.g.vs_plain.epoch_time_ratio.mean if x.g.vs_plain else math.nan,
    ),
    Column(
        "mb",
        "all-reduce MB per epoch (rank 0)",
        fmt_float(2),
        "right",
        of=lambda x: _mb(x.g.comm_bytes_per_epoch),
    ),
    Column(
        "comm",
        "all-reduce s per epoch",
        fmt_float(3),
        "right",
        of=_group_mean("comm_time_per_epoch_s"),
    ),
    Column(
        "exposed",
        "exposed comm s per epoch",
        fmt_float(3),
        "right",
        of=_group_mean("exposed_comm_per_epoch_s"),
    ),
    *_hook_score_cols("accuracy", "acc", "accuracy"),
    *_hook_score_cols("macro_f1", "f1", "macro-F1"),
]


def hook_rows(analysis: Analysis) -> list[dict]:
    """One row per model, worker count and communication hook: time, bytes, exposed
    communication and scores, and a hook's paired differences from the plain all-reduce
    of the same seeds (``analysis.comm_hooks``, empty for a study without hooks)."""
    hooks = [
        _Hook(model, n, hook, g)
        for model, by_n in analysis.comm_hooks.items()
        for n, by_hook in by_n.items()
        for hook, g in by_hook.items()
    ]
    return rows_of(hooks, HOOK_COLS)
