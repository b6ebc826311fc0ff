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
from typing import Any

import numpy as np

from flowsplit.experiments.sfl.config import REPLAN_SUFFIX, run_schemes
from flowsplit.experiments.sfl.result import PilotCost, SFLCompareResult, Surrogate
from flowsplit.experiments.stats import (
    MIN_EQUIVALENCE_SEEDS,
    SCORE_BOUNDS,
    Interval,
    compare_paired,
    mean_ci,
    ratio_ci,
)
from flowsplit.federated.system.protocol import DIRECTIONS, HOPS, MESSAGE_TYPES
from flowsplit.util import available_cores

PAPER = {"accuracy_pts": 3.0, "delay_change": -0.20, "bytes_change": -0.50}
"""Margins over HSFL the HSFL paper reports (CIFAR-10/FEMNIST, simulation)."""
TARGET_FRACTION = 0.95


MIN_SEEDS = MIN_EQUIVALENCE_SEEDS
"""Seeds below which no scheme is named the winner: the data-parallel study's rule."""


def _interval(values, bounds: tuple[float, float] | None = None) -> dict[str, Any]:
    return mean_ci(values, bounds=bounds).as_dict()


def delay_to_target(history: list[dict], target: float) -> float:
    """Simulated clock (s) at the end of the first round reaching ``target`` accuracy."""
    for rec in history:
        if rec["accuracy"] >= target:
            return float(rec["clock_s"])
    return math.nan


def scheme_rows(runs: list[dict], scheme: str) -> list[dict]:
    return sorted((r for r in runs if r["scheme"] == scheme), key=lambda r: r["seed"])


