"""Per-flow views: packet sequences, payload bytes, packet bytes and statistics.

All views are built with vectorised NumPy over the packets of a chunk, sorted so
that each flow's packets are contiguous and in capture order. A flow that spans
chunks carries its partial views and mergeable statistics accumulators (counts,
sums, sums of squares, minima, maxima, firsts and lasts) to the next chunk, so
streaming gives exactly what reading the whole file at once gives.

``seq`` (float32, (T, F)) has one row per packet, for the first T packets:

- ``size``: IP length, positive from the initiator (a), negative from b;
- ``log_iat``: ln(1 + time since the flow's previous packet in microseconds),
  0 for the first packet (and for timestamps that go backwards);
- ``fin`` ``syn`` ``rst`` ``psh`` ``ack`` ``urg``: TCP flag bits as 0/1 (0 for UDP);
- ``payload``: transport payload length on the wire;
- ``mask``: 1 for a packet, 0 for padding rows.

``bytes`` (uint8, (K,)): the first K transport-payload bytes of the flow, both
directions, in packet order, zero-padded. ``pkt_bytes`` (uint8, (P, B)): one row
for each of the first P packets. In the ``payload`` layout (the default) a row is
8 bytes of header fields (direction, IP length, protocol, TCP flags, transport
header length, TCP window) and then the packet's first B - 8 transport-payload
bytes (:func:`payload_rows`); in the ``ip`` layout the first B bytes from the IP
header, zero past the captured IP packet, with IP addresses, ports and checksums
(IPv4 header, TCP/UDP) zeroed, each mask a switch. ``stats``: see
:func:`stats_columns` (over all packets of the flow).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from flowsplit.reader import protocols as P

# the compiled copies, built by `pip install`; without them NumPy copies in blocks
from flowsplit.reader.kernel import compiled as _kernel

SEQ_FEATURES = ("size", "log_iat", "fin", "syn", "rst", "psh", "ack", "urg", "payload", "mask")
_FLAG_NAMES = ("fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr")
_LANE_BITS = 21
_LANE_MASK = np.uint64((1 << _LANE_BITS) - 1)
_FLAG_LUTS = [
    np.array(
        [
            sum(((v >> (3 * w + k)) & 1) << (_LANE_BITS * k) for k in range(3) if 3 * w + k < 8)
            for v in range(256)
        ],
        dtype=np.uint64,
    )
    for w in range(3)
]

_STATS_BASE = (
    "duration",
    "pkts", "pkts_fwd", "pkts_bwd",
    "bytes", "bytes_fwd", "bytes_bwd",
    "payload_bytes", "payload_bytes_fwd", "payload_bytes_bwd",
    "payload_pkts_fwd", "payload_pkts_bwd",
    *(f"size{d}_{s}" for d in ("", "_fwd", "_bwd") for s in ("min", "mean", "std", "max")),
    *(f"iat{d}_{s}" for d in ("", "_fwd", "_bwd") for s in ("min", "mean", "std", "max")),
    *(f"{f}_count" for f in _FLAG_NAMES),
    "pkts_per_s", "bytes_per_s", "down_up_ratio", "bytes_down_up_ratio",
    "init_win_fwd", "init_win_bwd", "is_tcp",
)  # fmt: skip
PORT_COLUMNS = ("port_server", "port_client")


def stats_columns(mask_port: bool = True) -> tuple[str, ...]:
    """Columns of the ``stats`` view; the server and client ports only when unmasked."""
    return _STATS_BASE if mask_port else (*_STATS_BASE, *PORT_COLUMNS)


# Accumulator columns, by how two partial accumulators of one flow merge.
SUM_COLS = (
    "n_fwd", "n_bwd", "bytes_fwd", "bytes_bwd", "sq_fwd", "sq_bwd",
    "pay_fwd", "pay_bwd", "paypk_fwd", "paypk_bwd",
    "iat_n", "iat_sum", "iat_sq", "iatf_n", "iatf_sum", "iatf_sq", "iatb_n", "iatb_sum", "iatb_sq",
    *_FLAG_NAMES,
)  # fmt: skip
MIN_COLS = ("min_fwd", "min_bwd", "iat_min", "iatf_min", "iatb_min")
MAX_COLS = ("max_fwd", "max_bwd", "iat_max", "iatf_max", "iatb_max", "last_ts")
FIRST_COLS = ("win_fwd", "win_bwd")  # NaN until seen
LAST_COLS = ("last_fwd_ts", "last_bwd_ts")  # NaN until seen
ACC_COLS = (*SUM_COLS, *MIN_COLS, *MAX_COLS, *FIRST_COLS, *LAST_COLS)
ACC = {name: i for i, name in enumerate(ACC_COLS)}
"""Column of each accumulator in the (flows, len(ACC_COLS)) accumulator array."""
_SUMS = slice(0, len(SUM_COLS))
_MINS = slice(_SUMS.stop, _SUMS.stop + len(MIN_COLS))
_MAXES = slice(_MINS.stop, _MINS.stop + len(MAX_COLS))
_FIRSTS = slice(_MAXES.stop, _MAXES.stop + len(FIRST_COLS))
_LASTS = slice(_FIRSTS.stop, _FIRSTS.stop + len(LAST_COLS))


def empty_acc(n: int) -> np.ndarray:
    """Accumulators of n flows with no packets: float64 (n, len(ACC_COLS))."""
    acc = np.zeros((n, len(ACC_COLS)))
    acc[:, _MINS] = np.inf
    acc[:, _MAXES] = -np.inf
    acc[:, _FIRSTS] = np.nan
    acc[:, _LASTS] = np.nan
    return acc


@dataclass
class FlowPackets:
    """A chunk's packets grouped by flow: each flow's packets contiguous, in capture order.

    All arrays have one entry per packet (length n) except ``fs`` (one per flow).
    """

    order: np.ndarray  # int64, position of each packet in the chunk's decoded Packets
    fs: np.ndarray  # int64 (flows,), position of each flow's first packet
    fid: np.ndarray  # int64, each packet's flow (index into fs)
    fwd: np.ndarray  # bool, sent by the flow's initiator
    rank: np.ndarray  # int64, place in its flow, counted from the flow's very first packet
    ts: np.ndarray  # float64, seconds
    prev_ts: np.ndarray  # float64, time of the flow's previous packet (NaN: none)
    prev_dir: np.ndarray  # float64, ... of its previous packet in the same direction
    size: np.ndarray  # float64, IP length
    pay: np.ndarray  # float64, transport payload length on the wire
    pay_cap: np.ndarray  # int64, payload bytes captured
    flags: np.ndarray  # uint8, TCP flags (0 for UDP)
    window: np.ndarray  # int64, TCP window (0 for UDP)
    tcp: np.ndarray  # bool, the packet's flow is TCP


@dataclass
class FlowRows:
    """Where a chunk's flows go in the output, and what continuing flows bring along."""

    row: np.ndarray  # int64, output row of each packet's flow
    fill_before: np.ndarray  # int64 (flows,), ``bytes`` already filled by earlier chunks
    cont_rows: np.ndarray  # int64, output rows of the flows continued from earlier chunks
    carried: dict[str, np.ndarray]  # view -> those flows' partial views, in cont_rows order


