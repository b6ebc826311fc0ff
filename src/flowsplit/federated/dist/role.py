"""The entry point of one role process (spawned by the launcher or started by torchrun):
logging, the rendezvous store, the run's setup, the gloo pairs, the rounds, the result.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from flowsplit.errors import ConfigError, FlowsplitError
from flowsplit.federated.config import SFLConfig
from flowsplit.federated.dist.checkpoint import CHECKPOINT_NAME, read_checkpoint
from flowsplit.federated.dist.liveness import (
    die_with_launcher,
    launcher_gone,
    pid_alive,
    start_heartbeat,
)
from flowsplit.federated.dist.pool import (
    WORKER,
    PooledRuntime,
    PoolWorker,
    pool_address,
    pool_pairs,
)
from flowsplit.federated.dist.runtime import DistRuntime
from flowsplit.federated.results import (
    assignment_facts,
    result_of_run,
    save_tensors,
    write_run,
)
from flowsplit.federated.schemes import round_log
from flowsplit.federated.setup import RunSetup, prepare_run
from flowsplit.federated.system.profile import BlockProfile
from flowsplit.federated.system.protocol import CLIENT, address_of
from flowsplit.federated.system.topology import Topology
from flowsplit.federated.transport import (
    GlooTransport,
    gloo_device,
    make_pair_groups,
    role_name,
    talking_pairs,
)

log = logging.getLogger("flowsplit.federated")


CGROUP_ENV = "FLOWSPLIT_JOIN_CGROUP"
"""A ``cgroup.procs`` file (a path, or ``fd:N``: a descriptor the launcher opened, for a
namespace that does not see /sys/fs/cgroup) a role moves itself into once it is set
up: the testbed's CPU quota then applies to the run, not to importing torch and
loading the data."""


def _join_cgroup() -> None:
    where = os.environ.get(CGROUP_ENV, "").strip()
    if not where:
        return
    try:
        if where.startswith("fd:"):
            fd = int(where[3:])
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
        else:
            Path(where).write_text(str(os.getpid()), encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise ConfigError(f"${CGROUP_ENV}={where}: cannot join the cgroup ({exc})") from None


MEASURED_ON_ENV = "FLOWSPLIT_MEASURED_ON"
"""Names where a dist run's times are measured (the testbed sets ``testbed``)."""


def measured_on(bind: str | None) -> str:
    """Where this run's wall times are measured, as its records say: ``$FLOWSPLIT_MEASURED_ON``
    if set (``testbed`` under the emulated network), else ``loopback`` for roles bound
    to 127.0.0.1 (all on one host, no network between them), else ``host`` (real hosts)."""
    named = os.environ.get(MEASURED_ON_ENV, "").strip()
    if named:
        return named
    if bind is None:
        return "loopback" if os.environ.get("GLOO_SOCKET_IFNAME") == "lo" else "host"
    return "loopback" if bind.startswith("127.") or bind == "localhost" else "host"


def _connect_store(payload: dict[str, Any], rank: int, world_size: int, timeout: float):
    timeout_td = dt.timedelta(seconds=timeout)
    if payload.get("store"):
        host, port = payload["store"]
        return dist.TCPStore(host, port, world_size, False, timeout_td)
    store, _, _ = next(
        dist.rendezvous("env://", rank=rank, world_size=world_size, timeout=timeout_td)
    )
    return store


def _check_world_size(world_size: int, topology: Topology, workers: int | None = None) -> None:
    hosts = workers or topology.n_clients
    expected = 1 + topology.n_aggregators + hosts
    if world_size != expected:
        what = f"{hosts} client workers" if workers else f"{hosts} clients"
        raise ConfigError(
            f"the dist runner needs 1 server + {topology.n_aggregators} aggregators + "
            f"{what} = {expected} processes, got {world_size}"
        )


def _setup_from_payload(config: SFLConfig, topology: Topology, payload: dict[str, Any]) -> RunSetup:
    """The same :class:`RunSetup` as the launcher's (same data, weights, costs)."""
    profile = BlockProfile.from_dict(payload["profile"]) if payload.get("profile") else None
    assignment = np.asarray(payload["assignment"]) if payload.get("assignment") else None
    return prepare_run(
        config,
        dataset=payload["dataset"],
        model_fn=payload["model_fn"],
        topology=topology,
        view=payload.get("view"),
        profile=profile,
        assignment=assignment,
    )


