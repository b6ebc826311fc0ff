"""Measure before planning: ``flowsplit sfl probe`` and ``sfl run --mode dist --probe``.

The planner needs every node's compute speed and every link's bandwidth and latency;
a deployment has hosts, not a topology file. The probe runs in the dist runner's role
processes, where the run itself would run, and measures:

- **compute**: each role times training steps (forward, backward and optimiser step,
  as the role does per batch) of its own part on a batch of the run's size, back to
  back for ``PROBE_SUSTAIN_S`` after one warm-up step and a rest; its speed is the
  part's training FLOPs per batch (the profile's, as the cost model charges them)
  times the steps / the CPU time they took (the process's: what the work costs at full
  speed, whatever share of the CPU the role got meanwhile; the wall time converted
  with the quota the spin found, :func:`full_speed_seconds`, where the clock has no
  CPU time). A role with no compute (an ``sfl`` relay) keeps the topology's speed;
- **links**: over the same transport (gloo pairs, header and payload as every message),
  the upper end of each client-aggregator and aggregator-server pair measures the
  round-trip time of a one-value message (fastest of 8, after 2 warm-ups) and the
  bandwidth each way: a payload is grown until its timed transfer takes at least
  ``PROBE_TRANSFER_S``, then twice that payload is timed; the *effective* rate (the
  faster of the two, bytes over time less a round trip: a stall only slows a transfer,
  and a message pays TCP's start too) goes into the topology; the *steady-state* rate
  (extra bytes over extra time: what a transfer pays once cancels) is reported beside
  it (``down_steady_Bps``, ``up_steady_Bps``). The latency the topology gets is half
  the round trip. Each link's *burst* (what a rested link sends at once: a shaper's
  token bucket) is timed too (:func:`probe_burst`); the topology gets it per link, and
  the timeline replay then follows gloo's rendezvous on each link (see
  :func:`flowsplit.federated.system.schedule.replay`);
- **the transport's CPU**: every role counts the CPU time its process spends (all its
  threads: gloo's included) on the probe's small round trips (CPU s per message
  received: a round trip is one receive, waited for, and one send, posted; a posted
  send costs almost nothing on the role's own thread) and on its bulk transfers (CPU s
  per byte of the largest payload, received and sent apart: on the testbed a byte
  received cost 10-32 ns (median 16), one sent 0.8-6.2 ns (median 1.9; 18 probes),
  so a pooled figure charged every send a
  receive's cost); and the delay a computing sender adds to a message the
  receiver asks for (``busy_wake_s``: the lower end of each link posts a payload, then
  waits or spins; the upper end asks for it later and times the rest, busy less idle).
  The timeline replay charges the bytes' CPU and the busy sender's delay
  (:func:`flowsplit.federated.system.schedule.replay`); the CPU per round trip is
  reported (a message's fixed cost is already in the latency, half a round trip).

The server collects everything and writes ``probe.json`` (every measurement, both
directions) and a topology TOML (``sfl plan --topology probe.toml`` plans from it;
links not measured keep the given topology's values and are listed). ``sfl probe``
measures every client-aggregator pair; ``sfl run --probe`` only the assigned ones,
and then predicts each round's timeline on the probed topology.

The probe draws its random inputs from a generator of its own and restores the role's
random state, so a probed run trains exactly as an unprobed one.
"""

from __future__ import annotations

import copy
import logging
import statistics
import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from flowsplit.federated.system.protocol import (
    AGGREGATOR,
    CLIENT,
    CONTROL,
    SERVER_ADDRESS,
    Address,
    Recv,
    Send,
)
from flowsplit.federated.system.schedule import BUFFER_KEY, BURST_KEYS
from flowsplit.federated.system.topology import Topology

log = logging.getLogger("flowsplit.federated")

