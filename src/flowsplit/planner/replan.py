"""Re-planning per round: the assignment re-run on each round's network, warm-started.

The research runs its heuristic on the server before every round. When a topology
carries a trace (:meth:`~flowsplit.federated.system.topology.Topology.at_round`:
links that congest, clients that drop out), last round's assignment may no longer be
good; :func:`replan_assignment` re-runs the planner's assignment on the round's
network:

1. the cost table of the run's cut pair on the round's topology, with the round's
   participants only (:func:`~flowsplit.planner.costs.build_cost_table`);
2. a *warm start*: the local search of the planner (:func:`~flowsplit.planner.plan.
   refine_assignment`: moves, swaps, and on small instances seeded restarts and
   aggregator closing) from last round's assignment;
3. a *cold start* as a safeguard: the planner's greedy
   (:func:`~flowsplit.planner.assign.greedy_assign`) and the same local search;
4. the better of the two by the objective (delay alone by default), the warm one on
   a tie; and last round's assignment is kept unless the new one saves at least
   ``min_gain`` (default 1 %) of its objective, so that clients do not change
   aggregator for a gain of microseconds (a move costs nothing in the cost model,
   but a real client re-registers).

Only the assignment is re-planned; the cuts stay those of the run (moving a cut in
the middle of training would move layers and their optimiser state between tiers,
which the runtime does not do).

:class:`ReplanPolicy` is the round loop's hook
(:class:`~flowsplit.federated.assignment.AssignmentPolicy`), built here or by the
command layer and passed into the runners, since ``flowsplit.federated`` does not
import the planner.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from flowsplit.errors import ConfigError
from flowsplit.federated.assignment import AssignmentPolicy, Placer, RoundQuery, changes
from flowsplit.federated.config import REPLAN_MODES
from flowsplit.federated.schemes import Scheme
from flowsplit.federated.system.profile import PartCosts
from flowsplit.federated.system.topology import Topology
from flowsplit.planner.assign import check_capacity, greedy_assign
from flowsplit.planner.costs import COUNT, ONE, CostTable, build_cost_table, evaluate_assignment
from flowsplit.planner.objective import Objective, Weights
from flowsplit.planner.plan import PlannerConfig, refine_assignment
from flowsplit.planner.reassign import capacities, place_clients

DELAY_ALONE = Objective(Weights(0.0, 1.0, 0.0), 1.0, 1.0, "none", "delay alone (s)")
"""The default objective of re-planning: the round's delay."""


@dataclass(frozen=True)
class Replanned:
    """One round's re-planned assignment and what the cost model predicts for it."""

    assignment: np.ndarray
    delay_s: float
    """Predicted round delay of ``assignment`` on the round's network."""
    bytes: float
    previous_delay_s: float
    """Predicted delay had last round's assignment been kept (NaN: it was not valid)."""
    moved: list[list[int]]
    """``[client, from, to]`` for every client that changed aggregator."""
    start: str
    """Which start won: ``warm`` (last round's assignment, improved) or ``cold`` (the
    greedy's); ``kept`` when neither saves ``min_gain`` over last round's."""
    planning_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "delay_s": self.delay_s,
            "bytes": self.bytes,
            "previous_delay_s": None
            if not np.isfinite(self.previous_delay_s)
            else self.previous_delay_s,
            "moved": self.moved,
            "start": self.start,
            "planning_s": self.planning_s,
        }


def round_table(
    costs: PartCosts,
    scheme: Scheme,
    topology: Topology,
    samples: np.ndarray,
    *,
    batch_size: int,
    local_epochs: int = 1,
    alive: np.ndarray | None = None,
) -> CostTable:
    """The cost table of one cut pair on a round's network, clients without ``samples``
    (not taking part) costing nothing; aggregators not ``alive`` are closed to every
    client that links to an alive one."""
    table = build_cost_table(
        [costs], topology, scheme, batch_size=batch_size, local_epochs=local_epochs, samples=samples
    )
    if alive is None or np.all(alive):
        return table
    open_links = table.linked & np.asarray(alive, dtype=bool)[None, :]
    # A client with no alive aggregator stays where it is (lost): keep its links.
    linked = np.where(open_links.any(axis=1)[:, None], open_links, table.linked)
    return replace(table, linked=linked)


