"""From the runs of ``sfl compare`` to the results document (``results.json``).

Per scheme, over seeds: final test accuracy and macro-F1 (mean, 95 % t interval),
simulated delay in total, per round and to a target accuracy, bytes in total, per hop
and per message type. Against HSFL, paired by seed: accuracy and macro-F1
differences (paired t interval, with the paired tests of
:func:`flowsplit.experiments.stats.compare_paired`), and delay and bytes as ratios
(geometric mean of the per-seed ratios, interval on the log ratio:
:func:`flowsplit.experiments.stats.ratio_ci`).
"""

from __future__ import annotations

import datetime as dt
import math
import platform

import numpy as np

from flowsplit.experiments.sfl.config import REFERENCE, REPLAN_SUFFIX, run_schemes
from flowsplit.experiments.sfl.result import (
    AblationRow,
    BaselineRun,
    BaselineSummary,
    Curve,
    DatasetInfo,
    Environment,
    PairedTests,
    Paper,
    PilotCost,
    PlanSummary,
    PredictionCheck,
    ProfileInfo,
    ReplanRow,
    RoundRow,
    SchemePerSeed,
    SchemeSummary,
    SFLCompareResult,
    SFLRun,
    Surrogate,
    TopologyInfo,
    TraceSummary,
    Versus,
)
from flowsplit.experiments.stats import (
    MIN_EQUIVALENCE_SEEDS,
    SCORE_BOUNDS,
    Interval,
    compare_paired,
    mean_ci,
    ratio_ci,
)
from flowsplit.federated.system.protocol import DIRECTIONS, HOPS, MESSAGE_TYPES
from flowsplit.util import available_cores, jsonable

TARGET_FRACTION = 0.95


MIN_SEEDS = MIN_EQUIVALENCE_SEEDS
"""Seeds below which no scheme is named the winner: the data-parallel study's rule."""


def delay_to_target(history: list[RoundRow], target: float) -> float:
    """Simulated clock (s) at the end of the first round reaching ``target`` accuracy."""
    for rec in history:
        if rec.accuracy >= target:
            return float(rec.clock_s)
    return math.nan


def scheme_rows(runs: list[SFLRun], scheme: str) -> list[SFLRun]:
    return sorted((r for r in runs if r.scheme == scheme), key=lambda r: r.seed)


def summarise(
    study, runs: list[SFLRun], plans: dict, *, wall_s: float, dataset_dir: str
) -> SFLCompareResult:
    """The study's result, but for what ``run_sfl_compare`` adds (best-fixed, baselines,
    ablation) and the summary (:func:`summary_lines`)."""
    from flowsplit import __version__

    cfg = study.config
    target = cfg.target_accuracy
    if target is None:
        target = TARGET_FRACTION * float(
            np.mean([r.final.accuracy for r in scheme_rows(runs, REFERENCE)])
        )
    names = run_schemes(cfg.schemes, getattr(cfg, "replan", "never"))
    ref_rows = scheme_rows(runs, REFERENCE)
    ds, topo, profile = study.dataset, study.topology, study.profile
    return SFLCompareResult(
        flowsplit_version=__version__,
        generated=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        config=jsonable(cfg.to_dict(), strict=False),
        dataset=_dataset_info(ds, dataset_dir),
        topology=TopologyInfo(
            name=topo.name,
            description=topo.description,
            n_clients=topo.n_clients,
            n_aggregators=topo.n_aggregators,
            seed=topo.seed,
        ),
        profile=ProfileInfo(
            model=profile.model,
            blocks=list(profile.block_names),
            legal_cuts=[list(c) for c in profile.legal_cuts()],
        ),
        surrogate=Surrogate.from_study(study.surrogate),
        target_accuracy=target,
        schemes={s: _scheme_summary(scheme_rows(runs, s), target) for s in names},
        vs_hsfl={
            s: _versus(scheme_rows(runs, s), ref_rows, target) for s in names if s != REFERENCE
        },
        paper=Paper(),
        prediction_check=_prediction_check(runs),
        plans={
            seed: {s: PlanSummary.from_plan(p) for s, p in by_scheme.items()}
            for seed, by_scheme in plans.items()
        },
        trace=_trace_summary(topo, cfg.run.rounds),
        replanning=replanning(runs, names),
        runs=runs,
        wall_s=wall_s,
        environment=_environment(cfg.run.threads),
    )


