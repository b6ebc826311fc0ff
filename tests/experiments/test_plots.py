"""The study's figures: what each panel shows and where its axes start (no pixels compared)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from flowsplit.experiments.dp import plots as plots
from flowsplit.experiments.dp.result import DatasetInfo, Prediction, ScalingFit
from tests.experiments.synthetic import paired_runs, study_results


def _prediction(n: int, speedup: float) -> Prediction:
    """A scaling-model row of which the chart reads workers and speedup."""
    nan = float("nan")
    return Prediction(n, nan, nan, nan, nan, nan, speedup, speedup / n, "10 GbE")


def _with_history(runs):
    """Give each run a per-epoch history: loss falling, validation F1 rising, 3 epochs."""
    return [
        replace(
            r,
            loss_per_epoch=[1.0, 0.6, 0.4],
            val_macro_f1_per_epoch=[0.5, 0.7, 0.8],
            epoch_times_s=[r.epoch_time_s * k for k in (1.5, 1.0, 1.0)],
        )
        for r in runs
    ]


def test_learning_curves_show_loss_and_f1_against_epoch_and_time():
    # Prepare: 5 seeds x (1, 2 workers), 10 s and 5.2 s epochs.
    central, parallel = paired_runs("cnn")
    runs = _with_history([*central, *parallel])
    # Execute
    fig = plots.learning_curves_chart("cnn", runs)
    # Assert: four panels, one line per run in each.
    loss_epoch, loss_time, f1_epoch, f1_time = fig.axes
    assert all(len(ax.get_lines()) == 10 for ax in fig.axes)
    np.testing.assert_allclose(loss_epoch.get_lines()[0].get_xdata(), [1, 2, 3])
    np.testing.assert_allclose(loss_epoch.get_lines()[0].get_ydata(), [1.0, 0.6, 0.4])
    # Training time is the running sum of the epoch times: 15, 25, 35 s for seed 0 centralised.
    np.testing.assert_allclose(loss_time.get_lines()[0].get_xdata(), [15.0, 25.0, 35.0])
    np.testing.assert_allclose(f1_time.get_lines()[0].get_ydata(), [0.5, 0.7, 0.8])
    assert f1_epoch.get_ylim()[0] == 0 and loss_epoch.get_ylim()[0] == 0
    labels = [t.get_text() for t in loss_epoch.get_legend().get_texts()]
    assert labels == ["1 worker", "2 workers"]


def test_speedup_measured_and_predicted_are_separate_panels():
    # Prepare: a model entry with predictions up to 1024 workers (150x), measured 1.9x.
    central, parallel = paired_runs("cnn")
    entry = study_results([*central, *parallel]).analysis.models["cnn"]
    rows = [_prediction(n, min(n, 150.0)) for n in (1, 2, 1024)]
    entry.scaling = ScalingFit(predictions={"10gbe": rows})
    # Execute
    measured, predicted = plots.speedup_chart("cnn", entry, {"10gbe": "10 GbE"}).axes
    # Assert: the measured panel is linear and holds no prediction; the other is log-log.
    assert measured.get_xscale() == "linear" and measured.get_yscale() == "linear"
    assert predicted.get_xscale() == "log" and predicted.get_yscale() == "log"
    assert max(max(line.get_ydata()) for line in measured.get_lines()) < 10
    assert measured.get_ylim()[0] == 0
    assert any(max(line.get_ydata()) == 150.0 for line in predicted.get_lines())


def test_accuracy_axes_start_at_zero_with_both_baselines_drawn():
    # Prepare: the model and the flow-statistics baseline, both 90 % against 50 % majority.
    recs = [*sum(paired_runs("cnn"), []), *sum(paired_runs("xgboost", acc=0.8), [])]
    analysis = study_results(recs).analysis
    # Execute
    ax = plots.quality_chart(analysis.models, "accuracy", "t", analysis.baselines).axes[0]
    # Assert
    assert ax.get_ylim()[0] == 0
    levels = {
        line.get_label().split(" ")[0]: line.get_ydata()[0]
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }
    assert levels == {"majority": pytest.approx(50.0), "XGBoost": pytest.approx(80.0)}


def test_per_class_chart_has_a_bar_per_model_and_the_majority_class():
    recs = sum(paired_runs("cnn"), [])
    recs = [replace(r, per_class_f1={"web": 0.9, "dns": 0.8}) for r in recs]
    res = study_results(recs)
    res.dataset = DatasetInfo(classes=["web", "dns"])
    res.per_class_f1 = {"cnn": {"1": {"web": 0.9, "dns": 0.8}}}
    ax = plots.per_class_chart(res).axes[0]
    heights = [p.get_height() for p in ax.patches]
    # cnn: 90, 80; majority ('web' always): F1 2 * 0.5 / 1.5 = 66.7 and 0.
    assert heights == pytest.approx([90.0, 80.0, 200 / 3, 0.0])
    assert ax.get_ylim()[0] == 0


def test_predictions_past_the_measured_workers_are_dashed_and_labelled_extrapolated():
    # Prepare: measured at 1 and 2 workers; predictions at 1, 2, 4 and 1024.
    central, parallel = paired_runs("cnn")
    entry = study_results([*central, *parallel]).analysis.models["cnn"]
    rows = [_prediction(n, min(n, 150.0)) for n in (1, 2, 4, 1024)]
    entry.scaling = ScalingFit(predictions={"10gbe": rows})
    # Execute
    _, predicted = plots.speedup_chart("cnn", entry, {"10gbe": "10 GbE"}).axes
    # Assert: solid up to 2 workers (checked), dashed from 2 on (extrapolated).
    lines = {line.get_label(): line for line in predicted.get_lines()}
    checked, beyond = lines["10 GbE, checked"], lines["10 GbE, extrapolated"]
    assert checked.get_linestyle() == "-" and list(checked.get_xdata()) == [1, 2]
    assert beyond.get_linestyle() == "--" and list(beyond.get_xdata()) == [2, 4, 1024]
    assert "dashed: unchecked extrapolation" in predicted.get_title()