def predicted_rounds(
    setup: Any, history: list[dict[str, Any]], first_assignment: np.ndarray
) -> list[tuple[float, float]]:
    """``(delay_s, bytes)`` the cost model predicts for every round of a finished run
    of ``setup``: on that round's network (:meth:`Topology.at_round`), with the clients
    the trace lets take part, and the assignment of that round (``first_assignment``
    as each round's ``reassigned`` moves left it; a sampled round's ``sampled`` clients
    only). Equal to what the simulation charged
    (``tests/planner/test_replan.py``); a static run on a trace and a re-planned run are
    checked against it."""
    topology, config = setup.topology, setup.config
    assignment = np.asarray(first_assignment, dtype=np.int64).copy()
    out = []
    for r, rec in enumerate(history):
        for client, _old, new in rec.get("reassigned", []):
            assignment[int(client)] = int(new)
        samples = np.where(topology.available_at(r), setup.n_samples, 0)
        if "sampled" in rec:  # a sampled round: only its sample takes part (and costs)
            in_sample = np.zeros(len(samples), dtype=bool)
            in_sample[np.asarray(rec["sampled"], dtype=np.int64)] = True
            samples = np.where(in_sample, samples, 0)
        table = round_table(
            setup.costs,
            setup.scheme,
            topology.at_round(r),
            samples,
            batch_size=config.batch_size,
            local_epochs=config.local_epochs,
        )
        delay, nbytes = evaluate_assignment(table, 0, assignment)
        out.append((float(delay), float(nbytes)))
    return out


def replan_assignment(
    table: CostTable,
    previous: np.ndarray,
    *,
    objective: Objective = DELAY_ALONE,
    capacity: np.ndarray | None = None,
    config: PlannerConfig | None = None,
    min_gain: float = 0.01,
) -> Replanned:
    """The better of a warm start (``previous``) and a cold start (the greedy), each
    improved by the planner's local search, on ``table`` (one cut pair: a round's).

    ``previous`` may name aggregators a client can no longer use (closed in the table):
    those clients start from the greedy's choice instead. When ``previous`` is usable,
    it is kept unless the best found is lower by more than ``min_gain`` (a fraction)
    of its objective.
    """
    if not 0.0 <= min_gain < 1.0:
        raise ConfigError(f"re-planning min_gain {min_gain}: give a fraction in [0, 1)")
    t0 = time.perf_counter()
    if table.n_pairs != 1:
        raise ConfigError(f"re-planning takes the run's one cut pair, got {table.n_pairs}")
    config = config or PlannerConfig()  # the local search's settings; the weights: objective
    cap = check_capacity(table, capacity)
    previous = np.asarray(previous, dtype=np.int64)
    if previous.shape != (table.n_clients,):
        raise ConfigError(
            f"previous assignment has {previous.size} entries for {table.n_clients} clients"
        )
    rows = np.arange(table.n_clients)
    usable = table.linked[rows, previous]
    cold = greedy_assign(table, np.array([0]), cap)[0]
    warm = np.where(usable, previous, cold)
    if cap is not None and np.any(np.bincount(warm, minlength=table.n_aggregators) > cap):
        warm = cold.copy()  # mending broke a capacity: the greedy's is feasible
    prev_delay, prev_bytes = (
        evaluate_assignment(table, 0, previous) if usable.all() else (float("nan"), float("nan"))
    )
    results = []
    for name, start in (("warm", warm), ("cold", cold)):
        better = refine_assignment(table, 0, start, objective, config, cap)
        delay, nbytes = evaluate_assignment(table, 0, better)
        results.append((float(objective.value(0.0, delay, nbytes)), name, better, delay, nbytes))
    # Strictly better only: on a tie the warm start wins (fewer clients move).
    value, name, best, delay, nbytes = min(results, key=lambda r: (r[0], r[1] != "warm"))
    keep_value = float(objective.value(0.0, prev_delay, prev_bytes))
    if usable.all() and value >= keep_value * (1 - min_gain):
        name, best, delay, nbytes = "kept", previous.copy(), prev_delay, prev_bytes
    # Clients that do not take part cost nothing anywhere: they stay where they were.
    idle = (table.coef[:, 0, COUNT, ONE] == 0) & usable
    kept = np.where(idle, previous, best)
    if cap is None or np.all(np.bincount(kept, minlength=table.n_aggregators) <= cap):
        best = kept
    return Replanned(
        assignment=best,
        delay_s=float(delay),
        bytes=float(nbytes),
        previous_delay_s=float(prev_delay),
        moved=changes(previous, best),
        start=name,
        planning_s=time.perf_counter() - t0,
    )


