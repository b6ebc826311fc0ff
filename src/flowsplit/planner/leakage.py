"""A privacy budget for the planner: which cuts a measured leakage file allows.

The file is the plain JSON ``flowsplit sfl privacy`` writes (``OUT/privacy.json``):
``{"cuts": {"1": {"bytes_recovered": 0.41, "dcor": 0.93, ...}, ...}}`` with
measures where higher means more leakage. A benchmark file
``{"datasets": {NAME: {"cuts": ...}}}`` with exactly one dataset is read too.

A plan with cuts ``(a, c)`` exposes the activations at cut ``a`` to the
aggregator and those at cut ``c`` to the server, so its leakage is the larger of
the two (:func:`pair_leakage`); a two-tier plan (``a == c``) exposes one cut.
This module reads JSON only and imports nothing of flowsplit's but its errors, so
the planner can use it without depending on the code that measures leakage.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from flowsplit.errors import ConfigError, InputError
from flowsplit.inputs import read_json_input


def read_leakage(
    path: str | Path, measure: str, *, defence: str | None = None, model: str | None = None
) -> dict[int, float]:
    """``{cut: leakage}`` of ``measure`` from a leakage file (``defence``: that defence's cuts).

    With ``model``, a file measured on another model is refused (its cuts are not
    this model's).
    """
    path = Path(path)
    doc = read_json_input(path, "leakage file not found (write it with `flowsplit sfl privacy`)")
    if isinstance(doc, dict) and "cuts" not in doc and isinstance(doc.get("datasets"), dict):
        if len(doc["datasets"]) != 1:
            raise InputError(
                path,
                f"holds {len(doc['datasets'])} datasets ({', '.join(doc['datasets'])}); "
                "give the privacy.json of one study",
            )
        doc = next(iter(doc["datasets"].values()))
    if model is not None and isinstance(doc, dict) and doc.get("model") not in (None, model):
        raise InputError(path, f"was measured on model {doc['model']!r}, not {model!r}")
    if defence is not None:
        doc = (doc.get("defences") or {}).get(defence) if isinstance(doc, dict) else None
        if not isinstance(doc, dict):
            raise InputError(path, f"has no measurements with the defence {defence!r}")
    cuts = doc.get("cuts") if isinstance(doc, dict) else None
    if not isinstance(cuts, dict) or not cuts:
        raise InputError(path, "has no 'cuts' object of per-cut measures")
    out: dict[int, float] = {}
    for key, rec in cuts.items():
        value = rec.get(measure) if isinstance(rec, dict) else None
        if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
            known = (
                sorted(k for k, v in rec.items() if isinstance(v, int | float))
                if isinstance(rec, dict)
                else []
            )
            raise InputError(
                path, f"cut {key} has no numeric measure {measure!r} (it has {', '.join(known)})"
            )
        try:
            out[int(key)] = float(value)
        except ValueError:
            raise InputError(path, f"cut key {key!r} is not an integer") from None
    return out


def pair_leakage(leakage: dict[int, float], a: int, c: int) -> float:
    """Leakage of a plan with cuts ``(a, c)``: the larger of its two exposed cuts.

    A cut missing from the file counts as infinitely leaky (it was not measured,
    so nothing bounds it).
    """
    return max(leakage.get(int(a), math.inf), leakage.get(int(c), math.inf))


def allowed_cuts(path: str | Path, measure: str, max_leakage: float) -> set[int]:
    """The cuts of a leakage file whose ``measure`` is at most ``max_leakage``."""
    return {k for k, v in read_leakage(path, measure).items() if v <= max_leakage}


def allowed_pairs(
    pairs: Iterable[tuple[int, int]], leakage: dict[int, float], max_leakage: float
) -> list[tuple[int, int]]:
    """The ``(a, c)`` pairs whose :func:`pair_leakage` is within the budget, in order.

    Raises :class:`ConfigError` when none is: the budget cannot be met by any cut.
    """
    pairs = list(pairs)
    ok = [p for p in pairs if pair_leakage(leakage, *p) <= max_leakage]
    if not ok:
        least = min(pairs, key=lambda p: pair_leakage(leakage, *p), default=None)
        hint = (
            f"; the least leaky is {least} at {pair_leakage(leakage, *least):.3f}" if least else ""
        )
        raise ConfigError(f"no cut pair has leakage <= {max_leakage}{hint}")
    return ok


def budget_pairs(
    path: str | Path | None, measure: str, max_leakage: float | None, *, model: str | None = None
) -> tuple[tuple[int, int], ...] | None:
    """The cut pairs a plan may use under a leakage budget (``None``: no budget).

    Pairs are ``(a, c)`` with ``a <= c`` over the cuts the file measured, kept when
    :func:`pair_leakage` is at most ``max_leakage``; for the planner's ``only_cuts``.
    Both ``path`` and ``max_leakage`` are needed for a budget; one without the other
    is a :class:`ConfigError`, as is a budget no measured pair meets.
    """
    if path is None and max_leakage is None:
        return None
    if path is None or max_leakage is None:
        raise ConfigError(
            "a leakage budget needs both --max-leakage and --leakage-file "
            "(the privacy.json of `flowsplit sfl privacy`)"
        )
    leak = read_leakage(path, measure, model=model)
    cuts = sorted(leak)
    pairs = [(a, c) for a in cuts for c in cuts if a <= c]
    try:
        return tuple(allowed_pairs(pairs, leak, max_leakage))
    except ConfigError as exc:
        raise ConfigError(f"--max-leakage {max_leakage} on {measure} of {path}: {exc}") from None
