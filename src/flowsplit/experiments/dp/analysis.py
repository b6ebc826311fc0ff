"""From per-run records to the study's findings: statistics, speedups, scaling fits.

Input: one :class:`~flowsplit.experiments.dp.records.RunRecord` per finished run.
Output: the study's typed findings (:class:`~flowsplit.experiments.dp.result.Analysis`,
the content of ``results.json`` but for the cells). Pure: no files, no clocks. The headline's text functions at the end read the
typed result (:mod:`flowsplit.experiments.dp.result`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, replace

import numpy as np

from flowsplit.experiments.dp.layout import PLAIN_HOOK
from flowsplit.experiments.dp.records import RunRecord
from flowsplit.experiments.dp.result import (
    Analysis,
    Baselines,
    CentralComparison,
    Claims,
    FlowStatsBaseline,
    GroupSummary,
    HookGroup,
    HookVsPlain,
    MajorityBaseline,
    ModelAnalysis,
    ScalingFit,
    ScalingPoint,
    SeedMcNemar,
)
from flowsplit.experiments.dp.scaling import (
    NETWORK_PRESETS,
    Network,
    ScalingModel,
    Workload,
    fit_scaling,
    relative_errors,
    steps_per_epoch,
)
from flowsplit.experiments.stats import (
    DIFFERENT,
    EQUIVALENT,
    MIN_EQUIVALENCE_SEEDS,
    NOT_ENOUGH_SEEDS,
    SCORE_BOUNDS,
    TARGET_POWER,
    Interval,
    PairedComparison,
    compare_paired,
    mcnemar_test,
    mean_ci,
    ratio_ci,
    speedup_ci,
)

PREDICT_WORKERS = tuple(2**k for k in range(11))  # 1 ... 1024
ERROR_LIMIT = 0.15  # the scaling model is trusted on measured points within +-15 %
FLOW_STATS_MODEL = "xgboost"
"""The flow-statistics baseline every table carries: XGBoost on per-flow statistics."""
BELOW_MAJORITY = "not above the majority class"
"""Verdict of a model whose accuracy is not above the majority-class rate: it has not
learned enough for its data-parallel twin's equivalence to mean anything."""

# Why a measured speedup is not claimed (codes in results.json, text in the reports).
OVERSUBSCRIBED = "oversubscribed"
CONTENDED = "contended"
NOT_METERED = "contention not measured"
FEW_TIMINGS = "too few undisturbed seeds"
SUPERLINEAR = "efficiency above 100 %"
NO_TIMING = "no timing"
WITHHELD_WHY = {
    OVERSUBSCRIBED: "the workers' threads outnumber the cores, so the workers time-shared "
    "them: the time measures core sharing, not scaling",
    NOT_METERED: "no contention measurement exists for these runs (made outside `compare`, "
    "or left behind by an interrupted one), so nothing says they were undisturbed",
    CONTENDED: "other processes used the CPUs while the runs were timed (no undisturbed "
    "pair of runs exists), so the times measure the CPU the runs were given, not scaling",
    FEW_TIMINGS: "fewer than two seeds have undisturbed timings on both sides, too few for "
    "an interval",
    SUPERLINEAR: "N workers cannot be more than N times faster on the same per-worker work; "
    "an efficiency above 100 % points at a measurement problem (most often centralised runs "
    "slowed by other load), not a gain",
    NO_TIMING: "no epoch times were recorded",
}


def _by(records: Iterable[RunRecord], *keys: str) -> dict:
    out: dict = defaultdict(list)
    for r in records:
        out[tuple(getattr(r, k) for k in keys) if len(keys) > 1 else getattr(r, keys[0])].append(r)
    return out


def _paired(ref: Sequence[RunRecord], other: Sequence[RunRecord], key: str):
    """Values of ``key`` for the seeds both groups finished, in seed order."""
    a = {r.seed: r for r in ref}
    b = {r.seed: r for r in other}
    seeds = sorted(set(a) & set(b))
    return seeds, [getattr(a[s], key) for s in seeds], [getattr(b[s], key) for s in seeds]


