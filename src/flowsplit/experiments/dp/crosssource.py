"""``flowsplit compare DATASET --cross-source OTHER``: every run also scored on another source.

A model is trained on one set of captures and used on another network. With
``--cross-source OTHER`` (another prepared dataset: other networks, hosts, times) the
study scores every finished run on OTHER as well, with the scoring of
:mod:`flowsplit.train.crosssource` that ``benchmarks/generalisation.py`` uses: over the
classes both datasets share with at least :data:`MIN_CROSS_FLOWS` flows in OTHER (a
shared class with fewer is listed, not scored: one flow's call is no finding), a flow of
one of them called any other class counting as an error. The drop compares the run's
own test F1 over the same classes. OTHER's flows of classes the model never saw give
the open-set AUROC of its confidence (top probability): known against unknown.

OTHER is checked before any run starts (:func:`check_other_dataset`: a dataset, not the
study's own, the views and shapes the models read, a class to score); each run's scores
are kept in ``RUN/cross-source.json`` (recomputed when OTHER or the run changes), and
:func:`cross_source_section` gathers them into the typed
:class:`~flowsplit.experiments.dp.result.CrossSource` of ``results.json``, which
:func:`other_source_sections` and :func:`summary_lines` render.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from flowsplit.data.store import Dataset, load_dataset
from flowsplit.errors import FlowsplitError, InputError
from flowsplit.experiments.dp.config import CompareConfig, dataset_digest
from flowsplit.experiments.dp.result import (
    CompareResult,
    CrossSource,
    CrossSourceClass,
    CrossSourceModel,
)
from flowsplit.outputs import atomic_write_json
from flowsplit.report.page import Block, Bullets, Column, Section, Table, Text, fmt_float
from flowsplit.train.crosssource import (
    MIN_CROSS_FLOWS,
    cross_source_scores,
    mean_f1,
    shared_classes,
)
from flowsplit.util import jsonable, typed_from_dict

SCORES_NAME = "cross-source.json"
"""Each run's scores on the other dataset, in its run directory."""


@dataclass
class RunCrossScores:
    """One run's scores on the other dataset (``RUN/cross-source.json``)."""

    dataset: str
    """The other dataset's path when scored."""
    digest: str
    """Its :func:`~flowsplit.experiments.dp.config.dataset_digest` (a changed dataset is
    scored again)."""
    min_flows: int
    flows_per_class: dict[str, int]
    """The model's classes: flows of each in the other dataset."""
    scored: list[str]
    macro_f1: float
    accuracy: float
    per_class_f1: dict[str, float | None]
    n_scored: int
    unknown_classes: dict[str, int] = field(default_factory=dict)
    open_set_auroc: float | None = None
    n_known: int = 0
    n_unknown: int = 0


# --- before the study: the other dataset checked -----------------------------------------
def _train_view(train_args: Sequence[str]) -> str | None:
    """``--view V`` (or ``--view=V``) among the study's ``--train-arg``s."""
    args = list(train_args)
    for i, a in enumerate(args):
        if a.startswith("--view="):
            return a.split("=", 1)[1]
        if a == "--view" and i + 1 < len(args):
            return args[i + 1]
    return None


def _view_of(model: str, dataset: Dataset, train_args: Sequence[str]) -> str:
    """The view the study's runs of ``model`` read (as ``flowsplit train`` picks it)."""
    from flowsplit.train.runs import resolve_view

    return resolve_view(SimpleNamespace(model=model, view=_train_view(train_args)), dataset)


def _same_dataset(a: str | Path, b: str | Path) -> bool:
    return Path(a).resolve() == Path(b).resolve() or dataset_digest(a) == dataset_digest(b)


