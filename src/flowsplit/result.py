"""The one result schema every run writes: ``RUN/metrics.json``.

``flowsplit train`` (centralised, DDP), the XGBoost engine, ``flowsplit sfl run`` (sim
and dist) and every comparison cell write a :class:`RunResult`; reports and comparisons
read it with :func:`read_result` and never special-case an engine. The module sits in
``train`` (which imports nothing of ``federated``) so that ``federated`` and
``experiments`` can both import it without a cycle.

Conventions:

- ``kind`` says which history a result carries: ``train`` results have the per-epoch
  lists (``epoch_times_s``, ``loss_per_epoch``, ``val_macro_f1_per_epoch``) and the
  training measurements; ``sfl`` results have ``rounds`` (one :class:`RoundRecord` per
  round) and the traffic ``totals``. Fields of the other kind are ``null``, never 0:
  a reader can tell "not measured" from "measured zero";
- times are seconds, sizes are bytes or MB (``1 MB = 2**20 bytes``);
- an *epoch* of XGBoost is one boosting round;
- lists indexed by epoch hold one entry per epoch run, resumed runs included;
- a float that was NaN (undefined) is written ``null`` and read back as NaN;
- per-class F1 of a class with neither test samples nor predictions is ``null``.
"""

from __future__ import annotations

import json
import math
import types
import typing
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

from flowsplit.errors import InputError
from flowsplit.inputs import read_json_input
from flowsplit.outputs import atomic_write_text
from flowsplit.util import jsonable, typed_from_dict

RESULT_SCHEMA_VERSION = 2
"""Version 2: ``kind`` and the SFL fields (``rounds``, ``totals``, ...) added;
version 1 (training only) is refused by :func:`read_result`."""

METRICS_NAME = "metrics.json"
KINDS = ("train", "sfl")