def timing_runs(runs: Sequence[RunRecord]) -> tuple[list[RunRecord], bool]:
    """The runs whose timing counts, or all of them, flagged, if none does. A timing counts
    when the contention meter ran around it (``compare`` writes it beside the run) and found
    the run undisturbed: a run whose contention is unknown is not known to be clean."""
    clean = [r for r in runs if not r.contended and _finite(r.foreign_cpu_share)]
    return (clean, False) if clean else (list(runs), bool(runs))


def paired_times(ref: Sequence[RunRecord], other: Sequence[RunRecord]):
    """Epoch times of the seeds both groups timed cleanly (:func:`timing_runs`), in seed
    order, and whether they are flagged: when no seed has clean timings on both sides,
    those of every seed both finished, flagged. Returns ``(seeds, t_ref, t_other,
    contended)``."""
    r_timed, r_flag = timing_runs(ref)
    o_timed, o_flag = timing_runs(other)
    seeds, t_ref, t_other = _paired(r_timed, o_timed, "epoch_time_s")
    if not seeds:  # no seed with clean timings on both sides: use all, flagged
        seeds, t_ref, t_other = _paired(ref, other, "epoch_time_s")
        r_flag = True
    return seeds, t_ref, t_other, r_flag or o_flag


_BOUNDED = {"accuracy": SCORE_BOUNDS, "macro_f1": SCORE_BOUNDS, "comm_share": SCORE_BOUNDS}


def _column_ci(runs: Sequence[RunRecord], key: str) -> Interval:
    """Mean and CI of one record column over ``runs`` (NaN, not measured, left out);
    scores and shares clipped to [0, 1]."""
    return mean_ci([getattr(r, key) for r in runs], bounds=_BOUNDED.get(key))


def _median_share(runs: Iterable[RunRecord]) -> float:
    """Median share of the CPUs other processes took, over the metered runs."""
    shares = [r.foreign_cpu_share for r in runs if _finite(r.foreign_cpu_share)]
    return float(np.median(shares)) if shares else math.nan


def summarise_group(runs: Sequence[RunRecord]) -> GroupSummary:
    """Means and CIs of one (model, workers) group over its seeds.

    Accuracy uses every run; times use the runs that were not contended. Intervals of
    scores and shares are clipped to [0, 1].
    """
    timed, timing_contended = timing_runs(runs)
    return GroupSummary(
        n_runs=len(runs),
        seeds=sorted(r.seed for r in runs),
        n_contended=sum(1 for r in runs if r.contended),
        timing_contended=timing_contended,
        **{key: _column_ci(runs, key) for key in ("accuracy", "macro_f1", "peak_rss_mb")},
        cpu_obtained=_column_ci(runs, "cpu_obtained"),
        **{
            key: _column_ci(timed, key)
            for key in ("epoch_time_s", "wall_time_s", "samples_per_s", "comm_share", "comm_time_s")
        },
        foreign_cpu_share_median=_median_share(runs),
        oversubscribed=any(r.oversubscribed for r in runs),
        threads_per_worker=max(r.threads_per_worker for r in runs),
    )


