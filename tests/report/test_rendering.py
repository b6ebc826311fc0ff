"""Report rendering: one page, two renderings; escaping, self-contained pages, embedded
figures, Markdown tables."""

from __future__ import annotations

import base64

import numpy as np

from flowsplit.report import figures
from flowsplit.report.page import (
    Bullets,
    Column,
    Figure,
    Fold,
    Grid,
    Links,
    Page,
    Section,
    Summary,
    Table,
    Text,
    figure_to_base64,
    fmt_ci,
    fmt_p,
    fmt_pct,
)

EVIL = '<script>alert("x")</script>|a*b_c'


def test_html_table_escapes_headers_cells_and_caption():
    # Prepare
    rows = [{"name": EVIL, "acc": 0.9512}]
    cols = [Column("name", "class <b>"), Column("acc", "accuracy", fmt_pct(1), "right")]
    # Execute
    out = Table(rows, cols, caption=EVIL).html()
    # Assert
    assert "<script>" not in out
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in out
    assert "class &lt;b&gt;" in out
    assert '<td class="r">95.1 %</td>' in out


def test_page_is_self_contained_and_escapes_title():
    out = Page(EVIL, [Section("s", [Text("hello")])], subtitle=EVIL).html()
    assert out.startswith("<!DOCTYPE html>")
    assert "<script>" not in out
    assert "http://" not in out and "https://" not in out and "src=" not in out


def test_figure_embeds_a_png():
    # Prepare
    fig = figures.bar_chart(
        ["a", "b"], {"x": [1.0, 2.0]}, lows={"x": [0.5, 1.5]}, highs={"x": [1.5, 2.5]}, ylabel="y"
    )
    # Execute
    b64 = figure_to_base64(fig)
    tag = Figure(fig, caption=EVIL).html()
    # Assert
    assert base64.b64decode(b64)[:8] == b"\x89PNG\r\n\x1a\n"
    assert tag.startswith('<figure><img src="data:image/png;base64,')
    assert "<script>" not in tag


def test_heatmap_and_line_chart_render():
    heat = figures.heatmap(np.array([[5, 1], [0, 4]]), ["a", EVIL], ["a", EVIL])
    line = figures.line_chart(
        [
            {"label": "m", "x": [1, 2, 4], "y": [1, 1.9, 3.2]},
            {"label": "p", "x": [1, 1024], "y": [1, 500], "style": "--"},
        ],
        logx=True,
        logy=True,
    )
    for fig in (heat, line):
        assert base64.b64decode(figure_to_base64(fig))[:4] == b"\x89PNG"


def test_markdown_table_escapes_pipes_and_html():
    # Prepare
    rows = [{"name": EVIL, "p": 0.0004}, {"name": "ok", "p": 0.25}]
    # Execute
    out = Table(rows, [Column("name", "class"), Column("p", "p", fmt_p, "right")]).markdown()
    lines = out.strip().split("\n")
    # Assert: header, rule, two rows, each with exactly 3 unescaped pipes
    assert lines[1] == "|---|---:|"
    assert "<script>" not in out and "&lt;script>" in out
    assert "\\|a\\*b\\_c" in out
    assert lines[2].endswith("| < 0.001 |") is False  # '<' is escaped too
    assert lines[2].endswith("| &lt; 0.001 |")
    assert lines[3] == "| ok | 0.250 |"


def test_one_page_renders_the_same_sections_both_ways():
    # Prepare: every kind of block; a section of figures only; a figure that counts draws.
    drawn: list[int] = []

    def chart():
        drawn.append(1)
        return figures.bar_chart(["a"], {"x": [1.0]})

    table = Table([{"k": "v"}], caption="cap")
    page = Page(
        "T",
        [
            Section("Verdict", [Text("the answer", "verdict"), Figure(chart, "pic")], "verdict"),
            Section("Findings", [Summary(x for x in ("one", "two")), Fold("show", [table])]),
            Section("Pictures", [Grid([Figure(chart, "a"), Figure(chart, "b")], intro="why")]),
            Section("Links", [Links([("a/report.html", "study a")]), Bullets(["w"], "warn")]),
        ],
        subtitle="sub",
    )
    # Execute
    md = page.markdown()
    drawn_by_markdown = len(drawn)
    html = page.html()
    # Assert: Markdown has every section but the figures-only one, folded parts open,
    # and draws nothing; the HTML has them all, the summary boxed, the fold closed.
    assert drawn_by_markdown == 0 and len(drawn) == 3
    assert [line for line in md.splitlines() if line.startswith("#")] == [
        "# T",
        "## Verdict",
        "## Findings",
        "## Links",
    ]
    assert "- one\n- two\n" in md and "**cap**\n\n| k |" in md
    assert "- [study a](<a/report.html>)" in md and "why" not in md
    assert html.count("<h2>") == 4 and html.count("<img") == 3
    assert '<div class="summary"><ul><li>one</li><li>two</li></ul></div>' in html
    assert "<details><summary>show</summary>" in html and '<ul class="warn">' in html
    assert '<li><a href="a/report.html">study a</a></li>' in html
    assert '<p class="verdict">the answer</p>' in html and "<p>why</p>" in html


def test_formatters_drop_the_sign_of_zero():
    assert fmt_pct(1)(-1e-9) == "0.0 %"
    assert fmt_pct(1)(-0.002) == "-0.2 %"


def test_fmt_ci_and_missing_values():
    assert fmt_ci(0.95, 0.94, 0.96, scale=100) == "95.0 (94.0–96.0)"
    assert fmt_ci(0.95, float("nan"), float("nan"), scale=100) == "95.0"
    assert fmt_p(float("nan")) == "–"
    assert Page("T", [Section("S", [Text("x")])]).markdown() == "# T\n\n## S\n\nx\n"
