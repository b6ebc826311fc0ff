"""Starting a distributed run: :func:`launch_roles` (every role a local process over
127.0.0.1, this process hosting the rendezvous store and watching the roles) and
:func:`run_under_torchrun` (this process is one rank of a torchrun launch).
"""

from __future__ import annotations

import datetime as dt
import logging
import multiprocessing as mp
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, Required, TypedDict, Unpack

import torch.distributed as dist

from flowsplit.errors import ConfigError, FlowsplitError
from flowsplit.federated.assignment import AssignmentPolicy
from flowsplit.federated.config import SFLConfig
from flowsplit.federated.dist.checkpoint import read_checkpoint
from flowsplit.federated.dist.liveness import (
    RunStopped,
    ServerSilent,
    end_roles,
    heartbeat_timeout,
    stop_on_signals,
    watch_roles,
)
from flowsplit.federated.dist.role import FAILURE_FILE, role_main, spawned_role_main
from flowsplit.federated.results import SFLResult, read_run
from flowsplit.federated.sampling import sampling_configured
from flowsplit.federated.setup import ModelFn, RunSetup
from flowsplit.federated.system.topology import Topology
from flowsplit.train.distributed import read_dist_env
from flowsplit.train.launch import cpp_quiet_env, environ

log = logging.getLogger("flowsplit.federated")


class RoleArgs(TypedDict, total=False):
    """The keyword arguments every role of a run is started with (``launch_roles`` and
    ``run_under_torchrun`` take them, :func:`make_payload` packs them; see
    :func:`launch_roles` for each)."""

    dataset: Required[str | Path]
    model_fn: Required[ModelFn]
    out_dir: Required[str | Path]
    quiet: bool
    policy: AssignmentPolicy | None
    probe: str | None
    client_workers: int | None
    """The pool of client workers asked for (None: a process per client); the payload
    holds the size :func:`pool_size` made of it."""


def make_payload(
    setup: RunSetup, *, bind: str | None = None, **roles: Unpack[RoleArgs]
) -> dict[str, Any]:
    """What every process needs to rebuild ``setup`` (plain data, the topology and a
    picklable factory) and run its role (``roles``: :class:`RoleArgs`)."""
    return {
        "config": setup.config.to_dict(),
        "dataset": str(roles["dataset"]),
        "model_fn": roles["model_fn"],
        "view": setup.view,
        # The object, not its TOML: pickled to the roles, it is read in milliseconds
        # where a TOML of 10,000 clients takes each role seconds to parse.
        "topology": setup.topology,
        "profile": setup.profile.to_dict(),
        "assignment": [int(a) for a in setup.assignment],
        "out_dir": str(roles["out_dir"]),
        "quiet": roles.get("quiet", False),
        "bind": bind,
        "policy": roles.get("policy"),
        "probe": roles.get("probe"),
        "client_workers": roles.get("client_workers"),
    }


def pool_size(
    client_workers: int | None, n_clients: int, config: SFLConfig, probe: str | None = None
) -> int | None:
    """The pool's worker count for ``client_workers`` (None: no pool, a process per
    client); never more workers than clients. A run that samples clients needs a pool;
    one that probes (``probe``) may not have one."""
    if client_workers is None and sampling_configured(config):
        raise ConfigError(
            "--clients-per-round, --fraction and --select sample clients in --mode dist "
            "with a pool of client workers only (--client-workers P)"
        )
    if client_workers is None:
        return None
    if int(client_workers) < 1:
        raise ConfigError(f"--client-workers must be >= 1, got {client_workers}")
    if probe:
        raise ConfigError("--probe measures a process per client; run it without --client-workers")
    return min(int(client_workers), n_clients)


def _loopback_store(world: int, wait_s: float) -> tuple[dist.TCPStore, int]:
    """A rendezvous store for ``world`` local processes, and its port."""
    # The store listens on a socket we bind ourselves, so it is loopback only and the
    # port cannot be taken between choosing and using it.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    # Every role connects once, the server and each aggregator once more (heartbeat).
    sock.listen(2 * world)
    port = sock.getsockname()[1]
    store = dist.TCPStore(
        "127.0.0.1",
        port,
        world,
        True,
        dt.timedelta(seconds=wait_s),
        wait_for_workers=False,
        master_listen_fd=sock.detach(),  # the store owns (and closes) the socket now
    )
    return store, port


