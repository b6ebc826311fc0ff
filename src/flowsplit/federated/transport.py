"""Tensor messages over torch.distributed (gloo): pairwise groups, headers, timeouts.

Every pair of roles that talks (server-aggregator, aggregator-client) gets its own
two-member gloo process group. A gloo timeout breaks the group it happens in, so
with one group per pair a client that goes silent takes down only its own link,
and the rest of the run goes on without it. A peer whose process dies is noticed at
once (its connection closes); a peer that hangs is dropped when it misses the
deadline of the wait (``drop_timeout`` for an aggregator waiting on a client, a
longer ``wait_timeout`` everywhere else).

Only tensors cross: a fixed-size int64 header (dtype code, rank, shape), then the
payload. Bytes are counted from the ``nbytes`` of the tensors actually handed to
gloo, on both ends.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import time

import numpy as np
import torch
import torch.distributed as dist

from flowsplit.federated.system.costs import CostMeter
from flowsplit.federated.system.protocol import (
    AGGREGATOR,
    CLIENT,
    CONTROL,
    DIRECTIONS,
    HEADER_NUMEL,
    HOPS,
    MESSAGE_TYPES,
    SERVER_ADDRESS,
    Address,
    Recv,
    Send,
    decode_header,
    encode_header,
    hop_of,
    rank_of,
)
from flowsplit.train.launch import peer_failure_words

log = logging.getLogger("flowsplit.federated")


def role_name(address: Address) -> str:
    return "server" if address == SERVER_ADDRESS else f"{address[0]} {address[1]}"


def talking_pairs(assignment: np.ndarray, n_aggregators: int) -> list[tuple[Address, Address]]:
    """Every pair of roles that exchanges messages, in one global order."""
    pairs = [(SERVER_ADDRESS, (AGGREGATOR, j)) for j in range(n_aggregators)]
    pairs += [((AGGREGATOR, int(a)), (CLIENT, i)) for i, a in enumerate(assignment)]
    return pairs


def make_pair_groups(
    store: dist.Store,
    me: Address,
    pairs: list[tuple[Address, Address]],
    n_aggregators: int,
    *,
    device,
    timeout_s: float,
) -> dict[Address, tuple[dist.ProcessGroupGloo, int]]:
    """Create the two-member gloo groups of ``pairs`` this process belongs to.

    All processes walk the same global list of pairs (:func:`talking_pairs`, or a worker
    pool's), each creating only its own: with that shared order the pairwise rendezvous
    cannot deadlock. Returns ``{peer: (group, peer's rank in the group)}``.
    """
    groups = {}
    for a, b in pairs:
        if me in (a, b):
            groups[b if me == a else a] = pair_group(
                store, me, a, b, n_aggregators, device=device, timeout_s=timeout_s
            )
    return groups


def gloo_device(bind_addr: str | None):
    """The gloo device to bind: ``bind_addr``, else ``GLOO_SOCKET_IFNAME``, else the default."""
    if bind_addr:
        return dist.ProcessGroupGloo.create_device(hostname=bind_addr)
    if os.environ.get("GLOO_SOCKET_IFNAME"):
        return dist.ProcessGroupGloo.create_device(interface=os.environ["GLOO_SOCKET_IFNAME"])
    return dist.ProcessGroupGloo.create_default_device()


def pair_group(
    store: dist.Store,
    me: Address,
    a: Address,
    b: Address,
    n_aggregators: int,
    *,
    device,
    timeout_s: float,
) -> tuple[dist.ProcessGroupGloo, int]:
    """The two-member gloo group of the pair ``(a, b)`` (``me`` is one of them), and the
    peer's rank in it. Both ends call this; it returns once the other end has joined.
    Each pair is created once per run: its store prefix is the pair's ranks."""
    name = f"flowsplit/{rank_of(a, n_aggregators)}-{rank_of(b, n_aggregators)}/"
    opts = dist.ProcessGroupGloo._Options()
    opts._devices = [device]
    opts._timeout = dt.timedelta(seconds=timeout_s)
    pg = dist.ProcessGroupGloo(dist.PrefixStore(name, store), 0 if me == a else 1, 2, opts)
    return pg, 1 if me == a else 0


_KEY = {
    (h, d, t): (i, j, k)
    for i, h in enumerate(HOPS)
    for j, d in enumerate(DIRECTIONS)
    for k, t in enumerate(MESSAGE_TYPES)
}


class GlooTransport:
    """Sends and receives the roles' messages for one process."""

    def __init__(
        self,
        me: Address,
        peers: dict[Address, tuple[dist.ProcessGroupGloo, int]],
        meter: CostMeter,
        *,
        drop_timeout: float,
        wait_timeout: float,
    ):
        self.me = me
        self.peers = peers
        self.meter = meter
        self.drop_timeout = drop_timeout
        self.wait_timeout = wait_timeout
        self.lost: set[Address] = set()
        self.pending: list[tuple[object, torch.Tensor, Address]] = []
        self.received = np.zeros((len(HOPS), len(DIRECTIONS), len(MESSAGE_TYPES)))
        self.telemetry_bytes = 0
        self.names: dict[Address, str] = {}
        """How the log names a role, where not as :func:`role_name` does (a pool's
        clients: by their registered index, not their index in the round)."""

    def channel(self, peer: Address) -> tuple[dist.ProcessGroupGloo, int, int]:
        """``(group, peer's rank in it, tag)`` of ``peer``: a peer entry is ``(group, rank)``
        (tag 0), or ``(group, rank, tag)`` when several roles share one group (the clients
        a pool worker hosts, each on its own tag)."""
        entry = self.peers[peer]
        return (entry[0], entry[1], entry[2] if len(entry) > 2 else 0)

    def lose(self, peer: Address, why: str) -> None:
        """Give ``peer`` up (logged once): messages to it are dropped, from it are None."""
        if peer in self.lost:
            return
        self.lost.add(peer)
        why = peer_failure_words(why)  # in words, not gloo's text cut mid-word
        log.warning(
            "%s: lost %s (%s); it is dropped from this round and the rest of the run",
            self.names.get(self.me) or role_name(self.me),
            self.names.get(peer) or role_name(peer),
            why,
        )

    # --- sending -----------------------------------------------------------------------
    def send(self, op: Send, *, telemetry: bool = False) -> None:
        """Post ``op``'s header and payload (asynchronously) and charge their bytes."""
        peer = op.dst
        if peer in self.lost:
            return
        pg, rank, tag = self.channel(peer)
        header = encode_header(op.tensor)
        tensors = [header] if op.tensor is None else [header, op.tensor.detach().contiguous()]
        try:
            for t in tensors:
                self.pending.append((pg.send([t], rank, tag), t, peer))
        except RuntimeError as exc:
            self.lose(peer, f"send failed: {exc}")
            return
        nbytes = sum(t.nbytes for t in tensors)
        if telemetry:
            self.telemetry_bytes += nbytes
        else:
            self.meter.charge_message(self.me, peer, nbytes, op.kind, op.client, op.phase)
        if len(self.pending) > 256:
            self.flush(keep=64)

    def flush(self, keep: int = 0) -> None:
        """Wait for all but the ``keep`` most recent posted sends to complete."""
        cut = max(0, len(self.pending) - keep)
        done, self.pending = self.pending[:cut], self.pending[cut:]
        for work, _tensor, peer in done:
            if peer in self.lost:
                continue
            try:
                work.wait(dt.timedelta(seconds=self.wait_timeout))
            except RuntimeError as exc:
                self.lose(peer, f"send did not complete: {exc}")

    # --- receiving ---------------------------------------------------------------------
    def recv(self, op: Recv, *, telemetry: bool = False) -> torch.Tensor | None:
        """The next message from ``op.src``; ``None`` for a dropped-client notice or a lost peer."""
        peer = op.src
        if peer in self.lost:
            return None
        timeout = self.drop_timeout if op.droppable else self.wait_timeout
        header = torch.empty(HEADER_NUMEL, dtype=torch.int64)
        if not self._wait_recv(header, peer, timeout):
            return None
        try:
            decoded = decode_header(header)
        except ValueError as exc:
            self.lose(peer, str(exc))
            return None
        if decoded is None:
            self._count(peer, header.nbytes, CONTROL, telemetry)
            return None
        dtype, shape = decoded
        payload = torch.empty(shape, dtype=dtype)
        if not self._wait_recv(payload, peer, timeout):
            return None
        self._count(peer, header.nbytes + payload.nbytes, op.kind, telemetry)
        return payload

    # --- telemetry: the runtime's own CONTROL messages, not the run's ------------------
    def send_telemetry(self, peer: Address, tensor: torch.Tensor) -> None:
        """Send ``tensor`` to ``peer`` as a CONTROL message of the runtime's own (counted
        in ``telemetry_bytes``, not charged to the run's costs)."""
        self.send(Send(peer, tensor, CONTROL), telemetry=True)

    def recv_telemetry(self, peer: Address, *, droppable: bool = False) -> torch.Tensor | None:
        """The next telemetry message from ``peer`` (see :meth:`send_telemetry`); None as
        for :meth:`recv` (``droppable``: wait only the drop timeout)."""
        return self.recv(Recv(peer, CONTROL, droppable=droppable), telemetry=True)

    def _wait_recv(self, tensor: torch.Tensor, peer: Address, timeout: float) -> bool:
        pg, rank, tag = self.channel(peer)
        start = time.monotonic()
        try:
            pg.recv([tensor], rank, tag).wait(dt.timedelta(seconds=timeout))
            waited = time.monotonic() - start
            if waited > 1.0:
                log.debug("%s: waited %.2f s for %s", role_name(self.me), waited, role_name(peer))
            return True
        except RuntimeError as exc:
            text = str(exc)
            why = f"nothing for {timeout:g} s" if "Timed out" in text else text
            self.lose(peer, why)
            return False

    def _count(self, peer: Address, nbytes: int, kind: str, telemetry: bool) -> None:
        if telemetry:
            self.telemetry_bytes += nbytes
            return
        hop, direction = hop_of(peer, self.me)
        self.received[_KEY[(hop, direction, kind)]] += nbytes

    def close(self) -> None:
        """Finish posted sends and shut the groups down (errors ignored: peers may be gone)."""
        self.flush()
        for pg in {id(e[0]): e[0] for e in self.peers.values() if e is not None}.values():
            with contextlib.suppress(Exception):  # best effort: peers may be gone
                pg.shutdown()
