"""Local search over assignments: moves, swaps and aggregator closing.

:func:`improve_assignment` starts from any assignment (the greedy's, usually) and
repeatedly applies the best strict improvement of the exact objective among: moving
one client of an aggregator that sets a round maximum to another aggregator, or
swapping it with a client elsewhere. Every candidate is evaluated in closed form
from per-aggregator statistics (top two maxima and who holds the top, queue sums),
vectorised over candidates and targets. :func:`close_aggregators` empties whole
aggregators, which single moves cannot see pay off (small instances).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flowsplit.planner.assign import client_work
from flowsplit.planner.costs import (
    AGG,
    BB,
    CHAIN_A,
    CHAIN_B,
    COUNT,
    DOWN,
    UP,
    CostTable,
    chain_term,
    delay_from_terms,
    evaluate_assignment,
)


@dataclass
class _Stats:
    """Per-aggregator maxima (top two, with the client holding the top) and sums."""

    top: np.ndarray  # (3, A) chain, down, up maxima
    second: np.ndarray  # (3, A)
    holder: np.ndarray  # (3, A) client index holding the maximum (-1 if empty)
    agg: np.ndarray
    bb: np.ndarray
    count: np.ndarray
    n_assigned: np.ndarray


def _stats(f: np.ndarray, assign: np.ndarray, n_aggs: int) -> _Stats:
    vals = np.stack([chain_term(f), f[:, DOWN], f[:, UP]])
    top = np.zeros((3, n_aggs))
    second = np.zeros((3, n_aggs))
    holder = np.full((3, n_aggs), -1)
    order = np.argsort(assign, kind="stable")
    bounds = np.searchsorted(assign[order], np.arange(n_aggs + 1))
    st = _Stats(
        top=top,
        second=second,
        holder=holder,
        agg=np.bincount(assign, weights=f[:, AGG], minlength=n_aggs),
        bb=np.bincount(assign, weights=f[:, BB], minlength=n_aggs),
        count=np.bincount(assign, weights=f[:, COUNT], minlength=n_aggs),
        n_assigned=np.bincount(assign, minlength=n_aggs),
    )
    for j in range(n_aggs):
        _fill_maxima(st, j, order[bounds[j] : bounds[j + 1]], vals)
    return st


def _fill_maxima(st: _Stats, j: int, members: np.ndarray, vals: np.ndarray) -> None:
    """Top two of chain/down/up among ``members`` of aggregator ``j``, and who holds the top."""
    st.top[:, j] = 0.0
    st.second[:, j] = 0.0
    st.holder[:, j] = -1
    if len(members) == 0:
        return
    v = vals[:, members]  # (3, m)
    k = v.argmax(axis=1)
    st.top[:, j] = v[np.arange(3), k]
    st.holder[:, j] = members[k]
    if len(members) > 1:
        v = v.copy()
        v[np.arange(3), k] = -np.inf
        st.second[:, j] = v.max(axis=1)


def _refresh(st: _Stats, f: np.ndarray, assign: np.ndarray, aggs) -> None:
    """Recompute the statistics of the aggregators ``aggs`` after clients moved."""
    for j in aggs:
        members = np.flatnonzero(assign == j)
        fm = f[members]
        st.agg[j] = fm[:, AGG].sum()
        st.bb[j] = fm[:, BB].sum()
        st.count[j] = fm[:, COUNT].sum()
        st.n_assigned[j] = len(members)
        vals = np.stack([chain_term(fm), fm[:, DOWN], fm[:, UP]])
        _fill_maxima(st, j, np.arange(len(members)), vals)
        if len(members):
            st.holder[:, j] = members[st.holder[:, j]]


def _top3(values: np.ndarray):
    """Indices and values of the three largest entries (padded with -1 / 0)."""
    k = min(3, len(values))
    idx = np.argsort(-values, kind="stable")[:k]
    vals = values[idx]
    pad = 3 - k
    return np.r_[idx, -np.ones(pad, int)], np.r_[vals, np.zeros(pad)]


def _max_excluding(top_idx, top_val, g, h):
    """Max over aggregators other than ``g`` and ``h`` (arrays broadcast), 0 if none."""
    out = np.zeros(np.broadcast(g, h).shape)
    done = np.zeros(out.shape, dtype=bool)
    for k in range(3):
        ok = ~done & (top_idx[k] != g) & (top_idx[k] != h) & (top_idx[k] >= 0)
        out = np.where(ok, top_val[k], out)
        done |= ok
    return np.maximum(out, 0.0)


class _Evaluator:
    """Exact objective of one cut pair for changed aggregators, vectorised."""

    def __init__(self, table: CostTable, pair: int, delay_coef: float, bytes_coef: float):
        self.table, self.pair = table, pair
        self.cd, self.cb = delay_coef, bytes_coef

    def phases(self, chain, agg, bb, down, up, count, j):
        t = self.table
        active = count > 0
        d = down + active * t.d_fix[self.pair, j] + count * t.d_lin[self.pair, j]
        tt = np.maximum(chain, np.maximum(agg, bb))
        u = up + active * t.u_fix[self.pair, j] + count * t.u_lin[self.pair, j]
        return d, tt, u

    def objective(self, d, tt, u, n_active):
        t, p = self.table, self.pair
        delay = delay_from_terms(t, p, d, tt, u, n_active)
        nbytes = t.bytes_fix[p] + n_active * t.bytes_per_agg[p]
        return self.cd * delay + self.cb * nbytes


def assignment_objective(
    table: CostTable, pair: int, assign: np.ndarray, delay_coef: float, bytes_coef: float
) -> float:
    """``delay_coef * delay + bytes_coef * bytes`` of ``assign`` (exact)."""
    delay, nbytes = evaluate_assignment(table, pair, assign)
    return delay_coef * delay + bytes_coef * nbytes


@dataclass(frozen=True)
class AssignmentProblem:
    """What an assignment search minimises: on cut pair ``pair`` of ``table``,
    ``delay_coef * delay + bytes_coef * bytes`` (:meth:`objective`, exact), with at most
    ``capacity[j]`` clients on aggregator ``j`` (None: no limit)."""

    table: CostTable
    pair: int
    delay_coef: float
    bytes_coef: float
    capacity: np.ndarray | None = None

    def objective(self, assign: np.ndarray) -> float:
        """The objective of ``assign`` (:func:`assignment_objective`)."""
        return assignment_objective(self.table, self.pair, assign, self.delay_coef, self.bytes_coef)


def improve_assignment(
    problem: AssignmentProblem,
    assignment: np.ndarray,
    *,
    max_iters: int = 50,
    max_candidates: int = 64,
    max_swap_evals: int = 200_000,
) -> np.ndarray:
    """Local search of moves and swaps from ``assignment`` (a new array is returned).

    Each step looks at the clients of the aggregators that set a maximum (at most
    ``max_candidates`` of them, the heaviest), tries moving each to every other
    aggregator and swapping it with clients elsewhere (at most ``max_swap_evals``
    pairs, an even spread), and applies the best strict improvement.
    """
    table, pair, capacity = problem.table, problem.pair, problem.capacity
    assign = np.array(assignment, dtype=np.int64)
    cap = None if capacity is None else np.asarray(capacity, dtype=np.int64)
    ev = _Evaluator(table, pair, problem.delay_coef, problem.bytes_coef)
    n_aggs = table.n_aggregators
    if n_aggs < 2:
        return assign
    f = table.assigned_features(pair, assign)
    st = _stats(f, assign, n_aggs)
    all_aggs = np.arange(n_aggs)
    for _ in range(max_iters):
        d, tt, u = ev.phases(st.top[0], st.agg, st.bb, st.top[1], st.top[2], st.count, all_aggs)
        n_active = float((st.count > 0).sum())
        current = float(ev.objective(d.max(), tt.max(), u.max(), n_active))
        crit = _critical(d, tt, u)
        cands = np.flatnonzero(np.isin(assign, crit))
        if len(cands) == 0:
            break
        if len(cands) > max_candidates:
            fc = f[cands]
            weight = np.maximum.reduce(
                [fc[:, CHAIN_A], fc[:, CHAIN_B], fc[:, AGG] + fc[:, BB], fc[:, DOWN], fc[:, UP]]
            )
            cands = np.sort(cands[np.argsort(-weight, kind="stable")[:max_candidates]])
        tops = [_top3(x) for x in (d, tt, u)]
        best, move = _best_move(table, ev, st, assign, cands, tops, n_active, cap)
        if not best < current * (1 - 1e-12):
            best, move = _best_swap(table, ev, st, assign, cands, tops, n_active, max_swap_evals)
        if not best < current * (1 - 1e-12):
            break
        touched = {int(assign[c]) for c, _ in move} | {t for _, t in move}
        for client, target in move:
            assign[client] = target
        moved = np.array([c for c, _ in move])
        f[moved] = table.features(pair, moved)[np.arange(len(moved)), :, assign[moved]]
        _refresh(st, f, assign, sorted(touched))
    return assign


def _critical(d, tt, u) -> np.ndarray:
    crit = set()
    for x in (d, tt, u):
        if x.max() > 0:  # a phase that costs nothing sets nothing
            crit.update(np.flatnonzero(x >= x.max() * (1 - 1e-12)).tolist())
    return np.array(sorted(crit), dtype=np.int64)


def _removed(st: _Stats, clients: np.ndarray, g: np.ndarray, f_own: np.ndarray):
    """Aggregator ``g``'s chain/down/up maxima, queues and count without ``clients``."""
    out = []
    for r in range(3):
        held = st.holder[r, g] == clients
        out.append(np.where(held, st.second[r, g], st.top[r, g]))
    chain, down, up = out
    return (
        chain,
        st.agg[g] - f_own[:, AGG],
        st.bb[g] - f_own[:, BB],
        down,
        up,
        st.count[g] - f_own[:, COUNT],
    )


