"""The privacy study's result, ``OUT/privacy.json``, as typed objects.

:func:`~flowsplit.privacy.study.run_study` measures, :class:`PrivacyResult` holds what
it measured (``cmd_privacy`` adds the cut-pair table, :class:`Pareto`),
:meth:`PrivacyResult.to_json` writes it and :func:`read_privacy_result` reads it back
(one-line :class:`~flowsplit.errors.InputError` on a file that is not one).

The measures at a cut depend on the view (``bytes_recovered`` for byte views,
``seq_nrmse`` for sequences, ...): :class:`CutMeasures` names the ones every cut has
and keeps the others by name (:meth:`CutMeasures.value`). NaN is written ``null``.
The planner reads the same file for its leakage budget
(:func:`flowsplit.planner.leakage.read_leakage`, a layer below this one). Version 1 is
the format of every study written so far (which had no ``schema_version``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowsplit.result import JsonDocument

PRIVACY_SCHEMA_VERSION = 1
PRIVACY_NAME = "privacy.json"


@dataclass
class CutMeasures:
    """What the attacks measured at one cut (or after the input stem)."""

    block: str | None = field(default=None, metadata={"omit_default": True})
    """The block whose output the cut sends (None after the input stem)."""
    accuracy: float | None = field(default=None, metadata={"omit_default": True})
    """Test accuracy of the (defended) model (None after the input stem)."""
    act_shape: list[int] | None = field(default=None, metadata={"omit_default": True})
    act_values: int | None = field(default=None, metadata={"omit_default": True})
    measures: dict[str, Any] = field(default_factory=dict, metadata={"rest": True})
    """Every other measure by name (``bytes_recovered``, ``seq_nrmse``, ``dcor``, ...)."""

    def has(self, name: str) -> bool:
        """Whether the measure ``name`` (``accuracy`` included) was measured here."""
        return self.accuracy is not None if name == "accuracy" else name in self.measures

    def value(self, name: str) -> Any:
        """The measure ``name`` (``accuracy`` included), None when not measured here."""
        if name == "accuracy":
            return self.accuracy
        return self.measures.get(name)

    def number(self, name: str) -> float | None:
        """The measure ``name`` as a float, None when absent or not a number."""
        value = self.value(name)
        return value if isinstance(value, float) else None


@dataclass
class DefenceEntry:
    """One defence's parameters and its measures per cut."""

    params: dict[str, Any] = field(default_factory=dict)
    cuts: dict[str, CutMeasures] = field(default_factory=dict)


@dataclass
class PairRow:
    """One legal cut pair ``(a, c)``: delay per round, accuracy and leakage."""

    cuts: list[int]
    delay_s: float
    accuracy: float
    leakage: float


@dataclass
class Pareto:
    """The cut-pair table and the choices made on it (``cmd_privacy``)."""

    measure: str
    topology: str
    pairs: list[PairRow]
    max_leakage: float | None = None
    chosen: PairRow | None = None
    unconstrained: PairRow | None = None
    plan: PairRow | None = None


@dataclass
class Rows:
    train: int = 0
    aux: int = 0
    eval: int = 0


@dataclass
class PrivacyResult(
    JsonDocument,
    schema=PRIVACY_SCHEMA_VERSION,
    file_name=PRIVACY_NAME,
    what="a privacy.json written by `flowsplit sfl privacy`",
    root="privacy",
):
    """What ``flowsplit sfl privacy`` measured (``OUT/privacy.json``)."""

    model: str
    view: str
    config: dict[str, Any]
    """The study's :class:`~flowsplit.privacy.study.PrivacyConfig` as a dict."""
    cuts: dict[str, CutMeasures]
    """Measures of the undefended model per cut (``"1"``, ``"2"``, ...)."""
    dataset: str = ""
    block_names: list[str] = field(default_factory=list)
    n_blocks: int = 0
    weights: str | None = None
    rows: Rows = field(default_factory=Rows)
    classes: list[str] = field(default_factory=list)
    majority_acc: float = math.nan
    accuracy: float = math.nan
    prior: dict[str, float] = field(default_factory=dict)
    """An attacker without activations (a per-position guess): its measures."""
    defences: dict[str, DefenceEntry] = field(default_factory=dict)
    reference: CutMeasures | None = field(default=None, metadata={"omit_default": True})
    """The attack on the input stem's output, where recovery must be high."""
    total_s: float = field(default=math.nan, metadata={"omit_default": True})
    pareto: Pareto | None = field(default=None, metadata={"omit_default": True})
    schema_version: int = PRIVACY_SCHEMA_VERSION

    @property
    def model_options(self) -> dict[str, Any]:
        return dict(self.config.get("model_options") or {})

    def default_measure(self) -> str:
        """The leakage measure the study's first cut has: bytes, else sequences."""
        first = next(iter(self.cuts.values()), CutMeasures())
        return "bytes_recovered" if first.has("bytes_recovered") else "seq_recovered"


def read_privacy_result(path: str | Path) -> PrivacyResult:
    """The result of a ``flowsplit sfl privacy`` study (its folder or ``privacy.json``);
    one-line :class:`~flowsplit.errors.InputError` when it is not one."""
    return PrivacyResult.read(path)
