"""``train --label-smoothing`` (issue 32, a USTC-TFC2016 recipe lever): the option reaches
the loss, is recorded in config.json, and a value outside [0, 1) is one line, exit 2."""

from __future__ import annotations

import json

import pytest

from flowsplit.cli import main as cli_main
from flowsplit.errors import ConfigError
from flowsplit.result import RunResult
from flowsplit.train.config import TrainConfig
from tests.train.synth import write_synthetic

SMALL_CNN = ["--model-option", "channels=[4,8]", "--model-option", "hidden=16"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_synthetic(tmp_path_factory.mktemp("data") / "ds", n=60)


def _train(data, run, *extra: str) -> RunResult:
    argv = ["train", str(data), "-m", "cnn", "-o", str(run), "-q", "--batch-size", "16"]
    argv += ["--threads", "1", "--epochs", "1", "--patience", "0", *SMALL_CNN, *extra]
    assert cli_main(argv) == 0
    return RunResult.from_json(run)


def test_label_smoothing_raises_the_first_epochs_loss_and_is_recorded(data, tmp_path):
    plain = _train(data, tmp_path / "plain")
    smooth = _train(data, tmp_path / "smooth", "--label-smoothing", "0.5")
    cfg = json.loads((tmp_path / "smooth" / "config.json").read_text())["train"]
    assert cfg["label_smoothing"] == 0.5
    # the same seed, rows and start: only the target differs; half the mass spread over
    # the classes makes a confident prediction cost more, so the first epoch's loss rises
    assert smooth.loss_per_epoch[0] > plain.loss_per_epoch[0] + 1e-3


@pytest.mark.parametrize("value", [-0.1, 1.0])
def test_out_of_range_is_a_config_error(value):
    with pytest.raises(ConfigError, match=r"--label-smoothing must be in \[0, 1\)"):
        TrainConfig(dataset="ds", model="cnn", out="run", label_smoothing=value)


def test_cli_says_one_line_and_exits_2(data, tmp_path, capsys):
    rc = cli_main(
        ["train", str(data), "-m", "cnn", "-o", str(tmp_path / "r"), "--label-smoothing", "2"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "--label-smoothing must be in [0, 1), got 2.0" in err
    assert "Traceback" not in err
