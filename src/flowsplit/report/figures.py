"""Plot builders returning matplotlib Figures (Agg canvas, no pyplot global state).

Using :class:`matplotlib.figure.Figure` directly keeps plotting thread-safe and free
of any display backend, so reports render on headless machines and inside tests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def new_figure(width: float = 6.4, height: float = 3.6) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def bar_chart(
    categories: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    lows: Mapping[str, Sequence[float]] | None = None,
    highs: Mapping[str, Sequence[float]] | None = None,
    ylabel: str = "",
    title: str = "",
    ylim: tuple[float, float] | None = None,
) -> Figure:
    """Grouped bars, one group per category and one bar per series, optional CI whiskers."""
    fig = new_figure(max(6.4, 1.1 * len(categories) + 2), 3.8)
    ax = fig.add_subplot()
    n = max(1, len(series))
    width = 0.8 / n
    x = np.arange(len(categories))
    for i, (name, values) in enumerate(series.items()):
        vals = np.asarray(values, dtype=float)
        err = None
        if lows is not None and highs is not None and name in lows:
            lo = np.asarray(lows[name], dtype=float)
            hi = np.asarray(highs[name], dtype=float)
            err = np.nan_to_num(np.vstack([vals - lo, hi - vals]), nan=0.0).clip(min=0)
        ax.bar(x + (i - (n - 1) / 2) * width, vals, width, yerr=err, capsize=3, label=str(name))
    ax.set_xticks(x, [str(c) for c in categories])
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if ylim is not None:
        ax.set_ylim(*ylim)
    if len(series) > 1:
        ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    return fig


def line_chart(
    lines: Sequence[Mapping],
    *,
    xlabel: str = "",
    ylabel: str = "",
    title: str = "",
    logx: bool = False,
    logy: bool = False,
) -> Figure:
    """Lines and markers. Each item: ``label``, ``x``, ``y`` and optional ``style``
    (a matplotlib format such as ``"o"`` for measured points or ``"--"`` for predictions)
    and ``color``."""
    fig = new_figure(6.8, 4.0)
    ax = fig.add_subplot()
    for line in lines:
        kwargs = {"label": str(line.get("label", ""))}
        if line.get("color") is not None:
            kwargs["color"] = line["color"]
        ax.plot(line["x"], line["y"], line.get("style", "-o"), **kwargs)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    if any(line.get("label") for line in lines):
        ax.legend(fontsize="small")
    return fig


def heatmap(
    matrix,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    *,
    title: str = "",
    xlabel: str = "predicted",
    ylabel: str = "true",
    normalise_rows: bool = True,
) -> Figure:
    """A confusion-matrix style heatmap; rows normalised to fractions by default."""
    m = np.asarray(matrix, dtype=float)
    if normalise_rows:
        sums = m.sum(axis=1, keepdims=True)
        m = np.divide(m, sums, out=np.zeros_like(m), where=sums > 0)
    k = max(m.shape)
    side = min(9.0, max(3.6, 0.38 * k + 2.0))
    fig = new_figure(side, side * 0.9)
    ax = fig.add_subplot()
    im = ax.imshow(m, cmap="Blues", vmin=0, vmax=1 if normalise_rows else None)
    fig.colorbar(im, ax=ax, shrink=0.8)
    fs = "small" if k <= 12 else "x-small"
    ax.set_xticks(range(m.shape[1]), [str(c) for c in col_labels], rotation=90, fontsize=fs)
    ax.set_yticks(range(m.shape[0]), [str(r) for r in row_labels], fontsize=fs)
    if k <= 12:
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                if m[i, j] > 0 and not math.isnan(m[i, j]):
                    colour = "white" if m[i, j] > 0.6 else "black"
                    ax.text(
                        j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=7, color=colour
                    )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    return fig


MARKERS = "osD^vP*Xh<>p"
"""One marker per series in :func:`scatter_panels`, so coinciding points stay apart."""


def scatter_panels(
    panels: Sequence[tuple[str, str]],
    points: Sequence[Mapping],
    *,
    ylabel: str = "",
    hlines: Sequence[Mapping] = (),
    title: str = "",
) -> Figure:
    """Small side-by-side scatter panels sharing the y axis, one per ``(key, xlabel)``.

    Each point: ``label``, ``x`` (a mapping ``key -> value``; a panel whose key is
    missing or not finite skips it), ``y`` and optional ``ylo``/``yhi`` (whiskers).
    Every point gets its own hollow marker, each a little smaller than the one before,
    so two series at the same place both stay visible. ``hlines``: ``label``, ``y`` and
    optional ``style``, drawn across every panel (baselines)."""
    fig = new_figure(3.6 * len(panels) + 1.6, 3.4)
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (key, xlabel) in zip(axes, panels, strict=True):
        for i, p in enumerate(points):
            x = p["x"].get(key)
            if x is None or not math.isfinite(x):
                continue
            y = p["y"]
            lo, hi = p.get("ylo", math.nan), p.get("yhi", math.nan)
            err = None
            if math.isfinite(lo) and math.isfinite(hi):
                err = [[max(0.0, y - lo)], [max(0.0, hi - y)]]
            ax.errorbar(
                [x],
                [y],
                yerr=err,
                fmt=MARKERS[i % len(MARKERS)],
                markersize=max(4.0, 12.0 - 1.6 * i),
                markerfacecolor="none",
                markeredgewidth=1.8,
                capsize=3,
                color=f"C{i % 10}",
                label=str(p["label"]),
            )
        for j, h in enumerate(hlines):
            ax.axhline(
                h["y"],
                linestyle=h.get("style", "--"),
                color=f"0.{3 + 2 * j}",
                linewidth=1,
                label=str(h["label"]),
            )
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(ylabel)
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes[1:]:  # a series only one panel draws still needs its legend entry
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="outside right center", fontsize="small")
    if title:
        fig.suptitle(title)
    return fig
