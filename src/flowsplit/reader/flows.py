"""Bidirectional TCP/UDP flows of packet captures, with their views, streamed.

The pipeline, per chunk of a few MB of records (several small files share one):

    staging.iter_record_chunks  walk record headers, gather their fields
    packets.PacketDecoder       link / IP / tunnels / fragments / TCP / UDP, vectorised
    assemble.FlowAssembler      flows (timeouts, TCP end), views, carried state

:func:`iter_flows` streams one capture; :func:`iter_flows_many` streams many,
sharing chunks between small files, which is much faster on a corpus of small
captures. Flow rules: :mod:`flowsplit.reader.assemble`; decoding decisions:
:mod:`flowsplit.reader.packets`; view definitions: :mod:`flowsplit.reader.views`.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Unpack

import numpy as np
import pandas as pd

from flowsplit.config_args import option_name
from flowsplit.errors import ConfigError
from flowsplit.reader import views as V
from flowsplit.reader.assemble import FlowAssembler, FlowTable
from flowsplit.reader.packets import TUNNEL_MODES, PacketDecoder
from flowsplit.reader.pcap import ReadReport
from flowsplit.reader.staging import WINDOW_PAD, ReadArgs, iter_record_chunks

__all__ = [
    "FlowBatch",
    "FlowOptions",
    "ReadReport",
    "SEQ_FEATURES",
    "STATS_COLUMNS",
    "iter_flows",
    "iter_flows_many",
    "stats_columns",
    "view_shapes",
]

SEQ_FEATURES = V.SEQ_FEATURES
ALL_VIEWS = ("seq", "bytes", "pkt_bytes", "stats")


@dataclass(frozen=True)
class FlowOptions:
    """How packets become flows, and which views of each flow to build."""

    idle_timeout: float = 120.0
    """Seconds without a packet after which the next packet of the key starts a new flow."""
    active_timeout: float = 1800.0
    """Seconds after a flow's first packet after which the next packet starts a new flow."""
    seq_len: int = 32
    """T: packets in the ``seq`` view."""
    n_bytes: int = 784
    """K: payload bytes in the ``bytes`` view."""
    n_pkts: int = 16
    """P: packets in the ``pkt_bytes`` view."""
    pkt_len: int = 64
    """B: bytes per packet in the ``pkt_bytes`` view."""
    pkt_layout: str = "payload"
    """``pkt_bytes`` rows: payload (8 bytes of header fields, then the packet's payload)
    or ip (the first bytes from the IP header on, masked)."""
    mask_ip: bool = True
    """Zero IP addresses in ``pkt_bytes``."""
    mask_port: bool = True
    """Zero ports in ``pkt_bytes``; leave the port columns out of ``stats``."""
    mask_checksum: bool = True
    """Zero the IPv4 header checksum and the TCP/UDP checksum in ``pkt_bytes``."""
    views: tuple[str, ...] = ("seq", "bytes", "pkt_bytes", "stats")
    """Views to build, among seq, bytes, pkt_bytes and stats."""
    vlan_key: bool = True
    """Put the VLAN ids (802.1Q, QinQ) and VXLAN/Geneve network ids in the flow key: one
    5-tuple in two VLANs is two flows."""
    tunnels: str = "inner"
    """inner: open IP-in-IP, GRE/ERSPAN, VXLAN, Geneve and GTP-U, classify the inner flows;
    outer: keep the tunnel's own flow."""
    reassemble: bool = True
    """Reassemble IPv4/IPv6 fragments (else they are counted as ``ip_fragment``)."""
    fragment_timeout: float = 30.0
    """Seconds (capture time) a datagram's fragments are held for the rest to arrive."""

    def __post_init__(self):
        if self.pkt_layout not in V.PKT_LAYOUTS:
            raise ConfigError(
                f"pkt_layout must be one of {', '.join(V.PKT_LAYOUTS)}, got {self.pkt_layout!r}"
            )
        if self.tunnels not in TUNNEL_MODES:
            raise ConfigError(
                f"tunnels must be one of {', '.join(TUNNEL_MODES)}, got {self.tunnels!r}"
            )
        # Messages name the option of `flowsplit prepare` (--idle-timeout for idle_timeout).
        for name in ("idle_timeout", "active_timeout", "fragment_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(
                    f"{option_name(FlowOptions, name)} must be > 0 seconds, got {getattr(self, name)}"
                )
        for name in ("seq_len", "n_bytes", "n_pkts", "pkt_len"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(
                    f"{option_name(FlowOptions, name)} must be >= 1, got {getattr(self, name)}"
                )
        if self.pkt_len > WINDOW_PAD:
            raise ConfigError(f"--pkt-len must be <= {WINDOW_PAD}, got {self.pkt_len}")
        if isinstance(self.views, str):
            raise ConfigError("views must be a tuple of names, e.g. ('seq', 'stats')")
        unknown = [v for v in self.views if v not in ALL_VIEWS]
        if unknown:
            raise ConfigError(f"unknown view(s) {unknown}; choose from {', '.join(ALL_VIEWS)}")


@dataclass
class FlowBatch:
    """Flows of one batch, one row per flow (all arrays of length n)."""

    proto: np.ndarray  # uint8, 6 TCP or 17 UDP
    ip_a: np.ndarray  # object (str), initiator address (unmasked; metadata only)
    port_a: np.ndarray  # uint16 (unmasked; metadata only)
    ip_b: np.ndarray  # object (str), responder address
    port_b: np.ndarray  # uint16
    first_ts: np.ndarray  # float64 seconds
    last_ts: np.ndarray  # float64 seconds (latest packet timestamp)
    n_packets: np.ndarray  # int64
    n_bytes: np.ndarray  # int64, sum of IP lengths
    views: dict[str, np.ndarray]  # "seq" (n, T, F), "bytes" (n, K), "pkt_bytes" (n, P, B)
    stats: pd.DataFrame | None  # float32 columns, when "stats" was requested
    source: np.ndarray = field(default=None)  # int32, index of the file in the input list
    first_index: np.ndarray = field(default=None)  # int64, record number of the first packet

    def __len__(self) -> int:
        return len(self.proto)

    def take(self, idx) -> FlowBatch:
        """The flows at ``idx`` (indices or a boolean mask), every array and view alike."""
        idx = np.asarray(idx)
        pick = np.flatnonzero(idx) if idx.dtype == bool else idx
        arrays = {k: getattr(self, k)[pick] for k in _ROW_FIELDS if getattr(self, k) is not None}
        stats = None if self.stats is None else self.stats.iloc[pick].reset_index(drop=True)
        return FlowBatch(**arrays, views={k: v[pick] for k, v in self.views.items()}, stats=stats)

    def keys(self) -> list[str]:
        """``L4|ipA|portA|ipB|portB`` per flow (initiator first)."""
        l4 = np.where(self.proto == 6, "TCP", "UDP")
        return [
            f"{p}|{a}|{pa}|{b}|{pb}"
            for p, a, pa, b, pb in zip(
                l4.tolist(),
                self.ip_a.tolist(),
                self.port_a.tolist(),
                self.ip_b.tolist(),
                self.port_b.tolist(),
                strict=True,
            )
        ]


_ROW_FIELDS = (
    "proto",
    "ip_a",
    "port_a",
    "ip_b",
    "port_b",
    "first_ts",
    "last_ts",
    "n_packets",
    "n_bytes",
    "source",
    "first_index",
)


def stats_columns(options: FlowOptions | None = None) -> tuple[str, ...]:
    """Columns of the ``stats`` view for these options (ports only when unmasked)."""
    return V.stats_columns((options or FlowOptions()).mask_port)


STATS_COLUMNS = stats_columns()


def view_shapes(options: FlowOptions) -> dict[str, tuple[int, ...]]:
    """Per-flow shapes of the requested tensor views (``stats`` has its own columns)."""
    shapes = {
        "seq": (options.seq_len, len(SEQ_FEATURES)),
        "bytes": (options.n_bytes,),
        "pkt_bytes": (options.n_pkts, options.pkt_len),
    }
    return {k: v for k, v in shapes.items() if k in options.views}


def iter_flows(
    path: str | Path, options: FlowOptions, report: ReadReport, **read: Unpack[ReadArgs]
) -> Iterator[FlowBatch]:
    """Stream the flows of one capture, in batches, with bounded memory.

    File-level problems raise :class:`~flowsplit.errors.InputError` (possibly after
    some batches were yielded); per-record problems are counted in
    ``report.skipped`` (``strict=True``: raised as InputError). ``read``: as for
    :func:`iter_flows_many`.
    """
    yield from iter_flows_many([path], options, report, **read)


def iter_flows_many(
    paths: Sequence[str | Path],
    options: FlowOptions,
    report: ReadReport,
    **read: Unpack[ReadArgs],
) -> Iterator[FlowBatch]:
    """Stream the flows of several captures; ``batch.source`` indexes ``paths``.

    Small files share chunks, so this is much faster than one :func:`iter_flows` per
    file. A flow's packets all come from one file. ``read``
    (:class:`~flowsplit.reader.staging.ReadArgs`): ``strict``, ``chunk_bytes``,
    ``on_error`` and ``digests``. With ``on_error="skip"`` a file with a file-level
    problem is recorded in ``report.file_errors`` and ends where the problem is; the
    flows read before it are kept.
    """
    assembler = FlowAssembler(options)
    decoder = PacketDecoder(
        report,
        strict=read.get("strict", False),
        vlan_key=options.vlan_key,
        tunnels=options.tunnels,
        reassemble=options.reassemble,
        fragment_timeout=options.fragment_timeout,
    )
    for chunk in iter_record_chunks(paths, report, **read):
        pk, sb = decoder.decode(chunk)
        report.n_flow_packets += len(pk)
        for done in assembler.add_chunk(pk, sb, chunk.ended):
            if len(done):
                yield _to_batch(done, options, report)
    done = assembler.finish()
    if done is not None and len(done):
        yield _to_batch(done, options, report)


def _to_batch(t: FlowTable, options: FlowOptions, report: ReadReport) -> FlowBatch:
    c = t.cols  # already ordered by (file, first packet)
    acc = c["acc"]
    report.n_flows += len(acc)
    bytes_ = acc[:, V.ACC["bytes_fwd"]] + acc[:, V.ACC["bytes_bwd"]]
    stats = None
    if "stats" in options.views:
        stats = V.stats_frame(
            acc, c["first_ts"], c["proto"] == 6, c["port_a"], c["port_b"], options.mask_port
        )
    return FlowBatch(
        proto=c["proto"].astype(np.uint8),
        ip_a=format_ips(c["ver"], c["a_hi"], c["a_lo"]),
        port_a=c["port_a"].astype(np.uint16),
        ip_b=format_ips(c["ver"], c["b_hi"], c["b_lo"]),
        port_b=c["port_b"].astype(np.uint16),
        first_ts=c["first_ts"],
        last_ts=acc[:, V.ACC["last_ts"]].copy(),
        n_packets=c["n"].astype(np.int64),
        n_bytes=bytes_.astype(np.int64),
        views={v: c[v] for v in ("seq", "bytes", "pkt_bytes") if v in options.views},
        stats=stats,
        source=c["src"].astype(np.int32),
        first_index=c["first_index"].astype(np.int64),
    )


_V4_NAMES: dict[int, str] = {}  # IPv4 address -> text, reused across batches (bounded)


def format_ips(ver: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Addresses as strings (object array); IPv4 is stored as ::ffff:a.b.c.d."""
    out = np.empty(len(ver), dtype=object)
    v4 = ver == 4
    if v4.any():
        u, inv = np.unique(lo[v4] & np.uint64(0xFFFFFFFF), return_inverse=True)
        cache = _V4_NAMES if len(_V4_NAMES) < 1 << 16 else _V4_NAMES.clear() or _V4_NAMES
        names = [
            cache.get(x) or cache.setdefault(x, socket.inet_ntoa(x.to_bytes(4, "big")))
            for x in u.tolist()
        ]
        out[v4] = np.array(names, dtype=object)[inv]
    if not v4.all():
        v6 = np.flatnonzero(~v4)
        cache: dict[tuple[int, int], str] = {}
        for i, a, b in zip(v6.tolist(), hi[v6].tolist(), lo[v6].tolist(), strict=True):
            s = cache.get((a, b))
            if s is None:
                s = cache[(a, b)] = socket.inet_ntop(
                    socket.AF_INET6, a.to_bytes(8, "big") + b.to_bytes(8, "big")
                )
            out[i] = s
    return out
