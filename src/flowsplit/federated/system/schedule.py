"""A round's timeline: what every role did and when, predicted and measured.

The closed-form delay of :mod:`~flowsplit.federated.system.costs` is a bottleneck
bound: cheap enough for the planner, but blind to how the roles really wait for each
other. An end-to-end aggregator, for example, serves its clients' batches one at a
time and waits for the server's gradients after each, so its clients queue behind
each other's whole round trips, and the server serves every aggregator in the
round's service order. This module models that by **replaying** the round.

Every role records a *trace* of its round, in program order (:class:`Tracer`):

- ``WORK``: its own computation between two messages, with the seconds the cost model
  charged during it (FLOPs / speed) and, when run for real, its start and end times;
- ``SEND``: a message of ``nbytes`` (header included) to a peer, posted at a time;
- ``RECV``: a wait for the next message from a peer, from its start to its end.

:func:`replay` predicts when each event happens on a topology: a role runs its events
one after the other; a message leaves when it is posted, occupies its link direction
(first in, first out: ``nbytes / bandwidth``, after what is already on it) and arrives
``latency`` later; a receive ends when the message has arrived. Sends do not block
(they are posted asynchronously, as gloo does). So queueing at aggregators and at the
server, per-message latency on every round trip and link contention all follow from
the protocol itself, message by message, for any scheme.

:func:`timeline` summarises a trace's times (the replay's, or the ones measured in a
real run, with the same code): the round's duration and its three contiguous phases
(download until the last client holds its model; train until the last training work
anywhere ends; upload until the server has averaged), each tier's compute, the time
it spent waiting for messages, and per hop and direction the *exposed* transfer time
(how long receivers waited after a message was posted).

Times of one trace are on one clock: a real run's roles on one host share it
(``time.time()``, across network namespaces too); on several hosts the measured
transfer times carry the hosts' clock offsets.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any

import numpy as np

from flowsplit.federated.system.protocol import (
    ACTIVATIONS,
    AGGREGATOR,
    CLIENT,
    CONTROL,
    DOWNLOAD,
    GRADIENTS,
    LABELS,
    MODEL,
    SERVER,
    TRAIN,
    UPLOAD,
    address_of,
)

WORK, SEND, RECV = 0, 1, 2
"""Event kinds (column ``KIND``)."""
PHASES = (DOWNLOAD, TRAIN, UPLOAD)
_PHASE = {p: k for k, p in enumerate(PHASES)}

# Columns of a trace array (E, N_COLS) float64.
RANK, KIND, PEER, NBYTES, SECONDS, PHASE, T_START, T_END = range(8)
N_COLS = 8
"""rank of the role; event kind; peer rank (-1: none); bytes sent or received (-1: none
came, a lost peer); seconds the cost model charged (work); phase code; start and end time
(NaN when not measured)."""

_TRAIN_KINDS = (ACTIVATIONS, LABELS, GRADIENTS)


class Tracer:
    """Records one role's events of a round (one per role and round)."""

    def __init__(self, rank: int, n_aggregators: int):
        self.rank = rank
        self.n_aggregators = n_aggregators
        self.rows: list[list[float]] = []
        self.trained = False
        """A training event has been seen (a model received after it is the upload)."""
        self.start = float("nan")

    def work(self, seconds: float, phase: str | None, t0: float, t1: float) -> None:
        """The role computed from ``t0`` to ``t1``; the cost model charged ``seconds``.

        ``phase``: of the compute charged, else of the message that follows the work.
        """
        if phase == TRAIN:
            self.trained = True
        self.rows.append([self.rank, WORK, -1, 0, seconds, _PHASE[phase], t0, t1])

    def recv_phase(self, kind: str) -> str:
        """The phase of a receive of a message of type ``kind`` at this point."""
        if kind in _TRAIN_KINDS:
            return TRAIN
        if kind in (MODEL, CONTROL):
            return UPLOAD if self.trained else (DOWNLOAD if kind == MODEL else TRAIN)
        return TRAIN

    def send(self, peer: int, nbytes: int, phase: str, t0: float, t1: float) -> None:
        if phase == TRAIN:
            self.trained = True
        self.rows.append([self.rank, SEND, peer, nbytes, 0.0, _PHASE[phase], t0, t1])

    def recv(self, peer: int, nbytes: int, kind: str, t0: float, t1: float) -> None:
        """A wait for ``peer``'s next message of type ``kind`` (``nbytes`` -1: none came)."""
        phase = self.recv_phase(kind)
        if phase == TRAIN:
            self.trained = True
        self.rows.append([self.rank, RECV, peer, nbytes, 0.0, _PHASE[phase], t0, t1])

    def array(self) -> np.ndarray:
        """(E, N_COLS) float64: the events in program order."""
        if not self.rows:
            return np.zeros((0, N_COLS))
        return np.asarray(self.rows, dtype=np.float64)