def _dataset_info(ds, path: str) -> DatasetInfo:
    return DatasetInfo(
        path=path,
        n_train=int(len(ds.split_indices("train"))),
        n_val=int(len(ds.split_indices("val"))),
        n_test=int(len(ds.split_indices("test"))),
        classes=list(ds.classes),
    )


def _environment(threads: int) -> Environment:
    """The machine the study ran on, and the threads each run used."""
    import torch

    return Environment(
        host=platform.node(),
        python=platform.python_version(),
        torch=torch.__version__,
        numpy=np.__version__,
        cores=available_cores(),
        threads=threads,
    )


def _predicted(run: SFLRun, what: str) -> list[float]:
    """The cost model's prediction of each round of ``run`` (``delay`` or ``bytes``):
    per round when the run recorded it (a trace, re-planning), else the plan's."""
    if what == "delay":
        return run.predicted_delay_per_round_s or [run.predicted_delay_s] * len(run.history)
    return run.predicted_bytes_per_round or [run.predicted_bytes] * len(run.history)


def _prediction_check(runs: list[SFLRun]) -> PredictionCheck:
    """The largest relative error of the cost model's per-round delay and bytes."""
    delay = [
        abs(h.delay_s - p) / max(h.delay_s, 1e-12)
        for r in runs
        for h, p in zip(r.history, _predicted(r, "delay"), strict=True)
    ]
    nbytes = [
        abs(h.bytes_total - p) / max(h.bytes_total, 1)
        for r in runs
        for h, p in zip(r.history, _predicted(r, "bytes"), strict=True)
    ]
    return PredictionCheck(
        max_rel_delay_error=max(delay, default=math.nan),
        max_rel_bytes_error=max(nbytes, default=math.nan),
    )


def _trace_summary(topology, rounds: int) -> TraceSummary | None:
    """The network changes every run of the comparison went through (None: none)."""
    if not topology.trace:
        return None
    kinds = dict.fromkeys(("link", "backbone", "client links", "out"), 0)
    for e in topology.trace:
        kind = (
            "out"
            if e.available is not None
            else "backbone"
            if e.backbone >= 0
            else "link"
            if e.aggregator >= 0
            else "client links"
        )
        kinds[kind] += 1
    return TraceSummary(
        events=len(topology.trace),
        by_kind=kinds,
        rounds_changed=[r + 1 for r in range(rounds) if topology.events_at(r)],
    )


def _paired(runs: list[SFLRun], seeds: list[int]) -> dict[int, SFLRun]:
    by_seed = {r.seed: r for r in runs}
    return {s: by_seed[s] for s in seeds}


def replanning(runs: list[SFLRun], names: tuple[str, ...] | list[str]) -> list[ReplanRow]:
    """Each re-planned scheme beside its static run, paired by seed: total delay of both
    (mean, 95 % t interval), re-planned minus static (seconds, paired t interval) and as
    a ratio (log interval), the accuracy difference, and the clients moved per run."""
    rows = []
    for twin in names:
        if not twin.endswith(REPLAN_SUFFIX):
            continue
        static = twin[: -len(REPLAN_SUFFIX)]
        a, b = scheme_rows(runs, static), scheme_rows(runs, twin)
        seeds = sorted({r.seed for r in a} & {r.seed for r in b})
        if not seeds:
            continue
        a, b = _paired(a, seeds), _paired(b, seeds)
        d_a = np.array([a[s].delay_total_s for s in seeds], dtype=float)
        d_b = np.array([b[s].delay_total_s for s in seeds], dtype=float)
        acc = compare_paired(
            np.array([a[s].final.accuracy for s in seeds], dtype=float),
            np.array([b[s].final.accuracy for s in seeds], dtype=float),
        )
        rows.append(
            ReplanRow(
                scheme=static,
                replanned=twin,
                n_seeds=len(seeds),
                static_delay_total_s=mean_ci(d_a),
                replanned_delay_total_s=mean_ci(d_b),
                delay_diff_s=mean_ci(d_b - d_a),
                delay_ratio=ratio_ci(d_b, d_a),
                accuracy_diff=acc.diff,
                moves_per_run=float(np.mean([b[s].moves for s in seeds])),
                per_seed={
                    "static_delay_total_s": d_a.tolist(),
                    "replanned_delay_total_s": d_b.tolist(),
                },
            )
        )
    return rows


