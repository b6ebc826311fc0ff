"""Synthetic run records (what :func:`flowsplit.experiments.dp.records.read_record` returns),
for the rules of the analysis and the advice, without any training."""

from __future__ import annotations

import math
import typing

from flowsplit.experiments.dp.analysis import analyse
from flowsplit.experiments.dp.records import RunRecord
from flowsplit.experiments.dp.result import CompareResult
from flowsplit.util import jsonable

_NOTHING = {float: math.nan, int: 0, str: "", bool: False}
# A record with every key and nothing measured (NaN, 0, empty), one thread per worker:
# the records below override what each test is about.
BLANK: dict = {
    key: _NOTHING.get(hint) if typing.get_origin(hint) is None else typing.get_origin(hint)()
    for key, hint in typing.get_type_hints(RunRecord).items()
} | {"threads_per_worker": 1}

# Per-seed accuracy wobble, the same in both modes unless a test says otherwise.
WOBBLE = (0.0, 0.002, -0.001, 0.001, -0.002, 0.0015, -0.0015)
# Test labels: two classes, two samples each, so the majority-class rate is 50 %.
Y_TRUE = [0, 1, 1, 0]
CLASSES = ["web", "dns"]


def record_of(**changes) -> RunRecord:
    """A record with nothing measured (:data:`BLANK`) but ``changes``."""
    return RunRecord(**{**BLANK, **changes})


def record(model: str, seed: int, workers: int, acc: float, t: float, **kw) -> RunRecord:
    """One finished run: accuracy ``acc`` (macro-F1 the same), epoch time ``t`` seconds."""
    return record_of(
        **{
            "model": model,
            "seed": seed,
            "workers": workers,
            "accuracy": acc,
            "macro_f1": acc,
            "epoch_time_s": t,
            "oversubscribed": False,
            "y_true": list(Y_TRUE),
            "y_pred": list(Y_TRUE),
            "classes": CLASSES,
            "contended": False,
            "foreign_cpu_share": 0.0,
            **kw,
        }
    )


def paired_runs(
    model: str = "m",
    n_seeds: int = 5,
    *,
    acc: float = 0.9,
    t_central: float = 10.0,
    t_parallel: float = 5.2,
    dp_shift: list[float] | None = None,
    workers: int = 2,
    **kw,
) -> tuple[list[dict], list[dict]]:
    """Centralised and data-parallel records of one model over ``n_seeds`` seeds; the
    data-parallel accuracy differs by ``dp_shift`` per seed (default +-0.05 pt)."""
    shift = dp_shift or [0.0005 * (-1) ** s for s in range(n_seeds)]
    central = [
        record(model, s, 1, acc + WOBBLE[s], t_central * (1 + 0.01 * s), **kw)
        for s in range(n_seeds)
    ]
    parallel = [
        record(model, s, workers, acc + WOBBLE[s] + shift[s], t_parallel * (1 + 0.01 * s), **kw)
        for s in range(n_seeds)
    ]
    return central, parallel


def study_results(records: list[dict], *, margin: float = 0.01, quick: bool = False):
    """The typed result the overview reads, from records, through the analysis (as
    ``results.json`` holds it)."""
    analysis = analyse(records, workloads={}, host=None, cores=2, margin=margin)
    doc = {"config": {"margin": margin, "quick": quick}, "analysis": analysis}
    return CompareResult.from_dict(jsonable(doc))
