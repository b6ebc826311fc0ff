"""A scaling model for data-parallel training: compute shrinks with workers, all-reduce does not.

Time of one epoch (for XGBoost: of the whole boosting run) on ``N`` workers::

    T(N) = oversub(N) * (c * n_samples / N + h * steps(N))
           + sum_m count_m(N) * T_ring(bytes_m, N) + steps(N) * s      [s: host only]

* ``c``: compute seconds per training sample on one worker (forward and backward;
  for XGBoost, histogram building); shrinks as 1/N. Fitted from measured runs.
* ``h``: seconds per step that do not shrink with N (optimiser update, Python and
  framework dispatch; for XGBoost, split search and tree update per round). With a
  fixed global batch the step count is the same for every N, so ``h`` is the
  Amdahl serial part. Fitted from measured runs.
* ``s``: synchronisation overhead per step beyond the wire time, from the runs'
  measured all-reduce time (stragglers, hooks, a shared machine's other load);
  charged on the measuring machine, not in cluster predictions.
* ``oversub(N) = max(1, N * threads / cores)``: on the measuring machine, workers
  beyond the cores time-share them; on a cluster every worker has its own cores.
* ``T_ring(M, N) = 2 (N-1) alpha + 2 (N-1)/N * M / beta``: ring all-reduce of ``M``
  bytes (reduce-scatter then all-gather, each ``N-1`` steps of ``M/N`` bytes) on a
  network of latency ``alpha`` and bandwidth ``beta``. The reduction arithmetic is
  folded into ``beta``, which is therefore an *effective* bandwidth when fitted.
* messages per epoch: DDP all-reduces every gradient bucket once per step; XGBoost
  all-reduces the gradient/hessian histograms of the nodes of each tree level.

Communication is assumed not to overlap compute (DDP can overlap part of it with the
backward pass), so predictions are on the pessimistic side for large models. Strong
scaling: the data set is fixed and split N ways.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy.optimize import nnls

DDP_BUCKET_BYTES = 25 * 1024 * 1024  # torch DDP default bucket_cap_mb
FITTED_PARAMETERS = 3
"""``c``, ``h`` and ``s``, fitted from the measured runs: a study that measured fewer
distinct worker counts than this cannot check the model, only reproduce its points."""


@dataclass(frozen=True)
class Network:
    """Latency and bandwidth of the links between workers."""

    name: str
    latency_s: float
    """alpha: one-way time of a small message, seconds."""
    bandwidth_Bps: float
    """beta: bytes per second one worker sends to its ring neighbour."""
    burst_bytes: float = 0.0
    """Payload bytes a token-bucket shaper (``tc ... tbf``) lets through at line rate
    before its rate applies: the bucket refills while the link idles, so each step's
    all-reduce gets this much for free when compute between steps lasts longer than
    ``burst / rate`` (see :func:`tbf_network`). 0 for an unshaped link."""


# Typical figures, not vendor peaks: TCP over Ethernet pays tens of microseconds per
# message; InfiniBand RDMA a couple; NVLink (NCCL, intra-node) ~ 2-3 us and ~200 GB/s.
NETWORK_PRESETS: dict[str, Network] = {
    "1gbe": Network("1 GbE", 50e-6, 1e9 / 8 * 0.94),
    "10gbe": Network("10 GbE", 20e-6, 10e9 / 8 * 0.94),
    "ib100": Network("100 Gb/s InfiniBand", 2e-6, 100e9 / 8 * 0.9),
    "nvlink": Network("NVLink-class", 3e-6, 200e9),
}


TCP_IP_ETH_HEADER_BYTES = 14 + 20 + 32
"""Ethernet + IPv4 + TCP (with the timestamp option Linux sends) header bytes per segment."""
ACK_SEGMENTS = 2
"""Linux's delayed ACK: one pure ACK per two full-sized segments received."""


