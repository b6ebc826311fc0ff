"""Perturbations of stored view rows: what a shortcut ablation or an augmentation changes.

Each function takes a batch of rows of one view (a NumPy array, one row per flow, as
the dataset stores it), a :class:`numpy.random.Generator`, and returns a new array of
the same shape and dtype; the input is never modified. They know the views' layouts:

- ``pkt_bytes``, ``payload`` layout (:func:`flowsplit.reader.views.payload_rows`): per
  packet row, byte 0 direction (0 = padding row), 1-2 IP length, 3 protocol, 4 TCP
  flags, 5 transport header length, 6-7 TCP window, then the payload from byte 8.
- ``pkt_bytes``, ``ip`` layout: the first bytes from the IP header on (addresses, ports
  and checksums already zeroed); the IP version, header lengths and protocol are read
  from each row, so IPv4 with options, IPv6 and TCP options are found per packet.
- ``bytes``: the flow's first payload bytes; ``seq``: one row of per-packet features
  (``SEQ_FEATURES``); ``stats``: one row of named flow statistics.

"Per-session" header fields are what changes from one session (or host) to the next
and says nothing of the application: IP identification, TTL / hop limit, TCP
sequence and acknowledgement numbers, TCP window, TCP timestamps. A random
*offset per flow* (IP ID, seq/ack, timestamps: what another session's initial values
would give, the steps within the flow kept), a random *value per flow* (TTL) or per
packet (window) replaces them.
"""

from __future__ import annotations

import numpy as np

from flowsplit.reader.views import PKT_FIELDS, SEQ_FEATURES

TCP, UDP = 6, 17


# --- rows and packets ---------------------------------------------------------------
def packet_present(x: np.ndarray, view: str, features=SEQ_FEATURES) -> np.ndarray:
    """(N, P) bool: which packet rows of a ``pkt_bytes`` or ``seq`` batch hold a packet."""
    if view == "seq":
        return x[..., list(features).index("mask")] > 0
    return x.any(axis=-1)


def within_flow_order(present: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(N, P) indices: a random permutation of each flow's packets (present rows come
    first, in the views); padding rows stay where they are."""
    keys = np.where(present, rng.random(present.shape), 2.0 + np.arange(present.shape[1]))
    return np.argsort(keys, axis=1, kind="stable")


def _take_packets(x: np.ndarray, order: np.ndarray) -> np.ndarray:
    idx = order.reshape(*order.shape, *([1] * (x.ndim - 2)))
    return np.take_along_axis(x, idx, axis=1)


def shuffle_packets(x: np.ndarray, view: str, rng, features=SEQ_FEATURES) -> np.ndarray:
    """Each flow's packets (whole rows) in a random order."""
    return _take_packets(x, within_flow_order(packet_present(x, view, features), rng))


# --- pkt_bytes, ip layout: where each row's headers are ----------------------------
def ip_layout_offsets(x: np.ndarray) -> dict[str, np.ndarray]:
    """Per packet row of an ip-layout batch (N, P, B): version, transport offset,
    protocol, payload offset (all int64 (N, P); 0 / -1 where unknown)."""
    width = x.shape[-1]
    b = x.astype(np.int64)
    ver = b[..., 0] >> 4
    v4, v6 = ver == 4, ver == 6
    l4 = np.where(v4, (b[..., 0] & 15) * 4, np.where(v6, 40, 0))
    proto = np.where(v4, b[..., min(9, width - 1)], np.where(v6, b[..., min(6, width - 1)], -1))
    tcp = proto == TCP
    doff_at = np.clip(l4 + 12, 0, width - 1)
    thl = np.where(
        tcp,
        (np.take_along_axis(b, doff_at[..., None], -1)[..., 0] >> 4) * 4,
        np.where(proto == UDP, 8, 0),
    )
    thl = np.where(tcp & (thl < 20), 20, thl)
    pay = np.where((v4 | v6) & (thl > 0), l4 + thl, width)
    return {"ver": ver, "l4": l4, "proto": proto, "payload": np.minimum(pay, width)}


def _cols_mask(start: np.ndarray, stop: np.ndarray, width: int) -> np.ndarray:
    """(N, P, B) bool: start <= column < stop, per row."""
    col = np.arange(width)
    return (col >= start[..., None]) & (col < stop[..., None])


