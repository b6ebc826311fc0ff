"""The data-parallel study's result, ``OUT/results.json``, as typed objects.

:func:`~flowsplit.experiments.dp.report.build_results` makes a
:class:`CompareResult`, :meth:`CompareResult.to_json` writes it and
:func:`read_compare_result` reads it back (one-line :class:`~flowsplit.errors.InputError`
on a file that is not one). Reports, advice and the overview take the object; no
other module looks a study field up by its name. So do the study's other files, each
with its reader here: ``compare.json`` (the settings, :func:`read_study`),
``status.json`` (:func:`read_status`), ``allreduce.json`` (:func:`read_allreduce`),
``workloads.json`` (:func:`read_workloads`) and each cell's ``compare_cell.json``
(:func:`read_cell_info`).

Conventions as in :mod:`flowsplit.result`: NaN is written ``null`` and read back
as NaN; worker counts are string keys (``"1"``, ``"2"``), as JSON objects have them.
Version 1 is the format of the studies written before the same-cores comparison (which
had no ``schema_version``); version 2 adds :class:`SameCoresComparison`. Fields added
later have defaults, so that older files still read (:data:`COMPARE_READS_VERSIONS`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from flowsplit.errors import InputError
from flowsplit.experiments.dp.scaling import Network, Prediction, Workload
from flowsplit.experiments.stats import Interval, McNemarResult, PairedComparison
from flowsplit.report.document import JsonDocument
from flowsplit.util import typed_from_dict

COMPARE_SCHEMA_VERSION = 2
COMPARE_READS_VERSIONS = (1,)
"""Older versions this flowsplit still reads (1: no same-cores comparison)."""
RESULTS_NAME = "results.json"
CENTRAL = "1"
"""The worker-count key of the centralised runs."""
NO_INTERVAL = Interval(math.nan, math.nan, math.nan, 0)


@dataclass
class GroupSummary:
    """One (model, workers) group over its seeds (:func:`analysis.summarise_group`)."""

    n_runs: int
    seeds: list[int]
    n_contended: int
    timing_contended: bool
    accuracy: Interval
    macro_f1: Interval
    peak_rss_mb: Interval
    epoch_time_s: Interval
    wall_time_s: Interval
    samples_per_s: Interval
    comm_share: Interval
    comm_time_s: Interval
    foreign_cpu_share_median: float
    oversubscribed: bool
    threads_per_worker: int
    cpu_obtained: Interval = field(default_factory=lambda: NO_INTERVAL)
    """CPU obtained per thread (studies made before it was measured: NaN)."""


@dataclass(frozen=True)
class SeedMcNemar(McNemarResult):
    """McNemar's test of one seed's centralised and data-parallel predictions."""

    seed: int = 0


@dataclass
class Claims:
    """What the reports may claim from one comparison (:func:`analysis.judge`)."""

    speedup_claimed: bool
    speedup_withheld: list[str]
    efficiency_above_1: bool
    above_majority: bool
    majority_rate: float
    accuracy_verdict: str
    macro_f1_verdict: str
    equivalent: bool


@dataclass
class CentralComparison:
    """Data-parallel runs on ``n_workers`` against the centralised runs, paired by seed."""

    n_workers: int
    accuracy: PairedComparison
    macro_f1: PairedComparison
    seeds: list[int]
    timing_contended: bool
    speedup: Interval
    efficiency: Interval
    oversubscribed: bool
    mcnemar: list[SeedMcNemar]
    mcnemar_significant: int
    foreign_cpu_share_median: float
    claims: Claims


@dataclass
class SameCoresComparison:
    """N data-parallel workers of t threads each against one centralised process of N x t
    threads, the same cores (what a user's ``flowsplit train`` on this machine uses),
    paired by seed: ``speedup`` is the centralised epoch time over the workers'."""

    n_workers: int
    threads_per_worker: int
    central_threads: int
    central: GroupSummary
    """The same-cores centralised runs (one process of ``central_threads`` threads)."""
    seeds: list[int]
    timing_contended: bool
    speedup: Interval
    oversubscribed: bool
    speedup_claimed: bool
    speedup_withheld: list[str]
    """Why no speedup is claimed (the codes of :func:`analysis.judge`; empty: claimed)."""


@dataclass
class ScalingPoint:
    """The scaling model against one measured worker count."""

    n_workers: int
    measured_s: float
    predicted_s: float
    rel_error: float
    in_fit: bool
    oversubscribed: bool
    measured_comm_share: float
    predicted_comm_share: float
    loo_error: float = math.nan
    """Error with this worker count left out of the fit (NaN: too few counts)."""


@dataclass
class ScalingFit:
    """The scaling model fitted to one model's runs (``error``: why there is none)."""

    model: dict[str, Any] = field(default_factory=dict)
    """The fitted :class:`~flowsplit.experiments.dp.scaling.ScalingModel` as a dict."""
    points: list[ScalingPoint] = field(default_factory=list)
    max_abs_error: float = math.nan
    max_abs_error_fit: float = math.nan
    max_abs_loo_error: float = math.nan
    speedup_cap_fixed_batch: float = math.nan
    cluster_batch: str = ""
    predictions: dict[str, list[Prediction]] = field(default_factory=dict)
    """``host`` (this machine) and one curve per network preset."""
    error: str | None = field(default=None, metadata={"omit_default": True})

    @property
    def fitted(self) -> bool:
        return self.error is None and bool(self.points)

    def param(self, name: str) -> float:
        """A fitted parameter of the scaling model (``per_step_s`` ...), NaN if absent."""
        value = self.model.get(name)
        return math.nan if value is None else float(value)


@dataclass
class ModelAnalysis:
    """Everything the study found for one model."""

    by_workers: dict[str, GroupSummary]
    vs_central: dict[str, CentralComparison]
    above_majority: bool = True
    """Centralised accuracy above the majority-class rate (studies before it: True)."""
    scaling: ScalingFit | None = None
    same_cores: SameCoresComparison | None = None
    """N workers against one process with the same N x t threads (schema 1: None)."""

    @property
    def central(self) -> GroupSummary | None:
        """The centralised runs (one worker), if the study has them."""
        return self.by_workers.get(CENTRAL)


@dataclass
class MajorityBaseline:
    """Always predicting the most frequent test class."""

    class_name: str = field(metadata={"key": "class"})
    accuracy: float
    macro_f1: float
    n_test: int
    per_class_f1: dict[str, float]


@dataclass
class FlowStatsBaseline:
    """XGBoost on per-flow statistics, centralised."""

    model: str
    accuracy: Interval
    macro_f1: Interval
    n_runs: int


@dataclass
class Baselines:
    majority: MajorityBaseline | None = None
    flow_stats: FlowStatsBaseline | None = None


@dataclass
class HookVsPlain:
    """A communication hook's runs against the plain all-reduce's, paired by seed."""

    accuracy: PairedComparison
    macro_f1: PairedComparison
    seeds: list[int]
    timing_contended: bool
    epoch_time_ratio: Interval


@dataclass
class HookGroup:
    """One hook's runs of a (model, workers) group."""

    n_runs: int
    seeds: list[int]
    timing_contended: bool
    n_contended: int
    epoch_time_s: Interval
    comm_bytes_per_epoch: Interval
    comm_time_per_epoch_s: Interval
    exposed_comm_per_epoch_s: Interval
    epochs_run: Interval
    accuracy: Interval
    macro_f1: Interval
    vs_plain: HookVsPlain | None = None


@dataclass
class Analysis:
    """The study's findings (:func:`analysis.analyse` plus the hooks)."""

    margin: float = 0.01
    alpha: float = 0.05
    cores: int = 0
    models: dict[str, ModelAnalysis] = field(default_factory=dict)
    baselines: Baselines = field(default_factory=Baselines)
    comm_hooks: dict[str, dict[str, dict[str, HookGroup]]] = field(default_factory=dict)
    """``model -> workers -> hook`` (empty for a study without hooks)."""


@dataclass
class DatasetInfo:
    path: str = ""
    n_train: int | None = None
    n_test: int | None = None
    classes: list[str] | None = None


@dataclass
class AllreduceBenchmark:
    """``OUT/allreduce.json``: all-reduce times by message size on this machine."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    """Table rows: ``bytes``, ``iterations``, ``time_s`` (median per call)."""
    n_workers: int = 2
    backend: str | None = None
    torch: str | None = None
    date: str | None = None
    detail: dict[str, Any] = field(default_factory=dict, metadata={"rest": True})

    @property
    def sizes(self) -> list[float]:
        return [float(r["bytes"]) for r in self.rows]

    @property
    def times_s(self) -> list[float]:
        return [float(r["time_s"]) for r in self.rows]


@dataclass
class AllreduceFit:
    """The all-reduce micro-benchmark and the network model fitted to it."""

    benchmark: AllreduceBenchmark | None = None
    fit: Network | None = None
    fit_max_rel_error: float = math.nan


@dataclass
class Cell:
    """One finished run of the study (a row of ``results.csv`` plus the lists): the
    fields the reports read by name, the rest (``CSV_COLUMNS``) kept as they are."""

    model: str = ""
    workers: int = 0
    seed: int = 0
    foreign_cpu_share: float | None = None
    """Share of the cores' time other processes took during the run (None: not measured)."""
    cpu_obtained: float | None = None
    contended: bool = False
    columns: dict[str, Any] = field(default_factory=dict, metadata={"rest": True})


@dataclass
class CrossSourceClass:
    """A class of the study's dataset on the other source (``compare --cross-source``)."""

    name: str
    train_flows: int | None
    """Flows of the study dataset's train split (None: the dataset is no longer readable)."""
    other_flows: int
    scored: bool
    """Whether the other source has enough flows of it (``min_flows``) to score it."""


@dataclass
class CrossSourceModel:
    """One model and worker count on the other source, means over its seeds."""

    model: str
    workers: int
    seeds: list[int]
    own_macro_f1: float
    """The runs' own test macro-F1 (every class)."""
    own_macro_f1_scored: float
    """Their own test F1, mean over the scored classes only: what the drop compares."""
    cross_macro_f1: float
    """Mean F1 over the scored classes on the other source."""
    macro_f1_drop: float
    own_accuracy: float
    cross_accuracy: float
    """Over the other source's flows of the scored classes."""
    accuracy_drop: float
    open_set_auroc: float = math.nan
    """AUROC of the model's top probability, the other source's flows of the classes it
    was trained on against those of classes it never saw (NaN: none of one kind)."""
    n_cross: int = 0


@dataclass
class CrossSource:
    """Every model of the study scored on another dataset (``compare --cross-source``)."""

    dataset: str
    min_flows: int
    classes: list[CrossSourceClass] = field(default_factory=list)
    models: list[CrossSourceModel] = field(default_factory=list)
    unknown_classes: dict[str, int] = field(default_factory=dict)
    """The other source's classes outside the training set: flows of each."""
    errors: dict[str, str] = field(default_factory=dict)
    """Runs not scored: cell name -> why."""
    note: str = ""

    @property
    def scored(self) -> list[str]:
        return [c.name for c in self.classes if c.scored]

    @property
    def n_unknown(self) -> int:
        return sum(self.unknown_classes.values())


@dataclass
class CompareResult(JsonDocument):
    """What ``flowsplit compare`` found (``OUT/results.json``)."""

    SCHEMA_VERSION: ClassVar[int] = COMPARE_SCHEMA_VERSION
    READS_VERSIONS: ClassVar[tuple[int, ...]] = COMPARE_READS_VERSIONS
    FILE_NAME: ClassVar[str] = RESULTS_NAME
    WHAT: ClassVar[str] = "a `flowsplit compare` result"

    config: dict[str, Any] = field(default_factory=dict)
    """The study's :class:`~flowsplit.experiments.dp.config.CompareConfig` as a dict."""
    analysis: Analysis = field(default_factory=Analysis)
    summary: list[str] = field(default_factory=list)
    """Plain-language findings, most important first."""
    flowsplit_version: str = ""
    generated: str = ""
    cores: int = 0
    host: str = ""
    dataset: DatasetInfo = field(default_factory=DatasetInfo)
    allreduce: AllreduceFit = field(default_factory=AllreduceFit)
    networks: dict[str, dict[str, Any]] = field(default_factory=dict)
    per_class_f1: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    """Mean test F1 per ``model -> workers -> class``."""
    failures: dict[str, str] = field(default_factory=dict)
    """Cells that failed: name -> error."""
    cells: list[Cell] = field(default_factory=list)
    """One row per finished run (the columns of ``results.csv`` plus the lists)."""
    env: dict[str, Any] = field(default_factory=dict)
    cross_source: CrossSource | None = field(default=None, metadata={"omit_default": True})
    """The runs on another dataset (``--cross-source``; None: not asked)."""
    schema_version: int = COMPARE_SCHEMA_VERSION

    # --- the study's settings the reports use -----------------------------------------
    @property
    def margin(self) -> float:
        return float(self.config.get("margin", self.analysis.margin))

    @property
    def quick(self) -> bool:
        return bool(self.config.get("quick"))

    @property
    def workers(self) -> list[int]:
        return [int(n) for n in self.config.get("workers", [])]

    @property
    def models(self) -> list[str]:
        return list(self.config.get("models", self.analysis.models))

    @property
    def threads(self) -> int:
        return int(self.config.get("threads", 1))

    @property
    def seeds(self) -> list[int]:
        return list(self.config.get("seeds", []))

    @property
    def alpha(self) -> float:
        return float(self.config.get("alpha", self.analysis.alpha))

    @property
    def max_epochs(self) -> int | None:
        return self.config.get("epochs")

    @property
    def max_rounds(self) -> int | None:
        return self.config.get("rounds")

    @property
    def versions(self) -> dict[str, str]:
        """Versions of the runs' software that the conditions table shows."""
        return {k: self.env[k] for k in ("python", "torch", "xgboost", "numpy") if k in self.env}

    @property
    def platform(self) -> str:
        return str(self.env.get("platform", "–"))

    @property
    def dataset_path(self) -> str:
        return str(self.config.get("dataset", self.dataset.path))

    def central_per_class_f1(self, model: str) -> dict[str, float] | None:
        """``model``'s centralised mean test F1 per class (None: no centralised run)."""
        return self.per_class_f1.get(model, {}).get(CENTRAL)

    @classmethod
    def prepare(cls, data: dict[str, Any]) -> dict[str, Any]:
        if "analysis" not in data:
            raise ValueError("no 'analysis': not the results of `flowsplit compare`")
        return data


def read_compare_result(path: str | Path) -> CompareResult:
    """The result of a ``flowsplit compare`` study (its folder or its ``results.json``);
    one-line :class:`~flowsplit.errors.InputError` when it is not one."""
    return CompareResult.read(path)


# --- the study's other files ---------------------------------------------------------
STUDY_NAME = "compare.json"
STATUS_NAME = "status.json"
ALLREDUCE_NAME = "allreduce.json"
WORKLOADS_NAME = "workloads.json"
CELL_INFO_NAME = "compare_cell.json"
"""Written beside a cell's ``metrics.json`` by ``flowsplit compare``."""


@dataclass
class StudySettings:
    """What a study plans and how it judges: ``compare.json``'s ``config`` (the
    :class:`~flowsplit.experiments.dp.config.CompareConfig` it ran with, which has the
    same attributes), the fields the cell plan and the report read."""

    models: list[str]
    workers: list[int]
    seeds: list[int]
    dataset: str = ""
    threads: int = 1
    comm_hooks: list[str] | None = None
    """None or empty: a study made before the hooks (the plain all-reduce only)."""
    same_cores_seeds: int | None = 0
    """Seeds of each model's same-cores centralised cell (None: every seed); a study made
    before those cells has none (0)."""
    margin: float = 0.01
    alpha: float = 0.05
    cross_source: str | None = None
    """The other dataset every run is also scored on (None: none)."""


def study_settings(config: Mapping[str, Any]) -> StudySettings:
    """A study's settings typed; :class:`ValueError` naming the first damaged one."""
    return typed_from_dict(StudySettings, dict(config), "config")


@dataclass
class StudyFile:
    """``OUT/compare.json``: the settings ``flowsplit compare`` ran the study with and
    the cores it planned it for."""

    config: dict[str, Any]
    """The settings as written (``results.json`` keeps them so)."""
    settings: StudySettings
    cores: int
    """Cores of the machine that planned the study (0: unknown)."""


def read_study(out: str | Path) -> StudyFile:
    """``OUT/compare.json``; one-line :class:`~flowsplit.errors.InputError` when it is
    missing, not JSON, or holds no study settings or damaged ones."""
    path = Path(out) / STUDY_NAME
    meta = _read_side_file(path)
    cfg = meta.get("config") if isinstance(meta, dict) else None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("models"), list):
        raise InputError(path, "holds no study settings ('config' with 'models')")
    try:
        return StudyFile(cfg, study_settings(cfg), int(meta.get("cores") or 0))
    except (TypeError, ValueError) as exc:  # a hand-edited compare.json
        raise InputError(path, f"its study settings are damaged ({exc})") from None


