"""A trained run on new data: scored on another dataset (:func:`evaluate_run`), classes
matched by name, not by index; new captures classified (:func:`predict_captures`).

A held-out dataset need not have the training set's classes in the same order, nor
the same classes at all. Its flows of a class the model knows are scored (labels moved
into the model's index space); flows of a class the model never saw cannot be right
or wrong, so they are counted, named and left out of the scores, together with what the
model called them. The model's classes that the dataset lacks are named too: the model
may still predict them (those predictions count as errors).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from flowsplit.data.store import Dataset
from flowsplit.errors import ConfigError, InputError
from flowsplit.train.metrics import classification_summary

if TYPE_CHECKING:
    import pandas as pd

SPLIT_CHOICES = ("train", "val", "test", "all")
"""``--split`` of ``evaluate``: one split, or every flow of the dataset."""


def _key(name: str) -> str:
    """Class names are matched ignoring case (``DNS`` is ``dns``) and outer spaces."""
    return str(name).strip().casefold()


@dataclass(frozen=True)
class ClassMapping:
    """How a dataset's classes line up with a model's, by name (ignoring case)."""

    model_classes: list[str]
    dataset_classes: list[str]

    @property
    def shared(self) -> list[str]:
        """Classes in both, in the model's order (the model's spelling): the ones scored."""
        have = {_key(c) for c in self.dataset_classes}
        return [c for c in self.model_classes if _key(c) in have]

    @property
    def unseen(self) -> list[str]:
        """Dataset classes the model was not trained on (counted, not scored)."""
        known = {_key(c) for c in self.model_classes}
        return [c for c in self.dataset_classes if _key(c) not in known]

    @property
    def absent(self) -> list[str]:
        """Model classes the dataset has none of (the model may still predict them)."""
        have = {_key(c) for c in self.dataset_classes}
        return [c for c in self.model_classes if _key(c) not in have]

    def to_model_labels(self, y: np.ndarray) -> np.ndarray:
        """Dataset labels as model labels; ``-1`` for a class the model does not know."""
        index = {_key(c): i for i, c in enumerate(self.model_classes)}
        table = np.array([index.get(_key(c), -1) for c in self.dataset_classes], dtype=np.int64)
        return table[np.asarray(y, dtype=np.int64)]


def split_rows(ds: Dataset, split: str) -> np.ndarray:
    """Row indices of ``split`` (``all``: every flow, in store order)."""
    if split == "all":
        return np.arange(ds.n_flows)
    return ds.split_indices(split)


def model_input(ds: Dataset, view: str, rows: np.ndarray, trained_columns: list | None):
    """The rows of ``view`` as the model was trained on them.

    The ``stats`` view is a table: its columns are matched by name to the training
    dataset's (a dataset prepared by another flowsplit may order or extend them);
    a column the model needs and the dataset lacks is an error naming it.
    """
    x = np.asarray(ds.view(view)[rows])
    if view != "stats" or not trained_columns:
        return x
    have = list(ds.stats_frame().columns)
    missing = [c for c in trained_columns if c not in have]
    if missing:
        raise InputError(
            ds.root, f"its stats lack the column(s) {', '.join(map(str, missing))} the model reads"
        )
    if have == list(trained_columns):
        return x
    return x[:, [have.index(c) for c in trained_columns]]


def score_by_name(
    y_dataset: np.ndarray, y_pred: np.ndarray, mapping: ClassMapping
) -> dict[str, object]:
    """Scores on the shared classes, plus what was left out and why.

    ``y_dataset``: labels in the dataset's index space; ``y_pred``: the model's predictions
    (its index space). Returns accuracy, macro-F1, per-class F1 and the confusion matrix
    over the scored rows (in the model's classes), ``n_scored``, ``shared_classes``,
    ``unseen_classes`` (dataset class -> flows), ``unseen_predicted_as`` (dataset class ->
    model class -> flows) and ``absent_classes``.
    """
    y_model = mapping.to_model_labels(y_dataset)
    y_pred = np.asarray(y_pred, dtype=np.int64)
    scored = y_model >= 0
    summary = classification_summary(y_model[scored], y_pred[scored], mapping.model_classes)
    summary.update(per_class_scores(np.asarray(summary["confusion_matrix"]), mapping.model_classes))
    # Macro-F1 over the classes the dataset has: a model class it lacks cannot be found,
    # so averaging its F1 (0 once predicted) in would score the model on a class not
    # there. Its wrong predictions still count, as misses of the true classes.
    shared_f1 = [summary["per_class_f1"][c] for c in mapping.shared]
    shared_f1 = [v for v in shared_f1 if v is not None]
    if mapping.absent and shared_f1:
        summary["macro_f1_all_classes"] = summary["macro_f1"]
        summary["macro_f1"] = float(np.mean(shared_f1))
    unseen_counts: dict[str, int] = {}
    unseen_as: dict[str, dict[str, int]] = {}
    y_dataset = np.asarray(y_dataset, dtype=np.int64)
    for name in mapping.unseen:
        hit = y_dataset == mapping.dataset_classes.index(name)
        if not hit.any():
            continue
        unseen_counts[name] = int(hit.sum())
        preds, counts = np.unique(y_pred[hit], return_counts=True)
        unseen_as[name] = {
            mapping.model_classes[p]: int(k) for p, k in zip(preds, counts, strict=True)
        }
    return {
        **summary,
        "n_scored": int(scored.sum()),
        "shared_classes": mapping.shared,
        "unseen_classes": unseen_counts,
        "unseen_predicted_as": unseen_as,
        "absent_classes": mapping.absent,
    }


def per_class_scores(
    cm: np.ndarray, classes: list[str]
) -> dict[str, dict[str, float | int | None]]:
    """Precision, recall and support of each class from a confusion matrix (rows = true).

    ``None`` where undefined: precision of a class never predicted, recall of a class
    with no true samples (scikit-learn's ``classification_report`` prints 0 there).
    """
    cm = np.asarray(cm, dtype=np.int64)
    tp = np.diag(cm)
    support, predicted = cm.sum(axis=1), cm.sum(axis=0)

    def ratio(num: np.ndarray, den: np.ndarray) -> list[float | None]:
        return [None if d == 0 else float(n / d) for n, d in zip(num, den, strict=True)]

    return {
        "per_class_precision": dict(zip(classes, ratio(tp, predicted), strict=True)),
        "per_class_recall": dict(zip(classes, ratio(tp, support), strict=True)),
        "per_class_support": {c: int(s) for c, s in zip(classes, support, strict=True)},
    }


def format_report(summary: dict, classes: list[str], *, absent: list[str] = ()) -> str:
    """A text report in the style of scikit-learn's ``classification_report``: precision,
    recall, F1 and support per class, then the confusion matrix (rows = true class)."""
    width = max([len(c) for c in classes] + [12])

    def num(v: float | None) -> str:
        return f"{'-':>9}" if v is None else f"{v:>9.4f}"

    lines = [f"{'class':<{width}} {'precision':>9} {'recall':>9} {'F1':>9} {'support':>9}"]
    for c in classes:
        note = "  (not in the dataset)" if c in absent else ""
        lines.append(
            f"{c:<{width}} {num(summary['per_class_precision'][c])} "
            f"{num(summary['per_class_recall'][c])} {num(summary['per_class_f1'][c])} "
            f"{summary['per_class_support'][c]:>9}{note}"
        )
    lines.append("")
    lines.append("confusion matrix (rows: true class, columns: predicted class)")
    cm = summary["confusion_matrix"]
    cell = max(5, *(len(str(v)) for row in cm for v in row))
    short = [c[:cell] for c in classes]
    lines.append(" " * width + " " + " ".join(f"{s:>{cell}}" for s in short))
    for c, row in zip(classes, cm, strict=True):
        lines.append(f"{c:<{width}} " + " ".join(f"{v:>{cell}}" for v in row))
    return "\n".join(lines)


FIVE_TUPLE = ("proto", "ip_a", "port_a", "ip_b", "port_b")
"""The flow key columns of a capture dataset's ``meta.parquet``."""


def predictions_frame(
    ds: Dataset,
    rows: np.ndarray,
    proba: np.ndarray,
    model_classes: list[str],
):
    """One row per flow: ``flow_id``, ``source`` (capture file), the 5-tuple where the
    dataset has it, ``true`` and ``predicted`` class names and one ``p_CLASS`` column of
    probability per model class (a :class:`pandas.DataFrame`)."""
    import pandas as pd

    meta = ds.meta.iloc[np.asarray(rows, dtype=np.int64)].reset_index(drop=True)
    keep = [c for c in ("flow_id", "source", *FIVE_TUPLE) if c in meta.columns]
    table = meta[keep].copy()
    table["true"] = np.asarray(ds.classes, dtype=object)[ds.labels[rows]]
    table["predicted"] = np.asarray(model_classes, dtype=object)[np.asarray(proba).argmax(1)]
    probs = pd.DataFrame(
        np.round(np.asarray(proba, dtype=np.float64), 6),
        columns=[f"p_{c}" for c in model_classes],
    )
    return pd.concat([table, probs], axis=1)


@dataclass
class Evaluation:
    """What :func:`evaluate_run` found: the scores and each flow's prediction."""

    summary: dict
    """``run``, ``dataset``, ``split``, ``n``, ``classes`` and the scores of
    :func:`score_by_name` (what ``evaluate --json`` prints)."""
    predictions: object
    """One row per flow of the split (:func:`predictions_frame`, a DataFrame)."""
    model: object
    doc: dict
    """The run's ``config.json``."""
    dataset: Dataset
    mapping: ClassMapping
    x: np.ndarray
    """The model's input rows."""
    y: np.ndarray
    """The flows' labels in the dataset's classes."""

    @property
    def report(self) -> str:
        """The per-class table and confusion matrix as text (:func:`format_report`)."""
        return format_report(self.summary, self.mapping.model_classes, absent=self.mapping.absent)


def evaluate_run(run, dataset, split: str = "test") -> Evaluation:
    """Score the model of a ``train`` or ``sfl run`` directory on a dataset's ``split``.

    Classes are matched by name (ignoring case); flows of a class the model never saw
    are counted, not scored; macro-F1 is over the classes the dataset has. Raises
    :class:`~flowsplit.errors.InputError` (one line) when the model cannot read it.
    """
    from flowsplit.data.store import load_dataset
    from flowsplit.train.runs import load_trained_model, predict_proba

    model, doc = load_trained_model(run)
    info = doc["model"]
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
    view = info["view"]
    if not ds.has_view(view):
        raise InputError(ds.root, f"dataset has no view {view!r}, which the model reads")
    if view != "stats" and list(ds.view_shape(view)) != list(info["input_shape"]):
        raise InputError(
            ds.root,
            f"{view} samples are {ds.view_shape(view)}, "
            f"the model was trained on {tuple(info['input_shape'])}",
        )
    if split not in SPLIT_CHOICES:
        raise InputError(ds.root, f"no split {split!r}; choose one of {', '.join(SPLIT_CHOICES)}")
    mapping = ClassMapping(list(info["classes"]), list(ds.classes))
    if not mapping.shared:
        raise InputError(
            ds.root,
            f"none of its classes ({', '.join(ds.classes)}) is one the model was trained on "
            f"({', '.join(info['classes'])}), even ignoring case; evaluate on a dataset "
            "labelled with the same class names",
        )
    rows = split_rows(ds, split)
    if not len(rows):
        others = ", ".join(s for s in SPLIT_CHOICES if s != split)
        raise InputError(
            ds.root, f"its {split} split is empty: nothing to score (--split {others})"
        )
    y = ds.labels[rows]
    x = model_input(ds, view, rows, doc["dataset"].get("view_columns"))
    if not (mapping.to_model_labels(y) >= 0).any():
        raise InputError(
            ds.root,
            f"its {split} split has no flows of a class the model knows "
            f"({len(rows)} flows of {', '.join(mapping.unseen)})",
        )
    proba = predict_proba(model, x)
    scores = score_by_name(y, proba.argmax(1), mapping)
    summary = {
        "run": str(run),
        "dataset": str(getattr(dataset, "root", dataset)),
        "split": split,
        "n": int(len(rows)),
        "classes": mapping.model_classes,
        **scores,
    }
    table = predictions_frame(ds, rows, proba, mapping.model_classes)
    return Evaluation(summary, table, model, doc, ds, mapping, x, y)


UNKNOWN = "unknown"
"""The class :func:`predict_captures` gives a flow whose top probability is below its
``min_confidence``."""


def predict_captures(
    run, captures: Iterable[str | Path], min_confidence: float | None = None
) -> pd.DataFrame:
    """Classify the flows of ``captures`` with the model of a ``train`` or ``sfl run``
    directory: one row per flow (5-tuple, times, ``predicted``, ``confidence``), read
    with the capture options the run's dataset was prepared with. A flow whose top class
    probability is below ``min_confidence`` is :data:`UNKNOWN`. Raises one line
    (:class:`~flowsplit.errors.InputError`, :class:`~flowsplit.errors.ConfigError`)
    when the run, a capture or ``min_confidence`` will not do.
    """
    from flowsplit.data.prepare import extract_views
    from flowsplit.train.runs import load_trained_model, predict_proba

    if min_confidence is not None and not (
        isinstance(min_confidence, numbers.Real)
        and not isinstance(min_confidence, bool)
        and 0.0 <= min_confidence <= 1.0  # nan is not
    ):
        raise ConfigError(
            f"--min-confidence {min_confidence!r} is not a probability between 0 and 1"
        )
    captures = [Path(c) for c in captures]
    model, doc = load_trained_model(run)
    info = doc["model"]
    kind = doc["dataset"].get("kind", "capture")
    if kind != "capture":
        raise ConfigError(
            f"{run} was trained on a dataset of {kind} files, whose features are not "
            "computed from captures the same way; predict classifies captures with models "
            "trained on captures"
        )
    missing = [c for c in captures if not c.exists()]
    if missing:
        raise InputError(missing[0], "no such file")
    meta, views, stats = extract_views(
        captures, doc["dataset"].get("options"), Path(run) / "config.json"
    )
    if info["view"] == "stats":
        columns = doc["dataset"].get("view_columns") or list(stats.columns)
        x = stats[columns].to_numpy(dtype=np.float32)
    else:
        x = views[info["view"]]
        if list(x.shape[1:]) != list(info["input_shape"]):
            raise InputError(
                run,
                f"its model reads {info['view']} samples of {tuple(info['input_shape'])}; its "
                f"dataset's prepare options give {tuple(x.shape[1:])} (not a prepared capture set?)",
            )
    proba = predict_proba(model, x)
    table = meta.reset_index(drop=True).copy()
    names = np.asarray(info["classes"], dtype=object)[proba.argmax(1)]
    confidence = proba.max(1)
    if min_confidence is not None:
        # Below the threshold the model's best guess is not trusted: the flow is unknown.
        names = np.where(confidence >= min_confidence, names, UNKNOWN)
    table["predicted"] = names
    table["confidence"] = confidence.round(4)
    return table
