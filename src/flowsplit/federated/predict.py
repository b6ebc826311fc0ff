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


BASIS = ("latency", "inv_bandwidth", "inv_agg_speed", "backbone_latency", "inv_backbone_bw", "one")
"""What a client's training accounts are linear in: its link to its aggregator (latency,
1 / bandwidth), that aggregator's 1 / speed, backbone latency and 1 / bandwidth, and 1."""
N_BASIS = len(BASIS)
LAT, INV_BW, INV_AGG, BB_LAT, INV_BB, ONE = range(N_BASIS)
TRAIN_ACCOUNTS = (
    "client_compute",
    "client_link",
    "client_busy",
    "aggregator_for",
    "backbone_for",
    "backbone_busy",
    "server_for",
)
"""The per-client training accounts of a ledger (``backbone_busy``: a client's share of
its aggregator's ``backbone_load``)."""


def train_accounts(
    costs: PartCosts,
    topology: Topology,
    scheme: Scheme,
    batches: np.ndarray,
    samples: np.ndarray,
    slowdown: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Each client's training accounts, (N, K) coefficients on :data:`BASIS`.

    The one formula of the training phase: :func:`predict_ledger` evaluates it at the
    assigned aggregators, the planner's cost tables at every aggregator at once.
    ``batches``/``samples``: (N,) of each client this round.
    """
    m, s = batches, samples
    batch = scheme.batch_messages(costs)
    ca_n, ca_fix, ca_per = hop_sums(batch, CLIENT_AGGREGATOR, PER_BATCH)
    as_n, as_fix, as_per = hop_sums(batch, AGGREGATOR_SERVER, PER_BATCH)
    tf = np.asarray(costs.train_flops, dtype=np.float64)
    slow = 1.0 if slowdown is None else slowdown
    acc = {name: np.zeros((topology.n_clients, N_BASIS)) for name in TRAIN_ACCOUNTS}
    acc["client_compute"][:, ONE] = tf[0] * s * slow / topology.client_speed
    # Chains pay latency + bytes / bandwidth per message; queues only the busy time.
    acc["client_link"][:, LAT] = ca_n * m
    acc["client_link"][:, INV_BW] = m * ca_fix + s * ca_per
    acc["client_busy"][:, INV_BW] = m * ca_fix + s * ca_per
    # Zero FLOPs when the aggregator part is empty (two tiers).
    acc["aggregator_for"][:, INV_AGG] = tf[1] * s
    acc["backbone_for"][:, BB_LAT] = as_n * m
    acc["backbone_for"][:, INV_BB] = m * as_fix + s * as_per
    acc["backbone_busy"][:, INV_BB] = m * as_fix + s * as_per
    acc["server_for"][:, ONE] = tf[2] * s / topology.server_speed
    return acc


@dataclass(frozen=True)
class _Round:
    """Per-client facts of one round, at the clients' assigned aggregators."""

    assignment: np.ndarray
    n_aggregators: int
    batches: np.ndarray
    samples: np.ndarray
    one: np.ndarray
    """(N,) 1.0 for a participant, else 0."""
    slowdown: np.ndarray
    basis: np.ndarray
    """(N, K) :data:`BASIS` at each client's aggregator (1 / bandwidth 0 without a link)."""

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
    basis = np.empty((n, N_BASIS))
    basis[:, LAT] = topology.ca_latency[rows, assignment]
    basis[:, INV_BW] = np.divide(1.0, bw, out=np.zeros(n), where=bw > 0)
    basis[:, INV_AGG] = 1.0 / topology.aggregator_speed[assignment]
    basis[:, BB_LAT] = topology.as_latency[assignment]
    basis[:, INV_BB] = 1.0 / topology.as_bandwidth[assignment]
    basis[:, ONE] = 1.0
    r = _Round(
        assignment=assignment,
        n_aggregators=topology.n_aggregators,
        batches=np.where(part, n_batches(samples, batch_size, local_epochs), 0).astype(float),
        samples=np.where(part, samples * local_epochs, 0).astype(np.float64),
        one=part.astype(np.float64),
        slowdown=np.ones(n) if slowdown is None else np.asarray(slowdown, dtype=np.float64),
        basis=basis,
    )
    led = Ledger.zeros(n, topology.n_aggregators)
    _charge_train(led, costs, topology, scheme, r)
    _charge_models(led, costs, topology, scheme, r)
    return led


def _charge_train(
    led: Ledger, costs: PartCosts, topology: Topology, scheme: Scheme, r: _Round
) -> None:
    """Every batch message's bytes; the training accounts at the assigned aggregators."""
    m, s = r.batches, r.samples
    for msg in scheme.batch_messages(costs):
        _add_bytes(led, msg, m * msg.nbytes + s * msg.per_sample, m)
    acc = train_accounts(costs, topology, scheme, m, s, r.slowdown)
    value = {name: np.einsum("nk,nk->n", coef, r.basis) for name, coef in acc.items()}
    for name in (
        "client_compute",
        "client_link",
        "client_busy",
        "aggregator_for",
        "backbone_for",
        "server_for",
    ):
        getattr(led, name)[...] += value[name]
    led.aggregator_load += r.per_agg(value["aggregator_for"])
    led.backbone_load += r.per_agg(value["backbone_busy"])
    led.server_load += value["server_for"].sum()


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
        getattr(led, link)[...] += r.one * client_bytes * r.basis[:, INV_BW]
        getattr(led, link + "_latency")[...] += r.one * r.basis[:, LAT]
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
