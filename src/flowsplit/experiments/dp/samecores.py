"""The same-cores comparison: N data-parallel workers against one process with as many threads.

The study's main speedup compares N workers of t threads each with one centralised process
of t threads: N times the cores against one. A user's ``flowsplit train`` uses every core,
so the study also runs, per model, a centralised cell of N x t threads (the same cores as
the workers, :func:`flowsplit.experiments.dp.layout.same_cores_workers`), and this module
compares the N workers with it, paired by seed, under the same claim rules as the main
speedup (no claim from oversubscribed or contended timings, nor from fewer than two
seeds). The headline states the threads per worker of both sides and gives both speedups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from flowsplit.experiments.dp.analysis import (
    CONTENDED,
    FEW_TIMINGS,
    NO_TIMING,
    NOT_METERED,
    OVERSUBSCRIBED,
    accuracy_text,
    headline_comparison,
    paired_times,
    speedup_text,
    summarise_group,
)
from flowsplit.experiments.dp.records import RunRecord
from flowsplit.experiments.dp.result import Analysis, ModelAnalysis, SameCoresComparison
from flowsplit.experiments.stats import ratio_ci


def compare_same_cores(
    central: Sequence[RunRecord], parallel: Sequence[RunRecord], n_workers: int
) -> SameCoresComparison:
    """``parallel`` (N workers of t threads) against ``central`` (one process of N x t
    threads), paired by seed; the speedup is the centralised epoch time over the workers'."""
    seeds, t_ref, t_par, contended = paired_times(central, parallel)
    speed = ratio_ci(t_ref, t_par)
    over = any(r.oversubscribed for r in (*central, *parallel))
    withheld = []
    if math.isnan(speed.mean):
        withheld.append(NO_TIMING)
    else:
        if over:
            withheld.append(OVERSUBSCRIBED)
        if contended:
            metered = any(math.isfinite(float(r.foreign_cpu_share)) for r in (*central, *parallel))
            withheld.append(CONTENDED if metered else NOT_METERED)
        elif speed.n < 2:
            withheld.append(FEW_TIMINGS)
    return SameCoresComparison(
        n_workers=n_workers,
        threads_per_worker=max(r.threads_per_worker for r in parallel),
        central_threads=max(r.threads_per_worker for r in central),
        central=summarise_group(central),
        seeds=seeds,
        timing_contended=contended,
        speedup=speed,
        oversubscribed=over,
        speedup_claimed=not withheld,
        speedup_withheld=withheld,
    )


def add_same_cores(
    analysis: Analysis, runs: Sequence[RunRecord], same_cores: Sequence[RunRecord]
) -> None:
    """Set each model's :attr:`ModelAnalysis.same_cores` from its same-cores centralised
    runs (``same_cores``) and the study's plain runs (``runs``): the worker count compared
    is the one whose threads add up to the centralised process's."""
    for model, entry in analysis.models.items():
        central = [r for r in same_cores if r.model == model]
        if not central:
            continue
        total = max(r.threads_per_worker for r in central)
        central = [r for r in central if r.threads_per_worker == total]
        parallel = [
            r
            for r in runs
            if r.model == model and r.workers > 1 and r.workers * r.threads_per_worker == total
        ]
        if parallel:
            entry.same_cores = compare_same_cores(central, parallel, parallel[0].workers)


def same_cores_text(model: str, sc: SameCoresComparison) -> str:
    """``against one process with the same 2 threads: 1.10x faster (95 % CI 1.02-1.18x)``,
    or why no same-cores speedup is claimed."""
    head = f"against one {model} process with the same {sc.central_threads} threads"
    s = sc.speedup
    if sc.speedup_withheld == [FEW_TIMINGS] and s.n == 1:
        return f"{head}: {_faster(s.mean)} on one seed (no interval, so not claimed)"
    if not sc.speedup_claimed:
        measured = "" if math.isnan(s.mean) else f"; measured {s.mean:.2f}x"
        return f"{head}: no speedup claimed ({', '.join(sc.speedup_withheld)}{measured})"
    if s.mean >= 1:
        text, lo, hi = f"{s.mean:.2f}x faster", s.low, s.high
    else:  # slower: invert the interval with it
        text, lo, hi = f"{1 / s.mean:.2f}x slower", 1 / s.high, 1 / s.low
    if not math.isnan(lo):
        text += f" (95 % CI {lo:.2f}-{hi:.2f}x)"
    return f"{head}: {text}"


def _faster(ratio: float) -> str:
    return f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"


def short_same_cores(sc: SameCoresComparison) -> str:
    """``against 1 x 2 threads 1.10x faster`` (``on one seed``), or why none is claimed."""
    against = f"against 1 x {sc.central_threads} threads"
    if sc.speedup_withheld == [FEW_TIMINGS] and sc.speedup.n == 1:
        return f"{against} {_faster(sc.speedup.mean)} on one seed"
    if not sc.speedup_claimed:
        return f"{against} none claimed ({', '.join(sc.speedup_withheld)})"
    return f"{against} {_faster(sc.speedup.mean)}"


def threads_text(n_workers: int, threads: int) -> str:
    """``2 workers x 1 thread against 1 x 1 thread``: the main speedup's two sides."""
    unit = "thread" if threads == 1 else "threads"
    return f"{n_workers} workers x {threads} {unit} against 1 x {threads} {unit}"


def headline_text(model: str, entry: ModelAnalysis, margin: float) -> str | None:
    """One plain sentence for a model, from its largest non-oversubscribed comparison: the
    speedup with the threads per worker of both sides, the same-cores speedup when the
    study measured it for that worker count, and the accuracy verdict."""
    best = headline_comparison(entry)
    if best is None:
        return None
    group = entry.by_workers.get(str(best.n_workers))
    threads = group.threads_per_worker if group else 1
    parts = [f"{speedup_text(model, best)} [{threads_text(best.n_workers, threads)}]"]
    sc = entry.same_cores
    if sc is not None and sc.n_workers == best.n_workers:
        parts.append(same_cores_text(model, sc))
    parts.append(accuracy_text(best, margin))
    return "; ".join(parts) + "."
