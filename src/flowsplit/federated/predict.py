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
