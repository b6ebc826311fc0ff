"""The simulated runner: every role in one process, costs on a simulated clock.

:func:`run_coroutines` is a small cooperative scheduler. Role coroutines run until
they wait for a message that has not arrived; a ``Send`` charges the message to
the cost meter (its ``nbytes`` with header, as the distributed runner would put on
the wire) and drops a copy of the tensor into the receiver's mailbox. Each role
has its own torch random state (dropout masks), swapped in when it runs, so the
numbers do not depend on the interleaving and equal those of the distributed runner.
"""

from __future__ import annotations

import copy
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from flowsplit.federated.assignment import AssignmentPolicy
from flowsplit.federated.metrics import evaluate_model
from flowsplit.federated.participation import CLIENT_STATE, Participation
from flowsplit.federated.results import SFLResult, assignment_facts, result_of_run
from flowsplit.federated.roles import Client, Coroutine, EdgeAggregator
from flowsplit.federated.schemes import RoundOutcome, RoundPlan
from flowsplit.federated.server import CloudServer
from flowsplit.federated.setup import RunSetup, role_seed
from flowsplit.federated.system.costs import CostMeter
from flowsplit.federated.system.protocol import (
    CLIENT,
    Address,
    Recv,
    Send,
    message_nbytes,
    rank_of,
)
from flowsplit.federated.system.schedule import Tracer


class ProtocolError(RuntimeError):
    """The roles' message sequences do not match (a bug, never a user error)."""


def run_coroutines(
    coros: dict[Address, Coroutine],
    meter: CostMeter,
    rng_states: dict[Address, torch.Tensor] | None = None,
    tracers: dict[Address, Tracer] | None = None,
) -> None:
    """Run role coroutines to completion, delivering their messages in process.

    ``tracers``: record each role's events (its work between messages, with the compute
    seconds the meter charged, and its sends and receives) for the round's timeline.
    """
    mailboxes: dict[tuple[Address, Address], deque] = {}
    waiting: dict[tuple[Address, Address], Address] = {}
    ready: deque[tuple[Address, Any]] = deque((addr, None) for addr in coros)
    current: Address | None = None
    while ready:
        addr, value = ready.popleft()
        if rng_states is not None and addr != current:
            if current is not None:
                rng_states[current] = torch.get_rng_state()
            torch.set_rng_state(rng_states[addr])
            current = addr
        gen = coros[addr]
        tracer = None if tracers is None else tracers[addr]
        try:
            mark = _mark(meter, addr) if tracer is not None else None
            op = gen.send(value)
            while True:
                if tracer is not None:
                    mark = _trace_op(tracer, meter, addr, op, mark)
                if type(op) is Send:
                    tensor = op.tensor
                    meter.charge_message(
                        addr, op.dst, message_nbytes(tensor), op.kind, op.client, op.phase
                    )
                    # A copy, as the wire would give: the receiver may not alias the sender.
                    msg = None if tensor is None else tensor.detach().clone()
                    key = (addr, op.dst)
                    if key in waiting:
                        ready.append((waiting.pop(key), msg))
                    else:
                        mailboxes.setdefault(key, deque()).append(msg)
                    op = gen.send(None)
                elif type(op) is Recv:
                    key = (op.src, addr)
                    box = mailboxes.get(key)
                    if box:
                        op = gen.send(box.popleft())
                    else:
                        waiting[key] = addr
                        break
                else:
                    raise ProtocolError(f"{addr} yielded {op!r}, expected Send or Recv")
        except StopIteration:
            pass
    if rng_states is not None and current is not None:
        rng_states[current] = torch.get_rng_state()
    if waiting:
        raise ProtocolError(f"deadlock: roles wait for messages never sent: {waiting}")
    leftover = {k: len(v) for k, v in mailboxes.items() if v}
    if leftover:
        raise ProtocolError(f"messages sent but never received: {leftover}")


def _mark(meter: CostMeter, addr: Address) -> tuple[float, float]:
    """(compute seconds charged to ``addr`` so far this round, wall time now)."""
    return meter.charged.get(addr, (0.0,))[0], time.perf_counter()


