"""Start N local worker processes the way torchrun would, and wait for them.

The parent sets the environment every worker shares (``WORLD_SIZE``,
``MASTER_ADDR``/``MASTER_PORT`` on a free loopback port, thread counts) before
spawning, so OpenMP pools start with the right size; each child adds its
``RANK``/``LOCAL_RANK`` and calls the worker function, which reads all of it
through :func:`flowsplit.train.distributed.read_dist_env` like under torchrun.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch.multiprocessing as mp
from tqdm import tqdm

from flowsplit.errors import ConfigError, FlowsplitError, InputError
from flowsplit.util import die_with_parent, exit_without_finalising, free_port
from flowsplit.util.system import Stopped, stop_signals


@contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the duration: processes started meanwhile inherit
    them (OpenMP reads its thread count when torch loads, before any code could set it)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


CPP_QUIET = {"TORCH_SHOW_CPP_STACKTRACES": "0", "TORCH_CPP_LOG_LEVEL": "ERROR"}
"""torch's C++ settings for worker and role processes: no C++ stack frames in errors, no
C++ warnings (a peer that ended makes gloo and the rendezvous store log warnings with
source locations, and a role outliving a killed launcher by moments printed them on
the terminal). Only where the user has not set them: debugging keeps its way in."""


def cpp_quiet_env(environ_: dict[str, str] | None = None) -> dict[str, str]:
    """The :data:`CPP_QUIET` settings the environment ``environ_`` (default: this
    process's) does not already set."""
    env = os.environ if environ_ is None else environ_
    return {k: v for k, v in CPP_QUIET.items() if k not in env}


@contextmanager
def _log_level(logger: logging.Logger, level: int) -> Iterator[None]:
    """Raise ``logger``'s level for the duration."""
    saved = logger.level
    logger.setLevel(max(level, saved))
    try:
        yield
    finally:
        logger.setLevel(saved)


def _die_with_parent() -> None:
    """Ask Linux to send this worker SIGTERM when its launcher dies (even by SIGKILL, as a
    timeout does): workers in their own sessions would otherwise outlive it and hold
    the cores."""
    if die_with_parent(signal.SIGTERM):
        launcher = os.environ.get("FLOWSPLIT_LAUNCHER_PID")
        if launcher and os.getppid() != int(launcher):  # it died before prctl took effect
            os._exit(1)


HEARTBEAT_PERIOD_S = 1.0
"""How often each worker's heartbeat thread stamps its slot."""


def heartbeat_limit(timeout_s: float) -> float:
    """How long a worker may go without a heartbeat: its collectives' timeout, clamped to
    5-30 s (a stopped worker is found well before a peer's collective times out)."""
    return float(min(max(timeout_s, 5.0), 30.0))


def _beat(slots: Any, rank: int) -> None:
    """Stamp ``slots[rank]`` with the monotonic clock (system-wide on Linux) every period.

    A thread, so it beats while the worker computes; a stopped (SIGSTOP) or frozen
    process stops beating, which is what the launcher watches for."""
    while True:
        slots[rank] = time.monotonic()
        time.sleep(HEARTBEAT_PERIOD_S)


def _child(local_rank: int, fn: Callable[..., Any], args: tuple, slots: Any = None) -> None:
    # Each worker leads its own session, as under torchrun. With the kernel's autogroup
    # scheduling (a fair share per session) workers sharing the launcher's session
    # would split one share between them on a busy machine and look slower than
    # torchrun's workers for no reason of their own. The price: the terminal's job
    # control signals (Ctrl-Z, fg, bg) reach only the launcher, which forwards them
    # (:class:`_JobControl`).
    with contextlib.suppress(OSError):
        os.setsid()
    _die_with_parent()
    # tqdm takes a multiprocessing RLock on its first bar (even a disabled one); in a
    # spawned worker that is a named semaphore held by the resource tracker, so a
    # worker killed mid-run leaks it and the tracker's "leaked semaphore" warning is
    # printed after the run's one-line error, as its last line. A worker's bars are
    # its own: a thread lock serves, and nothing is left to leak.
    tqdm.set_lock(threading.RLock())
    os.environ["RANK"] = str(local_rank)
    os.environ["LOCAL_RANK"] = str(local_rank)
    if slots is not None:
        threading.Thread(target=_beat, args=(slots, local_rank), daemon=True).start()
    fn(*args)
    # Done and written: leave without the interpreter's finalisation, which can race
    # with gloo's threads and abort a finished worker (exit_without_finalising).
    exit_without_finalising(0)


class _JobControl:
    """Forward the terminal's Ctrl-Z (SIGTSTP) and fg/bg (SIGCONT) to the workers.

    The workers lead sessions of their own (see :func:`_child`), so the terminal stops
    only the launcher: without this, Ctrl-Z would stop the launcher while its workers
    train on, holding the cores. On SIGTSTP the launcher stops every worker
    (SIGSTOP: a worker's group is orphaned, so the kernel would drop a SIGTSTP to it),
    then itself the default way, so the shell sees the job stopped; when continued it
    continues them, and the heartbeat watch counts silence only from that moment (a
    worker stopped with its launcher is not a frozen one).
    """

    def __init__(self, processes: list) -> None:
        self.processes = processes
        self.resumed = 0.0  # monotonic time of the last SIGCONT
        self.saved: dict[int, Any] = {}

    def _signal(self, sig: int) -> None:
        for proc in self.processes:
            if proc.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, sig)

    def _on_tstp(self, _signum: int, _frame: Any) -> None:
        self._signal(signal.SIGSTOP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        try:
            # To this thread (raise(3)), so it stops here, not a moment later, until fg/bg.
            signal.raise_signal(signal.SIGTSTP)
        finally:
            signal.signal(signal.SIGTSTP, self._on_tstp)
        self._on_cont(signal.SIGCONT, None)

    def _on_cont(self, _signum: int, _frame: Any) -> None:
        self.resumed = time.monotonic()
        self._signal(signal.SIGCONT)

    def __enter__(self) -> _JobControl:
        if threading.current_thread() is threading.main_thread():
            self.saved = {
                signal.SIGTSTP: signal.signal(signal.SIGTSTP, self._on_tstp),
                signal.SIGCONT: signal.signal(signal.SIGCONT, self._on_cont),
            }
        return self

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)