def accumulate(fp: FlowPackets) -> np.ndarray:
    """Accumulators of the packets of each flow of ``fp`` (one row per flow)."""
    n, nf = len(fp.ts), len(fp.fs)
    if n == 0:
        return empty_acc(nf)
    acc = np.empty((nf, len(ACC_COLS)))
    if _kernel is not None:  # one compiled pass, the same values bit for bit
        u8 = [np.ascontiguousarray(a).view(np.uint8) for a in (fp.fwd, fp.flags, fp.tcp)]
        f64 = [np.ascontiguousarray(a, dtype=np.float64) for a in (fp.size, fp.pay, fp.ts)]
        prev = [np.ascontiguousarray(a, dtype=np.float64) for a in (fp.prev_ts, fp.prev_dir)]
        fs = np.ascontiguousarray(fp.fs, dtype=np.int64)
        window = np.ascontiguousarray(fp.window, dtype=np.int64)
        _kernel.accumulate(
            fs, u8[0], *f64, *prev, u8[1], window, u8[2], np.empty(n), np.empty(n), acc
        )
        return acc
    _acc_sizes(acc, fp)
    _acc_iats(acc, fp)
    _acc_flags(acc, fp.flags, fp.fs)
    _acc_firsts_lasts(acc, fp)
    return acc


