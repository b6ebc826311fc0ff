"""Classification scores in plain NumPy/torch (no scikit-learn needed)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def confusion_matrix(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int) -> np.ndarray:
    """(n_classes, n_classes) counts, rows = true class, columns = predicted class."""
    y_true, y_pred = np.asarray(y_true, dtype=np.int64), np.asarray(y_pred, dtype=np.int64)
    flat = np.bincount(y_true * n_classes + y_pred, minlength=n_classes * n_classes)
    return flat.reshape(n_classes, n_classes)


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int) -> float:
    """Mean F1 over the classes present in ``y_true`` or ``y_pred`` (scikit-learn's macro)."""
    cm = confusion_matrix(y_true, y_pred, n_classes)
    tp = np.diag(cm).astype(np.float64)
    support, predicted = cm.sum(axis=1), cm.sum(axis=0)
    present = (support + predicted) > 0
    if not present.any():
        return 0.0
    denom = support + predicted
    f1 = np.divide(2 * tp, denom, out=np.zeros_like(tp), where=denom > 0)
    return float(f1[present].mean())


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    y_true = np.asarray(y_true)
    return float((y_true == np.asarray(y_pred)).mean()) if len(y_true) else 0.0


@torch.no_grad()
def evaluate_model(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, n_classes: int, batch_size: int = 512
) -> dict[str, float]:
    """Accuracy, macro-F1 and mean cross-entropy of ``model`` on ``(x, y)``."""
    was_training = model.training
    model.eval()
    preds, loss_sum = [], 0.0
    try:
        for start in range(0, len(y), batch_size):
            logits = model(x[start : start + batch_size])  # (B, n_classes)
            target = y[start : start + batch_size]
            loss_sum += float(F.cross_entropy(logits, target, reduction="sum"))
            preds.append(logits.argmax(dim=1))
    finally:
        model.train(was_training)
    if not preds:
        return {"accuracy": 0.0, "macro_f1": 0.0, "loss": float("nan")}
    y_pred = torch.cat(preds).numpy()
    y_true = y.numpy()
    return {
        "accuracy": accuracy(y_true, y_pred),
        "macro_f1": macro_f1(y_true, y_pred, n_classes),
        "loss": loss_sum / len(y_true),
    }
