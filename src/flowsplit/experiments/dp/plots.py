"""Figures of the data-parallel study, built from its typed result.

Each function takes parts of the :class:`~flowsplit.experiments.dp.result.CompareResult`
(the runs' records for the learning curves) and returns a matplotlib Figure;
:mod:`flowsplit.report.html` embeds it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.ticker import MaxNLocator

from flowsplit.experiments.dp.result import (
    NO_INTERVAL,
    Baselines,
    CompareResult,
    ModelAnalysis,
)
from flowsplit.experiments.dp.scaling import Network, ring_allreduce_time
from flowsplit.report import figures


def _workers_of(models: Mapping[str, ModelAnalysis]) -> list[int]:
    return sorted({int(n) for e in models.values() for n in e.by_workers})


def _label(n: int, oversub: bool) -> str:
    return f"{n} worker{'s' if n > 1 else ''}" + (" (oversubscribed)" if oversub else "")


def _grouped(models: Mapping[str, ModelAnalysis], key: str, scale: float = 1.0):
    """Series per worker count of the group interval ``key`` (a field of
    :class:`~flowsplit.experiments.dp.result.GroupSummary`): mean and CI across models."""
    names = list(models)
    series, lows, highs = {}, {}, {}
    for n in _workers_of(models):
        groups = [models[m].by_workers.get(str(n)) for m in names]
        over = any(g and g.oversubscribed for g in groups)
        label = _label(n, over)
        stats = [NO_INTERVAL if g is None else getattr(g, key) for g in groups]
        series[label] = [scale * s.mean for s in stats]
        lows[label] = [scale * (s.mean if math.isnan(s.low) else s.low) for s in stats]
        highs[label] = [scale * (s.mean if math.isnan(s.high) else s.high) for s in stats]
    return names, series, lows, highs


def epoch_time_chart(models: Mapping[str, ModelAnalysis]):
    names, series, lows, highs = _grouped(models, "epoch_time_s")
    fig = figures.bar_chart(
        names,
        series,
        lows=lows,
        highs=highs,
        ylabel="time per epoch (s), log scale",
        title="Time per epoch (XGBoost: per round), mean and 95 % CI",
    )
    fig.axes[0].set_yscale("log")
    return fig


def quality_chart(
    models: Mapping[str, ModelAnalysis], key: str, title: str, baselines: Baselines | None = None
):
    """Bars of a score (mean and 95 % CI) from 0 to 100 %, with the majority-class rate and
    the flow-statistics baseline (XGBoost, centralised) as horizontal lines."""
    names, series, lows, highs = _grouped(models, key, scale=100.0)
    fig = figures.bar_chart(
        names, series, lows=lows, highs=highs, ylabel="%", title=title, ylim=(0.0, 100.5)
    )
    ax = fig.axes[0]
    base = baselines or Baselines()
    if base.majority:
        ax.axhline(
            100 * getattr(base.majority, key),
            color="crimson",
            ls="--",
            lw=1,
            label=f"majority class ({base.majority.class_name})",
        )
    if base.flow_stats:
        ax.axhline(
            100 * getattr(base.flow_stats, key).mean,
            color="dimgrey",
            ls=":",
            lw=1.2,
            label="XGBoost on flow statistics (centralised)",
        )
    _legend_below(ax)
    return fig


def _legend_below(ax, ncol: int = 3) -> None:
    """The legend under the axes, where it cannot hide a bar."""
    ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=ncol)


def comm_share_chart(models: Mapping[str, ModelAnalysis]):
    names, series, lows, highs = _grouped(models, "comm_share", scale=100.0)
    return figures.bar_chart(
        names,
        series,
        lows=lows,
        highs=highs,
        ylabel="% of training time in all-reduce",
        title="Communication share of step time (measured)",
    )


def speedup_chart(model: str, entry: ModelAnalysis, network_names: Mapping[str, str]):
    """Two panels: the measured speedup (with its CI, on linear axes, against the ideal N;
    hollow markers where no speedup is claimed) and, separately, the scaling model's
    predictions for larger clusters (log-log), so the measurement is not dwarfed by them."""
    fig = figures.new_figure(11.0, 4.0)
    measured, predicted = fig.subplots(1, 2)
    top = _measured_speedup(measured, model, entry)
    _predicted_speedup(predicted, model, entry, network_names, top)
    return fig


def _measured_speedup(measured, model: str, entry: ModelAnalysis) -> int:
    """The measured speedups against the ideal N; the largest worker count measured."""
    pts = [(1, 1.0, 1.0, 1.0, True)]
    for n, v in entry.vs_central.items():
        s = v.speedup
        pts.append((int(n), s.mean, s.low, s.high, v.claims.speedup_claimed))
    pts.sort()
    top = max(p[0] for p in pts)
    measured.plot([1, top], [1, top], ":", color="grey", label="ideal (N)")
    for claimed in (True, False):
        sel = [p for p in pts if p[4] == claimed and not math.isnan(p[1])]
        if not sel:
            continue
        x = np.array([p[0] for p in sel], dtype=float)
        y = np.array([p[1] for p in sel])
        lo = np.nan_to_num(y - np.array([p[2] for p in sel]), nan=0.0).clip(min=0)
        hi = np.nan_to_num(np.array([p[3] for p in sel]) - y, nan=0.0).clip(min=0)
        measured.errorbar(
            x,
            y,
            yerr=[lo, hi],
            fmt="o",
            color="black",
            capsize=3,
            mfc="black" if claimed else "white",
            label="measured, 95 % CI" if claimed else "measured, not claimed (see the summary)",
        )
    measured.set_xticks(sorted({p[0] for p in pts}))
    measured.set_xlim(0.5, top + 0.5)
    measured.set_ylim(0, max(top, *(p[3] for p in pts if not math.isnan(p[3])), 1) * 1.1)
    measured.set_xlabel("workers")
    measured.set_ylabel("speedup over 1 worker")
    measured.set_title(f"{model}: measured on this machine", fontsize="medium")
    measured.grid(alpha=0.3)
    measured.legend(fontsize="x-small", loc="upper left")
    return top


def _predicted_speedup(
    predicted, model: str, entry: ModelAnalysis, network_names: Mapping[str, str], top: int
) -> None:
    """The scaling model's speedup curves, checked up to ``top`` workers, dashed beyond."""
    # The model was checked only as far as workers were measured (``top``): beyond that
    # each curve is drawn dashed and faint, and labelled as unchecked extrapolation.
    for i, (key, rows) in enumerate((entry.scaling.predictions if entry.scaling else {}).items()):
        label = "this machine" if key == "host" else network_names.get(key, key)
        x = np.array([r.n_workers for r in rows], dtype=float)
        y = np.array([r.speedup for r in rows])
        checked = x <= top
        style = {"color": f"C{i}"}
        predicted.plot(x[checked], y[checked], "-", label=f"{label}, checked", **style)
        beyond = x >= x[checked].max() if checked.any() else np.ones_like(checked)
        predicted.plot(
            x[beyond], y[beyond], "--", alpha=0.6, label=f"{label}, extrapolated", **style
        )
    predicted.axvline(top, color="grey", lw=0.8)
    predicted.annotate(
        f"measured up to {top}: unchecked beyond",
        (top, 1),
        xytext=(4, 4),
        textcoords="offset points",
        fontsize="x-small",
        color="grey",
    )
    ideal = [1, max(1024, top)]
    predicted.plot(ideal, ideal, ":", color="grey", label="ideal (N)")
    predicted.set_xscale("log", base=2)
    predicted.set_yscale("log")
    predicted.set_xlabel("workers")
    predicted.set_ylabel("predicted speedup")
    predicted.set_title(
        f"{model}: scaling model, predicted (dashed: unchecked extrapolation)", fontsize="medium"
    )
    predicted.grid(alpha=0.3, which="both")
    predicted.legend(fontsize="x-small", loc="upper left")