def role_main(
    rank: int, world_size: int, payload: dict[str, Any], setup: RunSetup | None = None
) -> None:
    """Entry point of one process (spawned by :func:`launch_roles` or started by torchrun).

    ``setup``: the run this process already built from the same payload (torchrun), so
    it is not prepared twice; spawned roles build it from the payload.
    """
    if payload.get("launcher_pid"):
        die_with_launcher(int(payload["launcher_pid"]))
    quiet = payload.get("quiet", False)
    config = SFLConfig.from_dict(payload["config"])
    topology: Topology = payload["topology"]
    workers = payload.get("client_workers") or None
    me = (pool_address if workers else address_of)(rank, topology.n_aggregators)
    _setup_logging(
        Path(payload["out_dir"]) / "logs" / f"{role_name(me).replace(' ', '-')}.log", quiet
    )
    torch.set_num_threads(config.threads)
    _check_world_size(world_size, topology, workers)
    if setup is None:
        setup = _setup_from_payload(config, topology, payload)
    if payload.get("store") and me[0] != CLIENT:
        start_heartbeat(payload["store"], rank, world_size)
    store = _connect_store(payload, rank, world_size, setup.wait_timeout_s)
    ctx = setup.context(sampled=bool(workers))
    device = gloo_device(payload.get("bind"))
    transport = _connect_peers(store, me, setup, ctx, device, workers)
    log.debug("%s: connected", role_name(me))
    try:
        runtime = _make_runtime(setup, me, transport, ctx, store, payload, device, workers)
        runtime.measured_on = measured_on(payload.get("bind"))
        _join_cgroup()
        runtime.handshake()
        if payload.get("probe"):
            runtime.probe(payload["probe"], Path(payload["out_dir"]))
            if payload["probe"] == "only":
                return
        start, done = int(payload.get("start_round", 0)), None
        if runtime.is_server and start:
            done = runtime.restore(read_checkpoint(payload["out_dir"], config))
        # Only the server has rounds to show (the other roles never call on_round).
        with round_log(config.rounds, quiet=quiet or not runtime.is_server, leave=False) as log_fn:
            kept = list(done or [])

            def on_round(record: dict[str, Any]) -> None:
                runtime.round_facts(record)
                log_fn(record)
                kept.append(record)
                if payload.get("launcher_pid") and not pid_alive(int(payload["launcher_pid"])):
                    os._exit(1)  # the run was stopped: write nothing more
                save_tensors(Path(payload["out_dir"]) / CHECKPOINT_NAME, runtime.checkpoint(kept))
                log.debug("round %d recorded", record["round"])

            history = setup.scheme.run(
                runtime, setup.config, on_round=on_round, start_round=start, history=done
            )
        if runtime.is_server:
            if payload.get("launcher_pid") and not pid_alive(int(payload["launcher_pid"])):
                os._exit(1)  # the launcher is gone: the user stopped the run, write nothing
            _write_result(payload["out_dir"], runtime, history, world_size)
    finally:
        transport.close()
    log.debug("%s: done", role_name(me))


def _connect_peers(store, me, setup, ctx, device, workers) -> GlooTransport:
    """This process's gloo pairs (those of a process per client, or of a worker pool)
    and the transport over them."""
    n_aggs = setup.topology.n_aggregators
    if workers:
        pairs = pool_pairs(n_aggs, workers)
    else:
        pairs = talking_pairs(setup.assignment, n_aggs)
    wait = setup.wait_timeout_s
    peers = make_pair_groups(store, me, pairs, n_aggs, device=device, timeout_s=wait)
    return GlooTransport(
        me, peers, ctx.meter, drop_timeout=setup.config.timeout_s, wait_timeout=wait
    )


def _write_result(out_dir, runtime, history: list[dict[str, Any]], world_size: int) -> None:
    """The server writes the run's result (``metrics.json``, the model, ...) to ``out_dir``."""
    setup = runtime.setup
    info = {
        "world_size": world_size,
        "telemetry_bytes": runtime.transport.telemetry_bytes,
        **assignment_facts(history, runtime.final_assignment()),
        **runtime.result_info(),
    }
    result = result_of_run(setup, "dist", history, runtime.role.global_model(), info)
    write_run(out_dir, result)


def _make_runtime(setup, me, transport, ctx, store, payload, device, workers):
    """This process's runtime: a role of a run with a process per client, or of a run
    whose clients a pool of ``workers`` hosts (the server, an aggregator or a worker)."""
    policy = payload.get("policy")
    if me[0] == WORKER:
        return PoolWorker(setup, me, transport, store=store, policy=policy)
    kw: dict[str, Any] = {"n_workers": workers} if workers else {}
    return (PooledRuntime if workers else DistRuntime)(
        setup,
        me,
        transport,
        ctx,
        store=store,
        policy=policy,
        device=device,
        **kw,
    )


FAILURE_FILE = "failure.txt"
"""``OUT/logs/failure.txt``: a spawned server's one-line reason for stopping the run."""


def spawned_role_main(rank: int, world_size: int, payload: dict[str, Any]) -> None:
    """:func:`role_main` in a process of :func:`launch_roles`: a handled error (a round
    below the participation minimum, bad input) is one line for the launcher to show,
    not a traceback."""
    try:
        role_main(rank, world_size, payload)
    except Exception as exc:  # noqa: BLE001 - one line, always
        launcher = payload.get("launcher_pid")
        if launcher is not None and launcher_gone(int(launcher)):
            # The launcher was killed and its store went with it: this role's failure
            # ("Connection reset by peer") is that, not news for the terminal.
            os._exit(1)
        # A handled error, a full disk (the checkpoint), or a bug: one line, no traceback.
        code = 2 if isinstance(exc, FlowsplitError) else 1
        if isinstance(exc, OSError) and exc.filename and exc.strerror:
            line, code = f"{exc.filename}: {exc.strerror}", 2
        elif isinstance(exc, FlowsplitError):
            line = " ".join(str(exc).split())
        else:
            line = f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())}"
        if rank == 0:
            with contextlib.suppress(OSError):  # the disk may be the problem
                path = Path(payload["out_dir"]) / "logs" / FAILURE_FILE
                path.write_text(line + "\n", encoding="utf-8")
        log.error("%s: %s", "server" if rank == 0 else f"rank {rank}", line)
        sys.exit(code)


def _setup_logging(path: Path, quiet: bool) -> None:
    """Log to stderr (quiet: warnings only) and, in full, to ``OUT/logs/<role>.log``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    to_stderr = logging.StreamHandler()
    to_stderr.setLevel(logging.WARNING if quiet else logging.INFO)
    to_file = logging.FileHandler(path, mode="w", encoding="utf-8")
    to_file.setLevel(logging.DEBUG)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    root.handlers = [to_stderr, to_file]