def launch_local(
    fn: Callable[..., Any],
    args: tuple = (),
    *,
    n_workers: int,
    threads_per_worker: int,
    master_addr: str = "127.0.0.1",
    heartbeat_s: float | None = None,
) -> None:
    """Run ``fn(*args)`` in ``n_workers`` spawned processes forming one process group.

    A worker's :class:`FlowsplitError` comes back as the same one-line error; a
    worker that dies takes the others down and raises :class:`FlowsplitError`, and so
    does one that sends no heartbeat for ``heartbeat_s`` seconds (stopped or frozen:
    its peers would only notice when their collective times out), naming it.
    """
    env = _worker_env(n_workers, threads_per_worker, master_addr)
    # torch logs "Terminating process N via signal SIGTERM" for each worker it stops after
    # one failed: a line before ours that says less; the error below names what happened.
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    with environ(env), _log_level(spawn_log, logging.ERROR):
        slots = None
        if heartbeat_s is not None:
            # Shared doubles without a lock (one writer per slot): no semaphore to leak.
            # 0 until a worker's first beat: its imports (seconds on a busy machine) are
            # not silence; a worker that never starts fails the rendezvous instead.
            slots = mp.get_context("spawn").Array("d", n_workers, lock=False)
        ctx = mp.start_processes(
            _child, args=(fn, args, slots), nprocs=n_workers, start_method="spawn", join=False
        )
        try:
            with _JobControl(ctx.processes) as job, stop_signals():
                last = time.monotonic()
                while not ctx.join(timeout=HEARTBEAT_PERIOD_S):
                    now = time.monotonic()
                    if now - last > 3 * HEARTBEAT_PERIOD_S:  # the launcher itself was stopped
                        job.resumed = max(job.resumed, now)
                    last = now
                    if slots is not None:
                        _check_heartbeats(ctx.processes, slots, heartbeat_s, job.resumed)
        except (KeyboardInterrupt, Stopped) as exc:
            # Workers in their own sessions do not see the terminal's Ctrl-C: stop them.
            for proc in ctx.processes:
                if proc.is_alive():
                    proc.terminate()
            for proc in ctx.processes:
                proc.join(10)
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise FlowsplitError(
                f"stopped by {exc}: every worker was ended (continue from the last "
                "checkpoint with --resume RUN)"
            ) from None
        except mp.ProcessRaisedException as exc:
            raise _as_user_error(str(exc)) from None
        except mp.ProcessExitedException as exc:
            raise _worker_exited(exc) from None


