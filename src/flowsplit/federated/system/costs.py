"""The cost model: the simulation's clock and meter (docs/sfl-system-model.md).

Costs are charged message by message and computation by computation into a
:class:`Ledger` of one round:

- compute time = FLOPs / speed of the node (a straggler's speed divided by its slowdown);
- transfer time of an ``m``-byte message over a link = latency + m / bandwidth;
- bytes and message counts per hop (client-aggregator, aggregator-server),
  direction (up, down) and message type (activations, gradients, labels, model, control).

Each time is filed under the round phase (download, train, upload) and under the
accounts the delay formula needs: the client the work is done for (its *chain*)
and the resource that does it (its *load*). An aggregator's compute is a FIFO queue
shared by its clients, and so are the server and every link; a resource's load is
its busy time, so a link's load is bytes / bandwidth (latency delays a message but
does not occupy the link), while a chain pays latency + bytes / bandwidth for every
message it waits for.

:func:`round_delay` turns a ledger into the round delay (a bottleneck model):

    delay    = download + train + upload
    download = max_j ( lat_j + busy_down[j] + max_{i in j} (lat_ij + busy_down[i]) )
    train    = max( max_j T_j , server_load )
    T_j      = max( max_{i in j} chain_i , aggregator_load[j] , backbone_load[j] )
    upload   = max_j ( max_{i in j} (lat_ij + busy_up[i]) + averaging[j] + lat_j + busy_up[j] )
               + server averaging

Model messages of a phase stream back to back over a link (one latency, then the
bytes). With end-to-end backpropagation (sfl, hsfl) a client waits for its
gradients, so its chain is everything done for it: its compute, every transfer of
its batches on both hops (latency + bytes / bandwidth each), and the aggregator's
and server's compute on its batches. With local losses (hsfl-ll) a client never
waits, so its chain is ``max(its compute, its link's busy time)``. Each term is a
lower bound of the time the last client of an aggregator finishes (longest chain,
busiest resource), tight when one bottleneck dominates; queueing interaction beyond
that is ignored on purpose, so the same formula is a cheap, vectorised objective
for the planner (:func:`flowsplit.federated.predict.predict_ledger` computes the
ledger of a round analytically, without training).

Everything here is NumPy over arrays of clients and aggregators.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from flowsplit.federated.system.protocol import (
    AGGREGATOR,
    CLIENT,
    DIRECTIONS,
    DOWNLOAD,
    HOPS,
    MESSAGE_TYPES,
    SERVER,
    TRAIN,
    Address,
)
from flowsplit.federated.system.topology import Topology

_HOP = {h: k for k, h in enumerate(HOPS)}
# (sender kind, receiver kind) -> (hop index, direction index), as protocol.hop_of says.
_HOP_DIR = {
    (CLIENT, AGGREGATOR): (0, 0),
    (AGGREGATOR, CLIENT): (0, 1),
    (AGGREGATOR, SERVER): (1, 0),
    (SERVER, AGGREGATOR): (1, 1),
}
_DIR = {d: k for k, d in enumerate(DIRECTIONS)}
_TYPE = {t: k for k, t in enumerate(MESSAGE_TYPES)}
_SHAPE = (len(HOPS), len(DIRECTIONS), len(MESSAGE_TYPES))
# (hop index, a download?) -> the Ledger's busy-time and latency accounts of a model
# transfer on that hop (a download, else an upload).
_TRANSFER_ACCOUNTS = {
    (0, True): ("link_down", "link_down_latency"),
    (0, False): ("link_up", "link_up_latency"),
    (1, True): ("backbone_down", "backbone_down_latency"),
    (1, False): ("backbone_up", "backbone_up_latency"),
}


@dataclass
class Ledger:
    """Bytes, message counts and seconds of one round, per account (all additive)."""

    bytes: np.ndarray
    """(hop, direction, type) bytes on the wire, headers included."""
    messages: np.ndarray
    """(hop, direction, type) message counts."""
    client_compute: np.ndarray
    """(N,) training compute of each client."""
    client_link: np.ndarray
    """(N,) training-time transfers of each client's messages on its link (latency + bytes/bw)."""
    client_busy: np.ndarray
    """(N,) busy time of each client's link in training (bytes/bw)."""
    aggregator_for: np.ndarray
    """(N,) aggregator compute spent on each client's batches."""
    backbone_for: np.ndarray
    """(N,) aggregator-server transfers of each client's batches (latency + bytes/bw)."""
    server_for: np.ndarray
    """(N,) server compute spent on each client's batches."""
    aggregator_load: np.ndarray
    """(A,) training compute of each aggregator (its queue)."""
    backbone_load: np.ndarray
    """(A,) training busy time of each aggregator-server link (bytes/bw)."""
    server_load: np.ndarray
    """(1,) training compute of the server."""
    link_down: np.ndarray
    """(N,) model download busy time on each client link."""
    backbone_down: np.ndarray
    """(A,) model download busy time on each aggregator-server link."""
    link_up: np.ndarray
    """(N,) model upload busy time on each client link."""
    backbone_up: np.ndarray
    """(A,) model upload busy time on each aggregator-server link."""
    link_down_latency: np.ndarray
    """(N,) latency of the client link if it carried a download (charged by one role)."""
    backbone_down_latency: np.ndarray
    """(A,) latency of the backbone link if it carried a download."""
    link_up_latency: np.ndarray
    """(N,) latency of the client link if it carried an upload."""
    backbone_up_latency: np.ndarray
    """(A,) latency of the backbone link if it carried an upload."""
    averaging: np.ndarray
    """(A,) averaging compute at each aggregator."""
    server_averaging: np.ndarray
    """(1,) averaging compute at the server."""

    @classmethod
    def zeros(cls, n_clients: int, n_aggregators: int) -> Ledger:
        sizes = {"N": n_clients, "A": n_aggregators}
        arrays = {}
        for f in fields(cls):
            doc_shape = _FIELD_SHAPES[f.name]
            shape = _SHAPE if doc_shape == "K" else (sizes.get(doc_shape, 1),)
            arrays[f.name] = np.zeros(shape, dtype=np.float64)
        return cls(**arrays)

    def to_vector(self) -> np.ndarray:
        """All accounts as one float64 vector (the layout depends only on N and A)."""
        return np.concatenate([getattr(self, f.name).ravel() for f in fields(self)])

    @classmethod
    def from_vector(cls, vec: np.ndarray, n_clients: int, n_aggregators: int) -> Ledger:
        out = cls.zeros(n_clients, n_aggregators)
        offset = 0
        for f in fields(cls):
            arr = getattr(out, f.name)
            arr[...] = np.asarray(vec[offset : offset + arr.size]).reshape(arr.shape)
            offset += arr.size
        if offset != len(vec):
            raise ValueError(f"ledger vector of {len(vec)} values, expected {offset}")
        return out

    def __add__(self, other: Ledger) -> Ledger:
        return Ledger(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    @property
    def bytes_total(self) -> int:
        return int(round(self.bytes.sum()))

    def bytes_breakdown(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{hop: {direction: {type: bytes}}}`` (every key present, zeros included)."""
        return _nested(self.bytes)


_FIELD_SHAPES = {
    "bytes": "K",
    "messages": "K",
    "client_compute": "N",
    "client_link": "N",
    "client_busy": "N",
    "aggregator_for": "N",
    "backbone_for": "N",
    "server_for": "N",
    "aggregator_load": "A",
    "backbone_load": "A",
    "server_load": "1",
    "link_down": "N",
    "backbone_down": "A",
    "link_up": "N",
    "backbone_up": "A",
    "link_down_latency": "N",
    "backbone_down_latency": "A",
    "link_up_latency": "N",
    "backbone_up_latency": "A",
    "averaging": "A",
    "server_averaging": "1",
}


def _nested(arr: np.ndarray) -> dict[str, dict[str, dict[str, int]]]:
    return {
        hop: {
            d: {t: int(round(arr[_HOP[hop], _DIR[d], _TYPE[t]])) for t in MESSAGE_TYPES}
            for d in DIRECTIONS
        }
        for hop in HOPS
    }


def transfer_time(nbytes: float | np.ndarray, latency: Any, bandwidth: Any) -> Any:
    """Seconds to move ``nbytes`` over a link: ``latency + nbytes / bandwidth``."""
    return latency + np.asarray(nbytes, dtype=np.float64) / bandwidth


class CostMeter:
    """Charges messages and computations of one round into a :class:`Ledger`.

    ``slowdown[i]`` divides client ``i``'s speed this round (stragglers); each charge
    names the aggregator it concerns. One meter per process: in the distributed runner every
    role charges its own work and the ledgers are summed.
    """

    def __init__(self, topology: Topology, *, enabled: bool = True):
        self.enabled = enabled
        self.set_topology(topology)
        self.start_round()

    def set_topology(self, topology: Topology) -> None:
        """Charge from now on with ``topology``'s speeds and links (a round's network)."""
        self.topology = topology
        # Plain Python numbers: charging runs per message, and NumPy scalar indexing
        # costs several times more than list indexing (same float64 arithmetic).
        self._ca_latency = topology.ca_latency.tolist()
        self._ca_bandwidth = topology.ca_bandwidth.tolist()
        self._as_latency = topology.as_latency.tolist()
        self._as_bandwidth = topology.as_bandwidth.tolist()
        self._client_speed = topology.client_speed.tolist()
        self._aggregator_speed = topology.aggregator_speed.tolist()
        self._server_speed = float(topology.server_speed)

    def start_round(self, slowdown: np.ndarray | None = None) -> None:
        n = self.topology.n_clients
        self._slowdown = [1.0] * n if slowdown is None else np.asarray(slowdown, float).tolist()
        self.ledger = Ledger.zeros(n, self.topology.n_aggregators)
        self.charged: dict[Address, list] = {}
        """Per node: [compute seconds charged so far this round, phase of the last charge]
        (the round's timeline reads it: :mod:`flowsplit.federated.system.schedule`)."""

    def charge_message(
        self, src: Address, dst: Address, nbytes: int, kind: str, client: int, phase: str
    ) -> None:
        """Charge one message of ``nbytes`` (header included) from ``src`` to ``dst``."""
        if not self.enabled:
            return
        hop, direction = _HOP_DIR[src[0], dst[0]]
        led = self.ledger
        key = (hop, direction, _TYPE[kind])
        led.bytes[key] += nbytes
        led.messages[key] += 1
        if hop == 0:  # client-aggregator
            k, j = (src[1], dst[1]) if src[0] == CLIENT else (dst[1], src[1])
            latency, busy = self._ca_latency[k][j], nbytes / self._ca_bandwidth[k][j]
            if phase == TRAIN:
                led.client_link[k] += latency + busy
                led.client_busy[k] += busy
                return
        else:  # aggregator-server
            k = src[1] if src[0] == AGGREGATOR else dst[1]
            latency, busy = self._as_latency[k], nbytes / self._as_bandwidth[k]
            if phase == TRAIN:
                led.backbone_load[k] += busy
                if client >= 0:
                    led.backbone_for[client] += latency + busy
                return
        # A model download or upload: the link's busy times add up, its latency counts once.
        busy_account, latency_account = _TRANSFER_ACCOUNTS[hop, phase == DOWNLOAD]
        getattr(led, busy_account)[k] += busy
        getattr(led, latency_account)[k] = latency

    def charge_compute(self, node: Address, flops: float, client: int, phase: str = TRAIN) -> None:
        """Charge ``flops`` run by ``node`` (for ``client``'s batch in the train phase)."""
        if not self.enabled:
            return
        led = self.ledger
        kind, index = node
        seconds = 0.0
        if kind == CLIENT:
            seconds = flops * self._slowdown[index] / self._client_speed[index]
            led.client_compute[index] += seconds
        elif kind == AGGREGATOR:
            seconds = flops / self._aggregator_speed[index]
            if phase == TRAIN:
                led.aggregator_load[index] += seconds
                led.aggregator_for[client] += seconds
            else:
                led.averaging[index] += seconds
        elif kind == SERVER:
            seconds = flops / self._server_speed
            if phase == TRAIN:
                led.server_load[0] += seconds
                led.server_for[client] += seconds
            else:
                led.server_averaging[0] += seconds
        charged = self.charged.setdefault(node, [0.0, phase])
        charged[0] += seconds
        charged[1] = phase


@dataclass(frozen=True)
class RoundDelay:
    """A round's delay and its terms (seconds)."""

    total: float
    download: float
    train: float
    upload: float
    per_aggregator: np.ndarray
    """(A,) T_j: when the last client of each aggregator finishes training."""
    bottleneck: str
    """What set the train term: ``chain``, ``aggregator``, ``backbone`` or ``server``."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_s": self.total,
            "download_s": self.download,
            "train_s": self.train,
            "upload_s": self.upload,
            "bottleneck": self.bottleneck,
        }


def _group_max(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    out = np.zeros(n_groups)
    np.maximum.at(out, groups, values)
    return out


Chain = tuple[tuple[str, ...], tuple[str, ...]]
"""Ledger accounts of a client's chain: ``max(sum of the first, sum of the second)``."""
END_TO_END_CHAIN: Chain = (
    ("client_compute", "client_link", "aggregator_for", "backbone_for", "server_for"),
    (),
)
"""A client waits for its gradients: everything done for it is on its chain."""
LOCAL_LOSS_CHAIN: Chain = (("client_compute",), ("client_busy",))
"""A client never waits: its compute or its link's busy time, whichever is longer."""


def account_sum(ledger: Ledger, names: tuple[str, ...], n: int) -> np.ndarray:
    """(n,) the sum of the per-client accounts ``names`` (zeros when there are none)."""
    total = np.zeros(n)
    for name in names:
        total = total + getattr(ledger, name)
    return total


def round_delay(ledger: Ledger, assignment: np.ndarray, *, chain: Chain) -> RoundDelay:
    """The round delay of ``ledger`` (see the module docstring for the formula).

    ``chain`` names the accounts of a client's chain (a scheme's ``chain``).
    """
    assignment = np.asarray(assignment, dtype=np.int64)
    n_aggs = len(ledger.aggregator_load)
    n = len(ledger.client_compute)
    chain = np.maximum(account_sum(ledger, chain[0], n), account_sum(ledger, chain[1], n))
    chain_max = _group_max(chain, assignment, n_aggs)
    terms = np.stack([chain_max, ledger.aggregator_load, ledger.backbone_load])  # (3, A)
    per_agg = terms.max(axis=0)
    server = float(ledger.server_load[0])
    train = max(float(per_agg.max(initial=0.0)), server)
    if server >= train and server > 0:
        bottleneck = "server"
    else:
        j = int(per_agg.argmax()) if len(per_agg) else 0
        bottleneck = ("chain", "aggregator", "backbone")[int(terms[:, j].argmax())]
    led = ledger
    client_down = _group_max(led.link_down + led.link_down_latency, assignment, n_aggs)
    download = float((led.backbone_down + led.backbone_down_latency + client_down).max(initial=0))
    client_up = _group_max(led.link_up + led.link_up_latency, assignment, n_aggs)
    upload = float(
        (client_up + led.averaging + led.backbone_up + led.backbone_up_latency).max(initial=0)
    ) + float(led.server_averaging[0])
    return RoundDelay(
        total=download + train + upload,
        download=download,
        train=train,
        upload=upload,
        per_aggregator=per_agg,
        bottleneck=bottleneck,
    )


def n_batches(samples: np.ndarray, batch_size: int, local_epochs: int = 1) -> np.ndarray:
    """Batches each client runs in a round: ``local_epochs * ceil(samples / batch_size)``."""
    return local_epochs * -(-np.asarray(samples, dtype=np.int64) // int(batch_size))