def _link(topology: Any, n_aggregators: int, src: int, dst: int) -> tuple[float, float, float]:
    """(latency s, bandwidth B/s, burst bytes) of the link between ranks ``src`` and
    ``dst``; the burst is the probe's (:data:`BURST_KEYS`), 0 where none was measured."""
    a, b = address_of(src, n_aggregators), address_of(dst, n_aggregators)
    kinds = {a[0], b[0]}
    extra = getattr(topology, "extra", None) or {}
    if kinds == {CLIENT, AGGREGATOR}:
        i = a[1] if a[0] == CLIENT else b[1]
        j = b[1] if a[0] == CLIENT else a[1]
        burst = _burst(extra, BURST_KEYS[0], (i, j), topology.ca_bandwidth.shape)
        return float(topology.ca_latency[i, j]), float(topology.ca_bandwidth[i, j]), burst
    if kinds == {AGGREGATOR, SERVER}:
        j = a[1] if a[0] == AGGREGATOR else b[1]
        burst = _burst(extra, BURST_KEYS[1], (j,), topology.as_bandwidth.shape)
        return float(topology.as_latency[j]), float(topology.as_bandwidth[j]), burst
    raise ValueError(f"no link between ranks {src} and {dst}")


def _burst(extra: dict, key: str, at: tuple[int, ...], shape: tuple[int, ...]) -> float:
    """``extra[key]`` (an array of ``shape``) at ``at``; 0 when absent or not positive."""
    if key not in extra:
        return 0.0
    v = float(np.asarray(extra[key], dtype=np.float64).reshape(shape)[at])
    return v if np.isfinite(v) and v > 0 else 0.0


def replay(
    trace: np.ndarray, topology: Any, *, per_message_s: float = 0.0, start: float = 0.0
) -> np.ndarray:
    """The predicted times of ``trace``'s events on ``topology``: a copy of it with the
    ``T_START``/``T_END`` columns replaced (every role starts at ``start``).

    Each directed pair of roles is one stream (a TCP connection): its messages flow in
    order at the link's bandwidth. A sender runs ahead of its receiver by at most the
    stream's buffering, ``topology.extra["stream_buffer_bytes"]`` (socket buffers; the
    probe measures it; absent: unbounded): of a larger message only that much flows
    before the receiver asks for it, the rest after. ``per_message_s``: fixed
    processing time of the sender per message posted (protocol overhead), 0 by default.

    **Measured links** (``topology.extra`` holds :data:`BURST_KEYS`, as the probe writes
    them) replay gloo's protocol instead: a message moves only once its receiver has
    asked for it (gloo's sends wait for the receiver's ready-notice; nothing runs
    ahead), and each of its two parts (header, payload) is asked for separately, so a
    message pays :data:`EARLY_TRIPS` latencies beyond its arrival when its receiver was
    already waiting and :data:`LATE_TRIPS` when it asked later (the handshake latency:
    the link's, at most the median of the topology's, so one slow probe of a round
    trip does not slow every message of its link). Each link direction's shaper lets a
    rested link send a burst at once (a token bucket of the link's measured
    ``burst_bytes``, refilled at the link's rate while the link is idle): a transfer of
    ``n`` bytes takes ``max(0, n - tokens) / bandwidth``. A ``stream_buffer_bytes`` set
    as well (a calibration's, :func:`with_buffer`) is then every link's bucket.

    The transport's own CPU, where the probe measured it (``topology.extra``'s
    ``{server,aggregator,client}_byte_cpu_s`` and ``..._busy_wake_s``; see
    :func:`_transport_costs`); a message's fixed cost is in its latency (half the
    probe's fastest round trip, which both ends' processing of a message is part of):

    - every byte received costs ``byte_cpu_s`` of the role's quota *beside* its program
      (gloo's own thread reads it while the role waits or computes), every byte sent
      ``send_byte_cpu_s`` (posting it: one copy into the socket; on the testbed's 18
      probes of 5 December a median 1.9 ns a byte, 0.8-6.2, against 16 ns, 10-32, for a
      receive; 0 where not measured): it drains the
      node's CPU bucket, a send when posted, a receive as its bytes arrive (spread over
      the transfer, less the share's refill meanwhile: read slower than the share, it
      costs a rested node nothing; charged at once on arrival instead, it slowed the
      aggregators' next steps fourfold in the replay, not in the runs);
    - a role's work after a rest takes ``cold_extra`` longer (its part's weights and
      code are out of the caches: the probe times its steps after a rest and back to
      back), the whole extra after :data:`COLD_AFTER_S` without computing, a part in
      proportion after a shorter rest;
    - what of a message flows after the receiver asked for it starts ``busy_wake_s``
      later when the sender is computing at that moment: under a spent quota its
      transport thread runs only when the quota lets it (up to a CFS period later).
    """
    return _Replay(trace, topology, per_message_s, start).run()