def _combine(ev, tops, g, dg, tg, ug, h, dh, th, uh, n_active):
    d = np.maximum(_max_excluding(*tops[0], g, h), np.maximum(dg, dh))
    tt = np.maximum(_max_excluding(*tops[1], g, h), np.maximum(tg, th))
    u = np.maximum(_max_excluding(*tops[2], g, h), np.maximum(ug, uh))
    return ev.objective(d, tt, u, n_active)


def _best_move(table, ev, st, assign, cands, tops, n_active, cap):
    pair = ev.pair
    g = assign[cands]  # (c,)
    fa = table.features(pair, cands)  # (c, F, A)
    f_own = fa[np.arange(len(cands)), :, g]  # (c, F)
    chain_g, agg_g, bb_g, down_g, up_g, cnt_g = _removed(st, cands, g, f_own)
    dg, tg, ug = ev.phases(chain_g, agg_g, bb_g, down_g, up_g, cnt_g, g)
    j = np.arange(table.n_aggregators)[None, :]
    chain_new = chain_term(fa)
    dh, th, uh = ev.phases(
        np.maximum(st.top[0][None], chain_new),
        st.agg[None] + fa[:, AGG],
        st.bb[None] + fa[:, BB],
        np.maximum(st.top[1][None], fa[:, DOWN]),
        np.maximum(st.top[2][None], fa[:, UP]),
        st.count[None] + fa[:, COUNT],
        j,
    )
    was_active = (st.count > 0).astype(float)
    n_act = (
        (n_active - was_active[g] + (cnt_g > 0))[:, None]
        - was_active[None]
        + ((st.count[None] + fa[:, COUNT]) > 0)
    )
    obj = _combine(
        ev, tops, g[:, None], dg[:, None], tg[:, None], ug[:, None], j, dh, th, uh, n_act
    )
    bad = ~table.linked[cands] | (j == g[:, None])
    if cap is not None:
        bad |= (st.n_assigned >= cap)[None]
    obj = np.where(bad, np.inf, obj)
    k = int(np.argmin(obj))
    c, t = divmod(k, table.n_aggregators)
    return float(obj.flat[k]), [(int(cands[c]), int(t))]


