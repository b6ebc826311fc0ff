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
from flowsplit.report import html as H
from flowsplit.report import markdown as M
from flowsplit.report.tables import Column
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


@dataclass(frozen=True)
class _Page:
    """What the overview's page and its Markdown both show, worked out once."""

    content: OverviewContent
    data: DatasetFacts
    data_line: str
    """The dataset in one line: flows, classes and the split."""
    label: str
    """`` · quick settings (...)`` when a study ran with them, else empty."""
    dp_dir: Path | None
    sfl_dir: Path | None
    times: str
    """The run time of each step, in words."""


def _link_list(links: list[str]) -> str:
    """A list of already-rendered links (H.bullet_list would escape them)."""
    if not links:
        return H.paragraph("none")
    return "<ul>" + "".join(f"<li>{a}</li>" for a in links) + "</ul>"


LONG_TABLE = 8
"""Rows above which a table of the overview is folded in ``<details>``."""


def _folded(table: str, rows: int) -> str:
    return H.details(f"show the table ({rows} rows)", table) if rows > LONG_TABLE else table


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


def _markdown(page: _Page) -> str:
    """The overview as Markdown (``report.md``)."""
    content, label = page.content, page.label
    dp, sfl = content.data_parallel, content.split_learning
    dirs = (("data-parallel", page.dp_dir), ("split learning", page.sfl_dir))
    return M.document(
        M.heading("flowsplit: what to use on this capture", 1),
        *([M.paragraph(label.lstrip(" ·"))] if label else []),
        *([M.heading("Verdict"), M.paragraph(content.verdict)] if content.verdict else []),
        M.heading("Advice"),
        M.bullet_list(content.advice),
        M.paragraph(content.rules),
        M.heading("Data"),
        M.paragraph(page.data_line),
        M.heading("Centralised vs data-parallel"),
        M.table(dp, DP_COLUMNS) if dp else "not run\n",
        M.heading("Split federated learning"),
        M.table(sfl, SFL_COLUMNS) if sfl else "not run\n",
        M.heading("Details"),
        M.bullet_list([f"{t}: {p}" for t, p in dirs if p]),
        M.paragraph(f"Run time: {page.times}."),
    )


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
    times = ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
    label = _quick_label(content.quick)
    page = _Page(content, data, _data_line(data), label, dp_dir, sfl_dir, times)
    atomic_write_text(out / "report.html", _html(out, page))
    atomic_write_text(out / "report.md", _markdown(page))
    atomic_write_json(
        out / "report.json",
        {
            "verdict": content.verdict,
            "advice": content.advice,
            "data_parallel": content.data_parallel,
            "split_learning": content.split_learning,
            "timings_s": timings,
            "dataset": {
                "n_flows": page.data.n_flows,
                "classes": page.data.classes,
                "splits": page.data.splits,
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


def _html(out: Path, page: _Page) -> str:
    """The overview's page (``report.html`` in ``out``, its links relative to it)."""
    content, data, data_line = page.content, page.data, page.data_line
    dp, sfl, dp_dir, sfl_dir = (
        content.data_parallel,
        content.split_learning,
        page.dp_dir,
        page.sfl_dir,
    )
    rel = lambda p: os.path.relpath(p, out)  # noqa: E731 - a one-line helper
    links = []
    if dp_dir:
        links.append(H.link(rel(dp_dir / "report.html"), "data-parallel study (full report)"))
    if sfl_dir:
        links.append(H.link(rel(sfl_dir / "report.html"), "split-learning study (full report)"))
    opening = [H.paragraph(content.verdict, "verdict")] if content.verdict else []
    if content.picture is not None:
        opening.append(H.figure(content.picture, content.picture_caption))
    return H.page(
        "flowsplit: what to use on this capture",
        *([H.section("Verdict", *opening, anchor="verdict")] if opening else []),
        H.section(
            "Advice",
            H.bullet_list(content.advice),
            H.details("how the advice is chosen", H.paragraph(content.rules)),
            _link_list(links),
        ),
        H.section(
            "Centralised vs data-parallel",
            _folded(H.table(dp, DP_COLUMNS), len(dp)) if dp else H.paragraph("not run"),
        ),
        H.section(
            "Split federated learning",
            _folded(H.table(sfl, SFL_COLUMNS), len(sfl)) if sfl else H.paragraph("not run"),
        ),
        H.section(
            "Data and run time",
            H.details(
                "show the data and run time",
                H.paragraph(data_line),
                H.paragraph(f"Run time: {page.times}."),
            ),
        ),
        subtitle=f"dataset {data.flowsplit_version} · {data_line}{page.label}",
    )