def _mean(values) -> float:
    return float(np.mean(list(values)))


def _scheme_summary(rows: list[SFLRun], target: float) -> SchemeSummary:
    final_acc = [r.final.accuracy for r in rows]
    final_f1 = [r.final.macro_f1 for r in rows]
    delay = [r.delay_total_s for r in rows]
    per_round = [np.mean([h.delay_s for h in r.history]) for r in rows]
    to_target = [delay_to_target(r.history, target) for r in rows]
    nbytes = [r.bytes_total for r in rows]
    n_rounds = min(len(r.history) for r in rows)
    return SchemeSummary(
        seeds=[r.seed for r in rows],
        cuts=[list(c) for c in sorted({tuple(r.cuts) for r in rows})],
        final_accuracy=mean_ci(final_acc, bounds=SCORE_BOUNDS),
        final_macro_f1=mean_ci(final_f1, bounds=SCORE_BOUNDS),
        delay_total_s=mean_ci(delay),
        delay_per_round_s=mean_ci(per_round),
        delay_to_target_s=mean_ci(to_target),
        reached_target=int(np.sum(np.isfinite(to_target))),
        bytes_total=mean_ci(nbytes),
        bytes_by_hop={h: _mean(r.totals.bytes_by_hop[h] for r in rows) for h in HOPS},
        bytes_by_type={t: _mean(r.totals.bytes_by_type[t] for r in rows) for t in MESSAGE_TYPES},
        bytes_by_hop_direction_type={
            h: {
                d: {t: _mean(r.totals.bytes[h][d][t] for r in rows) for t in MESSAGE_TYPES}
                for d in DIRECTIONS
            }
            for h in HOPS
        },
        wall_s=float(np.sum([r.wall_s for r in rows])),
        per_seed=SchemePerSeed(
            final_accuracy=final_acc,
            final_macro_f1=final_f1,
            delay_total_s=delay,
            delay_to_target_s=to_target,
            bytes_total=nbytes,
        ),
        curve=Curve(
            round=list(range(1, n_rounds + 1)),
            **{
                name: [_mean(getattr(r.history[k], name) for r in rows) for k in range(n_rounds)]
                for name in ("accuracy", "macro_f1", "clock_s", "delay_s")
            },
        ),
    )


def _versus(rows: list[SFLRun], ref: list[SFLRun], target: float) -> Versus:
    seeds = sorted({r.seed for r in rows} & {r.seed for r in ref})
    a, b = _paired(ref, seeds), _paired(rows, seeds)

    def pick(runs, fn):
        return np.array([fn(runs[s]) for s in seeds], dtype=float)

    acc = compare_paired(pick(a, lambda r: r.final.accuracy), pick(b, lambda r: r.final.accuracy))
    f1 = compare_paired(pick(a, lambda r: r.final.macro_f1), pick(b, lambda r: r.final.macro_f1))
    delay = ratio_ci(pick(b, lambda r: r.delay_total_s), pick(a, lambda r: r.delay_total_s))
    nbytes = ratio_ci(pick(b, lambda r: r.bytes_total), pick(a, lambda r: r.bytes_total))
    tt = ratio_ci(
        pick(b, lambda r: delay_to_target(r.history, target)),
        pick(a, lambda r: delay_to_target(r.history, target)),
    )
    return Versus(
        n_seeds=len(seeds),
        accuracy_diff=acc.diff,
        accuracy_test=PairedTests(t_p=acc.t_p, wilcoxon_p=acc.wilcoxon_p, note=acc.note),
        macro_f1_diff=f1.diff,
        delay_ratio=delay,
        bytes_ratio=nbytes,
        delay_to_target_ratio=tt,
    )