class ReplanPolicy(AssignmentPolicy):
    """The round loop's hook that re-plans the assignment before rounds.

    Every ``every`` rounds (1: every round, from the first), on the round's network
    and participants, warm-started from last round's assignment
    (:func:`replan_assignment`); the clients of a lost aggregator are first placed as
    the base policy places them (``place``), and re-planning only uses aggregators
    still alive. ``log`` gets one entry per re-planned round (in the process that
    decides the assignment: the simulation's, or the dist server's).
    """

    def __init__(
        self,
        place: Placer | None = None,
        *,
        every: int = 1,
        objective: Objective = DELAY_ALONE,
        capacity: tuple[int, ...] | None = None,
        config: PlannerConfig | None = None,
        min_gain: float = 0.01,
    ):
        super().__init__(place)
        if int(every) < 1:
            raise ConfigError(f"re-plan every {every} rounds: give an interval >= 1")
        self.every = int(every)
        self.objective = objective
        self.capacity = None if capacity is None else tuple(int(c) for c in capacity)
        self.config = config
        self.min_gain = float(min_gain)
        self.log: list[dict[str, Any]] = []

    def _capacity(self, setup: Any, n_aggregators: int) -> np.ndarray | None:
        """This policy's capacities, else the run's ``--capacity`` (one value for all
        aggregators or one each), else None (no limit)."""
        given = self.capacity or tuple(getattr(setup.config, "capacity", ()) or ())
        return capacities(given, n_aggregators)

    def __repr__(self) -> str:
        return f"ReplanPolicy(every={self.every}, objective={self.objective.reference_text!r})"

    def assignment_for_round(self, query: RoundQuery) -> np.ndarray:
        """Last round's assignment, re-planned on this round's network (see the class)."""
        base = super().assignment_for_round(query)
        if query.round_index % self.every:
            return base
        alive, topology, setup = query.alive, query.topology, query.setup
        # A client linked to no alive aggregator is lost: it costs nothing and stays put.
        stuck = ~(topology.ca_bandwidth[:, alive] > 0).any(axis=1)
        take_part = query.participants & ~stuck
        samples = np.where(take_part, setup.n_samples, 0)
        if not samples.any():
            return base
        table = round_table(
            setup.costs,
            setup.scheme,
            topology,
            samples,
            batch_size=setup.config.batch_size,
            local_epochs=setup.config.local_epochs,
            alive=alive,
        )
        cap = self._capacity(setup, topology.n_aggregators)
        result = replan_assignment(
            table,
            base,
            objective=self.objective,
            capacity=cap,
            config=self.config,
            min_gain=self.min_gain,
        )
        assignment = np.where(stuck, base, result.assignment)
        self.log.append(
            {"round": query.round_index + 1, **result.to_dict(), "moved": changes(base, assignment)}
        )
        return assignment


def replanning_policy(config: Any = None) -> ReplanPolicy:
    """``sfl run --replan every-round``'s policy: re-plan before every round, and move
    the clients of a lost aggregator as ``--fail`` runs do (``place_clients``)."""
    return ReplanPolicy(place_clients)


__all__ = [
    "DELAY_ALONE",
    "REPLAN_MODES",
    "ReplanPolicy",
    "Replanned",
    "predicted_rounds",
    "replanning_policy",
    "replan_assignment",
    "round_table",
]
