"""A self-contained HTML page: inline CSS, base64 PNG figures, everything from data escaped.

The page loads no external resource (no fonts, scripts or stylesheets), so it opens
offline, mails as one file and cannot leak that it was opened.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg

from flowsplit.report.tables import Column, cell_text, resolve_columns

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


def esc(value: Any) -> str:
    """HTML-escape anything (quotes included, so it is safe inside attributes too)."""
    return html.escape(str(value), quote=True)


def figure_to_base64(fig, *, dpi: int = 100) -> str:
    """Render a matplotlib Figure to PNG and return it base64-encoded (ASCII)."""
    if fig.canvas is None or not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def img(b64_png: str, alt: str) -> str:
    """An ``<img>`` with an embedded PNG."""
    return f'<img src="data:image/png;base64,{b64_png}" alt="{esc(alt)}">'


def figure(fig, caption: str, *, dpi: int = 100) -> str:
    """A ``<figure>`` holding a rendered matplotlib Figure and its caption."""
    return (
        f"<figure>{img(figure_to_base64(fig, dpi=dpi), caption)}"
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def paragraph(text: str, css_class: str | None = None) -> str:
    cls = f' class="{esc(css_class)}"' if css_class else ""
    return f"<p{cls}>{esc(text)}</p>"


def bullet_list(items: Iterable[str], css_class: str | None = None) -> str:
    cls = f' class="{esc(css_class)}"' if css_class else ""
    return f"<ul{cls}>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>"


def table(
    rows: Sequence[Mapping[str, Any]],
    columns: Iterable[Column | str] | None = None,
    *,
    caption: str | None = None,
) -> str:
    """An HTML table; every header and cell is escaped."""
    cols = resolve_columns(rows, columns)
    head = "".join(f"<th>{esc(c.header)}</th>" for c in cols)
    body = []
    for row in rows:
        cells = []
        for c in cols:
            cls = ' class="r"' if c.align == "right" else ""
            cells.append(f"<td{cls}>{esc(cell_text(row.get(c.key), c))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return (
        f'<div class="tw"><table>{cap}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def section(title: str, *parts: str, anchor: str | None = None) -> str:
    """A titled section; ``parts`` are already-rendered HTML fragments from this module."""
    aid = f' id="{esc(anchor)}"' if anchor else ""
    return f"<section{aid}><h2>{esc(title)}</h2>{''.join(parts)}</section>"


def details(summary: str, *parts: str) -> str:
    """Already-rendered fragments folded under a one-line ``summary`` (closed at first)."""
    return f"<details><summary>{esc(summary)}</summary>{''.join(parts)}</details>"


def grid(*parts: str, min_px: int = 360) -> str:
    """Already-rendered fragments (figures) side by side, as many per row as fit with
    each at least ``min_px`` wide (three of 360 px in the 1200 px page)."""
    style = f"grid-template-columns:repeat(auto-fill,minmax({int(min_px)}px,1fr))"
    return f'<div class="grid" style="{style}">{"".join(parts)}</div>'


def link(href: str, text: str) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def page(title: str, *parts: str, subtitle: str | None = None) -> str:
    """A complete HTML5 document around already-rendered fragments."""
    sub = f'<p class="meta">{esc(subtitle)}</p>' if subtitle else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>"
        f"<body><h1>{esc(title)}</h1>{sub}{''.join(parts)}</body></html>\n"
    )