def baseline_summary(
    baselines: list[BaselineRun], runs: list[SFLRun]
) -> dict[str, BaselineSummary]:
    """Per baseline that splits nothing: final accuracy and macro-F1 over seeds, and the
    accuracy difference of each split scheme from it, paired by seed."""
    out = {}
    for name in sorted({b.baseline for b in baselines}):
        rows = sorted((b for b in baselines if b.baseline == name), key=lambda b: b.seed)
        acc = {b.seed: b.accuracy for b in rows}
        versus = {}
        for scheme in sorted({r.scheme for r in runs}):
            own = {r.seed: r.final.accuracy for r in runs if r.scheme == scheme}
            seeds = sorted(set(acc) & set(own))
            cmp = compare_paired(
                np.array([acc[s] for s in seeds]), np.array([own[s] for s in seeds])
            )
            versus[scheme] = cmp.diff
        out[name] = BaselineSummary(
            final_accuracy=mean_ci([b.accuracy for b in rows]),
            final_macro_f1=mean_ci([b.macro_f1 for b in rows]),
            bytes_total=mean_ci([b.bytes for b in rows]),
            per_seed=rows,
            scheme_minus_baseline=versus,
        )
    return out


ABLATION = (
    ("assignment (hsfl-greedy vs hsfl)", "hsfl-greedy", "hsfl"),
    ("cut choice (acc-aware vs hsfl-greedy)", "acc-aware", "hsfl-greedy"),
    ("total (acc-aware vs hsfl)", "acc-aware", "hsfl"),
)
"""The planner's gain over the research's baseline, split: HSFL's random assignment
replaced by the greedy at the same cuts, then the cuts chosen by the planner."""


def ablation(runs: list[SFLRun]) -> list[AblationRow]:
    """Rows of :data:`ABLATION` present in ``runs``: accuracy difference (points,
    paired t interval) and total delay and bytes ratios (paired, log interval)."""
    rows = []
    schemes = {r.scheme for r in runs}
    for label, b, a in ABLATION:
        if a not in schemes or b not in schemes:
            continue
        v = _versus(scheme_rows(runs, b), scheme_rows(runs, a), target=math.inf)
        rows.append(
            AblationRow(
                part=label,
                scheme=b,
                against=a,
                n_seeds=v.n_seeds,
                accuracy_diff=v.accuracy_diff,
                delay_ratio=v.delay_ratio,
                bytes_ratio=v.bytes_ratio,
            )
        )
    return rows