def _add_offset_be(x: np.ndarray, at: np.ndarray, n: int, offset: np.ndarray, ok: np.ndarray):
    """Add ``offset`` (per row, broadcast (N, P)) to the big-endian ``n``-byte field at
    column ``at`` of each row where ``ok`` (and the field lies inside the row), mod 2^(8n)."""
    width = x.shape[-1]
    ok = ok & (at >= 0) & (at + n <= width)
    if not ok.any():
        return
    i, j = np.nonzero(ok)
    cols = at[i, j][:, None] + np.arange(n)[None, :]
    raw = x[i[:, None], j[:, None], cols].astype(np.uint64)
    value = np.zeros(len(i), dtype=np.uint64)
    for k in range(n):
        value = (value << np.uint64(8)) | raw[:, k]
    value = (value + np.asarray(offset, dtype=np.uint64)[i, j]) & np.uint64((1 << (8 * n)) - 1)
    for k in range(n - 1, -1, -1):
        x[i, j, at[i, j] + k] = (value & np.uint64(0xFF)).astype(np.uint8)
        value >>= np.uint64(8)


def _per_flow(rng, n_flows: int, n_pkts: int, high: int) -> np.ndarray:
    """One random integer in [0, high) per flow, repeated over its packets: (N, P)."""
    return np.repeat(rng.integers(0, high, size=(n_flows, 1), dtype=np.uint64), n_pkts, 1)


def ip_field(x: np.ndarray, field: str, rng) -> np.ndarray:
    """One per-session header field of an ip-layout ``pkt_bytes`` batch randomised.

    ``ip_id`` (IPv4 identification; IPv6 flow label): random offset per flow;
    ``ttl`` (TTL / hop limit): random value per flow; ``seq_ack`` (TCP sequence and
    acknowledgement numbers): random offset per flow; ``window`` (TCP window): random
    per packet; ``tcp_options``: the options replaced by no-ops (kind 1);
    ``tcp_timestamps``: TSval and TSecr, random offset per flow.
    """
    out = np.array(x, copy=True)
    n, p, width = out.shape
    at = ip_layout_offsets(out)
    ver, l4, proto = at["ver"], at["l4"], at["proto"]
    v4, v6, tcp = ver == 4, ver == 6, (proto == TCP) & (ver > 0)
    if field == "ip_id":
        _add_offset_be(out, np.full_like(l4, 4), 2, _per_flow(rng, n, p, 1 << 16), v4)
        label = _per_flow(rng, n, p, 1 << 20)
        _add_offset_be(out, np.full_like(l4, 1), 3, label, v6)  # low 20 bits + nibble
    elif field == "ttl":
        value = _per_flow(rng, n, p, 256).astype(np.uint8)
        for col, rows in ((8, v4), (7, v6)):
            if col < width:
                out[..., col] = np.where(rows, value, out[..., col])
    elif field == "seq_ack":
        _add_offset_be(out, l4 + 4, 4, _per_flow(rng, n, p, 1 << 32), tcp)
        _add_offset_be(out, l4 + 8, 4, _per_flow(rng, n, p, 1 << 32), tcp)
    elif field == "window":
        _add_offset_be(out, l4 + 14, 2, rng.integers(0, 1 << 16, (n, p), dtype=np.uint64), tcp)
    elif field == "tcp_options":
        region = _cols_mask(l4 + 20, at["payload"], width) & tcp[..., None]
        out[region] = 1
    elif field == "tcp_timestamps":
        for pos, rows in _tcp_timestamp_options(out, l4, at["payload"], tcp):
            offsets = _per_flow(rng, n, p, 1 << 32)
            _add_offset_be(out, pos + 2, 4, offsets, rows)
            _add_offset_be(out, pos + 6, 4, offsets, rows)
    else:
        raise ValueError(f"unknown ip-layout field {field!r}")
    return out


def _tcp_timestamp_options(x, l4, payload, tcp):
    """Yield (position, rows) of TCP timestamp options (kind 8, length 10), walking
    every row's options at once."""
    width = x.shape[-1]
    pos = np.where(tcp, l4 + 20, width)
    for _ in range(40):  # at most 40 option bytes
        live = pos < np.minimum(payload, width)
        if not live.any():
            return
        safe = np.minimum(pos, width - 1)
        kind = np.take_along_axis(x, safe[..., None], -1)[..., 0].astype(np.int64)
        nxt = np.minimum(pos + 1, width - 1)
        length = np.take_along_axis(x, nxt[..., None], -1)[..., 0].astype(np.int64)
        is_ts = live & (kind == 8) & (length == 10) & (pos + 10 <= payload)
        if is_ts.any():
            yield pos, is_ts
        step = np.where(kind <= 1, 1, np.maximum(length, 2))
        pos = np.where(live & (kind != 0), pos + step, width)


# --- pkt_bytes: headers vs payload ---------------------------------------------------
def pkt_payload_start(x: np.ndarray, layout: str) -> np.ndarray:
    """(N, P) column where each packet row's payload starts."""
    if layout == "payload":
        return np.full(x.shape[:2], min(PKT_FIELDS, x.shape[-1]), dtype=np.int64)
    return ip_layout_offsets(x)["payload"]