def changed_settings(
    out: str | Path, fingerprint: Mapping[str, Any], keys: Sequence[str], dataset: str
) -> dict[str, Any]:
    """The settings among ``keys`` whose value in the fingerprint ``OUT/compare.json``
    stored differs from ``fingerprint``: name -> the stored value (none without a
    stored study). A study written before datasets were named by digest stored the
    dataset's path: equal to ``dataset`` (the resolved path), that is no change."""
    path = Path(out) / STUDY_NAME
    if not path.is_file():
        return {}
    old = json.loads(path.read_text(encoding="utf-8")).get("fingerprint", {})
    changed = {k: old[k] for k in keys if k in old and old[k] != fingerprint[k]}
    if "dataset" in changed and changed["dataset"] == dataset:
        del changed["dataset"]
    return changed


@dataclass
class StudyStatus:
    """``OUT/status.json``: what the last ``flowsplit compare`` left of the cells."""

    n_cells: int = 0
    n_skipped: int = 0
    failures: dict[str, str] = field(default_factory=dict)
    """Cells that failed: name -> error."""


def read_status(out: str | Path) -> StudyStatus:
    """``OUT/status.json`` (none yet: nothing failed)."""
    return _read_typed(Path(out) / STATUS_NAME, StudyStatus, "a study's status")


