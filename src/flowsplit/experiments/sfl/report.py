"""The SFL comparison as ``results.json``, ``report.md`` and ``report.html``."""

from __future__ import annotations

import math
from functools import partial
from operator import attrgetter
from pathlib import Path
from typing import Any

from flowsplit.experiments.intervals import in_words
from flowsplit.experiments.sfl.analysis import (
    prediction_check_text,
    same_plan_note,
    summary_lines,
    surrogate_text,
)
from flowsplit.experiments.sfl.result import SFLCompareResult, read_sfl_compare_result
from flowsplit.experiments.stats import DIFF_BOUNDS, SCORE_BOUNDS, Interval, clip_interval
from flowsplit.outputs import atomic_write_text
from flowsplit.report import figures
from flowsplit.report.page import (
    Block,
    Bullets,
    Column,
    Figure,
    Fold,
    Page,
    Section,
    Summary,
    Table,
    Text,
    fmt_ci,
    fmt_float,
    named_rows,
    rows_of,
)

TITLE = "SFL, HSFL and the accuracy-aware planner"

METHODS = [
    "Every scheme trains the same model on the same dataset, topology and seeds in the "
    "in-process simulation; the simulated delay and bytes are charged message by message "
    "by the engine's cost model (compute = FLOPs / speed; a message = latency + bytes / "
    "bandwidth; aggregator compute and backbone links are FIFO queues).",
    "sfl: SplitFed v1 at one cut, through a seeded random relay aggregator. hsfl: fixed cuts, "
    "seeded random assignment (the reference, the research's baseline). hsfl-greedy: the same "
    "cuts with the planner's delay-aware greedy assignment and local search. delay: the "
    "planner with weights (0, 1, 0). acc-aware: the planner, accuracy first: among the cut "
    "pairs whose predicted accuracy is within the tolerance (1 pt) of the best predicted, "
    "the least w_delay * delay / delay_ref + w_bytes * bytes / bytes_ref; the references are "
    "HSFL at its fixed cuts with the round-robin assignment (deterministic). When the pilots "
    "do not separate the cuts beyond their sampling noise, the planner says so and keeps "
    "the pairs with the shallowest client part. A plan with a == c is two-tier.",
    "Planner: every legal cut pair whose client part fits the clients' memory; a greedy "
    "assignment (largest client work first, each to the aggregator with the earliest finish "
    "time), then local search (moves, swaps; on small instances restarts and aggregator "
    "closing); cut pairs pruned by a lower bound on large instances.",
    "Surrogate: pilot runs at every legal cut pair (at most 6), budgeted in optimiser steps "
    "(a quarter of the run's, at least 4 rounds), on the validation split and the first "
    "seed; each pilot's validation curve is extrapolated to the run's steps by a fitted "
    "learning curve (a + b * steps^-c, anchored at the last point); pairs without a pilot "
    "get a ridge regression on cut features whose loss of spread is reported. Pilot cost "
    "is reported and not added to the runs.",
    "Baselines that split nothing: the majority class of the training rows; centralised "
    "training of the same model on the same rows (rounds x local epochs epochs); plain "
    "FedAvg of the whole model on the same clients (its bytes: model down and up per client "
    "and round; no simulated delay).",
    "Network changes and re-planning: with a trace (--trace random:SEED or a file of "
    "[[trace]] tables) every run is charged each round on that round's network, with the "
    "clients the trace lets take part; plans are made on round 1's network. With --replan "
    "every-round, hsfl-greedy, delay and acc-aware also run from the same first plan with "
    "their assignment re-planned before every round (NAME+replan: the planner's local search "
    "warm-started from last round's assignment against a cold greedy start, kept unless it "
    "saves 1 % of the round's predicted delay). The cuts are not re-planned: moving a cut "
    "mid-training moves layers and their optimiser state between tiers, which the runtime "
    "does not do.",
    "Statistics: means with 95 % t intervals over seeds; against HSFL paired by seed: "
    "accuracy as a difference (paired t interval), delay and bytes as ratios (geometric mean "
    "of per-seed ratios, interval on the log ratio). Delay to target: simulated clock at the "
    "first round whose test accuracy reaches the target.",
]


