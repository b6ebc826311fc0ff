"""A report page, written once and rendered twice: a self-contained HTML page and its
Markdown twin.

A study builds one :class:`Page` of :class:`Section` s, each a list of blocks
(:class:`Text`, :class:`Bullets`, :class:`Summary`, :class:`Table`, :class:`Figure`,
:class:`Grid`, :class:`Fold`, :class:`Links`); :meth:`Page.html` and
:meth:`Page.markdown` render it. Every block renders itself both ways, so the two files
cannot drift apart: the Markdown has the same sections, text and tables, without the
figures (a section of figures only is left out of it) and with folded parts open.

The HTML page loads no external resource (no fonts, scripts or stylesheets), so it opens
offline, mails as one file and cannot leak that it was opened. Anything that comes from
user data (capture names, class names, model names) is escaped at render time, so
callers pass plain strings and never pre-escape.

A table is rows (dicts) and :class:`Column` s; a column says which key it reads, its
header, how a value is formatted and, where given, how the value comes from the item a
row shows (:func:`rows_of`, :func:`named_rows`), so a table's column is defined once.
"""

from __future__ import annotations

import base64
import html as _html
import io
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from matplotlib.backends.backend_agg import FigureCanvasAgg

# ---------------------------------------------------------------- columns and cells


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


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def fmt_float(digits: int = 3) -> Callable[[Any], str]:
    """Formatter: fixed decimals, an en dash for missing values."""

    def f(v: Any) -> str:
        return "–" if _missing(v) else _no_negative_zero(f"{float(v):.{digits}f}")

    return f


def _no_negative_zero(text: str) -> str:
    """``-0.0`` -> ``0.0``: a value that rounds to zero has no sign worth showing."""
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def fmt_pct(digits: int = 1) -> Callable[[Any], str]:
    """Formatter: a fraction shown as a percentage."""

    def f(v: Any) -> str:
        return "–" if _missing(v) else _no_negative_zero(f"{100 * float(v):.{digits}f}") + " %"

    return f


def fmt_p(v: Any) -> str:
    """Formatter for p-values: three significant figures, ``< 0.001`` below that."""
    if _missing(v):
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


def _resolve_columns(
    rows: Sequence[Mapping[str, Any]], columns: Iterable[Column | str] | None
) -> list[Column]:
    """Columns as given, strings promoted to :class:`Column`; all keys of the first row if none."""
    if columns is None:
        columns = list(rows[0].keys()) if rows else []
    return [c if isinstance(c, Column) else Column(str(c), str(c)) for c in columns]


# ---------------------------------------------------------------- escaping


def esc(value: Any) -> str:
    """HTML-escape anything (quotes included, so it is safe inside attributes too)."""
    return _html.escape(str(value), quote=True)


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


def _css(css: str | None) -> str:
    return f' class="{esc(css)}"' if css else ""


def _md_blocks(texts: Iterable[str]) -> str:
    """Markdown blocks with a blank line between them (empty ones dropped)."""
    return "\n".join(t.rstrip("\n") + "\n" for t in texts if t)


# ---------------------------------------------------------------- blocks


class Block(Protocol):
    """What a section holds: something that renders as HTML and as Markdown."""

    def html(self) -> str: ...

    def markdown(self) -> str: ...


@dataclass(frozen=True)
class Text:
    """A paragraph; ``css`` a class of the page's style sheet (``verdict``: the page's
    one-line answer, larger)."""

    text: str
    css: str | None = None

    def html(self) -> str:
        return f"<p{_css(self.css)}>{esc(self.text)}</p>"

    def markdown(self) -> str:
        return md_escape(self.text) + "\n"