class JsonDocument:
    """Mixin of a dataclass that is a JSON document: a run's :class:`RunResult` and the
    studies' results (:class:`~flowsplit.experiments.dp.result.CompareResult`,
    :class:`~flowsplit.experiments.sfl.result.SFLCompareResult`,
    :class:`~flowsplit.privacy.result.PrivacyResult`).

    :meth:`to_json` writes strict JSON atomically, :meth:`read` reads a file (or a study
    folder) back, checked field by field (:func:`flowsplit.util.typed_from_dict`), and
    raises one :class:`~flowsplit.errors.InputError` line naming the file when it is not
    one. A document says what it is in its class line
    (``class PrivacyResult(JsonDocument, schema=1, file_name="privacy.json", what=...)``)
    or in the class variables below.
    """

    SCHEMA_VERSION: ClassVar[int] = 1
    """The version this flowsplit writes and reads (a file without one is version 1)."""
    READS_VERSIONS: ClassVar[tuple[int, ...]] = ()
    """Older versions still read: their files lack only fields that have defaults."""
    FILE_NAME: ClassVar[str]
    """The file's name in a study folder (``results.json``, ``privacy.json``)."""
    WHAT: ClassVar[str]
    """What a good file is, for the error line (``a `flowsplit compare` result``)."""
    ROOT: ClassVar[str] = "results"
    """How error messages name the document's top level."""
    INDENT: ClassVar[int] = 2
    """Indentation of the JSON text."""

    def __init_subclass__(
        cls,
        *,
        schema: int | None = None,
        file_name: str | None = None,
        what: str | None = None,
        root: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        given = {"SCHEMA_VERSION": schema, "FILE_NAME": file_name, "WHAT": what, "ROOT": root}
        for name, value in given.items():
            if value is not None:
                setattr(cls, name, value)

    def to_dict(self) -> dict[str, Any]:
        return jsonable(self)

    def to_json(self, path: str | Path | None = None) -> str:
        """The document as strict JSON text; also written (atomically) to ``path``."""
        text = json.dumps(self.to_dict(), indent=self.INDENT) + "\n"
        if path is not None:
            atomic_write_text(path, text)
        return text

    @classmethod
    def prepare(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Check what makes ``data`` this kind of document (:class:`ValueError` if it is
        not) and return it as the fields read it; subclasses override."""
        return data

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """Parse a document; :class:`ValueError` naming the first wrong field."""
        if isinstance(data, dict):
            version = data.get("schema_version", 1)
            if version != cls.SCHEMA_VERSION and version not in cls.READS_VERSIONS:
                readable = ", ".join(map(str, sorted({*cls.READS_VERSIONS, cls.SCHEMA_VERSION})))
                raise ValueError(
                    f"schema version {version!r}, this flowsplit reads version {readable}"
                )
            data = cls.prepare(data)
        return typed_from_dict(cls, data, cls.ROOT)

    @classmethod
    def read(cls, path: str | Path) -> Self:
        """The document of a study folder, or of the file ``path``.

        Raises :class:`~flowsplit.errors.InputError` (one line, naming the file) when
        the file is missing, not JSON, of another schema version or not this document.
        """
        path = Path(path)
        if path.is_dir():
            path = path / cls.FILE_NAME
        data = read_json_input(path, f"no such file (not {cls.WHAT})")
        try:
            return cls.from_dict(data)
        except (ValueError, TypeError) as exc:
            raise InputError(path, f"not {cls.WHAT}: {exc}") from None


@dataclass
class RoundScores:
    """What every record of a split-learning round holds: the global model's scores after
    it and its simulated delay (:class:`RoundRecord`; the study's own rows build on it)."""

    round: int
    """1-based round number."""
    accuracy: float
    """Accuracy of the global model after the round, on the evaluation split."""
    macro_f1: float
    """Macro-F1 of the global model after the round."""
    loss: float
    """Mean cross-entropy of the global model on the evaluation split."""
    delay_s: float
    """Simulated delay of the round (the slowest path through the topology)."""
    clock_s: float
    """Simulated time at the end of the round (sum of the delays so far)."""


@dataclass
class RoundRecord(RoundScores):
    """One round of a split federated run, as the server measured it."""

    wall_s: float
    """Wall time the round took in this run."""
    bytes_total: int
    """Payload bytes of every message of the round."""
    messages_total: int
    """Messages sent in the round."""
    bytes: dict[str, Any]
    """Bytes by hop, direction and message type (``bytes[hop][direction][type]``)."""
    detail: dict[str, Any] = field(default_factory=dict)
    """Everything else the scheme recorded (participants, faults, delay breakdown, ...),
    written flat beside the fields above."""

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "detail"}
        return {**self.detail, **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "round") -> RoundRecord:
        """Parse one round; raises :class:`ValueError` naming missing or mistyped fields."""
        if not isinstance(data, dict):
            raise ValueError(f"{where} is not an object")
        names = [f.name for f in fields(cls) if f.name != "detail"]
        values = _typed_values(cls, data, names, where)
        return cls(**values, detail={k: v for k, v in data.items() if k not in names})


@dataclass
class RunResult(JsonDocument):
    """What one run measured (rank 0, or the SFL server, writes it; one per run directory)."""

    SCHEMA_VERSION: ClassVar[int] = RESULT_SCHEMA_VERSION
    FILE_NAME: ClassVar[str] = METRICS_NAME
    WHAT: ClassVar[str] = "a flowsplit run result"
    ROOT: ClassVar[str] = "metrics"
    INDENT: ClassVar[int] = 1

    # --- every run --------------------------------------------------------------------
    model: str
    """Registry name of the model (``cnn``, ``lstm``, ``convlstm``, ``convgru``, ``xgboost``)."""
    view: str
    """Dataset view the model read (``bytes``, ``seq``, ``pkt_bytes``, ``stats``)."""
    engine: str
    """``centralised`` (one process), ``ddp`` (torch.distributed), ``xgboost-dask``,
    ``sfl-sim`` or ``sfl-dist``."""
    workers: int
    """Worker processes (DDP world size, Dask workers, SFL role processes; 1 in one process)."""
    threads_per_worker: int
    """Compute threads of each worker (torch / XGBoost ``nthread``)."""
    device: str
    """``cpu`` or ``cuda``."""
    backend: str | None
    """Process-group backend (``gloo``, ``nccl``), ``dask`` for XGBoost, ``sim`` or ``dist``
    for SFL, ``None`` when centralised."""
    seed: int
    """Seed of initialisation and data order (data order depends only on seed and epoch)."""
    wall_time_s: float
    """Wall time of the run in the workers (training: data loading, training, evaluation,
    writing; SFL: the sum of the rounds' wall times)."""
    accuracy: float
    """Test accuracy of the kept model (training: best-validation; SFL: after the last round)."""
    macro_f1: float
    """Macro-F1 of the kept model over the classes present in the labels or predictions."""
    classes: list[str]
    """Class names, index = label."""
    n_train: int
    """Training samples (SFL: over all clients' shards)."""
    n_test: int
    """Samples scored for ``accuracy`` (SFL: the evaluation split)."""
    config: dict[str, Any]
    """The resolved configuration (``TrainConfig`` or ``SFLConfig`` as a dict)."""
    env: dict[str, Any]
    """Versions, host, cores, time: where and with what this ran."""
    kind: str = "train"
    """``train`` (per-epoch history) or ``sfl`` (per-round history)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Engine-specific details (XGBoost round timings and how sync time was estimated, ...)."""
    schema_version: int = RESULT_SCHEMA_VERSION
    """Version of this schema."""

    # --- kind "train": per-epoch history and training measurements -------------------
    epoch_times_s: list[float] | None = None
    """Training time of each epoch (forward, backward, optimiser step, data, communication;
    validation excluded), as measured on rank 0; per boosting round for XGBoost."""
    loss_per_epoch: list[float] | None = None
    """Mean training loss of each epoch over all workers (XGBoost: train mlogloss per round)."""
    val_macro_f1_per_epoch: list[float] | None = None
    """Validation macro-F1 after each epoch (XGBoost: of the model after each round)."""
    best_epoch: int | None = None
    """0-based epoch whose weights were kept (best validation macro-F1; XGBoost: best round)."""
    epochs_run: int | None = None
    """Number of epochs (rounds) trained."""
    stopped_early: bool | None = None
    """Whether early stopping ended training before the epoch limit."""
    samples_per_s: float | None = None
    """Training samples processed per second over all workers: sum of samples / sum of epoch times."""
    comm_time_s: float | None = None
    """Time with a gradient all-reduce in flight (launch to completion, overlapping buckets
    counted once), rank 0, all epochs. XGBoost: estimated synchronisation time (see ``extra``)."""
    comm_bytes: int | None = None
    """Payload bytes handed to gradient all-reduce by rank 0 (sum of bucket sizes; wire bytes
    depend on the algorithm, e.g. ring: 2(N-1)/N times this). XGBoost: estimated histogram bytes."""
    exposed_comm_s: float | None = None
    """DDP: all-reduce time not hidden behind backward (per step, from the launch of the last
    bucket, when every gradient is computed, to the last completion), rank 0, all epochs;
    ``null`` where not measured."""
    comm_hook: str | None = None
    """DDP: how gradients were all-reduced (``none``, ``fp16``, ``bf16``, ``powersgd``)."""
    data_time_s: float | None = None
    """Time spent fetching batches during training (rank 0); XGBoost: building its matrices."""
    peak_rss_mb: list[float] | None = None
    """Peak resident memory of each worker process, by rank."""
    per_class_f1: dict[str, float | None] | None = None
    """Test F1 per class name."""
    confusion_matrix: list[list[int]] | None = None
    """Test confusion matrix, rows = true class, columns = predicted class (order of ``classes``)."""
    test_labels: list[int] | None = None
    """True label of each test sample, in dataset order."""
    test_predictions: list[int] | None = None
    """Predicted label of each test sample, same order (pairs runs for McNemar's test)."""
    test_flow_ids: list[str] | None = None
    """``flow_id`` of each test sample, same order (to check two runs saw the same test set)."""

    # --- kind "sfl": per-round history and traffic ----------------------------------
    scheme: str | None = None
    """SFL scheme (``sfl``, ``hsfl``, ...)."""
    cuts: list[int] | None = None
    """Cut layers (client|aggregator, aggregator|server)."""
    topology: str | None = None
    """Name of the topology."""
    n_clients: int | None = None
    """Clients in the topology."""
    n_aggregators: int | None = None
    """Aggregators in the topology."""
    rounds: list[RoundRecord] | None = None
    """One record per round, in order."""
    bytes_total: int | None = None
    """Payload bytes of the whole run (sum of the rounds' ``bytes_total``)."""
    delay_total_s: float | None = None
    """Simulated delay of the whole run (``clock_s`` of the last round)."""
    totals: dict[str, Any] | None = None
    """Sums over rounds: bytes by hop/direction/type, messages, delay, final scores."""

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem:
            raise ValueError(problem)

    def problem(self) -> str | None:
        """What makes this result inconsistent with its ``kind``, or None."""
        if self.kind not in KINDS:
            return f"kind {self.kind!r} is not one of {', '.join(KINDS)}"
        own = TRAIN_FIELDS if self.kind == "train" else SFL_FIELDS
        missing = [name for name in own if getattr(self, name) is None]
        if missing:
            return f"a {self.kind} result lacks {', '.join(missing)}"
        k = len(self.classes)
        cm = self.confusion_matrix
        if cm is not None and (len(cm) != k or any(len(row) != k for row in cm)):
            return f"its confusion_matrix is not {k} x {k} (one row and column per class)"
        labels, predictions = self.test_labels, self.test_predictions
        if labels is not None and predictions is not None and len(labels) != len(predictions):
            return f"{len(labels)} test_labels but {len(predictions)} test_predictions"
        return None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.rounds is not None:
            data["rounds"] = [r.to_dict() for r in self.rounds]
        return jsonable(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        """Parse a result; raises :class:`ValueError` saying what is missing or wrong."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if "schema_version" in data and data["schema_version"] != RESULT_SCHEMA_VERSION:
            raise ValueError(
                f"result schema version {data['schema_version']!r}, "
                f"this flowsplit reads version {RESULT_SCHEMA_VERSION}"
            )
        _typed_values(cls, data, COMMON_FIELDS, "metrics")  # names every missing field
        kind = data["kind"]
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
        required = [*COMMON_FIELDS, *(TRAIN_FIELDS if kind == "train" else SFL_FIELDS)]
        values = _typed_values(cls, data, required, "metrics")
        for name in (f.name for f in fields(cls)):
            if name not in values and name in data and data[name] is not None:
                values.update(_typed_values(cls, data, [name], "metrics"))
        if values.get("rounds") is not None:
            values["rounds"] = [
                RoundRecord.from_dict(r, f"metrics rounds[{i}]")
                for i, r in enumerate(values["rounds"])
            ]
        known = {f.name for f in fields(cls)}
        unknown = {k: v for k, v in data.items() if k not in known}
        result = cls(**values)
        if unknown:  # written by a newer flowsplit: keep, do not fail
            result.extra = {**result.extra, "unknown_fields": unknown}
        return result

    @classmethod
    def read(cls, path: str | Path) -> RunResult:
        """:func:`read_result` (its one-line errors say when a run has not finished)."""
        return read_result(path)

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> RunResult:
        """Parse JSON text, or read a ``metrics.json`` file (or a run directory)."""
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            return read_result(text_or_path)
        return cls.from_dict(json.loads(text))


def read_result(run_dir: str | Path) -> RunResult:
    """The result of a run directory (or of a ``metrics.json`` path).

    Raises :class:`~flowsplit.errors.InputError` (one line, naming the file) when the file
    is missing, not JSON, of another schema version, or lacks or mistypes a field.
    """
    path = Path(run_dir)
    if path.is_dir():
        path = path / METRICS_NAME
    data = read_json_input(path, "no such file (the run has not finished)")
    try:
        return RunResult.from_dict(data)
    except (ValueError, TypeError) as exc:
        raise InputError(path, f"not a flowsplit run result: {exc}") from None


COMMON_FIELDS = (
    "model",
    "view",
    "engine",
    "workers",
    "threads_per_worker",
    "device",
    "backend",
    "seed",
    "wall_time_s",
    "accuracy",
    "macro_f1",
    "classes",
    "n_train",
    "n_test",
    "config",
    "env",
    "kind",
    "extra",
    "schema_version",
)
TRAIN_FIELDS = (
    "epoch_times_s",
    "loss_per_epoch",
    "val_macro_f1_per_epoch",
    "best_epoch",
    "epochs_run",
    "stopped_early",
    "samples_per_s",
    "comm_time_s",
    "comm_bytes",
    "data_time_s",
    "peak_rss_mb",
    "per_class_f1",
    "confusion_matrix",
    "test_labels",
    "test_predictions",
    "test_flow_ids",
)
SFL_FIELDS = (
    "scheme",
    "cuts",
    "topology",
    "n_clients",
    "n_aggregators",
    "rounds",
    "bytes_total",
    "delay_total_s",
    "totals",
)
_NULLABLE = {"backend"}  # a field of every run that may legitimately be null


def _typed_values(cls: type, data: dict[str, Any], names, where: str) -> dict[str, Any]:
    """``{name: value}`` for ``names`` of dataclass ``cls``, checked against its annotations.

    A ``float`` written as ``null`` (NaN) reads back as NaN; a missing or mistyped field
    raises :class:`ValueError` naming every such field.
    """
    hints = _hints(cls)
    missing = [n for n in names if n not in data or (data[n] is None and _no_null(cls, n))]
    if missing:
        raise ValueError(f"{where} lack fields {', '.join(missing)}")
    out, wrong = {}, []
    for name in names:
        value = data[name]
        base = _base_type(hints[name])
        if value is None and base is float:
            value = math.nan
        elif value is not None and not _is_instance(value, base):
            wrong.append(f"{name} ({type(value).__name__}, not {base.__name__})")
        elif value is not None and (problem := _item_problem(value, hints[name])):
            wrong.append(f"{name}{problem}")
        out[name] = value
    if wrong:
        raise ValueError(f"{where} has mistyped {', '.join(wrong)}")
    return out


def _no_null(cls: type, name: str) -> bool:
    """Whether ``null`` means "missing" for this field (floats: NaN is allowed)."""
    return name not in _NULLABLE and _base_type(_hints(cls)[name]) is not float


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _base_type(hint: Any) -> type:
    """The runtime container of a hint: ``list[int] | None`` -> list, ``float`` -> float."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0]
    origin = typing.get_origin(hint)
    return origin if origin is not None else hint


def _item_problem(value: Any, hint: Any) -> str | None:
    """Where the items of a list or dict ``value`` do not fit ``hint``, as
    ``"[2] (str, not int)"``, or None (a float item may be null: NaN; dataclass
    items are parsed by their own reader)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    args = typing.get_args(hint)
    if typing.get_origin(hint) is list and args:
        items, item = enumerate(value), args[0]
    elif typing.get_origin(hint) is dict and len(args) == 2:
        items, item = value.items(), args[1]
    else:
        return None
    base = _base_type(item)
    if base is Any or is_dataclass(base):
        return None
    for key, v in items:
        at = f"[{key!r}]" if isinstance(key, str) else f"[{key}]"
        if v is None and base is float:
            continue
        if not _is_instance(v, base):
            return f"{at} ({type(v).__name__}, not {base.__name__})"
        if problem := _item_problem(v, item):
            return f"{at}{problem}"
    return None


def _is_instance(value: Any, base: type) -> bool:
    if base is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if base is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, base)
