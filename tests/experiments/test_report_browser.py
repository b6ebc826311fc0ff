"""The comparison report, opened in headless Chromium: it loads, every figure decodes,
the console stays clean, and hostile class names stay text. Skips without Chromium."""

from __future__ import annotations

import pytest

from flowsplit.experiments.dp import compare as compare_mod
from flowsplit.experiments.dp.compare import run_compare
from flowsplit.report.browser import check_page, find_chromium
from tests.experiments.helpers import fake_allreduce, fake_runner, make_dataset

PAGE_MAX_PX = 6000
"""The data-parallel page's height limit at 1280 px wide (it was 15,696 px on the demo)."""


@pytest.mark.skipif(
    find_chromium() is None,
    reason="headless Chromium not installed (apt-get install chromium); browser check skipped",
)
@pytest.mark.slow
def test_compare_report_renders_in_chromium_short_with_its_verdict_first(tmp_path, monkeypatch):
    # Prepare: the demo's study shape (three models, 1 and 2 workers, two seeds) from the
    # fake engine
    monkeypatch.setattr(compare_mod, "available_cores", lambda: 2)
    ds = make_dataset(tmp_path / "ds")
    out = tmp_path / "study"
    fake_allreduce(out)
    page = run_compare(
        ds,
        out,
        models=["cnn", "lstm", "xgboost"],
        workers=[1, 2],
        seeds=2,
        quick=True,
        progress=False,
        run_cell_fn=fake_runner(),
    )
    # Execute
    res = check_page(page, screenshot=tmp_path / "report.png")
    # Assert: it loads, every figure decodes (verdict, time, accuracy x2, curves,
    # communication x2, speedups, per-class, six confusion matrices), the console is clean
    assert res.loaded
    assert res.title == "Centralised vs data-parallel training"
    assert len(res.images) >= 12
    assert res.broken_images == []
    assert res.console_errors == []
    assert (tmp_path / "report.png").stat().st_size > 10_000
    # At most ~6,000 px, opening with one verdict line and then one picture (the first
    # image, right under it)
    assert 0 < res.height <= PAGE_MAX_PX, res.height
    assert res.verdict and res.verdict.startswith("Data parallelism")
    assert "2 workers x 1 thread(s) against 1 x 1 thread(s)" in res.verdict
    assert res.verdict_top < res.first_image_top < res.verdict_top + 400
    assert res.images[0]["alt"].startswith("Test accuracy (mean over seeds")
    # Long tables and the method are folded, the confusion matrices sit in a grid
    html = page.read_text()
    assert html.count("<details>") >= 5
    assert "minmax(270px" in html