PROBE_STEPS = 5
PROBE_SUSTAIN_S = 0.5
"""The compute probe times training steps back to back for at least this long: under a
CPU quota a single step from rest is mostly the quota's burst, whose length varies
with where in the CFS period the step starts (0.5-5 ms measured at 0.1 core), so one
step's time converted to full speed varied twofold between identical nodes; over half
a second the burst is a small part and the quota's share, measured apart, the rest."""
COLD_REST_S = 0.03
"""The rest before each of the compute probe's single steps. A step after a rest is
slower than one of a back-to-back run (its weights and code are out of the caches):
the demo's CNN server part at cut (1, 1), 1.54 ms a step back to back, took 2.62 ms of
CPU after a 60-ms sleep (this VM, 5 December 2026); the extra grows with the rest (0 up
to 1 ms, 25 % at 5 ms, 94 % at 10 ms, all of it from 30 ms) and is all there after
any rest when other programs ran on the core meanwhile. In the testbed's runs the
server's steps after a wait took 1.4-1.6 times what its back-to-back speed predicted."""
PROBE_TRANSFER_S = 0.2
"""A bandwidth sample is kept once its transfer takes at least this long."""
BURST_IDLE_S = 0.05
"""How long a link rests before each burst sample (a shaper's bucket of up to this much
of the link's traffic refills meanwhile)."""
MAX_BURST_PROBE_BYTES = 4 << 20
"""The burst probe's largest payload (a fast link's burst is then read as at most this)."""
BURST_SIZES_S = (0.01, 0.02, 0.04, 0.08, 0.16)
"""The burst probe's payloads, in seconds of the link's traffic (at least 16 kB)."""
BURST_REPEATS = 5
"""Timings of each burst probe payload (the fastest is kept: under a CPU quota a transfer
may wait out a throttled period). On the raw timings of 72 testbed links, with the rate
fixed as :func:`fit_burst` fixes it, bursts read over 30 % off the shaper's bucket:
3 of 72 with 5 timings, 25 of 72 with 2."""
BURST_MEASURABLE_S = 1e-3
"""A burst payload's time (less the one-byte one's) that tells the bucket apart from
noise: shorter ones were sent wholly from the bucket and bound it only from below."""
MAX_PROBE_BYTES = 64 << 20
FIRST_PROBE_BYTES = 32 << 10
PROBE_JSON, PROBE_TOML = "probe.json", "probe.toml"

# Commands of the link probe (int64 [op, n, delay_us]) and result rows
# (kind, i, j, speed, rtt, down, up, burst B, message cpu s, byte cpu s, busy send B/s).
# Speed rows carry (share, burst) in the rtt and down columns, when the role's compute
# probe ended (``time.time()``; 0: not recorded) in the up one and the step's extra after
# a rest (a fraction, :data:`COLD_REST_S`) in the burst one; link rows the lower end's
# busy-sender delay, and four more columns: the steady-state rates down and up, and when
# the link's timing began and ended (``time.time()``; NaN: not recorded).
_DONE, _ECHO, _TAKE, _GIVE, _BUSY = 0, 1, 2, 3, 5  # (4: retired)
_SPEED_CLIENT, _SPEED_AGG, _SPEED_SERVER, _LINK_CA, _LINK_AS = range(5)
_COLS = 15


class _CpuLedger:
    """This process's CPU time on the probe's messages (``time.process_time``: every
    thread, gloo's included): small messages, and bulk transfers by (op, bytes)."""

    def __init__(self) -> None:
        self.small_cpu = 0.0
        self.small_messages = 0
        self.bulk: dict[int, list[tuple[int, float]]] = {}

    def recv_cpu_s(self) -> float:
        """CPU s per small round trip: one message received (and one posted)."""
        return self.small_cpu / self.small_messages if self.small_messages else float("nan")

    def byte_cpu_s(self, ops: tuple[int, ...] = (_GIVE, -_TAKE)) -> float:
        """CPU s per byte of the largest payload of ``ops`` (default: the receives; the
        median over them: a difference of two payloads' CPU is too noisy under a quota)."""
        largest = (max(self.bulk[op]) for op in ops if self.bulk.get(op))
        per_byte = [c / n for n, c in largest if n]
        return float(np.median(per_byte)) if per_byte else float("nan")


_ledger = _CpuLedger()


# --- compute -------------------------------------------------------------------------


def _inputs(setup: Any, batch: int, gen: torch.Generator) -> list[torch.Tensor]:
    """A random batch at the input of each tier (client, aggregator, server)."""
    client, agg, _ = setup.tier_modules()
    x = torch.randint(0, 256, (batch, *setup.model.input_shape), generator=gen).float()
    with torch.no_grad():
        h = client.part(x)
        g = agg.part(h)
    return [x, h.detach(), g.detach()]