def check_other_dataset(cfg: CompareConfig, dataset: Dataset) -> Dataset | None:
    """The dataset of ``--cross-source`` (None without it), checked before any run
    starts; one-line :class:`~flowsplit.errors.InputError` naming it when it is not a
    dataset, is the study's own, lacks a view (or its shape) the models read, or has no
    class of the study's with :data:`MIN_CROSS_FLOWS` flows."""
    from flowsplit.train.evaluation import ClassMapping

    if cfg.cross_source is None:
        return None
    where = cfg.cross_source
    try:
        other = load_dataset(where)
    except InputError as exc:
        raise InputError(where, f"--cross-source: {exc.problem}") from None
    if _same_dataset(where, cfg.dataset):
        raise InputError(where, "--cross-source is the study's own dataset; give another source")
    for model in cfg.models:
        view = _view_of(model, dataset, cfg.train_args)
        if not other.has_view(view):
            raise InputError(
                where,
                f"--cross-source has no {view} view, which {model} reads "
                f"(it has: {', '.join(other.views) or 'none'})",
            )
        if view != "stats" and other.view_shape(view) != dataset.view_shape(view):
            raise InputError(
                where,
                f"--cross-source: its {view} samples are {other.view_shape(view)}, the study's "
                f"{dataset.view_shape(view)}; prepare it with the same options as {cfg.dataset}",
            )
    y = ClassMapping(dataset.classes, other.classes).to_model_labels(other.labels)
    counts = {c: int((y == i).sum()) for i, c in enumerate(dataset.classes)}
    keep, too_few = shared_classes(dataset.classes, counts)
    if not keep:
        have = ", ".join(f"{c} {n}" for c, n in too_few.items() if n) or "none"
        raise InputError(
            where,
            f"--cross-source shares no class with {cfg.dataset} that has {MIN_CROSS_FLOWS} "
            f"flows or more there (shared: {have}); nothing could be scored",
        )
    return other


# --- each run scored ------------------------------------------------------------------------
def score_run(run: str | Path, other: Dataset, digest: str) -> RunCrossScores:
    """The model of ``run`` scored on every flow of ``other``."""
    from flowsplit.train.evaluation import ClassMapping, model_input
    from flowsplit.train.runs import load_trained_model, predict_proba

    model, doc = load_trained_model(run)
    info = doc["model"]
    classes = list(info["classes"])
    rows = np.arange(other.n_flows)
    x = model_input(other, info["view"], rows, doc["dataset"].get("view_columns"))
    proba = predict_proba(model, x)
    s = cross_source_scores(proba, other.labels, classes, other.classes)
    unseen = ClassMapping(classes, other.classes).unseen
    unknown = {c: int((other.labels == other.classes.index(c)).sum()) for c in unseen}
    return RunCrossScores(
        dataset=str(other.root),
        digest=digest,
        min_flows=MIN_CROSS_FLOWS,
        flows_per_class=s["flows_per_class"],
        scored=s["scored"],
        macro_f1=s["macro_f1"],
        accuracy=s["accuracy"],
        per_class_f1=s["per_class_f1"],
        n_scored=s["n_scored"],
        unknown_classes={c: n for c, n in unknown.items() if n},
        open_set_auroc=s["open_set"]["auroc_confidence"],
        n_known=s["open_set"]["n_known"],
        n_unknown=s["open_set"]["n_unknown"],
    )


def _stored(run: Path) -> RunCrossScores | None:
    path = run / SCORES_NAME
    metrics = run / "metrics.json"
    if not path.is_file() or (metrics.is_file() and metrics.stat().st_mtime > path.stat().st_mtime):
        return None  # none, or the run was trained again after
    try:
        return typed_from_dict(RunCrossScores, json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, TypeError, OSError):
        return None


def run_scores(run: Path, other: Dataset | None, digest: str) -> RunCrossScores:
    """The run's stored scores when they are of this dataset (or the dataset is no longer
    readable), else scored now and stored."""
    stored = _stored(run)
    if stored is not None and (other is None or stored.digest == digest):
        return stored
    if other is None:
        raise InputError(run, "not scored on the other dataset, which is no longer readable")
    scores = score_run(run, other, digest)
    atomic_write_json(run / SCORES_NAME, jsonable(scores))
    return scores


# --- the section of results.json ------------------------------------------------------------
def _nan(v: float | None) -> float:
    return math.nan if v is None else float(v)