def compare_to_central(
    central: Sequence[RunRecord],
    parallel: Sequence[RunRecord],
    n_workers: int,
    *,
    margin: float,
    alpha: float,
    majority_rate: float | None = None,
) -> CentralComparison:
    """Data-parallel runs on ``n_workers`` against centralised runs, paired by seed.

    ``claims`` says what the reports may claim from it (see :func:`judge`); the
    statistics stay as computed, for the reader who wants them.
    """
    scores = {}
    for key in ("accuracy", "macro_f1"):
        _, a, b = _paired(central, parallel, key)
        scores[key] = compare_paired(a, b, margin=margin, alpha=alpha)
    seeds, t_ref, t_par, contended = paired_times(central, parallel)
    speed, eff = speedup_ci(t_ref, t_par, n_workers)
    mc = _mcnemar(central, parallel)
    out = CentralComparison(
        n_workers=n_workers,
        **scores,
        seeds=seeds,
        timing_contended=contended,
        speedup=speed,
        efficiency=eff,
        oversubscribed=any(r.oversubscribed for r in parallel),
        mcnemar=mc,
        mcnemar_significant=sum(1 for m in mc if m.p < alpha),
        foreign_cpu_share_median=_median_share((*central, *parallel)),
        claims=None,  # type: ignore[arg-type]  # judged below, from the comparison
    )
    out.claims = judge(out, central, parallel, majority_rate)
    return out


def _mcnemar(central: Sequence[RunRecord], parallel: Sequence[RunRecord]) -> list[SeedMcNemar]:
    """McNemar's test per seed whose two runs predicted the same test set."""
    mc = []
    a_by_seed = {r.seed: r for r in central}
    for r in sorted(parallel, key=lambda r: r.seed):
        ref = a_by_seed.get(r.seed)
        if ref is None or not ref.y_pred or not r.y_pred:
            continue
        if list(ref.y_true) != list(r.y_true):
            continue  # not the same test set: McNemar would be meaningless
        res = mcnemar_test(ref.y_true, ref.y_pred, r.y_pred)
        mc.append(SeedMcNemar(**asdict(res), seed=r.seed))
    return mc


def _finite(x) -> bool:
    return x is not None and math.isfinite(float(x))


def above_rate(values: Sequence[float], rate: float | None) -> bool:
    """Whether scores are above ``rate``: the lower end of their 95 % CI (the mean, for one
    seed) must exceed it. No rate known: True."""
    if rate is None or math.isnan(rate):
        return True
    iv = mean_ci(values, bounds=SCORE_BOUNDS)
    if iv.n == 0:
        return False
    low = iv.mean if math.isnan(iv.low) else iv.low
    return low > rate


def judge(
    v: CentralComparison,
    central: Sequence[RunRecord],
    parallel: Sequence[RunRecord],
    majority_rate,
) -> Claims:
    """What may be claimed from one comparison (the rules every report applies):

    - a speedup only from timings that are neither oversubscribed nor contended, over at
      least two paired seeds, and not above N-fold (efficiency > 1 is a measurement problem);
    - an accuracy verdict only for a model above the majority-class rate in both modes
      (else :data:`BELOW_MAJORITY`); "equivalent" needs the seeds :func:`compare_paired`
      asks for (else "not enough seeds").
    """
    withheld = []
    speed, eff = v.speedup, v.efficiency
    if math.isnan(speed.mean):
        withheld.append(NO_TIMING)
    else:
        if v.oversubscribed:
            withheld.append(OVERSUBSCRIBED)
        if v.timing_contended:
            metered = any(_finite(r.foreign_cpu_share) for r in (*central, *parallel))
            withheld.append(CONTENDED if metered else NOT_METERED)
        elif speed.n < 2:
            withheld.append(FEW_TIMINGS)
        if eff.mean > 1:
            withheld.append(SUPERLINEAR)
    above = above_rate([r.accuracy for r in central], majority_rate) and above_rate(
        [r.accuracy for r in parallel], majority_rate
    )
    accuracy = v.accuracy.verdict if above else BELOW_MAJORITY
    return Claims(
        speedup_claimed=not withheld,
        speedup_withheld=withheld,
        efficiency_above_1=bool(eff.mean > 1),
        above_majority=above,
        majority_rate=math.nan if majority_rate is None else float(majority_rate),
        accuracy_verdict=accuracy,
        macro_f1_verdict=v.macro_f1.verdict if above else BELOW_MAJORITY,
        equivalent=accuracy == EQUIVALENT,
    )