def _trace_op(
    tracer: Tracer, meter: CostMeter, addr: Address, op: Any, mark: tuple
) -> tuple[float, float]:
    """Record the work since ``mark`` and the op ``addr`` just yielded; a new mark."""
    charged, t0 = _mark(meter, addr)
    n_aggs = tracer.n_aggregators
    seconds = charged - mark[0]
    if seconds > 0:
        phase = meter.charged[addr][1]
    else:
        phase = op.phase if type(op) is Send else tracer.recv_phase(op.kind)
    tracer.work(seconds, phase, mark[1], t0)
    if type(op) is Send:
        peer, nbytes = rank_of(op.dst, n_aggs), message_nbytes(op.tensor)
        tracer.send(peer, nbytes, op.phase, t0, t0)
    elif type(op) is Recv:
        # In process a message is there when the receiver resumes: no size to know here,
        # and none needed (the replay matches receives to sends in order).
        tracer.recv(rank_of(op.src, n_aggs), 0, op.kind, t0, t0)
    return charged, t0


def _seeded_state(seed: int) -> torch.Tensor:
    return torch.Generator().manual_seed(seed).get_state()


class SimRuntime:
    """All roles of a run in this process.

    **A client exists only while it takes part.** The server, the aggregators and their
    random states live for the whole run; a client is built at the start of a round it
    takes part in (its part a copy of the template, loaded with the global part at the
    download, as before; a fresh optimiser, as before; its rows read from the
    memory-mapped view through its index range) and dropped at the end of the round.
    What persists of a client between rounds is its torch random state (dropout masks),
    kept only when its part drew random numbers (5 KB each); its optimiser was always
    reset each round. So a run's memory grows with the clients of a round, not with the
    federation.

    **Sampling** (``flowsplit.federated.sampling``): each round runs on the sampled
    clients only, re-indexed ``0..K-1`` in the order of their indices (``self.ids``:
    their registered indices): the round's topology, assignment, ledger and delay are
    the sample's, so the cost model charges only the sampled clients. The assignment
    policy plans the sample (warm-started from each client's last assignment, the run's
    initial one for a client never seen), within the run's cuts, and ``--capacity``
    holds. Without sampling, ``ids`` is every client and the run is what it always was.
    """

    is_server = True

    def __init__(
        self,
        setup: RunSetup,
        *,
        meter_enabled: bool = True,
        policy: AssignmentPolicy | None = None,
    ):
        self.setup = setup
        self.policy = policy if policy is not None else AssignmentPolicy()
        self.part = Participation(setup, self.policy)
        """The registered clients: each round's sample, assignment and losses."""
        # Without a sample, every client every round; with one, each round re-aims it.
        whole = setup.subset(self.part.ids[:1]) if self.part.sampled else setup
        self.ctx = whole.context(meter_enabled=meter_enabled, sampled=True)
        self.alive = np.ones(setup.topology.n_aggregators, dtype=bool)
        """Aggregators not lost so far."""
        self.failures = setup.config.failed_aggregators()
        """``--fail``: aggregator -> round (0-based) from which it is gone."""
        self.n_samples = setup.n_samples
        client_tpl, agg_tpl, server_tpl = setup.tier_modules()
        self._client_template = copy.deepcopy(client_tpl)
        self.server = CloudServer(self.ctx, client_tpl, agg_tpl, server_tpl)
        self.aggregators = [
            EdgeAggregator(j, self.ctx, copy.deepcopy(agg_tpl))
            for j in range(setup.topology.n_aggregators)
        ]
        addresses = [self.server.address, *(a.address for a in self.aggregators)]
        self.rng_states = {a: _seeded_state(role_seed(setup.config.seed, a)) for a in addresses}
        """Random states of the server, the aggregators and the current round's clients."""
        self._client_rng: dict[int, torch.Tensor] = {}
        """Random states of clients whose part drew random numbers (by registered index)."""
        self._eval = setup.eval_data()

    @property
    def ids(self) -> np.ndarray:
        """Registered indices of the current round's clients (client ``k`` is ``ids[k]``)."""
        return self.part.ids

    @property
    def assignment(self) -> np.ndarray:
        """(N,) each client's aggregator as last planned (the run's initial one before)."""
        return self.part.assignment

    @property
    def lost(self) -> set[int]:
        """Registered clients the server has given up on (the server's own set holds the
        current round's indices)."""
        return self.part.lost

    @property
    def clients(self) -> list[Client]:
        """Every registered client built at once (for tools that drive roles by hand, such
        as ``benchmarks/sfl_sim.py``; the round loop builds only a round's clients)."""
        if getattr(self, "_all_clients", None) is None:
            self._all_clients = [self._client(k) for k in range(len(self.ids))]
        return self._all_clients

    def _client(self, k: int) -> Client:
        """Client ``k`` of the current round, built fresh; its random state made current."""
        uid = int(self.ids[k])
        module = copy.deepcopy(self._client_template)
        client = Client(k, self.ctx, module, *self.setup.client_data(uid), uid=uid)
        state = self._client_rng.get(uid)
        self.rng_states[client.address] = state if state is not None else self._seeded(uid)
        return client

    def _seeded(self, uid: int) -> torch.Tensor:
        return _seeded_state(role_seed(self.setup.config.seed, (CLIENT, uid)))

    def _release_clients(self) -> None:
        """Keep the random state of each client of the round that drew random numbers."""
        for addr in [a for a in self.rng_states if a[0] == CLIENT]:
            state = self.rng_states.pop(addr)
            uid = int(self.ids[addr[1]])
            if torch.equal(state, self._seeded(uid)):
                self._client_rng.pop(uid, None)
            else:
                self._client_rng[uid] = state
        self._all_clients = None

    def coroutines(self, plan: RoundPlan) -> dict[Address, Coroutine]:
        coros = {self.server.address: self.server.run_round(plan)}
        for agg in self.aggregators:
            if self.alive[agg.index]:
                coros[agg.address] = agg.run_round(plan)
        built = getattr(self, "_all_clients", None)
        for k in plan.order:
            # Lost clients (a gone aggregator's, this round) do nothing, as in dist.
            if int(k) not in self.server.lost:
                client = built[int(k)] if built is not None else self._client(int(k))
                coros[client.address] = client.run_round(plan)
        return coros

    def plan_round(self, plan: RoundPlan) -> RoundPlan:
        """``plan`` on its round's network and sample, with the assignment the policy gives
        it (:meth:`Participation.plan`).

        Then the ``--fail`` schedule: an aggregator gone from this round on takes its
        clients with it for this round (as the dist server finds at the round's start).
        """
        plan = self.part.plan(plan, self.alive)
        ids = self.ids
        self.ctx.use_round(plan)
        self.ctx.n_samples = self.n_samples[ids]
        for j, r in self.failures.items():
            if r == plan.round and self.alive[j]:
                self.alive[j] = False
                self.part.lose(np.flatnonzero(plan.assignment == j))
        self.server.lost = self.part.local_lost()
        return plan

    def execute_round(self, plan: RoundPlan) -> RoundOutcome:
        start = time.perf_counter()
        self.ctx.meter.start_round(plan.slowdown)
        coros = self.coroutines(plan)
        n_aggs = self.setup.topology.n_aggregators
        tracers = {a: Tracer(rank_of(a, n_aggs), n_aggs) for a in coros}
        run_coroutines(coros, self.ctx.meter, self.rng_states, tracers)
        self._release_clients()
        self.part.finish_round(self.server.lost)
        return RoundOutcome(
            traces=np.concatenate([t.array() for t in tracers.values()]),
            ledger=self.ctx.meter.ledger,
            train_loss=self.server.train_loss,
            lost=sorted(self.server.lost),
            wall_s=time.perf_counter() - start,
            lost_aggregators=[int(j) for j in np.flatnonzero(~self.alive)],
        )

    def round_facts(self, record: dict[str, Any]) -> None:
        """The round's registered client indices in its ``record``
        (:meth:`Participation.round_facts`)."""
        self.part.round_facts(record)

    def sampling_facts(self) -> dict[str, Any]:
        """What the result says of sampling and of the clients' state between rounds."""
        return self.part.sampling_facts(
            CLIENT_STATE, client_random_states_kept=len(self._client_rng)
        )

    def evaluate(self) -> dict[str, float]:
        x, y = self._eval
        return evaluate_model(self.server.global_model(), x, y, self.setup.dataset.n_classes)


def run_simulation(
    setup: RunSetup,
    *,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    meter_enabled: bool = True,
    policy: AssignmentPolicy | None = None,
) -> SFLResult:
    """Train ``setup`` with every role in this process; returns the run's result.

    ``policy``: the per-round network and assignment (default: keep the assignment).
    """
    torch.set_num_threads(setup.config.threads)
    runtime = SimRuntime(setup, meter_enabled=meter_enabled, policy=policy)

    def record_round(record: dict[str, Any]) -> None:
        runtime.round_facts(record)
        if on_round is not None:
            on_round(record)

    history = setup.scheme.run(runtime, setup.config, on_round=record_round)
    info = {
        **assignment_facts(history, runtime.assignment),
        "sampling": runtime.sampling_facts(),
    }
    return result_of_run(setup, "sim", history, runtime.server.global_model(), info)
