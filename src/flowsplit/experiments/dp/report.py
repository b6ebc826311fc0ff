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
import math
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from flowsplit import __version__
from flowsplit.data.store import load_dataset
from flowsplit.errors import InputError
from flowsplit.experiments.dp.analysis import (
    BELOW_MAJORITY,
    DIFFERENT,
    EQUIVALENT,
    ERROR_LIMIT,
    NOT_ENOUGH_SEEDS,
    analyse,
    compare_hooks,
    headline_comparison,
)
from flowsplit.experiments.dp.crosssource import cross_source_section
from flowsplit.experiments.dp.crosssource import summary_lines as cross_source_lines
from flowsplit.experiments.dp.layout import PLAIN_HOOK, cell_dir, cell_name, study_cells
from flowsplit.experiments.dp.page import report_page
from flowsplit.experiments.dp.records import (
    CONTENDED_SHARE,
    CSV_COLUMNS,
    JSON_EXTRA,
    RunRecord,
    read_record,
    workload_from_records,
)
from flowsplit.experiments.dp.result import (
    WORKLOADS_NAME,
    AllreduceBenchmark,
    Analysis,
    CentralComparison,
    CompareResult,
    HookGroup,
    ModelAnalysis,
    ScalingFit,
    StudyFile,
    read_allreduce,
    read_status,
    read_study,
    read_workloads,
)
from flowsplit.experiments.dp.samecores import add_same_cores, headline_text, short_same_cores
from flowsplit.experiments.dp.scaling import (
    FITTED_PARAMETERS,
    NETWORK_PRESETS,
    Network,
    fit_allreduce,
)
from flowsplit.experiments.intervals import same_on_every_seed
from flowsplit.experiments.stats import MIN_EQUIVALENCE_SEEDS, Interval
from flowsplit.outputs import atomic_write_json, atomic_write_text
from flowsplit.util import jsonable, typed_to_dict


def write_workloads(out: Path, dataset) -> None:
    """Store each model's workload (parameter bytes, features ...) while the dataset is at hand."""
    study = read_study(out)
    records = _records(out, study)
    result = {}
    for model in study.settings.models:
        recs = [
            r
            for r in records
            if r.model == model and r.comm_hook == PLAIN_HOOK and not _same_cores(r, study)
        ]
        wl = workload_from_records(recs, dataset)
        if wl is not None:
            result[model] = wl.as_dict()
    atomic_write_json(out / WORKLOADS_NAME, result)


def _refresh_workloads(out: Path) -> None:
    """Recount the workloads from the runs when the dataset is still where it was."""
    try:
        dataset = load_dataset(read_study(out).settings.dataset)
    except InputError:
        return  # dataset moved or deleted: keep the workloads stored with the study
    write_workloads(out, dataset)


def _records(out: Path, study: StudyFile) -> list[RunRecord]:
    recs = []
    for cell in study_cells(study.settings, study.cores):
        rec = read_record(cell_dir(out, cell), cores=study.cores)
        if rec is not None:
            recs.append(rec)
    return recs


def _same_cores(r: RunRecord, study: StudyFile) -> bool:
    """Whether a record is of a same-cores centralised cell (more threads than the study's)."""
    return r.workers == 1 and r.threads_per_worker != study.settings.threads


def _record_name(r: RunRecord, study: StudyFile) -> str:
    """The name of the cell a record is of (``cnn/w1-t2/seed0`` for a same-cores one)."""
    threads = r.threads_per_worker if _same_cores(r, study) else None
    return cell_name(r.model, r.workers, r.seed, r.comm_hook, threads)


def _host_network(bench: AllreduceBenchmark | None) -> tuple[Network | None, float]:
    if bench is None or len(bench.rows) < 2:
        return None, math.nan
    return fit_allreduce(
        bench.sizes, bench.times_s, n_workers=bench.n_workers, name="this machine (gloo)"
    )