def majority_baseline(records: Sequence[RunRecord]) -> MajorityBaseline | None:
    """The majority-class baseline on the test split: always predict the most frequent
    test class, the best any constant prediction can score there (so a model at or
    below it has learned nothing a constant would not). None without test labels."""
    rec = next((r for r in records if r.y_true), None)
    if rec is None:
        return None
    y = np.asarray(rec.y_true, dtype=int)
    classes = list(rec.classes)
    counts = np.bincount(y, minlength=len(classes))
    k = int(counts.argmax())
    rate = float(counts[k] / len(y))
    # Predicting k everywhere: precision = rate, recall = 1 for k; F1 0 for every other
    # class present; macro-F1 over the classes present (the engines' convention).
    f1_k = 2 * rate / (1 + rate)
    present = [i for i in range(len(counts)) if counts[i] > 0]
    names = [classes[i] if i < len(classes) else str(i) for i in range(len(counts))]
    return MajorityBaseline(
        class_name=names[k],
        accuracy=rate,
        macro_f1=f1_k / len(present),
        n_test=int(len(y)),
        per_class_f1={names[i]: (f1_k if i == k else 0.0) for i in present},
    )


def _comm_per_epoch(run: RunRecord) -> float:
    """Measured all-reduce seconds per epoch (the engines report the total over epochs)."""
    epochs, comm = run.epochs_run, run.comm_time_s
    return float(comm) / epochs if epochs else math.nan


def fit_model_scaling(
    runs: Sequence[RunRecord],
    workload: Workload,
    host: Network,
    *,
    cores: int,
    networks: Mapping[str, Network],
    predict_workers: Sequence[int] = PREDICT_WORKERS,
) -> ScalingFit:
    """Fit the scaling model to one model's runs and predict larger clusters.

    Oversubscribed runs stay out of the fit (their time measures core sharing, not
    scaling) but their error is still shown, against the host model that charges
    the sharing. The error is reported per worker count on the mean over seeds, both
    for the fit and leaving that worker count out of the fit (when two others remain).
    """
    threads = max(r.threads_per_worker for r in runs)
    fit_runs = [r for r in timing_runs(runs)[0] if not r.oversubscribed] or list(runs)

    def fit(group_runs: Sequence[RunRecord]):
        # Fit to the mean over seeds at each worker count, the numbers the errors are
        # reported on (a per-seed fit on relative residuals leans towards the fastest seeds).
        groups = sorted(_by(group_runs, "workers").items())
        return fit_scaling(
            workload,
            [n for n, _ in groups],
            [float(np.mean([r.epoch_time_s for r in g])) for _, g in groups],
            host,
            comm_times_s=[float(np.nanmean([_comm_per_epoch(r) for r in g])) for _, g in groups],
            cores=cores,
            threads_per_worker=threads,
        )

    model = fit(fit_runs)
    timed = timing_runs(runs)[0]
    points = [
        _scaling_point(model, fit, n, timing_runs(group)[0], timed, fit_runs)
        for n, group in sorted(_by(runs, "workers").items())
    ]
    base = model.estimate(1).epoch_time_s
    cluster = _cluster_model(model, workload)
    # This machine as measured: its cores, its sync overhead, the global batch it ran.
    curves = {"host": model.scaling_curve(sorted({int(r.workers) for r in runs}))}
    curves.update(
        {key: cluster.scaling_curve(predict_workers, net) for key, net in networks.items()}
    )
    steps = steps_per_epoch(workload, 1)
    serial = model.per_step_s * steps + model.fixed_s
    return ScalingFit(
        model=model.as_dict(),
        points=points,
        max_abs_error=max(abs(p.rel_error) for p in points),
        max_abs_error_fit=max((abs(p.rel_error) for p in points if p.in_fit), default=0),
        max_abs_loo_error=max(
            (abs(p.loo_error) for p in points if not math.isnan(p.loo_error)),
            default=math.nan,
        ),
        speedup_cap_fixed_batch=base / serial if serial > 0 else math.inf,
        cluster_batch="per worker" if cluster is not model else "global",
        predictions=curves,
    )


