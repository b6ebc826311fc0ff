"""A killed launcher's processes leave in silence (issue 31 items 4 and 8).

``sfl run --mode dist`` and ``train --workers 2`` started from the command line, their
launcher SIGKILLed mid-run (what a cell timeout or the OOM killer does): every process
they started is gone within seconds, and standard error, which the roles share with
the launcher, stays empty: no Python traceback, no C++ frame, no 'Connection reset by
peer'. And the launcher's heartbeat watch does not take a job stopped with Ctrl-Z for
a silent server once it is continued.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from flowsplit.federated.dist.liveness import HEARTBEAT_KEY, HeartbeatWatch
from tests.federated._procs import TAG, tagged, wait_for

ROOT = Path(__file__).resolve().parents[2]
SMALL_CNN = ["--model", "cnn", "--model-option", "channels=[4,4]", "--model-option", "hidden=8"]


def _kill_launcher_when(
    args: list[str], ready, *, cwd: Path, sig: signal.Signals = signal.SIGKILL
) -> tuple[str, list[int], int, int | None]:
    """Start ``python -m flowsplit ARGS`` (tagged, a session of its own, stderr to a file),
    send it ``sig`` once ``ready()``; returns (its stderr, processes left 10 s after it
    ended, how many processes it had started, its exit code)."""
    tag = uuid.uuid4().hex
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flowsplit", *args],
            cwd=cwd,
            env={**os.environ, TAG: tag, "OMP_NUM_THREADS": "1"},
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
        try:
            # Importing torch in three or more interpreters: slow on a loaded machine.
            if not wait_for(lambda: ready() or proc.poll() is not None, 180, 0.1) or not ready():
                err.seek(0)
                pytest.fail(f"the run never got under way: {err.read().decode()[-2000:]}")
            started = len(tagged(tag)) - 1
            proc.send_signal(sig)
            rc = proc.wait(60)
            wait_for(lambda: not tagged(tag), 10)
            left = tagged(tag)
            time.sleep(1.0)  # anything still running gets the chance to write
            err.seek(0)
            return err.read().decode(errors="replace"), left, started, rc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pid in tagged(tag):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow  # five processes
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("round_", [1, 2])
def test_a_killed_dist_launcher_leaves_no_process_and_nothing_on_stderr(dataset, tmp_path, round_):
    # Prepare: sfl run --mode dist with 2 clients and 1 aggregator, under way in round_.
    out = tmp_path / "run"
    args = ["sfl", "run", str(dataset), "-o", str(out), "--mode", "dist", *SMALL_CNN]
    args += ["--clients", "2", "--aggregators", "1", "--rounds", "500", "--batch-size", "16"]
    args += ["--timeout", "5", "--quiet"]
    log = out / "logs" / "server.log"

    def under_way() -> bool:
        return log.is_file() and f"round {round_} starts" in log.read_text(errors="replace")

    # Execute: SIGKILL the launcher, which it cannot handle.
    err, left, started, _ = _kill_launcher_when(args, under_way, cwd=ROOT)
    # Assert: the fork server and 4 roles had started; none is left, and they said nothing.
    assert started >= 5, started
    assert left == [], left
    assert err == "", err
    assert not (out / "metrics.json").exists()


@pytest.mark.slow  # three processes
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_ddp_launcher_leaves_no_worker_and_nothing_on_stderr(dataset, tmp_path):
    # Prepare: train --workers 2, under way (its first checkpoint written).
    out = tmp_path / "run"
    args = ["train", str(dataset), *SMALL_CNN, "-o", str(out), "--workers", "2"]
    args += ["--epochs", "500", "--batch-size", "16", "--threads", "1", "--timeout", "10", "-q"]
    # Execute
    err, left, started, _ = _kill_launcher_when(args, (out / "checkpoint.pt").is_file, cwd=ROOT)
    # Assert: both workers had started; neither is left, and neither said anything.
    assert started >= 2, started
    assert left == [], left
    assert err == "", err


@pytest.mark.slow  # three processes
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_terminated_ddp_launcher_ends_its_workers_and_says_so_in_one_line(dataset, tmp_path):
    # Prepare: train --workers 2, under way (its first checkpoint written).
    out = tmp_path / "run"
    args = ["train", str(dataset), *SMALL_CNN, "-o", str(out), "--workers", "2"]
    args += ["--epochs", "500", "--batch-size", "16", "--threads", "1", "--timeout", "10", "-q"]
    # Execute: SIGTERM (what kill, systemd or a scheduler sends); it died silently before.
    err, left, _, rc = _kill_launcher_when(
        args, (out / "checkpoint.pt").is_file, cwd=ROOT, sig=signal.SIGTERM
    )
    # Assert: one handled line saying what stopped it and how to continue; no worker left.
    assert rc == 2, (rc, err)
    assert err.splitlines() == [
        "flowsplit: error: stopped by SIGTERM: every worker was ended (continue from the "
        "last checkpoint with --resume RUN)"
    ], err
    assert left == [], left
    assert (out / "checkpoint.pt").is_file() and not (out / "metrics.json").exists()


class _Store:
    def __init__(self):
        self.counts: dict[str, int] = {}

    def add(self, key: str, n: int) -> int:
        self.counts[key] = self.counts.get(key, 0) + n
        return self.counts[key]


class _Proc:
    def is_alive(self) -> bool:
        return True


def test_the_heartbeat_watch_counts_silence_afresh_after_the_launcher_stood_still(monkeypatch):
    # Prepare: the server (rank 0) beats; the watch has seen it; the clock is ours.
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    store = _Store()
    watch = HeartbeatWatch(store, [_Proc()], 1, timeout_s=5.0)
    store.add(HEARTBEAT_KEY.format(rank=0), 1)
    assert watch.silent() is None
    # Execute: the whole job stopped 40 s (Ctrl-Z, then fg); the first check after it.
    clock[0] += 40.0
    # Assert: not silent (it stood still with the launcher) ...
    assert watch.silent() is None
    # ... but a server that stays silent for the limit while the launcher checks is.
    for _ in range(11):
        clock[0] += 0.5
        found = watch.silent()
    assert found == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_launcher_not_yet_reaped_counts_as_gone():
    # A SIGKILLed launcher is a zombie until its parent reaps it; kill(pid, 0) still
    # succeeds then, and a role whose store connection was reset took it for alive
    # (and printed 'internal error: DistNetworkError' on the terminal).
    from flowsplit.util import pid_alive

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_alive(child.pid)
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not pid_alive(child.pid)
        assert child.returncode is None  # not reaped: a zombie, told apart from a live one
    finally:
        child.kill()
        child.wait()


def test_a_launcher_that_ends_within_the_wait_counts_as_gone_and_a_live_one_does_not():
    from flowsplit.federated.dist.liveness import launcher_gone

    # Prepare: a process that ends 0.3 s from now (as a killed launcher tearing down its
    # sockets before it is gone), and one that lives on.
    ending = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    living = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        # Assert: the first is gone within a 5-s wait (reaped here: a zombie counts as
        # gone as well); the second is not after 0.2 s, and that wait took its 0.2 s.
        time.sleep(0.05)
        assert launcher_gone(ending.pid, within=5.0)
        start = time.monotonic()
        assert not launcher_gone(living.pid, within=0.2)
        assert time.monotonic() - start >= 0.2
    finally:
        living.kill()
        living.wait()
        ending.wait()