class _Replay:
    """The state of one :func:`replay`: each role's clock and place in its events, each
    stream's posted messages and when its link is next free, each quota'd node's CPU
    bucket and its roles' work intervals."""

    def __init__(self, trace: np.ndarray, topology: Any, per_message_s: float, start: float):
        self.topology = topology
        self.n_aggs = topology.n_aggregators
        extra = getattr(topology, "extra", None) or {}
        self.buffer = float(extra.get(BUFFER_KEY, np.inf))
        self.rendezvous = all(k in extra for k in BURST_KEYS)
        self.handshake = _handshake_latency(topology) if self.rendezvous else 0.0
        self.cpu = _cpu_quotas(extra, self.n_aggs)
        self.costs = _transport_costs(extra, self.n_aggs)
        self.per_message_s = per_message_s
        self.tokens: dict[int, tuple[float, float]] = {}  # rank -> (tokens, at time)
        self.out = out = np.array(trace, dtype=np.float64, copy=True)
        ranks = sorted({int(r) for r in out[:, RANK]}) if len(out) else []
        self.ranks = ranks
        self.rows = {r: np.flatnonzero(out[:, RANK] == r) for r in ranks}
        self.clock = dict.fromkeys(ranks, float(start))
        self.busy: dict[int, list[tuple[float, float]]] = {r: [] for r in ranks}
        self.free: dict[tuple[int, int], float] = {}
        self.inbox: dict[tuple[int, int], deque[tuple[float, float]]] = {}
        self.links: dict[tuple[int, int], tuple[float, float, float]] = {}

    def run(self) -> np.ndarray:
        out, rows = self.out, self.rows
        pos = dict.fromkeys(self.ranks, 0)
        pending = set(self.ranks)
        while pending:
            progressed = False
            for r in sorted(pending):
                idx, k = rows[r], pos[r]
                while k < len(idx):
                    e = idx[k]
                    t = self.clock[r]
                    t_end = self.event(r, e, t)
                    if t_end is None:
                        break  # blocked until the peer has posted it
                    out[e, T_START], out[e, T_END] = t, t_end
                    self.clock[r] = t_end
                    k += 1
                    progressed = True
                pos[r] = k
                if k == len(idx):
                    pending.discard(r)
            if pending and not progressed:
                # A receive whose message was never sent (a trace cut short by a fault):
                # let the first blocked role go on without it.
                r = min(pending)
                out[rows[r][pos[r]], NBYTES] = -1.0
        return out

    def event(self, r: int, e: int, t: float) -> float | None:
        """When role ``r``'s event ``e``, starting at ``t``, ends (None: not yet posted)."""
        out = self.out
        kind = int(out[e, KIND])
        if kind == WORK:
            seconds = out[e, SECONDS]
            cold = self.costs.get(r, _NO_COSTS)[3]
            if seconds > 0 and cold > 0:
                rest = t - self.busy[r][-1][1] if self.busy[r] else np.inf
                seconds *= 1.0 + cold * min(1.0, rest / COLD_AFTER_S)
            t_end = self.run_cpu(r, seconds, t)
            if t_end > t:
                self.busy[r].append((t, t_end))
            return t_end
        if kind == SEND:
            if out[e, NBYTES] >= 0:  # else not posted (a lost peer)
                key = (r, int(out[e, PEER]))
                self.inbox.setdefault(key, deque()).append((t, out[e, NBYTES]))
                self.beside(r, self.costs.get(r, _NO_COSTS)[2] * out[e, NBYTES], t)
            return t + self.per_message_s
        if out[e, NBYTES] < 0:  # a receive that got nothing (a lost peer)
            return t
        return self.receive(r, (int(out[e, PEER]), r), t)

    def receive(self, r: int, key: tuple[int, int], t: float) -> float | None:
        """When role ``r``'s receive on stream ``key``, asked for at ``t``, ends."""
        box = self.inbox.get(key)
        if not box:
            return None
        posted, nbytes = box.popleft()
        if key not in self.links:
            self.links[key] = _link(self.topology, self.n_aggs, *key)
        latency, bandwidth, _burst_bytes = self.links[key]
        if self.rendezvous:
            return self.receive_rendezvous(r, key, t, posted, nbytes)
        begin = max(posted, self.free.get(key, -np.inf))
        if nbytes <= self.buffer:
            done = begin + nbytes / bandwidth
        else:
            asked = max(begin + self.buffer / bandwidth, t)
            wake = self.costs.get(key[0], _NO_COSTS)[1]
            if wake > 0 and _inside(asked, self.busy[key[0]]):
                asked += wake
            done = asked + (nbytes - self.buffer) / bandwidth
        self.free[key] = done
        self.beside_over(r, self.costs.get(r, _NO_COSTS)[0] * nbytes, begin, done)
        return max(t, done + latency)

    def receive_rendezvous(
        self, r: int, key: tuple[int, int], t: float, posted: float, nbytes: float
    ) -> float:
        """:meth:`receive` on measured links: gloo's rendezvous and the link's bucket."""
        latency, bandwidth, burst = self.links[key]
        before = self.free.get(key, -np.inf)
        begin = max(posted, before)
        trips = LATE_TRIPS if t > begin else EARLY_TRIPS
        start = max(begin, t) + trips * min(latency, self.handshake)
        wake = self.costs.get(key[0], _NO_COSTS)[1]
        if wake > 0 and _inside(start, self.busy[key[0]]):
            start += wake
        bucket = self.buffer if np.isfinite(self.buffer) else burst
        tokens = min(bucket, max(0.0, start - before) * bandwidth)
        done = start + max(0.0, nbytes - tokens) / bandwidth
        self.free[key] = done
        self.beside_over(r, self.costs.get(r, _NO_COSTS)[0] * nbytes, start, done)
        return max(t, done + latency)

    def run_cpu(self, r: int, seconds: float, t: float) -> float:
        """When ``seconds`` of CPU (full speed) started by role ``r`` at ``t`` end.

        On a node whose CPU is a quota it runs at full speed for up to its burst when
        rested, then at its share. The burst is a bucket (``burst * (1 - share)`` CPU
        seconds) drained by running and refilled at the share's rate (the continuous form
        of CFS bandwidth control, with the burst the probe saw)."""
        if seconds <= 0:
            return t
        if r not in self.cpu:
            return t + seconds
        share = self.cpu[r][0]
        level, _ = self._bucket(r, t)
        # (A level below 0 is a debt of CPU spent beside the program: paid at the share.)
        fast = level / (1.0 - share)  # seconds at full speed before the bucket is empty
        if seconds <= fast:
            self.tokens[r] = (level - seconds * (1.0 - share), t + seconds)
            return t + seconds
        end = t + fast + (seconds - fast) / share
        self.tokens[r] = (0.0, end)
        return end

    def beside(self, r: int, seconds: float, t: float) -> None:
        """``seconds`` of CPU spent at ``t`` by role ``r``'s other threads: out of its
        bucket (which may go into debt, see :meth:`run_cpu`), not on its clock."""
        if seconds > 0 and r in self.cpu:
            level, now = self._bucket(r, t)
            self.tokens[r] = (level - seconds, now)

    def beside_over(self, r: int, seconds: float, t0: float, t1: float) -> None:
        """``seconds`` of CPU spent by role ``r``'s other threads evenly over ``[t0, t1]``
        (a message's bytes read as they arrive): the bucket changes at the share less
        that rate meanwhile, so reading slower than the share costs a rested node
        nothing (the part before the bucket's last use, at once)."""
        if seconds <= 0 or r not in self.cpu:
            return
        if t1 <= t0:
            self.beside(r, seconds, t1)
            return
        share, burst = self.cpu[r]
        level, now = self._bucket(r, t0)
        if now >= t1:
            self.tokens[r] = (level - seconds, now)
            return
        rate = seconds / (t1 - t0)
        level += (share - rate) * (t1 - now) - rate * (now - t0)
        self.tokens[r] = (min(burst * (1.0 - share), level) if share >= rate else level, t1)

    def _bucket(self, r: int, t: float) -> tuple[float, float]:
        """Role ``r``'s CPU bucket at ``t``: its level, refilled at the share's rate since
        it was last used (at most full), and that time (``t``, or the later time it was
        last used up to)."""
        share, burst = self.cpu[r]
        capacity = burst * (1.0 - share)
        level, since = self.tokens.get(r, (capacity, t))
        now = max(t, since)
        return min(capacity, level + share * (now - since)), now