FOLDED = {
    "Ablation: where the gain over HSFL comes from",
    "Curves",
    "Bytes by hop and message type",
    "Plans (first seed)",
    "Accuracy surrogate",
    "Conditions",
    "Methods",
}
"""Sections whose body the HTML page folds in ``<details>`` (long tables, method text)."""


def _ci(iv: Interval, scale: float = 1.0, digits: int = 1, bounds=None) -> str:
    """Mean (low-high); ``bounds``: the quantity's range, the interval clipped to it."""
    iv = clip_interval(iv, bounds)
    return fmt_ci(iv.mean, iv.low, iv.high, scale, digits)


def _score(iv: Interval, digits: int = 2) -> str:
    """An accuracy or macro-F1 in %, its interval clipped to 0-100 %."""
    return _ci(iv, 100, digits, SCORE_BOUNDS)


def _diff(iv: Interval, scale: float = 100.0, digits: int = 2, bounds=DIFF_BOUNDS) -> str:
    """A signed difference with its interval: ``+0.14 (-0.25 to +0.54)``; a difference
    of scores (the default) clipped to +-100 pts."""
    return in_words(
        clip_interval(iv, bounds),
        lambda m: f"{scale * m:+.{digits}f}",
        lambda lo, hi: f"{scale * lo:+.{digits}f} to {scale * hi:+.{digits}f}",
        shown=math.isfinite,
    )


def _ratio(iv: Interval) -> str:
    return in_words(
        iv,
        lambda m: f"{100 * (m - 1):+.1f} %",
        lambda lo, hi: f"{100 * (lo - 1):+.1f} to {100 * (hi - 1):+.1f}",
        shown=math.isfinite,
    )


def results_rows(results: SFLCompareResult) -> list[dict]:
    rows = []
    plans = results.first_plans()
    for s, v in results.schemes.items():
        plan = plans.get(s)
        predicted = plan.predicted_accuracy if plan is not None else None
        rows.append(
            {
                "scheme": s,
                "cuts": ", ".join(str(tuple(c)) for c in v.cuts),
                "acc": _score(v.final_accuracy),
                "predicted": None if predicted is None else 100 * predicted,
                "f1": _score(v.final_macro_f1),
                "delay": _ci(v.delay_total_s, 1, 2),
                "per_round": _ci(v.delay_per_round_s, 1, 3),
                "target": _ci(v.delay_to_target_s, 1, 2) + f" [{v.reached_target}/{len(v.seeds)}]",
                "mb": _ci(v.bytes_total, 1e-6, 1),
            }
        )
    return rows


RESULT_COLS = [
    Column("scheme", "scheme"),
    Column("cuts", "cuts (a, c)"),
    Column("acc", "final accuracy, %", align="right"),
    Column("predicted", "planner's predicted accuracy (validation), %", fmt_float(2), "right"),
    Column("f1", "final macro-F1, %", align="right"),
    Column("delay", "total delay (predicted), s", align="right"),
    Column("per_round", "delay per round (predicted), s", align="right"),
    Column("target", "delay to target, s [seeds reached]", align="right"),
    Column("mb", "bytes, MB", align="right"),
]


def versus_rows(results: SFLCompareResult) -> list[dict]:
    rows = named_rows(results.vs_hsfl, VERSUS_COLS)
    p = results.paper
    rows.append(
        {
            "scheme": "paper's planner (as reported on CIFAR-10/FEMNIST, not this data)",
            "acc": f"+{p.accuracy_pts:g}",
            "f1": "–",
            "delay": f"{100 * p.delay_change:+.0f} %",
            "target": "–",
            "bytes": f"{100 * p.bytes_change:+.0f} %",
            "p": None,
        }
    )
    return rows


