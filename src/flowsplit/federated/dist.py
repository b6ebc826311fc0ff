"""The distributed runner: server, each aggregator and each client in its own process.

Ranks: server 0, aggregator ``j`` at ``1 + j``, client ``i`` at ``1 + A + i``
(world size ``1 + A + N``). Each process builds the same :class:`RunSetup`, runs
its own role's coroutine (the same step code as the simulation) through a
:class:`~flowsplit.federated.transport.GlooTransport`, and after every round sends
its cost ledger up the tree (client -> aggregator -> server, "telemetry", not
counted as protocol bytes) so the server reports the same metrics as the
simulation plus the bytes that were really received.

Two ways to start it:

- :func:`launch_roles`: this process hosts the rendezvous store on 127.0.0.1 and
  starts one process per role (``forkserver``, torch preloaded once);
- under ``torchrun --nproc-per-node ... -m flowsplit sfl run ... --mode dist``
  (one or many machines): each process reads its rank from the environment
  (:func:`flowsplit.train.distributed.read_dist_env`, the one reader of it) and rank
  0 writes the run directory. Set ``GLOO_SOCKET_IFNAME`` (or ``--bind``) to the interface the
  machines share.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import logging
import multiprocessing as mp
import os
import select
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from flowsplit.errors import ConfigError, FlowsplitError, InputError
from flowsplit.federated.assignment import AssignmentPolicy, changes, decide_assignment
from flowsplit.federated.config import SFLConfig
from flowsplit.federated.results import (
    SFLResult,
    assignment_facts,
    read_run,
    run_facts,
    save_tensors,
    write_run,
)
from flowsplit.federated.roles import Client, Coroutine, EdgeAggregator
from flowsplit.federated.schemes import RoundOutcome, RoundPlan, round_log
from flowsplit.federated.server import CloudServer
from flowsplit.federated.setup import ModelFn, RunSetup, prepare_run, role_seed
from flowsplit.federated.system.costs import Ledger
from flowsplit.federated.system.profile import BlockProfile
from flowsplit.federated.system.protocol import (
    AGGREGATOR,
    CLIENT,
    CONTROL,
    SERVER_ADDRESS,
    Address,
    Recv,
    Send,
    address_of,
    message_nbytes,
    rank_of,
)
from flowsplit.federated.system.schedule import N_COLS, Tracer
from flowsplit.federated.system.topology import Topology, topology_from_toml, topology_to_toml
from flowsplit.federated.transport import (
    GlooTransport,
    gloo_device,
    make_pair_groups,
    pair_group,
    role_name,
    talking_pairs,
)
from flowsplit.train.distributed import read_dist_env
from flowsplit.train.launch import cpp_quiet_env, environ, heartbeat_limit
from flowsplit.util import die_with_parent

log = logging.getLogger("flowsplit.federated")

CHECKPOINT_NAME = "sfl-checkpoint.pt"
"""``OUT/sfl-checkpoint.pt``: the server's state after its last finished round."""


def drive(coro: Coroutine, transport: GlooTransport, tracer: Tracer | None = None) -> None:
    """Run one role coroutine, answering its requests over the network.

    ``tracer``: record the role's events with their wall times (``time.time()``, one
    clock for every process of a host) for the round's measured timeline.
    """
    value = None
    charged = transport.meter.charged
    while True:
        start, cpu = time.monotonic(), time.thread_time()
        t_resume = time.time()
        before = charged.get(transport.me, (0.0,))[0]
        try:
            op = coro.send(value)
        except StopIteration:
            return
        busy = time.monotonic() - start
        if busy > 1.0:  # the role's own work between two messages (debug log only)
            log.debug(
                "%s: %.2f s (%.2f s CPU) of work before %s",
                role_name(transport.me),
                busy,
                time.thread_time() - cpu,
                type(op).__name__,
            )
        if tracer is not None:
            seconds = charged.get(transport.me, (0.0,))[0] - before
            if seconds > 0:
                phase = charged[transport.me][1]
            else:
                phase = op.phase if type(op) is Send else tracer.recv_phase(op.kind)
            tracer.work(seconds, phase, t_resume, time.time())
        if type(op) is Send:
            start = time.monotonic()
            t0 = time.time()
            posted = op.dst not in transport.lost
            transport.send(op)
            if tracer is not None:
                nbytes = message_nbytes(op.tensor) if posted else -1
                peer = rank_of(op.dst, tracer.n_aggregators)
                tracer.send(peer, nbytes, op.phase, t0, time.time())
            if time.monotonic() - start > 1.0:
                log.debug(
                    "%s: sending took %.2f s", role_name(transport.me), time.monotonic() - start
                )
            value = None
        else:
            t0 = time.time()
            value = transport.recv(op)
            if tracer is not None:
                came = value is not None or op.src not in transport.lost
                peer = rank_of(op.src, tracer.n_aggregators)
                tracer.recv(peer, 0 if came else -1, op.kind, t0, time.time())


