"""The data-parallel study's report page (``report.html`` and ``report.md``), from its
typed result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

import numpy as np

from flowsplit.experiments.dp import plots as plots
from flowsplit.experiments.dp.analysis import ERROR_LIMIT
from flowsplit.experiments.dp.crosssource import other_source_sections
from flowsplit.experiments.dp.result import Analysis, Cell, CompareResult, ModelAnalysis
from flowsplit.experiments.dp.scaling import NETWORK_PRESETS
from flowsplit.experiments.dp.tables import (
    FIT_COLS,
    HOOK_COLS,
    PRED_COLS,
    STATS_COLS,
    SUMMARY_COLS,
    TIMING_COLS,
    hook_rows,
    per_class_table,
    scaling_rows,
    stats_rows,
    summary_rows,
    timing_rows,
)
from flowsplit.report.page import (
    Block,
    Bullets,
    Column,
    Figure,
    Fold,
    Grid,
    Page,
    Section,
    Summary,
    Table,
    Text,
    fmt_float,
)

TITLE = "Centralised vs data-parallel training"

METHODS = [
    "Each model is trained once per seed centralised (1 worker) and data-parallel "
    "(N workers, DDP on torch.distributed, XGBoost through Dask), on the same splits and "
    "test set; every worker gets the same number of threads.",
    "Accuracy and macro-F1: mean with 95 % t confidence interval over seeds (shown clipped "
    "to 0-100 %); data-parallel "
    "against centralised paired by seed with a paired t-test, a Wilcoxon signed-rank test "
    "and a TOST equivalence test; McNemar's test on each seed's test predictions.",
    "Verdict: 'equivalent' when TOST rejects a difference beyond the margin over at least "
    "5 paired seeds ('not enough seeds' with fewer); 'different' when the paired t-test "
    "finds a difference and equivalence is not shown; else 'not shown equivalent' (too much "
    "noise to tell); 'not above the majority class' when the model's accuracy (the lower end "
    "of its 95 % CI over seeds) is not above the majority-class rate, centralised or "
    "data-parallel: such a model has not learned, and no verdict is given.",
    "Seeds TOST needs: beside a verdict short of 'equivalent', the number of paired seeds "
    "with which TOST at the margin would show equivalence with 80 % probability if the true "
    "difference were 0 and the paired differences spread as observed (sd over seeds; the "
    "exact power of the paired TOST for normal differences). With 5 seeds at +-1 pt it "
    "passes that often only when the sd of the paired differences is about 0.6 pt or less.",
    "Communication hooks (--comm-hooks): each hook's data-parallel runs are paired by seed "
    "with the plain float32 all-reduce runs of the same model and worker count (TOST at "
    "the same margin); every other table and the scaling fit use the plain runs only.",
    "Baselines in every accuracy table: the majority class (always predicting the most "
    "frequent test class, the best a constant can do) and XGBoost on per-flow statistics.",
    "A speedup is claimed only from timings that are neither oversubscribed (more worker "
    "threads than cores) nor contended (other processes took more than 15 % of the CPUs "
    "while a run was timed, or not measured at all; such runs are left out, and when no "
    "undisturbed pair of runs remains nothing is claimed), over at least two paired seeds; an efficiency above 100 % "
    "(more than N-fold from N workers) is flagged as a measurement problem, not claimed.",
    "Speedup: time per epoch (XGBoost: per boosting round; the first epoch left out when "
    "three or more ran) centralised over data-parallel, geometric mean over seeds with a "
    "95 % CI on the log ratio; efficiency = speedup / N.",
    "Same-cores speedup: N workers of t threads each against one centralised process of "
    "N x t threads (the same cores; what `flowsplit train` on one machine would use), run for "
    "each model on the first --same-cores-seeds seeds, N the largest worker count whose "
    "threads fit the cores; the same geometric mean, CI and claim rules as the speedup.",
    "Scaling model: epoch time = fixed + compute per sample x samples / N (x core sharing "
    "on this machine) + all-reduce time, ring all-reduce 2(N-1) alpha + 2(N-1)/N bytes / "
    "beta per message; DDP reduces its gradient buckets every step, XGBoost the gradient/"
    "hessian histograms of each tree level (features x bins x 2 x 8 bytes per node, the "
    "smaller child only), one tree per class per round. Alpha and beta come from the "
    "all-reduce micro-benchmark; c (compute per sample, shrinks as 1/N) and h (per step, "
    "does not shrink: optimiser, dispatch; XGBoost split search per round) are fitted to the "
    "runs that are neither oversubscribed nor contended; s (all-reduce time per step beyond "
    "the wire time: waiting for the slowest worker, hooks) comes from the runs' measured "
    "all-reduce time and is charged on this machine only. Communication is assumed not to "
    "overlap compute. With two worker counts that are not oversubscribed, c and h match "
    "those two points by construction; the other points are held out.",
    "Cluster predictions: every worker has its own cores and keeps the centralised batch "
    "(global batch = batch x N, as usual with linear learning-rate scaling), because a fixed "
    "global batch cannot be split over more workers than it has samples; with the global "
    "batch fixed as measured, speedup could not exceed the 'speedup cap' column (Amdahl on h). "
    "Time per epoch only: the accuracy of very large global batches is not modelled.",
]


def _net_names() -> dict[str, str]:
    return {k: v.name for k, v in NETWORK_PRESETS.items()}


def _confusions(records: Sequence[Mapping], model: str, n: int):
    mats = [
        np.asarray(r.confusion_matrix)
        for r in records
        if r.model == model and r.workers == n and r.confusion_matrix
    ]
    return (sum(mats), len(mats)) if mats else (None, 0)


def _headline_n(entry: ModelAnalysis) -> int | None:
    ok = [int(n) for n, v in entry.vs_central.items() if not v.oversubscribed]
    alln = [int(n) for n in entry.vs_central]
    return max(ok) if ok else (max(alln) if alln else None)


def _conditions(results: CompareResult) -> list[dict]:
    ar = results.allreduce
    fit = ar.fit
    bench = ar.benchmark
    rows = [
        ("dataset", results.dataset_path),
        ("training / test samples", f"{results.dataset.n_train} / {results.dataset.n_test}"),
        ("classes", len(results.dataset.classes or [])),
        ("models", ", ".join(results.models)),
        ("workers", ", ".join(map(str, results.workers))),
        ("seeds", ", ".join(map(str, results.seeds))),
        ("threads per worker", results.threads),
        (
            "epochs (max) / XGBoost rounds (max)",
            f"{results.max_epochs or 'default'} / {results.max_rounds or 'default'}",
        ),
        ("equivalence margin", f"+-{100 * results.margin:g} pt, alpha {results.alpha:g}"),
        ("host, cores", f"{results.host}, {results.cores}"),
        (
            "all-reduce benchmark",
            (f"{bench.backend}, {bench.n_workers} processes, torch {bench.torch}, {bench.date}")
            if bench
            else "not run",
        ),
        (
            "all-reduce fit",
            (
                f"alpha {fit.latency_s * 1e6:.1f} us, beta "
                f"{fit.bandwidth_Bps / 1e6:.0f} MB/s (max error "
                f"{100 * ar.fit_max_rel_error:.0f} %)"
            )
            if fit
            else "–",
        ),
        ("versions", ", ".join(f"{k} {v}" for k, v in results.versions.items()) or "–"),
        ("platform", results.platform),
        ("CPU taken by other processes during runs", _contention_text(results.cells)),
        ("flowsplit, generated", f"{results.flowsplit_version}, {results.generated}"),
    ]
    return [{"what": k, "value": v} for k, v in rows]


def _contention_text(cells: Sequence[Cell]) -> str:
    shares = [c.foreign_cpu_share for c in cells if c.foreign_cpu_share is not None]
    shares = [x for x in shares if x == x]  # drop NaN (unknown)
    if not shares:
        return "not measured"
    q = np.percentile(shares, [50, 90])
    got = [c.cpu_obtained for c in cells if c.cpu_obtained is not None]
    got = [x for x in got if x == x]
    text = (
        f"median {100 * q[0]:.0f} %, 90th percentile {100 * q[1]:.0f} % of the cores' time "
        f"({sum(c.contended for c in cells)} of {len(cells)} runs contended)"
    )
    if got:
        text += f"; runs got a median {100 * float(np.median(got)):.0f} % of the CPU they wanted"
    return text


COND_COLS = [Column("what", "condition"), Column("value", "value")]
AR_COLS = [
    Column("bytes", "bytes", align="right"),
    Column("iterations", "calls", align="right"),
    Column("time_s", "median time per call, s", fmt_float(6), "right"),
]


HOOKS_CAPTION = "Communication hooks against the plain all-reduce"
HOOKS_TEXT = (
    "Each DDP communication hook (flowsplit train --comm-hook) against the plain float32 "
    "all-reduce ('none') of the same model, worker count and seeds. Bytes are what rank 0 "
    "handed to all-reduce per epoch; exposed communication is the all-reduce time not hidden "
    "behind backward. Differences are hook minus plain, paired by seed, with the TOST verdict "
    "at the study's margin; the study's other tables hold the plain runs only."
)


def _verdict_caption(results: CompareResult) -> str:
    maj = results.analysis.baselines.majority
    text = (
        "Test accuracy (mean over seeds, 95 % CI clipped to 0-100 %) against the epoch-time "
        f"speedup over centralised (every worker {results.threads} thread(s)); centralised "
        "runs sit at 1x; a model's centralised process with its workers' threads (1 x N x t, "
        "the same cores) is a point of its own. A speedup marked 'not claimed' was measured "
        "under disturbed timing or oversubscribed cores (see the summary)."
    )
    if maj:
        text += f" Majority-class baseline: {100 * maj.accuracy:.1f} % accuracy."
    return text


def report_page(results: CompareResult, records: Sequence[Mapping]) -> Page:
    """The study's report, once for both files (``records``: the runs, for their curves).

    It opens with the one-line verdict and one picture; long tables, the method and the
    conditions are folded (open in the Markdown); figures of a kind sit side by side."""
    a = results.analysis
    verdict, *findings = results.summary or [""]
    opening: list[Block] = [Text(verdict, "verdict")]
    if a.models:
        opening.append(Figure(lambda: plots.verdict_chart(results), _verdict_caption(results)))
    sections = [
        Section("Verdict", opening, anchor="verdict"),
        Section(
            "Summary",
            [
                Summary(findings),
                Fold("show the summary table", [Table(summary_rows(a), SUMMARY_COLS)]),
            ],
            anchor="summary",
        ),
        *_time_and_accuracy_sections(a, records),
        _communication_section(results),
        *_scaling_section(a),
        *_per_class_section(results, records),
        *other_source_sections(results),  # --cross-source
        Section("Method", [Fold("show the method", [Bullets(METHODS)])], anchor="method"),
        _conditions_section(results),
    ]
    return Page(TITLE, sections, subtitle=f"dataset {results.dataset_path}" + _quick_label(results))


def _time_and_accuracy_sections(a: Analysis, records: Sequence[Mapping]) -> list[Section]:
    """Time per epoch, accuracy and macro-F1 by model and workers (their tables folded),
    then every run's learning curves; nothing for a study without models."""
    models = a.models
    if not models:
        return []
    charts = [
        Figure(lambda: plots.epoch_time_chart(models), "Time per epoch by model and workers"),
        Figure(
            lambda: plots.quality_chart(
                models, "accuracy", "Test accuracy, mean and 95 % CI", a.baselines
            ),
            "Test accuracy by model and workers",
        ),
        Figure(
            lambda: plots.quality_chart(
                models, "macro_f1", "Test macro-F1, mean and 95 % CI", a.baselines
            ),
            "Test macro-F1 by model and workers",
        ),
    ]
    sections = [
        Section(
            "Time and accuracy",
            [
                Grid(charts),
                Fold(
                    "show the timing and statistics tables",
                    [
                        Table(timing_rows(a), TIMING_COLS, caption="Time per model and mode"),
                        Table(stats_rows(a), STATS_COLS, caption="Statistics"),
                    ],
                ),
            ],
            anchor="accuracy",
        )
    ]
    curves = [
        Figure(partial(plots.learning_curves_chart, m, records), f"{m}: learning curves")
        for m in models
        if any(r.model == m and r.loss_per_epoch for r in records)
    ]
    if curves:
        intro = (
            "Training loss and validation macro-F1 of every run (one line per seed), "
            "against epoch and against training time, per worker count."
        )
        grid = Grid(curves, min_px=540, intro=intro)
        sections.append(Section("Learning curves", [grid], anchor="learning-curves"))
    return sections


