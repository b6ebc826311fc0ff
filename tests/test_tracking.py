"""--log-to tensorboard[:DIR]: the events written hold exactly metrics.json's series."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

from flowsplit.cli import main
from flowsplit.tracking import LogTarget, finished_runs, parse_log_to, run_scalars, write_study
from tests.federated._toy import write_toy_dataset
from tests.train.synth import write_synthetic

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

SMALL = ["--model-option", "channels=[4,4]", "--model-option", "hidden=8"]


def read_events(where) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series of the event files in ``where``, read back by TensorBoard."""
    acc = EventAccumulator(str(where), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def as_float32(series):
    return {tag: [(s, float(np.float32(v))) for s, v in pts] for tag, pts in series.items()}


def leaves(record, prefix=""):
    for key, value in record.items():
        path = f"{prefix}/{key}" if prefix else key
        if isinstance(value, dict):
            yield from leaves(value, path)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            yield path, value


def test_train_events_equal_metrics_json_series(tmp_path, capsys):
    # Prepare
    data = write_synthetic(tmp_path / "ds", n=60)
    run = tmp_path / "run"
    board = tmp_path / "board"
    argv = ["train", str(data), "--model", "cnn", "-q", "--threads", "1", "--epochs", "3"]
    argv += ["--batch-size", "16", *SMALL, "-o", str(run), "--log-to", f"tensorboard:{board}"]
    # Execute
    rc = main(argv)
    # Assert: one event directory named after the run, one final line naming it
    assert rc == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and f"tensorboard: {board / 'run'}" in out[0]
    events = read_events(board / "run")
    metrics = json.loads((run / "metrics.json").read_text())
    for key, tag in (
        ("loss_per_epoch", "train/loss"),
        ("epoch_times_s", "train/epoch_time_s"),
        ("val_macro_f1_per_epoch", "val/macro_f1"),
    ):
        want = [(i, float(np.float32(v))) for i, v in enumerate(metrics[key], start=1)]
        assert len(want) == 3
        assert events[tag] == want, tag
    best = metrics["best_epoch"] + 1
    assert events["test/accuracy"] == [(best, float(np.float32(metrics["accuracy"])))]


def test_sfl_run_events_hold_every_round_series_with_tier_bytes_and_delays(tmp_path):
    # Prepare
    data = write_toy_dataset(tmp_path / "ds", n=120)
    run = tmp_path / "run"
    argv = ["sfl", "run", str(data), "--scheme", "hsfl", "--model", "cnn", *SMALL]
    argv += ["--clients", "3", "--aggregators", "2", "--rounds", "2", "--batch-size", "16"]
    argv += ["-o", str(run), "--quiet", "--log-to", "tensorboard"]
    # Execute
    rc = main(argv)
    # Assert: inside RUN/tensorboard, every number of every round, step = round
    assert rc == 0
    events = read_events(run / "tensorboard")
    rounds = json.loads((run / "metrics.json").read_text())["rounds"]
    want: dict[str, list] = {}
    for record in rounds:
        for path, value in leaves(record):
            if path != "round" and math.isfinite(value):
                tag = path if "/" in path else f"round/{path}"
                want.setdefault(tag, []).append((record["round"], float(np.float32(value))))
    assert events == want
    assert any(t.startswith("bytes/client-aggregator/up/") for t in events)
    assert any(t.startswith("bytes/aggregator-server/down/") for t in events)
    assert "delay/train_s" in events and "round/delay_s" in events
    assert [s for s, _ in events["round/accuracy"]] == [1, 2]


def test_a_study_writes_one_subdirectory_per_run(tmp_path):
    # Prepare: two finished runs' metrics.json under a study folder
    study = tmp_path / "study"
    for name, loss in (("cnn/seed0", [1.0, 0.5]), ("lstm/seed0", [2.0, 1.5])):
        (study / "runs" / name).mkdir(parents=True)
        metrics = {"kind": "train", "loss_per_epoch": loss, "best_epoch": 1, "accuracy": 0.5}
        (study / "runs" / name / "metrics.json").write_text(json.dumps(metrics))
    # Execute
    top = write_study(LogTarget("tensorboard"), study, finished_runs(study))
    again = finished_runs(study)  # the tracker's own folder is not a run
    # Assert
    assert top == study / "tensorboard"
    assert read_events(top / "runs/cnn/seed0")["train/loss"] == [(1, 1.0), (2, 0.5)]
    assert read_events(top / "runs/lstm/seed0")["train/loss"] == [(1, 2.0), (2, 1.5)]
    assert len(again) == 2


def test_nan_is_left_out_not_written():
    series = run_scalars({"kind": "train", "loss_per_epoch": [1.0, None, float("nan"), 0.5]})
    assert series["train/loss"] == [(1, 1.0), (4, 0.5)]


def test_without_the_package_one_line_names_the_extra(tmp_path, monkeypatch, capsys):
    # Prepare: tensorboard not importable
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    # Execute
    rc = main(
        ["train", str(tmp_path), "--model", "cnn", "-o", str(tmp_path / "r")]
        + [
            "--log-to",
            "tensorboard",
        ]
    )
    # Assert
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "flowsplit[tracking]" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("text", ["wandb", "tensorboard:", "mlflow:/tmp/x"])
def test_unknown_tracker_or_empty_dir_is_refused(text, capsys):
    with pytest.raises(Exception) as info:
        parse_log_to(text)
    assert "--log-to" in str(info.value)
    rc = main(["sfl", "run", "DS", "-o", "O", "--log-to", text])
    assert rc == 2 and "--log-to" in capsys.readouterr().err
