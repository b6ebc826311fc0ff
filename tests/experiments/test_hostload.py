"""The contention meter counts our children's CPU time as ours, not as foreign."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from flowsplit.experiments.hostload import ContentionMeter, busy_share, read_cpu_ticks

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
def test_busy_share_is_a_fraction():
    share = busy_share(0.2)
    assert math.isnan(share) or 0.0 <= share <= 1.0