def build_results(out: str | Path) -> tuple[CompareResult, list[RunRecord]]:
    """Analyse a study directory: the result ``results.json`` holds, and the plain
    all-reduce runs' records (the report draws their learning curves and confusions)."""
    out = Path(out)
    study = read_study(out)
    settings, cores = study.settings, study.cores
    records = _records(out, study)
    bench = read_allreduce(out)
    host, bench_err = _host_network(bench)
    # The study's main comparison (and the scaling fit) is of the plain all-reduce; the
    # communication hooks are compared with it on their own.
    plain = [r for r in records if r.comm_hook == PLAIN_HOOK and not _same_cores(r, study)]
    margin, alpha = settings.margin, settings.alpha
    analysis = analyse(
        plain, workloads=read_workloads(out), host=host, cores=cores, margin=margin, alpha=alpha
    )
    analysis.comm_hooks = compare_hooks(records, margin=margin, alpha=alpha)
    add_same_cores(analysis, plain, [r for r in records if _same_cores(r, study)])
    done = {_record_name(r, study) for r in records}
    failures = {k: v for k, v in read_status(out).failures.items() if k not in done}
    env = next((r.env for r in records if r.env), {})
    doc = {
        "flowsplit_version": __version__,
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": study.config,
        "cores": cores,
        "host": platform.node(),
        "dataset": {
            "path": settings.dataset,
            "n_train": _first(records, "n_train"),
            "n_test": _first(records, "n_test"),
            "classes": _first(records, "classes"),
        },
        "allreduce": {
            "benchmark": bench,
            "fit": host.__dict__ if host else None,
            "fit_max_rel_error": bench_err,
        },
        "networks": {k: v.__dict__ for k, v in NETWORK_PRESETS.items()},
        "analysis": analysis,
        "per_class_f1": per_class_f1(plain),
        "failures": failures,
        "cells": [{k: getattr(r, k) for k in (*CSV_COLUMNS, *JSON_EXTRA)} for r in records],
        "env": env,
    }
    result = CompareResult.from_dict(jsonable(doc, strict=False))  # infinities kept
    result.cross_source = cross_source_section(settings.cross_source, settings.dataset, plain)
    result.summary = summary_lines(result) + cross_source_lines(result.cross_source)
    return result, plain


def per_class_f1(records: list[RunRecord]) -> dict:
    """Mean test F1 of each class over seeds, per model and worker count."""
    acc: dict = {}
    for r in records:
        slot = acc.setdefault(r.model, {}).setdefault(str(r.workers), {})
        for cls, f1 in r.per_class_f1.items():
            if f1 is not None:
                slot.setdefault(cls, []).append(float(f1))
    return {
        m: {n: {c: float(np.mean(v)) for c, v in by_c.items()} for n, by_c in by_n.items()}
        for m, by_n in acc.items()
    }


def _first(records: list[RunRecord], key: str) -> Any:
    return getattr(records[0], key) if records else None


SPEEDUP_WORTH_IT = 1.2
"""A speedup that pays: claimed, at least this, its 95 % CI above 1x (and accuracy shown
equivalent); the overview's advice uses the same rule."""


def pays(v: CentralComparison) -> bool:
    """Whether data parallelism pays in this comparison (:data:`SPEEDUP_WORTH_IT`)."""
    s = v.speedup
    return (
        v.claims.speedup_claimed
        and v.claims.equivalent
        and s.mean >= SPEEDUP_WORTH_IT
        and not math.isnan(s.low)
        and s.low > 1
    )


def _short_speed(v: CentralComparison) -> str:
    s = v.speedup
    if not v.claims.speedup_claimed:
        why = ", ".join(v.claims.speedup_withheld) or "not claimed"
        return f"no speedup claimed ({why})"
    return f"{s.mean:.2f}x faster" if s.mean >= 1 else f"{1 / s.mean:.2f}x slower"


def _short_same_cores(entry: ModelAnalysis, v: CentralComparison) -> str:
    """``, against 1 x 2 threads 1.10x faster``: the same-cores speedup at the headline's
    worker count, when the study measured it."""
    sc = entry.same_cores
    if sc is None or sc.n_workers != v.n_workers:
        return ""
    return f", {short_same_cores(sc)}"


