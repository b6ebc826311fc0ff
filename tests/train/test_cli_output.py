"""What `flowsplit train` leaves on the terminal: one summary line at the end, and no
Dask or XGBoost worker chatter when data-parallel XGBoost succeeds (it goes to the
run's log instead)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from flowsplit.cli import main
from tests.train.synth import write_synthetic

CHATTER = ("got rank", "Worker process still alive", "distributed.", "Traceback")


def test_train_ends_with_one_summary_line_and_logs_the_engines_own(tmp_path, capsys):
    # Prepare: not quiet, so the per-epoch lines show too
    data = write_synthetic(tmp_path / "ds", n=60)
    run = tmp_path / "run"
    argv = ["train", str(data), "--model", "cnn", "--threads", "1", "--epochs", "2"]
    argv += ["--batch-size", "16", "--model-option", "channels=[4,4]", "-o", str(run)]
    # Execute
    rc = main(argv)
    # Assert: one line names the run directory (the summary, last); the engine's own
    # final line is in train.log, not on the terminal a second time
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0
    naming = [line for line in out if line.endswith(f"-> {run}")]
    assert naming == [out[-1]] and out[-1].startswith("cnn on bytes, 1 worker(s) x 1 thread(s)")
    assert "test accuracy" in (run / "train.log").read_text()
    assert os.environ.get("FLOWSPLIT_CLI_SUMMARY") is None  # not left set in this process


@pytest.mark.slow
def test_data_parallel_xgboost_keeps_dask_chatter_off_the_terminal(tmp_path):
    # Prepare
    data = write_synthetic(tmp_path / "ds", n=60)
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "flowsplit", "train", str(data), "--model", "xgboost"]
    argv += ["--workers", "2", "--threads", "1", "--boost-rounds", "5", "-o", str(run)]
    env = {**os.environ, "FLOWSPLIT_PROGRESS": "0"}
    # Dask's default dashboard port taken (CI once had another cluster on it: a warning
    # on stderr); the cluster's HTTP server must not need it.
    busy = socket.socket()
    try:
        busy.bind(("0.0.0.0", 8787))
        busy.listen()
    except OSError:
        pass  # already taken by someone else: the same condition
    # Execute
    with busy:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240)
    # Assert: success, nothing on stderr, one line on stdout naming the run; the
    # workers' own lines are kept in the run's log
    assert proc.returncode == 0, proc.stderr
    assert not any(c in proc.stderr for c in CHATTER), proc.stderr
    assert proc.stderr.strip() == ""
    lines = proc.stdout.strip().splitlines()
    assert len([line for line in lines if str(run) in line]) == 1, proc.stdout
    assert lines[-1].startswith("xgboost on stats, 2 worker(s) x 1 thread(s)")
    assert "got rank" in (run / "train.log").read_text()