VERSUS_COLS = [
    Column("scheme", "scheme", of=lambda s, v: s),
    Column(
        "acc", "accuracy diff, pts (95 % CI)", align="right", of=lambda s, v: _diff(v.accuracy_diff)
    ),
    Column("f1", "macro-F1 diff, pts", align="right", of=lambda s, v: _diff(v.macro_f1_diff)),
    Column("delay", "total delay change", align="right", of=lambda s, v: _ratio(v.delay_ratio)),
    Column(
        "target",
        "delay-to-target change [pairs where both reached it]",
        align="right",
        of=lambda s, v: (
            _ratio(v.delay_to_target_ratio) + f" [{v.delay_to_target_ratio.n} of {v.n_seeds} pairs]"
        ),
    ),
    Column("bytes", "bytes change", align="right", of=lambda s, v: _ratio(v.bytes_ratio)),
    Column(
        "p", "paired t p (accuracy)", fmt_float(3), "right", of=lambda s, v: v.accuracy_test.t_p
    ),
]


def bytes_rows(results: SFLCompareResult) -> list[dict]:
    rows = []
    for s, v in results.schemes.items():
        row: dict[str, Any] = {"scheme": s}
        row.update({h: b / 1e6 for h, b in v.bytes_by_hop.items()})
        row.update({t: b / 1e6 for t, b in v.bytes_by_type.items()})
        rows.append(row)
    return rows


def bytes_cols(results: SFLCompareResult) -> list[Column]:
    first = next(iter(results.schemes.values()))
    keys = list(first.bytes_by_hop) + list(first.bytes_by_type)
    return [Column("scheme", "scheme")] + [
        Column(k, f"{k}, MB", fmt_float(2), "right") for k in keys
    ]


PLAN_COLS = [
    Column("scheme", "scheme", of=lambda s, p: s),
    Column("cuts", "cuts", of=lambda s, p: str(tuple(p.cuts))),
    Column("tiers", "tiers", of=lambda s, p: p.tiers),
    Column(
        "clients",
        "clients per aggregator",
        of=lambda s, p: " / ".join(map(str, p.clients_per_aggregator)),
    ),
    Column(
        "acc", "predicted accuracy", fmt_float(4), "right", of=lambda s, p: p.predicted_accuracy
    ),
    Column("loss", "predicted loss", fmt_float(3), "right", of=lambda s, p: p.predicted_loss),
    Column("delay", "predicted delay / round, s", fmt_float(3), "right", of=lambda s, p: p.delay_s),
    Column(
        "mb", "predicted MB / round", fmt_float(2), "right", of=lambda s, p: (p.bytes or 0) / 1e6
    ),
    Column(
        "objective",
        "objective (acc-aware weights)",
        fmt_float(3),
        "right",
        of=lambda s, p: p.objective,
    ),
    Column("ms", "planning, ms", fmt_float(1), "right", of=lambda s, p: 1e3 * p.planning_s),
]


def plan_rows(results: SFLCompareResult) -> list[dict]:
    return named_rows(results.first_plans(), PLAN_COLS)


SURROGATE_COLS = [
    Column("cuts", "cuts (a, c)"),
    Column("pilot_accuracy", "pilot accuracy (val, last point)", fmt_float(4), "right"),
    Column("predicted_accuracy", "predicted accuracy (run budget)", fmt_float(4), "right"),
    Column("predicted_loss", "predicted loss", fmt_float(3), "right"),
    Column("source", "source"),
]