def _worker_env(n_workers: int, threads_per_worker: int, master_addr: str) -> dict[str, str]:
    """The environment the workers start in: the rendezvous (on a free port of
    ``master_addr``), their threads, this launcher's pid."""
    env = {
        "FLOWSPLIT_LAUNCHER_PID": str(os.getpid()),
        "WORLD_SIZE": str(n_workers),
        "LOCAL_WORLD_SIZE": str(n_workers),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(free_port(master_addr)),
        "OMP_NUM_THREADS": str(threads_per_worker),
        "MKL_NUM_THREADS": str(threads_per_worker),
        **cpp_quiet_env(),
    }
    if master_addr in ("127.0.0.1", "localhost", "::1") and "GLOO_SOCKET_IFNAME" not in os.environ:
        # Gloo's own sockets follow the host name's address unless told an interface.
        env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


def _worker_exited(exc: mp.ProcessExitedException) -> FlowsplitError:
    """The one-line error for a worker that died (killed by a signal, or exited)."""
    how = (
        f"was killed by {signal.Signals(-exc.exit_code).name}"
        if exc.exit_code is not None and exc.exit_code < 0
        else f"exited with code {exc.exit_code}"
    )
    return FlowsplitError(
        f"worker {exc.error_index} {how} (out of memory?); the other workers were "
        "stopped (continue from the last checkpoint with --resume RUN)"
    )


def _check_heartbeats(processes: list, slots: Any, limit_s: float, resumed: float = 0.0) -> None:
    """End every worker and raise if one has sent no heartbeat for ``limit_s`` seconds
    (counted from ``resumed``, the last time job control continued the workers, if later)."""
    now = time.monotonic()
    silent = [
        r
        for r, p in enumerate(processes)
        if p.is_alive() and slots[r] > 0 and now - max(slots[r], resumed) > limit_s
    ]
    if not silent:
        return
    for proc in processes:
        if proc.is_alive():
            # SIGKILL: a stopped process would not act on SIGTERM until continued.
            proc.kill()
    for proc in processes:
        proc.join(10)
    names = ", ".join(f"worker {r} (rank {r})" for r in silent)
    raise FlowsplitError(
        f"{names} sent no heartbeat for {limit_s:.0f} s (stopped or frozen); every worker "
        "was ended (continue from the last checkpoint with --resume RUN)"
    )


def _as_user_error(text: str) -> Exception:
    """Turn a child's traceback text back into the error it raised, when it is a user error."""
    last = text.strip().splitlines()[-1] if text.strip() else text
    name, _, message = last.partition(": ")
    user_errors = {cls.__name__: cls for cls in (ConfigError, InputError, FlowsplitError)}
    cls = user_errors.get(name.rsplit(".", 1)[-1])
    if cls is None:
        return RuntimeError(f"a worker failed: {peer_failure_words(last, limit=300)}")
    # InputError's message already holds its path; rebuild without re-prefixing it.
    return ConfigError(message) if cls is ConfigError else FlowsplitError(message)


_GLOO_SOURCE = re.compile(r"\[(?:enforce fail at )?[^\]]*\.(?:cc|cpp|h):\d+\]\s*")
_TIMED_OUT = re.compile(r"timed out waiting (\d+)\s*ms", re.IGNORECASE)
_PEER_WORDS = (
    ("connection closed by peer", "its connection closed: the process ended or was killed"),
    ("connection reset by peer", "its connection was reset: the process ended or was killed"),
    ("broken pipe", "its connection broke: the process ended or was killed"),
    ("connection refused", "it refused the connection: not started yet or already ended"),
    ("no route to host", "no route to its host"),
    ("network is unreachable", "its network is unreachable"),
)


def peer_failure_words(text: str, limit: int = 160) -> str:
    """Say in words what a gloo error about a peer means (its connection closed, no
    answer within N s, ...) instead of gloo's text with its C++ source location; text
    gloo's words do not cover is kept without those locations and shortened at a word.

    A short plain context before the first ``": "`` (``"send failed: ..."``) is kept."""
    stripped = text.strip()
    first = stripped.splitlines()[0] if stripped else "no reason given"
    context, sep, rest = first.partition(": ")
    if not sep or "[" in context or len(context) > 40:
        context, rest = "", first
    lower = rest.lower()
    words = next((w for key, w in _PEER_WORDS if key in lower), None)
    if words is None and (match := _TIMED_OUT.search(rest)):
        words = f"no answer within {int(match.group(1)) / 1000:g} s"
    if words is None:
        words = " ".join(_GLOO_SOURCE.sub("", rest).split()) or "no reason given"
        if len(words) > limit:
            words = words[:limit].rsplit(" ", 1)[0] + " ..."
    return f"{context}: {words}" if context else words
