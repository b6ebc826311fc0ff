"""Figures of the data-parallel study, built from ``results.json`` content.

Each function takes the analysed results (plain dicts) and returns a matplotlib
Figure; :mod:`flowsplit.report.html` embeds it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from flowsplit.experiments.scaling import Network, ring_allreduce_time
from flowsplit.report import figures


def _workers_of(models: Mapping) -> list[int]:
    return sorted({int(n) for e in models.values() for n in e["by_workers"]})


def _label(n: int, oversub: bool) -> str:
    return f"{n} worker{'s' if n > 1 else ''}" + (" (oversubscribed)" if oversub else "")


def _grouped(models: Mapping, key: str, scale: float = 1.0):
    """Series per worker count of ``key``'s mean and CI across models."""
    names = list(models)
    series, lows, highs = {}, {}, {}
    for n in _workers_of(models):
        groups = [models[m]["by_workers"].get(str(n)) for m in names]
        over = any(g and g["oversubscribed"] for g in groups)
        label = _label(n, over)
        nan = {"mean": math.nan, "low": math.nan, "high": math.nan}
        stats = [(g or {}).get(key, nan) for g in groups]
        series[label] = [scale * s["mean"] for s in stats]
        lows[label] = [scale * (s["mean"] if math.isnan(s["low"]) else s["low"]) for s in stats]
        highs[label] = [scale * (s["mean"] if math.isnan(s["high"]) else s["high"]) for s in stats]
    return names, series, lows, highs


def epoch_time_chart(models: Mapping):
    names, series, lows, highs = _grouped(models, "epoch_time_s")
    fig = figures.bar_chart(names, series, lows=lows, highs=highs,
                            ylabel="time per epoch (s), log scale",
                            title="Time per epoch (XGBoost: per round), mean and 95 % CI")  # fmt: skip
    fig.axes[0].set_yscale("log")
    return fig


def quality_chart(models: Mapping, key: str, title: str):
    names, series, lows, highs = _grouped(models, key, scale=100.0)
    vals = [v for s in lows.values() for v in s if not math.isnan(v)]
    bottom = max(0.0, math.floor(min(vals) / 5) * 5 - 5) if vals else 0.0
    return figures.bar_chart(names, series, lows=lows, highs=highs, ylabel="%",
                             title=title, ylim=(bottom, 100.5))  # fmt: skip


def comm_share_chart(models: Mapping):
    names, series, lows, highs = _grouped(models, "comm_share", scale=100.0)
    return figures.bar_chart(names, series, lows=lows, highs=highs,
                             ylabel="% of training time in all-reduce",
                             title="Communication share of step time (measured)")  # fmt: skip


def speedup_chart(model: str, entry: Mapping, network_names: Mapping[str, str]):
    """Measured speedup (with CI) against the model's predictions on each network."""
    lines = []
    scaling = entry.get("scaling") or {}
    for key, rows in (scaling.get("predictions") or {}).items():
        label = "model, this machine" if key == "host" else f"model, {network_names.get(key, key)}"
        xs = [r["n_workers"] for r in rows]
        ys = [r["speedup"] for r in rows]
        lines.append({"label": label, "x": xs, "y": ys, "style": "-" if key == "host" else "--"})
    pts = [(1, 1.0, 1.0, 1.0, False)]
    for n, v in entry["vs_central"].items():
        s = v["speedup"]
        pts.append((int(n), s["mean"], s["low"], s["high"], v["oversubscribed"]))
    pts.sort()
    ideal_x = [1, max(1024, max(p[0] for p in pts))]
    lines.append({"label": "ideal (N)", "x": ideal_x, "y": ideal_x, "style": ":", "color": "grey"})
    fig = figures.line_chart(lines, xlabel="workers", ylabel="speedup over 1 worker",
                             title=f"{model}: speedup, measured and predicted",
                             logx=True, logy=True)  # fmt: skip
    ax = fig.axes[0]
    for over in (False, True):
        sel = [p for p in pts if p[4] == over]
        if not sel:
            continue
        x = np.array([p[0] for p in sel], dtype=float)
        y = np.array([p[1] for p in sel])
        lo = np.nan_to_num(y - np.array([p[2] for p in sel]), nan=0.0).clip(min=0)
        hi = np.nan_to_num(np.array([p[3] for p in sel]) - y, nan=0.0).clip(min=0)
        ax.errorbar(x, y, yerr=[lo, hi], fmt="o", color="black", capsize=3,
                    mfc="white" if over else "black",
                    label="measured (oversubscribed)" if over else "measured")  # fmt: skip
    ax.legend(fontsize="x-small", loc="upper left")
    return fig


def allreduce_chart(rows: Sequence[Mapping], host: Network, n_workers: int = 2):
    sizes = [r["bytes"] for r in rows]
    grid = np.logspace(math.log10(min(sizes)), math.log10(max(sizes)), 60)
    lines = [
        {"label": "measured (median)", "x": sizes, "y": [r["time_s"] for r in rows], "style": "o"},
        {"label": f"ring model: alpha {host.latency_s * 1e6:.0f} us, "
                  f"beta {host.bandwidth_Bps / 1e6:.0f} MB/s",
         "x": grid, "y": [ring_allreduce_time(s, n_workers, host) for s in grid], "style": "-"},
    ]  # fmt: skip
    fig = figures.line_chart(lines, xlabel="message size (bytes)", ylabel="time per all-reduce (s)",
                             title=f"All-reduce on this machine ({n_workers} processes)",
                             logy=True)  # fmt: skip
    fig.axes[0].set_xscale("log")
    return fig


def confusion_chart(matrix, classes: Sequence[str], title: str):
    return figures.heatmap(matrix, classes, classes, title=title)