def headers_only(x: np.ndarray, layout: str) -> np.ndarray:
    """Every packet's payload bytes zeroed (the header part kept)."""
    start = pkt_payload_start(x, layout)
    out = np.array(x, copy=True)
    out[_cols_mask(start, np.full_like(start, x.shape[-1]), x.shape[-1])] = 0
    return out


def payload_only(x: np.ndarray, layout: str) -> np.ndarray:
    """Every packet's header bytes zeroed, except what marks a row as a packet (payload
    layout: byte 0 becomes 1 for every packet, so direction goes too; ip layout: the
    version nibble)."""
    start = pkt_payload_start(x, layout)
    out = np.array(x, copy=True)
    present = packet_present(x, "pkt_bytes")
    out[_cols_mask(np.zeros_like(start), start, x.shape[-1])] = 0
    if layout == "payload":
        out[..., 0] = present.astype(np.uint8)
    else:
        out[..., 0] = x[..., 0] & 0xF0
    return out


def mask_payload_prefix(x: np.ndarray, view: str, layout: str | None, k: int) -> np.ndarray:
    """The first ``k`` payload bytes zeroed: of the flow (``bytes``) or of every packet
    (``pkt_bytes``): a TLS ClientHello's SNI, an HTTP request line."""
    out = np.array(x, copy=True)
    if view == "bytes":
        out.reshape(len(out), -1)[:, :k] = 0
        return out
    start = pkt_payload_start(x, layout or "payload")
    out[_cols_mask(start, start + k, x.shape[-1])] = 0
    return out


def payload_window(x: np.ndarray, rng, *, low: int = 1, high: int = 1 << 16) -> np.ndarray:
    """Payload layout: the TCP window (bytes 6-7) of every TCP packet random per packet."""
    out = np.array(x, copy=True)
    tcp = (out[..., 0] > 0) & (out[..., 3] == TCP)
    value = rng.integers(low, high, size=tcp.shape)
    out[..., 6] = np.where(tcp, value >> 8, out[..., 6])
    out[..., 7] = np.where(tcp, value & 0xFF, out[..., 7])
    return out


def payload_sizes_shuffled(x: np.ndarray, rng) -> np.ndarray:
    """Payload layout: the IP lengths (bytes 1-2) permuted among each flow's packets."""
    present = packet_present(x, "pkt_bytes")
    order = within_flow_order(present, rng)
    out = np.array(x, copy=True)
    moved = _take_packets(x, order)
    out[..., 1:3] = np.where(present[..., None], moved[..., 1:3], out[..., 1:3])
    return out


# --- seq: sizes and timing --------------------------------------------------------------
def seq_shuffled(x: np.ndarray, what: str, rng, features=SEQ_FEATURES) -> np.ndarray:
    """``timing``: the inter-arrival times permuted among each flow's packets;
    ``sizes``: the packet and payload sizes permuted (each packet keeps its direction)."""
    features = list(features)
    present = packet_present(x, "seq", features)
    moved = _take_packets(x, within_flow_order(present, rng))
    out = np.array(x, copy=True)
    if what == "timing":
        c = features.index("log_iat")
        out[..., c] = np.where(present, moved[..., c], out[..., c])
    elif what == "sizes":
        s, p = features.index("size"), features.index("payload")
        sign = np.where(x[..., s] < 0, -1.0, 1.0)
        out[..., s] = np.where(present, sign * np.abs(moved[..., s]), out[..., s])
        out[..., p] = np.where(present, moved[..., p], out[..., p])
    else:
        raise ValueError(f"unknown seq shuffle {what!r}")
    return out


# --- stats: column groups ---------------------------------------------------------------
STATS_GROUPS = {
    "timing": lambda c: c == "duration" or c.startswith("iat") or c.endswith("_per_s"),
    "sizes": lambda c: (
        c.startswith(("size", "bytes", "payload_bytes")) or c == "bytes_down_up_ratio"
    ),
    "counts": lambda c: c.startswith("pkts") or c in ("down_up_ratio",) or "payload_pkts" in c,
    "flags": lambda c: c.endswith("_count"),
    "header_fields": lambda c: c.startswith("init_win"),
}
"""Groups of ``stats`` columns an ablation permutes across flows."""


def stats_permuted(x: np.ndarray, columns, group: str, rng) -> np.ndarray:
    """The columns of ``group`` (:data:`STATS_GROUPS`) permuted across flows (each
    column keeps its distribution; its tie to the flow's class goes)."""
    cols = [i for i, c in enumerate(columns) if STATS_GROUPS[group](str(c))]
    out = np.array(x, copy=True)
    if cols and len(out) > 1:
        out[:, cols] = out[rng.permutation(len(out))][:, cols]
    return out
