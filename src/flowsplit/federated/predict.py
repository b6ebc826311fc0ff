"""Predicting a round's costs without training (pure, vectorised; for the planner).

:func:`predict_ledger` fills the same :class:`~flowsplit.federated.system.costs.Ledger` the
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
from dataclasses import dataclass

import numpy as np

from flowsplit.federated.schemes import PER_AGGREGATOR, PER_BATCH, PER_CLIENT, Message, Scheme
from flowsplit.federated.system.aggregate import averaging_flops
from flowsplit.federated.system.costs import Ledger, RoundDelay, n_batches
from flowsplit.federated.system.profile import PartCosts
from flowsplit.federated.system.protocol import (
    AGGREGATOR_SERVER,
    CLIENT_AGGREGATOR,
    DIRECTIONS,
    HOPS,
    MESSAGE_TYPES,
)
from flowsplit.federated.system.topology import Topology


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


@dataclass(frozen=True)
class _Round:
    """Per-client facts of one round, each (N,), at the clients' assigned aggregators."""

    assignment: np.ndarray
    n_aggregators: int
    batches: np.ndarray
    samples: np.ndarray
    one: np.ndarray
    """1.0 for a participant, else 0."""
    slowdown: np.ndarray
    latency: np.ndarray
    bandwidth: np.ndarray
    """inf where there is no link (a non-participant's bytes are 0 anyway)."""
    backbone_latency: np.ndarray
    backbone_bandwidth: np.ndarray

    def per_agg(self, values: np.ndarray) -> np.ndarray:
        """(A,) sums of per-client ``values`` by aggregator."""
        return np.bincount(self.assignment, weights=values, minlength=self.n_aggregators)


def _add_bytes(led: Ledger, msg: Message, nbytes: np.ndarray, count: np.ndarray) -> None:
    led.bytes[_key(msg)] += float(np.sum(nbytes))
    led.messages[_key(msg)] += float(np.sum(count))


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
    n = topology.n_clients
    assignment = np.asarray(assignment, dtype=np.int64)
    samples = np.asarray(topology.client_samples if samples is None else samples, dtype=np.int64)
    part = samples > 0 if participants is None else (np.asarray(participants, bool) & (samples > 0))
    rows = np.arange(n)
    bw = topology.ca_bandwidth[rows, assignment]
    r = _Round(
        assignment=assignment,
        n_aggregators=topology.n_aggregators,
        batches=np.where(part, n_batches(samples, batch_size, local_epochs), 0).astype(float),
        samples=np.where(part, samples * local_epochs, 0).astype(np.float64),
        one=part.astype(np.float64),
        slowdown=np.ones(n) if slowdown is None else np.asarray(slowdown, dtype=np.float64),
        latency=topology.ca_latency[rows, assignment],
        bandwidth=np.where(bw > 0, bw, np.inf),
        backbone_latency=topology.as_latency[assignment],
        backbone_bandwidth=topology.as_bandwidth[assignment],
    )
    led = Ledger.zeros(n, topology.n_aggregators)
    _charge_train(led, costs, topology, scheme, r)
    _charge_models(led, costs, topology, scheme, r)
    return led


def _charge_train(
    led: Ledger, costs: PartCosts, topology: Topology, scheme: Scheme, r: _Round
) -> None:
    """Every batch message on the client's link and its aggregator's; every tier's compute."""
    m, s = r.batches, r.samples
    batch = scheme.batch_messages(costs)
    for msg in batch:
        _add_bytes(led, msg, m * msg.nbytes + s * msg.per_sample, m)
    ca_n, ca_fix, ca_per = hop_sums(batch, CLIENT_AGGREGATOR, PER_BATCH)
    as_n, as_fix, as_per = hop_sums(batch, AGGREGATOR_SERVER, PER_BATCH)
    ca_bytes = m * ca_fix + s * ca_per  # (N,)
    as_bytes = m * as_fix + s * as_per
    led.client_link += ca_n * m * r.latency + ca_bytes / r.bandwidth
    led.client_busy += ca_bytes / r.bandwidth
    led.backbone_for += as_n * m * r.backbone_latency + as_bytes / r.backbone_bandwidth
    led.backbone_load += r.per_agg(as_bytes / r.backbone_bandwidth)
    led.client_compute += costs.train_flops[0] * s * r.slowdown / topology.client_speed
    # Zero FLOPs when the aggregator part is empty (two tiers).
    agg_time = costs.train_flops[1] * s / topology.aggregator_speed[r.assignment]
    led.aggregator_for += agg_time
    led.aggregator_load += r.per_agg(agg_time)
    server_time = costs.train_flops[2] * s / topology.server_speed
    led.server_for += server_time
    led.server_load += server_time.sum()


def _charge_models(
    led: Ledger, costs: PartCosts, topology: Topology, scheme: Scheme, r: _Round
) -> None:
    """Download and upload: model messages per client or per active aggregator; averaging."""
    k = r.per_agg(r.one)  # participants per aggregator
    active = (k > 0).astype(np.float64)
    counts = {
        (CLIENT_AGGREGATOR, PER_CLIENT): r.one,
        (AGGREGATOR_SERVER, PER_CLIENT): k,
        (AGGREGATOR_SERVER, PER_AGGREGATOR): active,
    }
    phases = (
        (scheme.download_messages(costs), "link_down", "backbone_down"),
        (scheme.upload_messages(costs), "link_up", "backbone_up"),
    )
    for msgs, link, backbone in phases:
        for msg in msgs:
            count = counts[msg.hop, msg.each]
            _add_bytes(led, msg, count * msg.nbytes, count)
        client_bytes = hop_sums(msgs, CLIENT_AGGREGATOR, PER_CLIENT)[1]
        relayed = hop_sums(msgs, AGGREGATOR_SERVER, PER_CLIENT)[1]
        own = hop_sums(msgs, AGGREGATOR_SERVER, PER_AGGREGATOR)[1]
        # A phase's model messages stream back to back: one latency per used link.
        getattr(led, link)[...] += r.one * client_bytes / r.bandwidth
        getattr(led, link + "_latency")[...] += r.one * r.latency
        getattr(led, backbone)[...] += (active * own + k * relayed) / topology.as_bandwidth
        getattr(led, backbone + "_latency")[...] += active * topology.as_latency
    avg = scheme.averaging(costs)
    led.averaging += averaging_flops(avg.edge_per_client, k) / topology.aggregator_speed
    led.server_averaging += (
        averaging_flops(avg.server_per_aggregator, active.sum())
        + averaging_flops(avg.server_per_client, k.sum())
    ) / topology.server_speed


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
