"""The per-round network and assignment: the hook the round loop asks before every round.

Before each round, :meth:`Scheme.run <flowsplit.federated.schemes.Scheme.run>` lets the
runtime *plan the round's network* (``runtime.plan_round(plan)``), which asks the run's
:class:`AssignmentPolicy` two things:

- :meth:`AssignmentPolicy.network_for_round`: the topology the round is charged with
  (speeds, links) and which clients are available. Asked in **every process** (the
  simulation's one, and every role of the distributed runner), so it must be a
  deterministic function of the round and the base topology (a trace, a seed);
- :meth:`AssignmentPolicy.assignment_for_round`: which aggregator serves each client
  this round, given a :class:`RoundQuery` (the aggregators still alive, last round's
  assignment, the round's participants and network, the run's setup). Asked
  **once per round**, by the simulation or by the dist server, which then tells every
  role (as raw int64 bytes through the run's rendezvous store, never a pickle).

The default policy keeps the assignment; the clients of an aggregator that is gone are
moved by its ``place`` function (:data:`Placer`) to the surviving aggregators. Placing
needs the planner's greedy (:mod:`flowsplit.planner.assign`), which this package may not
import (the planner is built on it), so the planner side supplies the function and the
command layer passes it in (``flowsplit.planner.reassign.place_clients``). Without a
``place`` the clients of a lost aggregator stay lost for the rest of the run.

A policy is handed to :func:`~flowsplit.federated.sim.run_simulation`,
:func:`~flowsplit.federated.dist.launch_roles` or
:func:`~flowsplit.federated.dist.run_under_torchrun` (``policy=``); it must be
picklable (a module-level class), since spawned roles receive it with their payload.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from flowsplit.errors import ConfigError
from flowsplit.federated.system.topology import Topology


@dataclass(frozen=True)
class RoundNetwork:
    """The network of one round."""

    topology: Topology
    """What the round's messages and compute are charged with (same N and A as the run's)."""
    available: np.ndarray | None = None
    """(N,) bool: clients that can take part (None: all). Unavailable clients sit the round
    out like ``--drop-prob`` dropouts: not scheduled, not failures."""


@dataclass(frozen=True)
class RoundQuery:
    """What :meth:`AssignmentPolicy.assignment_for_round` is told about a round.

    Its arrays are copies, made on construction: a policy may change them without
    touching the run's state.
    """

    round_index: int
    """The round, 0-based."""
    alive: np.ndarray
    """(A,) bool: the aggregators not lost so far."""
    previous: np.ndarray
    """(N,) int64: last round's assignment (the run's initial one before round 0)."""
    participants: np.ndarray
    """(N,) bool: the clients scheduled this round."""
    topology: Topology
    """This round's network (:meth:`AssignmentPolicy.network_for_round`)."""
    setup: Any
    """The run's :class:`~flowsplit.federated.setup.RunSetup` (costs, scheme, config,
    shard sizes)."""

    def __post_init__(self) -> None:
        for name, dtype in (("alive", bool), ("previous", np.int64), ("participants", bool)):
            object.__setattr__(self, name, np.array(getattr(self, name), dtype=dtype))


Placer = Callable[..., np.ndarray]
"""``place(setup, topology, previous, movers, alive) -> (N,) assignment``.

``setup``: the run's :class:`~flowsplit.federated.setup.RunSetup` (costs, scheme, batch
size, shard sizes); ``topology``: the round's; ``previous``: (N,) last assignment;
``movers``: (N,) bool, the clients to place; ``alive``: (A,) bool, the aggregators that
may take them. Must return an assignment that keeps every other client where it was and
puts movers on alive, linked aggregators (capacity is the placer's business).
"""


class AssignmentPolicy:
    """Keep the assignment; move the clients of lost aggregators with ``place``.

    Subclass and override either method to change the network or the assignment
    per round (re-planning); both are described in the module docstring.
    """

    def __init__(self, place: Placer | None = None):
        self.place = place

    def __repr__(self) -> str:
        return f"{type(self).__name__}(place={getattr(self.place, '__name__', self.place)})"

    def network_for_round(self, round_index: int, topology: Topology) -> RoundNetwork:
        """The round's network (``round_index`` 0-based; ``topology``: the run's): the
        topology's trace applied (``Topology.at_round``, ``available_at``), so every
        policy, the static one too, is charged on the network of each round."""
        if not topology.trace:
            return RoundNetwork(topology)
        return RoundNetwork(topology.at_round(round_index), topology.available_at(round_index))

    def assignment_for_round(self, query: RoundQuery) -> np.ndarray:
        """(N,) aggregator of each client in ``query``'s round: last round's, with the
        clients of lost aggregators placed by ``place`` (kept, and lost, without one)."""
        previous = query.previous
        movers = ~query.alive[previous]
        if self.place is None or not movers.any() or not query.alive.any():
            return previous
        return self.place(query.setup, query.topology, previous, movers, query.alive)


def check_round_assignment(
    assignment: np.ndarray, topology: Topology, alive: np.ndarray, previous: np.ndarray
) -> np.ndarray:
    """``assignment`` as (N,) int64, or :class:`ConfigError` saying what a policy got wrong.

    A client may stay on a lost aggregator only if it was there already (a policy
    without a placer keeps it there, and it stays lost); it may not be moved to one.
    """
    out = topology.check_assignment(np.asarray(assignment))
    onto_dead = (~np.asarray(alive, bool)[out]) & (out != np.asarray(previous))
    if onto_dead.any():
        i = int(np.flatnonzero(onto_dead)[0])
        raise ConfigError(f"the assignment policy put client {i} on lost aggregator {int(out[i])}")
    return out


def changes(previous: np.ndarray, current: np.ndarray) -> list[list[int]]:
    """``[[client, from, to], ...]`` for every client whose aggregator changed."""
    moved = np.flatnonzero(np.asarray(previous) != np.asarray(current))
    return [[int(i), int(previous[i]), int(current[i])] for i in moved]


def decide_assignment(
    policy: AssignmentPolicy,
    setup: Any,
    plan: Any,
    alive: np.ndarray,
    previous: np.ndarray,
) -> np.ndarray:
    """Ask ``policy`` for the assignment of ``plan``'s round (already on its network) and
    check it; the simulation and the dist server call this once per round."""
    query = RoundQuery(
        round_index=plan.round,
        alive=alive,
        previous=previous,
        participants=plan.participants,
        topology=plan.topology,
        setup=setup,
    )
    assignment = policy.assignment_for_round(query)
    return check_round_assignment(assignment, plan.topology, alive, previous)
