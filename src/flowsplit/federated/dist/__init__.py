"""The distributed runner: server, each aggregator and each client in its own process.

Ranks: server 0, aggregator ``j`` at ``1 + j``, client ``i`` at ``1 + A + i``
(world size ``1 + A + N``). The package has one module per job:

- :mod:`.runtime`: one role's rounds (:class:`DistRuntime`: the round's assignment from
  the store, new gloo pairs, the role's coroutine over the network, telemetry up the
  tree, the server's checkpoint state);
- :mod:`.role`: the entry point of a role process (logging, store, setup, pairs, result);
- :mod:`.launch`: starting a run, :func:`launch_roles` (every role a local process;
  this process hosts the rendezvous store on 127.0.0.1 and watches the roles) or
  :func:`run_under_torchrun` (one or many machines: each process reads its rank from
  the environment, :func:`flowsplit.train.distributed.read_dist_env`, and rank 0 writes
  the run directory; set ``GLOO_SOCKET_IFNAME`` or ``--bind`` to the interface the
  machines share);
- :mod:`.liveness`: roles that die with their launcher, heartbeats, stop signals;
- :mod:`.checkpoint`: ``OUT/sfl-checkpoint.pt`` and reading it back for ``--resume``.
"""

from __future__ import annotations

from flowsplit.federated.dist.checkpoint import CHECKPOINT_NAME, read_checkpoint
from flowsplit.federated.dist.launch import (
    RoleArgs,
    launch_roles,
    make_payload,
    run_under_torchrun,
)
from flowsplit.federated.dist.liveness import RunStopped, ServerSilent, heartbeat_timeout
from flowsplit.federated.dist.role import FAILURE_FILE, measured_on, role_main
from flowsplit.federated.dist.runtime import DistRuntime, drive

__all__ = [
    "CHECKPOINT_NAME",
    "FAILURE_FILE",
    "DistRuntime",
    "RunStopped",
    "RoleArgs",
    "ServerSilent",
    "drive",
    "heartbeat_timeout",
    "launch_roles",
    "make_payload",
    "measured_on",
    "read_checkpoint",
    "role_main",
    "run_under_torchrun",
]