EARLY_TRIPS = 2
"""Latencies a message pays on measured links beyond its own arrival when its receiver
was already waiting: its payload is asked for when the header has arrived, and that
ready-notice travels to the sender before the payload moves."""
LATE_TRIPS = 3
"""The same when its receiver asks after it was posted: the header's ready-notice too."""
BURST_KEYS = ("ca_burst_bytes", "as_burst_bytes")
"""``topology.extra``'s keys of the measured links' bursts (bytes): (clients x
aggregators) and (aggregators,), as :func:`flowsplit.federated.probe.probed_topology`
writes them; their presence selects the rendezvous replay (see :func:`replay`)."""


def _handshake_latency(topology: Any) -> float:
    """The latency of a rendezvous notice: the median of the latencies of the
    topology's links (each link's own where lower; see :func:`replay`)."""
    linked = np.asarray(topology.ca_bandwidth) > 0
    lat = np.concatenate(
        [np.asarray(topology.as_latency).ravel(), np.asarray(topology.ca_latency)[linked]]
    )
    lat = lat[np.isfinite(lat) & (lat > 0)]
    return float(np.median(lat)) if lat.size else 0.0


def _inside(t: float, intervals: list[tuple[float, float]]) -> bool:
    """Whether ``t`` falls in one of ``intervals`` (sorted; the latest are searched first)."""
    for b0, b1 in reversed(intervals):
        if b0 <= t < b1:
            return True
        if b1 <= t:
            return False
    return False