class _ByDirection:
    """Sums per (flow, direction): even bins forward, odd bins backward."""

    def __init__(self, acc: np.ndarray, fp: FlowPackets):
        self.acc, self.nf = acc, len(fp.fs)
        self.bins = 2 * fp.fid + ~fp.fwd

    def put(self, names: tuple[str, str], weights=None, sel=None) -> None:
        bins = self.bins if sel is None else self.bins[sel]
        w = weights if sel is None or weights is None else weights[sel]
        sums = np.bincount(bins, weights=w, minlength=2 * self.nf).reshape(self.nf, 2)
        self.acc[:, ACC[names[0]]], self.acc[:, ACC[names[1]]] = sums[:, 0], sums[:, 1]


def _acc_sizes(acc: np.ndarray, fp: FlowPackets) -> None:
    by_dir = _ByDirection(acc, fp)
    size, fwd, bwd, inf = fp.size, fp.fwd, ~fp.fwd, np.inf
    by_dir.put(("n_fwd", "n_bwd"))
    by_dir.put(("bytes_fwd", "bytes_bwd"), size)
    by_dir.put(("sq_fwd", "sq_bwd"), size * size)
    by_dir.put(("pay_fwd", "pay_bwd"), fp.pay)
    by_dir.put(("paypk_fwd", "paypk_bwd"), sel=fp.pay > 0)
    extremes = (
        ("min_fwd", np.where(fwd, size, inf), np.minimum),
        ("min_bwd", np.where(bwd, size, inf), np.minimum),
        ("max_fwd", np.where(fwd, size, -inf), np.maximum),
        ("max_bwd", np.where(bwd, size, -inf), np.maximum),
        ("last_ts", fp.ts, np.maximum),
    )
    for name, x, op in extremes:
        acc[:, ACC[name]] = op.reduceat(x, fp.fs)


def _acc_iats(acc: np.ndarray, fp: FlowPackets) -> None:
    """Inter-arrival times; a timestamp going backwards counts as no time passed."""
    fs, fwd, bwd, inf = fp.fs, fp.fwd, ~fp.fwd, np.inf
    iat = np.maximum(fp.ts - fp.prev_ts, 0.0)  # NaN: a flow's first packet
    has = ~np.isnan(iat)
    iat0 = np.where(has, iat, 0.0)
    acc[:, ACC["iat_n"]] = np.add.reduceat(has, fs, dtype=np.float64)
    acc[:, ACC["iat_sum"]] = np.add.reduceat(iat0, fs)
    acc[:, ACC["iat_sq"]] = np.add.reduceat(iat0 * iat0, fs)
    acc[:, ACC["iat_min"]] = np.minimum.reduceat(np.where(has, iat, inf), fs)
    acc[:, ACC["iat_max"]] = np.maximum.reduceat(iat0, fs)
    iat = np.maximum(fp.ts - fp.prev_dir, 0.0)
    has = ~np.isnan(iat)
    iat0 = np.where(has, iat, 0.0)
    by_dir = _ByDirection(acc, fp)
    by_dir.put(("iatf_n", "iatb_n"), sel=has)
    by_dir.put(("iatf_sum", "iatb_sum"), iat0)
    by_dir.put(("iatf_sq", "iatb_sq"), iat0 * iat0)
    lone = np.where(has, iat, inf)
    acc[:, ACC["iatf_min"]] = np.minimum.reduceat(np.where(fwd, lone, inf), fs)
    acc[:, ACC["iatb_min"]] = np.minimum.reduceat(np.where(bwd, lone, inf), fs)
    acc[:, ACC["iatf_max"]] = np.maximum.reduceat(np.where(fwd, iat0, 0.0), fs)
    acc[:, ACC["iatb_max"]] = np.maximum.reduceat(np.where(bwd, iat0, 0.0), fs)


