"""The one result schema every training engine writes: ``RUN/metrics.json``.

Reports and comparisons read :class:`RunResult` and never special-case an engine.
Conventions:

- times are seconds, sizes are bytes or MB (``1 MB = 2**20 bytes``);
- an *epoch* of XGBoost is one boosting round;
- lists indexed by epoch hold one entry per epoch run, resumed runs included;
- per-class F1 of a class with neither test samples nor predictions is ``null``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from flowsplit.data.store import atomic_write_text

RESULT_SCHEMA_VERSION = 1


@dataclass
class RunResult:
    """What one training run measured (rank 0 writes it; one per run directory)."""

    model: str
    """Registry name of the model (``cnn``, ``lstm``, ``convlstm``, ``convgru``, ``xgboost``)."""
    view: str
    """Dataset view the model read (``bytes``, ``seq``, ``pkt_bytes``, ``stats``)."""
    engine: str
    """``centralised`` (one process), ``ddp`` (torch.distributed) or ``xgboost-dask``."""
    workers: int
    """Number of worker processes (DDP world size, or Dask workers; 1 when centralised)."""
    threads_per_worker: int
    """Compute threads of each worker (torch / XGBoost ``nthread``)."""
    device: str
    """``cpu`` or ``cuda``."""
    backend: str | None
    """Process-group backend (``gloo``, ``nccl``), ``dask`` for XGBoost, ``None`` when centralised."""
    seed: int
    """Seed of initialisation and data order (data order depends only on seed and epoch)."""
    wall_time_s: float
    """Wall time of the whole run in the workers: data loading, training, evaluation, writing."""
    epoch_times_s: list[float]
    """Training time of each epoch (forward, backward, optimiser step, data, communication;
    validation excluded), as measured on rank 0; per boosting round for XGBoost."""
    samples_per_s: float
    """Training samples processed per second over all workers: sum of samples / sum of epoch times."""
    comm_time_s: float
    """Time with a gradient all-reduce in flight (launch to completion, overlapping buckets
    counted once), rank 0, all epochs. XGBoost: estimated synchronisation time (see ``extra``)."""
    comm_bytes: int
    """Payload bytes handed to gradient all-reduce by rank 0 (sum of bucket sizes; wire bytes
    depend on the algorithm, e.g. ring: 2(N-1)/N times this). XGBoost: estimated histogram bytes."""
    data_time_s: float
    """Time spent fetching batches during training (rank 0); XGBoost: building its matrices."""
    peak_rss_mb: list[float]
    """Peak resident memory of each worker process, by rank."""
    accuracy: float
    """Test accuracy (of the best-validation model)."""
    macro_f1: float
    """Test macro-F1 over the classes present in the test labels or predictions."""
    per_class_f1: dict[str, float | None]
    """Test F1 per class name."""
    confusion_matrix: list[list[int]]
    """Test confusion matrix, rows = true class, columns = predicted class (order of ``classes``)."""
    classes: list[str]
    """Class names, index = label."""
    loss_per_epoch: list[float]
    """Mean training loss of each epoch over all workers (XGBoost: train mlogloss per round)."""
    val_macro_f1_per_epoch: list[float]
    """Validation macro-F1 after each epoch (XGBoost: of the model after each round)."""
    best_epoch: int
    """0-based epoch whose weights were kept (best validation macro-F1; XGBoost: best round)."""
    epochs_run: int
    """Number of epochs (rounds) trained."""
    stopped_early: bool
    """Whether early stopping ended training before the epoch limit."""
    n_train: int
    """Training samples."""
    n_test: int
    """Test samples."""
    test_labels: list[int]
    """True label of each test sample, in dataset order."""
    test_predictions: list[int]
    """Predicted label of each test sample, same order (pairs runs for McNemar's test)."""
    test_flow_ids: list[str]
    """``flow_id`` of each test sample, same order (to check two runs saw the same test set)."""
    config: dict[str, Any]
    """The resolved training configuration."""
    env: dict[str, Any]
    """Versions, host, cores, time: where and with what this ran."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Engine-specific details (XGBoost round timings and how sync time was estimated, ...)."""
    schema_version: int = RESULT_SCHEMA_VERSION
    """Version of this schema."""

    def to_dict(self) -> dict[str, Any]:
        return _clean(asdict(self))

    def to_json(self, path: str | Path | None = None) -> str:
        """The result as JSON text; also written (atomically) to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=1) + "\n"
        if path is not None:
            atomic_write_text(path, text)
        return text

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        names = {f.name for f in fields(cls)}
        missing = [f.name for f in fields(cls) if f.name not in data and f.name not in _OPTIONAL]
        if missing:
            raise ValueError(f"metrics lack fields {', '.join(missing)}")
        known = {k: v for k, v in data.items() if k in names}
        unknown = {k: v for k, v in data.items() if k not in names}
        result = cls(**known)
        if unknown:  # written by a newer flowsplit: keep, do not fail
            result.extra = {**result.extra, "unknown_fields": unknown}
        return result

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> RunResult:
        """Parse JSON text, or read a ``metrics.json`` file (or a run directory)."""
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            path = Path(text_or_path)
            if path.is_dir():
                path = path / "metrics.json"
            text = path.read_text(encoding="utf-8")
        return cls.from_dict(json.loads(text))


_OPTIONAL = {"extra", "schema_version"}


def _clean(obj: Any) -> Any:
    """Make a value strict-JSON safe: NaN/inf -> None, numpy scalars -> Python."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalar
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