def launch_roles(
    setup: RunSetup,
    *,
    dataset: str | Path,
    model_fn: ModelFn,
    out_dir: str | Path | None = None,
    quiet: bool = False,
    deadline_s: float | None = None,
    resume: bool = False,
    policy: AssignmentPolicy | None = None,
    probe: str | None = None,
    client_workers: int | None = None,
) -> SFLResult | None:
    """Run ``setup`` as ``1 + A + N`` local processes talking over 127.0.0.1, or as
    ``1 + A + P`` with ``client_workers=P``: a pool of P worker processes hosts each
    round's clients (:mod:`flowsplit.federated.dist.pool`; the run may sample clients).

    ``probe``: ``run`` measures speeds and links first (:mod:`flowsplit.federated.probe`)
    and predicts on them; ``only`` measures every pair, writes ``out_dir/probe.toml``
    and returns None.

    ``policy``: the per-round network and assignment (picklable; default: keep the
    assignment), given to every role.

    ``resume``: continue the run in ``out_dir`` from its ``sfl-checkpoint.pt`` (the
    server's state after each finished round), ending on the weights an uninterrupted
    run would have (as long as no dropout sits in a client or aggregator part, whose
    random streams restart).
    """
    topo: Topology = setup.topology
    workers = pool_size(client_workers, topo.n_clients, setup.config, probe)
    world = 1 + topo.n_aggregators + (workers or topo.n_clients)
    tmp = None
    if out_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="flowsplit-dist-")
        out_dir = tmp.name
    store, port = _loopback_store(world, setup.wait_timeout_s)
    payload = make_payload(
        setup,
        dataset=dataset,
        model_fn=model_fn,
        out_dir=out_dir,
        quiet=quiet,
        bind="127.0.0.1",
        policy=policy,
        probe=probe,
        client_workers=workers,
    )
    payload.update(store=("127.0.0.1", port), launcher_pid=os.getpid())
    if resume:
        if tmp is not None:
            raise ConfigError("resume needs the run directory to continue")
        payload["start_round"] = int(read_checkpoint(out_dir, setup.config)["round"])
    failure = Path(out_dir) / "logs" / FAILURE_FILE
    failure.unlink(missing_ok=True)
    procs = _role_processes(world, payload)
    stopped = True
    try:
        _run_roles(store, procs, setup, workers, deadline_s)
        stopped = False
    except RunStopped as exc:
        raise RunStopped(f"{exc}: every role process was ended; {out_dir} has no result") from None
    except ServerSilent:
        if tmp is not None:
            tmp.cleanup()
        raise
    finally:
        end_roles(procs, at_once=stopped)
        del store
    try:
        if procs[0].exitcode != 0:
            raise FlowsplitError(_server_failure(failure, procs[0].exitcode))
        return None if probe == "only" else read_run(out_dir)
    finally:
        if tmp is not None:
            tmp.cleanup()


def _role_processes(world: int, payload: dict[str, Any]) -> list[mp.process.BaseProcess]:
    """The ``world`` role processes (not started), each forked from one fork server."""
    ctx = mp.get_context("forkserver")
    # Imported once in the fork server instead of in every role: torch, this package,
    # and what the first backward with an explicit gradient imports (sympy via torch.fx);
    # fork_server makes the fork server end with this process, at once.
    ctx.set_forkserver_preload(
        [
            "torch",
            "torch.fx.experimental.symbolic_shapes",
            "flowsplit.federated.dist",
            "flowsplit.federated.dist.fork_server",
        ]
    )
    return [ctx.Process(target=spawned_role_main, args=(r, world, payload)) for r in range(world)]


def _run_roles(
    store: dist.TCPStore,
    procs: list[mp.process.BaseProcess],
    setup: RunSetup,
    workers: int | None,
    deadline_s: float | None,
) -> None:
    """Start the roles and watch them (:func:`watch_roles`) until the server ends; the
    others then have 3 s to finish (the caller ends any still running)."""
    with stop_on_signals():
        # The fork server (started by the first role) and so every role inherit it.
        with environ(cpp_quiet_env()):
            for p in procs:
                p.start()
        timeout_s = heartbeat_timeout(setup.config)
        n_aggregators = setup.topology.n_aggregators
        watch_roles(store, procs, n_aggregators, workers or 0, timeout_s, deadline_s)
        # The others finish within moments of the server; a hung one is ended below.
        grace = time.monotonic() + 3.0
        for p in procs[1:]:
            p.join(max(0.0, grace - time.monotonic()))


def _server_failure(failure: Path, exitcode: int | None) -> str:
    """The launcher's line for a server that failed: its own reason, when it wrote one."""
    reason = failure.read_text(encoding="utf-8").strip() if failure.is_file() else ""
    if reason:
        return f"dist run failed: {reason}"
    return f"dist run failed: the server process exited with code {exitcode} (its log is above)"


def run_under_torchrun(
    setup: RunSetup, *, bind: str | None = None, **roles: Unpack[RoleArgs]
) -> SFLResult | None:
    """Run this process's role of a torchrun launch; rank 0 returns the result.

    ``roles``: as for :func:`launch_roles` (every process builds its own; with a pool,
    ``client_workers``, the launch has ``1 + A + P`` processes).
    """
    env = read_dist_env()
    if not env.is_distributed:
        raise ConfigError("not started by torchrun (WORLD_SIZE unset or 1)")
    probe = roles.get("probe")
    workers = pool_size(roles.get("client_workers"), setup.topology.n_clients, setup.config, probe)
    payload = make_payload(setup, bind=bind, **(roles | {"client_workers": workers}))
    role_main(env.rank, env.world_size, payload, setup)
    return read_run(roles["out_dir"]) if env.rank == 0 and probe != "only" else None