def time_train_step(
    module: Any,
    x: torch.Tensor,
    y: torch.Tensor,
    tier: int,
    ctx: Any,
    *,
    pause: float = 0.0,
    sustain_s: float = 0.0,
) -> tuple[float, int, float]:
    """(seconds, steps, CPU seconds): training steps of ``module`` (tier 0 client, 1
    aggregator, 2 server) on ``(x, y)``: forward, backward (its own loss under local
    losses or at the server, else a gradient from above) and optimiser step, after one
    warm-up step and a ``pause`` (a rested CPU quota). With ``sustain_s``: steps back to
    back until that long has passed, their total time, count and the process's CPU time
    over them; else ``PROBE_STEPS`` steps each after its own ``pause``, the median
    step's time, 1 and its CPU time."""
    module = copy.deepcopy(module)
    opt = ctx.make_optimizer(module)

    def step() -> None:
        inp = x.clone().requires_grad_(tier > 0)
        out = module.part(inp)
        opt.zero_grad(set_to_none=True)
        if tier == 2:
            F.cross_entropy(out, y).backward()
        elif module.aux is not None:
            F.cross_entropy(module.aux(out), y).backward()
        else:
            out.backward(torch.ones_like(out) * 1e-3)
        opt.step()

    step()  # warm-up
    if sustain_s > 0:
        time.sleep(pause)
        start, cpu, steps = time.perf_counter(), time.process_time(), 0
        while steps < PROBE_STEPS or time.perf_counter() - start < sustain_s:
            step()
            steps += 1
        return time.perf_counter() - start, steps, time.process_time() - cpu
    times = []
    for _ in range(PROBE_STEPS):
        time.sleep(pause)
        start, cpu = time.perf_counter(), time.process_time()
        step()
        times.append((time.perf_counter() - start, time.process_time() - cpu))
    wall, cpu = sorted(times)[len(times) // 2]
    return wall, 1, cpu


def probe_cpu(seconds: float = 0.3) -> tuple[float, float]:
    """(CPU share, burst s) of a CPU quota this process runs under, found by spinning
    after a rest: under CFS bandwidth control the spin first runs for a burst, then
    stalls and runs by turns, regularly; share = run / (run + stall) of the regular
    part. (1.0, 0.0) when no regular stalls show (no quota)."""
    time.sleep(0.1)
    stretches, gaps = [], []
    start = last = busy = time.perf_counter()
    while last - start < seconds:
        now = time.perf_counter()
        if now - last > 4e-4:
            stretches.append(last - busy)
            gaps.append(now - last)
            busy = now
        last = now
    if len(gaps) < 6:
        return 1.0, 0.0
    # The share of time it ran after its first stall: robust to the kernel's uneven
    # slices; on a loaded machine without a quota it is the share the process got.
    share = sum(stretches[1:]) / max(1e-9, sum(stretches[1:]) + sum(gaps[1:]))
    return (1.0, 0.0) if share > 0.9 else (share, stretches[0])


def full_speed_seconds(wall: float, share: float, burst: float) -> float:
    """CPU seconds at full speed of work that took ``wall`` seconds from a rested quota
    (the inverse of the CPU bucket of :func:`flowsplit.federated.system.schedule.replay`)."""
    if share >= 1.0 or burst <= 0:
        return wall
    return wall if wall <= burst else burst + (wall - burst) * share


def probe_compute(runtime: Any) -> tuple[float, float, float, float]:
    """(this role's full speed in FLOP/s on its own part, NaN when it computes nothing;
    its CPU share; its burst s: the medians of three spins; how much longer a step takes
    after a rest, a fraction: NaN when it computes nothing). Steps are timed back to
    back from a rested quota (after a pause) for ``PROBE_SUSTAIN_S``; their CPU time is
    their full-speed time. Then ``PROBE_STEPS`` steps each after a rest of
    ``COLD_REST_S`` (as a role computes in a round: after waiting for a message), their
    median CPU time against the sustained step's (see :data:`COLD_REST_S`)."""
    setup, ctx = runtime.setup, runtime.ctx
    kind, _ = runtime.me
    tier = {CLIENT: 0, AGGREGATOR: 1}.get(kind, 2)
    flops = float(ctx.costs.train_flops[tier])
    spins = [probe_cpu(0.2) for _ in range(3)]  # the median of three: a slice may be odd
    share = statistics.median(sp[0] for sp in spins)
    burst = statistics.median(sp[1] for sp in spins)
    if flops <= 0:
        return float("nan"), share, burst, float("nan")
    batch = int(setup.config.batch_size)
    gen = torch.Generator().manual_seed(12345)
    x = _inputs(setup, batch, gen)[tier]
    y = torch.randint(0, setup.dataset.n_classes, (batch,), generator=gen)
    module = runtime.role.server_module if tier == 2 else runtime.role.module
    wall, steps, cpu = time_train_step(
        module, x, y, tier, ctx, pause=0.1 if burst else 0.0, sustain_s=PROBE_SUSTAIN_S
    )
    # CPU time, not wall time converted with the spins' share: eleven roles probing at
    # once on a shared machine do not all get their quota, and the wall time then read
    # the same clients' speeds up to 1.5x slower from one run to the next.
    seconds = cpu if cpu > 0 else full_speed_seconds(wall, share, burst)
    cold_wall, _, cold_cpu = time_train_step(module, x, y, tier, ctx, pause=COLD_REST_S)
    cold = cold_cpu if cpu > 0 else full_speed_seconds(cold_wall, share, burst)
    return flops * batch * steps / seconds, share, burst, max(0.0, cold * steps / seconds - 1)


# --- links ---------------------------------------------------------------------------


def _cmd(op: int, n: int = 0, delay_us: int = 0) -> torch.Tensor:
    return torch.tensor([op, n, delay_us], dtype=torch.int64)


def _timed(
    transport: Any, peer: Address, op: int, n: int, delay_us: int = 0, *, book: bool = True
) -> float:
    """Seconds from posting command ``op`` (with its payload) to the peer's answer (for
    ``_GIVE``/``_BUSY``: its payload); the CPU it took is booked in the ledger (unless
    not ``book``: a warm-up)."""
    payload = torch.zeros(n, dtype=torch.uint8) if op == _TAKE else None
    cpu = time.process_time()
    start = time.perf_counter()
    transport.send(Send(peer, _cmd(op, n, delay_us), CONTROL), telemetry=True)
    if payload is not None:
        transport.send(Send(peer, payload, CONTROL), telemetry=True)
    got = transport.recv(Recv(peer, CONTROL), telemetry=True)
    if got is None:
        raise ConnectionError(f"lost {peer} while probing")
    took = time.perf_counter() - start
    cpu = time.process_time() - cpu
    if not book:
        pass
    elif op == _ECHO:
        _ledger.small_cpu += cpu
        _ledger.small_messages += 1
    elif op in (_TAKE, _GIVE):
        _ledger.bulk.setdefault(op, []).append((n, cpu))
    return took


def probe_burst(transport: Any, peer: Address, bandwidth: float) -> float:
    """Bytes a rested link to ``peer`` sends at once (a shaper's token bucket; about 0
    on a link without one). Payloads of :data:`BURST_SIZES_S` of the link's traffic and
    one of a byte are each timed after a rest of :data:`BURST_IDLE_S` (the fastest of
    :data:`BURST_REPEATS`: waits only slow a transfer); their times less the one-byte
    payload's (the handshakes cancel) give the bucket at the link's measured
    ``bandwidth`` (:func:`fit_burst`). A bucket larger than the largest payload reads as
    0 (no payload took measurable time)."""
    sizes = [int(max(FIRST_PROBE_BYTES // 2, bandwidth * f)) for f in BURST_SIZES_S]
    sizes = [min(MAX_BURST_PROBE_BYTES, n) for n in sizes]
    best = {n: float("inf") for n in (1, *sizes)}
    for _ in range(BURST_REPEATS):
        for n in best:
            time.sleep(BURST_IDLE_S)
            best[n] = min(best[n], _timed(transport, peer, _TAKE, n, book=False))
    tiny = best.pop(1)
    return fit_burst(np.array(list(best)), np.array(list(best.values())) - tiny, bandwidth)


def fit_burst(sizes: np.ndarray, seconds: np.ndarray, rate: float) -> float:
    """The bucket ``b`` (bytes) of ``seconds = (sizes - b) / rate`` at the link's measured
    ``rate`` (B/s): the median over the payloads that took measurable time
    (:data:`BURST_MEASURABLE_S`) of ``size - rate * seconds``, at least 0. The rate is
    the bandwidth probe's (long transfers, well measured): fitting it here as well, from
    five short payloads, read a stalled one as a different rate and the bucket as up to
    6x off; the median shrugs off one or two stalled payloads. 0 when no payload took
    measurable time (a link too fast for its bucket to matter)."""
    sizes, seconds = np.asarray(sizes, float), np.asarray(seconds, float)
    timed = seconds > BURST_MEASURABLE_S
    if not timed.any():
        return 0.0
    return max(0.0, float(np.median(sizes[timed] - rate * seconds[timed])))


def link_rates(transport: Any, peer: Address, op: int, rtt: float) -> tuple[float, float]:
    """(effective, steady-state) bytes/s of direction ``op``: a payload grown until its
    transfer takes ``PROBE_TRANSFER_S``, its bytes over its time less a round trip; then
    twice it (the effective rate is the faster of the two: a stall only slows), the extra
    bytes over the extra time (one-off costs cancel; the larger payload's bytes over its
    time if the difference is not plausible: a stall)."""
    n = FIRST_PROBE_BYTES
    while True:
        took = _timed(transport, peer, op, n)
        moved = max(took - rtt, 1e-6)
        if moved >= PROBE_TRANSFER_S or n >= MAX_PROBE_BYTES:
            break
        n = int(min(MAX_PROBE_BYTES, n * min(16.0, max(2.0, 1.5 * PROBE_TRANSFER_S / moved))))
    effective = (n + 80) / moved
    if n >= MAX_PROBE_BYTES:
        return effective, effective
    took2 = _timed(transport, peer, op, 2 * n)
    extra = took2 - took
    # A stall only slows a transfer: the faster of the two is the effective rate.
    effective = max(effective, (2 * n + 80) / max(took2 - rtt, 1e-6))
    if extra <= 0.5 * moved:  # not plausible: the smaller transfer stalled
        return effective, (2 * n + 80) / max(took2 - rtt, 1e-6)
    return effective, n / extra


def probe_link(transport: Any, peer: Address) -> list[float]:
    """[round trip s, effective bandwidth to ``peer`` B/s, from it B/s, burst bytes
    (:func:`probe_burst`), what ``peer`` computing adds to a message asked for (s),
    steady-state bandwidth to ``peer``, from it], measured with the peer answering
    (:func:`answer_probe`); ends the peer's loop."""
    # The fastest of the round trips: the path and the transport's own cost, without the
    # waits of a peer that was not running (a CPU quota's stalls are the CPU model's).
    rtts = [_timed(transport, peer, _ECHO, 0, book=k >= 2) for k in range(10)][2:]
    rtt = min(rtts)
    (down, down_steady), (up, up_steady) = (
        link_rates(transport, peer, op, rtt) for op in (_TAKE, _GIVE)
    )
    busy = probe_busy_sender(transport, peer, up)
    held = probe_burst(transport, peer, down)
    transport.send(Send(peer, _cmd(_DONE), CONTROL), telemetry=True)
    return [rtt, down, up, held, busy, down_steady, up_steady]


BUSY_ASK_AFTER_S = 0.1
"""How long after ``peer`` posted a payload the busy-sender probe asks for it."""


def probe_busy_sender(transport: Any, peer: Address, bandwidth: float) -> float:
    """Seconds a computing ``peer`` adds to a message it posted before the receiver asked
    for it: ``peer`` posts a payload (several stream buffers), then either waits or
    spins; this end asks for it ``BUSY_ASK_AFTER_S`` later and times the rest. The
    median of the busy times less the median of the idle ones (2 each, alternating):
    under a spent CPU quota the sender's transport starts what was asked for only when
    the quota lets it run (up to a CFS period later), and refills its stream likewise."""
    n = int(min(MAX_PROBE_BYTES, max(4 * FIRST_PROBE_BYTES, bandwidth * 0.05)))
    spin = BUSY_ASK_AFTER_S + 2.0 * n / bandwidth + 0.05

    def asked_late(op: int) -> float:
        transport.send(Send(peer, _cmd(op, n, int(spin * 1e6)), CONTROL), telemetry=True)
        time.sleep(BUSY_ASK_AFTER_S)
        start = time.perf_counter()
        if transport.recv(Recv(peer, CONTROL), telemetry=True) is None:
            raise ConnectionError(f"lost {peer} while probing")
        return time.perf_counter() - start

    idle, busy = [], []
    for _ in range(2):
        idle.append(asked_late(_GIVE))
        busy.append(asked_late(_BUSY))
    return max(0.0, statistics.median(busy) - statistics.median(idle))


def _spin(seconds: float) -> None:
    """Compute (a busy loop) for ``seconds`` of wall time."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def answer_probe(transport: Any, peer: Address) -> None:
    """Answer ``peer``'s :func:`probe_link` until it is done."""
    small = torch.zeros(1)
    echoes = 0
    while True:
        cpu = time.process_time()
        cmd = transport.recv(Recv(peer, CONTROL), telemetry=True)
        if cmd is None:
            raise ConnectionError(f"lost {peer} while probing")
        op, n, delay_us = (int(v) for v in cmd.tolist())
        if op == _DONE:
            return
        if op == _BUSY:
            payload = torch.zeros(n, dtype=torch.uint8)
            transport.send(Send(peer, payload, CONTROL), telemetry=True)
            _spin(delay_us / 1e6)
            continue
        if op == _GIVE:  # not waited for: a wait with a deadline costs CPU (a quota's)
            transport.send(Send(peer, torch.zeros(n, dtype=torch.uint8), CONTROL), telemetry=True)
            continue
        if op == _TAKE:
            if transport.recv(Recv(peer, CONTROL), telemetry=True) is None:
                raise ConnectionError(f"lost {peer} while probing")
            transport.send(Send(peer, small, CONTROL), telemetry=True)
            _ledger.bulk.setdefault(-_TAKE, []).append((n, time.process_time() - cpu))
        else:
            transport.send(Send(peer, small, CONTROL), telemetry=True)
            echoes += 1
            if echoes > 2:  # the first include waiting for the prober to begin
                _ledger.small_cpu += time.process_time() - cpu
                _ledger.small_messages += 1


# --- the whole probe -------------------------------------------------------------------


def run_probe(runtime: Any, pairs: list[tuple[int, int]]) -> np.ndarray | None:
    """Measure this role's speed and its links; the server returns every result row.

    ``pairs``: the (client, aggregator) links to measure, the same list in every role.
    Order (deadlock-free): every role times its own compute first, and no link is timed
    before all have (a ready-notice travels up the tree: client -> assigned aggregator
    -> server; a role still computing would take CPU from the link timed); then the
    server probes aggregators 0.., and only once it has timed every backbone (a go-notice
    down to each aggregator: a link timed beside another shares the hosts' CPU with it)
    each aggregator its clients in ascending order; a client answers its aggregators in
    ascending order. Results travel up as telemetry (client -> assigned aggregator ->
    server).
    """
    global _ledger
    kind, index = runtime.me
    transport = runtime.transport
    _ledger = _CpuLedger()
    rng = torch.get_rng_state()
    try:
        speed, share, burst, cold = probe_compute(runtime)
    finally:
        torch.set_rng_state(rng)
    computed = time.time()  # one clock on one host (reported: when each role's ended)
    rows: list[list[float]] = []
    n_aggs = runtime.setup.topology.n_aggregators
    if kind == CLIENT:
        agg = (AGGREGATOR, int(runtime.assignment[index]))
        transport.send(Send(agg, torch.zeros(1), CONTROL), telemetry=True)  # computed
        for j in sorted({j for i, j in pairs if i == index}):
            answer_probe(transport, (AGGREGATOR, j))
        own = _role_row(_SPEED_CLIENT, index, -1, speed, share, burst, computed, cold)
        row = torch.tensor([own], dtype=torch.float64)
        transport.send(Send(agg, row, CONTROL), telemetry=True)
        return None
    if kind == AGGREGATOR:
        mine = np.flatnonzero(np.asarray(runtime.assignment) == index)
        for i in mine:  # every client of mine has timed its compute
            transport.recv(Recv((CLIENT, int(i)), CONTROL), telemetry=True)
        transport.send(Send(SERVER_ADDRESS, torch.zeros(1), CONTROL), telemetry=True)
        answer_probe(transport, SERVER_ADDRESS)
        transport.recv(Recv(SERVER_ADDRESS, CONTROL), telemetry=True)  # backbones timed
        links = []
        for i in sorted(i for i, j in pairs if j == index):
            peer = (CLIENT, i)
            if peer not in transport.peers or transport.peers[peer] is None:
                continue
            links.append(_link_row(_LINK_CA, i, index, transport, peer))
        rows.append(_role_row(_SPEED_AGG, -1, index, speed, share, burst, computed, cold))
        rows.extend(links)
        for i in mine:
            got = transport.recv(Recv((CLIENT, int(i)), CONTROL), telemetry=True)
            if got is not None:
                rows.extend(got.numpy().reshape(-1, _COLS).tolist())
        table = torch.tensor(rows, dtype=torch.float64)
        transport.send(Send(SERVER_ADDRESS, table, CONTROL), telemetry=True)
        return None
    for j in range(n_aggs):  # every aggregator (and its clients) has timed its compute
        transport.recv(Recv((AGGREGATOR, j), CONTROL), telemetry=True)
    links = [_link_row(_LINK_AS, -1, j, transport, (AGGREGATOR, j)) for j in range(n_aggs)]
    for j in range(n_aggs):  # every backbone timed: the aggregators time their clients
        transport.send(Send((AGGREGATOR, j), torch.zeros(1), CONTROL), telemetry=True)
    rows.append(_role_row(_SPEED_SERVER, -1, -1, speed, share, burst, computed, cold))
    rows.extend(links)
    for j in range(n_aggs):
        got = transport.recv(Recv((AGGREGATOR, j), CONTROL), telemetry=True)
        if got is not None:
            rows.extend(got.numpy().reshape(-1, _COLS).tolist())
    return np.asarray(rows, dtype=np.float64)


def _link_row(kind: int, i: int, j: int, transport: Any, peer: Address) -> list[float]:
    """The result row of the link to ``peer`` (:func:`probe_link`), with when its timing
    began and ended (one clock on one host: ``probe.json`` orders the timings by it)."""
    began = time.time()
    rtt, down, up, held, busy, *steady = probe_link(transport, peer)
    ended = time.time()
    return [kind, i, j, np.nan, rtt, down, up, held, np.nan, np.nan, busy, *steady, began, ended]


def _role_row(kind: int, i: int, j: int, *measured: float) -> list[float]:
    """The result row of a role's speed (``measured``: speed, share, burst, when its
    compute probe ended, cold-step extra) and its transport CPU: s per message received,
    s per byte received, s per byte sent (NaN: not measured; a client answers only, so
    it times no send). The link columns after them are NaN."""
    cpu = [_ledger.recv_cpu_s(), _ledger.byte_cpu_s(), _ledger.byte_cpu_s((_TAKE,))]
    row = [kind, i, j, *measured, *cpu]
    return row + [np.nan] * (_COLS - len(row))


def probed_topology(nominal: Topology, rows: np.ndarray) -> tuple[Topology, dict[str, Any]]:
    """``nominal`` with every measured speed, bandwidth (mean of both directions) and
    latency (half the round trip) replaced; and the measurements as a JSON-able dict.

    ``rows``: (R, 8) to (R, 15) (older probes lack the last columns)."""
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim == 2 and rows.shape[1] < _COLS:
        pad = np.full((len(rows), _COLS - rows.shape[1]), np.nan)
        rows = np.concatenate([rows, pad], axis=1)
    speeds = {
        "client": nominal.client_speed.astype(float).copy(),
        "aggregator": nominal.aggregator_speed.astype(float).copy(),
        "server": np.array([float(nominal.server_speed)]),
    }
    ca_lat, ca_bw = nominal.ca_latency.copy(), nominal.ca_bandwidth.copy()
    as_lat, as_bw = nominal.as_latency.copy(), nominal.as_bandwidth.copy()
    report: dict[str, Any] = {"clients": {}, "aggregators": {}, "server": {}, "links": []}
    buffers = []
    ca_burst = np.full(nominal.ca_bandwidth.shape, np.nan)
    as_burst = np.full(nominal.n_aggregators, np.nan)
    n_links = 0
    share = {"client": [1.0] * nominal.n_clients, "aggregator": [1.0] * nominal.n_aggregators}
    burst = {"client": [0.0] * nominal.n_clients, "aggregator": [0.0] * nominal.n_aggregators}
    share["server"], burst["server"] = [1.0], [0.0]
    sizes = {"client": nominal.n_clients, "aggregator": nominal.n_aggregators, "server": 1}
    transport = {
        name: {who: [np.nan] * n for who, n in sizes.items()}
        for name in ("recv_cpu_s", "byte_cpu_s", "send_byte_cpu_s", "cold_extra")
    }
    busy_sends: dict[str, list[list[float]]] = {
        who: [[] for _ in range(n)] for who, n in sizes.items()
    }
    for row in rows.tolist():
        kind, i, j, speed, rtt, down, up, held, recv_cpu, byte_cpu, busy = row[:11]
        down_steady, up_steady, began, ended = row[11:15]
        i, j, kind = int(i), int(j), int(kind)
        if kind in (_SPEED_CLIENT, _SPEED_AGG, _SPEED_SERVER):
            who, at = {_SPEED_CLIENT: ("client", i), _SPEED_AGG: ("aggregator", j)}.get(
                kind, ("server", 0)
            )
            node = _speed_row(row, speeds[who], share[who], burst[who], transport, who, at)
            if who == "server":
                report["server"] = node
            else:
                report[f"{who}s"][str(at)] = node
            continue
        link = _link_report(rtt, down, up, held, busy, down_steady, up_steady)
        if np.isfinite(began) and np.isfinite(ended):
            link["timed_at"], link["timed_until"] = began, ended
        n_links += 1
        if "burst_bytes" in link:
            buffers.append(held)
            if kind == _LINK_CA:
                ca_burst[i, j] = held
            else:
                as_burst[j] = held
        if "busy_wake_s" in link:
            who, at = ("client", i) if kind == _LINK_CA else ("aggregator", j)
            busy_sends[who][at].append(busy)
        if kind == _LINK_CA:
            ca_lat[i, j], ca_bw[i, j] = rtt / 2, (down + up) / 2
            report["links"].append({"client": i, "aggregator": j, **link})
        else:
            as_lat[j], as_bw[j] = rtt / 2, (down + up) / 2
            report["links"].append({"backbone": j, **link})
    report["unmeasured_client_links"] = _unmeasured_links(nominal, report["links"])
    extra_transport = _transport_extra(transport, busy_sends)
    topo = replace(
        nominal,
        name="probed",
        description=f"measured by flowsplit sfl probe (base: {nominal.name})",
        client_speed=speeds["client"],
        aggregator_speed=speeds["aggregator"],
        server_speed=float(speeds["server"][0]),
        ca_latency=ca_lat,
        ca_bandwidth=ca_bw,
        as_latency=as_lat,
        as_bandwidth=as_bw,
        trace=(),
        extra={
            **nominal.extra,
            **_burst_extra(buffers, n_links, ca_burst, as_burst),
            **(
                {f"{who}_cpu_share": share[who] for who in share}
                | {f"{who}_cpu_burst_s": burst[who] for who in burst}
                if any(b > 0 for v in burst.values() for b in v)
                else {}
            ),
            **extra_transport,
        },
    )
    return topo, report


def _speed_row(
    row: list[float],
    speeds: np.ndarray,
    share: list[float],
    burst: list[float],
    transport: dict[str, dict[str, list[float]]],
    who: str,
    at: int,
) -> dict[str, Any]:
    """Node ``at`` of tier ``who`` from its speed row, which carries the CPU share and
    burst in the link columns (rtt, down), a step's extra after a rest in the burst one
    and the CPU per byte sent in the busy-sender one: its speed, share and burst into
    ``speeds``/``share``/``burst``, its transport CPU and step extra into ``transport``;
    its ``probe.json`` entry returned."""
    speed, share_at, burst_at = row[3], row[4], row[5]
    ok = np.isfinite(speed)
    node = {"flops_per_s": speed if ok else None, "cpu_share": share_at, "cpu_burst_s": burst_at}
    share[at], burst[at] = share_at, burst_at
    if row[6] > 0:
        node["compute_done_at"] = row[6]
    costs = {
        "recv_cpu_s": row[8],
        "byte_cpu_s": row[9],
        "send_byte_cpu_s": row[10],
        "cold_extra": row[7],
    }
    for name, v in costs.items():
        if np.isfinite(v):
            node[name] = v
            transport[name][who][at] = v
    if ok:
        speeds[at] = speed
    return node


def _link_report(rtt, down, up, held, busy, down_steady, up_steady) -> dict[str, float]:
    """One link's measurements as ``probe.json`` lists them (what was measured only)."""
    link = {"rtt_s": rtt, "down_Bps": down, "up_Bps": up}
    if np.isfinite(held):
        link["burst_bytes"] = held
    if np.isfinite(down_steady) and np.isfinite(up_steady):
        link["down_steady_Bps"], link["up_steady_Bps"] = down_steady, up_steady
    if np.isfinite(busy):
        link["busy_wake_s"] = busy
    return link


def _burst_extra(buffers: list, n_links: int, ca: np.ndarray, backbone: np.ndarray) -> dict:
    """``extra``'s entries for the links' bursts: every measured link's (links not
    measured get the median: they carry no traffic of the run), which selects the
    replay of gloo's rendezvous (:data:`~flowsplit.federated.system.schedule.BURST_KEYS`);
    from an older probe that timed one link's buffering only, that figure's median as
    every stream's buffer (the buffered replay)."""
    if not buffers:
        return {}
    median = float(np.median(buffers))
    if len(buffers) < n_links:
        return {BUFFER_KEY: median}
    ca = np.where(np.isfinite(ca), ca, median)
    backbone = np.where(np.isfinite(backbone), backbone, median)
    return dict(zip(BURST_KEYS, (ca.tolist(), backbone.tolist()), strict=True))


def _unmeasured_links(nominal: Topology, links: list[dict]) -> list[list[int]]:
    """The linked (client, aggregator) pairs of ``nominal`` that ``links`` do not hold."""
    measured = {(r["client"], r["aggregator"]) for r in links if "client" in r}
    return [
        [i, j]
        for i in range(nominal.n_clients)
        for j in range(nominal.n_aggregators)
        if nominal.ca_bandwidth[i, j] > 0 and (i, j) not in measured
    ]


def _transport_extra(transport: dict, busy_sends: dict) -> dict[str, list[float]]:
    """The topology's ``extra`` entries of the transport's CPU (per byte, per message
    received) and of the busy senders' delay (median per sender), where measured."""
    out: dict[str, list[float]] = {}
    if any(np.isfinite(v) for d in transport.values() for vs in d.values() for v in vs):
        for name, per_who in transport.items():
            for who, vs in per_who.items():
                out[f"{who}_{name}"] = [float(v) if np.isfinite(v) else 0.0 for v in vs]
    if any(b for vs in busy_sends.values() for b in vs):
        for who, vs in busy_sends.items():
            out[f"{who}_busy_wake_s"] = [float(np.median(b)) if b else 0.0 for b in vs]
    return out


def all_pairs(topology: Topology) -> list[tuple[int, int]]:
    """Every linked (client, aggregator) pair of ``topology``."""
    i, j = np.nonzero(topology.ca_bandwidth > 0)
    return [(int(a), int(b)) for a, b in zip(i, j, strict=True)]


def assigned_pairs(assignment: np.ndarray) -> list[tuple[int, int]]:
    return [(i, int(j)) for i, j in enumerate(assignment)]
