"""Column specifications and cell formatting shared by the HTML and Markdown renderers."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Column:
    """One table column: the row key it reads, its header and how to format a value;
    ``of``, where given, is how the value comes from the item a row shows
    (:func:`rows_of`), so that a table's column is defined in one place."""

    key: str
    header: str
    fmt: Callable[[Any], str] | None = None
    align: str = "left"
    """``left`` for text, ``right`` for numbers."""
    of: Callable[..., Any] | None = None


def rows_of(items: Iterable[Any], columns: Sequence[Column]) -> list[dict[str, Any]]:
    """One row per item: each column's value of it (the columns that say how, ``of``)."""
    return [{c.key: c.of(item) for c in columns if c.of is not None} for item in items]


def named_rows(items: Mapping[str, Any], columns: Sequence[Column]) -> list[dict[str, Any]]:
    """One row per named item: each column's value of the name and the item (``of``
    takes both)."""
    return [
        {c.key: c.of(name, item) for c in columns if c.of is not None}
        for name, item in items.items()
    ]


def fmt_float(digits: int = 3) -> Callable[[Any], str]:
    """Formatter: fixed decimals, an en dash for missing values."""

    def f(v: Any) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "–"
        return _no_negative_zero(f"{float(v):.{digits}f}")

    return f


def _no_negative_zero(text: str) -> str:
    """``-0.0`` -> ``0.0``: a value that rounds to zero has no sign worth showing."""
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def fmt_pct(digits: int = 1) -> Callable[[Any], str]:
    """Formatter: a fraction shown as a percentage."""

    def f(v: Any) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "–"
        return _no_negative_zero(f"{100 * float(v):.{digits}f}") + " %"

    return f


def fmt_p(v: Any) -> str:
    """Formatter for p-values: three significant figures, ``< 0.001`` below that."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    v = float(v)
    return "< 0.001" if v < 0.001 else f"{v:.3f}"


def fmt_ci(mean: float, low: float, high: float, scale: float = 1.0, digits: int = 1) -> str:
    """``mean (low–high)`` with optional scaling (100 for percentages)."""
    if mean is None or math.isnan(mean):
        return "–"
    if low is None or math.isnan(low):
        return f"{mean * scale:.{digits}f}"
    return f"{mean * scale:.{digits}f} ({low * scale:.{digits}f}–{high * scale:.{digits}f})"


def cell_text(value: Any, column: Column) -> str:
    """The text of one cell, before any escaping."""
    if column.fmt is not None:
        return column.fmt(value)
    if value is None:
        return "–"
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def resolve_columns(
    rows: Sequence[Mapping[str, Any]], columns: Iterable[Column | str] | None
) -> list[Column]:
    """Columns as given, strings promoted to :class:`Column`; all keys of the first row if none."""
    if columns is None:
        columns = list(rows[0].keys()) if rows else []
    return [c if isinstance(c, Column) else Column(str(c), str(c)) for c in columns]
