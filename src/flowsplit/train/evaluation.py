"""Scoring a trained model on another dataset: classes matched by name, not by index.

A held-out dataset need not have the training set's classes in the same order, nor
the same classes at all. Its flows of a class the model knows are scored (labels moved
into the model's index space); flows of a class the model never saw cannot be right
or wrong, so they are counted, named and left out of the scores, together with what the
model called them. The model's classes that the dataset lacks are named too: the model
may still predict them (those predictions count as errors).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flowsplit.data.store import Dataset
from flowsplit.errors import InputError
from flowsplit.train.metrics import classification_summary

SPLIT_CHOICES = ("train", "val", "test", "all")
"""``--split`` of ``evaluate``: one split, or every flow of the dataset."""


@dataclass(frozen=True)
class ClassMapping:
    """How a dataset's classes line up with a model's, by name."""

    model_classes: list[str]
    dataset_classes: list[str]

    @property
    def shared(self) -> list[str]:
        """Classes in both, in the model's order: the ones that are scored."""
        have = set(self.dataset_classes)
        return [c for c in self.model_classes if c in have]

    @property
    def unseen(self) -> list[str]:
        """Dataset classes the model was not trained on (counted, not scored)."""
        known = set(self.model_classes)
        return [c for c in self.dataset_classes if c not in known]

    @property
    def absent(self) -> list[str]:
        """Model classes the dataset has none of (the model may still predict them)."""
        have = set(self.dataset_classes)
        return [c for c in self.model_classes if c not in have]

    def to_model_labels(self, y: np.ndarray) -> np.ndarray:
        """Dataset labels as model labels; ``-1`` for a class the model does not know."""
        index = {c: i for i, c in enumerate(self.model_classes)}
        table = np.array([index.get(c, -1) for c in self.dataset_classes], dtype=np.int64)
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