def learning_curves_chart(model: str, records: Sequence[Mapping]):
    """Training loss and validation macro-F1 against epoch and against training time, one
    colour per worker count, one line per seed (the per-epoch history of each run)."""
    runs = [r for r in records if r.model == model and r.loss_per_epoch]
    fig = figures.new_figure(11.0, 5.6)
    axes = fig.subplots(2, 2, sharey="row")
    workers = sorted({int(r.workers) for r in runs})
    colours = {n: f"C{i}" for i, n in enumerate(workers)}
    for r in sorted(runs, key=lambda r: (r.workers, r.seed)):
        n = int(r.workers)
        loss = np.array([np.nan if v is None else v for v in r.loss_per_epoch], dtype=float)
        f1 = np.array([np.nan if v is None else v for v in r.val_macro_f1_per_epoch], dtype=float)
        times = np.array([0.0 if t is None else t for t in r.epoch_times_s])
        clock = np.cumsum(times)
        first = r.seed == min(q.seed for q in runs if int(q.workers) == n)
        label = _label(n, bool(r.oversubscribed)) if first else None
        style = {
            "color": colours[n],
            "alpha": 0.8,
            "lw": 1.2,
            "marker": "." if len(loss) < 30 else None,
        }
        for ax_row, y in ((0, loss), (1, f1)):
            if not len(y):
                continue
            axes[ax_row][0].plot(np.arange(1, len(y) + 1), y, label=label, **style)
            k = min(len(y), len(clock))
            if k:
                axes[ax_row][1].plot(clock[:k], y[:k], **style)
    for ax in axes[:, 0]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
    axes[0][0].set_ylabel("training loss")
    axes[1][0].set_ylabel("validation macro-F1")
    axes[1][0].set_ylim(0, 1.02)
    axes[0][0].set_ylim(bottom=0)
    for ax in axes[1]:
        ax.set_xlabel("")
    axes[1][0].set_xlabel("epoch (XGBoost: round)")
    axes[1][1].set_xlabel("training time, s (sum of epoch times; validation excluded)")
    axes[0][0].set_title(f"{model}: against epoch", fontsize="medium")
    axes[0][1].set_title(f"{model}: against training time", fontsize="medium")
    for row in axes:
        for ax in row:
            ax.grid(alpha=0.3)
    if runs:
        axes[0][0].legend(fontsize="x-small", title="one line per seed", title_fontsize="x-small")
    return fig


