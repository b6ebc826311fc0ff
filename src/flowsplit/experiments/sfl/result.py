"""The split-learning study's result, ``OUT/results.json``, as typed objects.

:func:`~flowsplit.experiments.sfl.analysis.summarise` makes an
:class:`SFLCompareResult`, :meth:`SFLCompareResult.to_json` writes it and
:func:`read_sfl_compare_result` reads it back (one-line
:class:`~flowsplit.errors.InputError` on a file that is not one). Reports, advice and
the overview take the object; no other module looks a study field up by its name.

NaN is written ``null`` and read back as NaN. Version 1 is the format of every study
written so far (which had no ``schema_version``); fields added later have defaults so
that older files still read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from flowsplit.experiments.stats import Interval
from flowsplit.report.document import JsonDocument
from flowsplit.result import RoundScores
from flowsplit.util import jsonable, typed_from_dict

SFL_COMPARE_SCHEMA_VERSION = 1
RESULTS_NAME = "results.json"


@dataclass
class RoundRow(RoundScores):
    """One round of a run, as the study keeps it: the scores and delay every round
    record holds, and its bytes."""

    bytes_total: float

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> RoundRow:
        """The study's columns of one round of the engine's history."""
        return cls(**{f.name: record[f.name] for f in fields(cls)})


@dataclass
class RunTotals:
    """Sums over a run's rounds (``SFLResult.totals``); the sums the study does not read
    stay in ``detail`` (written flat beside these)."""

    bytes_total: float
    delay_total_s: float
    bytes_by_hop: dict[str, float]
    bytes_by_type: dict[str, float]
    bytes: dict[str, dict[str, dict[str, float]]]
    """``hop -> direction -> message type -> bytes``."""
    detail: dict[str, Any] = field(default_factory=dict, metadata={"rest": True})

    @classmethod
    def from_totals(cls, totals: dict[str, Any]) -> RunTotals:
        return typed_from_dict(cls, jsonable(totals, strict=False), "totals")


@dataclass
class SFLRun:
    """One simulated run of a scheme and seed (``sfl_compare._run_one``)."""

    scheme: str
    seed: int
    cuts: list[int]
    history: list[RoundRow]
    totals: RunTotals
    val_accuracy: float = math.nan
    engine_scheme: str = ""
    wall_s: float = math.nan
    predicted_delay_s: float = math.nan
    predicted_bytes: float = math.nan
    predicted_delay_per_round_s: list[float] | None = None
    predicted_bytes_per_round: list[float] | None = None
    moves: int = 0

    @property
    def final(self) -> RoundRow:
        return self.history[-1]

    @property
    def delay_total_s(self) -> float:
        return self.totals.delay_total_s

    @property
    def bytes_total(self) -> float:
        return self.totals.bytes_total


@dataclass
class SchemePerSeed:
    final_accuracy: list[float]
    final_macro_f1: list[float]
    delay_total_s: list[float]
    delay_to_target_s: list[float]
    bytes_total: list[float]


@dataclass
class Curve:
    """Mean over seeds after each round."""

    round: list[int]
    accuracy: list[float]
    macro_f1: list[float]
    clock_s: list[float]
    delay_s: list[float]


@dataclass
class SchemeSummary:
    """One scheme over its seeds."""

    seeds: list[int]
    cuts: list[list[int]]
    final_accuracy: Interval
    final_macro_f1: Interval
    delay_total_s: Interval
    delay_per_round_s: Interval
    delay_to_target_s: Interval
    reached_target: int
    bytes_total: Interval
    bytes_by_hop: dict[str, float]
    bytes_by_type: dict[str, float]
    bytes_by_hop_direction_type: dict[str, dict[str, dict[str, float]]]
    wall_s: float
    per_seed: SchemePerSeed
    curve: Curve


@dataclass
class PairedTests:
    t_p: float
    wilcoxon_p: float
    note: str = ""


@dataclass
class Versus:
    """A scheme against a reference, paired by seed: differences and ratios."""

    n_seeds: int
    accuracy_diff: Interval
    accuracy_test: PairedTests
    macro_f1_diff: Interval
    delay_ratio: Interval
    bytes_ratio: Interval
    delay_to_target_ratio: Interval


@dataclass
class ReplanRow:
    """A re-planned scheme beside its static twin, paired by seed."""

    scheme: str
    replanned: str
    n_seeds: int
    static_delay_total_s: Interval
    replanned_delay_total_s: Interval
    delay_diff_s: Interval
    delay_ratio: Interval
    accuracy_diff: Interval
    moves_per_run: float
    per_seed: dict[str, list[float]]


@dataclass
class AblationRow:
    """One part of the planner's gain over HSFL."""

    part: str
    scheme: str
    against: str
    n_seeds: int
    accuracy_diff: Interval
    delay_ratio: Interval
    bytes_ratio: Interval