def _acc_flags(acc: np.ndarray, flags: np.ndarray, fs: np.ndarray) -> None:
    """Count of each TCP flag per flow."""
    if len(flags) < (1 << _LANE_BITS):
        # Three flag bits per 64-bit word, one 21-bit lane each: 3 sums instead of 8
        # (a lane cannot overflow below 2**21 packets per chunk).
        for w, lut in enumerate(_FLAG_LUTS):
            sums = np.add.reduceat(lut[flags], fs)
            for lane in range(3):
                if 3 * w + lane < 8:
                    field = (sums >> np.uint64(_LANE_BITS * lane)) & _LANE_MASK
                    acc[:, ACC[_FLAG_NAMES[3 * w + lane]]] = field
    else:
        for bit, name in enumerate(_FLAG_NAMES):
            acc[:, ACC[name]] = np.add.reduceat((flags >> bit) & 1, fs, dtype=np.int64)


def _acc_firsts_lasts(acc: np.ndarray, fp: FlowPackets) -> None:
    """First TCP window and last timestamp per direction, by position in the flow."""
    n, fs, fwd, bwd = len(fp.ts), fp.fs, fp.fwd, ~fp.fwd
    pos = np.arange(n)
    tcp_pos = np.where(fp.tcp, pos, n)
    ends = np.empty((4, len(fs)), dtype=np.int64)
    ends[0] = np.minimum.reduceat(np.where(fwd, tcp_pos, n), fs)
    ends[1] = np.minimum.reduceat(np.where(bwd, tcp_pos, n), fs)
    ends[2] = np.maximum.reduceat(np.where(fwd, pos, -1), fs)
    ends[3] = np.maximum.reduceat(np.where(bwd, pos, -1), fs)
    ends[ends < 0] = n
    win = np.append(fp.window.astype(np.float64), np.nan)
    tsx = np.append(fp.ts, np.nan)
    acc[:, ACC["win_fwd"]] = win[ends[0]]
    acc[:, ACC["win_bwd"]] = win[ends[1]]
    acc[:, ACC["last_fwd_ts"]] = tsx[ends[2]]
    acc[:, ACC["last_bwd_ts"]] = tsx[ends[3]]