def _short_accuracy(v: CentralComparison, margin: float) -> str:
    verdict, acc = v.claims.accuracy_verdict, v.accuracy
    if verdict == EQUIVALENT:
        return f"accuracy equivalent within +-{100 * margin:g} pt"
    if verdict == DIFFERENT:
        return f"accuracy {100 * acc.diff.mean:+.1f} pt"
    if verdict == NOT_ENOUGH_SEEDS:
        return f"accuracy not judged ({acc.n} of {MIN_EQUIVALENCE_SEEDS} seeds needed)"
    if verdict == BELOW_MAJORITY:
        return "not above the majority class (not learned)"
    return f"accuracy not shown equivalent within +-{100 * margin:g} pt"


def verdict_line(result: CompareResult) -> str:
    """The page's one-line answer: does data parallelism pay here, and per model why
    (speedup and accuracy at the largest worker count that does not oversubscribe the
    cores), with the threads each side had."""
    parts, worth, setups = [], [], set()
    for model, entry in result.analysis.models.items():
        v = headline_comparison(entry)
        if v is None:
            continue
        setups.add(v.n_workers)
        parts.append(
            f"{model} {_short_speed(v)}{_short_same_cores(entry, v)}, "
            f"{_short_accuracy(v, result.margin)}"
        )
        if pays(v):
            worth.append(model)
    if not parts:
        return "No data-parallel run to compare with a centralised one (add --workers 2)."
    t = result.threads
    cores = ", ".join(f"{n} workers x {t} thread(s)" for n in sorted(setups))
    head = (
        f"Data parallelism pays for {', '.join(worth)}"
        if worth
        else "Data parallelism is not shown to pay here: train centralised"
    )
    return f"{head} ({cores} against 1 x {t} thread(s)): " + "; ".join(parts) + "."


def summary_lines(result: CompareResult) -> list[str]:
    """The verdict (:func:`verdict_line`), then plain-language findings, most important
    first."""
    analysis = result.analysis
    lines = [verdict_line(result), *baseline_lines(analysis)]
    for model, entry in analysis.models.items():
        line = headline_text(model, entry, result.margin)
        if line:
            lines.append(line)
    lines += hook_lines(analysis.comm_hooks)
    lines += _timing_lines(result)
    lines += _scaling_lines(result)
    return _with_failures(lines, result.failures)


def _timing_lines(result: CompareResult) -> list[str]:
    """Which runs' timing the claims leave out: oversubscribed worker counts, and runs
    that shared the CPUs with other processes."""
    models, lines = result.analysis.models, []
    groups = [g for e in models.values() for g in e.by_workers.values()]
    over = sorted(
        {int(n) for e in models.values() for n, g in e.by_workers.items() if g.oversubscribed}
    )
    if over:
        lines.append(
            f"Runs with {', '.join(map(str, over))} workers x {result.threads} thread(s) exceed "
            f"this machine's {result.cores} cores: their timing is oversubscribed, shown but kept "
            "out of speedup claims and of the scaling fit."
        )
    n_runs = sum(g.n_runs for g in groups)
    n_cont = sum(g.n_contended for g in groups)
    fallback = any(g.timing_contended for g in groups)
    if n_cont:
        lines.append(
            f"{n_cont} of {n_runs} runs shared the CPUs with other processes (more than "
            f"{100 * CONTENDED_SHARE:.0f} % of the cores' time): their accuracy counts; their "
            "timing is left out of speedups and of the scaling fit"
            + (
                ", and where no undisturbed run exists no speedup is claimed (the scaling fit "
                f"there is unreliable). {QUIET_ADVICE}"
                if fallback
                else "."
            )
        )
    return lines