def _best_swap(table, ev, st, assign, cands, tops, n_active, max_evals):
    pair = ev.pair
    # Partners: clients anywhere (same-aggregator pairs are masked below).
    others = np.arange(table.n_clients)
    limit = max(1, max_evals // len(cands))
    if len(others) > limit:  # an even spread of partners, deterministic
        others = others[np.linspace(0, len(others) - 1, limit).astype(np.int64)]
    g, h = assign[cands], assign[others]
    fc = table.features(pair, cands)  # (c, F, A)
    fo_all = table.features(pair, others)  # (o, F, A)
    fc_g = fc[np.arange(len(cands)), :, g]
    fo_h = fo_all[np.arange(len(others)), :, h]
    # g without c plus o; h without o plus c.
    cg = _removed(st, cands, g, fc_g)
    ch = _removed(st, others, h, fo_h)
    fo_g = fo_all[:, :, g].transpose(2, 0, 1)  # (c, o, F): o's costs at c's aggregator
    fc_h = fc[:, :, h].transpose(0, 2, 1)  # (c, o, F): c's costs at o's aggregator

    def add(removed, fx):
        chain, agg, bb, down, up, cnt = (x[..., None] if x.ndim == 1 else x for x in removed)
        return (
            np.maximum(chain, chain_term(fx, axis=-1)),
            agg + fx[..., AGG],
            bb + fx[..., BB],
            np.maximum(down, fx[..., DOWN]),
            np.maximum(up, fx[..., UP]),
            cnt + fx[..., COUNT],
        )

    new_g = add(cg, fo_g)  # (c, o) each
    new_h = add(tuple(x[None, :] for x in ch), fc_h)
    gg, hh = g[:, None], h[None, :]
    dg, tg, ug = ev.phases(*new_g, gg)
    dh, th, uh = ev.phases(*new_h, hh)
    was_active = (st.count > 0).astype(float)
    n_act = n_active - was_active[gg] - was_active[hh] + (new_g[5] > 0) + (new_h[5] > 0)
    obj = _combine(ev, tops, gg, dg, tg, ug, hh, dh, th, uh, n_act)
    bad = (gg == hh) | ~table.linked[cands][:, h] | ~table.linked[others][:, g].T
    obj = np.where(bad, np.inf, obj)
    k = int(np.argmin(obj))
    c, o = divmod(k, len(others))
    return float(obj.flat[k]), [(int(cands[c]), int(h[o])), (int(others[o]), int(g[c]))]


def close_aggregators(problem: AssignmentProblem, assignment: np.ndarray) -> np.ndarray:
    """Try emptying each used aggregator (small instances): its clients, largest first,
    each to the other aggregator where the exact objective grows least. Returns the
    best assignment found (the input when no closure helps).

    Single moves cannot find this: the bytes and backbone time an aggregator costs
    only vanish when its last client leaves, so every step before that looks neutral.
    """
    table, capacity = problem.table, problem.capacity
    best = np.array(assignment, dtype=np.int64)
    best_value = problem.objective(best)
    work = client_work(table, np.array([problem.pair]))[0]
    for j in np.unique(best):
        trial = best.copy()
        members = np.flatnonzero(trial == j)
        others = np.flatnonzero(np.arange(table.n_aggregators) != j)
        ok = True
        for c in members[np.argsort(-work[members], kind="stable")]:
            choices = [
                k
                for k in others
                if table.linked[c, k] and (capacity is None or np.sum(trial == k) < capacity[k])
            ]
            if not choices:
                ok = False
                break
            values = []
            for k in choices:
                trial[c] = k
                values.append(problem.objective(trial))
            trial[c] = choices[int(np.argmin(values))]
        if ok:
            value = problem.objective(trial)
            if value < best_value * (1 - 1e-12):
                best, best_value = trial, value
    return best
