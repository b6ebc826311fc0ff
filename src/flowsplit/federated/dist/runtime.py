"""One role of a distributed run, round by round: :class:`DistRuntime` and :func:`drive`.

Each process builds the same :class:`~flowsplit.federated.setup.RunSetup`, runs its own
role's coroutine (the same step code as the simulation) through a
:class:`~flowsplit.federated.transport.GlooTransport`, and after every round sends its
cost ledger up the tree (client -> aggregator -> server, "telemetry", not counted as
protocol bytes) so the server reports the same metrics as the simulation plus the bytes
that were really received. How the process was started is :mod:`.role`'s business.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from flowsplit.errors import FlowsplitError
from flowsplit.federated.assignment import AssignmentPolicy, changes, decide_assignment
from flowsplit.federated.dist.checkpoint import plain
from flowsplit.federated.roles import Client, Coroutine, EdgeAggregator
from flowsplit.federated.schemes import RoundOutcome, RoundPlan
from flowsplit.federated.server import CloudServer
from flowsplit.federated.setup import RunSetup, role_seed
from flowsplit.federated.system.costs import Ledger
from flowsplit.federated.system.protocol import (
    AGGREGATOR,
    CLIENT,
    SERVER_ADDRESS,
    Address,
    Send,
    message_nbytes,
    rank_of,
)
from flowsplit.federated.system.schedule import N_COLS, Tracer
from flowsplit.federated.system.topology import Topology
from flowsplit.federated.transport import (
    GlooTransport,
    pair_group,
    role_name,
    talking_pairs,
)

log = logging.getLogger("flowsplit.federated")


def drive(
    coro: Coroutine,
    transport: GlooTransport,
    tracer: Tracer | None = None,
    turn: Callable[[], contextlib.AbstractContextManager] | None = None,
) -> None:
    """Run one role coroutine, answering its requests over the network.

    ``tracer``: record the role's events with their wall times (``time.time()``, one
    clock for every process of a host) for the round's measured timeline.
    ``turn``: a context the coroutine's own work runs in (a pool worker's clients take
    turns: one lock, each its own random state), the network waits outside it.
    """
    value = None
    charged = transport.meter.charged
    while True:
        start, cpu = time.monotonic(), time.thread_time()
        t_resume = time.time()
        before = charged.get(transport.me, (0.0,))[0]
        try:
            if turn is None:
                op = coro.send(value)
            else:
                with turn():
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


def warm_up(model: Any) -> None:
    """One forward and backward pass of a throwaway copy of ``model``: pays the first-call
    costs before anyone starts a drop timer. The backward takes an explicit gradient, as
    behind a cut: the first such call imports sympy through torch.fx (seconds)."""
    model = copy.deepcopy(model)
    x = torch.randint(0, 256, (2, *model.input_shape)).to(torch.float32)
    out = model(x)
    out.backward(torch.ones_like(out))


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
    ):
        self.setup, self.me, self.transport, self.ctx = setup, me, transport, ctx
        self.is_server = me == SERVER_ADDRESS
        self.store, self.device, self.wait_timeout = store, device, setup.wait_timeout_s
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
        warm_up(self.setup.model)

    def handshake(self) -> None:
        """Clients report ready to their aggregator (after warming up), with a long timeout."""
        kind, index = self.me
        ready = torch.zeros(1)
        if kind == CLIENT:
            agg = (AGGREGATOR, int(self.assignment[index]))
            self.transport.send_telemetry(agg, ready)
        elif kind == AGGREGATOR:
            for i in np.flatnonzero(self.assignment == index):
                got = self.transport.recv_telemetry((CLIENT, int(i)))
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
        self._fail_if_scheduled(plan.round)
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
        self.ctx.use_round(plan)
        self._connect_new_pairs(plan)
        self._report_ready()
        return plan

    def _fail_if_scheduled(self, round_index: int) -> None:
        """``--fail aggregator:J@roundR``: aggregator J's process SIGKILLs itself now."""
        kind, index = self.me
        if kind == AGGREGATOR and self.setup.config.failed_aggregators().get(index) == round_index:
            log.warning(
                "aggregator %d: SIGKILLs itself at the start of round %d (--fail)",
                index,
                round_index + 1,
            )
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)

    def _report_ready(self) -> None:
        """Aggregators tell the server they are there; the server loses those that are not."""
        kind, _ = self.me
        ready = torch.zeros(1)
        if kind == AGGREGATOR:
            self.transport.send_telemetry(SERVER_ADDRESS, ready)
        elif self.is_server:
            for j in np.flatnonzero(self.alive_aggregators()):
                got = self.transport.recv_telemetry((AGGREGATOR, int(j)))
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
        n, a = len(plan.assignment), self.setup.topology.n_aggregators  # the round's clients
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
                self.transport.send_telemetry(agg, torch.from_numpy(own))
            return [own]
        parts = [own]
        if kind == AGGREGATOR:
            for i in plan.order:
                i = int(i)
                if plan.assignment[i] != index or i in self.role.lost or not plan.takes_part(i):
                    continue
                got = self.transport.recv_telemetry((CLIENT, i), droppable=True)
                if got is None:
                    self.role.lost.add(i)
                else:
                    parts.append(got.numpy())
            self.transport.send_telemetry(SERVER_ADDRESS, torch.from_numpy(combine(parts)))
            return parts
        for j in range(self.setup.topology.n_aggregators):
            got = self.transport.recv_telemetry((AGGREGATOR, j))
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
            "history": json.dumps(history, default=plain),
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

    def final_assignment(self) -> np.ndarray:
        """(N,) every registered client's aggregator at the end of the run."""
        return self.assignment

    def round_facts(self, record: dict[str, Any]) -> None:
        """Add what the round's record lacks (the server, before the record is kept)."""

    def result_info(self) -> dict[str, Any]:
        """What the run's result says of this runner (the server)."""
        return {}

    def evaluate(self) -> dict[str, float]:
        from flowsplit.federated.metrics import evaluate_model

        x, y = self._eval
        return evaluate_model(self.role.global_model(), x, y, self.setup.dataset.n_classes)
