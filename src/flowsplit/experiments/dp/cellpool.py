"""Long-lived training processes for the cells of a study (``flowsplit compare``).

A cell run as its own ``flowsplit train`` pays, before its first step, a fresh
interpreter and the imports of torch, of ``torch._dynamo`` (which ``torch.optim``
pulls in) and of flowsplit, and with 2 workers all of that once more in each worker:
about 10 s for one process and 20 s for two on a quiet 2-core machine, more than
the training of a demo cell (3 epochs of 2-4 s). :class:`CellPools` keeps one set of
processes per worker count, spawned at its first cell, and hands them cells one after
another. A cell is the same ``flowsplit train`` argument list as in a subprocess, run
through the same entry points: ``flowsplit train``'s own function for one process (also every
XGBoost cell: its Dask workers are that process's children), and for N > 1 in each of
N ranks the torchrun entry ``python -m flowsplit.train``, in a fresh process group on
a fresh loopback port. What carries over from one cell to the next is only what was
imported: every run seeds its own randomness, opens its dataset and builds its model
(a test checks that a pooled run's predictions equal those of its own process).

Timing stays honest: the contention meter counts the pooled processes' CPU time
(:func:`~flowsplit.experiments.dp.hostload.descendants_cpu_s`, from ``/proc/PID/stat``)
as the study's own, so a cell's foreign share is what other processes took, as with a
subprocess. A cell that fails, or runs past its timeout, ends its pool (DDP peers of a
failed rank would wait in a collective); the next cell of that worker count starts a
new one.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path

from tqdm import tqdm

from flowsplit.errors import FlowsplitError
from flowsplit.train.__main__ import main as rank_main
from flowsplit.train.commands import add_train_arguments, cmd_train
from flowsplit.train.launch import environ, free_port
from flowsplit.util import die_with_parent

POLL_S = 0.5
"""How often the parent checks, while a cell runs, that its pool's processes are alive."""
CLOSE_WAIT_S = 10.0


def thread_env(threads: int) -> dict[str, str]:
    """The thread counts a cell's processes start with, as a subprocess cell's."""
    t = str(threads)
    return {"OMP_NUM_THREADS": t, "MKL_NUM_THREADS": t, "OPENBLAS_NUM_THREADS": t}