def _communication_section(results: CompareResult) -> Section:
    """Communication share, the all-reduce benchmark and its fit, the hooks' table."""
    a = results.analysis
    models = a.models
    comm = [Figure(lambda: plots.comm_share_chart(models), "Communication share")] if models else []
    folded: list[Block] = []
    bench = results.allreduce.benchmark
    fit = results.allreduce.fit
    if bench and fit:
        comm.append(
            Figure(
                lambda: plots.allreduce_chart(bench.sizes, bench.times_s, fit, bench.n_workers),
                "All-reduce micro-benchmark and fitted ring model",
            )
        )
        folded.append(Table(bench.rows, AR_COLS, caption="All-reduce micro-benchmark"))
    hooks = hook_rows(a)
    if hooks:
        folded += [Text(HOOKS_TEXT), Table(hooks, HOOK_COLS, caption=HOOKS_CAPTION)]
    body: list[Block] = [Grid(comm)] if comm else []
    if folded:
        body.append(Fold("show the all-reduce and hook tables", folded))
    return Section("Communication", body, anchor="communication")


def _scaling_section(a: Analysis) -> list[Section]:
    """The scaling model's fit, speedup charts and predictions (none without a fit)."""
    fit_rows, pred_rows = scaling_rows(a)
    if not fit_rows:
        return []
    speed = [
        Figure(partial(plots.speedup_chart, m, e, _net_names()), f"{m}: speedup")
        for m, e in a.models.items()
        if e.scaling and e.scaling.predictions
    ]
    text = (
        "Per model: the speedup measured on this machine, and the scaling model's "
        "predictions for larger clusters (dashed past the worker counts measured: "
        f"unchecked). The model's error on the measured points (target within +-"
        f"{100 * ERROR_LIMIT:.0f} %; 'held out' points were not used in the fit) is "
        "in the table below."
    )
    tables = [
        Table(fit_rows, FIT_COLS, caption="Scaling model on the measured points"),
        Table(pred_rows, PRED_COLS, caption="Predicted scaling efficiency"),
    ]
    return [
        Section(
            "Scaling model",
            [
                Text(text),
                Grid(speed, min_px=540),
                Fold("show the fit and the predicted scaling efficiency", tables),
            ],
            anchor="scaling",
        )
    ]


