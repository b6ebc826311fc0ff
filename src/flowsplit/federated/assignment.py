"""The per-round network and assignment: the hook the round loop asks before every round.

Before each round, :meth:`Scheme.run <flowsplit.federated.schemes.Scheme.run>` lets the
runtime *plan the round's network* (``runtime.plan_round(plan)``), which asks the run's
:class:`AssignmentPolicy` two things:

- :meth:`AssignmentPolicy.network_for_round`: the topology the round is charged with
  (speeds, links) and which clients are available. Asked in **every process** (the
  simulation's one, and every role of the distributed runner), so it must be a
  deterministic function of the round and the base topology (a trace, a seed);
- :meth:`AssignmentPolicy.assignment_for_round`: which aggregator serves each client
  this round, given the aggregators still alive and last round's assignment. Asked
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

    def assignment_for_round(
        self,
        round_index: int,
        alive_aggregators: np.ndarray,
        previous_assignment: np.ndarray,
        *,
        setup: Any,
        topology: Topology,
        participants: np.ndarray,
    ) -> np.ndarray:
        """(N,) aggregator of each client in round ``round_index`` (0-based).

        ``alive_aggregators``: (A,) bool, those not lost so far; ``previous_assignment``:
        (N,) the last round's (the run's initial one before round 0); ``setup``: the
        run's ``RunSetup``; ``topology``: this round's; ``participants``: (N,) bool, the
        clients scheduled this round.
        """
        previous = np.asarray(previous_assignment, dtype=np.int64)
        movers = ~np.asarray(alive_aggregators, dtype=bool)[previous]
        if self.place is None or not movers.any() or not np.any(alive_aggregators):
            return previous
        return self.place(setup, topology, previous, movers, np.asarray(alive_aggregators, bool))


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
    assignment = policy.assignment_for_round(
        plan.round,
        np.asarray(alive, dtype=bool).copy(),
        np.asarray(previous, dtype=np.int64).copy(),
        setup=setup,
        topology=plan.topology,
        participants=plan.participants.copy(),
    )
    return check_round_assignment(assignment, plan.topology, alive, previous)
