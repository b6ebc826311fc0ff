"""Which registered clients a round runs on, and what the run remembers of them between rounds.

One object per run, held by whoever decides the rounds: the simulation
(:class:`~flowsplit.federated.sim.SimRuntime`) and the server of a distributed run with
a pool of client workers (:mod:`flowsplit.federated.dist.pool`), so that both sample,
re-index, assign and lose clients the same way and their runs are equal.

Each round (:meth:`Participation.plan`): the round's network (the policy's), its sample
(:class:`~flowsplit.federated.sampling.ClientSampler`; without sampling options every
client), the sampled clients re-indexed ``0..K-1`` in the order of their registered
indices (``ids``), the round's plan, topology and assignment restricted to them, the
assignment the policy decides for the sample (warm-started from each client's last one),
``--capacity`` held for the sample, and the clients given up on (``lost``, registered
indices) marked as skipped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowsplit.errors import ConfigError
from flowsplit.federated.assignment import (
    AssignmentPolicy,
    changes,
    check_round_assignment,
    decide_assignment,
)
from flowsplit.federated.sampling import ClientSampler, sampling_configured
from flowsplit.federated.schemes import RoundPlan
from flowsplit.federated.setup import RunSetup, subset_topology


class Participation:
    """The run's registered clients: each round's sample, assignment and losses."""

    def __init__(self, setup: RunSetup, policy: AssignmentPolicy | None = None):
        self.setup = setup
        self.policy = policy if policy is not None else AssignmentPolicy()
        n = setup.topology.n_clients
        self.sampled = sampling_configured(setup.config)
        """Whether the run samples clients (any sampling option given)."""
        self.sampler = ClientSampler(setup.config, setup.n_samples) if self.sampled else None
        self.ids = np.arange(n)
        """Registered indices of the current round's clients (client ``k`` is ``ids[k]``)."""
        self.available = n
        """Clients available to sample in the current round."""
        self.assignment = np.array(setup.assignment, dtype=np.int64)
        """(N,) each client's aggregator as last planned (the run's initial one before)."""
        self.lost: set[int] = set()
        """Registered clients given up on."""
        self.n_samples = setup.n_samples

    def _select(self, plan: RoundPlan, net: Any) -> np.ndarray | None:
        """The round's clients (None: every client, no sample)."""
        if self.sampler is None:
            return None
        ids, self.available = self.sampler.sample(plan.round, net.topology, net.available)
        if len(ids) == self.setup.topology.n_clients:
            return None
        return ids

    def plan(self, plan: RoundPlan, alive: np.ndarray) -> RoundPlan:
        """``plan`` (of every registered client) on its round's network and sample, with
        the assignment the policy gives it for the aggregators ``alive``; a sampled client
        left on a lost aggregator is lost with it."""
        setup = self.setup
        net = self.policy.network_for_round(plan.round, setup.topology)
        ids = self._select(plan, net)
        available, topology, round_setup = net.available, net.topology, setup
        if ids is None:
            self.ids = np.arange(setup.topology.n_clients)
        else:
            self.ids = ids
            plan = restrict_plan(plan, ids)
            available = None if available is None else np.asarray(available)[ids]
            round_setup = setup.subset(ids, assignment=self.assignment[ids])
            topology = subset_topology(topology, ids)
        ids = self.ids
        previous = self.assignment[ids]
        plan = plan.with_network(previous, topology, available)
        assignment = decide_assignment(self.policy, round_setup, plan, alive, previous)
        if self.sampler is not None:
            assignment = self._hold_capacity(round_setup, topology, assignment, previous, alive)
        moves = changes(previous, assignment)
        self.lost.difference_update(int(ids[k]) for k, _, _ in moves)  # back at their new one
        # A sampled client left on a lost aggregator (never placed) is lost with it.
        self.lost.update(int(i) for i in ids[~alive[assignment]])
        skipped = np.zeros(len(assignment), dtype=bool)
        skipped[local_index(ids, self.lost)] = True
        moved = [[int(ids[k]), f, t] for k, f, t in moves]
        plan = plan.with_network(assignment, topology, available, moved, skipped)
        self.assignment[ids] = plan.assignment
        return plan

    def _hold_capacity(
        self,
        round_setup: RunSetup,
        topology: Any,
        assignment: np.ndarray,
        previous: np.ndarray,
        alive: np.ndarray,
    ) -> np.ndarray:
        """``assignment`` of the sample with the clients over an aggregator's ``--capacity``
        (the last ones by index) placed elsewhere by the policy's ``place``."""
        cap = self.setup.config.capacity
        if not cap:
            return assignment
        a = topology.n_aggregators
        limit = np.full(a, cap[0]) if len(cap) == 1 else np.asarray(cap)
        rank = np.zeros(len(assignment), dtype=np.int64)
        order = np.argsort(assignment, kind="stable")
        starts = np.searchsorted(assignment[order], np.arange(a))
        rank[order] = np.arange(len(order)) - starts[assignment[order]]
        over = rank >= limit[assignment]
        if not over.any():
            return assignment
        if self.policy.place is None:
            raise ConfigError(
                f"{int(over.sum())} sampled clients exceed --capacity and the run has no "
                "placer to move them (sfl run supplies the planner's)"
            )
        placed = self.policy.place(round_setup, topology, assignment, over, alive.copy())
        return check_round_assignment(placed, topology, alive, previous)

    def lose(self, clients) -> None:
        """Give up on the round's clients ``clients`` (indices ``0..K-1``)."""
        self.lost.update(int(self.ids[k]) for k in clients)

    def local_lost(self) -> set[int]:
        """The lost clients among the round's, as round indices."""
        return set(local_index(self.ids, self.lost).tolist())

    def finish_round(self, lost_in_round) -> None:
        """After the round: its clients lost are exactly ``lost_in_round`` (round indices)."""
        ids = self.ids
        self.lost.difference_update(ids[local_index(ids, self.lost)].tolist())
        self.lost.update(int(ids[k]) for k in lost_in_round)

    def round_facts(self, record: dict[str, Any]) -> None:
        """Put the round's registered client indices into its ``record`` (the round ran on
        ``0..K-1``): ``lost`` as registered indices and, when sampling, ``sampled`` (the
        round's clients) and ``available`` (how many could have been sampled)."""
        if self.sampler is None:
            return
        record["lost"] = [int(self.ids[k]) for k in record["lost"]]
        record["sampled"] = [int(i) for i in self.ids]
        record["available"] = int(self.available)

    def sampling_facts(self, client_state: str, **more: Any) -> dict[str, Any]:
        """What the result says of sampling and of the clients' state between rounds."""
        n = self.setup.topology.n_clients
        out: dict[str, Any] = {
            "clients": n,
            "clients_without_rows": int((self.n_samples == 0).sum()),
            "client_state": client_state,
            **more,
        }
        if self.sampler is not None:
            out.update(self.sampler.describe())
        return out


