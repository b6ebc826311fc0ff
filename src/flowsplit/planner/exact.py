"""Exact assignment for small instances (OR-Tools CP-SAT), to measure the heuristic's gap.

For one cut pair, the model is the cost model of :mod:`flowsplit.planner.costs`
written as a mixed integer program: ``x[i, j]`` says client ``i`` is on aggregator
``j`` (linked pairs only), ``active_j`` that ``j`` has a participant, and per
aggregator ``D_j``, ``T_j``, ``U_j`` bound the phase maxima from above (each client's
term and each queue's sum); the objective is
``delay_coef * (max D + max(max T, server) + max U + n_active * server_avg) +
bytes_coef * n_active * bytes_per_agg`` (constants dropped). CP-SAT works on
integers, so times are scaled to about 10^7 steps of the greedy's delay; the
returned assignment is then re-evaluated exactly in floating point, so rounding
can only cost optimality by about 10^-7, never correctness.

OR-Tools is an optional extra (``pip install 'flowsplit[exact]'``): only
:func:`solve_exact` needs it; :func:`enumerate_assignments` is plain NumPy.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from flowsplit.errors import ConfigError
from flowsplit.planner.assign import greedy_assign
from flowsplit.planner.costs import (
    AGG,
    BB,
    CHAIN_A,
    CHAIN_B,
    COUNT,
    DOWN,
    UP,
    CostTable,
    evaluate_assignment,
)
from flowsplit.planner.search import assignment_objective

try:  # an optional extra: everything but solve_exact works without it
    from ortools.sat.python import cp_model
except ImportError:  # pragma: no cover - depends on the install
    cp_model = None

SCALE_STEPS = 1e7
MISSING_ORTOOLS = (
    "the exact solver needs OR-Tools, an optional extra: pip install 'flowsplit[exact]'"
)


@dataclass(frozen=True)
class ExactResult:
    """An assignment and whether the solver proved it optimal."""

    assignment: np.ndarray
    objective: float
    """``delay_coef * delay + bytes_coef * bytes`` in floating point."""
    optimal: bool
    wall_s: float


def solve_exact(
    table: CostTable,
    pair: int,
    *,
    delay_coef: float,
    bytes_coef: float,
    capacity: np.ndarray | None = None,
    time_limit_s: float = 30.0,
) -> ExactResult:
    """The optimal assignment of cut pair ``pair`` (CP-SAT, one worker: deterministic).

    Raises :class:`~flowsplit.errors.ConfigError` when OR-Tools is not installed.
    """
    if cp_model is None:
        raise ConfigError(MISSING_ORTOOLS)
    n, n_aggs = table.n_clients, table.n_aggregators
    f = table.features(pair, np.arange(n))  # (N, F, A)
    chain = np.maximum(f[:, CHAIN_A], f[:, CHAIN_B])
    one = f[:, COUNT, 0] > 0
    start = greedy_assign(table, np.array([pair]), capacity)[0]
    ub = max(evaluate_assignment(table, pair, start)[0], 1e-12)
    scale = SCALE_STEPS / ub
    big = int(round(50 * SCALE_STEPS))

    def q(x: float) -> int:
        return int(min(round(float(x) * scale), big))

    m = cp_model.CpModel()
    x = {
        (i, j): m.NewBoolVar(f"x{i}_{j}")
        for i in range(n)
        for j in range(n_aggs)
        if table.linked[i, j]
    }
    for i in range(n):
        m.AddExactlyOne(x[i, j] for j in range(n_aggs) if (i, j) in x)
    if capacity is not None:
        for j in range(n_aggs):
            m.Add(sum(x[i, j] for i in range(n) if (i, j) in x) <= int(capacity[j]))
    active = [m.NewBoolVar(f"active{j}") for j in range(n_aggs)]
    d_max, t_max, u_max = (m.NewIntVar(0, 100 * big, name) for name in ("D", "T", "U"))
    m.Add(t_max >= q(table.server_load[pair]))
    for j in range(n_aggs):
        members = [i for i in range(n) if (i, j) in x]
        parts = [i for i in members if one[i]]
        for i in parts:
            m.AddImplication(x[i, j], active[j])
        k_j = sum(x[i, j] for i in parts)
        fix_d, lin_d = q(table.d_fix[pair, j]), q(table.d_lin[pair, j])
        fix_u, lin_u = q(table.u_fix[pair, j]), q(table.u_lin[pair, j])
        m.Add(d_max >= fix_d * active[j] + lin_d * k_j)
        m.Add(u_max >= fix_u * active[j] + lin_u * k_j)
        for i in parts:
            m.Add(d_max >= q(f[i, DOWN, j]) * x[i, j] + fix_d * active[j] + lin_d * k_j)
            m.Add(u_max >= q(f[i, UP, j]) * x[i, j] + fix_u * active[j] + lin_u * k_j)
        for i in members:
            m.Add(t_max >= q(chain[i, j]) * x[i, j])
        m.Add(t_max >= sum(q(f[i, AGG, j]) * x[i, j] for i in members))
        m.Add(t_max >= sum(q(f[i, BB, j]) * x[i, j] for i in members))
    # Objective in units of 1/scale seconds of delay (times delay_coef).
    per_active = table.server_avg_per_agg[pair]
    if delay_coef > 0:
        per_active += bytes_coef / delay_coef * table.bytes_per_agg[pair]
        m.Minimize(d_max + t_max + u_max + q(per_active) * sum(active))
    else:
        m.Minimize(sum(active))
    for i, j in x:
        m.AddHint(x[i, j], int(start[i] == j))
    solver = cp_model.CpSolver()
    solver.parameters.num_search_workers = 1
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    status = solver.Solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise RuntimeError(f"CP-SAT found no assignment (status {solver.StatusName(status)})")
    assign = np.array(
        [next(j for j in range(n_aggs) if (i, j) in x and solver.Value(x[i, j])) for i in range(n)]
    )
    return ExactResult(
        assignment=assign,
        objective=assignment_objective(table, pair, assign, delay_coef, bytes_coef),
        optimal=status == cp_model.OPTIMAL,
        wall_s=float(solver.WallTime()),
    )


def enumerate_assignments(
    table: CostTable,
    pair: int,
    *,
    delay_coef: float,
    bytes_coef: float,
    capacity: np.ndarray | None = None,
) -> ExactResult:
    """Brute force over every assignment (tiny instances only: A^N evaluations)."""
    import time

    t0 = time.perf_counter()
    choices = [np.flatnonzero(table.linked[i]) for i in range(table.n_clients)]
    best, best_assign = np.inf, None
    for combo in itertools.product(*choices):
        assign = np.array(combo)
        if capacity is not None and np.any(
            np.bincount(assign, minlength=table.n_aggregators) > capacity
        ):
            continue
        value = assignment_objective(table, pair, assign, delay_coef, bytes_coef)
        if value < best:
            best, best_assign = value, assign
    if best_assign is None:
        raise RuntimeError("no assignment honours the capacities")
    return ExactResult(best_assign, float(best), True, time.perf_counter() - t0)