def read_allreduce(out: str | Path) -> AllreduceBenchmark | None:
    """``OUT/allreduce.json`` (None: not measured)."""
    path = Path(out) / ALLREDUCE_NAME
    if not path.is_file():
        return None
    return _read_typed(path, AllreduceBenchmark, "an all-reduce benchmark")


def read_workloads(out: str | Path) -> dict[str, Workload]:
    """``OUT/workloads.json``: each model's workload (none stored: empty)."""
    path = Path(out) / WORKLOADS_NAME
    if not path.is_file():
        return {}
    try:
        return {m: Workload(**d) for m, d in _read_side_file(path).items()}
    except (AttributeError, TypeError) as exc:
        raise InputError(path, f"not the study's workloads ({exc})") from None


@dataclass
class CellContention:
    """CPU use around one cell's run (:class:`~flowsplit.experiments.dp.hostload.Contention`)."""

    foreign_share: float
    """Share of the cores' time other processes took."""
    wall_s: float = math.nan
    own_cpu_s: float = math.nan
    detail: dict[str, Any] = field(default_factory=dict, metadata={"rest": True})

    def cpu_obtained(self, processes: int, threads: int) -> float:
        """CPU the run's ``processes`` of ``threads`` threads got, per thread they wanted:
        1.0 = never waited for a core (NaN: not measured)."""
        wanted = self.wall_s * processes * threads
        return self.own_cpu_s / wanted if wanted > 0 else math.nan