_NO_COSTS = (0.0, 0.0, 0.0, 0.0)
COLD_AFTER_S = 0.01
"""A role that has not computed for this long pays its probe's whole ``cold_extra`` on
its next work (its part's weights and code are out of the caches); after a shorter
rest a part in proportion (a step of the demo's CNN server part after a sleep of 1, 5,
10 and 30 ms: 3 %, 25 %, 94 % and all of the extra, on this VM)."""


def _transport_costs(
    extra: dict, n_aggregators: int
) -> dict[int, tuple[float, float, float, float]]:
    """rank -> (CPU s per byte received, s a computing sender adds to a message asked
    for, CPU s per byte sent, a step's extra after a rest) from ``extra``'s
    ``{server,aggregator,client}_byte_cpu_s``, ``..._busy_wake_s``,
    ``..._send_byte_cpu_s`` and ``..._cold_extra`` (as the probe measures them; absent:
    0). The probe's ``recv_cpu_s`` (CPU per small round trip) is not charged: a message's
    fixed cost is in its latency."""
    out = {}
    rank = 0
    names = ("byte_cpu_s", "busy_wake_s", "send_byte_cpu_s", "cold_extra")
    for who, n in (("server", 1), ("aggregator", n_aggregators), ("client", None)):
        cols = []
        for name in names:
            v = extra.get(f"{who}_{name}", [])
            cols.append([v] if np.isscalar(v) else list(v))
        n = max(len(c) for c in cols) if n is None else n
        for k in range(n):
            row = tuple(max(0.0, float(c[k])) if k < len(c) else 0.0 for c in cols)
            if any(v > 0 for v in row):
                out[rank + k] = row
        rank += n
    return out