@dataclass(frozen=True)
class Bullets:
    """A bulleted list (``css="warn"``: shown as a warning)."""

    items: Sequence[str]
    css: str | None = None

    def __post_init__(self) -> None:  # a generator would render once only
        object.__setattr__(self, "items", tuple(self.items))

    def html(self) -> str:
        return f"<ul{_css(self.css)}>" + "".join(f"<li>{esc(i)}</li>" for i in self.items) + "</ul>"

    def markdown(self) -> str:
        return "".join(f"- {md_escape(i)}\n" for i in self.items)


@dataclass(frozen=True)
class Summary(Bullets):
    """The findings in a box under the verdict."""

    def html(self) -> str:
        return f'<div class="summary">{Bullets(self.items).html()}</div>'


@dataclass(frozen=True)
class Table:
    """A table of ``rows`` (dicts) in ``columns`` (all keys of the first row if none);
    every header and cell is escaped."""

    rows: Sequence[Mapping[str, Any]]
    columns: Sequence[Column | str] | None = None
    caption: str | None = None

    def html(self) -> str:
        cols = _resolve_columns(self.rows, self.columns)
        head = "".join(f"<th>{esc(c.header)}</th>" for c in cols)
        body = []
        for row in self.rows:
            cells = []
            for c in cols:
                cls = ' class="r"' if c.align == "right" else ""
                cells.append(f"<td{cls}>{esc(cell_text(row.get(c.key), c))}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        cap = f"<caption>{esc(self.caption)}</caption>" if self.caption else ""
        return (
            f'<div class="tw"><table>{cap}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )

    def markdown(self) -> str:
        """A GitHub-flavoured Markdown table, its caption in bold above it."""
        cols = _resolve_columns(self.rows, self.columns)
        if not cols:
            return ""
        head = "| " + " | ".join(md_escape(c.header) for c in cols) + " |"
        rule = "|" + "|".join("---:" if c.align == "right" else "---" for c in cols) + "|"
        body = [
            "| " + " | ".join(md_escape(cell_text(row.get(c.key), c)) for c in cols) + " |"
            for row in self.rows
        ]
        table = "\n".join([head, rule, *body]) + "\n"
        return f"**{md_escape(self.caption)}**\n\n{table}" if self.caption else table


def figure_to_base64(fig, *, dpi: int = 100) -> str:
    """Render a matplotlib Figure to PNG and return it base64-encoded (ASCII)."""
    if fig.canvas is None or not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


@dataclass(frozen=True)
class Figure:
    """A matplotlib figure and its caption, embedded as a base64 PNG. ``chart`` is the
    Figure or a function that draws it (drawn when the HTML is written, so the Markdown,
    which has no figures, never draws)."""

    chart: Any
    caption: str
    dpi: int = 100

    def html(self) -> str:
        fig = self.chart() if callable(self.chart) else self.chart
        png = figure_to_base64(fig, dpi=self.dpi)
        return (
            f'<figure><img src="data:image/png;base64,{png}" alt="{esc(self.caption)}">'
            f"<figcaption>{esc(self.caption)}</figcaption></figure>"
        )

    def markdown(self) -> str:
        return ""


@dataclass(frozen=True)
class Grid:
    """Figures side by side, as many per row as fit with each at least ``min_px`` wide
    (three of 360 px in the 1200 px page), after an ``intro`` about them (HTML only, like
    the figures)."""

    figures: Sequence[Figure]
    min_px: int = 360
    intro: str | None = None

    def html(self) -> str:
        style = f"grid-template-columns:repeat(auto-fill,minmax({int(self.min_px)}px,1fr))"
        intro = Text(self.intro).html() if self.intro else ""
        figs = "".join(f.html() for f in self.figures)
        return f'{intro}<div class="grid" style="{style}">{figs}</div>'

    def markdown(self) -> str:
        return ""


@dataclass(frozen=True)
class Fold:
    """Blocks folded under a one-line ``summary`` (closed at first); open in Markdown."""

    summary: str
    blocks: Sequence[Block]

    def html(self) -> str:
        inner = "".join(b.html() for b in self.blocks)
        return f"<details><summary>{esc(self.summary)}</summary>{inner}</details>"

    def markdown(self) -> str:
        return _md_blocks(b.markdown() for b in self.blocks)


@dataclass(frozen=True)
class Links:
    """A list of links, ``(href, text)`` each; "none" when there are none."""

    links: Sequence[tuple[str, str]]

    def html(self) -> str:
        if not self.links:
            return Text("none").html()
        items = "".join(f'<li><a href="{esc(h)}">{esc(t)}</a></li>' for h, t in self.links)
        return f"<ul>{items}</ul>"

    def markdown(self) -> str:
        if not self.links:
            return Text("none").markdown()
        return "".join(f"- [{md_escape(t)}](<{h.replace('>', '%3E')}>)\n" for h, t in self.links)


# ---------------------------------------------------------------- sections and the page


@dataclass(frozen=True)
class Section:
    """A titled part of the page (``anchor``: its id, for links into the page)."""

    title: str
    blocks: Sequence[Block]
    anchor: str | None = None

    def html(self) -> str:
        aid = f' id="{esc(self.anchor)}"' if self.anchor else ""
        inner = "".join(b.html() for b in self.blocks)
        return f"<section{aid}><h2>{esc(self.title)}</h2>{inner}</section>"

    def markdown(self) -> str:
        """The section as Markdown; nothing when it holds figures only."""
        body = _md_blocks(b.markdown() for b in self.blocks)
        return f"## {md_escape(self.title)}\n\n{body}" if body else ""


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;
max-width:1200px;padding:0 1rem;color:#1b1f24;line-height:1.45}
h1{font-size:1.7rem;margin-bottom:.2rem}h2{margin-top:2.2rem;border-bottom:1px solid #d0d7de;
padding-bottom:.2rem}h3{margin-top:1.4rem}
table{border-collapse:collapse;margin:.6rem 0 1rem;font-size:.9rem}
th,td{border:1px solid #d0d7de;padding:.25rem .55rem;vertical-align:top}
th{background:#f3f5f7;text-align:left}td.r{text-align:right;font-variant-numeric:tabular-nums}
caption{caption-side:top;text-align:left;font-weight:600;padding-bottom:.3rem}
figure{margin:1rem 0}figure img{max-width:100%;height:auto;border:1px solid #eaecef}
figcaption{font-size:.85rem;color:#57606a}
.summary{background:#f6f8fa;border-left:4px solid #0969da;padding:.6rem 1rem;margin:1rem 0}
.warn{background:#fff8c5;border-left:4px solid #bf8700;padding:.5rem 1rem;margin:1rem 0}
.verdict{font-size:1.1rem;font-weight:600;margin:.8rem 0}
details{margin:.6rem 0}details>summary{cursor:pointer;color:#0969da}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:.4rem 1rem}
.grid figure{margin:.4rem 0}
.tw{overflow-x:auto;max-width:100%}.meta{color:#57606a;font-size:.85rem}code{background:#f3f5f7;padding:0 .2rem}
"""


@dataclass(frozen=True)
class Page:
    """A whole report: its title, a line under it and its sections."""

    title: str
    sections: Sequence[Section] = field(default_factory=list)
    subtitle: str | None = None

    def html(self) -> str:
        """A complete HTML5 document (inline CSS, figures embedded)."""
        sub = f'<p class="meta">{esc(self.subtitle)}</p>' if self.subtitle else ""
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(self.title)}</title><style>{CSS}</style></head>"
            f"<body><h1>{esc(self.title)}</h1>{sub}"
            + "".join(s.html() for s in self.sections)
            + "</body></html>\n"
        )

    def markdown(self) -> str:
        """The same page as Markdown: sections, text and tables; no figures."""
        head = f"# {md_escape(self.title)}\n"
        sub = Text(self.subtitle).markdown() if self.subtitle else ""
        return _md_blocks([head, sub, *(s.markdown() for s in self.sections)])