@dataclass
class BaselineRun:
    """One seed of a baseline that splits nothing."""

    baseline: str
    seed: int
    accuracy: float
    macro_f1: float
    bytes: float
    detail: dict[str, Any] = field(default_factory=dict, metadata={"rest": True})
    """Everything else the baseline recorded."""

    @classmethod
    def from_record(cls, baseline: str, seed: int, record: dict[str, Any]) -> BaselineRun:
        """A baseline runner's record (accuracy, macro-F1, bytes, ...) of one seed."""
        data = {"baseline": baseline, "seed": seed, **record}
        return typed_from_dict(cls, jsonable(data, strict=False), "baseline")


@dataclass
class BaselineSummary:
    final_accuracy: Interval
    final_macro_f1: Interval
    bytes_total: Interval
    per_seed: list[BaselineRun]
    scheme_minus_baseline: dict[str, Interval]

    def scheme_minus(self, scheme: str) -> Interval | None:
        """``scheme``'s accuracy minus the baseline's, paired by seed (None: not run)."""
        return self.scheme_minus_baseline.get(scheme)


@dataclass
class CutRow:
    cuts: list[int]
    val_accuracy: float
    test_accuracy: float
    n_seeds: int


@dataclass
class BestFixed:
    """Every legal cut pair's mean accuracies and the pair ``best-fixed`` ran."""

    chosen: list[int]
    per_cut: list[CutRow]
    rule: str = ""


@dataclass
class PredictionCheck:
    max_rel_delay_error: float = math.nan
    max_rel_bytes_error: float = math.nan


@dataclass
class TraceSummary:
    events: int
    by_kind: dict[str, int]
    rounds_changed: list[int]


@dataclass
class TopologyInfo:
    name: str = ""
    description: str = ""
    n_clients: int = 0
    n_aggregators: int = 0
    seed: int | None = None


@dataclass
class ProfileInfo:
    model: str = ""
    blocks: list[str] = field(default_factory=list)
    legal_cuts: list[list[int]] = field(default_factory=list)


@dataclass
class DatasetInfo:
    path: str = ""
    n_train: int = 0
    n_val: int = 0
    n_test: int = 0
    classes: list[str] = field(default_factory=list)


@dataclass
class Paper:
    """Margins over HSFL the HSFL paper reports."""

    accuracy_pts: float = 3.0
    delay_change: float = -0.20
    bytes_change: float = -0.50


@dataclass
class PilotCost:
    n_pilots: int = 0
    wall_s: float = math.nan
    delay_s: float = math.nan
    bytes: float = math.nan
    detail: dict[str, Any] = field(default_factory=dict, metadata={"rest": True})


@dataclass
class Ridge:
    alpha: float = math.nan
    loo_rmse: float = math.nan
    spread_kept: float | None = None
    flattened: bool = False
    detail: dict[str, Any] = field(default_factory=dict, metadata={"rest": True})