def conditions_rows(results: SFLCompareResult) -> list[dict]:
    c, d, t = results.settings, results.dataset, results.topology
    env = results.environment
    refs = next(filter(None, (p.references_text() for p in results.first_plans().values())), None)
    rows = [
        (
            "dataset",
            f"{d.path} ({d.n_train} train / {d.n_val} val / {d.n_test} test "
            f"flows, {len(d.classes)} classes)",
        ),
        ("model, blocks", f"{c.model}: {', '.join(results.profile.blocks)}"),
        (
            "topology",
            f"{t.name} ({t.n_clients} clients, {t.n_aggregators} aggregators, "
            f"seed {t.seed}): {t.description}",
        ),
        (
            "seeds, rounds",
            f"{', '.join(map(str, c.seeds))}; {c.rounds} rounds, batch "
            f"{c.batch_size}, lr {c.lr:g}, {c.local_epochs} local epoch(s), "
            f"partition {c.partition}, training rows "
            f"{c.train_limit or 'all'}",
        ),
        ("three-tier family", c.family),
        (
            "baselines",
            f"sfl cut {c.sfl_cut}; hsfl cuts {tuple(c.fixed_cuts)}, random assignment",
        ),
        (
            "objective",
            f"weights (loss, delay, bytes) = {tuple(c.weights)}; references: " + (refs or "–"),
        ),
        ("network changes", _network_text(results)),
        ("target accuracy", f"{100 * results.target_accuracy:.2f} %"),
        ("delays (cost model check)", prediction_check_text(results)),
        ("host", f"{env.host}, {env.cores} cores, torch {env.torch}, {c.threads} thread(s)"),
        (
            "flowsplit, generated, wall",
            f"{results.flowsplit_version}, {results.generated}, {results.wall_s:.0f} s",
        ),
    ]
    return [{"what": k, "value": v} for k, v in rows]


def _network_text(results: SFLCompareResult) -> str:
    settings, trace = results.settings, results.trace
    replan = f"assignment re-planning: {settings.replan}"
    if not trace:
        return f"none; {replan}"
    source = settings.trace or "the topology's [[trace]]"
    return f"a trace of {trace.events} changes ({source}); {replan}"


COND_COLS = [Column("what", "condition"), Column("value", "value")]


LINE_STYLES = ("-o", "--s", ":D", "-.^", "-v", "--P", ":X", "-.h")
"""A line style and marker per scheme, so a line lying on another still shows."""


def _curves(schemes, x, y, **labels):
    """One line chart, a line per scheme: ``x`` and ``y`` pick from its mean curve."""
    lines = [
        {"label": s, "x": x(v.curve), "y": y(v.curve), "style": LINE_STYLES[i % len(LINE_STYLES)]}
        for i, (s, v) in enumerate(schemes.items())
    ]
    return figures.line_chart(lines, **labels)


def tradeoff_figure(results: SFLCompareResult):
    """The page's one picture: final accuracy against the predicted delay per round and
    against the run's bytes, a point per scheme (its own marker), the baselines that
    split nothing marked."""
    points = []
    for name, v in results.schemes.items():
        acc = clip_interval(v.final_accuracy, SCORE_BOUNDS)
        points.append(
            {
                "label": name,
                "x": {"delay": v.delay_per_round_s.mean, "bytes": v.bytes_total.mean / 1e6},
                "y": 100 * acc.mean,
                "ylo": 100 * acc.low,
                "yhi": 100 * acc.high,
            }
        )
    hlines = []
    for name, b in results.baselines.items():
        y = 100 * b.final_accuracy.mean
        if name == "fedavg":  # it has bytes but no simulated delay: a point on one panel
            points.append(
                {"label": "fedavg (baseline)", "x": {"bytes": b.bytes_total.mean / 1e6}, "y": y}
            )
        else:
            hlines.append(
                {
                    "label": f"{name} (baseline)",
                    "y": y,
                    "style": "--" if name == "centralised" else ":",
                }
            )
    return figures.scatter_panels(
        [
            ("delay", "predicted delay per round, s (simulated)"),
            ("bytes", "bytes per run, MB"),
        ],
        points,
        ylabel="final test accuracy, %",
        hlines=hlines,
    )


def tradeoff_caption(results: SFLCompareResult) -> str:
    n = min(len(v.seeds) for v in results.schemes.values())
    note = same_plan_note(results)
    return (
        f"Final test accuracy (mean over {n} seed(s), 95 % interval clipped to 0-100 %) "
        "against the delay per round the simulation's cost model predicts (not measured) "
        "and the bytes of the whole run. Lines: baselines that split nothing."
        + (f" Coinciding points: {note}." if note else "")
    )