def _scaling_lines(result: CompareResult) -> list[str]:
    """How well the scaling model fits the measured points, then what it predicts, or
    why it predicts nothing (too few worker counts; no all-reduce benchmark)."""
    models = result.analysis.models
    fits = {m: e.scaling for m, e in models.items() if e.scaling and e.scaling.error is None}
    if not fits:
        if max(result.workers) > 1 and not any(e.scaling for e in models.values()):
            return [
                "No scaling model: the all-reduce micro-benchmark (OUT/allreduce.json) is "
                "missing; `flowsplit compare` runs it."
            ]
        return []
    lines = [_fit_error_line(fits, len(result.workers))]
    # A fit to disturbed timings predicts the disturbance: say so beside its predictions.
    shaky = {m for m in fits if any(g.timing_contended for g in models[m].by_workers.values())}
    counts = sorted(set(result.workers))
    if len(counts) < FITTED_PARAMETERS:
        lines.append(
            f"No efficiency claim beyond {max(counts)} worker(s): the scaling model has "
            f"{FITTED_PARAMETERS} fitted parameters and was measured at "
            f"{len(counts)} worker count(s) ({', '.join(map(str, counts))}), so its "
            "curves past them are unchecked extrapolation (dashed in the plots). "
            "Measure three or more worker counts (--workers 1,2,4), on more machines or "
            "on an emulated cluster (flowsplit testbed), to check it."
            + (
                f" The fit for {', '.join(sorted(shaky))} is also to disturbed timings "
                "(unreliable)."
                if shaky
                else ""
            )
        )
        return lines
    for key in ("10gbe", "ib100"):
        reach = {m: _reach(fits[m], key) for m in fits}
        net = NETWORK_PRESETS[key].name
        lines.append(
            f"Predicted on {net} (checked up to {max(counts)} workers): scaling "
            "efficiency stays >= 50 % up to "
            + ", ".join(
                f"{n} worker{'s' if n != 1 else ''} for {m}"
                + (" (fitted to disturbed timings: unreliable)" if m in shaky else "")
                for m, n in reach.items()
            )
            + "."
        )
    return lines


def _fit_error_line(fits: dict, n_worker_counts: int) -> str:
    """The scaling model's worst error on the measured points, and held out."""
    errs = {m: s.max_abs_error for m, s in fits.items()}
    worst = max(errs, key=errs.get)
    ok = "within" if errs[worst] <= ERROR_LIMIT else "outside"
    line = (
        f"Scaling model error on the measured points: at most {100 * errs[worst]:.1f} % "
        f"({worst}), {ok} the +-{100 * ERROR_LIMIT:.0f} % target"
    )
    loo = {m: fits[m].max_abs_loo_error for m in errs}
    loo = {m: v for m, v in loo.items() if not math.isnan(v)}
    if loo:
        lw = max(loo, key=loo.get)
        line += (
            f"; predicting each worker count from the others: at most {100 * loo[lw]:.1f} % ({lw})"
        )
    elif n_worker_counts <= 2:
        line += (
            " (with two worker counts the fit is exact by construction; run three or more, "
            "e.g. --workers 1,2,4, for a held-out check)"
        )
    return line + "."


def _with_failures(lines: list[str], failures) -> list[str]:
    if failures:
        lines.append(
            f"{len(failures)} run(s) failed and are missing from the statistics: "
            + ", ".join(sorted(failures))
            + "."
        )
    return lines


def hook_lines(comm_hooks: dict[str, dict[str, dict[str, HookGroup]]]) -> list[str]:
    """One sentence per communication hook: its time and bytes against the plain
    all-reduce, and its paired score differences with their verdicts."""
    lines = []
    for model, by_n in comm_hooks.items():
        for n, by_hook in by_n.items():
            plain = by_hook.get(PLAIN_HOOK)
            for hook, g in by_hook.items():
                vs = g.vs_plain
                if not vs or plain is None:
                    continue
                ratio = vs.epoch_time_ratio.mean
                b_hook = g.comm_bytes_per_epoch.mean
                b_plain = plain.comm_bytes_per_epoch.mean
                parts = [
                    f"epoch time {ratio:.2f}x the plain all-reduce's"
                    + (" (contended timings)" if vs.timing_contended else ""),
                    f"{100 * b_hook / b_plain:.0f} % of its all-reduce bytes"
                    if b_plain > 0
                    else "bytes not measured",
                ]
                for c, label in ((vs.accuracy, "accuracy"), (vs.macro_f1, "macro-F1")):
                    iv = c.diff_tost or c.diff
                    ci = (
                        ""
                        if math.isnan(iv.low)
                        else f" ({100 * iv.confidence:.0f} % CI {100 * iv.low:+.2f} to "
                        f"{100 * iv.high:+.2f})"
                    )
                    parts.append(f"{label} {100 * c.diff.mean:+.2f} pt{ci}: {c.verdict}")
                lines.append(
                    f"{model}, {n} workers, comm hook {hook} against plain all-reduce over "
                    f"{vs.accuracy.n} paired seed(s): " + "; ".join(parts) + "."
                )
    return lines


