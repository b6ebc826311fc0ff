"""Liveness of a launched run's processes: roles that die with their launcher, heartbeats
the launcher watches, signals that stop the run, and ending the roles that are left.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator

import torch.distributed as dist
from tqdm import tqdm

from flowsplit.errors import FlowsplitError
from flowsplit.federated.config import SFLConfig
from flowsplit.train.launch import heartbeat_limit
from flowsplit.util import die_with_parent, pid_alive, wait_for_exit
from flowsplit.util.system import Stopped, stop_signals

log = logging.getLogger("flowsplit.federated")


def die_with_launcher(launcher_pid: int) -> None:
    """End this role process when the launcher ends, however it ends (SIGKILL included).

    A role's parent is the fork server, not the launcher, so two guards: the kernel
    kills the role when its parent dies (``PR_SET_PDEATHSIG``; the fork server exits
    when the launcher does), and a watchdog thread ends it the moment the launcher's
    pid exits (a pidfd, polled where pidfds are missing). Ctrl-C and SIGHUP reach the
    whole process group; the roles leave them to the launcher, which ends them all.
    """
    die_with_parent(signal.SIGKILL)
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    # tqdm's default lock is a multiprocessing semaphore, which a role ended by SIGKILL
    # never unregisters: the resource tracker would print a leak warning after the
    # launcher's one-line message. The roles share no bar, so a thread lock will do.
    tqdm.set_lock(threading.RLock())
    if not pid_alive(launcher_pid):
        os._exit(1)
    threading.Thread(
        target=_watch_launcher, args=(launcher_pid,), name="launcher-watchdog", daemon=True
    ).start()


def launcher_gone(pid: int, within: float = 1.0) -> bool:
    """Whether the launcher ``pid`` has ended, waiting up to ``within`` seconds for it: a
    SIGKILLed launcher closes its store's sockets before it turns into a zombie, so a
    role may see 'Connection reset by peer' while the launcher still looks alive (seen
    once in CI under load)."""
    deadline = time.monotonic() + within
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _watch_launcher(pid: int) -> None:
    wait_for_exit(pid)
    os._exit(1)  # not sys.exit: no cleanup that could write into the run directory


HEARTBEAT_KEY = "flowsplit/heartbeat/{rank}"
"""Store counter the server and each aggregator (spawned by :func:`launch_roles`) bump
every :data:`HEARTBEAT_S` seconds; the launcher watches it (:class:`HeartbeatWatch`)."""
HEARTBEAT_S = 1.0


def heartbeat_timeout(config: SFLConfig) -> float:
    """Seconds of silence after which the launcher takes an upper-tier role for stopped:
    ``--timeout``, within 5..30 s, as for DDP workers (a heartbeat of a loaded machine
    may come late; a stopped role must be found well within a minute)."""
    return heartbeat_limit(config.timeout_s)


def start_heartbeat(address: tuple[str, int], rank: int, world_size: int) -> None:
    """Bump this role's heartbeat counter every second, on a connection of its own.

    A thread, so it beats while the role waits in gloo or computes; it stops with the
    process, and when the process is stopped (SIGSTOP), which is what it is for.
    """
    host, port = address

    def beat() -> None:
        try:
            store = dist.TCPStore(host, int(port), world_size, False, dt.timedelta(seconds=30))
            key = HEARTBEAT_KEY.format(rank=rank)
            while True:
                store.add(key, 1)
                time.sleep(HEARTBEAT_S)
        except Exception:  # noqa: BLE001 - the launcher (and its store) is gone: stop beating
            return

    threading.Thread(target=beat, name="heartbeat", daemon=True).start()


class HeartbeatWatch:
    """The launcher's view of the heartbeats of ranks ``0 .. n_beating - 1`` (the server,
    the aggregators and any pool workers; clients with a process each beat none)."""

    def __init__(self, store: dist.Store, procs: list, n_beating: int, timeout_s: float):
        self.store, self.procs, self.timeout_s = store, procs, timeout_s
        self.ranks = list(range(n_beating))
        self.seen: dict[int, tuple[int, float]] = {}
        self.ended: set[int] = set()
        self.checked: float | None = None

    def silent(self) -> int | None:
        """The first live rank whose counter, once started, has not moved for ``timeout_s``
        (a role whose process ended is not silent: its peers see its connections close).

        The launcher asks twice a second; a longer gap means the launcher itself was
        stopped (Ctrl-Z stops the whole job, then fg) or starved, and every rank's
        silence is counted afresh from now, so a resumed run is not ended for the time
        it stood still."""
        now = time.monotonic()
        if self.checked is not None and now - self.checked > 3 * HEARTBEAT_S:
            self.seen = {rank: (value, now) for rank, (value, _) in self.seen.items()}
        self.checked = now
        for rank in self.ranks:
            if rank in self.ended or not self.procs[rank].is_alive():
                continue
            value = int(self.store.add(HEARTBEAT_KEY.format(rank=rank), 0))
            last = self.seen.get(rank)
            if last is None or value != last[0]:
                self.seen[rank] = (value, now)
            elif value > 0 and now - last[1] > self.timeout_s:
                self.ended.add(rank)
                return rank
        return None


def watch_roles(
    store: dist.Store,
    procs: list,
    n_aggregators: int,
    n_workers: int,
    timeout_s: float,
    deadline_s: float | None = None,
) -> None:
    """Wait for the server (``procs[0]``) to end, or ``deadline_s``, watching heartbeats:
    a silent aggregator or pool worker is ended (the server reassigns the aggregator's
    clients, or has the other workers host the worker's); a silent server raises
    :class:`ServerSilent`."""
    watch = HeartbeatWatch(store, procs, 1 + n_aggregators + n_workers, timeout_s)
    end = None if deadline_s is None else time.monotonic() + deadline_s
    while procs[0].is_alive() and (end is None or time.monotonic() < end):
        procs[0].join(0.5)
        silent = watch.silent()
        if silent is None:
            continue
        if silent == 0:  # the server: nothing can go on without it
            raise ServerSilent(
                f"dist run failed: the server (rank 0) sent no heartbeat for "
                f"{timeout_s:g} s (stopped or hung); every role process was ended"
            )
        if silent > n_aggregators:
            who = f"client worker {silent - 1 - n_aggregators}"
            then = "the other workers host its clients"
        else:
            who, then = f"aggregator {silent - 1}", "its clients are reassigned"
        log.warning(
            "%s (rank %d) sent no heartbeat for %g s (stopped or hung): ending its process; %s",
            who,
            silent,
            timeout_s,
            then,
        )
        procs[silent].kill()


class ServerSilent(FlowsplitError):
    """The server stopped sending heartbeats; every role process was ended."""


class RunStopped(FlowsplitError):
    """The launcher got SIGINT, SIGTERM or SIGHUP; every role process was ended."""


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP (:func:`~flowsplit.util.system.stop_signals`) and Ctrl-C
    into :class:`RunStopped` while roles run."""
    try:
        with stop_signals():
            yield
    except Stopped as exc:
        raise RunStopped(f"stopped by {exc}") from None
    except KeyboardInterrupt:
        raise RunStopped("stopped by SIGINT (Ctrl-C)") from None


def end_roles(procs: list, *, at_once: bool) -> None:
    """End the role processes still running: SIGKILL at once when the run was stopped
    (a server must not get to write its result), else SIGTERM, then SIGKILL."""
    for p in procs:
        if p.pid is not None and p.is_alive():
            p.kill() if at_once else p.terminate()
    for p in procs:
        if p.pid is not None:
            p.join(5.0)
            if p.is_alive():
                p.kill()
                p.join(5.0)