def _figures(results: SFLCompareResult) -> list[Figure]:
    """The curves and the bytes per hop (drawn when the HTML page is written)."""
    schemes = results.schemes

    def pct(c):
        return [100 * a for a in c.accuracy]

    def by_hop():
        hops = list(next(iter(schemes.values())).bytes_by_hop)
        return figures.bar_chart(
            list(schemes),
            {h: [v.bytes_by_hop[h] / 1e6 for v in schemes.values()] for h in hops},
            ylabel="MB (all rounds, mean over seeds)",
            title="Bytes per hop",
        )

    rounds, clock_s, delay_s = attrgetter("round"), attrgetter("clock_s"), attrgetter("delay_s")
    note = same_plan_note(results)
    same = (
        f" (a line per scheme, each its own style; one line under another: {note})" if note else ""
    )
    curves = [
        Figure(partial(_curves, schemes, x, y, xlabel=xlabel, ylabel=ylabel, title=title), cap)
        for x, y, xlabel, ylabel, title, cap in (
            (
                rounds,
                pct,
                "round",
                "test accuracy, %",
                "Accuracy per round (mean over seeds)",
                "Test accuracy per round" + same,
            ),
            (
                clock_s,
                pct,
                "predicted (simulated) time, s",
                "test accuracy, %",
                "Accuracy against simulated training time",
                "Test accuracy against predicted (simulated) time" + same,
            ),
            (
                rounds,
                delay_s,
                "round",
                "predicted round delay, s",
                "Predicted (simulated) delay per round",
                "Predicted (simulated) delay per round" + same,
            ),
        )
    ]
    return [*curves, Figure(by_hop, "Bytes per hop")]


def _surrogate_parts(results: SFLCompareResult) -> tuple[list[dict], str]:
    sur = results.surrogate
    if sur is None:
        return [], "No pilots: the accuracy-aware planner was not run."
    text = surrogate_text(sur)
    rows = sur.table_rows()
    return rows, text


REPLAN_COLS = [
    Column("scheme", "scheme (first plan)", of=lambda r: r.scheme),
    Column("n", "seeds", align="right", of=lambda r: r.n_seeds),
    Column(
        "static",
        "static: total delay, s",
        align="right",
        of=lambda r: _ci(r.static_delay_total_s, 1, 2),
    ),
    Column(
        "replanned",
        "re-planned: total delay, s",
        align="right",
        of=lambda r: _ci(r.replanned_delay_total_s, 1, 2),
    ),
    Column(
        "diff",
        "re-planned minus static, s (95 % CI)",
        align="right",
        of=lambda r: _diff(r.delay_diff_s, 1.0, 2, None),
    ),
    Column("ratio", "change (95 % CI)", align="right", of=lambda r: _ratio(r.delay_ratio)),
    Column(
        "acc", "accuracy diff, pts (95 % CI)", align="right", of=lambda r: _diff(r.accuracy_diff)
    ),
    Column("moves", "client moves per run", fmt_float(1), "right", of=lambda r: r.moves_per_run),
]


def replan_rows(results: SFLCompareResult) -> list[dict]:
    return rows_of(results.replanning, REPLAN_COLS)


def _replan_text(results: SFLCompareResult) -> str:
    trace = results.trace
    net = (
        f"The network changed {trace.events} times during the run (rounds "
        f"{', '.join(map(str, trace.rounds_changed)) or 'none'})."
        if trace
        else "No trace: the network did not change, so re-planning has nothing to gain."
    )
    return (
        net + " Static: the first plan's assignment for every round. Re-planned: the "
        "assignment re-planned before every round on that round's network (the cuts stay "
        "the plan's)."
    )


