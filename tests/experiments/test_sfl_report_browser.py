"""The split-learning comparison report and the overview page over it, opened in
headless Chromium: both load, every figure decodes, the console stays clean, the
overview's link reaches the study's page, and hostile class names stay text.

Skips without Chromium (CI installs it and sets FLOWSPLIT_REQUIRE_CHROMIUM=1, so there
a missing browser fails instead)."""

from __future__ import annotations

import json

import pytest

from flowsplit.experiments.advice import overview_content
from flowsplit.report.browser import check_page, find_chromium
from flowsplit.report.overview import write_overview

needs_chromium = pytest.mark.skipif(
    find_chromium() is None,
    reason="headless Chromium not installed (apt-get install chromium); browser check skipped",
)


@needs_chromium
@pytest.mark.slow
def test_sfl_compare_report_and_overview_render_in_chromium(tmp_path, toy_sfl_study):
    # Prepare: a real (toy-sized) split-learning study: 5 clients, 2 aggregators, 2 seeds
    # (tests/experiments/conftest.py), and the overview page beside it.
    sfl_dir = toy_sfl_study
    report = sfl_dir / "report.html"
    n_figures = report.read_text().count("<img")
    manifest = {
        "n_flows": 150,
        "classes": ["<script>alert(1)</script>", "dns"],
        "splits": {"train": 100, "val": 25, "test": 25},
        "split_by": "file",
    }
    overview = write_overview(
        sfl_dir.parent / "out",
        manifest=manifest,
        dp_dir=None,
        sfl_dir=sfl_dir,
        timings={"sfl": 1.0},
        content=overview_content(None, sfl_dir),
    )
    # Execute
    study_page = check_page(report, screenshot=tmp_path / "sfl.png")
    overview_page = check_page(overview)
    # Assert: the study page shows every figure it embeds, decoded, with no errors.
    assert study_page.loaded and study_page.console_errors == []
    assert n_figures >= 2 and len(study_page.images) == n_figures
    assert study_page.broken_images == []
    assert (tmp_path / "sfl.png").stat().st_size > 10_000
    # The overview: loads cleanly, names the schemes, and its link finds the study.
    assert overview_page.loaded and overview_page.console_errors == []
    html = overview.read_text()
    assert "&lt;script&gt;" in html and "<script>alert" not in html
    assert 'href="../sfl/report.html"' in html
    assert (overview.parent / "../sfl/report.html").resolve() == report.resolve()
    schemes = json.loads((sfl_dir / "results.json").read_text())["schemes"]
    assert all(s in html for s in schemes)