def _mean(values: list[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return float(np.mean(vals)) if vals else math.nan


def cross_source_section(
    other_dataset: str | None, dataset: str, records: Sequence[Any]
) -> CrossSource | None:
    """Score every run of ``records`` (the study's plain runs, on ``dataset``) on
    ``other_dataset`` (the study's ``cross_source``); None when the study has none."""
    if not other_dataset:
        return None
    where, note = other_dataset, ""
    try:
        other, digest = load_dataset(where), dataset_digest(where)
    except InputError as exc:
        other, digest = None, ""
        note = f"{exc}: the scores are those stored with the runs"
    section = CrossSource(dataset=str(where), min_flows=MIN_CROSS_FLOWS, note=note)
    groups: dict[tuple[str, int], list[tuple[Any, RunCrossScores]]] = {}
    for r in records:
        name = f"{r.model}/w{r.workers}/seed{r.seed}"
        try:
            scores = run_scores(Path(r.run_dir), other, digest)
        except FlowsplitError as exc:
            section.errors[name] = str(exc)
            continue
        groups.setdefault((r.model, r.workers), []).append((r, scores))
    first = next((s for runs in groups.values() for _, s in runs), None)
    if first is not None:
        section.classes = _classes(dataset, first)
        section.unknown_classes = dict(
            sorted(first.unknown_classes.items(), key=lambda kv: (-kv[1], kv[0]))
        )
    section.models = [_model_row(m, n, runs) for (m, n), runs in groups.items()]
    return section


def _classes(dataset: str, scores: RunCrossScores) -> list[CrossSourceClass]:
    try:
        meta = load_dataset(dataset).meta
    except InputError:  # moved or deleted since: the flows trained on are not known
        meta = None
    train: dict[str, int] = {}
    if meta is not None:
        counts = meta.loc[meta["split"] == "train", "label_name"].astype(str).value_counts()
        train = {str(k): int(v) for k, v in counts.items()}
    return [
        CrossSourceClass(
            name=c,
            train_flows=None if meta is None else train.get(c, 0),
            other_flows=n,
            scored=c in scores.scored,
        )  # fmt: skip
        for c, n in scores.flows_per_class.items()
    ]


def _model_row(model: str, workers: int, runs) -> CrossSourceModel:
    own_f1 = [float(r.macro_f1) for r, _ in runs]
    own_scored = [mean_f1(r.per_class_f1, s.scored) for r, s in runs]
    cross_f1 = [s.macro_f1 for _, s in runs]
    own_acc = [float(r.accuracy) for r, _ in runs]
    cross_acc = [s.accuracy for _, s in runs]
    return CrossSourceModel(
        model=model,
        workers=workers,
        seeds=sorted(int(r.seed) for r, _ in runs),
        own_macro_f1=_mean(own_f1),
        own_macro_f1_scored=_mean(own_scored),
        cross_macro_f1=_mean(cross_f1),
        macro_f1_drop=_mean([a - b for a, b in zip(own_scored, cross_f1, strict=True)]),
        own_accuracy=_mean(own_acc),
        cross_accuracy=_mean(cross_acc),
        accuracy_drop=_mean([a - b for a, b in zip(own_acc, cross_acc, strict=True)]),
        open_set_auroc=_mean([_nan(s.open_set_auroc) for _, s in runs]),
        n_cross=runs[0][1].n_scored,
    )


# --- the report ---------------------------------------------------------------------------
CLASS_COLS = [
    Column("name", "class"),
    Column("train_flows", "flows trained on", align="right"),
    Column("other_flows", "flows on the other source", align="right"),
    Column("scored", "scored"),
]
MODEL_COLS = [
    Column("model", "model"),
    Column("workers", "workers", align="right"),
    Column("seeds", "seeds", align="right"),
    Column("own_macro_f1", "own macro-F1", fmt_float(3), "right"),
    Column("own_macro_f1_scored", "own, scored classes", fmt_float(3), "right"),
    Column("cross_macro_f1", "cross macro-F1", fmt_float(3), "right"),
    Column("macro_f1_drop", "drop", fmt_float(3), "right"),
    Column("own_accuracy", "own accuracy", fmt_float(3), "right"),
    Column("cross_accuracy", "cross accuracy", fmt_float(3), "right"),
    Column("accuracy_drop", "accuracy drop", fmt_float(3), "right"),
    Column("open_set_auroc", "open-set AUROC", fmt_float(3), "right"),
]


def class_rows(cs: CrossSource) -> list[dict[str, Any]]:
    return [
        {
            "name": c.name,
            "train_flows": c.train_flows,
            "other_flows": c.other_flows,
            "scored": "yes" if c.scored else f"no (under {cs.min_flows} flows)",
        }
        for c in cs.classes
    ]


def model_rows(cs: CrossSource) -> list[dict[str, Any]]:
    return [
        {
            "model": m.model,
            "workers": m.workers,
            "seeds": len(m.seeds),
            "own_macro_f1": m.own_macro_f1,
            "own_macro_f1_scored": m.own_macro_f1_scored,
            "cross_macro_f1": m.cross_macro_f1,
            "macro_f1_drop": m.macro_f1_drop,
            "own_accuracy": m.own_accuracy,
            "cross_accuracy": m.cross_accuracy,
            "accuracy_drop": m.accuracy_drop,
            "open_set_auroc": m.open_set_auroc,
        }
        for m in cs.models
    ]


def _intro(cs: CrossSource) -> str:
    n_cross = max((m.n_cross for m in cs.models), default=0)
    unknown = ", ".join(f"{c} {n}" for c, n in list(cs.unknown_classes.items())[:6])
    more = ", ..." if len(cs.unknown_classes) > 6 else ""
    text = (
        f"Every run also scored on {cs.dataset}: over the {_n(len(cs.scored), 'class')} both "
        f"share with {cs.min_flows} flows or more there ({', '.join(cs.scored) or 'none'}; "
        f"{n_cross} flows), a flow called any other class counting as an error. 'own, scored "
        "classes' is the runs' own test F1 over the same classes, which the drop compares. "
        "Open-set AUROC: the model's top probability on the other dataset's flows of the "
        f"classes it was trained on against the {cs.n_unknown} flows of the "
        f"{_n(len(cs.unknown_classes), 'class')} it never saw"
        + (f" ({unknown}{more})" if unknown else "")
        + ". Means over seeds."
    )
    return text + (f" Note: {cs.note}." if cs.note else "")


def _n(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "es" if noun.endswith("s") else "s")


def _problems(cs: CrossSource) -> list[str]:
    return [f"{k}: not scored ({v})" for k, v in cs.errors.items()]


def other_source_sections(result: CompareResult) -> list[Section]:
    """The report's "Other source" section (none without ``--cross-source``)."""
    cs = result.cross_source
    if cs is None:
        return []
    blocks: list[Block] = [Text(_intro(cs))]
    if cs.models:
        blocks.append(Table(model_rows(cs), MODEL_COLS, caption="Own test and other source"))
    blocks.append(Table(class_rows(cs), CLASS_COLS, caption="Class overlap"))
    if cs.errors:
        blocks.append(Bullets(_problems(cs), "warn"))
    return [Section("Other source", blocks, anchor="cross-source")]


def summary_lines(cs: CrossSource | None) -> list[str]:
    """One finding: each model's macro-F1 on the other source and its drop (centralised
    runs, else the fewest workers)."""
    if cs is None or not cs.models:
        return []
    best: dict[str, CrossSourceModel] = {}
    for m in cs.models:
        if m.model not in best or m.workers < best[m.model].workers:
            best[m.model] = m
    parts = [
        f"{m.model} {m.cross_macro_f1:.3f} (drop {100 * m.macro_f1_drop:+.1f} pt"
        + (f", open-set AUROC {m.open_set_auroc:.3f}" if not math.isnan(m.open_set_auroc) else "")
        + ")"
        for m in best.values()
    ]
    return [
        f"On another source ({cs.dataset}, {_n(len(cs.scored), 'shared class')} with "
        f"{cs.min_flows}+ flows), macro-F1: " + "; ".join(parts) + "."
    ]