@dataclass
class CellInfo:
    """``compare_cell.json`` beside a cell's ``metrics.json``: how busy the machine was
    while ``flowsplit compare`` ran the cell."""

    contention: CellContention
    cell: str = ""
    detail: dict[str, Any] = field(default_factory=dict, metadata={"rest": True})
    """When it finished, the load and quiet wait before it."""


def cell_info(data: Any) -> CellInfo:
    """A cell's info typed; :class:`ValueError` naming the first wrong field."""
    return typed_from_dict(CellInfo, data, CELL_INFO_NAME)


def read_cell_info(run_dir: str | Path) -> CellInfo | None:
    """A cell's ``compare_cell.json``; None when there is none or it is unreadable (a run
    not made by ``flowsplit compare``, or made before the meter existed)."""
    try:
        text = (Path(run_dir) / CELL_INFO_NAME).read_text(encoding="utf-8")
        return cell_info(json.loads(text))
    except (OSError, ValueError, TypeError):
        return None


def _read_side_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(path.parent, f"no {path.name}: not a `flowsplit compare` study") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not valid JSON ({exc})") from None


def _read_typed(path: Path, cls: type, what: str) -> Any:
    if not path.is_file():
        return cls()
    try:
        return typed_from_dict(cls, _read_side_file(path), path.name)
    except (TypeError, ValueError) as exc:
        raise InputError(path, f"not {what}: {exc}") from None
