"""Classification metrics as plain functions over label arrays.

Macro-F1 follows scikit-learn's default: the mean F1 over classes that appear in
the true labels or in the predictions; a class with neither has no F1 (``nan``).
"""

from __future__ import annotations

import numpy as np


def confusion_matrix(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int) -> np.ndarray:
    """``(n_classes, n_classes)`` counts, rows = true class, columns = predicted class."""
    y_true = np.asarray(y_true, dtype=np.int64)
    y_pred = np.asarray(y_pred, dtype=np.int64)
    flat = y_true * n_classes + y_pred
    return np.bincount(flat, minlength=n_classes * n_classes).reshape(n_classes, n_classes)


def f1_per_class(cm: np.ndarray) -> np.ndarray:
    """F1 of each class from a confusion matrix; ``nan`` for a class never seen nor predicted."""
    tp = np.diag(cm).astype(np.float64)
    support = cm.sum(axis=1)
    predicted = cm.sum(axis=0)
    denom = support + predicted  # 2TP + FP + FN
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(denom > 0, 2 * tp / denom, np.nan)
    return f1


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int) -> float:
    """Mean F1 over the classes present in ``y_true`` or ``y_pred``."""
    f1 = f1_per_class(confusion_matrix(y_true, y_pred, n_classes))
    return float(np.nanmean(f1)) if np.isfinite(f1).any() else 0.0


def classification_summary(
    y_true: np.ndarray, y_pred: np.ndarray, classes: list[str]
) -> dict[str, object]:
    """Accuracy, macro-F1, per-class F1 (by name, ``None`` when undefined), confusion matrix."""
    n = len(classes)
    cm = confusion_matrix(y_true, y_pred, n)
    f1 = f1_per_class(cm)
    y_true = np.asarray(y_true)
    return {
        "accuracy": float((np.asarray(y_pred) == y_true).mean()) if len(y_true) else 0.0,
        "macro_f1": float(np.nanmean(f1)) if np.isfinite(f1).any() else 0.0,
        "per_class_f1": {
            c: (None if np.isnan(v) else float(v)) for c, v in zip(classes, f1, strict=True)
        },
        "confusion_matrix": cm.tolist(),
    }


def class_weights(y: np.ndarray, n_classes: int, mode: str) -> np.ndarray | None:
    """Per-class loss weights: ``balanced`` gives n / (C * n_c) (absent classes 0), ``none`` None."""
    if mode == "none":
        return None
    counts = np.bincount(y, minlength=n_classes).astype(np.float64)
    present = counts > 0
    w = np.zeros(n_classes)
    w[present] = len(y) / (present.sum() * counts[present])
    return w.astype(np.float32)