def merge_acc(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Accumulators of a flow's earlier packets (``old``) followed by later ones."""
    out = np.empty_like(old)
    out[:, _SUMS] = old[:, _SUMS] + new[:, _SUMS]
    out[:, _MINS] = np.minimum(old[:, _MINS], new[:, _MINS])
    out[:, _MAXES] = np.maximum(old[:, _MAXES], new[:, _MAXES])
    out[:, _FIRSTS] = np.where(np.isnan(old[:, _FIRSTS]), new[:, _FIRSTS], old[:, _FIRSTS])
    out[:, _LASTS] = np.where(np.isnan(new[:, _LASTS]), old[:, _LASTS], new[:, _LASTS])
    return out


def stats_frame(acc: np.ndarray, first_ts, is_tcp, port_a, port_b, mask_port) -> pd.DataFrame:
    """The ``stats`` view of finished flows from their accumulators (float32 columns)."""
    if _kernel is not None:  # the same arithmetic, one compiled pass
        arr = np.empty((len(acc), len(stats_columns(mask_port))), dtype=np.float32)
        _kernel.stats_rows(
            np.ascontiguousarray(acc, dtype=np.float64),
            np.ascontiguousarray(first_ts, dtype=np.float64),
            np.ascontiguousarray(is_tcp, dtype=bool).view(np.uint8),
            np.ascontiguousarray(port_a, dtype=np.int64),
            np.ascontiguousarray(port_b, dtype=np.int64),
            mask_port,
            arr,
        )
        return pd.DataFrame(arr, columns=_column_index(stats_columns(mask_port)), copy=False)
    c = {name: acc[:, i] for i, name in enumerate(ACC_COLS)}
    nf, nb = c["n_fwd"], c["n_bwd"]
    n = nf + nb
    bf, bb = c["bytes_fwd"], c["bytes_bwd"]
    dur = c["last_ts"] - first_ts
    out: dict[str, np.ndarray] = {"duration": dur}
    out.update(pkts=n, pkts_fwd=nf, pkts_bwd=nb, bytes=bf + bb, bytes_fwd=bf, bytes_bwd=bb)
    out.update(
        payload_bytes=c["pay_fwd"] + c["pay_bwd"],
        payload_bytes_fwd=c["pay_fwd"],
        payload_bytes_bwd=c["pay_bwd"],
        payload_pkts_fwd=c["paypk_fwd"],
        payload_pkts_bwd=c["paypk_bwd"],
    )
    sizes = {
        "": (
            n,
            bf + bb,
            c["sq_fwd"] + c["sq_bwd"],
            np.minimum(c["min_fwd"], c["min_bwd"]),
            np.maximum(c["max_fwd"], c["max_bwd"]),
        ),
        "_fwd": (nf, bf, c["sq_fwd"], c["min_fwd"], c["max_fwd"]),
        "_bwd": (nb, bb, c["sq_bwd"], c["min_bwd"], c["max_bwd"]),
    }
    for d, moments in sizes.items():
        out.update(_summary(f"size{d}", *moments))
    for d, p in (("", "iat"), ("_fwd", "iatf"), ("_bwd", "iatb")):
        out.update(
            _summary(
                f"iat{d}", c[f"{p}_n"], c[f"{p}_sum"], c[f"{p}_sq"], c[f"{p}_min"], c[f"{p}_max"]
            )
        )
    for f in _FLAG_NAMES:
        out[f"{f}_count"] = c[f]
    pos = dur > 0
    safe = np.where(pos, dur, 1.0)
    out["pkts_per_s"] = np.where(pos, n / safe, 0.0)
    out["bytes_per_s"] = np.where(pos, (bf + bb) / safe, 0.0)
    out["down_up_ratio"] = nb / np.maximum(nf, 1)
    out["bytes_down_up_ratio"] = bb / np.maximum(bf, 1)
    out["init_win_fwd"] = np.where(np.isnan(c["win_fwd"]), 0.0, c["win_fwd"])
    out["init_win_bwd"] = np.where(np.isnan(c["win_bwd"]), 0.0, c["win_bwd"])
    out["is_tcp"] = is_tcp.astype(np.float64)
    if not mask_port:
        out["port_server"] = port_b
        out["port_client"] = port_a
    arr = np.empty((len(acc), len(out)), dtype=np.float32)
    for j, v in enumerate(out.values()):
        arr[:, j] = v
    return pd.DataFrame(arr, columns=_column_index(tuple(out)), copy=False)


@functools.cache
def _column_index(names: tuple[str, ...]) -> pd.Index:
    """The stats columns as one shared Index: building it from a list of names each
    time costs pandas about ten times the rest of the frame."""
    return pd.Index(names)


def _summary(prefix, n, total, sq, mn, mx) -> dict[str, np.ndarray]:
    """min/mean/std/max from count, sum, sum of squares, min and max (0 when empty)."""
    some = n > 0
    safe = np.maximum(n, 1)
    mean = total / safe
    std = np.sqrt(np.maximum(sq / safe - mean * mean, 0.0))
    return {
        f"{prefix}_min": np.where(some, mn, 0.0),
        f"{prefix}_mean": mean,
        f"{prefix}_std": std,
        f"{prefix}_max": np.where(some, mx, 0.0),
    }


def seq_rows(fwd, size, iat, flags, pay) -> np.ndarray:
    """Rows of the ``seq`` view for some packets: float32 (m, F)."""
    m = len(size)
    out = np.empty((m, len(SEQ_FEATURES)), dtype=np.float32)
    out[:, 0] = np.where(fwd, size, -size)
    iat = np.where(np.isnan(iat) | (iat < 0), 0.0, iat)
    out[:, 1] = np.log1p(iat * 1e6)
    out[:, 2:8] = np.unpackbits(flags[:, None], axis=1, bitorder="little")[:, :6]
    out[:, 8] = pay
    out[:, 9] = 1.0
    return out


def pkt_rows(sb, ip_off, ip_cap, l4_rel, ver, proto, options) -> np.ndarray:
    """Rows of the ``pkt_bytes`` view for some packets: uint8 (m, B), masked."""
    width = options.pkt_len
    rows = sb.rows(ip_off, width)  # (m, B)
    inv, keep = header_masks(width, l4_rel, ver, proto, options)
    if width <= 256:
        # One row of a (kinds, captured length, B) mask table per packet.
        table = np.tril(np.ones((width + 1, width), dtype=np.uint8), -1)
        masks = table[None] * keep[:, None, :]
        which = inv * (width + 1) + np.minimum(ip_cap, width)
        return np.multiply(rows, masks.reshape(-1, width)[which], out=rows)
    rows *= keep[inv]  # else the table would be too large
    rows *= np.arange(width)[None, :] < ip_cap[:, None]  # nothing past the captured packet
    return rows


PKT_LAYOUTS = ("payload", "ip")
"""Layouts of a ``pkt_bytes`` row: see :func:`payload_rows` and :func:`pkt_rows`."""
PKT_FIELDS = 8
"""Bytes of per-packet header fields before the payload in the ``payload`` layout."""


def payload_rows(out, dst, sb, fwd, ip_len, proto, flags, thl, window, pay_off, pay_cap) -> None:
    """Write rows ``dst`` of ``out`` (uint8 (rows, B)), the ``payload`` layout of ``pkt_bytes``.

    Byte 0: direction (1 from the flow's initiator, 2 from the other side; never 0, so
    a zero row is padding); 1-2: IP length (big-endian, capped at 65535); 3: transport
    protocol; 4: TCP flags; 5: transport header length in bytes; 6-7: TCP window
    (0 for UDP); then the first ``B - 8`` transport-payload bytes, zero past the
    captured payload. Every packet's payload starts at the same column whatever its
    IP version and header options, and the row holds no address, port, checksum,
    IP identification or TCP sequence number: nothing to mask.

    The payload goes through the same masked row copy as the ip layout
    (:func:`pkt_rows`): read from 8 bytes before the payload, the first 8 masked out,
    straight into the view's rows; then the 8 fields are written over them.
    """
    width = out.shape[1]
    cap = np.asarray(pay_cap, dtype=np.int64)
    # Read from 8 bytes before the payload (inside the packet's headers); a packet with
    # no captured payload reads nothing, from offset 0.
    src = np.where(cap > 0, np.asarray(pay_off, dtype=np.int64) - PKT_FIELDS, 0)
    length = np.where(cap > 0, cap + PKT_FIELDS, 0)
    keep = (np.arange(width) >= PKT_FIELDS).astype(np.uint8)[None, :]
    if _kernel is not None:  # the payload, then the 8 fields: two compiled passes
        dst = np.ascontiguousarray(dst, dtype=np.int64)
        kind = np.zeros(len(src), dtype=np.int64)
        _kernel.masked_rows(sb.array, src, length, kind, keep, out, dst)
        u8 = [np.ascontiguousarray(a, dtype=np.uint8) for a in (fwd, proto, flags)]
        i64 = [np.ascontiguousarray(a, dtype=np.int64) for a in (ip_len, thl, window)]
        _kernel.payload_heads(out, dst, u8[0], i64[0], u8[1], u8[2], i64[1], i64[2])
        return
    rows = sb.rows(src, width)
    rows *= keep & (np.arange(width)[None, :] < length[:, None])
    out[dst] = rows
    size = np.minimum(np.asarray(ip_len, dtype=np.int64), 0xFFFF)
    win = np.asarray(window, dtype=np.int64) & 0xFFFF
    head = np.empty((len(src), PKT_FIELDS), dtype=np.uint8)
    head[:, 0] = np.where(fwd, 1, 2)
    head[:, 1], head[:, 2] = size >> 8, size & 0xFF
    head[:, 3] = proto
    head[:, 4] = flags
    head[:, 5] = np.clip(thl, 0, 0xFF)
    head[:, 6], head[:, 7] = win >> 8, win & 0xFF
    out[dst, : min(width, PKT_FIELDS)] = head[:, :width]


_FEW_KINDS = 1 << 12  # header_masks: kinds below this are found by counting


def header_masks(width: int, l4_rel, ver, proto, options) -> tuple[np.ndarray, np.ndarray]:
    """Each packet's kind, and each kind's mask of its first ``width`` bytes (uint8, 1 keeps).

    What to zero depends only on (IP version, protocol, transport offset): a few kinds.
    """
    kind = (l4_rel << 2) | ((ver == 6) << 1) | (proto == P.PROTO_TCP)
    if len(kind) and kind.min() >= 0 and kind.max() < _FEW_KINDS:
        # np.unique's sorted kinds and inverse, by counting rather than sorting
        kinds = np.flatnonzero(np.bincount(kind, minlength=1))
        lut = np.zeros(int(kinds[-1]) + 1, dtype=np.int64)
        lut[kinds] = np.arange(len(kinds))
        inv = lut[kind]
    else:
        kinds, inv = np.unique(kind, return_inverse=True)
    keep = np.empty((len(kinds), width), dtype=np.uint8)
    for i, k in enumerate(kinds.tolist()):
        keep[i] = _header_mask(width, k >> 2, (k >> 1) & 1, k & 1, options)
    return inv.reshape(-1), keep


def _header_mask(width: int, l4_rel: int, v6: bool, tcp: bool, options) -> np.ndarray:
    """1 where a ``pkt_bytes`` row keeps its byte, 0 where a mask zeroes it."""
    keep = np.ones(width, dtype=np.uint8)
    if options.mask_ip:
        keep[P.IPV6_ADDRESSES if v6 else P.IPV4_ADDRESSES] = 0
    if options.mask_checksum:
        if not v6:
            keep[P.IPV4_CHECKSUM] = 0
        at = l4_rel + (P.TCP_CHECKSUM_AT if tcp else P.UDP_CHECKSUM_AT)
        keep[at : at + 2] = 0
    if options.mask_port:
        keep[l4_rel + P.PORTS.start : l4_rel + P.PORTS.stop] = 0
    return keep


_BLOCK = 128  # payload copied in blocks of this many bytes, then power-of-two tails


def fill_bytes(out: np.ndarray, sb, dst_row, dst_at, src_off, length) -> None:
    """Copy payload pieces: out[row, at:at+len] = buffer[off:off+len], for each piece.

    Pieces never overlap in ``out``. Every write is exact (whole blocks, then the
    tail split into 64, 32, ..., 1 byte parts), so no write depends on the order
    of another, and a handful of vectorised copies replace one copy per piece.
    """
    flat = out.reshape(-1)
    dst = dst_row * out.shape[1] + dst_at
    if _kernel is not None:  # one memcpy per piece, compiled
        i64 = [np.ascontiguousarray(a, dtype=np.int64) for a in (dst, src_off, length)]
        _kernel.copy_pieces(sb.array, flat, *i64)
        return
    nb = length // _BLOCK
    if nb.any():
        reps = np.repeat(np.arange(len(nb)), nb)
        j = np.arange(len(reps)) - np.repeat(np.cumsum(nb) - nb, nb)
        _copy_rows(flat, dst[reps] + j * _BLOCK, sb, src_off[reps] + j * _BLOCK, _BLOCK)
    tail = length - nb * _BLOCK
    base = nb * _BLOCK
    width = _BLOCK // 2
    while width:
        part = np.flatnonzero(tail & width)
        if len(part):
            at = base[part] + (tail[part] & ~(2 * width - 1))
            _copy_rows(flat, dst[part] + at, sb, src_off[part] + at, width)
        width //= 2


def _copy_rows(flat: np.ndarray, dst: np.ndarray, sb, src: np.ndarray, width: int) -> None:
    if width == 1:
        flat[dst] = sb.array[src]
        return
    win = sliding_window_view(flat, width, writeable=True)
    win[dst] = sb.rows(src, width)


def excl_cumsum_in_runs(x: np.ndarray, fs: np.ndarray, fid: np.ndarray) -> np.ndarray:
    """Sum of x over the earlier elements of each element's run (runs start at fs)."""
    c = np.cumsum(x)
    c -= x
    return c - c[fs][fid]


def build_views(opts, sb, pk, fp: FlowPackets, rows: FlowRows) -> dict[str, np.ndarray]:
    """Tensor views of a chunk's flows (one row per flow; ``rows.row`` gives each packet's).

    ``pk`` are the chunk's decoded packets, ``fp`` the same packets grouped by flow;
    flows that continue from earlier chunks start from their carried rows.
    """
    out: dict[str, np.ndarray] = {}
    if "seq" in opts.views:
        out["seq"] = _seq_view(opts, fp, rows)
    if "pkt_bytes" in opts.views:
        out["pkt_bytes"] = _pkt_bytes_view(opts, sb, pk, fp, rows)
    if "bytes" in opts.views:
        out["bytes"] = _bytes_view(opts, sb, pk, fp, rows)
    return out


def _seq_view(opts, fp: FlowPackets, rows: FlowRows) -> np.ndarray:
    T, n_feat = opts.seq_len, len(SEQ_FEATURES)
    # One spare row past the end takes the packets beyond the first T of their flow:
    # when most packets have a row, writing all beats selecting them first.
    flat = np.zeros((len(fp.fs) * T + 1, n_feat), dtype=np.float32)
    seq = flat[:-1].reshape(len(fp.fs), T, n_feat)
    if len(rows.cont_rows):
        seq[rows.cont_rows] = rows.carried["seq"]
    rank, iat = fp.rank, fp.ts - fp.prev_ts
    in_seq = rank < T
    if _kernel is not None:  # rows written in place, compiled (the log still NumPy's)
        log_iat = np.log1p(np.where(np.isnan(iat) | (iat < 0), 0.0, iat) * 1e6)
        dst = np.where(in_seq, rows.row * T + rank, -1)
        u8 = [np.ascontiguousarray(a).view(np.uint8) for a in (fp.fwd, fp.flags)]
        f64 = [np.ascontiguousarray(a, dtype=np.float64) for a in (fp.size, log_iat)]
        pay = np.ascontiguousarray(fp.pay, dtype=np.float64)
        _kernel.seq_rows(dst.astype(np.int64), u8[0], *f64, u8[1], pay, flat)
        return seq
    if in_seq.mean() > 0.5:
        dst = np.where(in_seq, rows.row * T + rank, len(flat) - 1)
        flat[dst] = seq_rows(fp.fwd, fp.size, iat, fp.flags, fp.pay)
    else:
        sel = np.flatnonzero(in_seq)
        flat[rows.row[sel] * T + rank[sel]] = seq_rows(
            fp.fwd[sel], fp.size[sel], iat[sel], fp.flags[sel], fp.pay[sel]
        )
    return seq


def _pkt_bytes_view(opts, sb, pk, fp: FlowPackets, rows: FlowRows) -> np.ndarray:
    P, B = opts.n_pkts, opts.pkt_len
    pb = np.zeros((len(fp.fs), P, B), dtype=np.uint8)
    if len(rows.cont_rows):
        pb[rows.cont_rows] = rows.carried["pkt_bytes"]
    sel = np.flatnonzero(fp.rank < P)
    o = fp.order[sel]
    dst = rows.row[sel] * P + fp.rank[sel]
    if opts.pkt_layout == "payload":
        payload_rows(
            pb.reshape(-1, B),
            dst,
            sb,
            fp.fwd[sel],
            pk.ip_len[o],
            pk.proto[o],
            fp.flags[sel],
            pk.pay_off[o] - pk.ip_off[o] - pk.l4_rel[o],
            fp.window[sel],
            pk.pay_off[o],
            pk.pay_cap[o],
        )
        return pb
    if _kernel is not None:  # copied, masked and placed in one compiled pass
        # In capture order, so that the packets are read front to back from the buffer.
        at = np.full(len(pk), -1, dtype=np.int64)
        at[o] = dst
        o = np.flatnonzero(at >= 0)
        inv, keep = header_masks(B, pk.l4_rel[o], pk.ver[o], pk.proto[o], opts)
        i64 = [np.ascontiguousarray(a, dtype=np.int64) for a in (pk.ip_off[o], pk.ip_cap[o], inv)]
        _kernel.masked_rows(sb.array, *i64, keep, pb.reshape(-1, B), at[o])
        return pb
    pb.reshape(-1, B)[dst] = pkt_rows(
        sb, pk.ip_off[o], pk.ip_cap[o], pk.l4_rel[o], pk.ver[o], pk.proto[o], opts
    )
    return pb


def _bytes_view(opts, sb, pk, fp: FlowPackets, rows: FlowRows) -> np.ndarray:
    K = opts.n_bytes
    by = np.zeros((len(fp.fs), K), dtype=np.uint8)
    if len(rows.cont_rows):
        by[rows.cont_rows] = rows.carried["bytes"]
    at = excl_cumsum_in_runs(fp.pay_cap, fp.fs, fp.fid) + rows.fill_before[fp.fid]
    sel = np.flatnonzero((at < K) & (fp.pay_cap > 0))
    if len(sel):
        length = np.minimum(fp.pay_cap[sel], K - at[sel])
        fill_bytes(by, sb, rows.row[sel], at[sel], pk.pay_off[fp.order[sel]], length)
    return by
