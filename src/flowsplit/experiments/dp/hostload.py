"""How much of the machine other processes took while a run was being timed.

On a shared machine (a laptop, a CI runner, a VM with steal time) a timing is only
as good as the CPU it got. :class:`ContentionMeter` reads the kernel's CPU counters
(``/proc/stat``) and this process's children's CPU time around a run: the busy CPU
time that is not ours is *foreign*; its share of ``cores x wall time`` says how
contended the run was. :func:`wait_for_quiet` holds a run back until the machine
is mostly idle. Both degrade to "unknown" where ``/proc/stat`` does not exist.
"""

from __future__ import annotations

import math
import os
import resource
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal
_STEAL_FIELD = 7


def read_cpu_ticks() -> tuple[float, float, float] | None:
    """(busy, total, steal) CPU seconds since boot, summed over the CPUs this process may
    run on (its affinity mask, the same CPUs the capacity counts), or None."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            lines = [ln.split() for ln in fh if ln.startswith("cpu")]
    except OSError:
        return None
    try:
        allowed = {f"cpu{i}" for i in os.sched_getaffinity(0)}
    except (AttributeError, OSError):
        allowed = None
    rows = [ln for ln in lines if ln[0] != "cpu" and (allowed is None or ln[0] in allowed)]
    if not rows:  # no per-CPU lines: the aggregate line
        rows = [ln for ln in lines if ln[0] == "cpu"]
    if not rows:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    busy = total = steal = 0
    for ln in rows:
        ticks = [int(x) for x in ln[1:9]] + [0] * max(0, 8 - len(ln[1:9]))
        busy += sum(ticks[i] for i in _BUSY_FIELDS)
        total += sum(ticks[:8])
        steal += ticks[_STEAL_FIELD]
    return busy / hz, total / hz, steal / hz


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _self_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def descendants_cpu_s(root: int | None = None) -> float:
    """CPU seconds used so far by the live descendants of ``root`` (default: this process),
    each with its own waited-for children, from ``/proc/PID/stat``; 0.0 without ``/proc``.

    With :func:`_children_cpu_s` this is conserved as processes end: a descendant's time
    moves into its parent's children's time when it is waited for, and is counted there.
    """
    root = os.getpid() if root is None else root
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return 0.0
    hz = os.sysconf("SC_CLK_TCK")
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                text = fh.read()
        except OSError:  # ended meanwhile
            continue
        # The fields after the command name (which may hold spaces and parentheses).
        fields = text.rsplit(")", 1)[-1].split()
        if len(fields) < 15:
            continue
        pid = int(name)
        parents[pid] = int(fields[1])
        cpu[pid] = sum(int(x) for x in fields[11:15]) / hz  # utime stime cutime cstime
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    total, stack = 0.0, list(children.get(root, []))
    while stack:
        pid = stack.pop()
        total += cpu.get(pid, 0.0)
        stack.extend(children.get(pid, []))
    return total


@dataclass
class Contention:
    """CPU use around one run: ours, other processes', and the hypervisor's steal."""

    wall_s: float
    cores: int
    own_cpu_s: float
    foreign_cpu_s: float
    steal_s: float

    @property
    def foreign_share(self) -> float:
        """Foreign CPU time as a fraction of all the cores' time during the run."""
        cap = self.cores * self.wall_s
        return self.foreign_cpu_s / cap if cap > 0 else math.nan

    def as_dict(self) -> dict:
        return {**asdict(self), "foreign_share": self.foreign_share}


class ContentionMeter:
    """Context manager measuring :class:`Contention` around a block that runs children.

    Counts the CPU time of this process and of its *waited-for* children (a run in a
    subprocess counts once it has exited), so use it around ``subprocess.run``; work
    done by live children that outlast the block (a pool of workers) counts through
    ``extra_own``, a function returning their CPU seconds so far.
    """

    def __init__(self, cores: int, extra_own: Callable[[], float] | None = None):
        self.cores = cores
        self.extra_own = extra_own
        self.result: Contention | None = None

    def _own_cpu_s(self) -> float:
        extra = self.extra_own() if self.extra_own is not None else 0.0
        return _children_cpu_s() + _self_cpu_s() + extra

    def __enter__(self) -> ContentionMeter:
        self._t0 = time.perf_counter()
        self._ticks0 = read_cpu_ticks()
        self._own0 = self._own_cpu_s()
        return self

    def __exit__(self, *exc) -> None:
        wall = time.perf_counter() - self._t0
        ticks1 = read_cpu_ticks()
        own = self._own_cpu_s() - self._own0
        if self._ticks0 is None or ticks1 is None:
            self.result = Contention(wall, self.cores, own, math.nan, math.nan)
            return
        busy = ticks1[0] - self._ticks0[0]
        steal = ticks1[2] - self._ticks0[2]
        # Steal is time the hypervisor gave to someone else: foreign, as far as we care.
        self.result = Contention(wall, self.cores, own, max(0.0, busy - own), steal)


def busy_share(sample_s: float = 1.0) -> float:
    """Fraction of all CPUs busy over the next ``sample_s`` seconds (NaN if unknown)."""
    a = read_cpu_ticks()
    time.sleep(sample_s)
    b = read_cpu_ticks()
    if a is None or b is None or b[1] <= a[1]:
        return math.nan
    # Per-CPU idle counters may step back a tick on tickless kernels: clamp to [0, 1].
    return min(1.0, max(0.0, (b[0] - a[0]) / (b[1] - a[1])))


def wait_for_quiet(
    max_busy: float = 0.25, timeout_s: float = 120.0, sample_s: float = 1.0
) -> tuple[bool, float]:
    """Wait until at most ``max_busy`` of the CPUs are busy; (became quiet, last share)."""
    deadline = time.monotonic() + timeout_s
    share = busy_share(sample_s)
    while not (share <= max_busy) and time.monotonic() < deadline:
        share = busy_share(sample_s)
    return bool(share <= max_busy) or math.isnan(share), share