def _cluster_model(model: ScalingModel, workload: Workload) -> ScalingModel:
    """The fitted model for a cluster: every worker has its own cores; each keeps the
    centralised batch (global batch = batch x N, the usual linear-scaling practice),
    since a fixed global batch cannot be split over more workers than it has samples."""
    if workload.kind == "ddp" and workload.global_batch:
        return replace(model, workload=replace(workload, global_batch=False))
    return model


def _scaling_point(model, fit, n: int, group, timed, fit_runs) -> ScalingPoint:
    """The scaling model against the mean epoch time of ``n`` workers (``group``, its
    undisturbed runs), also fitted without ``n`` (``fit`` on the other ``timed`` runs,
    oversubscribed ones included, charged for core sharing): the check the fit cannot
    game."""
    measured = float(np.mean([r.epoch_time_s for r in group]))
    pred = model.estimate(n)
    others = [r for r in timed if r.workers != n]
    loo = math.nan
    if len({r.workers for r in others}) >= 2:
        loo = relative_errors(fit(others), [n], [measured])[0]
    comm = [r.comm_share for r in group if _finite(r.comm_share)]
    return ScalingPoint(
        n_workers=n,
        measured_s=measured,
        predicted_s=pred.epoch_time_s,
        rel_error=relative_errors(model, [n], [measured])[0],
        loo_error=loo,
        in_fit=any(r in fit_runs for r in group),
        oversubscribed=any(r.oversubscribed for r in group),
        measured_comm_share=float(np.mean(comm)) if comm else math.nan,
        predicted_comm_share=pred.comm_share,
    )


def analyse(
    records: Sequence[RunRecord],
    *,
    workloads: Mapping[str, Workload],
    host: Network | None,
    cores: int,
    margin: float = 0.01,
    alpha: float = 0.05,
    networks: Mapping[str, Network] = NETWORK_PRESETS,
) -> Analysis:
    """All findings per model: groups, comparisons to centralised, scaling fit; and the
    baselines every table carries (majority class, XGBoost on flow statistics). The
    communication hooks (:func:`compare_hooks`) are the caller's to add."""
    majority = majority_baseline(records)
    rate = majority.accuracy if majority else None
    models: dict[str, ModelAnalysis] = {}
    for model, runs in _by(records, "model").items():
        by_n = _by(runs, "workers")
        central = by_n.get(1, [])
        entry = ModelAnalysis(
            by_workers={str(n): summarise_group(g) for n, g in sorted(by_n.items())},
            vs_central={
                str(n): compare_to_central(
                    central, group, n, margin=margin, alpha=alpha, majority_rate=rate
                )
                for n, group in sorted(by_n.items())
                if n != 1 and central
            },
            above_majority=bool(central) and above_rate([r.accuracy for r in central], rate),
        )
        if host is not None and model in workloads:
            try:
                entry.scaling = fit_model_scaling(
                    runs, workloads[model], host, cores=cores, networks=networks
                )
            except ValueError as exc:
                entry.scaling = ScalingFit(error=str(exc))
        models[model] = entry
    flow = models[FLOW_STATS_MODEL].central if FLOW_STATS_MODEL in models else None
    return Analysis(
        margin=margin,
        alpha=alpha,
        cores=cores,
        models=models,
        baselines=Baselines(
            majority=majority,
            flow_stats=None
            if flow is None
            else FlowStatsBaseline(
                model=FLOW_STATS_MODEL,
                accuracy=flow.accuracy,
                macro_f1=flow.macro_f1,
                n_runs=flow.n_runs,
            ),
        ),
    )


def _per_epoch(run: RunRecord, key: str) -> float:
    """A run's total ``key`` (bytes, seconds over all epochs) per epoch run."""
    epochs = run.epochs_run
    value = getattr(run, key)
    return float(value) / epochs if epochs and _finite(value) else math.nan