def _cpu_quotas(extra: dict, n_aggregators: int) -> dict[int, tuple[float, float]]:
    """rank -> (CPU share, burst s) of the roles that run under a CPU quota (``extra``'s
    ``{server,aggregator,client}_cpu_share`` and ``..._cpu_burst_s``, as the probe
    measures them; none: every node has a whole core to itself)."""
    out = {}
    rank = 0
    for who, n in (("server", 1), ("aggregator", n_aggregators), ("client", None)):
        shares = extra.get(f"{who}_cpu_share", [])
        bursts = extra.get(f"{who}_cpu_burst_s", [])
        shares = [shares] if np.isscalar(shares) else list(shares)
        bursts = [bursts] if np.isscalar(bursts) else list(bursts)
        n = len(shares) if n is None else n
        for k in range(n):
            sh = float(shares[k]) if k < len(shares) else 1.0
            bu = float(bursts[k]) if k < len(bursts) else 0.0
            if 0 < sh < 1.0 and bu > 0:
                out[rank + k] = (sh, bu)
        rank += n
    return out


def rescale_compute(trace: np.ndarray, charged_on: Any, topology: Any) -> np.ndarray:
    """``trace`` with its work seconds (charged at ``charged_on``'s speeds) recharged
    at ``topology``'s: each role's seconds times its old speed over its new one."""
    old = _speeds_by_rank(charged_on)
    new = _speeds_by_rank(topology)
    out = np.array(trace, dtype=np.float64, copy=True)
    work = out[:, KIND] == WORK
    ranks = out[work, RANK].astype(int)
    out[work, SECONDS] *= old[ranks] / new[ranks]
    return out


BUFFER_KEY = "stream_buffer_bytes"
"""``topology.extra``'s key of the streams' buffering (bytes), which :func:`replay` reads."""
MAX_CALIBRATED_BUFFER = float(16 << 20)
"""The largest stream buffer a calibration returns (bytes): a round predicted too slow
even with this much buffering is not a buffering matter."""


def with_buffer(topology: Any, buffer: float) -> Any:
    """``topology`` (a copy) whose streams buffer ``buffer`` bytes."""
    extra = {**(getattr(topology, "extra", None) or {}), BUFFER_KEY: float(buffer)}
    return replace(topology, extra=extra)


def calibrate_buffer(
    trace: np.ndarray, topology: Any, measured_round_s: float, *, iterations: int = 24
) -> float:
    """The stream buffer (bytes) under which :func:`replay` of ``trace`` (work already
    charged at ``topology``'s speeds) on ``topology`` takes ``measured_round_s``.

    The probe measures the buffer as the small difference of two large figures (a
    payload less bandwidth x time), so its estimate varies from 0 to 150 kB between
    probes of one link; it is also the one term of the replay that TCP's autotuning
    changes while a run goes on. A run measured round by round can instead calibrate
    it on one measured round and predict the next ones with it (the round it was
    calibrated on is then no test of the model). More buffering never slows a round,
    so the buffer is found by bisection on a log scale: 0 when the round is predicted
    no slower than measured without any buffering, :data:`MAX_CALIBRATED_BUFFER` when
    it is predicted slower than measured even with that much."""
    n_aggs = topology.n_aggregators

    def round_s(buffer: float) -> float:
        return timeline(replay(trace, with_buffer(topology, buffer)), n_aggs)["round_s"]

    if round_s(0.0) <= measured_round_s:
        return 0.0
    if round_s(MAX_CALIBRATED_BUFFER) >= measured_round_s:
        return MAX_CALIBRATED_BUFFER
    lo, hi = 0.0, float(np.log2(MAX_CALIBRATED_BUFFER))  # log2 bytes; 0: 1 byte
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if round_s(2.0**mid) > measured_round_s:
            lo = mid
        else:
            hi = mid
    return float(2.0**hi)