def summarise(study, runs: list[dict], plans: dict, *, wall_s: float, dataset_dir: str) -> dict:
    """The results document's content, but for what ``run_sfl_compare`` adds (best-fixed,
    baselines, ablation) and the summary (:func:`summary_lines` of the typed result)."""
    import torch

    from flowsplit import __version__

    cfg = study.config
    ref_rows = scheme_rows(runs, "hsfl")
    ref_final = [r["history"][-1]["accuracy"] for r in ref_rows]
    target = cfg.target_accuracy
    if target is None:
        target = TARGET_FRACTION * float(np.mean(ref_final))
    names = run_schemes(cfg.schemes, getattr(cfg, "replan", "never"))
    per_scheme = {s: _scheme_summary(scheme_rows(runs, s), target) for s in names}
    versus = {s: _versus(scheme_rows(runs, s), ref_rows, target) for s in names if s != "hsfl"}
    pred_err = [
        abs(h["delay_s"] - p) / max(h["delay_s"], 1e-12)
        for r in runs
        for h, p in zip(r["history"], _predicted(r, "delay"), strict=True)
    ]
    pred_bytes_err = [
        abs(h["bytes_total"] - p) / max(h["bytes_total"], 1)
        for r in runs
        for h, p in zip(r["history"], _predicted(r, "bytes"), strict=True)
    ]
    ds = study.dataset
    results = {
        "flowsplit_version": __version__,
        "generated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "config": cfg.to_dict(),
        "dataset": {
            "path": dataset_dir,
            "n_train": int(len(ds.split_indices("train"))),
            "n_val": int(len(ds.split_indices("val"))),
            "n_test": int(len(ds.split_indices("test"))),
            "classes": list(ds.classes),
        },
        "topology": {
            "name": study.topology.name,
            "description": study.topology.description,
            "n_clients": study.topology.n_clients,
            "n_aggregators": study.topology.n_aggregators,
            "seed": study.topology.seed,
        },
        "profile": {
            "model": study.profile.model,
            "blocks": list(study.profile.block_names),
            "legal_cuts": [list(c) for c in study.profile.legal_cuts()],
        },
        "surrogate": study.surrogate,
        "target_accuracy": target,
        "schemes": per_scheme,
        "vs_hsfl": versus,
        "paper": PAPER,
        "prediction_check": {
            "max_rel_delay_error": max(pred_err, default=math.nan),
            "max_rel_bytes_error": max(pred_bytes_err, default=math.nan),
        },
        "plans": _plan_summary(plans),
        "trace": _trace_summary(study.topology, cfg.rounds),
        "replanning": replanning(runs, names),
        "runs": runs,
        "wall_s": wall_s,
        "environment": {
            "host": platform.node(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "cores": available_cores(),
            "threads": cfg.threads,
        },
    }
    return results


def _predicted(run: dict, what: str) -> list[float]:
    """The cost model's prediction of each round of ``run`` (``delay`` or ``bytes``):
    per round when the run recorded it (a trace, re-planning), else the plan's."""
    key, plan_key = (
        ("predicted_delay_per_round_s", "predicted_delay_s")
        if what == "delay"
        else ("predicted_bytes_per_round", "predicted_bytes")
    )
    return run.get(key) or [run[plan_key]] * len(run["history"])


def _trace_summary(topology, rounds: int) -> dict | None:
    """The network changes every run of the comparison went through (None: none)."""
    if not topology.trace:
        return None
    kinds = {"link": 0, "backbone": 0, "client links": 0, "out": 0}
    for e in topology.trace:
        if e.available is not None:
            kinds["out"] += 1
        elif e.backbone >= 0:
            kinds["backbone"] += 1
        elif e.aggregator >= 0:
            kinds["link"] += 1
        else:
            kinds["client links"] += 1
    return {
        "events": len(topology.trace),
        "by_kind": kinds,
        "rounds_changed": [r + 1 for r in range(rounds) if topology.events_at(r)],
    }


def replanning(runs: list[dict], names: tuple[str, ...] | list[str]) -> list[dict]:
    """Each re-planned scheme beside its static run, paired by seed: total delay of both
    (mean, 95 % t interval), re-planned minus static (seconds, paired t interval) and as
    a ratio (log interval), the accuracy difference, and the clients moved per run."""
    rows = []
    for twin in names:
        if not twin.endswith(REPLAN_SUFFIX):
            continue
        static = twin[: -len(REPLAN_SUFFIX)]
        a = {r["seed"]: r for r in scheme_rows(runs, static)}
        b = {r["seed"]: r for r in scheme_rows(runs, twin)}
        seeds = sorted(set(a) & set(b))
        if not seeds:
            continue
        d_a = np.array([a[s]["totals"]["delay_total_s"] for s in seeds], dtype=float)
        d_b = np.array([b[s]["totals"]["delay_total_s"] for s in seeds], dtype=float)
        acc = compare_paired(
            np.array([a[s]["history"][-1]["accuracy"] for s in seeds], dtype=float),
            np.array([b[s]["history"][-1]["accuracy"] for s in seeds], dtype=float),
        )
        rows.append(
            {
                "scheme": static,
                "replanned": twin,
                "n_seeds": len(seeds),
                "static_delay_total_s": _interval(d_a),
                "replanned_delay_total_s": _interval(d_b),
                "delay_diff_s": _interval(d_b - d_a),
                "delay_ratio": ratio_ci(d_b, d_a).as_dict(),
                "accuracy_diff": acc.diff.as_dict(),
                "moves_per_run": float(np.mean([b[s].get("moves", 0) for s in seeds])),
                "per_seed": {
                    "static_delay_total_s": d_a.tolist(),
                    "replanned_delay_total_s": d_b.tolist(),
                },
            }
        )
    return rows


def _scheme_summary(rows: list[dict], target: float) -> dict:
    final_acc = [r["history"][-1]["accuracy"] for r in rows]
    final_f1 = [r["history"][-1]["macro_f1"] for r in rows]
    delay = [r["totals"]["delay_total_s"] for r in rows]
    per_round = [np.mean([h["delay_s"] for h in r["history"]]) for r in rows]
    to_target = [delay_to_target(r["history"], target) for r in rows]
    nbytes = [r["totals"]["bytes_total"] for r in rows]
    by_hop = {h: float(np.mean([r["totals"]["bytes_by_hop"][h] for r in rows])) for h in HOPS}
    by_type = {
        t: float(np.mean([r["totals"]["bytes_by_type"][t] for r in rows])) for t in MESSAGE_TYPES
    }
    nested = {
        h: {
            d: {
                t: float(np.mean([r["totals"]["bytes"][h][d][t] for r in rows]))
                for t in MESSAGE_TYPES
            }
            for d in DIRECTIONS
        }
        for h in HOPS
    }
    n_rounds = min(len(r["history"]) for r in rows)
    curve = {
        "round": list(range(1, n_rounds + 1)),
        "accuracy": [
            float(np.mean([r["history"][k]["accuracy"] for r in rows])) for k in range(n_rounds)
        ],
        "macro_f1": [
            float(np.mean([r["history"][k]["macro_f1"] for r in rows])) for k in range(n_rounds)
        ],
        "clock_s": [
            float(np.mean([r["history"][k]["clock_s"] for r in rows])) for k in range(n_rounds)
        ],
        "delay_s": [
            float(np.mean([r["history"][k]["delay_s"] for r in rows])) for k in range(n_rounds)
        ],
    }
    return {
        "seeds": [r["seed"] for r in rows],
        "cuts": sorted({tuple(r["cuts"]) for r in rows}),
        "final_accuracy": _interval(final_acc, SCORE_BOUNDS),
        "final_macro_f1": _interval(final_f1, SCORE_BOUNDS),
        "delay_total_s": _interval(delay),
        "delay_per_round_s": _interval(per_round),
        "delay_to_target_s": _interval(to_target),
        "reached_target": int(np.sum(np.isfinite(to_target))),
        "bytes_total": _interval(nbytes),
        "bytes_by_hop": by_hop,
        "bytes_by_type": by_type,
        "bytes_by_hop_direction_type": nested,
        "wall_s": float(np.sum([r["wall_s"] for r in rows])),
        "per_seed": {
            "final_accuracy": final_acc,
            "final_macro_f1": final_f1,
            "delay_total_s": delay,
            "delay_to_target_s": to_target,
            "bytes_total": nbytes,
        },
        "curve": curve,
    }


def _versus(rows: list[dict], ref: list[dict], target: float) -> dict:
    seeds = sorted({r["seed"] for r in rows} & {r["seed"] for r in ref})
    a = {r["seed"]: r for r in ref}
    b = {r["seed"]: r for r in rows}

    def pick(runs, fn):
        return np.array([fn(runs[s]) for s in seeds], dtype=float)

    acc = compare_paired(
        pick(a, lambda r: r["history"][-1]["accuracy"]),
        pick(b, lambda r: r["history"][-1]["accuracy"]),
    )
    f1 = compare_paired(
        pick(a, lambda r: r["history"][-1]["macro_f1"]),
        pick(b, lambda r: r["history"][-1]["macro_f1"]),
    )
    delay = ratio_ci(
        pick(b, lambda r: r["totals"]["delay_total_s"]),
        pick(a, lambda r: r["totals"]["delay_total_s"]),
    )
    nbytes = ratio_ci(
        pick(b, lambda r: r["totals"]["bytes_total"]), pick(a, lambda r: r["totals"]["bytes_total"])
    )
    tt = ratio_ci(
        pick(b, lambda r: delay_to_target(r["history"], target)),
        pick(a, lambda r: delay_to_target(r["history"], target)),
    )
    return {
        "n_seeds": len(seeds),
        "accuracy_diff": acc.diff.as_dict(),
        "accuracy_test": {"t_p": acc.t_p, "wilcoxon_p": acc.wilcoxon_p, "note": acc.note},
        "macro_f1_diff": f1.diff.as_dict(),
        "delay_ratio": delay.as_dict(),
        "bytes_ratio": nbytes.as_dict(),
        "delay_to_target_ratio": tt.as_dict(),
    }


def baseline_summary(baselines: list[dict], runs: list[dict]) -> dict:
    """Per baseline that splits nothing: final accuracy and macro-F1 over seeds, and the
    accuracy difference of each split scheme from it, paired by seed."""
    out = {}
    for name in sorted({b["baseline"] for b in baselines}):
        rows = sorted((b for b in baselines if b["baseline"] == name), key=lambda b: b["seed"])
        acc = {b["seed"]: b["accuracy"] for b in rows}
        versus = {}
        for scheme in sorted({r["scheme"] for r in runs}):
            own = {r["seed"]: r["history"][-1]["accuracy"] for r in runs if r["scheme"] == scheme}
            seeds = sorted(set(acc) & set(own))
            cmp = compare_paired(
                np.array([acc[s] for s in seeds]), np.array([own[s] for s in seeds])
            )
            versus[scheme] = cmp.diff.as_dict()
        out[name] = {
            "final_accuracy": _interval([b["accuracy"] for b in rows]),
            "final_macro_f1": _interval([b["macro_f1"] for b in rows]),
            "bytes_total": _interval([b["bytes"] for b in rows]),
            "per_seed": rows,
            "scheme_minus_baseline": versus,
        }
    return out


ABLATION = (
    ("assignment (hsfl-greedy vs hsfl)", "hsfl-greedy", "hsfl"),
    ("cut choice (acc-aware vs hsfl-greedy)", "acc-aware", "hsfl-greedy"),
    ("total (acc-aware vs hsfl)", "acc-aware", "hsfl"),
)
"""The planner's gain over the research's baseline, split: HSFL's random assignment
replaced by the greedy at the same cuts, then the cuts chosen by the planner."""


def ablation(runs: list[dict]) -> list[dict]:
    """Rows of :data:`ABLATION` present in ``runs``: accuracy difference (points,
    paired t interval) and total delay and bytes ratios (paired, log interval)."""
    rows = []
    schemes = {r["scheme"] for r in runs}
    for label, b, a in ABLATION:
        if a not in schemes or b not in schemes:
            continue
        v = _versus(scheme_rows(runs, b), scheme_rows(runs, a), target=math.inf)
        rows.append(
            {
                "part": label,
                "scheme": b,
                "against": a,
                "n_seeds": v["n_seeds"],
                "accuracy_diff": v["accuracy_diff"],
                "delay_ratio": v["delay_ratio"],
                "bytes_ratio": v["bytes_ratio"],
            }
        )
    return rows


def _plan_summary(plans: dict) -> dict:
    out = {}
    for seed, by_scheme in plans.items():
        out[seed] = {
            s: {
                k: p.get(k)
                for k in (
                    "cuts",
                    "tiers",
                    "predicted_loss",
                    "predicted_accuracy",
                    "predicted",
                    "guard",
                    "delay_s",
                    "bytes",
                    "objective",
                    "planning_s",
                    "clients_per_aggregator",
                    "candidates",
                    "objective_def",
                )
            }
            for s, p in by_scheme.items()
        }
    return out


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
    schemes = results.schemes
    if "acc-aware" not in schemes:
        return None
    rounds = results.settings.rounds
    acc, ref = schemes["acc-aware"], schemes["hsfl"]
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