QUIET_ADVICE = (
    "Rerun on a quiet machine (`flowsplit compare ... --rerun-contended`, optionally with "
    "`--quiet-wait 60`): while other processes take CPU time, an epoch time measures the CPU a "
    "run was given, not how training scales, and the centralised and data-parallel runs are "
    "slowed by different amounts."
)


def _pct_ci(iv: Interval) -> str:
    """``95.0 % (95 % CI 94.1-95.9)`` from a score interval (fractions)."""
    text = f"{100 * iv.mean:.1f} %"
    same = same_on_every_seed(iv)
    if same:
        return f"{text} ({same})"
    if not math.isnan(iv.low):
        text += f" (95 % CI {100 * iv.low:.1f}-{100 * iv.high:.1f})"
    return text


def baseline_lines(analysis: Analysis) -> list[str]:
    """The two baselines every verdict is read against, in words."""
    maj, flow = analysis.baselines.majority, analysis.baselines.flow_stats
    lines = []
    if maj:
        lines.append(
            f"Majority-class baseline: always predicting {maj.class_name!r}, the most frequent "
            f"test class, scores {100 * maj.accuracy:.1f} % accuracy and "
            f"{100 * maj.macro_f1:.1f} % macro-F1; a model not above it gets no verdict."
        )
    if flow:
        lines.append(
            f"Flow-statistics baseline: XGBoost on per-flow statistics, centralised, "
            f"{_pct_ci(flow.accuracy)} accuracy and {_pct_ci(flow.macro_f1)} macro-F1 "
            f"over {flow.n_runs} seed(s)."
        )
    else:
        lines.append(
            "Flow-statistics baseline (XGBoost) not run: add xgboost to --models to see what "
            "per-flow statistics alone achieve."
        )
    return lines


def _reach(fit: ScalingFit, network: str) -> int:
    rows = fit.predictions.get(network, [])
    good = [r.n_workers for r in rows if r.efficiency >= 0.5]
    return max(good) if good else 1


def check_runs_present(out: str | Path) -> None:
    """Refuse to report a study whose runs are gone: every planned cell must have its
    finished run (``metrics.json``) or a failure recorded in ``status.json``. Otherwise
    the report would be rewritten from nothing (exit 0, an empty report)."""
    out = Path(out)
    study = read_study(out)
    failed = set(read_status(out).failures)
    cells = study_cells(study.settings, study.cores)
    missing = [
        c
        for c in cells
        if not (cell_dir(out, c) / "metrics.json").is_file() and c.name not in failed
    ]
    if missing:
        first = cell_dir(out, missing[0]).relative_to(out)
        raise InputError(
            out,
            f"{len(missing)} of its {len(cells)} runs are missing (first: {first}); "
            "finish the study with `flowsplit compare DATASET -o OUT` (it runs only "
            "what is missing) before reporting it",
        )


def render_report(out: str | Path) -> Path:
    """Write results.json, results.csv, report.md and report.html; return the HTML path."""
    out = Path(out)
    _refresh_workloads(out)
    results, records = build_results(out)
    results.to_json(out / "results.json")
    buf = io.StringIO()
    writer = csv.DictWriter(
        buf, fieldnames=list(CSV_COLUMNS), lineterminator="\n", extrasaction="ignore"
    )
    writer.writeheader()
    # results.json keeps an unmeasured value as null; the CSV, as the runs had it, as nan.
    writer.writerows(
        {k: math.nan if v is None else v for k, v in typed_to_dict(c).items()}
        for c in results.cells
    )
    atomic_write_text(out / "results.csv", buf.getvalue())
    page = report_page(results, records)
    atomic_write_text(out / "report.md", page.markdown())
    path = out / "report.html"
    atomic_write_text(path, page.html())
    return path
