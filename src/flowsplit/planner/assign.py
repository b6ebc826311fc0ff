"""Delay-aware assignment of clients to aggregators: a greedy, then a local search.

Greedy (:func:`greedy_assign`): clients go in order of decreasing work (their round
time plus the queue time they bring, at their best aggregator), each to the linked
aggregator with room whose finish time after taking it is earliest. An aggregator's
finish time is ``D_j + T_j + U_j`` (download, train and upload phase of its slowest
client, with its compute and backbone queues; :mod:`flowsplit.planner.costs`). The
greedy runs every cut pair in lockstep, so one pass over the clients costs a few
NumPy calls on ``(pairs, aggregators)`` arrays: O(N log N + N * A) per cut pair.

The local search that follows is in :mod:`flowsplit.planner.search`.

Aggregator capacities (most clients per aggregator) are never exceeded; if the
greedy finds every linked aggregator of a client full, an augmenting path moves
earlier clients to make room.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from flowsplit.errors import ConfigError
from flowsplit.planner.costs import AGG, BB, COUNT, DOWN, FEATURES, UP, CostTable, chain_term


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
    return chain_term(f, axis=-1) + f[..., AGG] + f[..., BB] + f[..., DOWN] + f[..., UP]


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
    order = np.argsort(
        -(work / work.max(axis=1, keepdims=True).clip(1e-300)).sum(axis=0), kind="stable"
    )
    all_pairs = n_p == table.n_pairs and np.array_equal(pairs, np.arange(n_p))
    coef = (table.coef if all_pairs else table.coef[:, pairs]).reshape(n, n_p * len(FEATURES), -1)
    # Only a client with fewer links than a chunk has clients, or capacities, can find
    # every aggregator closed to it.
    may_stick = cap is not None or int(table.linked.sum(axis=1).min()) <= b
    phases = tuple(v[pairs][:, None] for v in (table.d_fix, table.d_lin, table.u_fix, table.u_lin))
    link_penalty = np.where(table.linked, 0.0, np.inf)
    # state[:, p, j]: longest chain, queues, longest down/upload, participants.
    state = np.zeros((6, n_p, 1, n_a))
    n_assigned = np.zeros((n_p, n_a), dtype=np.int64)
    out = np.full((n_p, n), -1, dtype=np.int64)
    pr = np.arange(n_p)
    for start in range(0, n, b):
        i = order[start : start + b]  # (B,)
        nb = len(i)
        f = np.matmul(coef[i], table.basis(i))  # (B, P*F, A)
        f = f.reshape(nb, n_p, len(FEATURES), n_a).transpose(2, 1, 0, 3)  # (F, P, B, A)
        finish = _finish_times(f, state, phases) + link_penalty[i]  # (P, B, A)
        if cap is not None:
            finish = np.where((n_assigned >= cap)[:, None], np.inf, finish)
        rebuild: set[int] = set()
        picks = _pick(table, cap, i, finish, may_stick, out, n_assigned, rebuild)
        _take(state, f, picks)
        np.add.at(n_assigned, (np.broadcast_to(pr[:, None], picks.shape), picks), 1)
        out[:, i] = picks
        for p in rebuild:
            state[:, p, 0] = _state_of(table, int(pairs[p]), out[p])
            n_assigned[p] = np.bincount(out[p][out[p] >= 0], minlength=n_a)
    return out


def _pick(table, cap, i, finish, may_stick: bool, out, n_assigned, rebuild: set[int]):
    """(P, B) the aggregator each client ``i[k]`` of the chunk takes, in order: its
    earliest finish among those no earlier client of the chunk took (``finish`` is
    updated so); a client with every one closed is placed by :func:`_unstick`."""
    n_p, nb = finish.shape[:2]
    pr = np.arange(n_p)
    base = finish.copy()
    picks = np.empty((n_p, nb), dtype=np.int64)
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
    return picks


def _finish_times(f: np.ndarray, state: np.ndarray, phases: tuple) -> np.ndarray:
    """(P, B, A) each aggregator's round finish if it took each client of the chunk
    (``f``: the chunk's (F, P, B, A) features; ``state``: the aggregators' so far;
    ``phases``: the (P, 1) fixed and per-participant download and upload costs)."""
    chain_m, agg_q, bb_q, down_m, up_m, count = state
    d_fix, d_lin, u_fix, u_lin = phases
    chain = chain_term(f, axis=0)
    cnt = count + f[COUNT]
    act = cnt > 0
    return (
        np.maximum(np.maximum(chain_m, chain), np.maximum(agg_q + f[AGG], bb_q + f[BB]))
        + np.maximum(down_m, f[DOWN])
        + act * d_fix
        + cnt * d_lin
        + np.maximum(up_m, f[UP])
        + act * u_fix
        + cnt * u_lin
    )


def _take(state: np.ndarray, f: np.ndarray, picks: np.ndarray) -> None:
    """Add the chunk's clients to the aggregators they picked (``picks``: (P, B)).

    Picks of a chunk are distinct per pair, so its state updates do not collide."""
    pp = np.broadcast_to(np.arange(picks.shape[0])[:, None], picks.shape)
    kk = np.broadcast_to(np.arange(picks.shape[1])[None, :], picks.shape)
    fk = f[:, pp, kk, picks]  # (F, P, B)
    cur = state[:, pp, 0, picks]  # (6, P, B)
    cur[0] = np.maximum(cur[0], chain_term(fk, axis=0))
    cur[1] += fk[AGG]
    cur[2] += fk[BB]
    cur[3] = np.maximum(cur[3], fk[DOWN])
    cur[4] = np.maximum(cur[4], fk[UP])
    cur[5] += fk[COUNT]
    state[:, pp, 0, picks] = cur


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
    np.maximum.at(state[0], j, chain_term(f))
    np.add.at(state[1], j, f[:, AGG])
    np.add.at(state[2], j, f[:, BB])
    np.maximum.at(state[3], j, f[:, DOWN])
    np.maximum.at(state[4], j, f[:, UP])
    np.add.at(state[5], j, f[:, COUNT])
    return state
