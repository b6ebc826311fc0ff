"""Predicting a round's costs without training (pure, vectorised; for the planner).

:func:`predict_ledger` fills the same :class:`~flowsplit.federated.costs.Ledger` the
runners fill message by message, from the message sequence the roles follow
(see :mod:`flowsplit.federated.roles`), in closed form over arrays of clients:

The messages are the scheme's own description of its protocol
(:meth:`~flowsplit.federated.schemes.Scheme.batch_messages`, ``download_messages``,
``upload_messages``, ``averaging``); this module only multiplies them out:

- a batch message of ``b`` samples costs ``nbytes + b * per_sample`` bytes, sent once
  per batch of every participating client (``m`` batches, ``s`` samples each round);
- a model message is sent once per participating client or once per active
  aggregator (one with at least one participant);
- compute is ``train_flops[tier] * s`` on the client (slowed for a straggler), the
  aggregator (zero FLOPs when its part is empty) and the server.

With no faults the runners' ledgers equal this prediction (tests check it), so the
scheme's ``round_delay`` of a prediction is the delay the simulation will report.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowsplit.federated.aggregate import averaging_flops
from flowsplit.federated.costs import Ledger, RoundDelay, n_batches
from flowsplit.federated.profile import PartCosts
from flowsplit.federated.protocol import (
    AGGREGATOR_SERVER,
    CLIENT_AGGREGATOR,
    DIRECTIONS,
    HOPS,
    MESSAGE_TYPES,
)
from flowsplit.federated.schemes import PER_AGGREGATOR, PER_BATCH, PER_CLIENT, Message, Scheme
from flowsplit.federated.topology import Topology


def _key(msg: Message) -> tuple[int, int, int]:
    return HOPS.index(msg.hop), DIRECTIONS.index(msg.direction), MESSAGE_TYPES.index(msg.kind)


def hop_sums(messages: Sequence[Message], hop: str, each: str) -> tuple[int, float, float]:
    """(count, fixed bytes, bytes per sample) of the ``messages`` on ``hop`` sent per ``each``."""
    picked = [m for m in messages if m.hop == hop and m.each == each]
    return (
        len(picked),
        float(sum(m.nbytes for m in picked)),
        float(sum(m.per_sample for m in picked)),
    )


def predict_ledger(
    costs: PartCosts,
    topology: Topology,
    assignment: np.ndarray,
    *,
    scheme: Scheme,
    batch_size: int,
    local_epochs: int = 1,
    samples: np.ndarray | None = None,
    participants: np.ndarray | None = None,
    slowdown: np.ndarray | None = None,
) -> Ledger:
    """The ledger of one round of ``scheme``, computed in closed form.

    Args:
        costs: per-sample costs of the parts (``scheme.part_costs``).
        topology: nodes and links; ``samples`` defaults to ``topology.client_samples``.
        assignment: (N,) aggregator of each client.
        scheme: what the round sends and computes (:mod:`flowsplit.federated.schemes`).
        participants: (N,) bool, default every client with samples.
        slowdown: (N,) compute slowdown of stragglers, default 1.
    """
    n, n_aggs = topology.n_clients, topology.n_aggregators
    assignment = np.asarray(assignment, dtype=np.int64)
    samples = np.asarray(topology.client_samples if samples is None else samples, dtype=np.int64)
    part = samples > 0 if participants is None else (np.asarray(participants, bool) & (samples > 0))
    slow = np.ones(n) if slowdown is None else np.asarray(slowdown, dtype=np.float64)
    led = Ledger.zeros(n, n_aggs)

    m = np.where(part, n_batches(samples, batch_size, local_epochs), 0).astype(np.float64)
    s = np.where(part, samples * local_epochs, 0).astype(np.float64)
    rows = np.arange(n)
    lat = topology.ca_latency[rows, assignment]  # (N,)
    bw = topology.ca_bandwidth[rows, assignment]
    bw = np.where(bw > 0, bw, np.inf)
    blat = topology.as_latency[assignment]  # (N,) backbone of each client's aggregator
    bbw = topology.as_bandwidth[assignment]

    def add_bytes(msg: Message, nbytes: np.ndarray, count: np.ndarray) -> None:
        led.bytes[_key(msg)] += float(np.sum(nbytes))
        led.messages[_key(msg)] += float(np.sum(count))

    def per_agg(values: np.ndarray) -> np.ndarray:
        return np.bincount(assignment, weights=values, minlength=n_aggs)

    # --- train: every batch message, on the client's link and its aggregator's --------
    batch = scheme.batch_messages(costs)
    for msg in batch:
        add_bytes(msg, m * msg.nbytes + s * msg.per_sample, m)
    ca_n, ca_fix, ca_per = hop_sums(batch, CLIENT_AGGREGATOR, PER_BATCH)
    as_n, as_fix, as_per = hop_sums(batch, AGGREGATOR_SERVER, PER_BATCH)
    ca_bytes = m * ca_fix + s * ca_per  # (N,)
    as_bytes = m * as_fix + s * as_per
    led.client_link += ca_n * m * lat + ca_bytes / bw
    led.client_busy += ca_bytes / bw
    led.backbone_for += as_n * m * blat + as_bytes / bbw
    led.backbone_load += per_agg(as_bytes / bbw)
    led.client_compute += costs.train_flops[0] * s * slow / topology.client_speed
    agg_time = costs.train_flops[1] * s / topology.aggregator_speed[assignment]
    led.aggregator_for += agg_time
    led.aggregator_load += per_agg(agg_time)
    server_time = costs.train_flops[2] * s / topology.server_speed
    led.server_for += server_time
    led.server_load += server_time.sum()

    # --- download and upload: model messages per client or per active aggregator -------
    one = part.astype(np.float64)
    k = per_agg(one)  # participants per aggregator
    active = (k > 0).astype(np.float64)
    counts = {
        (CLIENT_AGGREGATOR, PER_CLIENT): one,
        (AGGREGATOR_SERVER, PER_CLIENT): k,
        (AGGREGATOR_SERVER, PER_AGGREGATOR): active,
    }
    bl, bb = topology.as_latency, topology.as_bandwidth
    phases = (
        (scheme.download_messages(costs), "link_down", "backbone_down"),
        (scheme.upload_messages(costs), "link_up", "backbone_up"),
    )
    for msgs, link, backbone in phases:
        for msg in msgs:
            count = counts[msg.hop, msg.each]
            add_bytes(msg, count * msg.nbytes, count)
        client_bytes = hop_sums(msgs, CLIENT_AGGREGATOR, PER_CLIENT)[1]
        relayed = hop_sums(msgs, AGGREGATOR_SERVER, PER_CLIENT)[1]
        own = hop_sums(msgs, AGGREGATOR_SERVER, PER_AGGREGATOR)[1]
        # A phase's model messages stream back to back: one latency per used link.
        getattr(led, link)[...] += one * client_bytes / bw
        getattr(led, link + "_latency")[...] += one * lat
        getattr(led, backbone)[...] += (active * own + k * relayed) / bb
        getattr(led, backbone + "_latency")[...] += active * bl
    avg = scheme.averaging(costs)
    led.averaging += averaging_flops(avg.edge_per_client, k) / topology.aggregator_speed
    led.server_averaging += (
        averaging_flops(avg.server_per_aggregator, active.sum())
        + averaging_flops(avg.server_per_client, k.sum())
    ) / topology.server_speed
    return led


def predict_round(
    costs: PartCosts, topology: Topology, assignment: np.ndarray, *, scheme: Scheme, **kw
) -> RoundDelay:
    """The scheme's round delay of :func:`predict_ledger` (same keyword arguments)."""
    led = predict_ledger(costs, topology, assignment, scheme=scheme, **kw)
    return scheme.round_delay(led, assignment)


def bytes_per_round(
    costs: PartCosts, topology: Topology, assignment: np.ndarray, **kw
) -> dict[str, dict[str, dict[str, int]]]:
    """Bytes of one round by hop, direction and message type (same arguments as
    :func:`predict_ledger`)."""
    return predict_ledger(costs, topology, assignment, **kw).bytes_breakdown()
