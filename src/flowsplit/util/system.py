"""The process and the machine: cores, peak memory, dying with the parent."""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path


def available_cores() -> int:
    """Cores this process may run on (the CPU affinity mask, e.g. taskset or cgroups, not
    the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def available_memory() -> int:
    """Bytes of memory available to new allocations (``MemAvailable``; else all RAM)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB.

    ``VmHWM`` of ``/proc/self/status`` where there is one: Linux carries a process's
    ``ru_maxrss`` across ``execve``, so a worker forked from a big parent (a benchmark
    that just wrote a 7 GB dataset) would report the parent's peak; ``VmHWM`` belongs
    to this program's own address space. Elsewhere ``ru_maxrss`` (KiB on Linux).
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0  # kB
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask Linux to send this process ``sig`` when its parent dies (however it dies,
    SIGKILL included): ``prctl(PR_SET_PDEATHSIG)``. Usable as a ``preexec_fn``.

    Returns whether the request was made (False off Linux or without libc's ``prctl``).
    The parent may already have died before the call: callers that know its pid check
    ``os.getppid()`` afterwards.
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
        return True
    return False


def exit_without_finalising(code: int) -> None:
    """End a finished distributed worker at once: logs closed, output flushed, then
    ``os._exit`` instead of the interpreter's finalisation.

    Why: gloo's threads can still hold a finished collective's tensors when a worker
    returns; freeing Python objects at interpreter exit then races with them and the
    C++ runtime aborts the process ("terminate called without an active exception",
    SIGABRT) after its work is done and written. The barrier before the process group
    is destroyed narrows that window; not finalising closes it. Only for processes
    whose results are already on disk (nothing is left for ``atexit`` to do)."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (ports it hands to outgoing connections and to
    ``bind(port 0)``); Linux's default where it cannot be read."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago, chosen outside the kernel's
    ephemeral range.

    A port from ``bind(port 0)`` lies inside the ephemeral range, so any outgoing
    connection on the machine (a rendezvous client, a test's Dask worker) may be given
    it between the pick and the real bind, which then fails with "Address already in
    use". Ports below the ephemeral range are handed out only to those that ask for them
    by number; a random pick there, checked by binding, leaves only the (much rarer)
    race with another process choosing the same number."""
    import random
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    low, high = _ephemeral_range()
    bottom, top = (10000, low - 1) if low > 12000 else (high + 1, 65535)
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randint(bottom, top)
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(family, socket.SOCK_STREAM) as s:  # crowded: let the kernel pick
        s.bind((host, 0))
        return s.getsockname()[1]


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs. A zombie does not: a launcher that was SIGKILLed
    stays one until its own parent reaps it, and ``kill(pid, 0)`` still succeeds then
    (a dist role took the store's "Connection reset by peer" for news in that moment)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: what kill said
    return stat[stat.rfind(")") + 2 :][:1] not in ("Z", "X")


def wait_for_exit(pid: int) -> None:
    """Block until process ``pid`` has exited: on its pidfd (readable once the process
    has exited; Linux 5.3 and later), else by asking :func:`pid_alive` every 0.2 s."""
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        while pid_alive(pid):
            time.sleep(0.2)
        return
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


class Stopped(Exception):
    """SIGTERM or SIGHUP reached this process inside :func:`stop_signals` (its text:
    the signal's name)."""


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into :class:`Stopped` inside the ``with`` block, as
    Ctrl-C is a KeyboardInterrupt, so that what the block started is ended and said in
    one line; a second signal does not cut that clean-up short. Off the main thread
    (where no handler can be set) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        if not fired:
            fired.append(signum)
            raise Stopped(signal.Signals(signum).name)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)
