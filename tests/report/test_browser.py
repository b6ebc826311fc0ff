"""A rendered report opened in headless Chromium: loads, every image decodes, no console errors.

Skips with a reason when no Chromium is installed (``apt-get install chromium``).
"""

from __future__ import annotations

import struct

import pytest

from flowsplit.report import figures
from flowsplit.report.browser import check_page, find_chromium
from flowsplit.report.page import Figure, Page, Section, Table

needs_chromium = pytest.mark.skipif(
    find_chromium() is None,
    reason="headless Chromium not installed (apt-get install chromium); browser check skipped",
)


def _png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


@needs_chromium
@pytest.mark.slow
def test_report_page_renders_in_chromium(tmp_path):
    # Prepare: a page with two figures and hostile text
    fig_a = figures.bar_chart(["a", "b"], {"x": [1.0, 2.0]})
    fig_b = figures.heatmap([[3, 1], [0, 2]], ["<b>x</b>", "y"], ["<b>x</b>", "y"])
    page = Page(
        "<script>alert(1)</script>",
        [
            Section(
                "s",
                [
                    Figure(fig_a, "bars"),
                    Figure(fig_b, "heat"),
                    Table([{"k": "<img src=x onerror=alert(1)>"}]),
                ],
            )
        ],
    ).html()
    path = tmp_path / "page.html"
    path.write_text(page)
    shot = tmp_path / "shot.png"
    # Execute
    res = check_page(path, screenshot=shot)
    # Assert
    assert res.loaded
    assert len(res.images) == 2 and all(i["natural_width"] > 0 for i in res.images)
    assert res.console_errors == []
    assert res.title == "<script>alert(1)</script>"  # shown as text, not run
    assert _png_size(shot)[0] > 0


@needs_chromium
@pytest.mark.slow
def test_browser_check_sees_broken_images_and_errors(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<img alt="b" src="data:image/png;base64,AAAA"><script>console.error(\'boom\')</script>'
    )
    res = check_page(bad)
    assert not res.ok
    assert [i["alt"] for i in res.broken_images] == ["b"]
    assert "boom" in res.console_errors
