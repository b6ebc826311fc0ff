"""Exact assignment for small instances (a MILP solved by HiGHS), to measure the heuristic's gap.

For one cut pair, the model is the cost model of :mod:`flowsplit.planner.costs`
written as a mixed integer program: ``x[i, j]`` says client ``i`` is on aggregator
``j`` (linked pairs only), ``active_j`` that ``j`` has a participant, and ``D``,
``T``, ``U`` bound the phase maxima from above (each client's term and each queue's
sum); the objective is
``delay_coef * (max D + max(max T, server) + max U + n_active * server_avg) +
bytes_coef * n_active * bytes_per_agg`` (constants dropped). Times are scaled so
the greedy's delay is :data:`SCALE` units, which keeps HiGHS's absolute tolerances
(about 10^-6) at about 10^-9 of the delay; the returned assignment is then
re-evaluated exactly in floating point, so the tolerances can only cost optimality
by about that much, never correctness.

HiGHS comes with SciPy (:func:`scipy.optimize.milp`), so nothing beyond the core
install is needed; :func:`enumerate_assignments` is the brute force the tests check
it against.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_array

from flowsplit.planner.assign import greedy_assign
from flowsplit.planner.costs import (
    AGG,
    BB,
    COUNT,
    DOWN,
    UP,
    CostTable,
    chain_term,
    evaluate_assignment,
)
from flowsplit.planner.search import assignment_objective

SCALE = 1e3
"""The greedy's round delay in the solver's time units."""
CLIP = 50 * SCALE
"""Cost terms above 50 greedy delays (an infinite one included) are capped here: an
assignment that pays one cannot be optimal, and HiGHS takes only finite coefficients."""


@dataclass(frozen=True)
class ExactResult:
    """An assignment and whether the solver proved it optimal."""

    assignment: np.ndarray
    objective: float
    """``delay_coef * delay + bytes_coef * bytes`` in floating point."""
    optimal: bool
    wall_s: float


class _Rows:
    """Sparse rows ``lb <= sum coef * var <= ub`` of the MILP, built one at a time."""

    def __init__(self) -> None:
        self.data: list[float] = []
        self.cols: list[int] = []
        self.ptr = [0]
        self.lb: list[float] = []
        self.ub: list[float] = []

    def add(self, terms: list[tuple[int, float]], lb: float, ub: float) -> None:
        for col, coef in terms:
            self.cols.append(col)
            self.data.append(coef)
        self.ptr.append(len(self.cols))
        self.lb.append(lb)
        self.ub.append(ub)

    def constraint(self, n_vars: int) -> LinearConstraint:
        a = csr_array((self.data, self.cols, self.ptr), shape=(len(self.lb), n_vars))
        return LinearConstraint(a, self.lb, self.ub)


def solve_exact(
    table: CostTable,
    pair: int,
    *,
    delay_coef: float,
    bytes_coef: float,
    capacity: np.ndarray | None = None,
    time_limit_s: float = 30.0,
) -> ExactResult:
    """The optimal assignment of cut pair ``pair`` (HiGHS branch and bound: deterministic).

    ``optimal`` is False when the time limit stopped the search with a feasible
    assignment; no assignment at all within it is a :class:`RuntimeError`.
    """
    t0 = time.perf_counter()
    n, n_aggs = table.n_clients, table.n_aggregators
    f = table.features(pair, np.arange(n))  # (N, F, A)
    chain = chain_term(f)
    one = f[:, COUNT, 0] > 0
    start = greedy_assign(table, np.array([pair]), capacity)[0]
    ub = max(evaluate_assignment(table, pair, start)[0], 1e-12)

    def q(value: float) -> float:
        return float(min(float(value) * SCALE / ub, CLIP))

    # Variables: x (linked pairs), then active_j, then D, T, U.
    pairs = [(i, j) for i in range(n) for j in range(n_aggs) if table.linked[i, j]]
    col = {p: k for k, p in enumerate(pairs)}
    act = len(pairs) + np.arange(n_aggs)
    d_max, t_max, u_max = len(pairs) + n_aggs + np.arange(3)
    n_vars = len(pairs) + n_aggs + 3
    rows = _Rows()
    for i in range(n):
        rows.add([(col[i, j], 1.0) for j in range(n_aggs) if (i, j) in col], 1.0, 1.0)
    if capacity is not None:
        for j in range(n_aggs):
            members = [(col[i, j], 1.0) for i in range(n) if (i, j) in col]
            rows.add(members, -np.inf, float(capacity[j]))
    rows.add([(t_max, 1.0)], q(table.server_load[pair]), np.inf)
    for j in range(n_aggs):
        members = [i for i in range(n) if (i, j) in col]
        parts = [i for i in members if one[i]]
        for i in parts:  # x[i, j] <= active_j
            rows.add([(act[j], 1.0), (col[i, j], -1.0)], 0.0, np.inf)
        fix_d, lin_d = q(table.d_fix[pair, j]), q(table.d_lin[pair, j])
        fix_u, lin_u = q(table.u_fix[pair, j]), q(table.u_lin[pair, j])
        # phase >= own * x[i, j] + fix * active_j + lin * (participants on j), for the
        # queue alone (own = 0) and for each participant on it.
        for phase, fix, lin, own in ((d_max, fix_d, lin_d, DOWN), (u_max, fix_u, lin_u, UP)):
            for mine in (None, *parts):
                terms = {col[i, j]: -lin for i in parts}
                if mine is not None:
                    terms[col[mine, j]] -= q(f[mine, own, j])
                rows.add([(phase, 1.0), (act[j], -fix), *terms.items()], 0.0, np.inf)
        for i in members:
            rows.add([(t_max, 1.0), (col[i, j], -q(chain[i, j]))], 0.0, np.inf)
        for feature in (AGG, BB):
            terms = [(col[i, j], -q(f[i, feature, j])) for i in members]
            rows.add([(t_max, 1.0), *terms], 0.0, np.inf)
    # Objective in units of ub / SCALE seconds of delay (times delay_coef).
    cost = np.zeros(n_vars)
    per_active = table.server_avg_per_agg[pair]
    if delay_coef > 0:
        per_active += bytes_coef / delay_coef * table.bytes_per_agg[pair]
        cost[[d_max, t_max, u_max]] = 1.0
        cost[act] = q(per_active)
    else:
        cost[act] = 1.0
    integrality = np.ones(n_vars)
    integrality[[d_max, t_max, u_max]] = 0
    upper = np.ones(n_vars)
    upper[[d_max, t_max, u_max]] = np.inf
    res = milp(
        cost,
        integrality=integrality,
        bounds=Bounds(np.zeros(n_vars), upper),
        constraints=rows.constraint(n_vars),
        options={"time_limit": float(time_limit_s), "mip_rel_gap": 0.0},
    )
    if res.x is None:
        raise RuntimeError(f"HiGHS found no assignment ({res.message})")
    assign = np.full(n, -1)
    for (i, j), k in col.items():
        if res.x[k] > 0.5:
            assign[i] = j
    return ExactResult(
        assignment=assign,
        objective=assignment_objective(table, pair, assign, delay_coef, bytes_coef),
        optimal=res.status == 0,
        wall_s=time.perf_counter() - t0,
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
