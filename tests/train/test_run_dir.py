"""Runs that cannot be lost or stuck: resolved dataset paths, --overwrite, stale temps,
nonsense training sets refused or warned about."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from flowsplit.cli import main as cli_main
from tests.train.synth import write_synthetic

SMALL = [
    "--model",
    "cnn",
    "-q",
    "--threads",
    "1",
    "--batch-size",
    "16",
    "--model-option",
    "channels=[4,4]",
    "--model-option",
    "hidden=8",
    "--model-option",
    "embed=4",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_synthetic(tmp_path_factory.mktemp("rundir") / "ds", n=60)


def test_resume_finds_a_relative_dataset_from_another_directory(data, tmp_path, monkeypatch):
    # Prepare: train one epoch with DATASET given relative to its parent ...
    monkeypatch.chdir(data.parent)
    run = tmp_path / "run"
    assert cli_main(["train", data.name, "-o", str(run), "--epochs", "1", *SMALL]) == 0
    stored = json.loads((run / "config.json").read_text())["train"]["dataset"]
    assert stored == str(data.resolve())
    (run / "metrics.json").unlink()  # as if it had been stopped after epoch 1
    # ... and a temporary a kill left behind.
    stale = run / ".checkpoint.pt.k1ll3d.tmp"
    stale.write_bytes(b"half a checkpoint")
    # Execute: resume from elsewhere
    monkeypatch.chdir(tmp_path)
    rc = cli_main(["train", "--resume", str(run), "--epochs", "2", "-q"])
    # Assert
    assert rc == 0 and (run / "metrics.json").is_file()
    assert not stale.exists()


def test_a_run_without_checkpoint_is_restarted_with_overwrite(data, tmp_path, capsys):
    # Prepare: a run that died before its first checkpoint (config and log only), with a
    # file of the user's beside it.
    run = tmp_path / "run"
    assert cli_main(["train", str(data), "-o", str(run), "--epochs", "1", *SMALL]) == 0
    for name in ("checkpoint.pt", "metrics.json", "weights.safetensors"):
        (run / name).unlink()
    (run / "notes.txt").write_text("mine")
    (run / ".metrics.json.x1.tmp").write_text("{")
    capsys.readouterr()
    # Execute / Assert: refused, and the refusal says what to do
    assert cli_main(["train", str(data), "-o", str(run), "--epochs", "1", *SMALL]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "already holds a run" in err
    assert "stopped before its first checkpoint" in err and "--overwrite" in err
    # ... and --resume is not what works here: there is nothing to resume.
    assert cli_main(["train", "--resume", str(run), "-q"]) == 2
    assert "no checkpoint to resume from" in capsys.readouterr().err
    # Execute: --overwrite starts again; the user's file stays, the temp goes.
    rc = cli_main(["train", str(data), "-o", str(run), "--epochs", "1", "--overwrite", *SMALL])
    assert rc == 0 and (run / "metrics.json").is_file()
    assert (run / "notes.txt").read_text() == "mine"
    assert not (run / ".metrics.json.x1.tmp").exists()
    # A finished run is refused with the same advice, and --resume with --overwrite is nonsense.
    assert cli_main(["train", str(data), "-o", str(run), "--epochs", "1", *SMALL]) == 2
    assert "it has finished" in capsys.readouterr().err
    assert cli_main(["train", "--resume", str(run), "--overwrite", "-q"]) == 2
    assert "not both" in capsys.readouterr().err


def test_a_one_class_training_set_is_refused(tmp_path, capsys):
    one = write_synthetic(tmp_path / "one", n=30, n_classes=2, class_share=(1.0, 0.0))
    rc = cli_main(["train", str(one), "-o", str(tmp_path / "run"), *SMALL])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err
    assert "the train split has flows of one class only (class0)" in err


def test_a_batch_larger_than_the_training_set_is_warned_about(data, tmp_path, capsys):
    # 60 flows, 36 of them train; a batch of 64 -> one step an epoch.
    argv = [
        "train",
        str(data),
        "-o",
        str(tmp_path / "run"),
        "--epochs",
        "1",
        *SMALL,
        "--batch-size",
        "64",
    ]
    assert cli_main(argv) == 0
    err = capsys.readouterr().err
    assert "--batch-size 64 (global batch 64) is more than the 36 training rows" in err


def test_the_torchrun_entry_point_takes_overwrite_too(data, tmp_path):
    from flowsplit.train.__main__ import main as train_main

    # Prepare: RUN holds a run that never reached a checkpoint, and a stale temporary.
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    (run / ".checkpoint.pt.dead.tmp").write_bytes(b"")
    argv = [str(data), "-o", str(run), "--epochs", "1", *SMALL]
    # Execute / Assert: refused without --overwrite, trained with it
    assert train_main(argv) == 2
    assert train_main([*argv, "--overwrite"]) == 0
    assert (run / "metrics.json").is_file() and not (run / ".checkpoint.pt.dead.tmp").exists()


def test_the_cores_check_counts_only_this_machines_workers(data, tmp_path):
    from flowsplit.config_args import OVERSUBSCRIBE
    from flowsplit.errors import ConfigError
    from flowsplit.train.commands import (
        add_train_arguments,
        check_before_launch,
        config_from_args,
    )
    from flowsplit.train.distributed import available_cores

    # Prepare: a job of more workers than this machine could host alone, one thread each.
    many = OVERSUBSCRIBE * available_cores() + 1
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    cfg, _ = config_from_args(parser.parse_args([str(data), "-o", str(tmp_path / "r"), *SMALL]))
    cfg = dataclasses.replace(cfg, workers=many, threads=1, batch_size=many)
    # Execute / Assert: all of them here is refused; one of them here (torchrun across
    # machines, LOCAL_WORLD_SIZE 1) is not.
    with pytest.raises(ConfigError, match=f"--workers {many} x 1 thread"):
        check_before_launch(cfg, resume=False)
    check_before_launch(cfg, resume=False, local_workers=1)