def tbf_network(
    mbit: float,
    burst_bytes: float,
    *,
    mtu: int = 1500,
    gso_bytes: int = 65536,
    latency_s: float = 50e-6,
) -> Network:
    """The ``Network`` of a TCP link shaped by ``tc qdisc ... tbf rate MBIT burst BURST``.

    tbf meters whole frames (a GSO packet as its segments' frames), so the payload
    rate is the shaped rate times the payload share of the bytes on the wire. Each
    segment of ``mtu - 52`` payload bytes carries 66 header bytes; the reverse
    direction (which, in a ring of two, carries the other worker's data at the same
    time) also carries header-only ACKs. How many depends on the bucket: tbf splits a
    GSO packet larger than its burst into segments, and the receiver acks every
    second one (``ACK_SEGMENTS``); a GSO packet (``gso_bytes``, veth's default 64 KiB)
    that fits the bucket reaches the receiver whole and is acked once. The burst is
    converted to payload bytes the same way. Every figure follows from the shaping
    command and TCP, none from timings.
    """
    if not mbit > 0:
        raise ValueError(f"tbf rate must be > 0 Mbit/s, got {mbit}")
    mss = mtu - 20 - 32  # IPv4 and TCP headers inside the MTU
    frame = mss + TCP_IP_ETH_HEADER_BYTES
    acked_payload = ACK_SEGMENTS * mss if burst_bytes < gso_bytes else gso_bytes // frame * mss
    wire_per_payload = frame / mss + TCP_IP_ETH_HEADER_BYTES / acked_payload
    return Network(
        f"tbf {mbit:g} Mbit/s",
        latency_s,
        mbit * 1e6 / 8 / wire_per_payload,
        burst_bytes=float(burst_bytes) / wire_per_payload,
    )


def ring_allreduce_time(n_bytes: float, n_workers: int, network: Network) -> float:
    """Seconds for one ring all-reduce of ``n_bytes`` over ``n_workers`` (0 for one worker)."""
    p = int(n_workers)
    if p <= 1:
        return 0.0
    steps = 2 * (p - 1)
    return steps * network.latency_s + steps / p * float(n_bytes) / network.bandwidth_Bps


