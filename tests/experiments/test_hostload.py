"""The contention meter counts our children's CPU time as ours, not as foreign."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys

import pytest

from flowsplit.experiments.dp.hostload import (
    ContentionMeter,
    busy_share,
    descendants_cpu_s,
    read_cpu_ticks,
)

needs_proc_stat = pytest.mark.skipif(read_cpu_ticks() is None, reason="no /proc/stat here")


@needs_proc_stat
def test_meter_attributes_a_child_burning_cpu_to_us():
    # Prepare: a child that spins ~0.4 s of CPU.
    burn = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.4: pass"
    # Execute
    with ContentionMeter(cores=2) as meter:
        subprocess.run([sys.executable, "-c", burn], check=True)
    res = meter.result
    # Assert: our CPU time includes the child's; the rest is small and never negative.
    assert res.own_cpu_s >= 0.35
    assert res.foreign_cpu_s >= 0.0
    assert res.wall_s >= 0.4
    assert 0.0 <= res.foreign_share <= 1.0 + 1e-9


@needs_proc_stat
def test_meter_counts_a_live_grandchild_through_extra_own():
    # Prepare: a child that starts a grandchild spinning ~0.4 s of CPU and then both
    # sleep, alive past the metered block (as pooled workers and a Dask cluster are).
    burn = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.4: pass\n"
    inner = f"{burn}print('done', flush=True)\ntime.sleep(30)"
    outer = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', {inner!r}])\n"
        "time.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", outer], stdout=subprocess.PIPE, text=True)
    try:
        # Execute
        with ContentionMeter(cores=2, extra_own=descendants_cpu_s) as meter:
            # the grandchild inherits the pipe: its line says it has burnt its CPU
            assert child.stdout.readline().strip() == "done"
        # Assert: its CPU is ours, though neither process has ended.
        assert meter.result.own_cpu_s >= 0.35
        assert descendants_cpu_s() >= 0.35
    finally:
        for pid in _descendants_of(child.pid):
            os.kill(pid, signal.SIGKILL)
        child.kill()
        child.wait()
    # A process with no descendants has none of their time.
    assert descendants_cpu_s(child.pid) == 0.0


def _descendants_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


@needs_proc_stat
def test_busy_share_is_a_fraction():
    share = busy_share(0.2)
    assert math.isnan(share) or 0.0 <= share <= 1.0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_cell_process_dies_with_the_study_that_started_it():
    # Prepare: a stand-in for `compare` that starts a long "training run" and is then
    # killed the way `timeout` kills (SIGKILL).
    import os
    import signal
    import time

    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys\n"
            "from flowsplit.util import die_with_parent\n"
            "p = subprocess.Popen(['sleep', '60'], preexec_fn=die_with_parent)\n"
            "print(p.pid, flush=True)\n"
            "p.wait()",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    child = int(parent.stdout.readline())
    # Execute
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    # Assert: the orphan got SIGTERM and is gone within a few seconds.
    deadline = time.monotonic() + 5
    alive = True
    while alive and time.monotonic() < deadline:
        try:
            os.kill(child, 0)
            with open(f"/proc/{child}/stat") as fh:
                alive = fh.read().split()[2] != "Z"
        except (ProcessLookupError, FileNotFoundError):
            alive = False
        time.sleep(0.05)
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive
