"""Ctrl-Z stops the DDP launcher's workers with it, and fg continues them (issue 31 item 8).

The workers lead sessions of their own (a fair CPU share under autogroup scheduling), so
the terminal's SIGTSTP reaches only the launcher; it has to pass it on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = """
import os, sys, time
from flowsplit.errors import FlowsplitError
from flowsplit.train.launch import launch_local

def work(path):
    with open(os.path.join(path, str(os.getpid())), "w") as f:
        f.write(os.environ.get("TORCH_CPP_LOG_LEVEL", "") + " ")
        f.write(os.environ.get("TORCH_SHOW_CPP_STACKTRACES", ""))
    for _ in range(40):  # 4 s of the worker's own time
        time.sleep(0.1)

if __name__ == "__main__":
    try:
        launch_local(work, (sys.argv[1],), n_workers=2, threads_per_worker=1, heartbeat_s=3)
    except FlowsplitError as exc:
        print(f"flowsplit: error: {exc}", file=sys.stderr)
        sys.exit(2)
"""


def _state(pid: int) -> str:
    """The one-letter state of ``pid`` in /proc (``T``: stopped), ``-`` once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "-"
    return stat.rpartition(")")[2].split()[0]


def _wait_for(check, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.05)
    return check()


@pytest.mark.slow  # three processes
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_z_stops_the_workers_and_fg_continues_them(tmp_path):
    # Prepare: a launcher in a process group of its own (a job, as a shell starts it;
    # not orphaned, so SIGTSTP's default action stops it) with two workers.
    script = tmp_path / "launcher.py"
    script.write_text(SCRIPT)
    marks = tmp_path / "pids"
    marks.mkdir()
    launcher = subprocess.Popen(
        [sys.executable, str(script), str(marks)],
        stderr=subprocess.PIPE,
        text=True,
        process_group=0,
    )
    pids: list[int] = []
    try:
        # Three interpreters import torch first: slow on a loaded machine.
        assert _wait_for(lambda: len(list(marks.iterdir())) == 2, 180)
        pids = [int(p.name) for p in marks.iterdir()]
        # The workers print no C++ warnings or stack frames (the launcher set it).
        assert _wait_for(lambda: all(p.read_text() for p in marks.iterdir()), 10)
        assert {p.read_text() for p in marks.iterdir()} == {"ERROR 0"}
        time.sleep(0.3)  # the launcher is in its join loop, its handlers installed
        # Execute: Ctrl-Z (the terminal sends SIGTSTP to the foreground job).
        os.killpg(launcher.pid, signal.SIGTSTP)
        # Assert: the launcher and both workers stop.
        assert _wait_for(lambda: _state(launcher.pid) == "T", 10), _state(launcher.pid)
        assert _wait_for(lambda: all(_state(p) == "T" for p in pids), 10), [_state(p) for p in pids]
        # Stopped longer than the heartbeat limit: not a frozen worker once continued.
        time.sleep(4)
        assert all(_state(p) == "T" for p in pids)
        # Execute: fg.
        os.killpg(launcher.pid, signal.SIGCONT)
        # Assert: every process runs again and the run completes without an error.
        assert _wait_for(lambda: all(_state(p) != "T" for p in [launcher.pid, *pids]), 10)
        _, err = launcher.communicate(timeout=60)
        assert launcher.returncode == 0, err
        assert err.strip() == ""
    finally:
        launcher.kill()
        launcher.wait()
        for pid in pids:
            if _state(pid) not in ("-", "Z"):
                os.kill(pid, signal.SIGKILL)