def report_page(results: SFLCompareResult) -> Page:
    """The report, once for both files (``report.html`` and ``report.md``)."""
    sur_rows, sur_text = _surrogate_parts(results)
    verdict, *findings = results.summary or [""]
    note = same_plan_note(results)
    opening: list[Block] = [
        Text(verdict, "verdict"),
        Figure(lambda: tradeoff_figure(results), tradeoff_caption(results)),
    ]
    if note:
        opening.append(Text(f"Same plan, so the same point and line: {note}."))
    versus = Table(versus_rows(results), VERSUS_COLS, "Against HSFL, paired by seed")
    sections = [
        Section("Verdict", opening, anchor="verdict"),
        Section("Summary", [Summary(findings), versus], anchor="summary"),
        Section("Results per scheme", [Table(results_rows(results), RESULT_COLS)], "results"),
    ]
    if results.replanning:
        replan = [Text(_replan_text(results)), Table(replan_rows(results), REPLAN_COLS)]
        sections.append(Section("Static and re-planned", replan))
    surrogate = [Text(sur_text)] + ([Table(sur_rows, SURROGATE_COLS)] if sur_rows else [])
    rest = [
        (
            "Ablation: where the gain over HSFL comes from",
            [Table(ablation_rows(results), ABLATION_COLS)],
        ),
        (
            "Baselines that split nothing (same rows, seeds, test split)",
            [Table(baseline_rows(results), BASELINE_COLS)],
        ),
        ("Curves", _figures(results)),
        ("Bytes by hop and message type", [Table(bytes_rows(results), bytes_cols(results))]),
        ("Plans (first seed)", [Table(plan_rows(results), PLAN_COLS)]),
        ("Accuracy surrogate", surrogate),
        ("Conditions", [Table(conditions_rows(results), COND_COLS)]),
        ("Methods", [Bullets(METHODS)]),
    ]
    for title, blocks in rest:
        if title in FOLDED:
            blocks = [Fold(f"show {title.split(':')[0].lower()}", blocks)]
        sections.append(Section(title, blocks))
    subtitle = f"flowsplit {results.flowsplit_version}, {results.generated}"
    return Page(TITLE, sections, subtitle=subtitle)


def _minus_acc_aware(v) -> str:
    vs = v.scheme_minus("acc-aware")
    return "–" if vs is None else _diff(vs)


BASELINE_COLS = [
    Column("baseline", "baseline (splits nothing)", of=lambda name, v: name),
    Column("acc", "accuracy, %", align="right", of=lambda name, v: _score(v.final_accuracy)),
    Column("f1", "macro-F1, %", align="right", of=lambda name, v: _score(v.final_macro_f1)),
    Column("mb", "MB total", align="right", of=lambda name, v: _ci(v.bytes_total, 1e-6, 1)),
    Column(
        "acc_aware",
        "acc-aware minus it, pts",
        align="right",
        of=lambda name, v: _minus_acc_aware(v),
    ),
]


def baseline_rows(results: SFLCompareResult) -> list[dict]:
    return named_rows(results.baselines, BASELINE_COLS)


ABLATION_COLS = [
    Column("part", "part of the gain", of=lambda r: r.part),
    Column("n", "seeds", align="right", of=lambda r: r.n_seeds),
    Column("acc", "accuracy, pts (95 % CI)", align="right", of=lambda r: _diff(r.accuracy_diff)),
    Column("delay", "total delay (95 % CI)", align="right", of=lambda r: _ratio(r.delay_ratio)),
    Column("bytes", "bytes (95 % CI)", align="right", of=lambda r: _ratio(r.bytes_ratio)),
]


def ablation_rows(results: SFLCompareResult) -> list[dict]:
    return rows_of(results.ablation, ABLATION_COLS)


def write_report(out: str | Path, results: SFLCompareResult) -> Path:
    """Write results.json, report.md and report.html under ``out``; returns report.html."""
    out = Path(out)
    results.to_json(out / "results.json")
    page = report_page(results)
    atomic_write_text(out / "report.md", page.markdown())
    path = out / "report.html"
    atomic_write_text(path, page.html())
    return path


def rerender(out: str | Path) -> Path:
    """Rewrite report.md and report.html (and the summary) from ``out/results.json``."""
    results = read_sfl_compare_result(Path(out) / "results.json")
    results.summary = summary_lines(results)
    return write_report(out, results)