def _per_class_section(results: CompareResult, records: Sequence[Mapping]) -> list[Section]:
    """F1 per class and the confusion matrices (centralised and the headline count), the
    matrices in a grid."""
    cms = []
    classes = results.dataset.classes or []
    for model, entry in results.analysis.models.items():
        for n in (1, _headline_n(entry)):
            if n is None:
                continue
            mat, k = _confusions(records, model, n)
            if mat is not None:
                mode = "centralised" if n == 1 else f"{n} workers"
                title = f"{model}, {mode} (sum over {k} seeds)"
                cms.append(Figure(partial(plots.confusion_chart, mat, classes, title), title))
    body: list[Block] = []
    pc_rows, pc_cols = per_class_table(results)
    if pc_rows and len(pc_cols) > 1:
        if results.per_class_f1:
            body.append(Figure(lambda: plots.per_class_chart(results), "Test F1 per class"))
        table = Table(pc_rows, pc_cols, caption="Test F1 per class, mean over seeds")
        body.append(Fold("show the F1 per class table", [table]))
    if cms:
        body.append(Grid(cms, min_px=270))
    return [Section("Per-class results", body, anchor="per-class")] if body else []


def _conditions_section(results: CompareResult) -> Section:
    failures = [f"{k}: {v.splitlines()[0]}" for k, v in results.failures.items()]
    return Section(
        "Conditions",
        [
            *([Bullets(failures, "warn")] if failures else []),
            Fold("show the conditions", [Table(_conditions(results), COND_COLS)]),
        ],
        anchor="conditions",
    )


def _quick_label(results: CompareResult) -> str:
    """Said on every page of a ``--quick`` study: its runs are too short to converge."""
    if not results.quick:
        return ""
    return " · quick settings (--quick): short runs, not a converged study"
