"""``python -m flowsplit.train`` under torchrun: two nodes on loopback, and a killed worker.

Both compare against the centralised run on the same global batches, so they
check the numbers, not only that torchrun exited 0.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest
import torch

from flowsplit.result import RunResult
from flowsplit.train.checkpoint import load_checkpoint
from flowsplit.train.config import TrainConfig
from flowsplit.train.loop import train_worker
from tests.conftest import free_port
from tests.train.synth import write_synthetic

pytestmark = pytest.mark.slow

OPTIONS = {"dropout": 0.0, "channels": [4, 8], "hidden": 16, "embed": 4}
TRAIN_ARGS = shlex.split(
    "--model cnn --epochs 2 --batch-size 16 --patience 0 -q --threads 1 "
    "--model-option dropout=0 --model-option channels=[4,8] --model-option hidden=16 "
    "--model-option embed=4"
)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The dataset and the centralised run's last weights."""
    root = tmp_path_factory.mktemp("torchrun")
    data = write_synthetic(root / "data", n=80)
    cfg = TrainConfig(
        dataset=str(data),
        model="cnn",
        out=str(root / "central"),
        epochs=2,
        batch_size=16,
        patience=0,
        quiet=True,
        threads=1,
        model_options=OPTIONS,
    )
    train_worker(cfg)
    return data, load_checkpoint(root / "central" / "checkpoint.pt")["model"]


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args]


def _env() -> dict[str, str]:
    # Gloo binds its sockets to the loopback interface; one thread per worker.
    return {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}


def _max_diff(a: dict, b: dict) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_two_node_torchrun_on_loopback(reference, tmp_path):
    # Prepare: two "nodes", one worker each, static rendezvous on a free loopback port.
    data, central = reference
    port = str(free_port())
    run = tmp_path / "run"
    node = f"--nnodes 2 --nproc-per-node 1 --master-addr 127.0.0.1 --master-port {port}"
    cmd = [*node.split(), "-m", "flowsplit.train", str(data), "-o", str(run), *TRAIN_ARGS]
    # Execute
    procs = [
        subprocess.Popen(
            _torchrun("--node-rank", str(r), *cmd),
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in (0, 1)
    ]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    # Assert
    assert [p.returncode for p in procs] == [0, 0], outs
    r = RunResult.from_json(run)
    assert (r.engine, r.workers, r.backend, len(r.peak_rss_mb)) == ("ddp", 2, "gloo", 2)
    assert _max_diff(central, load_checkpoint(run / "checkpoint.pt")["model"]) < 1e-5


def test_worker_killed_under_torchrun_resumes_from_the_checkpoint(reference, tmp_path):
    # Prepare: rank 1 SIGKILLs itself after epoch 0 (only in a run that did not resume);
    # torchrun may restart the group. One spare restart absorbs a rendezvous hiccup on a
    # loaded machine (seen once in about eight suite runs); the assertions below still
    # require that the run resumed from the checkpoint and ended on the right weights.
    data, central = reference
    run = tmp_path / "run"
    launcher = f"--nnodes 1 --nproc-per-node 2 --max-restarts 2 --master-port {free_port()}"
    cmd = _torchrun(
        *launcher.split(),
        "--master-addr",
        "127.0.0.1",
        "-m",
        "flowsplit.train",
        str(data),
        "-o",
        str(run),
        "--fail-after-epoch",
        "0",
        *TRAIN_ARGS,
    )
    # Execute
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=240)
    # Assert: the group was restarted, resumed at epoch 1, and ended on the centralised weights.
    assert done.returncode == 0, done.stdout + done.stderr
    r = RunResult.from_json(run)
    assert r.extra["resumed"] and r.epochs_run == 2 and r.workers == 2
    assert "resumed" in (run / "train.log").read_text()
    assert _max_diff(central, load_checkpoint(run / "checkpoint.pt")["model"]) < 1e-5
    assert torch.tensor(r.loss_per_epoch).isfinite().all()