def _pct(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{100 * x:+.1f} %"


def _ratio_text(iv: Interval) -> str:
    if not np.isfinite(iv.mean):
        return "n/a"
    text = _pct(iv.mean - 1)
    if np.isfinite(iv.low):
        text += f" (95 % CI {_pct(iv.low - 1)} to {_pct(iv.high - 1)})"
    return text


def _pts_text(iv: Interval) -> str:
    if not np.isfinite(iv.mean):
        return "n/a"
    text = f"{100 * iv.mean:+.2f} pts"
    if np.isfinite(iv.low):
        text += f" (95 % CI {100 * iv.low:+.2f} to {100 * iv.high:+.2f})"
    return text


def _break_even(results: SFLCompareResult, cost: PilotCost) -> str | None:
    """How many rounds of acc-aware's savings over HSFL pay for the pilots."""
    acc, ref = results.scheme("acc-aware"), results.scheme(REFERENCE)
    if acc is None:
        return None
    rounds = results.settings.rounds
    d_save = ref.delay_per_round_s.mean - acc.delay_per_round_s.mean
    b_save = (ref.bytes_total.mean - acc.bytes_total.mean) / rounds

    def rounds_text(cost_value: float, saving: float) -> str:
        return f"{cost_value / saving:.1f} rounds" if saving > 0 else "never (no saving)"

    return (
        f"Counting the pilots ({cost.delay_s:.1f} s simulated delay, "
        f"{cost.bytes / 1e6:.1f} MB), acc-aware pays them back against HSFL after "
        f"{rounds_text(cost.delay_s, d_save)} on delay and "
        f"{rounds_text(cost.bytes, b_save)} on bytes (it saves {d_save:.2f} s and "
        f"{b_save / 1e6:.1f} MB per round; these runs have {rounds})."
    )


def _ci_text(iv: Interval, *, signed: bool = False) -> str:
    """``12.34 (95 % CI 11.90 to 12.80)`` (signed: ``+0.12 (...)``)."""
    f = "+.2f" if signed else ".2f"
    if not np.isfinite(iv.mean):
        return "n/a"
    text = format(iv.mean, f)
    if np.isfinite(iv.low):
        text += f" (95 % CI {format(iv.low, f)} to {format(iv.high, f)})"
    return text


def _num_text(x, fmt: str) -> str:
    return "n/a" if x is None or not np.isfinite(x) else format(x, fmt)


def surrogate_text(sur: Surrogate) -> str:
    """The pilots, their cost and how far the surrogate can be trusted, in words."""
    cost = sur.cost
    text = (
        f"Pilots: {cost.n_pilots} cut pairs x {sur.pilot_steps} optimiser steps "
        f"({sur.pilot_rounds} rounds each) on the {sur.eval_split} split, "
        f"{cost.wall_s:.1f} s of wall time, {cost.delay_s:.1f} s simulated delay and "
        f"{cost.bytes / 1e6:.1f} MB; "
        + (
            f"each validation curve extrapolated to the run's "
            f"{_num_text(sur.target_steps, '.0f')} steps by a fitted learning curve. "
            if sur.extrapolated
            else f"the curves were NOT extrapolated ({sur.not_extrapolated_reason}): "
            "each pilot's last evaluation is its prediction. "
        )
        + f"Backtest (each curve fitted without its last point, predicting it): mean absolute "
        f"error {_num_text(100 * sur.backtest_value('mae'), '.2f')} pt, "
        f"Spearman {_num_text(sur.backtest_value('spearman'), '.2f')} over "
        f"{sur.backtest_value('n')} pilots. "
        f"Spread of the pilots' predictions {100 * sur.spread:.2f} pt against "
        f"a sampling noise of {100 * sur.noise:.2f} pt: "
        + (
            "the cut pairs are separated."
            if sur.separated
            else "the pilots do NOT separate the cut pairs; the planner used its fallback rule."
        )
    )
    ridge = sur.ridge
    if ridge:
        text += (
            f" Pairs without a pilot: ridge (alpha {ridge.alpha:g}, leave-one-out RMSE "
            f"{100 * ridge.loo_rmse:.2f} pt) keeping {_num_text(ridge.spread_kept, '.0%')}"
            " of the pilots' spread" + (" (flattened)." if ridge.flattened else ".")
        )
    return text


def summary_lines(results: SFLCompareResult) -> list[str]:
    """Plain-language findings, every number measured (and its interval); the first is
    the page's verdict (:func:`verdict_line`)."""
    lines = [verdict_line(results)]
    n = len(results.settings.seeds)
    for scheme, v in results.vs_hsfl.items():
        cuts = ", ".join(str(tuple(c)) for c in results.schemes[scheme].cuts)
        lines.append(
            f"{scheme} (cuts {cuts}) against HSFL over {v.n_seeds} paired seeds: accuracy "
            f"{_pts_text(v.accuracy_diff)}, total delay {_ratio_text(v.delay_ratio)}, "
            f"bytes {_ratio_text(v.bytes_ratio)}."
        )
    p = results.paper
    lines.append(
        f"The HSFL paper reports +{p.accuracy_pts:g} pts accuracy, {100 * p.delay_change:+.0f} % "
        f"delay and {100 * p.bytes_change:+.0f} % bytes for its planner on image benchmarks; "
        "the lines above are what flowsplit measures here"
        + (" (one seed: no intervals)." if n < 2 else ".")
    )
    sur = results.surrogate
    if sur is not None:
        lines.append(surrogate_text(sur))
        line = _break_even(results, sur.cost)
        if line:
            lines.append(line)
    trace = results.trace
    if trace:
        lines.append(
            f"Every run went through the same trace of {trace.events} network changes "
            "(congested links and backbones, clients out); the plans were made on round 1's "
            "network."
        )
    for row in results.replanning:
        lines.append(
            f"Re-planned every round, {row.scheme} over {row.n_seeds} paired seeds: total "
            f"delay {_ci_text(row.replanned_delay_total_s)} s against "
            f"{_ci_text(row.static_delay_total_s)} s static, a difference of "
            f"{_ci_text(row.delay_diff_s, signed=True)} s ({_ratio_text(row.delay_ratio)});"
            f" accuracy {_pts_text(row.accuracy_diff)}; "
            f"{row.moves_per_run:.1f} client moves per run; the cuts stay the plan's."
        )
    for row in results.ablation:
        lines.append(
            f"Ablation, {row.part}: accuracy {_pts_text(row.accuracy_diff)}, total delay "
            f"{_ratio_text(row.delay_ratio)}, bytes {_ratio_text(row.bytes_ratio)}."
        )
    if results.baselines:
        parts = [
            f"{name} {100 * v.final_accuracy.mean:.2f} %" for name, v in results.baselines.items()
        ]
        lines.append(
            "Baselines that split nothing (same rows and seeds), mean final accuracy: "
            + ", ".join(parts)
            + "."
        )
    return lines


def prediction_check_text(results: SFLCompareResult) -> str:
    """The planner against the simulation it plans for: an internal check, shown under
    Conditions rather than among the findings."""
    chk = results.prediction_check
    return (
        f"the planner's predicted round delay and bytes match the simulation's to "
        f"{chk.max_rel_delay_error:.1e} and {chk.max_rel_bytes_error:.1e} (relative, worst "
        "round): the planner optimises what the simulation charges; neither is a measurement"
    )


def same_plan_groups(results: SFLCompareResult) -> list[list[str]]:
    """Schemes that ran the same plan (the same cuts, and the same mean delay, bytes and
    accuracy to 1e-9): their points and lines lie on top of each other."""
    groups: dict[tuple, list[str]] = {}
    for name, v in results.schemes.items():
        key = (
            tuple(map(tuple, v.cuts)),
            *(
                round(x, 9)
                for x in (v.delay_per_round_s.mean, v.bytes_total.mean, v.final_accuracy.mean)
            ),
        )
        groups.setdefault(key, []).append(name)
    return [g for g in groups.values() if len(g) > 1]


def same_plan_note(results: SFLCompareResult) -> str:
    """``"delay = acc-aware, same plan"`` per group of :func:`same_plan_groups`."""
    return "; ".join(" = ".join(g) + ", same plan" for g in same_plan_groups(results))


def verdict_line(results: SFLCompareResult) -> str:
    """The page's first line. Names the most accurate scheme only with at least
    :data:`MIN_SEEDS` seeds (the data-parallel study's rule) and only when its interval
    clears the runner-up's mean; otherwise says why not and what to rerun with."""
    schemes = results.schemes
    n = min(len(v.seeds) for v in schemes.values())
    fastest = min(schemes, key=lambda s: schemes[s].delay_per_round_s.mean)
    lightest = min(schemes, key=lambda s: schemes[s].bytes_total.mean)
    costs = (
        f"least predicted delay per round: {fastest}; fewest bytes: {lightest} "
        "(the simulation's cost model)"
    )
    if n < MIN_SEEDS:
        return (
            f"No winner named: {n} seed(s), at least {MIN_SEEDS} are needed for an accuracy "
            "verdict (intervals over fewer rest on a spread from a handful of runs); rerun "
            f"with --seeds {MIN_SEEDS}. {costs[0].upper() + costs[1:]}."
        )
    ranked = sorted(schemes, key=lambda s: -schemes[s].final_accuracy.mean)
    best, best_iv = ranked[0], schemes[ranked[0]].final_accuracy
    tied = [s for s in ranked[1:] if schemes[s].final_accuracy.mean >= best_iv.low]
    acc = f"{100 * best_iv.mean:.2f} % ({100 * best_iv.low:.2f}-{100 * best_iv.high:.2f})"
    if tied:
        return (
            f"No clear accuracy winner over {n} seeds: {best} {acc} is not clearly ahead of "
            f"{', '.join(tied)} (within its 95 % interval); {costs}."
        )
    return f"Most accurate over {n} seeds: {best}, {acc}; {costs}."
