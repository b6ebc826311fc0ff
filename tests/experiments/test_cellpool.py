"""Cells run in long-lived processes train exactly what a process of their own would.

Real processes (spawned workers, gloo on 127.0.0.1), a small CNN on a synthetic set:
one pool of 1 and one of 2 processes, each serving several runs.
"""

from __future__ import annotations

import argparse

import pytest
from safetensors.torch import load_file

from flowsplit.experiments.dp.cellpool import CellPools
from flowsplit.experiments.dp.hostload import descendants_cpu_s
from flowsplit.result import RunResult
from flowsplit.train.commands import add_train_arguments, cmd_train
from tests.train.synth import write_synthetic

pytestmark = pytest.mark.slow

# Dropout off: its masks are seeded per rank, so 2 workers would differ from 1 process.
OPTS = "--model cnn --threads 1 --epochs 2 --batch-size 8 -q --model-option embed=4"
OPTS += " --model-option dropout=0.0"


def _argv(data, run, workers: int, seed: int) -> list[str]:
    return [
        str(data),
        "-o",
        str(run),
        "--workers",
        str(workers),
        "--seed",
        str(seed),
        *OPTS.split(),
    ]


def _weights(run) -> dict:
    return load_file(run / "weights.safetensors")


def _same_weights(a, b, tol: float = 0.0) -> bool:
    wa, wb = _weights(a), _weights(b)
    return wa.keys() == wb.keys() and all((wa[k] - wb[k]).abs().max() <= tol for k in wa)


@pytest.fixture(scope="module")
def pools():
    """One pool of each size for the module: each spawn imports torch (seconds)."""
    with CellPools() as p:
        yield p


def test_pooled_runs_equal_their_own_process_run_after_run(tmp_path, pools):
    # Prepare: the reference run, trained by `flowsplit train`'s function here.
    data = write_synthetic(tmp_path / "data", n=80)
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    assert cmd_train(parser.parse_args(_argv(data, tmp_path / "own", 1, 0))) == 0
    log = tmp_path / "cell.log"
    # Execute: seed 0, another seed, seed 0 again in one process; seed 0 twice on 2.
    for name, workers, seed in [("a", 1, 0), ("b", 1, 1), ("c", 1, 0), ("d", 2, 0), ("e", 2, 0)]:
        ok, status = pools.run(
            _argv(data, tmp_path / name, workers, seed),
            world=workers,
            threads=1,
            log_path=log,
            timeout_s=120,
        )
        assert ok, status + log.read_text()
    own_cpu = descendants_cpu_s()  # the pools are alive: their CPU time so far
    # Assert: nothing of one run carries over into the next ...
    own, a, c = (RunResult.from_json(tmp_path / n) for n in ("own", "a", "c"))
    for r in (a, c):
        assert r.test_predictions == own.test_predictions
        assert r.loss_per_epoch == own.loss_per_epoch
    assert _same_weights(tmp_path / "own", tmp_path / "a")
    assert _same_weights(tmp_path / "own", tmp_path / "c")
    assert not _same_weights(tmp_path / "a", tmp_path / "b")  # the seed is the run's own
    # ... a second process group in the same ranks trains the same, and it is data
    # parallelism: 2 workers end where 1 process ends, up to summation order.
    d, e = RunResult.from_json(tmp_path / "d"), RunResult.from_json(tmp_path / "e")
    assert (d.workers, d.backend, e.workers) == (2, "gloo", 2)
    assert d.loss_per_epoch == e.loss_per_epoch
    assert _same_weights(tmp_path / "d", tmp_path / "e")
    assert _same_weights(tmp_path / "own", tmp_path / "d", tol=1e-5)
    # The pooled processes' CPU time is visible to the contention meter (torch's import
    # alone is a CPU-second and more in each).
    assert own_cpu > 1.0


def test_a_failed_cell_reports_its_error_and_the_next_cell_gets_a_new_pool(tmp_path, pools):
    # Prepare
    data = write_synthetic(tmp_path / "data", n=80)
    log = tmp_path / "cell.log"
    # Execute: an unknown model (refused by train's checks), then a good run.
    bad = _argv(data, tmp_path / "bad", 2, 0) + ["--model", "nope"]
    ok, status = pools.run(bad, world=2, threads=1, log_path=log, timeout_s=120)
    text = log.read_text()
    good_ok, good_status = pools.run(
        _argv(data, tmp_path / "good", 2, 0), world=2, threads=1, log_path=log, timeout_s=120
    )
    # Assert: the error is the command line's one line, in the cell's log.
    assert not ok and status.startswith("exit status 2")
    assert "nope" in text and "Traceback" not in text
    assert good_ok, good_status + log.read_text()
    assert RunResult.from_json(tmp_path / "good").workers == 2
