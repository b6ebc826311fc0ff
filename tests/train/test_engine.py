"""The centralised engine through the CLI: run directory, resume, early stopping, errors."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from flowsplit.cli import main as cli_main
from flowsplit.result import RunResult
from flowsplit.train.checkpoint import load_checkpoint
from tests.train.synth import write_synthetic

SMALL_CNN = [
    "--model-option",
    "channels=[4,8]",
    "--model-option",
    "hidden=16",
    "--model-option",
    "embed=4",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_synthetic(tmp_path_factory.mktemp("data") / "ds", n=90)


def _train(data, run, *extra: str) -> int:
    args = [
        "train",
        str(data),
        "--model",
        "cnn",
        "-o",
        str(run),
        "-q",
        "--batch-size",
        "16",
        "--threads",
        "1",
    ]
    return cli_main([*args, *SMALL_CNN, *extra])


def test_run_directory_holds_config_weights_log_and_metrics(data, tmp_path, capsys):
    # Execute
    rc = _train(data, tmp_path / "run", "--epochs", "2")
    ev = cli_main(["evaluate", str(tmp_path / "run"), str(data), "--json"])
    # Assert
    assert rc == 0 and ev == 0
    run = tmp_path / "run"
    for name in (
        "config.json",
        "metrics.json",
        "weights.safetensors",
        "train.log",
        "checkpoint.pt",
    ):
        assert (run / name).is_file(), name
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["train"]["model"] == "cnn" and cfg["model"]["view"] == "bytes"
    assert cfg["model"]["options"]["channels"] == [4, 8] and cfg["layout"]["global_batch"] == 16
    r = RunResult.from_json(run)
    assert (r.engine, r.workers, r.backend, r.epochs_run) == ("centralised", 1, None, 2)
    assert len(r.loss_per_epoch) == len(r.val_macro_f1_per_epoch) == len(r.epoch_times_s) == 2
    assert sum(map(sum, r.confusion_matrix)) == r.n_test == len(r.test_predictions)
    assert r.samples_per_s > 0 and r.env["torch"] == torch.__version__
    # evaluate on the same test split reproduces the run's own test metrics
    printed = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert printed["accuracy"] == pytest.approx(r.accuracy)
    assert printed["macro_f1"] == pytest.approx(r.macro_f1)
    # the saved weights are the best-validation epoch's
    best = load_checkpoint(run / "checkpoint.pt")["best"]["state"]
    saved = load_file(str(run / "weights.safetensors"))
    assert all(torch.equal(saved[k], best[k]) for k in best)


def test_killed_run_resumed_ends_where_an_uninterrupted_one_does(data, tmp_path):
    # Prepare: dropout on, so per-epoch RNG seeding is part of what must match.
    common = ("--epochs", "3", "--patience", "0", "--model-option", "dropout=0.3")
    # Execute
    assert _train(data, tmp_path / "full", *common) == 0
    assert _train(data, tmp_path / "cut", *common, "--fail-after-epoch", "0") == 1  # crashed
    assert not (tmp_path / "cut" / "metrics.json").exists()
    assert load_checkpoint(tmp_path / "cut" / "checkpoint.pt")["epoch"] == 1
    assert cli_main(["train", "--resume", str(tmp_path / "cut"), "-q"]) == 0
    # Assert: bit-identical weights, and the histories line up epoch by epoch.
    full = load_checkpoint(tmp_path / "full" / "checkpoint.pt")["model"]
    cut = load_checkpoint(tmp_path / "cut" / "checkpoint.pt")["model"]
    assert all(torch.equal(full[k], cut[k]) for k in full)
    a, b = RunResult.from_json(tmp_path / "full"), RunResult.from_json(tmp_path / "cut")
    assert a.loss_per_epoch == b.loss_per_epoch and len(b.epoch_times_s) == 3
    assert b.extra["resumed"] and a.accuracy == b.accuracy


def test_early_stopping_keeps_the_best_epoch(data, tmp_path):
    # A learning rate too small to change predictions: no epoch beats the first.
    assert _train(data, tmp_path / "run", "--epochs", "6", "--patience", "2", "--lr", "1e-12") == 0
    r = RunResult.from_json(tmp_path / "run")
    assert (r.epochs_run, r.best_epoch, r.stopped_early) == (3, 0, True)


def test_resume_refuses_to_change_the_experiment(data, tmp_path, capsys):
    assert _train(data, tmp_path / "run", "--epochs", "1") == 0
    capsys.readouterr()
    assert _train(data, tmp_path / "run", "--epochs", "1") == 2  # would overwrite
    assert cli_main(["train", "--resume", str(tmp_path / "run"), "--lr", "0.1", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "already holds a run" in err[0] and "cannot change lr" in err[1]
    assert len(err) == 2  # one line each, no traceback


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "resnet"], "unknown model 'resnet'"),
        (["--model", "convlstm", "--view", "seq"], "reads the views pkt_bytes, bytes"),
        (["--model", "cnn", "--workers", "500"], "more than the 54 training samples"),
        (["--model", "cnn", "--batch-size", "15", "--workers", "2"], "multiple of 2"),
        (["--model", "cnn", "--model-option", "width=3"], "cnn has no option width"),
    ],
)
def test_bad_options_fail_in_one_line(data, tmp_path, capsys, args, message):
    rc = cli_main(["train", str(data), "-o", str(tmp_path / "run"), "-q", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("flowsplit: error:")
    assert message in err[0]


def test_missing_view_is_named(tmp_path, capsys):
    import pandas as pd

    from flowsplit.data.store import load_dataset, write_dataset

    src = load_dataset(write_synthetic(tmp_path / "full", n=30))
    only_stats = write_dataset(
        tmp_path / "stats-only",
        meta=src.meta,
        classes=src.classes,
        stats=pd.DataFrame(src.view("stats")),
    )
    rc = cli_main(["train", str(only_stats), "--model", "lstm", "-o", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and "lstm needs one of the views pkt_bytes, bytes, seq" in err