def fit_allreduce(
    sizes_bytes, times_s, n_workers: int = 2, name: str = "measured"
) -> tuple[Network, float]:
    """Fit latency and bandwidth to all-reduce timings; return (network, max relative error).

    Least squares on *relative* residuals (rows scaled by 1/t), so a 10-byte message
    counts as much as a 30 MB one; both parameters are kept non-negative.
    """
    m = np.asarray(sizes_bytes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    if m.shape != t.shape or m.size < 2:
        raise ValueError("need at least two (size, time) pairs of equal length")
    if n_workers < 2:
        raise ValueError("all-reduce timings need at least two workers")
    steps = 2.0 * (n_workers - 1)
    design = np.column_stack([np.full_like(m, steps), steps / n_workers * m]) / t[:, None]
    (alpha, inv_beta), _ = nnls(design, np.ones_like(t))
    beta = 1.0 / inv_beta if inv_beta > 0 else math.inf
    net = Network(name, float(alpha), float(beta))
    pred = np.array([ring_allreduce_time(s, n_workers, net) for s in m])
    return net, float(np.max(np.abs(pred - t) / t))


@dataclass(frozen=True)
class Workload:
    """What one epoch of one model does, as far as the scaling model cares."""

    model: str
    n_samples: int
    """Training samples per epoch (the whole training split)."""
    kind: str = "ddp"
    """``ddp`` (gradient all-reduce per step) or ``xgboost`` (histogram all-reduce)."""
    param_bytes: int = 0
    """DDP: bytes of gradients all-reduced per step (parameters x 4 for float32)."""
    batch_size: int = 64
    """DDP: samples per step, per worker (or global, see ``global_batch``)."""
    global_batch: bool = False
    """DDP: True when ``batch_size`` is the global batch split across workers."""
    bucket_bytes: int = DDP_BUCKET_BYTES
    n_features: int = 0
    """XGBoost: feature columns."""
    n_bins: int = 256
    """XGBoost: histogram bins per feature (``max_bin``)."""
    max_depth: int = 6
    n_rounds: int = 100
    trees_per_round: int = 1
    """XGBoost: one tree per class per round for multi-class objectives."""
    bytes_per_value: int = 8
    """XGBoost: gradient and hessian sums are doubles on CPU."""
    subtraction_trick: bool = True
    """XGBoost: only the smaller child's histogram is built and reduced; the sibling
    is the parent minus it, so level d>0 reduces 2**(d-1) node histograms."""
    hist_bytes_per_round: float = 0.0
    """XGBoost: histogram bytes all-reduced per round as counted from the trees actually
    grown (0: the full-tree upper bound from features x bins x 2 x bytes x nodes)."""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Prediction:
    """Predicted epoch time on one network and worker count (:meth:`ScalingModel.estimate`;
    the speedup and efficiency against one worker: :meth:`ScalingModel.scaling_curve`)."""

    n_workers: int
    epoch_time_s: float
    compute_s: float
    comm_s: float
    comm_share: float
    comm_bytes: float
    speedup: float = math.nan
    efficiency: float = math.nan
    network: str = ""


ESTIMATED = ("n_workers", "epoch_time_s", "compute_s", "comm_s", "comm_share", "comm_bytes")
"""The fields of a :class:`Prediction` that :meth:`ScalingModel.predict` returns."""


def steps_per_epoch(workload: Workload, n_workers: int) -> int:
    """Optimiser steps each worker takes in one epoch (XGBoost: rounds per "epoch")."""
    if workload.kind == "xgboost":
        return max(1, workload.n_rounds)
    per_step = workload.batch_size if workload.global_batch else workload.batch_size * n_workers
    return max(1, math.ceil(workload.n_samples / per_step))


def messages_per_epoch(workload: Workload, n_workers: int) -> list[tuple[float, int]]:
    """(bytes, count) of the all-reduces one epoch performs on ``n_workers``."""
    if n_workers <= 1:
        return []
    if workload.kind == "ddp":
        full, rest = divmod(int(workload.param_bytes), int(workload.bucket_bytes))
        sizes = [float(workload.bucket_bytes)] * full + ([float(rest)] if rest else [])
        steps = steps_per_epoch(workload, n_workers)
        return [(s, steps) for s in sizes]
    if workload.kind == "xgboost":
        per_node = workload.n_features * workload.n_bins * 2 * workload.bytes_per_value
        trees = workload.n_rounds * workload.trees_per_round
        if workload.hist_bytes_per_round > 0:
            # Real trees stop early: keep one all-reduce per level and tree (latency), the
            # counted bytes spread over them (bandwidth).
            size = workload.hist_bytes_per_round / (workload.max_depth * workload.trees_per_round)
            return [(float(size), trees)] * workload.max_depth
        out = []
        for depth in range(workload.max_depth):
            nodes = 2 ** max(depth - 1, 0) if workload.subtraction_trick else 2**depth
            out.append((float(per_node * nodes), trees))
        return out
    raise ValueError(f"unknown workload kind {workload.kind!r} (expected ddp or xgboost)")


def comm_bytes_per_epoch(workload: Workload, n_workers: int) -> float:
    """Bytes each worker sends in one epoch under ring all-reduce."""
    p = n_workers
    return sum(c * 2 * (p - 1) / p * b for b, c in messages_per_epoch(workload, p))


def comm_time(workload: Workload, n_workers: int, network: Network) -> float:
    """Seconds one epoch spends in all-reduce (no overlap with compute).

    With a shaped link (``network.burst_bytes``), each DDP step's first
    ``burst_bytes`` per worker pass at line rate, so their wire time is taken off
    once per step (the bucket refills during the next step's compute).
    """
    messages = messages_per_epoch(workload, n_workers)
    total = sum(count * ring_allreduce_time(b, n_workers, network) for b, count in messages)
    if network.burst_bytes > 0 and workload.kind == "ddp" and messages:
        p = n_workers
        sent_per_step = sum(2 * (p - 1) / p * b for b, _ in messages)
        steps = steps_per_epoch(workload, p)
        total -= steps * min(network.burst_bytes, sent_per_step) / network.bandwidth_Bps
    return total


@dataclass(frozen=True)
class ScalingModel:
    """A fitted model of one workload's epoch time against worker count."""

    workload: Workload
    compute_per_sample_s: float
    """c: seconds of compute per training sample on one worker; shrinks as 1/N."""
    per_step_s: float
    """h: seconds per optimiser step (XGBoost: per round) that every worker pays whatever
    its share of the batch: optimiser update, Python dispatch, split search. Does not
    shrink with N; with a fixed global batch it is the Amdahl serial part."""
    network: Network
    """The network the fit was made on (the measuring machine's backend)."""
    sync_per_step_s: float = 0.0
    """s: measured all-reduce time per step beyond the wire time of ``network`` (waiting
    for the slowest worker, DDP hooks, on a shared machine other processes); charged
    on the measuring machine only."""
    fixed_s: float = 0.0
    """Per-epoch cost independent of N and of steps (0 unless fitted explicitly)."""
    cores: int = 0
    """Cores of the measuring machine (0: no oversubscription modelled)."""
    threads_per_worker: int = 1

    def oversubscription(self, n_workers: int) -> float:
        if self.cores <= 0:
            return 1.0
        return max(1.0, n_workers * self.threads_per_worker / self.cores)

    def estimate(self, n_workers: int, network: Network | None = None) -> Prediction:
        """Epoch time and its parts on the measuring machine, or, given ``network``, on a
        cluster of that network where every worker has its own cores (no speedup: see
        :meth:`scaling_curve`)."""
        on_host = network is None
        net = self.network if on_host else network
        over = self.oversubscription(n_workers) if on_host else 1.0
        steps = steps_per_epoch(self.workload, n_workers)
        compute = over * (
            self.compute_per_sample_s * self.workload.n_samples / n_workers
            + self.per_step_s * steps
        )
        comm = comm_time(self.workload, n_workers, net)
        if on_host and n_workers > 1:
            comm += steps * self.sync_per_step_s
        total = self.fixed_s + compute + comm
        return Prediction(
            n_workers=int(n_workers),
            epoch_time_s=total,
            compute_s=compute,
            comm_s=comm,
            comm_share=comm / total if total > 0 else math.nan,
            comm_bytes=comm_bytes_per_epoch(self.workload, n_workers),
            network=net.name,
        )

    def predict(self, n_workers: int, network: Network | None = None) -> dict:
        """:meth:`estimate` as a dict: epoch time and its parts."""
        p = self.estimate(n_workers, network)
        return {name: getattr(p, name) for name in ESTIMATED}

    def scaling_curve(self, workers, network: Network | None = None) -> list[Prediction]:
        """Predicted epoch time, speedup and efficiency against one worker on ``network``
        (None: the measuring machine)."""
        base = self.estimate(1, network).epoch_time_s
        rows = []
        for n in workers:
            p = self.estimate(n, network)
            p.speedup = base / p.epoch_time_s
            p.efficiency = p.speedup / n
            rows.append(p)
        return rows

    def curve(self, workers, network: Network) -> list[dict]:
        """:meth:`scaling_curve` on ``network``, as dicts."""
        return [asdict(p) for p in self.scaling_curve(workers, network)]

    def as_dict(self) -> dict:
        d = asdict(self)
        d["workload"] = self.workload.as_dict()
        return d


def fit_sync_overhead(workload: Workload, n_workers, comm_times_s, network: Network) -> float:
    """Mean measured all-reduce seconds per step beyond the ring model's wire time.

    Only runs with more than one worker count; never negative (a measured time below
    the wire time means the micro-benchmark was pessimistic, not that sync is free).
    """
    excess = []
    for n, t in zip(n_workers, comm_times_s, strict=True):
        n = int(n)
        if n > 1 and t is not None and math.isfinite(t):
            steps = steps_per_epoch(workload, n)
            excess.append(max(0.0, (float(t) - comm_time(workload, n, network)) / steps))
    return float(np.mean(excess)) if excess else 0.0


def fit_scaling(
    workload: Workload,
    n_workers,
    epoch_times_s,
    network: Network,
    *,
    comm_times_s=None,
    cores: int = 0,
    threads_per_worker: int = 1,
    fit_per_step: bool | None = None,
    fit_fixed: bool = False,
) -> ScalingModel:
    """Fit compute per sample and per-step overhead to measured epoch times.

    Communication is not fitted to the epoch times: the wire time comes from
    ``network`` (the all-reduce micro-benchmark) and the workload's messages; the
    synchronisation overhead beyond it from the runs' own measured all-reduce time
    ``comm_times_s`` (per epoch, as the engines report it). Both are subtracted, then
    ``c`` and ``h`` are fitted by non-negative least squares on relative residuals.
    ``fit_per_step`` defaults to needing two distinct worker counts, so no parameter is
    fitted that the data cannot separate.
    """
    ns = np.asarray(n_workers, dtype=int)
    ts = np.asarray(epoch_times_s, dtype=float)
    if ns.shape != ts.shape or ns.size == 0:
        raise ValueError("need one epoch time per worker count, at least one")
    if fit_per_step is None:
        fit_per_step = len(set(ns.tolist())) >= 2
    sync = 0.0
    if comm_times_s is not None:
        sync = fit_sync_overhead(workload, ns, comm_times_s, network)
    proto = ScalingModel(workload, 0.0, 0.0, network, sync, 0.0, cores, threads_per_worker)
    over = np.array([proto.oversubscription(int(n)) for n in ns])
    steps = np.array([steps_per_epoch(workload, int(n)) for n in ns], dtype=float)
    comm = np.array([proto.estimate(int(n)).comm_s for n in ns])
    cols = [workload.n_samples / ns * over]
    if fit_per_step:
        cols.append(steps * over)
    if fit_fixed:
        cols.append(np.ones_like(ts))
    design = np.column_stack(cols) / ts[:, None]
    coef, _ = nnls(design, np.clip(ts - comm, 0.0, None) / ts)
    per_step = float(coef[1]) if fit_per_step else 0.0
    fixed = float(coef[-1]) if fit_fixed else 0.0
    return replace(proto, compute_per_sample_s=float(coef[0]), per_step_s=per_step, fixed_s=fixed)


def relative_errors(model: ScalingModel, n_workers, epoch_times_s) -> list[float]:
    """``(predicted - measured) / measured`` at each measured point, on the host network."""
    return [
        (model.estimate(int(n)).epoch_time_s - float(t)) / float(t)
        for n, t in zip(n_workers, epoch_times_s, strict=True)
    ]
