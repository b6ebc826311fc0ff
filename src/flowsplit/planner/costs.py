"""The engine's cost model, decomposed per client and per aggregator for the planner.

:func:`flowsplit.federated.predict.predict_ledger` computes a round's ledger for one
assignment; :func:`flowsplit.federated.system.costs.round_delay` turns it into the delay.
The planner must compare many assignments and cut pairs, so this module evaluates the
same per-message description (the scheme's ``batch_messages``, ``download_messages``,
``upload_messages``, ``averaging`` and ``chain``) as arrays that separate what a client
contributes at each aggregator from what an aggregator contributes by being used. The
training accounts are ``predict_ledger``'s own
(:func:`~flowsplit.federated.predict.train_accounts`, linear forms on
:data:`~flowsplit.federated.predict.BASIS`, which ``predict_ledger`` evaluates at the
assigned aggregators and this module at all of them); the model messages are summed
by the same :func:`~flowsplit.federated.predict.hop_sums`:

per client ``i`` placed on aggregator ``j`` (features, in this order):

- ``chain_a``, ``chain_b``: the client's chain is ``max(chain_a, chain_b)``, the sums
  of the ledger accounts the scheme's ``chain`` names (end to end: everything done
  for the client in ``chain_a``, ``chain_b = 0``; local losses: its compute and its
  link's busy time);
- ``agg``: aggregator compute on its batches (a FIFO queue: summed per aggregator);
- ``bb``: busy time of the aggregator-server link for its batches (a queue too);
- ``down``, ``up``: model download and upload on its link (latency + bytes / bandwidth);
- ``count``: 1 when it takes part (a non-empty shard), else 0.

Every feature is a linear form ``coef[i, p] @ basis[i, :, j]`` over a small basis
(the client's latency and inverse bandwidth to ``j``, ``j``'s inverse speed, backbone
latency and inverse bandwidth, 1), so the greedy evaluates all aggregators of all cut
pairs with one batched matrix product per client.

per aggregator ``j`` with ``k_j`` participants (``active_j = k_j > 0``):

- download ``D_j = max down + active_j * d_fix_j + k_j * d_lin_j``;
- train ``T_j = max(max chain, sum agg, sum bb)``;
- upload ``U_j = max up + active_j * u_fix_j + k_j * u_lin_j``;

and the round delay is ``max_j D_j + max(max_j T_j, server_load) + max_j U_j +
server_avg_fix + n_active * server_avg_per_agg``, bytes ``bytes_fix + n_active *
bytes_per_agg``: exactly ``round_delay(predict_ledger(...))`` (the tests check it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flowsplit.federated.predict import (  # noqa: F401 - the basis, re-exported
    BASIS,
    INV_BW,
    LAT,
    N_BASIS,
    ONE,
    hop_sums,
    predict_ledger,
    train_accounts,
)
from flowsplit.federated.schemes import PER_AGGREGATOR, PER_CLIENT, Scheme
from flowsplit.federated.system.aggregate import averaging_flops
from flowsplit.federated.system.costs import n_batches
from flowsplit.federated.system.profile import PartCosts
from flowsplit.federated.system.protocol import AGGREGATOR_SERVER, CLIENT_AGGREGATOR
from flowsplit.federated.system.topology import Topology

FEATURES = ("chain_a", "chain_b", "agg", "bb", "down", "up", "count")
CHAIN_A, CHAIN_B, AGG, BB, DOWN, UP, COUNT = range(len(FEATURES))


def chain_term(f: np.ndarray, axis: int = 1) -> np.ndarray:
    """The chain feature of features ``f`` (feature axis ``axis``): the longer of the
    two chains, ``CHAIN_A`` and ``CHAIN_B``."""
    return np.maximum(np.take(f, CHAIN_A, axis=axis), np.take(f, CHAIN_B, axis=axis))


@dataclass(frozen=True)
class CostTable:
    """Per-client and per-aggregator cost terms of ``P`` cut pairs on one topology."""

    cuts: tuple[tuple[int, int], ...]
    """(P,) the cut pairs, in the order of every ``P`` axis."""
    coef: np.ndarray
    """(N, P, F, K) coefficients of each feature on the basis."""
    latency: np.ndarray
    """(N, A) client-aggregator latency (basis row 0)."""
    inv_bandwidth: np.ndarray
    """(N, A) 1 / bandwidth, 0 where there is no link (basis row 1)."""
    agg_basis: np.ndarray
    """(4, A) basis rows 2..5, the same for every client."""
    linked: np.ndarray
    """(N, A) bool: a link exists."""
    d_fix: np.ndarray
    """(P, A) download time an active aggregator adds (its backbone model messages)."""
    d_lin: np.ndarray
    """(P, A) download time per participant (sfl relays one copy per client)."""
    u_fix: np.ndarray
    """(P, A) upload time an active aggregator adds."""
    u_lin: np.ndarray
    """(P, A) upload time per participant (averaging at the edge, or sfl relays)."""
    server_load: np.ndarray
    """(P,) server training compute of the round."""
    server_avg_fix: np.ndarray
    """(P,) server averaging time that does not depend on the assignment."""
    server_avg_per_agg: np.ndarray
    """(P,) server averaging time per active aggregator."""
    bytes_fix: np.ndarray
    """(P,) bytes of the round that do not depend on the assignment."""
    bytes_per_agg: np.ndarray
    """(P,) model bytes each active aggregator adds on the backbone."""
    scheme: Scheme

    @property
    def n_clients(self) -> int:
        return self.coef.shape[0]

    @property
    def n_pairs(self) -> int:
        return self.coef.shape[1]

    @property
    def n_aggregators(self) -> int:
        return self.latency.shape[1]

    def basis(self, clients: np.ndarray | int) -> np.ndarray:
        """(..., K, A) basis of ``clients`` for every aggregator."""
        lat = self.latency[clients]
        inv = self.inv_bandwidth[clients]
        shape = lat.shape[:-1]
        rest = np.broadcast_to(self.agg_basis, (*shape, 4, self.n_aggregators))
        return np.concatenate([lat[..., None, :], inv[..., None, :], rest], axis=-2)

    def features(self, pair: int, clients: np.ndarray) -> np.ndarray:
        """(n, F, A) features of ``clients`` at every aggregator, cut pair ``pair``."""
        clients = np.asarray(clients, dtype=np.int64)
        return np.matmul(self.coef[clients, pair], self.basis(clients))

    def assigned_features(self, pair: int, assignment: np.ndarray) -> np.ndarray:
        """(N, F) features of every client at its assigned aggregator."""
        j = np.asarray(assignment, dtype=np.int64)
        rows = np.arange(self.n_clients)
        col = np.empty((self.n_clients, N_BASIS))
        col[:, 0] = self.latency[rows, j]
        col[:, 1] = self.inv_bandwidth[rows, j]
        col[:, 2:] = self.agg_basis[:, j].T
        return np.matmul(self.coef[:, pair], col[:, :, None])[:, :, 0]


def build_cost_table(
    part_costs: Sequence[PartCosts],
    topology: Topology,
    scheme: Scheme,
    *,
    batch_size: int,
    local_epochs: int = 1,
    samples: np.ndarray | None = None,
) -> CostTable:
    """The cost terms of every cut pair in ``part_costs`` (same keywords as predict_ledger)."""
    n = topology.n_clients
    samples = np.asarray(topology.client_samples if samples is None else samples, dtype=np.int64)
    part = samples > 0
    m = np.where(part, n_batches(samples, batch_size, local_epochs), 0).astype(np.float64)
    s = np.where(part, samples * local_epochs, 0).astype(np.float64)
    one = part.astype(np.float64)
    coef = np.zeros((n, len(part_costs), len(FEATURES), N_BASIS))
    chain_a, chain_b = scheme.chain
    for p, costs in enumerate(part_costs):
        acc = train_accounts(costs, topology, scheme, m, s)
        c = coef[:, p]
        c[:, CHAIN_A] = sum((acc[name] for name in chain_a), np.zeros((n, N_BASIS)))
        c[:, CHAIN_B] = sum((acc[name] for name in chain_b), np.zeros((n, N_BASIS)))
        c[:, AGG] = acc["aggregator_for"]
        c[:, BB] = acc["backbone_busy"]
        for feature, msgs in (
            (DOWN, scheme.download_messages(costs)),
            (UP, scheme.upload_messages(costs)),
        ):
            c[:, feature, LAT] = one
            c[:, feature, INV_BW] = one * hop_sums(msgs, CLIENT_AGGREGATOR, PER_CLIENT)[1]
        c[:, COUNT, ONE] = one
    agg_terms = _aggregator_terms(part_costs, topology, scheme, samples, part)
    bw = topology.ca_bandwidth
    linked = bw > 0
    return CostTable(
        cuts=tuple(tuple(int(v) for v in pc.cuts) for pc in part_costs),
        coef=coef,
        latency=np.asarray(topology.ca_latency, dtype=np.float64),
        inv_bandwidth=np.divide(1.0, bw, out=np.zeros_like(bw, dtype=np.float64), where=linked),
        agg_basis=np.stack(
            [
                1.0 / topology.aggregator_speed,
                topology.as_latency,
                1.0 / topology.as_bandwidth,
                np.ones(topology.n_aggregators),
            ]
        ),
        linked=linked,
        scheme=scheme,
        bytes_fix=_bytes_fix(
            part_costs, topology, scheme, samples, batch_size, local_epochs, agg_terms
        ),
        **agg_terms,
    )


def _aggregator_terms(
    part_costs: Sequence[PartCosts],
    topology: Topology,
    scheme: Scheme,
    samples: np.ndarray,
    part: np.ndarray,
) -> dict[str, np.ndarray]:
    bl = topology.as_latency
    inv_bb = 1.0 / topology.as_bandwidth
    inv_as = 1.0 / topology.aggregator_speed
    n_pairs, n_aggs = len(part_costs), topology.n_aggregators
    out = {k: np.zeros((n_pairs, n_aggs)) for k in ("d_fix", "d_lin", "u_fix", "u_lin")}
    for k in ("server_load", "server_avg_fix", "server_avg_per_agg", "bytes_per_agg"):
        out[k] = np.zeros(n_pairs)
    n_part = float(part.sum())
    s_total = float(np.where(part, samples, 0).sum())
    for p, costs in enumerate(part_costs):
        down, up = scheme.download_messages(costs), scheme.upload_messages(costs)
        # Model bytes an active aggregator sends once, and bytes it relays per client.
        own_down = hop_sums(down, AGGREGATOR_SERVER, PER_AGGREGATOR)[1]
        own_up = hop_sums(up, AGGREGATOR_SERVER, PER_AGGREGATOR)[1]
        relayed_down = hop_sums(down, AGGREGATOR_SERVER, PER_CLIENT)[1]
        relayed_up = hop_sums(up, AGGREGATOR_SERVER, PER_CLIENT)[1]
        avg = scheme.averaging(costs)
        out["server_load"][p] = float(costs.train_flops[2]) * s_total / topology.server_speed
        # A used backbone link pays its latency once per phase (messages stream).
        out["d_fix"][p] = bl + own_down * inv_bb
        out["u_fix"][p] = bl + own_up * inv_bb
        out["d_lin"][p] = relayed_down * inv_bb
        out["u_lin"][p] = relayed_up * inv_bb + averaging_flops(avg.edge_per_client, 1) * inv_as
        out["server_avg_per_agg"][p] = (
            averaging_flops(avg.server_per_aggregator, 1) / topology.server_speed
        )
        out["server_avg_fix"][p] = (
            averaging_flops(avg.server_per_client, n_part) / topology.server_speed
        )
        out["bytes_per_agg"][p] = own_down + own_up
    return out


def _bytes_fix(part_costs, topology, scheme, samples, batch_size, local_epochs, agg_terms):
    # Bytes hardly depend on the assignment (only through which aggregators are used),
    # so take them from the engine's own prediction for one assignment and remove the
    # per-aggregator part: no second copy of the byte formulas to keep in step.
    probe = np.argmax(topology.ca_bandwidth > 0, axis=1)
    n_active = len(np.unique(probe[samples > 0]))
    out = np.zeros(len(part_costs))
    for p, costs in enumerate(part_costs):
        led = predict_ledger(
            costs,
            topology,
            probe,
            scheme=scheme,
            batch_size=batch_size,
            local_epochs=local_epochs,
            samples=samples,
        )
        out[p] = float(led.bytes.sum()) - n_active * agg_terms["bytes_per_agg"][p]
    return out


# --- evaluation of complete assignments ------------------------------------------------


@dataclass(frozen=True)
class AggregatorState:
    """Per-aggregator sums and maxima of an assignment, for one cut pair."""

    chain: np.ndarray
    """(A,) longest chain."""
    agg: np.ndarray
    """(A,) aggregator queue."""
    bb: np.ndarray
    """(A,) backbone queue."""
    down: np.ndarray
    """(A,) longest model download."""
    up: np.ndarray
    """(A,) longest model upload."""
    count: np.ndarray
    """(A,) participants."""


def aggregator_state(table: CostTable, pair: int, assignment: np.ndarray) -> AggregatorState:
    """Sums and maxima per aggregator of ``assignment`` under cut pair ``pair``."""
    j = np.asarray(assignment, dtype=np.int64)
    f = table.assigned_features(pair, j)
    n_aggs = table.n_aggregators

    def gmax(values: np.ndarray) -> np.ndarray:
        out = np.zeros(n_aggs)
        np.maximum.at(out, j, values)
        return out

    def gsum(values: np.ndarray) -> np.ndarray:
        return np.bincount(j, weights=values, minlength=n_aggs)

    return AggregatorState(
        chain=gmax(chain_term(f)),
        agg=gsum(f[:, AGG]),
        bb=gsum(f[:, BB]),
        down=gmax(f[:, DOWN]),
        up=gmax(f[:, UP]),
        count=gsum(f[:, COUNT]),
    )


def phase_terms(table: CostTable, pair: int, state: AggregatorState):
    """(D, T, U) per aggregator, each (A,), from an :class:`AggregatorState`."""
    active = (state.count > 0).astype(np.float64)
    d = state.down + active * table.d_fix[pair] + state.count * table.d_lin[pair]
    t = np.maximum(state.chain, np.maximum(state.agg, state.bb))
    u = state.up + active * table.u_fix[pair] + state.count * table.u_lin[pair]
    return d, t, u


def delay_from_terms(table: CostTable, pair: int, d, t, u, n_active) -> np.ndarray:
    """Round delay from per-aggregator phase maxima (arrays broadcast)."""
    train = np.maximum(t, table.server_load[pair])
    return (
        np.maximum(d, 0.0)
        + train
        + np.maximum(u, 0.0)
        + table.server_avg_fix[pair]
        + n_active * table.server_avg_per_agg[pair]
    )


def evaluate_assignment(table: CostTable, pair: int, assignment: np.ndarray) -> tuple[float, float]:
    """(round delay s, round bytes) of ``assignment`` under cut pair ``pair``."""
    state = aggregator_state(table, pair, assignment)
    d, t, u = phase_terms(table, pair, state)
    n_active = float((state.count > 0).sum())
    delay = delay_from_terms(table, pair, d.max(), t.max(), u.max(), n_active)
    nbytes = table.bytes_fix[pair] + n_active * table.bytes_per_agg[pair]
    return float(delay), float(nbytes)
