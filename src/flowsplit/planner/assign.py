"""Delay-aware assignment of clients to aggregators: a greedy, then a local search.

Greedy (:func:`greedy_assign`): clients go in order of decreasing work (their round
time plus the queue time they bring, at their best aggregator), each to the linked
aggregator with room whose finish time after taking it is earliest. An aggregator's
finish time is ``D_j + T_j + U_j`` (download, train and upload phase of its slowest
client, with its compute and backbone queues; :mod:`flowsplit.planner.costs`). The
greedy runs every cut pair in lockstep, so one pass over the clients costs a few
NumPy calls on ``(pairs, aggregators)`` arrays: O(N log N + N * A) per cut pair.

Local search (:func:`improve_assignment`): moves a client off, or swaps it with a
client of another aggregator, where the client sits on an aggregator that sets one
of the round's maxima, taking the best strict improvement of the exact objective
each time, until none is left or ``max_iters`` is reached.

Aggregator capacities (most clients per aggregator) are never exceeded; if the
greedy finds every linked aggregator of a client full, an augmenting path moves
earlier clients to make room.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from flowsplit.errors import ConfigError
from flowsplit.planner.costs import (
    AGG,
    BB,
    CHAIN_A,
    CHAIN_B,
    COUNT,
    DOWN,
    FEATURES,
    UP,
    CostTable,
    delay_from_terms,
)


def check_capacity(table: CostTable, capacity: np.ndarray | None) -> np.ndarray | None:
    """Validate ``capacity`` ((A,) most clients per aggregator) against the links."""
    if capacity is None:
        return None
    cap = np.asarray(capacity, dtype=np.int64)
    if cap.shape != (table.n_aggregators,) or np.any(cap < 0):
        raise ConfigError(
            f"aggregator capacities must be {table.n_aggregators} non-negative integers"
        )
    n = table.n_clients
    if cap.sum() < n:
        raise ConfigError(f"aggregator capacities sum to {cap.sum()} but there are {n} clients")
    if not table.linked.all() and _max_matching(table.linked, cap) < n:
        raise ConfigError("no assignment honours the aggregator capacities with these links")
    return cap


def _max_matching(linked: np.ndarray, cap: np.ndarray) -> int:
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    n, a = linked.shape
    src, sink = n + a, n + a + 1
    ci, cj = np.nonzero(linked)
    rows = np.concatenate([np.full(n, src), ci, n + np.arange(a)])
    cols = np.concatenate([np.arange(n), n + cj, np.full(a, sink)])
    caps = np.concatenate([np.ones(n), np.ones(len(ci)), cap]).astype(np.int32)
    graph = csr_matrix((caps, (rows, cols)), shape=(n + a + 2, n + a + 2))
    return int(maximum_flow(graph, src, sink).flow_value)


def client_work(table: CostTable, pairs: np.ndarray) -> np.ndarray:
    """(P, N) each client's work: round time plus queue time, a lower bound over aggregators.

    Every basis value (latency, inverse bandwidth, inverse speeds) is taken at its best
    linked aggregator, so this is cheap (no (N, A) product) and orders clients by how
    much of a round they must take wherever they go.
    """
    lat = np.where(table.linked, table.latency, np.inf).min(axis=1)
    inv = np.where(table.linked, table.inv_bandwidth, np.inf).min(axis=1)
    best = np.empty((table.n_clients, table.agg_basis.shape[0] + 2))
    best[:, 0], best[:, 1] = lat, inv
    best[:, 2:] = table.agg_basis.min(axis=1)
    coef = table.coef[:, pairs].reshape(table.n_clients, -1, best.shape[1])
    f = np.matmul(coef, best[:, :, None]).reshape(table.n_clients, len(pairs), -1)
    f = f.transpose(1, 0, 2)  # (P, N, F)
    return (
        np.maximum(f[..., CHAIN_A], f[..., CHAIN_B])
        + f[..., AGG]
        + f[..., BB]
        + f[..., DOWN]
        + f[..., UP]
    )


def chunk_size(n_aggregators: int) -> int:
    """Clients placed per greedy step: A // 4 (1, the plain sequential greedy, when A < 8)."""
    return max(1, n_aggregators // 4)


def greedy_assign(
    table: CostTable,
    pairs: np.ndarray | None = None,
    capacity: np.ndarray | None = None,
    *,
    chunk: int | None = None,
) -> np.ndarray:
    """(P, N) greedy assignment for each cut pair index in ``pairs`` (default all).

    Clients are taken in order of decreasing work (:func:`client_work`, summed over
    the cut pairs so that every pair sees the same order); each goes to the linked
    aggregator with room whose finish time after taking it is earliest. To cut NumPy
    calls per client (what makes 10,000 clients fast), clients are costed ``chunk``
    at a time (default :func:`chunk_size`) against the state before their chunk, and
    within a chunk each client, in order, picks among the aggregators no earlier
    client of the chunk took. With ``chunk == 1`` this is the textbook sequential
    greedy.
    """
    pairs = np.arange(table.n_pairs) if pairs is None else np.asarray(pairs, dtype=np.int64)
    cap = check_capacity(table, capacity)
    n_p, n, n_a = len(pairs), table.n_clients, table.n_aggregators
    b = chunk_size(n_a) if chunk is None else max(1, min(int(chunk), n_a))
    work = client_work(table, pairs)
    # Largest work first; ties by client index (stable sort) keep it deterministic.
    order = np.argsort(-(work / work.max(axis=1, keepdims=True).clip(1e-300)).sum(axis=0),
                       kind="stable")  # fmt: skip
    all_pairs = n_p == table.n_pairs and np.array_equal(pairs, np.arange(n_p))
    coef = (table.coef if all_pairs else table.coef[:, pairs]).reshape(n, n_p * len(FEATURES), -1)
    # Only a client with fewer links than a chunk has clients, or capacities, can find
    # every aggregator closed to it.
    may_stick = cap is not None or int(table.linked.sum(axis=1).min()) <= b
    d_fix, d_lin = table.d_fix[pairs][:, None], table.d_lin[pairs][:, None]
    u_fix, u_lin = table.u_fix[pairs][:, None], table.u_lin[pairs][:, None]
    link_penalty = np.where(table.linked, 0.0, np.inf)
    # state[:, p, j]: longest chain, queues, longest down/upload, participants.
    state = np.zeros((6, n_p, 1, n_a))
    chain_m, agg_q, bb_q, down_m, up_m, count = state
    n_assigned = np.zeros((n_p, n_a), dtype=np.int64)
    out = np.full((n_p, n), -1, dtype=np.int64)
    pr = np.arange(n_p)
    for start in range(0, n, b):
        i = order[start : start + b]  # (B,)
        nb = len(i)
        f = np.matmul(coef[i], table.basis(i))  # (B, P*F, A)
        f = f.reshape(nb, n_p, len(FEATURES), n_a).transpose(2, 1, 0, 3)  # (F, P, B, A)
        chain = np.maximum(f[CHAIN_A], f[CHAIN_B])
        cnt = count + f[COUNT]
        act = cnt > 0
        finish = (
            np.maximum(np.maximum(chain_m, chain), np.maximum(agg_q + f[AGG], bb_q + f[BB]))
            + np.maximum(down_m, f[DOWN])
            + act * d_fix
            + cnt * d_lin
            + np.maximum(up_m, f[UP])
            + act * u_fix
            + cnt * u_lin
            + link_penalty[i]
        )  # fmt: skip  (P, B, A)
        if cap is not None:
            finish = np.where((n_assigned >= cap)[:, None], np.inf, finish)
        base = finish.copy()
        picks = np.empty((n_p, nb), dtype=np.int64)
        rebuild: set[int] = set()
        for k in range(nb):
            j = finish[:, k].argmin(axis=1)
            if may_stick and not np.isfinite(finish[pr, k, j]).all():
                j = _unstick(
                    table,
                    cap,
                    i[k],
                    j,
                    finish[:, k],
                    base[:, k],
                    out,
                    n_assigned,
                    picks[:, :k],
                    rebuild,
                )
            picks[:, k] = j
            finish[pr, k + 1 :, j] = np.inf  # taken for the rest of the chunk
        # Picks of a chunk are distinct per pair, so its state updates do not collide.
        pp = np.broadcast_to(pr[:, None], picks.shape)
        kk = np.broadcast_to(np.arange(nb)[None, :], picks.shape)
        fk = f[:, pp, kk, picks]  # (F, P, B)
        cur = state[:, pp, 0, picks]  # (6, P, B)
        cur[0] = np.maximum(cur[0], np.maximum(fk[CHAIN_A], fk[CHAIN_B]))
        cur[1] += fk[AGG]
        cur[2] += fk[BB]
        cur[3] = np.maximum(cur[3], fk[DOWN])
        cur[4] = np.maximum(cur[4], fk[UP])
        cur[5] += fk[COUNT]
        state[:, pp, 0, picks] = cur
        np.add.at(n_assigned, (pp, picks), 1)
        out[:, i] = picks
        for p in rebuild:
            state[:, p, 0] = _state_of(table, int(pairs[p]), out[p])
            n_assigned[p] = np.bincount(out[p][out[p] >= 0], minlength=n_a)
    return out


def _unstick(table, cap, client, j, row, base_row, out, n_assigned, earlier, rebuild):
    """Picks for pairs whose every aggregator was taken in the chunk or is full."""
    j = j.copy()
    for p in np.flatnonzero(~np.isfinite(row[np.arange(len(j)), j])):
        used = n_assigned[p] + np.bincount(earlier[p], minlength=table.n_aggregators)
        room = np.isfinite(base_row[p]) & (True if cap is None else used < cap)
        if np.any(room):
            # Only the chunk rule blocked it: its best aggregator, as if chunks were 1.
            j[p] = int(np.argmin(np.where(room, base_row[p], np.inf)))
        else:
            # Capacities: move earlier clients along an augmenting path to make room;
            # the pair's state is rebuilt after the chunk.
            j[p] = _augment(int(client), out[p], table.linked, cap, used)
            rebuild.add(int(p))
    return j


def _augment(client: int, assign: np.ndarray, linked: np.ndarray, cap, n_assigned) -> int:
    """Free a slot for ``client`` by moving earlier clients along a shortest path."""
    # BFS over aggregators: from a full one, any of its clients may move to another
    # aggregator it links to; stop at the first aggregator with room.
    start = np.flatnonzero(linked[client])
    parent: dict[int, tuple[int, int] | None] = {int(j): None for j in start}
    queue = deque(int(j) for j in start)
    while queue:
        j = queue.popleft()
        if n_assigned[j] < cap[j]:
            n_assigned[j] += 1
            while parent[j] is not None:  # walk back, moving each client one step
                prev, moved = parent[j]
                assign[moved] = j
                j = prev
            return j
        for c in np.flatnonzero(assign == j):
            for k in np.flatnonzero(linked[c]):
                if int(k) not in parent:
                    parent[int(k)] = (j, int(c))
                    queue.append(int(k))
    raise ConfigError("no assignment honours the aggregator capacities with these links")


def _state_of(table: CostTable, pair: int, assign: np.ndarray) -> np.ndarray:
    done = assign >= 0
    state = np.zeros((6, table.n_aggregators))
    if not done.any():
        return state
    j = assign[done]
    f = table.assigned_features(pair, np.where(done, assign, 0))[done]
    np.maximum.at(state[0], j, np.maximum(f[:, CHAIN_A], f[:, CHAIN_B]))
    np.add.at(state[1], j, f[:, AGG])
    np.add.at(state[2], j, f[:, BB])
    np.maximum.at(state[3], j, f[:, DOWN])
    np.maximum.at(state[4], j, f[:, UP])
    np.add.at(state[5], j, f[:, COUNT])
    return state


# --- local search ------------------------------------------------------------------------


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
    vals = np.stack([np.maximum(f[:, CHAIN_A], f[:, CHAIN_B]), f[:, DOWN], f[:, UP]])
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
        vals = np.stack([np.maximum(fm[:, CHAIN_A], fm[:, CHAIN_B]), fm[:, DOWN], fm[:, UP]])
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
    from flowsplit.planner.costs import evaluate_assignment

    delay, nbytes = evaluate_assignment(table, pair, assign)
    return delay_coef * delay + bytes_coef * nbytes


def improve_assignment(
    table: CostTable,
    pair: int,
    assignment: np.ndarray,
    *,
    delay_coef: float,
    bytes_coef: float,
    capacity: np.ndarray | None = None,
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
    assign = np.array(assignment, dtype=np.int64)
    cap = None if capacity is None else np.asarray(capacity, dtype=np.int64)
    ev = _Evaluator(table, pair, delay_coef, bytes_coef)
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
    return (chain, st.agg[g] - f_own[:, AGG], st.bb[g] - f_own[:, BB], down, up,
            st.count[g] - f_own[:, COUNT])  # fmt: skip


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
    chain_new = np.maximum(fa[:, CHAIN_A], fa[:, CHAIN_B])
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
    obj = _combine(ev, tops, g[:, None], dg[:, None], tg[:, None], ug[:, None], j, dh, th, uh,
                   n_act)  # fmt: skip
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
            np.maximum(chain, np.maximum(fx[..., CHAIN_A], fx[..., CHAIN_B])),
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


def close_aggregators(
    table: CostTable,
    pair: int,
    assignment: np.ndarray,
    *,
    delay_coef: float,
    bytes_coef: float,
    capacity: np.ndarray | None = None,
) -> np.ndarray:
    """Try emptying each used aggregator (small instances): its clients, largest first,
    each to the other aggregator where the exact objective grows least. Returns the
    best assignment found (the input when no closure helps).

    Single moves cannot find this: the bytes and backbone time an aggregator costs
    only vanish when its last client leaves, so every step before that looks neutral.
    """
    best = np.array(assignment, dtype=np.int64)
    best_value = assignment_objective(table, pair, best, delay_coef, bytes_coef)
    work = client_work(table, np.array([pair]))[0]
    for j in np.unique(best):
        trial = best.copy()
        members = np.flatnonzero(trial == j)
        others = np.flatnonzero(np.arange(table.n_aggregators) != j)
        ok = True
        for c in members[np.argsort(-work[members], kind="stable")]:
            choices = [k for k in others if table.linked[c, k]
                       and (capacity is None or np.sum(trial == k) < capacity[k])]  # fmt: skip
            if not choices:
                ok = False
                break
            values = []
            for k in choices:
                trial[c] = k
                values.append(assignment_objective(table, pair, trial, delay_coef, bytes_coef))
            trial[c] = choices[int(np.argmin(values))]
        if ok:
            value = assignment_objective(table, pair, trial, delay_coef, bytes_coef)
            if value < best_value * (1 - 1e-12):
                best, best_value = trial, value
    return best
