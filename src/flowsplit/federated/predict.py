"""Predicting a round's costs without training (pure, vectorised; for the planner).

:func:`predict_ledger` fills the same :class:`~flowsplit.federated.costs.Ledger` the
runners fill message by message, from the message sequence the roles follow
(see :mod:`flowsplit.federated.roles`), in closed form over arrays of clients:

per batch of ``b`` samples of client ``i`` (aggregator ``j``), with ``H`` the header
bytes, ``alpha``/``gamma`` the activation bytes per sample at cuts a/c:

- client -> aggregator: activations ``H + b*alpha``, labels ``H + 8b``;
- aggregator -> server: activations ``H + b*gamma``, labels ``H + 8b``;
- end-to-end schemes: gradients ``H + b*gamma`` and ``H + b*alpha`` back down;
- compute ``train_flops[tier] * b`` on the client (slowed for a straggler), the
  aggregator (three tiers only) and the server.

Model messages carry ``4 * state_numel`` bytes plus a header; sample counts are one
int64. With no faults the runners' ledgers equal this prediction (tests check it),
so :func:`round_delay` of a prediction is the delay the simulation will report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flowsplit.federated.costs import Ledger, RoundDelay, n_batches, round_delay
from flowsplit.federated.profile import PartCosts
from flowsplit.federated.protocol import (
    ACTIVATIONS,
    AGGREGATOR_SERVER,
    CLIENT_AGGREGATOR,
    CONTROL,
    DIRECTIONS,
    DOWN,
    GRADIENTS,
    HEADER_NBYTES,
    HOPS,
    LABELS,
    MESSAGE_TYPES,
    MODEL,
    UP,
)
from flowsplit.federated.topology import Topology

LABEL_BYTES = 8  # int64 per sample
COUNT_BYTES = 8  # one int64 sample count
FLOAT_BYTES = 4  # float32 model states


def _key(hop: str, direction: str, kind: str) -> tuple[int, int, int]:
    return HOPS.index(hop), DIRECTIONS.index(direction), MESSAGE_TYPES.index(kind)


def predict_ledger(
    costs: PartCosts,
    topology: Topology,
    assignment: np.ndarray,
    *,
    end_to_end: bool,
    edge_averaging: bool,
    server_copies: bool = False,
    batch_size: int,
    local_epochs: int = 1,
    samples: np.ndarray | None = None,
    participants: np.ndarray | None = None,
    slowdown: np.ndarray | None = None,
) -> Ledger:
    """The ledger of one round, computed in closed form.

    Args:
        costs: per-sample costs of the parts (:func:`~flowsplit.federated.profile.part_costs`).
        topology: nodes and links; ``samples`` defaults to ``topology.client_samples``.
        assignment: (N,) aggregator of each client.
        end_to_end: gradients travel down (sfl, hsfl); False for local losses.
        edge_averaging: aggregators average client parts (hsfl, hsfl-ll); False for sfl.
        server_copies: the server averages one server part per client (sfl v1).
        participants: (N,) bool, default every client with samples.
        slowdown: (N,) compute slowdown of stragglers, default 1.
    """
    n, n_aggs = topology.n_clients, topology.n_aggregators
    assignment = np.asarray(assignment, dtype=np.int64)
    samples = np.asarray(topology.client_samples if samples is None else samples, dtype=np.int64)
    part = samples > 0 if participants is None else (np.asarray(participants, bool) & (samples > 0))
    slow = np.ones(n) if slowdown is None else np.asarray(slowdown, dtype=np.float64)
    three_tier = costs.three_tier
    led = Ledger.zeros(n, n_aggs)

    m = np.where(part, n_batches(samples, batch_size, local_epochs), 0).astype(np.float64)
    s = np.where(part, samples * local_epochs, 0).astype(np.float64)
    rows = np.arange(n)
    lat = topology.ca_latency[rows, assignment]  # (N,)
    bw = topology.ca_bandwidth[rows, assignment]
    bw = np.where(bw > 0, bw, np.inf)
    blat = topology.as_latency[assignment]  # (N,) backbone of each client's aggregator
    bbw = topology.as_bandwidth[assignment]
    alpha, gamma = (float(v) for v in costs.act_bytes)
    pc, pg, ps = (float(v) for v in costs.state_numel)
    H = float(HEADER_NBYTES)

    def add_bytes(hop: str, direction: str, kind: str, nbytes: np.ndarray, msgs: np.ndarray):
        led.bytes[_key(hop, direction, kind)] += float(np.sum(nbytes))
        led.messages[_key(hop, direction, kind)] += float(np.sum(msgs))

    def per_agg(values: np.ndarray) -> np.ndarray:
        return np.bincount(assignment, weights=values, minlength=n_aggs)

    # --- train ---------------------------------------------------------------------
    ca_msgs = {ACTIVATIONS: (UP, s * alpha), LABELS: (UP, s * LABEL_BYTES)}
    as_msgs = {ACTIVATIONS: (UP, s * gamma), LABELS: (UP, s * LABEL_BYTES)}
    if end_to_end:
        ca_msgs[GRADIENTS] = (DOWN, s * alpha)
        as_msgs[GRADIENTS] = (DOWN, s * gamma)
    ca_bytes = np.zeros(n)
    as_bytes = np.zeros(n)
    for kind, (direction, payload) in ca_msgs.items():
        add_bytes(CLIENT_AGGREGATOR, direction, kind, m * H + payload, m)
        ca_bytes += m * H + payload
    for kind, (direction, payload) in as_msgs.items():
        add_bytes(AGGREGATOR_SERVER, direction, kind, m * H + payload, m)
        as_bytes += m * H + payload
    led.client_link += len(ca_msgs) * m * lat + ca_bytes / bw
    led.client_busy += ca_bytes / bw
    led.backbone_for += len(as_msgs) * m * blat + as_bytes / bbw
    led.backbone_load += per_agg(as_bytes / bbw)
    led.client_compute += costs.train_flops[0] * s * slow / topology.client_speed
    if three_tier:
        agg_time = costs.train_flops[1] * s / topology.aggregator_speed[assignment]
        led.aggregator_for += agg_time
        led.aggregator_load += per_agg(agg_time)
    server_time = costs.train_flops[2] * s / topology.server_speed
    led.server_for += server_time
    led.server_load += server_time.sum()

    # --- download and upload ---------------------------------------------------------
    one = part.astype(np.float64)
    model_c = H + FLOAT_BYTES * pc
    model_g = H + FLOAT_BYTES * pg
    count = H + COUNT_BYTES
    led.link_down += one * model_c / bw
    led.link_down_latency += one * lat
    add_bytes(CLIENT_AGGREGATOR, DOWN, MODEL, one * model_c, one)
    led.link_up += one * (model_c + count) / bw
    led.link_up_latency += one * lat
    add_bytes(CLIENT_AGGREGATOR, UP, MODEL, one * model_c, one)
    add_bytes(CLIENT_AGGREGATOR, UP, CONTROL, one * count, one)
    k = per_agg(one)  # participants per aggregator
    active = (k > 0).astype(np.float64)
    bl, bb = topology.as_latency, topology.as_bandwidth
    led.backbone_down_latency += active * bl
    led.backbone_up_latency += active * bl
    if edge_averaging:
        down_msgs = 1 + int(three_tier)
        down_bytes = model_c + (model_g if three_tier else 0.0)
        led.backbone_down += active * down_bytes / bb
        add_bytes(AGGREGATOR_SERVER, DOWN, MODEL, active * down_bytes, active * down_msgs)
        led.averaging += 2.0 * pc * k / topology.aggregator_speed
        up_msgs = 2 + int(three_tier)
        up_bytes = model_c + (model_g if three_tier else 0.0) + count
        led.backbone_up += active * up_bytes / bb
        add_bytes(AGGREGATOR_SERVER, UP, MODEL, active * (up_bytes - count), active * (up_msgs - 1))
        add_bytes(AGGREGATOR_SERVER, UP, CONTROL, active * count, active)
        n_active = active.sum()
        led.server_averaging += 2.0 * (pc + (pg if three_tier else 0.0)) * n_active
    else:  # sfl: the aggregator relays one copy per client each way
        led.backbone_down += k * model_c / bb
        add_bytes(AGGREGATOR_SERVER, DOWN, MODEL, k * model_c, k)
        led.backbone_up += k * (model_c + count) / bb
        add_bytes(AGGREGATOR_SERVER, UP, MODEL, k * model_c, k)
        add_bytes(AGGREGATOR_SERVER, UP, CONTROL, k * count, k)
        led.server_averaging += 2.0 * pc * k.sum()
        if server_copies:
            led.server_averaging += 2.0 * ps * k.sum()
    led.server_averaging /= topology.server_speed
    return led


def predict_round(costs: PartCosts, topology: Topology, assignment: np.ndarray, **kw) -> RoundDelay:
    """:func:`round_delay` of :func:`predict_ledger` (same keyword arguments)."""
    led = predict_ledger(costs, topology, assignment, **kw)
    return round_delay(led, assignment, local_loss=not kw["end_to_end"])


def bytes_per_round(
    costs: PartCosts, topology: Topology, assignment: np.ndarray, **kw
) -> dict[str, dict[str, dict[str, int]]]:
    """Bytes of one round by hop, direction and message type (same arguments as
    :func:`predict_ledger`)."""
    return predict_ledger(costs, topology, assignment, **kw).bytes_breakdown()


@dataclass(frozen=True)
class AssignmentCosts:
    """Every client's round costs at every aggregator, for assignment search (the planner).

    With ``x`` an assignment (client -> aggregator), :func:`assignment_delay` gives the
    same delay as :func:`predict_round` (no faults). Arrays are ``(N, A)`` unless noted;
    all in seconds.
    """

    chain: np.ndarray
    """Client i's chain if served by aggregator j (``round_delay``'s chain_i)."""
    aggregator_work: np.ndarray
    """Compute client i adds to aggregator j's queue."""
    backbone_work: np.ndarray
    """Busy time client i adds to aggregator j's server link."""
    server_work: np.ndarray
    """(N,) compute client i adds to the server's queue."""
    client_down: np.ndarray
    """Latency + busy time of client i's model download from aggregator j."""
    client_up: np.ndarray
    """Latency + busy time of client i's model upload to aggregator j."""
    down_fixed: np.ndarray
    """(A,) backbone download of an active aggregator (latency + its own messages)."""
    down_per_client: np.ndarray
    """(A,) extra backbone download per client (sfl relays one copy each)."""
    up_fixed: np.ndarray
    """(A,) backbone upload of an active aggregator."""
    up_per_client: np.ndarray
    """(A,) extra backbone upload and averaging per client."""
    server_averaging_per_aggregator: float
    server_averaging_per_client: float


