"""One page over both studies: what to use, in plain words, with links to the details.

Writes ``OUT/report.html``, ``OUT/report.md`` and ``OUT/report.json`` from the content
:func:`flowsplit.experiments.advice.overview_content` computes (rows, advice and its
rules); this module only renders it, so it imports nothing from the studies.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowsplit.outputs import atomic_write_json, atomic_write_text
from flowsplit.report.page import (
    Block,
    Bullets,
    Column,
    Figure,
    Fold,
    Links,
    Page,
    Section,
    Table,
    Text,
)
from flowsplit.util import typed_from_dict


@dataclass
class OverviewContent:
    """What the overview shows (:func:`flowsplit.experiments.advice.overview_content`)."""

    advice: list[str]
    """Plain-language advice, most important first."""
    rules: str
    """The rules the advice follows, in one paragraph."""
    data_parallel: list[dict[str, Any]]
    """Table rows of the data-parallel study (columns: ``model``, ``accuracy_ci``, ...)."""
    split_learning: list[dict[str, Any]]
    """Table rows of the split-learning study (columns: ``scheme``, ``cuts``, ...)."""
    quick: list[str]
    """The studies run with ``--quick`` settings (their figures are not converged)."""
    verdict: str = ""
    """The page's one-line answer (what to use), shown first."""
    picture: Any = None
    """The page's one picture (a matplotlib Figure): accuracy against delay and bytes per
    split-learning scheme with the baselines marked (without that study: the data-parallel
    study's accuracy against speedup); None: no picture."""
    picture_caption: str = ""
    """What the picture shows, in words."""


@dataclass
class DatasetFacts:
    """What the overview says of the dataset, read (typed) from its manifest."""

    n_flows: int
    classes: list[str]
    splits: dict[str, int]
    """Flows per split (``train``, ``val``, ``test``)."""
    split_by: str | None = None
    flowsplit_version: str = ""
    """The flowsplit that prepared the dataset."""


LONG_TABLE = 8
"""Rows above which a table of the overview is folded in ``<details>``."""


def _table(rows: list[dict[str, Any]], columns: list[Column]) -> Block:
    """A study's table, folded when it is long; "not run" without rows."""
    if not rows:
        return Text("not run")
    table = Table(rows, columns)
    return Fold(f"show the table ({len(rows)} rows)", [table]) if len(rows) > LONG_TABLE else table


DP_COLUMNS = [
    Column("model", "model"),
    Column("accuracy_ci", "accuracy, centralised"),
    Column("macro_f1_ci", "macro-F1, centralised"),
    Column("workers", "workers", lambda v: "" if v is None else str(v), "right"),
    Column("speedup_ci", "speedup (epoch time)"),
    Column("diff_ci", "accuracy difference, data-parallel - centralised"),
    Column("verdict", "accuracy verdict"),
]
SFL_COLUMNS = [
    Column("scheme", "scheme"),
    Column("cuts", "cuts"),
    Column("accuracy_ci", "final accuracy"),
    Column("delay_ci", "total delay"),
    Column("bytes_ci", "bytes"),
    Column("n_seeds", "seeds", align="right"),
]


def write_overview(
    out: Path,
    *,
    manifest: dict[str, Any],
    dp_dir: Path | None,
    sfl_dir: Path | None,
    timings: dict[str, float],
    content: OverviewContent,
) -> Path:
    """Write OUT/report.{html,md,json} over the two studies; returns the HTML path.

    ``content``: what :func:`flowsplit.experiments.advice.overview_content` returns for
    ``dp_dir`` and ``sfl_dir`` (the directories are used for the links only).
    """
    out = Path(out)
    data = typed_from_dict(DatasetFacts, manifest, "manifest")  # refused before any write
    dirs = {"data-parallel": dp_dir, "split-learning": sfl_dir}
    report = _report_page(out, content, data, dirs, timings)
    atomic_write_text(out / "report.html", report.html())
    atomic_write_text(out / "report.md", report.markdown())
    atomic_write_json(
        out / "report.json",
        {
            "verdict": content.verdict,
            "advice": content.advice,
            "data_parallel": content.data_parallel,
            "split_learning": content.split_learning,
            "timings_s": timings,
            "dataset": {
                "n_flows": data.n_flows,
                "classes": data.classes,
                "splits": data.splits,
            },
        },
    )
    return out / "report.html"


def _data_line(data: DatasetFacts) -> str:
    return (
        f"{data.n_flows} flows, {len(data.classes)} classes "
        f"({', '.join(data.classes)}), split by {data.split_by}: "
        + ", ".join(f"{k} {v}" for k, v in data.splits.items())
    )


def _quick_label(quick: list[str]) -> str:
    if not quick:
        return ""
    return f" · quick settings ({', '.join(quick)}): short runs, not a converged study"


def _report_page(
    out: Path,
    content: OverviewContent,
    data: DatasetFacts,
    dirs: dict[str, Path | None],
    timings: dict[str, float],
) -> Page:
    """The overview's report (``report.html`` and ``report.md`` in ``out``, its links
    to the studies in ``dirs`` relative to it)."""
    links = [
        (os.path.relpath(d / "report.html", out), f"{name} study (full report)")
        for name, d in dirs.items()
        if d
    ]
    opening: list[Block] = [Text(content.verdict, "verdict")] if content.verdict else []
    if content.picture is not None:
        opening.append(Figure(content.picture, content.picture_caption))
    rules = Fold("how the advice is chosen", [Text(content.rules)])
    times = ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
    run_time = [Text(_data_line(data)), Text(f"Run time: {times}.")]
    sections = [
        *([Section("Verdict", opening, anchor="verdict")] if opening else []),
        Section("Advice", [Bullets(content.advice), rules, Links(links)]),
        Section("Centralised vs data-parallel", [_table(content.data_parallel, DP_COLUMNS)]),
        Section("Split federated learning", [_table(content.split_learning, SFL_COLUMNS)]),
        Section("Data and run time", [Fold("show the data and run time", run_time)]),
    ]
    label = _quick_label(content.quick)
    subtitle = f"dataset {data.flowsplit_version} · {_data_line(data)}{label}"
    return Page("flowsplit: what to use on this capture", sections, subtitle=subtitle)
