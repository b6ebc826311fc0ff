"""The comparison report, opened in headless Chromium: it loads, every figure decodes,
the console stays clean, and hostile class names stay text. Skips without Chromium."""

from __future__ import annotations

import pytest

from flowsplit.experiments.dp import compare as compare_mod
from flowsplit.experiments.dp.compare import run_compare
from flowsplit.report.browser import check_page, find_chromium
from tests.experiments.helpers import fake_allreduce, fake_runner, make_dataset


@pytest.mark.skipif(
    find_chromium() is None,
    reason="headless Chromium not installed (apt-get install chromium); browser check skipped",
)
@pytest.mark.slow
def test_compare_report_renders_in_chromium(tmp_path, monkeypatch):
    # Prepare: a small study from the fake engine (one model, two seeds, 1/2 workers)
    monkeypatch.setattr(compare_mod, "available_cores", lambda: 2)
    ds = make_dataset(tmp_path / "ds")
    out = tmp_path / "study"
    fake_allreduce(out)
    page = run_compare(
        ds,
        out,
        models=["convlstm"],
        workers=[2],
        seeds=2,
        quick=True,
        progress=False,
        run_cell_fn=fake_runner(),
    )
    # Execute
    res = check_page(page, screenshot=tmp_path / "report.png")
    # Assert: summary, time, accuracy x2, comm x2, speedup, 2 confusion matrices
    assert res.loaded
    assert res.title == "Centralised vs data-parallel training"
    assert len(res.images) >= 8
    assert res.broken_images == []
    assert res.console_errors == []
    assert (tmp_path / "report.png").stat().st_size > 10_000