@dataclass
class Surrogate:
    """The pilots and the accuracy surrogate fitted on them."""

    cost: PilotCost = field(default_factory=PilotCost)
    pilots: list[dict[str, Any]] = field(default_factory=list)
    table: list[dict[str, Any]] = field(default_factory=list)
    """One row per cut pair: ``cuts``, pilot and predicted accuracy, loss, source."""
    eval_split: str = ""
    pilot_steps: int = 0
    target_steps: float | None = None
    backtest: dict[str, Any] | None = None
    """``method``, ``mae``, ``spearman``, ``n`` (and ``reason`` when not extrapolated)."""
    noise: float = math.nan
    spread: float = math.nan
    separated: bool = False
    ridge: Ridge | None = None
    detail: dict[str, Any] = field(default_factory=dict, metadata={"rest": True})
    """Everything else the planner recorded about its pilots."""

    @classmethod
    def from_study(cls, surrogate: dict[str, Any]) -> Surrogate | None:
        """The planner's record of its pilots and surrogate (None: no pilots ran)."""
        if not surrogate:
            return None
        return typed_from_dict(cls, jsonable(surrogate, strict=False), "surrogate")

    def table_rows(self) -> list[dict[str, Any]]:
        """The per-pair table as the report shows it (cuts as ``(a, c)``)."""
        return [{**r, "cuts": str(tuple(r["cuts"]))} for r in self.table]

    @property
    def pilot_rounds(self) -> int | None:
        return self.pilots[0].get("rounds") if self.pilots else None

    @property
    def extrapolated(self) -> bool:
        return (self.backtest or {}).get("method", "learning curve") == "learning curve"

    @property
    def not_extrapolated_reason(self) -> str:
        bt = self.backtest or {}
        return str(bt.get("reason", bt.get("method")))

    def backtest_value(self, name: str) -> float:
        """``mae``, ``spearman`` or ``n`` of the backtest, NaN (0 for ``n``) when absent."""
        value = (self.backtest or {}).get(name)
        if value is None:
            return 0 if name == "n" else math.nan
        return value


@dataclass
class PlanSummary:
    """What a scheme's plan predicted (``plans.json`` has the whole plan)."""

    cuts: list[int]
    tiers: int | None = None
    predicted_loss: float | None = None
    predicted_accuracy: float | None = None
    predicted: Any = None
    guard: Any = None
    delay_s: float | None = None
    bytes: float | None = None
    objective: float | None = None
    planning_s: float | None = None
    clients_per_aggregator: list[int] = field(default_factory=list)
    candidates: Any = None
    objective_def: dict[str, Any] | None = None
    """``reference``, ``delay_ref_s``, ``bytes_ref`` of the acc-aware objective."""

    @classmethod
    def from_plan(cls, plan: dict[str, Any]) -> PlanSummary:
        """The summary of a plan's dict (``Plan.to_dict``); absent figures are None."""
        data = {f.name: plan.get(f.name) for f in fields(cls)}
        return typed_from_dict(cls, jsonable(data, strict=False), "plan")

    def references_text(self) -> str | None:
        """The objective's references in words, None without an objective."""
        obj = self.objective_def
        if not obj:
            return None
        return (
            f"{obj['reference']} delay {obj['delay_ref_s']:.3f} s / round, bytes "
            f"{obj['bytes_ref'] / 1e6:.2f} MB / round"
        )


CONFIG_SECTIONS = ("run", "planner")
"""The nested configs of :class:`~flowsplit.experiments.sfl.config.SFLCompareConfig`
(``StudyConfig.run`` and ``.planner``, since 5 December 2026); earlier studies wrote
their fields at the top of ``config``."""


def flat_config(config: dict[str, Any]) -> dict[str, Any]:
    """A study's ``config`` with the fields of its sections (:data:`CONFIG_SECTIONS`)
    at the top, as every study before the sections wrote them: both shapes read alike."""
    flat = {k: v for k, v in config.items() if k not in CONFIG_SECTIONS}
    for name in CONFIG_SECTIONS:
        section = config.get(name)
        if isinstance(section, dict):
            flat.update(section)
    return flat