def per_class_chart(results: CompareResult):
    """Test F1 per class (mean over seeds) of each model, centralised, from 0 to 100 %,
    beside the majority-class baseline."""
    classes = list(results.dataset.classes or [])
    series = {}
    maj = results.analysis.baselines.majority
    for model in results.per_class_f1:
        central = results.central_per_class_f1(model)
        if central is not None:
            series[f"{model} (centralised)"] = [100 * central.get(c, math.nan) for c in classes]
    if maj:
        series[f"majority class ({maj.class_name})"] = [
            100 * maj.per_class_f1.get(c, math.nan) for c in classes
        ]
    fig = figures.bar_chart(
        classes,
        series,
        ylabel="test F1, %",
        ylim=(0.0, 100.5),
        title="Test F1 per class, mean over seeds",
    )
    ax = fig.axes[0]
    if len(classes) > 6:
        ax.tick_params(axis="x", labelrotation=45)
    # Beside the axes: below them it would collide with rotated class names.
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def allreduce_chart(
    sizes: Sequence[float], times_s: Sequence[float], host: Network, n_workers: int = 2
):
    grid = np.logspace(math.log10(min(sizes)), math.log10(max(sizes)), 60)
    lines = [
        {"label": "measured (median)", "x": sizes, "y": list(times_s), "style": "o"},
        {
            "label": f"ring model: alpha {host.latency_s * 1e6:.0f} us, "
            f"beta {host.bandwidth_Bps / 1e6:.0f} MB/s",
            "x": grid,
            "y": [ring_allreduce_time(s, n_workers, host) for s in grid],
            "style": "-",
        },
    ]
    fig = figures.line_chart(
        lines,
        xlabel="message size (bytes)",
        ylabel="time per all-reduce (s)",
        title=f"All-reduce on this machine ({n_workers} processes)",
        logy=True,
    )
    fig.axes[0].set_xscale("log")
    return fig


def confusion_chart(matrix, classes: Sequence[str], title: str):
    return figures.heatmap(matrix, classes, classes, title=title)


def _same_cores_point(model: str, entry: ModelAnalysis) -> list[dict]:
    """The same-cores centralised process (1 x N*t threads) on the verdict chart: its
    speedup over the 1 x t centralised runs (ratio of the mean epoch times), its accuracy."""
    sc, central = entry.same_cores, entry.central
    if sc is None or central is None:
        return []
    x = central.epoch_time_s.mean / sc.central.epoch_time_s.mean
    acc = sc.central.accuracy
    if not math.isfinite(x):
        return []
    return [
        {
            "label": f"{model}, centralised 1 x {sc.central_threads} threads",
            "x": {"speedup": x},
            "y": 100 * min(1.0, acc.mean),
            "ylo": 100 * max(0.0, acc.low),
            "yhi": 100 * min(1.0, acc.high),
        }
    ]


def verdict_chart(results: CompareResult):
    """The page's one picture: test accuracy (mean, 95 % CI) against the epoch-time speedup
    over centralised, a point per model and worker count (centralised at 1x), hollow
    markers of their own so coinciding points stay visible; a speedup not claimed is
    labelled so. The baselines: the flow-statistics XGBoost is a point when it ran, the
    majority class a line when it is near enough to the points to be read."""
    a = results.analysis
    points = []
    for model, entry in a.models.items():
        for n in sorted(entry.by_workers, key=int):
            g = entry.by_workers[n]
            acc = g.accuracy
            if int(n) == 1:
                x, note = 1.0, "centralised"
            else:
                v = entry.vs_central.get(n)
                if v is None or math.isnan(v.speedup.mean):
                    continue
                x = v.speedup.mean
                note = f"{n} workers" + ("" if v.claims.speedup_claimed else ", not claimed")
            points.append(
                {
                    "label": f"{model}, {note}",
                    "x": {"speedup": x},
                    "y": 100 * min(1.0, acc.mean),
                    "ylo": 100 * max(0.0, acc.low),
                    "yhi": 100 * min(1.0, acc.high),
                }
            )
        points += _same_cores_point(model, entry)
    hlines = []
    maj = a.baselines.majority
    lowest = min((p["ylo"] if math.isfinite(p["ylo"]) else p["y"] for p in points), default=0)
    if maj and 100 * maj.accuracy >= lowest - 15:
        hlines.append({"label": f"majority class ({maj.class_name})", "y": 100 * maj.accuracy})
    fig = figures.scatter_panels(
        [("speedup", "epoch-time speedup over centralised, x")],
        points,
        ylabel="test accuracy, %",
        hlines=hlines,
    )
    ax = fig.axes[0]
    ax.axvline(1.0, color="0.6", lw=0.8)
    return fig
