"""The local launcher's workers do not outlive it (a compare cell timeout SIGKILLs it)."""

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
from flowsplit.train.launch import launch_local

def work(path):
    open(os.path.join(path, str(os.getpid())), "w").close()
    time.sleep(120)

if __name__ == "__main__":
    launch_local(work, (sys.argv[1],), n_workers=2, threads_per_worker=1)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in state  # a zombie has exited


@pytest.mark.slow  # three processes
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_die_when_the_launcher_is_killed(tmp_path):
    # Prepare: a launcher with two sleeping workers, each leading its own session.
    script = tmp_path / "launcher.py"
    script.write_text(SCRIPT)
    marks = tmp_path / "pids"
    marks.mkdir()
    launcher = subprocess.Popen([sys.executable, str(script), str(marks)])
    try:
        deadline = time.monotonic() + 60
        while len(list(marks.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = [int(p.name) for p in marks.iterdir()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        # Execute: what subprocess.run(timeout=...) does to a cell.
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        # Assert: both workers are gone within seconds.
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids)
    finally:
        launcher.kill()
        for p in marks.iterdir():
            if _alive(int(p.name)):
                os.kill(int(p.name), signal.SIGKILL)