def assignment_costs(
    costs: PartCosts,
    topology: Topology,
    *,
    end_to_end: bool,
    edge_averaging: bool,
    server_copies: bool = False,
    batch_size: int,
    local_epochs: int = 1,
    samples: np.ndarray | None = None,
) -> AssignmentCosts:
    """The terms of :func:`round_delay` for every (client, aggregator) pair at once."""
    samples = np.asarray(topology.client_samples if samples is None else samples, dtype=np.int64)
    m = n_batches(samples, batch_size, local_epochs).astype(np.float64)[:, None]  # (N, 1)
    s = (samples * local_epochs).astype(np.float64)[:, None]
    H = float(HEADER_NBYTES)
    alpha, gamma = (float(v) for v in costs.act_bytes)
    pc, pg, ps = (float(v) for v in costs.state_numel)
    lat = topology.ca_latency  # (N, A)
    bw = np.where(topology.ca_bandwidth > 0, topology.ca_bandwidth, np.nan)  # nan: no link
    blat, bbw = topology.as_latency[None, :], topology.as_bandwidth[None, :]
    n_msgs = 3 if end_to_end else 2  # activations, labels (and gradients) per batch
    ca_bytes = m * H * n_msgs + s * (alpha * (2 if end_to_end else 1) + LABEL_BYTES)
    as_bytes = m * H * n_msgs + s * (gamma * (2 if end_to_end else 1) + LABEL_BYTES)
    compute = costs.train_flops[0] * s / topology.client_speed[:, None]
    agg = (costs.train_flops[1] * s / topology.aggregator_speed[None, :]) * costs.three_tier
    server = costs.train_flops[2] * s[:, 0] / topology.server_speed
    if end_to_end:
        chain = (compute + n_msgs * m * lat + ca_bytes / bw + agg
                 + n_msgs * m * blat + as_bytes / bbw + server[:, None])  # fmt: skip
    else:
        chain = np.maximum(compute, ca_bytes / bw)
    model_c, model_g, count = H + FLOAT_BYTES * pc, H + FLOAT_BYTES * pg, H + COUNT_BYTES
    bl, bb = topology.as_latency, topology.as_bandwidth
    if edge_averaging:
        down_fixed = bl + (model_c + model_g * costs.three_tier) / bb
        down_per = np.zeros_like(bl)
        up_fixed = bl + (model_c + model_g * costs.three_tier + count) / bb
        up_per = 2.0 * pc / topology.aggregator_speed
        srv_agg, srv_client = 2.0 * (pc + pg * costs.three_tier), 0.0
    else:
        down_fixed, up_fixed = bl.copy(), bl.copy()
        down_per, up_per = model_c / bb, (model_c + count) / bb
        srv_agg, srv_client = 0.0, 2.0 * (pc + ps * server_copies)
    return AssignmentCosts(
        chain=chain,
        aggregator_work=np.broadcast_to(agg, chain.shape).copy(),
        backbone_work=np.broadcast_to(as_bytes / bbw, chain.shape).copy(),
        server_work=server,
        client_down=lat + model_c / bw,
        client_up=lat + (model_c + count) / bw,
        down_fixed=down_fixed,
        down_per_client=down_per,
        up_fixed=up_fixed,
        up_per_client=up_per,
        server_averaging_per_aggregator=srv_agg / topology.server_speed,
        server_averaging_per_client=srv_client / topology.server_speed,
    )


