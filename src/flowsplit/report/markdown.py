"""The Markdown twin of :mod:`flowsplit.report.html`: same tables, plain text."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from flowsplit.report.tables import Column, cell_text, resolve_columns


def md_escape(value: Any) -> str:
    """Make text safe inside Markdown (and inside a table cell).

    Pipes would end a cell and newlines a row; ``<`` would let a class name open an
    HTML tag in renderers that allow it (an entity decodes to text, never to a tag, so
    ``&`` and ``>`` stay readable); backslash-escape the characters that start
    emphasis or links.
    """
    text = str(value).replace("<", "&lt;")
    text = text.replace("\r", " ").replace("\n", " ")
    for ch in ("\\", "|", "*", "_", "`", "["):
        text = text.replace(ch, "\\" + ch)
    return text


def table(rows: Sequence[Mapping[str, Any]], columns: Iterable[Column | str] | None = None) -> str:
    """A GitHub-flavoured Markdown table."""
    cols = resolve_columns(rows, columns)
    if not cols:
        return ""
    head = "| " + " | ".join(md_escape(c.header) for c in cols) + " |"
    rule = "|" + "|".join("---:" if c.align == "right" else "---" for c in cols) + "|"
    body = [
        "| " + " | ".join(md_escape(cell_text(row.get(c.key), c)) for c in cols) + " |"
        for row in rows
    ]
    return "\n".join([head, rule, *body]) + "\n"


def heading(text: str, level: int = 2) -> str:
    return f"{'#' * level} {md_escape(text)}\n"


def paragraph(text: str) -> str:
    return md_escape(text) + "\n"


def bullet_list(items: Iterable[str]) -> str:
    return "".join(f"- {md_escape(i)}\n" for i in items)


def document(*parts: str) -> str:
    """Join blocks with blank lines between them."""
    return "\n".join(p.rstrip("\n") + "\n" for p in parts if p)