CLIENT_STATE = (
    "reset each round: a client's part is loaded with the global part and gets "
    "a fresh optimiser every round it takes part (as in every run); only its "
    "torch random state (dropout masks) is kept, for clients whose part drew "
    "random numbers"
)
"""What a client keeps between rounds (the same in the simulation and the worker pool)."""


def restrict_plan(plan: RoundPlan, ids: np.ndarray) -> RoundPlan:
    """``plan`` (of every client, before its network) for the clients ``ids`` only, client
    ``k`` being ``ids[k]``: their draws of dropouts and stragglers, their service order."""
    n = len(plan.participants)
    local = np.full(n, -1, dtype=np.int64)
    local[ids] = np.arange(len(ids))
    order = local[plan.order]
    return RoundPlan(
        round=plan.round,
        participants=plan.participants[ids],
        order=order[order >= 0],
        slowdown=plan.slowdown[ids],
        n_batches=plan.n_batches[ids],
    )


def local_index(ids: np.ndarray, clients: set[int]) -> np.ndarray:
    """Positions in ``ids`` (sorted) of the ``clients`` among them."""
    if not clients:
        return np.zeros(0, dtype=np.int64)
    wanted = np.fromiter(clients, dtype=np.int64)
    pos = np.searchsorted(ids, wanted).clip(0, len(ids) - 1)
    return np.sort(pos[ids[pos] == wanted])