@contextlib.contextmanager
def output_to(path: str | Path) -> Iterator[None]:
    """Send this process's stdout and stderr (file descriptors 1 and 2, so also what C
    libraries print, and what processes started meanwhile inherit) to ``path`` for the
    duration, as a subprocess cell's log."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        with open(path, "a", encoding="utf-8") as fh:
            os.dup2(fh.fileno(), 1)
            os.dup2(fh.fileno(), 2)
            try:
                yield
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        os.close(saved[0])
        os.close(saved[1])


def _run_job(rank: int, world: int, argv: list[str]) -> int:
    """One cell on this rank, through the entry point its own process would use."""
    if world > 1:
        return rank_main(argv)
    parser = argparse.ArgumentParser(prog="flowsplit train")
    add_train_arguments(parser)
    try:
        return cmd_train(parser.parse_args(argv))
    except FlowsplitError as exc:  # as the command line reports it
        print(f"flowsplit: error: {exc}", file=sys.stderr)
        return 2


def _serve(rank: int, world: int, jobs, results) -> None:
    """A pooled process: run the cells sent on ``jobs`` until told to stop (``None``)."""
    if world > 1:
        # Each rank leads its own session, as launch_local's and torchrun's workers do
        # (with autogroup scheduling, ranks sharing a session would split one share).
        with contextlib.suppress(OSError):
            os.setsid()
    die_with_parent()
    # As in launch_local's workers: tqdm's default lock is a named semaphore a killed
    # worker would leak; a thread lock serves a process's own bars.
    tqdm.set_lock(threading.RLock())
    os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(rank)
    while True:
        job = jobs.get()
        if job is None:
            return
        argv, port, log_path = job
        os.environ["MASTER_PORT"] = str(port)
        with output_to(log_path):
            try:
                rc = _run_job(rank, world, argv)
            except SystemExit as exc:  # argparse refusing an option
                rc = exc.code if isinstance(exc.code, int) else 2
            except BaseException:  # noqa: BLE001 - reported to the parent, which ends the pool
                traceback.print_exc()
                rc = 1
        results.put((rank, int(rc or 0)))


class _Pool:
    """``world`` spawned processes that run cells together (ranks 0 .. world-1)."""

    def __init__(self, world: int, threads: int, master_addr: str = "127.0.0.1"):
        ctx = mp.get_context("spawn")
        self.world = world
        self.master_addr = master_addr
        self.jobs = [ctx.SimpleQueue() for _ in range(world)]
        self.results = ctx.Queue()
        env = {
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
            "MASTER_ADDR": master_addr,
            **thread_env(threads),
            "PYTHONUNBUFFERED": "1",
        }
        if "GLOO_SOCKET_IFNAME" not in os.environ:
            env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo follows the host name's address otherwise
        self.procs = []
        with environ(env):
            for rank in range(world):
                p = ctx.Process(
                    target=_serve,
                    args=(rank, world, self.jobs[rank], self.results),
                    name=f"flowsplit-cell-w{world}-rank{rank}",
                    daemon=False,  # an XGBoost cell's Dask cluster needs child processes
                )
                p.start()
                self.procs.append(p)

    def run(self, argv: list[str], log_path: Path, timeout_s: float | None) -> tuple[bool, str]:
        """Run one cell on every rank; (ok, why not)."""
        port = free_port(self.master_addr)
        for q in self.jobs:
            q.put((list(argv), port, str(log_path)))
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        codes: dict[int, int] = {}
        while len(codes) < self.world:
            try:
                rank, rc = self.results.get(timeout=POLL_S)
                codes[rank] = rc
                if rc != 0:
                    return False, f"exit status {rc}" + (
                        f" (rank {rank})" if self.world > 1 else ""
                    )
                continue
            except queue.Empty:
                pass
            dead = [(r, p.exitcode) for r, p in enumerate(self.procs) if not p.is_alive()]
            if dead:
                r, code = dead[0]
                return False, f"worker {r} died (exit code {code}; out of memory?)"
            if deadline is not None and time.monotonic() > deadline:
                return False, f"killed after {timeout_s:g} s"
        return True, ""

    def close(self, *, kill: bool = False) -> None:
        """Stop the processes: politely (each finishes its loop), or at once (``kill``)."""
        if not kill:
            for q in self.jobs:
                with contextlib.suppress(OSError, ValueError):
                    q.put(None)
            for p in self.procs:
                p.join(CLOSE_WAIT_S)
        for p in self.procs:
            if p.is_alive():
                p.kill()  # SIGKILL: also a stopped process, or one stuck in a collective
        for p in self.procs:
            p.join(CLOSE_WAIT_S)
        self.results.close()
        self.results.join_thread()


class CellPools:
    """Run cells in long-lived processes, one pool per worker count (see the module doc).

    Callable like :func:`flowsplit.experiments.dp.compare.run_cell_subprocess`; close it
    (or use it as a context manager) to end the processes.
    """

    def __init__(self) -> None:
        self._pools: dict[tuple[int, int], _Pool] = {}

    def __enter__(self) -> CellPools:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(
        self,
        argv: Sequence[str],
        *,
        world: int,
        threads: int,
        log_path: Path,
        timeout_s: float | None = None,
    ) -> tuple[bool, str]:
        """Run ``flowsplit train ARGV`` on ``world`` pooled processes; (ok, status)."""
        key = (world, threads)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = _Pool(world, threads)
        ok, status = pool.run(list(argv), log_path, timeout_s)
        if not ok:  # its peers may be stuck in a collective, its state is unknown
            pool.close(kill=True)
            del self._pools[key]
        return ok, status

    def close(self) -> None:
        """End every pool."""
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