def compare_hooks(
    records: Sequence[RunRecord], *, margin: float, alpha: float
) -> dict[str, dict[str, dict[str, HookGroup]]]:
    """Each DDP communication hook against the plain all-reduce (``none``) of the same
    model, worker count and seed: per ``model -> workers -> hook``, epoch time,
    all-reduce bytes and exposed communication per epoch, accuracy and macro-F1 (means
    with 95 % CIs), and for a hook its paired differences from the plain runs
    (:func:`compare_paired`, TOST at ``margin``) and its epoch-time ratio hook / plain.
    Only model and worker counts with some hooked run appear; times come from the
    undisturbed runs when there are any (:func:`timing_runs`)."""
    out: dict = {}
    multi = [r for r in records if r.workers > 1]
    for (model, n), runs in sorted(_by(multi, "model", "workers").items()):
        by_hook = _by(runs, "comm_hook")
        if set(by_hook) <= {PLAIN_HOOK}:
            continue
        plain = by_hook.get(PLAIN_HOOK, [])
        entry = {}
        for hook in [PLAIN_HOOK, *sorted(h for h in by_hook if h != PLAIN_HOOK)]:
            group = by_hook.get(hook, [])
            entry[hook] = _hook_group(group, plain if hook != PLAIN_HOOK else [], margin, alpha)
        out.setdefault(model, {})[str(n)] = entry
    return out


def _hook_group(
    group: Sequence[RunRecord], plain: Sequence[RunRecord], margin: float, alpha: float
) -> HookGroup:
    """One hook's runs of a (model, workers) group; against ``plain``'s when given."""
    timed, flagged = timing_runs(group)
    row = HookGroup(
        n_runs=len(group),
        seeds=sorted(r.seed for r in group),
        timing_contended=flagged,
        n_contended=sum(1 for r in group if r.contended),
        epoch_time_s=mean_ci([r.epoch_time_s for r in timed]),
        comm_bytes_per_epoch=mean_ci([_per_epoch(r, "comm_bytes") for r in group]),
        comm_time_per_epoch_s=mean_ci([_per_epoch(r, "comm_time_s") for r in timed]),
        exposed_comm_per_epoch_s=mean_ci([_per_epoch(r, "exposed_comm_s") for r in timed]),
        epochs_run=mean_ci([r.epochs_run for r in group]),
        accuracy=mean_ci([r.accuracy for r in group], bounds=SCORE_BOUNDS),
        macro_f1=mean_ci([r.macro_f1 for r in group], bounds=SCORE_BOUNDS),
    )
    if plain:
        scores = {}
        for key in ("accuracy", "macro_f1"):
            _, a, b = _paired(plain, group, key)
            scores[key] = compare_paired(a, b, margin=margin, alpha=alpha)
        seeds, t_plain, t_hook, contended = paired_times(plain, group)
        row.vs_plain = HookVsPlain(
            **scores,
            seeds=seeds,
            timing_contended=contended,  # either side's runs disturbed
            epoch_time_ratio=ratio_ci(t_hook, t_plain),
        )
    return row


def _pts_ci(iv: Interval | None, label: str) -> str:
    """``label -0.30 to +0.40 pt`` from a difference interval (fractions), or ''."""
    if iv is None or math.isnan(iv.low):
        return ""
    return f"{label} {100 * iv.low:+.2f} to {100 * iv.high:+.2f} pt"


def speedup_text(model: str, v: CentralComparison) -> str:
    """The time half of a headline: the speedup with its CI, or why none is claimed."""
    s, n = v.speedup, v.n_workers
    claims = v.claims
    if not claims.speedup_claimed:
        why = ", ".join(claims.speedup_withheld)
        measured = "" if math.isnan(s.mean) else f"; measured {s.mean:.2f}x"
        if SUPERLINEAR in claims.speedup_withheld:
            measured += f", {100 * v.efficiency.mean:.0f} % efficiency"
        return f"{n} workers: no speedup claimed for {model} ({why}{measured})"
    if s.mean >= 1:
        text = f"{n} workers cut {model}'s epoch time {s.mean:.2f}x"
        lo, hi = s.low, s.high
    else:  # say "slower" and invert the interval with it
        text = f"{n} workers made {model}'s epochs {1 / s.mean:.2f}x slower"
        lo, hi = 1 / s.high, 1 / s.low
    if not math.isnan(lo):
        text += f" (95 % CI {lo:.2f}-{hi:.2f}x)"
    return text