def _speeds_by_rank(topology: Any) -> np.ndarray:
    return np.concatenate(
        [[float(topology.server_speed)], topology.aggregator_speed, topology.client_speed]
    ).astype(np.float64)


def timeline(trace: np.ndarray, n_aggregators: int, *, start: float | None = None) -> dict:
    """The phases and accounts of a round from its events' times (see the module doc).

    ``start``: when the round started (default: the server's first event's start).
    All values are seconds from the trace's clock; keys are the same for predicted and
    measured times.
    """
    out: dict[str, Any] = {}
    if not len(trace):
        return out
    rank = trace[:, RANK].astype(int)
    kind = trace[:, KIND].astype(int)
    phase = trace[:, PHASE].astype(int)
    t0, t1 = trace[:, T_START], trace[:, T_END]
    server = rank == 0
    if start is None:
        start = float(t0[server].min()) if server.any() else float(t0.min())
    end = float(t1.max())
    is_client = rank > n_aggregators
    is_agg = (rank >= 1) & ~is_client
    # Download ends when the last client holds its model (its first receive).
    got_model = (kind == RECV) & (phase == _PHASE[DOWNLOAD]) & is_client
    download_end = float(t1[got_model].max()) if got_model.any() else start
    train_rows = phase == _PHASE[TRAIN]
    train_end = float(t1[train_rows].max()) if train_rows.any() else download_end
    train_end = max(train_end, download_end)
    out["round_s"] = end - start
    out["download_s"] = download_end - start
    out["train_s"] = train_end - download_end
    out["upload_s"] = end - train_end

    def per_role(mask: np.ndarray, values: np.ndarray) -> dict[int, float]:
        sums: dict[int, float] = {}
        for r, v in zip(rank[mask], values[mask], strict=True):
            sums[int(r)] = sums.get(int(r), 0.0) + float(v)
        return sums

    dur = t1 - t0
    work = (kind == WORK) & train_rows
    wait = (kind == RECV) & train_rows
    for name, who in (("client", is_client), ("aggregator", is_agg), ("server", server)):
        comp = per_role(work & who, dur)
        waits = per_role(wait & who, dur)
        out[f"{name}_compute_s"] = max(comp.values(), default=0.0)
        out[f"{name}_wait_s"] = max(waits.values(), default=0.0)
    out["exposed_transfer_s"] = _exposed_transfers(trace, n_aggregators)
    return out


def _exposed_transfers(trace: np.ndarray, n_aggregators: int) -> dict[str, float]:
    """Per hop and direction, the sum over messages of how long the receiver waited
    after the message was posted (a transfer hidden behind other work counts 0)."""
    rank = trace[:, RANK].astype(int)
    kind = trace[:, KIND].astype(int)
    peer = trace[:, PEER].astype(int)
    nbytes = trace[:, NBYTES]
    sends: dict[tuple[int, int], deque[float]] = {}
    for e in np.flatnonzero((kind == SEND) & (nbytes >= 0)):
        sends.setdefault((rank[e], peer[e]), deque()).append(trace[e, T_START])
    out = {"client-aggregator/up": 0.0, "client-aggregator/down": 0.0}
    out |= {"aggregator-server/up": 0.0, "aggregator-server/down": 0.0}
    for e in np.flatnonzero((kind == RECV) & (nbytes >= 0)):
        box = sends.get((peer[e], rank[e]))
        if not box:
            continue
        posted = box.popleft()
        waited = trace[e, T_END] - max(posted, trace[e, T_START])
        src, dst = peer[e], rank[e]
        hop = "aggregator-server" if 0 in (src, dst) else "client-aggregator"
        up = src > dst  # clients have the highest ranks, the server rank 0
        out[f"{hop}/{'up' if up else 'down'}"] += max(0.0, float(waited))
    return out