ASSIGNMENT_KEY = "flowsplit/assignment/{round}"
"""Store key of round ``round``'s assignment (0-based): (N,) little-endian int64 bytes."""


def _sum_in_order(parts: list[np.ndarray]) -> np.ndarray:
    """``parts[0] + parts[1] + ...`` left to right (the order the ledgers always summed in)."""
    total = parts[0].copy()
    for part in parts[1:]:
        total += part
    return total


def _stack_events(parts: list[np.ndarray]) -> np.ndarray:
    """Event rows of several roles, one table (received traces arrive flat)."""
    return np.concatenate([p.reshape(-1, N_COLS) for p in parts])


class DistRuntime:
    """This process's role in a distributed run.

    Before each round (:meth:`plan_round`) the server asks the run's
    :class:`~flowsplit.federated.assignment.AssignmentPolicy` for the round's
    assignment and writes it to the rendezvous store as raw int64 bytes; every other
    role reads it from there and connects to any peer the round gives it that it has
    no group with yet (a client moved to another aggregator).
    """

    def __init__(
        self,
        setup: RunSetup,
        me: Address,
        transport: GlooTransport,
        ctx,
        *,
        store: dist.Store | None = None,
        policy: AssignmentPolicy | None = None,
        device: Any = None,
        wait_timeout: float = 60.0,
    ):
        self.setup, self.me, self.transport, self.ctx = setup, me, transport, ctx
        self.is_server = me == SERVER_ADDRESS
        self.store, self.device, self.wait_timeout = store, device, wait_timeout
        self.policy = policy if policy is not None else AssignmentPolicy()
        self.assignment = setup.assignment
        """The assignment of the last planned round (the run's initial one before)."""
        self.n_samples = setup.n_samples
        self.measured_on = "loopback"
        """Where this run's times are measured (:func:`measured_on`)."""
        self.probed: Topology | None = None
        """The server's probed topology (``--probe``): rounds are predicted on it."""
        client_tpl, agg_tpl, server_tpl = setup.tier_modules()
        kind, index = me
        if self.is_server:
            self.role = CloudServer(ctx, client_tpl, agg_tpl, server_tpl)
            self._eval = setup.eval_data()
        elif kind == AGGREGATOR:
            self.role = EdgeAggregator(index, ctx, agg_tpl)
        else:
            self.role = Client(index, ctx, client_tpl, *setup.client_data(index))
        self._warm_up()
        torch.manual_seed(role_seed(setup.config.seed, me))

    def _warm_up(self) -> None:
        # One forward and backward pass of a throwaway copy pays the first-call costs
        # before anyone starts a drop timer. The backward takes an explicit gradient,
        # as behind a cut: the first such call imports sympy through torch.fx (seconds).
        model = copy.deepcopy(self.setup.model)
        x = torch.randint(0, 256, (2, *model.input_shape)).to(torch.float32)
        out = model(x)
        out.backward(torch.ones_like(out))

    def handshake(self) -> None:
        """Clients report ready to their aggregator (after warming up), with a long timeout."""
        kind, index = self.me
        ready = torch.zeros(1)
        if kind == CLIENT:
            agg = (AGGREGATOR, int(self.assignment[index]))
            self.transport.send(Send(agg, ready, CONTROL), telemetry=True)
        elif kind == AGGREGATOR:
            for i in np.flatnonzero(self.assignment == index):
                got = self.transport.recv(Recv((CLIENT, int(i)), CONTROL), telemetry=True)
                if got is None:
                    self.role.lost.add(int(i))

    def alive_aggregators(self) -> np.ndarray:
        """(A,) bool: the aggregators this process has not lost."""
        alive = np.ones(self.setup.topology.n_aggregators, dtype=bool)
        for kind, j in self.transport.lost:
            if kind == AGGREGATOR:
                alive[j] = False
        return alive

    def plan_round(self, plan: RoundPlan) -> RoundPlan:
        """``plan`` on its round's network, with the assignment the server decided.

        The server asks the policy, brings the clients it moved back from its lost set,
        and writes ``(assignment, skipped)`` as a (2, N) int64 array to the store; every
        other role reads it. Aggregators then report ready (telemetry): one that does
        not (its process is gone) is lost before any of the round's traffic, and its
        clients are lost for this round, as in the simulation.
        """
        net = self.policy.network_for_round(plan.round, self.setup.topology)
        plan = plan.with_network(self.assignment, net.topology, net.available)
        key = ASSIGNMENT_KEY.format(round=plan.round)
        kind, index = self.me
        if kind == AGGREGATOR and self.setup.config.failed_aggregators().get(index) == plan.round:
            log.warning(
                "aggregator %d: SIGKILLs itself at the start of round %d (--fail)",
                index,
                plan.round + 1,
            )
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)
        if self.is_server:
            assignment = decide_assignment(
                self.policy, self.setup, plan, self.alive_aggregators(), self.assignment
            )
            moves = changes(self.assignment, assignment)
            self.role.lost.difference_update(i for i, _, _ in moves)
            skipped = np.zeros(len(assignment), dtype=np.int64)
            skipped[sorted(self.role.lost)] = 1
            if self.store is not None:
                both = np.stack([assignment, skipped]).astype("<i8")
                self.store.set(key, np.ascontiguousarray(both).tobytes())
        elif self.store is not None:
            raw = self.store.get(key)
            both = np.frombuffer(raw, dtype="<i8").astype(np.int64)
            if both.shape != (2 * len(self.assignment),):
                raise FlowsplitError(f"{key}: {len(raw)} bytes, not an assignment of this run")
            assignment, skipped = both.reshape(2, -1)
            moves = changes(self.assignment, assignment)
        else:
            assignment, skipped, moves = self.assignment, None, []
        plan = plan.with_network(
            assignment,
            net.topology,
            net.available,
            moves,
            None if skipped is None else skipped.astype(bool),
        )
        for i, old, new in moves:
            if self.me in ((CLIENT, i), (AGGREGATOR, new)):
                log.info(
                    "round %d: client %d moves from aggregator %d to %d",
                    plan.round + 1,
                    i,
                    old,
                    new,
                )
        self.assignment = plan.assignment
        self.ctx.assignment = plan.assignment
        if self.ctx.meter.topology is not plan.topology:
            self.ctx.meter.set_topology(plan.topology)
        self._connect_new_pairs(plan)
        self._report_ready()
        return plan

    def _report_ready(self) -> None:
        """Aggregators tell the server they are there; the server loses those that are not."""
        kind, _ = self.me
        ready = torch.zeros(1)
        if kind == AGGREGATOR:
            self.transport.send(Send(SERVER_ADDRESS, ready, CONTROL), telemetry=True)
        elif self.is_server:
            for j in np.flatnonzero(self.alive_aggregators()):
                got = self.transport.recv(Recv((AGGREGATOR, int(j)), CONTROL), telemetry=True)
                if got is None:  # gone: its clients are lost this round, moved the next
                    self.role.lost.update(int(i) for i in np.flatnonzero(self.assignment == j))

    def _connect_new_pairs(self, plan: RoundPlan) -> None:
        """Create the gloo groups of this round's aggregator-client pairs we lack.

        Both ends create a pair at the same point of the same round. An aggregator gives
        a client that does not join within ``--timeout`` up as lost (it tells the server
        in the client's first slot, as for any lost client).
        """
        kind, index = self.me
        if self.is_server or self.store is None:
            return
        n_aggs = self.setup.topology.n_aggregators
        for a, b in talking_pairs(plan.assignment, n_aggs):
            if self.me not in (a, b):
                continue
            peer = b if self.me == a else a
            if peer in self.transport.peers or not plan.takes_part(
                peer[1] if peer[0] == CLIENT else index
            ):
                continue
            log.info("%s: connecting to %s", role_name(self.me), role_name(peer))
            try:
                self.transport.peers[peer] = pair_group(
                    self.store,
                    self.me,
                    a,
                    b,
                    n_aggs,
                    device=self.device,
                    timeout_s=self.setup.config.timeout_s,
                )
            except RuntimeError as exc:
                self.transport.peers[peer] = None
                self.transport.lose(peer, f"no connection: {exc}")
                if kind == AGGREGATOR:
                    self.role.lost.add(peer[1])
                continue
            self.transport.lost.discard(peer)

    def execute_round(self, plan: RoundPlan) -> RoundOutcome:
        start = time.perf_counter()
        log.debug("%s: round %d starts", role_name(self.me), plan.round + 1)
        self.ctx.meter.start_round(plan.slowdown)
        self.transport.received[...] = 0
        kind, index = self.me
        n_aggs = self.setup.topology.n_aggregators
        tracer = Tracer(rank_of(self.me, n_aggs), n_aggs)
        if kind == CLIENT:
            self._inject_faults(index, plan.round)
            if plan.takes_part(index):
                drive(self.role.run_round(plan), self.transport, tracer)
        else:
            drive(self.role.run_round(plan), self.transport, tracer)
        if self.is_server:  # an aggregator lost mid-round loses all its clients' work
            gone = ~self.alive_aggregators()
            self.role.lost.update(int(i) for i in plan.order if gone[plan.assignment[i]])
        log.debug("%s: round %d trained", role_name(self.me), plan.round + 1)
        total = self._gather_telemetry(plan)
        traces = self._gather_traces(plan, tracer.array())
        self.transport.flush()
        if not self.is_server:
            return RoundOutcome(Ledger.zeros(1, 1), float("nan"), [], time.perf_counter() - start)
        n, a = self.setup.topology.n_clients, self.setup.topology.n_aggregators
        size = len(Ledger.zeros(n, a).to_vector())
        return RoundOutcome(
            ledger=Ledger.from_vector(total[:size], n, a),
            train_loss=self.role.train_loss,
            lost=sorted(self.role.lost),
            wall_s=time.perf_counter() - start,
            received_bytes=int(round(total[size:].sum())),
            lost_aggregators=sorted(j for kind, j in self.transport.lost if kind == AGGREGATOR),
            traces=traces,
            measured_on=self.measured_on,
            predict_on=self.probed,
        )

    def _inject_faults(self, index: int, round_index: int) -> None:
        cfg = self.setup.config
        if cfg.exit_clients.get(index) == round_index:
            log.warning(
                "client %d: exits at the start of round %d (fault injection)",
                index,
                round_index + 1,
            )
            os._exit(3)
        if cfg.hang_clients.get(index) == round_index:
            log.warning(
                "client %d: stops answering at the start of round %d (fault injection)",
                index,
                round_index + 1,
            )
            while True:
                time.sleep(3600)

    def _gather_up(
        self, plan: RoundPlan, own: np.ndarray, combine: Callable[[list], np.ndarray]
    ) -> list[np.ndarray]:
        """Telemetry up the tree: a client sends ``own`` to its aggregator; an aggregator
        receives its clients' (a lost one is marked lost) and sends ``combine`` of them and
        its own to the server; the server receives every aggregator's (a lost peer's
        receive is None). Returns what this role holds, its own first."""
        kind, index = self.me
        if kind == CLIENT:
            if plan.takes_part(index):
                agg = (AGGREGATOR, int(plan.assignment[index]))
                self.transport.send(Send(agg, torch.from_numpy(own), CONTROL), telemetry=True)
            return [own]
        parts = [own]
        if kind == AGGREGATOR:
            for i in plan.order:
                i = int(i)
                if plan.assignment[i] != index or i in self.role.lost or not plan.takes_part(i):
                    continue
                got = self.transport.recv(
                    Recv((CLIENT, i), CONTROL, droppable=True), telemetry=True
                )
                if got is None:
                    self.role.lost.add(i)
                else:
                    parts.append(got.numpy())
            self.transport.send(
                Send(SERVER_ADDRESS, torch.from_numpy(combine(parts)), CONTROL), telemetry=True
            )
            return parts
        for j in range(self.setup.topology.n_aggregators):
            got = self.transport.recv(Recv((AGGREGATOR, j), CONTROL), telemetry=True)
            if got is not None:
                parts.append(got.numpy())
        return parts

    def _gather_telemetry(self, plan: RoundPlan) -> np.ndarray:
        """Sum every role's ledger (and received bytes) at the server (a client: its own)."""
        own = np.concatenate([self.ctx.meter.ledger.to_vector(), self.transport.received.ravel()])
        return _sum_in_order(self._gather_up(plan, own, _sum_in_order))

    def probe(self, mode: str, out_dir: Path) -> None:
        """Measure this role's speed and links (:mod:`flowsplit.federated.probe`); the
        server writes ``probe.json`` and ``probe.toml`` to ``out_dir`` and predicts every
        round's timeline on the probed topology. ``mode``: ``only`` measures every
        client-aggregator pair (``sfl probe``), ``run`` the assigned ones."""
        from flowsplit.data.store import atomic_write_json
        from flowsplit.federated.probe import (
            PROBE_JSON,
            PROBE_TOML,
            all_pairs,
            assigned_pairs,
            probed_topology,
            run_probe,
        )
        from flowsplit.federated.system.topology import write_topology

        topo = self.setup.topology
        pairs = all_pairs(topo) if mode == "only" else assigned_pairs(self.assignment)
        if mode == "only":
            self._connect_pairs(pairs)
        start = time.perf_counter()
        rows = run_probe(self, pairs)
        if rows is None:
            return
        self.probed, report = probed_topology(topo, rows)
        report.update(
            mode=mode,
            on=self.measured_on,
            seconds=time.perf_counter() - start,
            batch_size=self.setup.config.batch_size,
            cuts=list(self.setup.config.cuts),
            scheme=self.setup.config.scheme,
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(out_dir / PROBE_JSON, report)
        write_topology(self.probed, out_dir / PROBE_TOML)
        log.info("probe: wrote %s and %s", out_dir / PROBE_JSON, out_dir / PROBE_TOML)

    def _connect_pairs(self, pairs: list[tuple[int, int]]) -> None:
        """Create the gloo groups of ``pairs`` this process lacks (every process walks the
        same list in the same order, so the pairwise rendezvous cannot deadlock)."""
        if self.store is None:
            return
        n_aggs = self.setup.topology.n_aggregators
        for i, j in sorted(pairs, key=lambda p: (p[1], p[0])):
            a, b = (AGGREGATOR, j), (CLIENT, i)
            if self.me not in (a, b):
                continue
            peer = b if self.me == a else a
            if peer in self.transport.peers:
                continue
            self.transport.peers[peer] = pair_group(
                self.store, self.me, a, b, n_aggs, device=self.device, timeout_s=self.wait_timeout
            )

    def _gather_traces(self, plan: RoundPlan, own: np.ndarray) -> np.ndarray:
        """Every role's events of the round at the server (telemetry, like the ledgers):
        clients send theirs to their aggregator, which sends them on with its own."""
        parts = self._gather_up(plan, own, _stack_events)
        return _stack_events(parts) if self.me == SERVER_ADDRESS else own

    def checkpoint(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        """The server's whole state after ``history``'s rounds (tensors and plain data).

        Clients and aggregators need none of theirs: they receive the global parts and
        start fresh optimisers every round, and batch order is seeded by round.
        """
        server = self.role
        return {
            "round": len(history),
            "config": json.dumps(self.setup.config.to_dict(), sort_keys=True),
            "assignment": [int(a) for a in self.assignment],
            "history": json.dumps(history, default=_plain),
            "client": server.client_global.state_dict(),
            "aggregator": server.aggregator_global.state_dict(),
            "server": server.server_module.state_dict(),
            "server_opt": server.server_opt.state_dict(),
            "rng": torch.get_rng_state(),
            "lost": sorted(int(i) for i in server.lost),
        }

    def restore(self, state: dict[str, Any]) -> list[dict[str, Any]]:
        """Load a :meth:`checkpoint` into the server; returns its rounds' records."""
        server = self.role
        server.client_global.load_state_dict(state["client"])
        server.aggregator_global.load_state_dict(state["aggregator"])
        server.server_module.load_state_dict(state["server"])
        server.server_opt.load_state_dict(state["server_opt"])
        torch.set_rng_state(state["rng"])
        server.lost = set(state["lost"])
        # The assignment the last round ran with (moves included): the next starts from it.
        self.assignment = np.asarray(state["assignment"], dtype=np.int64)
        return json.loads(state["history"])

    def evaluate(self) -> dict[str, float]:
        from flowsplit.federated.metrics import evaluate_model

        x, y = self._eval
        return evaluate_model(self.role.global_model(), x, y, self.setup.dataset.n_classes)


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


def _check_world_size(world_size: int, topology: Topology) -> None:
    expected = 1 + topology.n_aggregators + topology.n_clients
    if world_size != expected:
        raise ConfigError(
            f"the dist runner needs 1 server + {topology.n_aggregators} aggregators + "
            f"{topology.n_clients} clients = {expected} processes, got {world_size}"
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
        _die_with_launcher(int(payload["launcher_pid"]))
    quiet = payload.get("quiet", False)
    config = SFLConfig.from_dict(payload["config"])
    topology = topology_from_toml(payload["topology"])
    me = address_of(rank, topology.n_aggregators)
    _setup_logging(
        Path(payload["out_dir"]) / "logs" / f"{role_name(me).replace(' ', '-')}.log", quiet
    )
    torch.set_num_threads(config.threads)
    _check_world_size(world_size, topology)
    if setup is None:
        setup = _setup_from_payload(config, topology, payload)
    wait_timeout = config.timeout_s * (2 + topology.n_clients)
    if payload.get("store") and me[0] != CLIENT:
        _start_heartbeat(payload["store"], rank, world_size)
    store = _connect_store(payload, rank, world_size, wait_timeout)
    ctx = setup.context()
    device = gloo_device(payload.get("bind"))
    peers = make_pair_groups(
        store, me, setup.assignment, topology.n_aggregators, device=device, timeout_s=wait_timeout
    )
    transport = GlooTransport(
        me, peers, ctx.meter, drop_timeout=config.timeout_s, wait_timeout=wait_timeout
    )
    log.debug("%s: connected", role_name(me))
    try:
        runtime = DistRuntime(
            setup,
            me,
            transport,
            ctx,
            store=store,
            policy=payload.get("policy"),
            device=device,
            wait_timeout=wait_timeout,
        )
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
                log_fn(record)
                kept.append(record)
                if payload.get("launcher_pid") and not _alive(int(payload["launcher_pid"])):
                    os._exit(1)  # the run was stopped: write nothing more
                save_tensors(Path(payload["out_dir"]) / CHECKPOINT_NAME, runtime.checkpoint(kept))

            history = setup.scheme.run(
                runtime, setup.config, on_round=on_round, start_round=start, history=done
            )
        if runtime.is_server:
            if payload.get("launcher_pid") and not _alive(int(payload["launcher_pid"])):
                os._exit(1)  # the launcher is gone: the user stopped the run, write nothing
            result = SFLResult(
                backend="dist",
                config=config.to_dict(),
                history=history,
                profile=setup.profile.to_dict(),
                topology=setup.topology,
                assignment=setup.assignment,
                model_state=runtime.role.global_model().state_dict(),
                **run_facts(setup),
                info={
                    "world_size": world_size,
                    "telemetry_bytes": transport.telemetry_bytes,
                    **assignment_facts(history, runtime.assignment),
                },
            )
            write_run(payload["out_dir"], result)
    finally:
        transport.close()
    log.debug("%s: done", role_name(me))


def _plain(o: Any) -> Any:
    """JSON for numpy scalars and arrays in round records."""
    return o.tolist() if hasattr(o, "tolist") else str(o)


def read_checkpoint(out_dir: str | Path, config: SFLConfig) -> dict[str, Any]:
    """``OUT/sfl-checkpoint.pt`` (tensors only), checked to be ``config``'s run."""
    path = Path(out_dir) / CHECKPOINT_NAME
    if not path.is_file():
        raise InputError(path, "no SFL checkpoint to resume from (no round of the run finished)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user problem
        raise InputError(path, f"unreadable checkpoint ({type(exc).__name__})") from None
    try:
        theirs = json.loads(state["config"])
    except (KeyError, TypeError, ValueError):  # a tensor file, but no SFL checkpoint
        raise InputError(path, "is not an SFL checkpoint (it holds no run configuration)") from None
    ours = json.loads(json.dumps(config.to_dict(), sort_keys=True))
    differ = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
    if differ:
        raise InputError(
            path, f"written by a run with other {', '.join(differ)}; resume with its options"
        )
    return state


FAILURE_FILE = "failure.txt"
"""``OUT/logs/failure.txt``: a spawned server's one-line reason for stopping the run."""


def _spawned_role_main(rank: int, world_size: int, payload: dict[str, Any]) -> None:
    """:func:`role_main` in a process of :func:`launch_roles`: a handled error (a round
    below the participation minimum, bad input) is one line for the launcher to show,
    not a traceback."""
    try:
        role_main(rank, world_size, payload)
    except Exception as exc:  # noqa: BLE001 - one line, always
        launcher = payload.get("launcher_pid")
        if launcher is not None and not _alive(int(launcher)):
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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _die_with_launcher(launcher_pid: int) -> None:
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
    if not _alive(launcher_pid):
        os._exit(1)
    threading.Thread(
        target=_watch_launcher, args=(launcher_pid,), name="launcher-watchdog", daemon=True
    ).start()


def _watch_launcher(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        fd = None
    if fd is not None:
        select.select([fd], [], [])  # readable once the process has exited
    else:
        while _alive(pid):
            time.sleep(0.2)
    os._exit(1)  # not sys.exit: no cleanup that could write into the run directory


HEARTBEAT_KEY = "flowsplit/heartbeat/{rank}"
"""Store counter the server and each aggregator (spawned by :func:`launch_roles`) bump
every :data:`HEARTBEAT_S` seconds; the launcher watches it (:class:`_HeartbeatWatch`)."""
HEARTBEAT_S = 1.0


def heartbeat_timeout(config: SFLConfig) -> float:
    """Seconds of silence after which the launcher takes an upper-tier role for stopped:
    ``--timeout``, within 5..30 s, as for DDP workers (a heartbeat of a loaded machine
    may come late; a stopped role must be found well within a minute)."""
    return heartbeat_limit(config.timeout_s)


def _start_heartbeat(address: tuple[str, int], rank: int, world_size: int) -> None:
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


class _HeartbeatWatch:
    """The launcher's view of the server's and the aggregators' heartbeats."""

    def __init__(self, store: dist.Store, procs: list, n_aggregators: int, timeout_s: float):
        self.store, self.procs, self.timeout_s = store, procs, timeout_s
        self.ranks = list(range(1 + n_aggregators))
        self.seen: dict[int, tuple[int, float]] = {}
        self.ended: set[int] = set()

    def silent(self) -> int | None:
        """The first live rank whose counter, once started, has not moved for ``timeout_s``
        (a role whose process ended is not silent: its peers see its connections close)."""
        now = time.monotonic()
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


class ServerSilent(FlowsplitError):
    """The server stopped sending heartbeats; every role process was ended."""


class RunStopped(FlowsplitError):
    """The launcher got SIGINT, SIGTERM or SIGHUP; every role process was ended."""


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP (and Ctrl-C) into :class:`RunStopped` while roles run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum, _frame):
        if not fired:  # a second signal during the clean-up must not cut it short
            fired.append(signum)
            raise RunStopped(f"stopped by {signal.Signals(signum).name}")

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    except KeyboardInterrupt:
        raise RunStopped("stopped by SIGINT (Ctrl-C)") from None
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


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


def make_payload(
    setup: RunSetup,
    *,
    dataset: str | Path,
    model_fn: ModelFn,
    out_dir: str | Path,
    quiet: bool = False,
    bind: str | None = None,
) -> dict[str, Any]:
    """What every process needs to rebuild ``setup`` (plain data and a picklable factory)."""
    return {
        "config": setup.config.to_dict(),
        "dataset": str(dataset),
        "model_fn": model_fn,
        "view": setup.view,
        "topology": topology_to_toml(setup.topology),
        "profile": setup.profile.to_dict(),
        "assignment": [int(a) for a in setup.assignment],
        "out_dir": str(out_dir),
        "quiet": quiet,
        "bind": bind,
    }


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
) -> SFLResult | None:
    """Run ``setup`` as ``1 + A + N`` local processes talking over 127.0.0.1.

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
    world = 1 + topo.n_aggregators + topo.n_clients
    tmp = None
    if out_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="flowsplit-dist-")
        out_dir = tmp.name
    store, port = _loopback_store(world, setup.config.timeout_s * (2 + topo.n_clients))
    payload = make_payload(setup, dataset=dataset, model_fn=model_fn, out_dir=out_dir, quiet=quiet)
    payload.update(
        store=("127.0.0.1", port),
        bind="127.0.0.1",
        launcher_pid=os.getpid(),
        policy=policy,
        probe=probe,
    )
    if resume:
        if tmp is not None:
            raise ConfigError("resume needs the run directory to continue")
        payload["start_round"] = int(read_checkpoint(out_dir, setup.config)["round"])
    failure = Path(out_dir) / "logs" / FAILURE_FILE
    failure.unlink(missing_ok=True)
    ctx = mp.get_context("forkserver")
    # Imported once in the fork server instead of in every role: torch, this package,
    # and what the first backward with an explicit gradient imports (sympy via torch.fx).
    ctx.set_forkserver_preload(
        ["torch", "torch.fx.experimental.symbolic_shapes", "flowsplit.federated.dist"]
    )
    procs = [ctx.Process(target=_spawned_role_main, args=(r, world, payload)) for r in range(world)]
    stopped = True
    try:
        with _stop_on_signals():
            # The fork server (started by the first role) and so every role inherit it.
            with environ(cpp_quiet_env()):
                for p in procs:
                    p.start()
            watch = _HeartbeatWatch(
                store, procs, topo.n_aggregators, heartbeat_timeout(setup.config)
            )
            end = None if deadline_s is None else time.monotonic() + deadline_s
            while procs[0].is_alive() and (end is None or time.monotonic() < end):
                procs[0].join(0.5)
                silent = watch.silent()
                if silent == 0:  # the server: nothing can go on without it
                    raise ServerSilent(
                        f"dist run failed: the server (rank 0) sent no heartbeat for "
                        f"{watch.timeout_s:g} s (stopped or hung); every role process was ended"
                    )
                if silent is not None:  # an aggregator: end it, the server moves its clients
                    log.warning(
                        "aggregator %d (rank %d) sent no heartbeat for %g s (stopped or hung): "
                        "ending its process; its clients are reassigned",
                        silent - 1,
                        silent,
                        watch.timeout_s,
                    )
                    procs[silent].kill()
            # The others finish within moments of the server; a hung one is ended below.
            grace = time.monotonic() + 3.0
            for p in procs[1:]:
                p.join(max(0.0, grace - time.monotonic()))
            stopped = False
    except RunStopped as exc:
        raise RunStopped(f"{exc}: every role process was ended; {out_dir} has no result") from None
    except ServerSilent:
        if tmp is not None:
            tmp.cleanup()
        raise
    finally:
        _end_roles(procs, at_once=stopped)
        del store
    try:
        if procs[0].exitcode != 0:
            reason = failure.read_text(encoding="utf-8").strip() if failure.is_file() else ""
            raise FlowsplitError(
                f"dist run failed: {reason}"
                if reason
                else f"dist run failed: the server process exited with code "
                f"{procs[0].exitcode} (its log is above)"
            )
        return None if probe == "only" else read_run(out_dir)
    finally:
        if tmp is not None:
            tmp.cleanup()


def _end_roles(procs: list, *, at_once: bool) -> None:
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


def run_under_torchrun(
    setup: RunSetup,
    *,
    dataset: str | Path,
    model_fn: ModelFn,
    out_dir: str | Path,
    quiet: bool = False,
    bind: str | None = None,
    policy: AssignmentPolicy | None = None,
    probe: str | None = None,
) -> SFLResult | None:
    """Run this process's role of a torchrun launch; rank 0 returns the result.

    ``policy``, ``probe``: as for :func:`launch_roles` (every process builds its own).
    """
    env = read_dist_env()
    if not env.is_distributed:
        raise ConfigError("not started by torchrun (WORLD_SIZE unset or 1)")
    payload = make_payload(
        setup, dataset=dataset, model_fn=model_fn, out_dir=out_dir, quiet=quiet, bind=bind
    )
    payload["policy"] = policy
    payload["probe"] = probe
    role_main(env.rank, env.world_size, payload, setup)
    return read_run(out_dir) if env.rank == 0 and probe != "only" else None
