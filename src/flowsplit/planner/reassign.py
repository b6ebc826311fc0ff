"""Reassigning the clients of lost aggregators with the planner's greedy.

:func:`place_clients` is the ``place`` function of the runtime's default
:class:`~flowsplit.federated.assignment.AssignmentPolicy` (the runtime may not import
the planner, which is built on it; ``sfl run`` hands it in). It keeps every other
client where it is and places the movers with :func:`~flowsplit.planner.assign.greedy_assign`
on the run's cost model at the run's cuts: the greedy sees the kept clients pinned to
their aggregators (their only link) and each mover linked to the surviving aggregators
it has links to, so a mover goes where the round would finish earliest with it, within
the aggregators' capacities.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from flowsplit.errors import ConfigError
from flowsplit.federated.assignment import AssignmentPolicy
from flowsplit.federated.system.topology import Topology
from flowsplit.planner.assign import greedy_assign
from flowsplit.planner.costs import build_cost_table


def capacities(capacity: tuple[int, ...], n_aggregators: int) -> np.ndarray | None:
    """``--capacity`` as (A,) most clients per aggregator (one value: the same for all)."""
    if not capacity:
        return None
    if len(capacity) == 1:
        return np.full(n_aggregators, int(capacity[0]), dtype=np.int64)
    if len(capacity) != n_aggregators:
        raise ConfigError(
            f"--capacity gives {len(capacity)} values for {n_aggregators} aggregators; "
            "give one for all or one per aggregator"
        )
    return np.asarray(capacity, dtype=np.int64)


def place_clients(
    setup: Any,
    topology: Topology,
    previous: np.ndarray,
    movers: np.ndarray,
    alive: np.ndarray,
) -> np.ndarray:
    """(N,) ``previous`` with the ``movers`` placed on ``alive`` aggregators by the greedy.

    A mover with no link to a surviving aggregator, or for whom no surviving aggregator
    has room, stays where it was (and stays lost). Capacities: ``setup.config.capacity``.
    """
    previous = np.asarray(previous, dtype=np.int64)
    n, a = topology.n_clients, topology.n_aggregators
    cap = capacities(tuple(setup.config.capacity), a)
    allowed = (topology.ca_bandwidth > 0) & np.asarray(alive, dtype=bool)[None, :]
    movable = np.asarray(movers, dtype=bool) & allowed.any(axis=1)
    if cap is not None:  # room left once the kept clients are counted
        kept = np.bincount(previous[~movable], minlength=a)
        room = np.where(alive, cap, 0) - np.where(alive, kept, 0)
        if room.clip(min=0).sum() < movable.sum():
            movable = _first_that_fit(movable, allowed, room.clip(min=0))
    links = np.zeros((n, a), dtype=bool)
    links[np.flatnonzero(~movable), previous[~movable]] = True
    links[movable] = allowed[movable]
    pinned = replace(topology, ca_bandwidth=np.where(links, topology.ca_bandwidth, 0.0))
    table = build_cost_table(
        [setup.costs],
        pinned,
        setup.scheme,
        batch_size=setup.config.batch_size,
        local_epochs=setup.config.local_epochs,
        samples=np.asarray(topology.client_samples),
    )
    # The kept clients count against their aggregators' capacities like any other.
    full_cap = None
    if cap is not None:
        full_cap = np.maximum(cap, np.bincount(previous[~movable], minlength=a))
    out = greedy_assign(table, np.array([0]), full_cap)[0]
    return np.where(movable, out, previous)


def _first_that_fit(movable: np.ndarray, allowed: np.ndarray, room: np.ndarray) -> np.ndarray:
    """The movers (lowest index first) for whom some allowed aggregator still has room."""
    out = np.zeros_like(movable)
    room = room.copy()
    for i in np.flatnonzero(movable):
        fits = np.flatnonzero(allowed[i] & (room > 0))
        if len(fits):
            out[i] = True
            room[fits[np.argmax(room[fits])]] -= 1
    return out


def reassigning_policy(config: Any = None) -> AssignmentPolicy:
    """The default policy of ``sfl run``: keep the assignment, move lost aggregators'
    clients with :func:`place_clients`."""
    return AssignmentPolicy(place=place_clients)
