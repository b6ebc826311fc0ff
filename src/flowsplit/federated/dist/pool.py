"""A fixed pool of client worker processes that host each round's clients.

Instead of one process per registered client, ``P`` worker processes (ranks
``1 + A .. A + P``, after the server and the aggregators) host the clients a round
runs on: the server decides each round as the simulation does
(:class:`~flowsplit.federated.participation.Participation`: the sample, re-indexed
``0..K-1``, its assignment, the clients given up on) and which live worker hosts which
client (registered client ``i`` on live worker ``i mod P_alive``, so a client meets its
own worker again whenever it is sampled), and writes it all to the rendezvous store.
Every role reads it and builds the same round.

**A client exists only while it takes part.** A worker builds each of its round's
clients at the round's start (a copy of the client part's template, its rows read from
the memory-mapped view) and drops it at the end, as the simulation does; the one thing
kept is the client's torch random state (dropout masks), in the worker that hosts it,
only for clients whose part drew random numbers.

**Messages.** Each aggregator-worker pair has one gloo group; the clients a worker hosts
for that aggregator each use their own tag (their registered index) on it, so their
messages and the aggregator's are the same as with a process per client, and so are the
bytes. A worker runs its clients in threads that take turns for their own work (one
lock; each swaps its random state in) and wait for the network outside their turn, so
one client's wait never holds up another's message.

**Liveness.** Workers beat like aggregators (the launcher ends a silent one) and report
ready to the server at the start of every round: a worker that does not (its process is
gone) is out of the pool from that round on and its clients are hosted by the others
(their kept random states go with it: they restart from their seeds). The clients it
hosted in the round it died are lost for that round (their aggregators see the
connection close, or time out) and back from the next, hosted by the others: a client
lives in no process between rounds. A worker that exits or stops by fault injection
(``exit_clients``, ``hang_clients``) does so for every client it hosts. No worker left
ends the run with one line.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import signal
import threading
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from flowsplit.errors import FlowsplitError
from flowsplit.federated.assignment import AssignmentPolicy
from flowsplit.federated.dist.runtime import DistRuntime, drive, warm_up
from flowsplit.federated.participation import CLIENT_STATE, Participation, restrict_plan
from flowsplit.federated.roles import Client, RunContext
from flowsplit.federated.schemes import RoundOutcome, RoundPlan
from flowsplit.federated.setup import RunSetup, role_seed, subset_topology
from flowsplit.federated.system.costs import CostMeter, Ledger
from flowsplit.federated.system.protocol import (
    AGGREGATOR,
    CLIENT,
    SERVER_ADDRESS,
    Address,
    address_of,
    rank_of,
)
from flowsplit.federated.system.schedule import Tracer
from flowsplit.federated.transport import GlooTransport, role_name

log = logging.getLogger("flowsplit.federated")

WORKER = "worker"
"""Address kind of a pool worker: ``(WORKER, w)`` at rank ``1 + A + w``."""
POOL_KEY = "flowsplit/pool/{round}"
"""Store key of a round's clients (0-based round): int64 ``[K, ids, assignment, skipped,
hosts]`` (each ``K`` long), little-endian."""


def pool_address(rank: int, n_aggregators: int) -> Address:
    """The role at ``rank`` in a run with a worker pool."""
    return address_of(rank, n_aggregators, WORKER)


def pool_pairs(n_aggregators: int, n_workers: int) -> list[tuple[Address, Address]]:
    """Every pair of a pooled run that talks, in one global order: server-aggregator,
    server-worker (readiness), aggregator-worker (the hosted clients' messages)."""
    pairs = [(SERVER_ADDRESS, (AGGREGATOR, j)) for j in range(n_aggregators)]
    pairs += [(SERVER_ADDRESS, (WORKER, w)) for w in range(n_workers)]
    pairs += [
        ((AGGREGATOR, j), (WORKER, w)) for j in range(n_aggregators) for w in range(n_workers)
    ]
    return pairs


def hosts_for(ids: np.ndarray, workers_alive: np.ndarray) -> np.ndarray:
    """(K,) the live worker hosting each of the round's clients ``ids`` (registered)."""
    live = np.flatnonzero(workers_alive)
    if len(live) == 0:
        raise FlowsplitError(
            "every client worker of the pool is gone (their processes ended); the run is stopped"
        )
    return live[np.asarray(ids, dtype=np.int64) % len(live)]


def encode_round(ids, assignment, skipped, hosts) -> bytes:
    k = len(ids)
    parts = [np.array([k]), ids, assignment, np.asarray(skipped, dtype=np.int64), hosts]
    return np.ascontiguousarray(np.concatenate(parts).astype("<i8")).tobytes()


def decode_round(raw: bytes, key: str) -> tuple[np.ndarray, ...]:
    """``(ids, assignment, skipped, hosts)`` of :func:`encode_round`."""
    arr = np.frombuffer(raw[: len(raw) // 8 * 8], dtype="<i8").astype(np.int64)
    if len(raw) % 8 or len(arr) < 1 or len(arr) != 1 + 4 * int(arr[0]):
        raise FlowsplitError(f"{key}: {len(raw)} bytes, not a round of this run")
    k = int(arr[0])
    ids, assignment, skipped, hosts = arr[1:].reshape(4, k)
    return ids, assignment, skipped.astype(bool), hosts


def round_plan(
    setup: RunSetup, policy: AssignmentPolicy, plan: RoundPlan, ids, assignment, skipped
) -> RoundPlan:
    """The round's plan as the server's :meth:`Participation.plan` made it, rebuilt from
    the store's record (every role computes the round's network itself)."""
    net = policy.network_for_round(plan.round, setup.topology)
    available, topology = net.available, net.topology
    if len(ids) < setup.topology.n_clients:  # a sample: the round runs on it alone
        plan = restrict_plan(plan, ids)
        available = None if available is None else np.asarray(available)[ids]
        topology = subset_topology(topology, ids)
    return plan.with_network(assignment, topology, available, (), skipped)


class PooledRuntime(DistRuntime):
    """The server or an aggregator of a run whose clients a worker pool hosts."""

    def __init__(self, *args, n_workers: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.n_workers = n_workers
        self.workers_alive = np.ones(n_workers, dtype=bool)
        self.part = Participation(self.setup, self.policy) if self.is_server else None
        """The server's registered clients (sample, assignment, losses), as the simulation's."""
        self.hosts = np.zeros(0, dtype=np.int64)

    def handshake(self) -> None:
        """Nothing: the workers report ready to the server at every round's start."""

    def plan_round(self, plan: RoundPlan) -> RoundPlan:
        """The round's clients and assignment (the server decides them, as the simulation
        does, and writes them to the store; an aggregator reads them and points its client
        peers at the workers that host them); then aggregators report ready."""
        key = POOL_KEY.format(round=plan.round)
        log.debug("%s: round %d: planning", role_name(self.me), plan.round + 1)
        self._fail_if_scheduled(plan.round)
        if self.is_server:
            self._hear_workers(plan.round)
            plan = self.part.plan(plan, self.alive_aggregators())
            ids = self.part.ids
            self.hosts = hosts_for(ids, self.workers_alive)
            self.store.set(key, encode_round(ids, plan.assignment, plan.skipped, self.hosts))
            self.role.lost = self.part.local_lost()
        else:
            ids, assignment, skipped, self.hosts = decode_round(self.store.get(key), key)
            plan = round_plan(self.setup, self.policy, plan, ids, assignment, skipped)
            self._point_client_peers(ids, plan.assignment)
        self.assignment = plan.assignment
        self.ctx.use_round(plan)
        self.ctx.n_samples = self.n_samples[ids]
        self._report_ready()
        if self.is_server:  # clients of an aggregator found gone: lost this round
            self.part.lose(self.role.lost)
        return plan

    def _hear_workers(self, round_index: int) -> None:
        """Receive every live worker's ready; a worker that sends none is out of the pool,
        and the clients it hosted that were lost with it are back (they live in no process
        between rounds: the others host them from now on)."""
        live = np.flatnonzero(self.workers_alive)
        for w in live:
            got = self.transport.recv_telemetry((WORKER, int(w)))
            if got is None:
                self.workers_alive[w] = False
                back = sorted(i for i in self.part.lost if live[i % len(live)] == w)
                self.part.lost.difference_update(back)
                log.warning(
                    "client worker %d is gone at the start of round %d: the other %d host "
                    "its clients%s",
                    w,
                    round_index + 1,
                    int(self.workers_alive.sum()),
                    f" (clients {', '.join(map(str, back))}, lost with it, are back)"
                    if back
                    else "",
                )

    def _point_client_peers(self, ids: np.ndarray, assignment: np.ndarray) -> None:
        """An aggregator's peers for the round's clients: its group with the worker that
        hosts each, on the client's own tag. Last round's clients are forgotten."""
        _, index = self.me
        peers, lost = self.transport.peers, self.transport.lost
        for addr in [p for p in peers if p[0] == CLIENT]:
            del peers[addr]
            self.transport.names.pop(addr, None)
        lost.difference_update([p for p in lost if p[0] == CLIENT])
        self.role.lost.clear()
        self.role.notified.clear()
        for k in np.flatnonzero(assignment == index):
            worker = (WORKER, int(self.hosts[k]))
            self.transport.names[(CLIENT, int(k))] = f"client {ids[k]} (on worker {worker[1]})"
            entry = peers.get(worker)
            if entry is None or worker in lost:
                peers[(CLIENT, int(k))] = None
                lost.add((CLIENT, int(k)))  # its worker is gone: the client answers None
                continue
            peers[(CLIENT, int(k))] = (entry[0], entry[1], int(ids[k]))

    def execute_round(self, plan: RoundPlan) -> RoundOutcome:
        outcome = super().execute_round(plan)
        if self.is_server:
            self.part.finish_round(self.role.lost)
        return outcome

    def final_assignment(self) -> np.ndarray:
        return self.part.assignment if self.part is not None else self.assignment

    def round_facts(self, record: dict[str, Any]) -> None:
        self.part.round_facts(record)

    def result_info(self) -> dict[str, Any]:
        state = CLIENT_STATE + " (in the pool worker that hosts the client)"
        return {
            "sampling": self.part.sampling_facts(state),
            "client_workers": self.n_workers,
            "client_workers_lost": [int(w) for w in np.flatnonzero(~self.workers_alive)],
        }

    def checkpoint(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        state = super().checkpoint(history)
        state["assignment"] = [int(a) for a in self.part.assignment]
        state["lost"] = sorted(int(i) for i in self.part.lost)
        return state

    def restore(self, state: dict[str, Any]) -> list[dict[str, Any]]:
        history = super().restore(state)
        self.part.assignment = np.asarray(state["assignment"], dtype=np.int64)
        self.part.lost = set(state["lost"])
        return history


class PoolWorker:
    """One worker process of the pool: hosts its share of each round's clients."""

    is_server = False

    def __init__(
        self,
        setup: RunSetup,
        me: Address,
        transport: GlooTransport,
        *,
        store: dist.Store,
        policy: AssignmentPolicy | None = None,
    ):
        self.setup, self.me, self.transport, self.store = setup, me, transport, store
        self.policy = policy if policy is not None else AssignmentPolicy()
        self.wait_timeout = setup.wait_timeout_s
        self.n_samples = setup.n_samples
        self.template = setup.tier_modules()[0]
        self.kept: dict[int, torch.Tensor] = {}
        """Random states of hosted clients whose part drew random numbers (by registered index)."""
        self.turns = threading.Lock()
        self.ids = np.zeros(0, dtype=np.int64)
        self.hosts = np.zeros(0, dtype=np.int64)
        self.measured_on = "loopback"
        warm_up(setup.model)

    def handshake(self) -> None:
        """Nothing: the worker reports ready at every round's start."""

    def plan_round(self, plan: RoundPlan) -> RoundPlan:
        """Report ready to the server, then read the round's clients from the store."""
        self.transport.send_telemetry(SERVER_ADDRESS, torch.zeros(1))
        key = POOL_KEY.format(round=plan.round)
        ids, assignment, skipped, self.hosts = decode_round(self.store.get(key), key)
        self.ids = ids
        return round_plan(self.setup, self.policy, plan, ids, assignment, skipped)

    def execute_round(self, plan: RoundPlan) -> RoundOutcome:
        start = time.perf_counter()
        mine = np.flatnonzero(self.hosts == self.me[1])
        self._inject_faults([int(self.ids[k]) for k in mine], plan.round)
        errors: list[BaseException] = []

        def run(k: int) -> None:
            try:
                self._run_client(k, plan)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the worker's thread
                errors.append(exc)

        threads = [
            threading.Thread(target=run, args=(int(k),), name=f"client-{k}")
            for k in mine
            if plan.takes_part(int(k))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        self.transport.flush()
        return RoundOutcome(Ledger.zeros(1, 1), float("nan"), [], time.perf_counter() - start)

    def _inject_faults(self, uids: list[int], round_index: int) -> None:
        cfg = self.setup.config
        for uid in uids:
            if cfg.exit_clients.get(uid) == round_index:
                log.warning(
                    "client worker %d: exits at the start of round %d (fault injection: client %d)",
                    self.me[1],
                    round_index + 1,
                    uid,
                )
                logging.shutdown()
                os._exit(3)
            if cfg.hang_clients.get(uid) == round_index:
                log.warning(
                    "client worker %d: stops at the start of round %d (fault injection: client %d)",
                    self.me[1],
                    round_index + 1,
                    uid,
                )
                os.kill(os.getpid(), signal.SIGSTOP)

    def _seeded(self, uid: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(role_seed(self.setup.config.seed, (CLIENT, uid)))
        return gen.get_state()

    def _run_client(self, k: int, plan: RoundPlan) -> None:
        """Client ``k`` of the round: built, trained, its ledger and events sent up, dropped."""
        setup, uid = self.setup, int(self.ids[k])
        agg = (AGGREGATOR, int(plan.assignment[k]))
        meter = CostMeter(plan.topology)
        meter.start_round(plan.slowdown)
        ctx = RunContext(
            scheme=setup.scheme,
            config=setup.config,
            costs=setup.costs,
            assignment=plan.assignment,
            n_samples=self.n_samples[self.ids],
            meter=meter,
        )
        me = (CLIENT, k)
        entry = self.transport.peers.get(agg)
        peers = {} if entry is None else {agg: (entry[0], entry[1], uid)}
        transport = GlooTransport(
            me,
            peers,
            meter,
            drop_timeout=setup.config.timeout_s,
            wait_timeout=self.wait_timeout,
        )
        transport.names[me] = f"client {uid} (on worker {self.me[1]})"
        if entry is None or agg in self.transport.lost:
            transport.lost.add(agg)
        client = Client(k, ctx, copy.deepcopy(self.template), *setup.client_data(uid), uid=uid)
        seeded = self._seeded(uid)
        state = [self.kept.get(uid, seeded)]

        @contextlib.contextmanager
        def turn():
            with self.turns:
                torch.set_rng_state(state[0])
                try:
                    yield
                finally:
                    state[0] = torch.get_rng_state()

        n_aggs = setup.topology.n_aggregators
        tracer = Tracer(rank_of(me, n_aggs), n_aggs)
        drive(client.run_round(plan), transport, tracer, turn)
        own = np.concatenate([meter.ledger.to_vector(), transport.received.ravel()])
        transport.send_telemetry(agg, torch.from_numpy(own))
        transport.send_telemetry(agg, torch.from_numpy(tracer.array()))
        transport.flush()
        with self.turns:
            if torch.equal(state[0], seeded):
                self.kept.pop(uid, None)
            else:
                self.kept[uid] = state[0]
        log.debug("%s (client %d): round %d done", role_name(me), uid, plan.round + 1)

    def probe(self, mode: str, out_dir) -> None:
        raise FlowsplitError("--probe measures a process per client; run it without a pool")

    def final_assignment(self) -> np.ndarray:
        return np.zeros(0, dtype=np.int64)

    def round_facts(self, record: dict[str, Any]) -> None:
        """Workers keep no records."""

    def evaluate(self) -> dict[str, float]:
        raise FlowsplitError("a client worker does not evaluate")