def assignment_delay(ac: AssignmentCosts, assignment: np.ndarray) -> float:
    """The round delay of ``assignment`` (every client with samples takes part)."""
    x = np.asarray(assignment, dtype=np.int64)
    n_aggs = len(ac.down_fixed)
    rows = np.arange(len(x))

    def gmax(v: np.ndarray) -> np.ndarray:
        out = np.zeros(n_aggs)
        np.maximum.at(out, x, v)
        return out

    k = np.bincount(x, minlength=n_aggs).astype(np.float64)
    active = k > 0
    T = np.maximum.reduce([
        gmax(ac.chain[rows, x]),
        np.bincount(x, ac.aggregator_work[rows, x], n_aggs),
        np.bincount(x, ac.backbone_work[rows, x], n_aggs),
    ])  # fmt: skip
    train = max(float(T.max(initial=0)), float(ac.server_work.sum()))
    down = np.where(
        active, ac.down_fixed + k * ac.down_per_client + gmax(ac.client_down[rows, x]), 0
    )
    up = np.where(active, gmax(ac.client_up[rows, x]) + ac.up_fixed + k * ac.up_per_client, 0)
    srv = ac.server_averaging_per_aggregator * active.sum() + ac.server_averaging_per_client * len(
        x
    )
    return float(down.max(initial=0)) + train + float(up.max(initial=0)) + srv