@dataclass
class StudySettings:
    """The settings of the study the report states (from ``config``; the whole
    :class:`~flowsplit.experiments.sfl.config.SFLCompareConfig` stays in ``config``)."""

    model: str = ""
    view: str | None = None
    seeds: list[int] = field(default_factory=list)
    rounds: int = 0
    batch_size: int = 0
    lr: float = math.nan
    local_epochs: int = 1
    partition: str = ""
    train_limit: int | None = None
    family: str = ""
    sfl_cut: int | None = None
    fixed_cuts: list[int] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    threads: int = 1
    replan: str = "never"
    trace: str | None = None
    quick: bool = False


@dataclass
class Environment:
    host: str = ""
    python: str = ""
    torch: str = ""
    numpy: str = ""
    cores: int = 0
    threads: int = 1


@dataclass
class SFLCompareResult(JsonDocument):
    """What ``flowsplit sfl compare`` found (``OUT/results.json``)."""

    SCHEMA_VERSION: ClassVar[int] = SFL_COMPARE_SCHEMA_VERSION
    FILE_NAME: ClassVar[str] = RESULTS_NAME
    WHAT: ClassVar[str] = "a `flowsplit sfl compare` result"

    config: dict[str, Any] = field(default_factory=dict)
    """The study's :class:`~flowsplit.experiments.sfl.config.SFLCompareConfig` as a dict."""
    schemes: dict[str, SchemeSummary] = field(default_factory=dict)
    vs_hsfl: dict[str, Versus] = field(default_factory=dict)
    summary: list[str] = field(default_factory=list)
    flowsplit_version: str = ""
    generated: str = ""
    dataset: DatasetInfo = field(default_factory=DatasetInfo)
    topology: TopologyInfo = field(default_factory=TopologyInfo)
    profile: ProfileInfo = field(default_factory=ProfileInfo)
    surrogate: Surrogate | None = None
    target_accuracy: float = math.nan
    paper: Paper = field(default_factory=Paper)
    prediction_check: PredictionCheck = field(default_factory=PredictionCheck)
    plans: dict[str, dict[str, PlanSummary]] = field(default_factory=dict)
    """``seed -> scheme -> plan`` (cuts, predicted delay and bytes, ...)."""
    trace: TraceSummary | None = None
    replanning: list[ReplanRow] = field(default_factory=list)
    runs: list[SFLRun] = field(default_factory=list)
    wall_s: float = math.nan
    environment: Environment = field(default_factory=Environment)
    best_fixed: BestFixed | None = field(default=None, metadata={"omit_default": True})
    baselines: dict[str, BaselineSummary] = field(default_factory=dict)
    ablation: list[AblationRow] = field(default_factory=list)
    schema_version: int = SFL_COMPARE_SCHEMA_VERSION

    # --- the study's settings the reports use -----------------------------------------
    @property
    def settings(self) -> StudySettings:
        """The settings the reports state, typed (older studies: defaults), from the
        config's sections or, as studies wrote it before it had sections, its top."""
        known = {f.name for f in fields(StudySettings)}
        flat = flat_config(self.config)
        return typed_from_dict(
            StudySettings, {k: v for k, v in flat.items() if k in known}, "config"
        )

    @property
    def quick(self) -> bool:
        return self.settings.quick

    def scheme(self, name: str) -> SchemeSummary | None:
        """The summary of scheme ``name`` (None: the study did not run it)."""
        return self.schemes.get(name)

    def first_plans(self) -> dict[str, PlanSummary]:
        """The plans of the first seed (scheme -> plan)."""
        return next(iter(self.plans.values()), {})

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        if self.surrogate is None:
            data["surrogate"] = {}  # as written before: a study without pilots
        return data

    @classmethod
    def prepare(cls, data: dict[str, Any]) -> dict[str, Any]:
        if "schemes" not in data:
            raise ValueError("no 'schemes': not the results of `flowsplit sfl compare`")
        if data.get("surrogate") == {}:
            data = {**data, "surrogate": None}
        return data


def read_sfl_compare_result(path: str | Path) -> SFLCompareResult:
    """The result of a ``flowsplit sfl compare`` study (its folder or ``results.json``);
    one-line :class:`~flowsplit.errors.InputError` when it is not one."""
    return SFLCompareResult.read(path)