def accuracy_text(v: CentralComparison, margin: float) -> str:
    """The accuracy half of a headline, from the claims' verdict, with its interval."""
    acc = v.accuracy
    claims = v.claims
    verdict = claims.accuracy_verdict
    pts = f"+-{100 * margin:g} pt"
    tost = acc.tost_p
    p_txt = (
        ("TOST p < 0.001" if tost < 0.001 else f"TOST p = {tost:.3f}")
        if not math.isnan(tost)
        else acc.note or "no test"
    )
    diff = 100 * acc.diff.mean
    if verdict == BELOW_MAJORITY:
        return (
            f"accuracy {100 * acc.mean_a.mean:.1f} % (centralised) is not above the "
            f"majority-class rate of {100 * claims.majority_rate:.1f} %: the model has not "
            "learned, so no accuracy verdict"
        )
    ci90 = _pts_ci(acc.diff_tost, f"{100 * (1 - 2 * acc.alpha):.0f} % CI")
    if verdict == EQUIVALENT:
        return f"accuracy equivalent within {pts} ({p_txt}; {ci90})"
    if verdict == DIFFERENT:
        t_txt = "< 0.001" if acc.t_p < 0.001 else f"= {acc.t_p:.3f}"
        ci95 = _pts_ci(acc.diff, "95 % CI")
        return f"accuracy differs by {diff:+.2f} pt ({ci95}; paired t p {t_txt})"
    ci = f"; {ci90}" if ci90 else ""
    need = seeds_needed_text(acc)
    if verdict == NOT_ENOUGH_SEEDS:
        return (
            f"accuracy equivalence not judged: {acc.n} paired seed(s), at least "
            f"{MIN_EQUIVALENCE_SEEDS} needed (mean diff {diff:+.2f} pt{ci}){need}"
        )
    return (
        f"accuracy not shown equivalent within {pts} ({p_txt}; mean diff {diff:+.2f} pt{ci})" + need
    )


def seeds_needed_text(c: PairedComparison) -> str:
    """``; with the paired differences' spread (sd 2.0 pt), TOST needs about 36 seeds ...``
    from a paired comparison, or '' when it has no spread to plan with."""
    n_need, sd = c.seeds_for_power, c.sd_diff
    if not n_need or sd is None or not math.isfinite(sd):
        return ""
    return (
        f"; with the paired differences' spread (sd {100 * sd:.2f} pt), TOST at +-"
        f"{100 * c.margin:g} pt needs about {n_need} paired seeds for "
        f"{100 * TARGET_POWER:.0f} % power if the true difference is 0"
        + (
            f" (a verdict still needs {MIN_EQUIVALENCE_SEEDS})"
            if n_need < MIN_EQUIVALENCE_SEEDS
            else ""
        )
    )


def headline_comparison(entry: ModelAnalysis) -> CentralComparison | None:
    """The comparison a model's headline reports: its largest worker count that does not
    oversubscribe the cores (None when every one does)."""
    cands = [v for v in entry.vs_central.values() if not v.oversubscribed]
    return max(cands, key=lambda v: v.n_workers) if cands else None


def headline(model: str, entry: ModelAnalysis, margin: float) -> str | None:
    """One plain sentence for a model, from its largest non-oversubscribed comparison."""
    best = headline_comparison(entry)
    if best is None:
        return None
    return f"{speedup_text(model, best)}; {accuracy_text(best, margin)}."
