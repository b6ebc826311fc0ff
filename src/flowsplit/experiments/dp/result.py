"""The data-parallel study's result, ``OUT/results.json``, as typed objects.

:func:`~flowsplit.experiments.dp.report.build_results` makes a
:class:`CompareResult`, :meth:`CompareResult.to_json` writes it and
:func:`read_compare_result` reads it back (one-line :class:`~flowsplit.errors.InputError`
on a file that is not one). Reports, advice and the overview take the object; no
other module looks a study field up by its name.

Conventions as in :mod:`flowsplit.result`: NaN is written ``null`` and read back
as NaN; worker counts are string keys (``"1"``, ``"2"``), as JSON objects have them.
Version 1 is the format of the studies written before the same-cores comparison (which
had no ``schema_version``); version 2 adds :class:`SameCoresComparison`. Fields added
later have defaults, so that older files still read (:data:`COMPARE_READS_VERSIONS`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from flowsplit.experiments.dp.scaling import Network
from flowsplit.experiments.stats import Interval, McNemarResult, PairedComparison
from flowsplit.report.document import JsonDocument

COMPARE_SCHEMA_VERSION = 2
COMPARE_READS_VERSIONS = (1,)
"""Older versions this flowsplit still reads (1: no same-cores comparison)."""
RESULTS_NAME = "results.json"
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
class Prediction:
    """Predicted epoch time on one network and worker count (``ScalingModel.curve``)."""

    n_workers: int
    epoch_time_s: float
    compute_s: float
    comm_s: float
    comm_share: float
    comm_bytes: float
    speedup: float
    efficiency: float
    network: str


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

    @classmethod
    def prepare(cls, data: dict[str, Any]) -> dict[str, Any]:
        if "analysis" not in data:
            raise ValueError("no 'analysis': not the results of `flowsplit compare`")
        return data


def read_compare_result(path: str | Path) -> CompareResult:
    """The result of a ``flowsplit compare`` study (its folder or its ``results.json``);
    one-line :class:`~flowsplit.errors.InputError` when it is not one."""
    return CompareResult.read(path)
