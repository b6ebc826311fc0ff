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
directions, in packet order, zero-padded. ``pkt_bytes`` (uint8, (P, B)): the first
B bytes from the IP header of each of the first P packets, zero past the captured
IP packet; IP addresses, ports and checksums (IPv4 header, TCP/UDP) zeroed, each
mask a switch. ``stats``: see :func:`stats_columns` (over all packets of the flow).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

SEQ_FEATURES = ("size", "log_iat", "fin", "syn", "rst", "psh", "ack", "urg", "payload", "mask")
_FLAG_NAMES = ("fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr")
_LANE_BITS = 21
_LANE_MASK = np.uint64((1 << _LANE_BITS) - 1)
_FLAG_LUTS = [
    np.array(
        [sum(((v >> (3 * w + k)) & 1) << (_LANE_BITS * k) for k in range(3) if 3 * w + k < 8)
         for v in range(256)],
        dtype=np.uint64,
    )
    for w in range(3)
]  # fmt: skip

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
A = {name: i for i, name in enumerate(ACC_COLS)}
_S = slice(0, len(SUM_COLS))
_MIN = slice(_S.stop, _S.stop + len(MIN_COLS))
_MAX = slice(_MIN.stop, _MIN.stop + len(MAX_COLS))
_FIRST = slice(_MAX.stop, _MAX.stop + len(FIRST_COLS))
_LAST = slice(_FIRST.stop, _FIRST.stop + len(LAST_COLS))


def empty_acc(n: int) -> np.ndarray:
    """Accumulators of n flows with no packets: float64 (n, len(ACC_COLS))."""
    acc = np.zeros((n, len(ACC_COLS)))
    acc[:, _MIN] = np.inf
    acc[:, _MAX] = -np.inf
    acc[:, _FIRST] = np.nan
    acc[:, _LAST] = np.nan
    return acc


def accumulate(fs, fid, fwd, ts, size, pay, flags, window, tcp, prev_ts, prev_dir) -> np.ndarray:
    """Accumulators of the packets of each flow (flows contiguous, starting at ``fs``).

    ``fid``: each packet's flow; ``tcp``: per packet, whether its flow is TCP;
    ``prev_ts``/``prev_dir``: time of the flow's previous packet overall / in the
    same direction (NaN when none; carried over from earlier chunks).
    """
    n, nf = len(ts), len(fs)
    if n == 0:
        return empty_acc(nf)
    acc = np.empty((nf, len(ACC_COLS)))
    bwd = ~fwd
    fid2 = 2 * fid + bwd  # (flow, direction) bins: even forward, odd backward

    def by_dir(weights=None, sel=None) -> np.ndarray:  # (nf, 2) sums per direction
        bins = fid2 if sel is None else fid2[sel]
        w = weights if sel is None or weights is None else weights[sel]
        return np.bincount(bins, weights=w, minlength=2 * nf).reshape(nf, 2)

    def put2(names, values) -> None:
        acc[:, A[names[0]]], acc[:, A[names[1]]] = values[:, 0], values[:, 1]

    put2(("n_fwd", "n_bwd"), by_dir())
    put2(("bytes_fwd", "bytes_bwd"), by_dir(size))
    put2(("sq_fwd", "sq_bwd"), by_dir(size * size))
    put2(("pay_fwd", "pay_bwd"), by_dir(pay))
    put2(("paypk_fwd", "paypk_bwd"), by_dir(sel=pay > 0))
    inf = np.inf
    for name, x, op in (("min_fwd", np.where(fwd, size, inf), np.minimum),
                        ("min_bwd", np.where(bwd, size, inf), np.minimum),
                        ("max_fwd", np.where(fwd, size, -inf), np.maximum),
                        ("max_bwd", np.where(bwd, size, -inf), np.maximum),
                        ("last_ts", ts, np.maximum)):  # fmt: skip
        acc[:, A[name]] = op.reduceat(x, fs)
    # Inter-arrival times; a timestamp going backwards counts as no time passed.
    iat = np.maximum(ts - prev_ts, 0.0)  # NaN: a flow's first packet
    has = ~np.isnan(iat)
    iat0 = np.where(has, iat, 0.0)
    acc[:, A["iat_n"]] = np.add.reduceat(has, fs, dtype=np.float64)
    acc[:, A["iat_sum"]] = np.add.reduceat(iat0, fs)
    acc[:, A["iat_sq"]] = np.add.reduceat(iat0 * iat0, fs)
    acc[:, A["iat_min"]] = np.minimum.reduceat(np.where(has, iat, inf), fs)
    acc[:, A["iat_max"]] = np.maximum.reduceat(iat0, fs)
    iat = np.maximum(ts - prev_dir, 0.0)
    has = ~np.isnan(iat)
    iat0 = np.where(has, iat, 0.0)
    put2(("iatf_n", "iatb_n"), by_dir(sel=has))
    put2(("iatf_sum", "iatb_sum"), by_dir(iat0))
    put2(("iatf_sq", "iatb_sq"), by_dir(iat0 * iat0))
    lone = np.where(has, iat, inf)
    acc[:, A["iatf_min"]] = np.minimum.reduceat(np.where(fwd, lone, inf), fs)
    acc[:, A["iatb_min"]] = np.minimum.reduceat(np.where(bwd, lone, inf), fs)
    acc[:, A["iatf_max"]] = np.maximum.reduceat(np.where(fwd, iat0, 0.0), fs)
    acc[:, A["iatb_max"]] = np.maximum.reduceat(np.where(bwd, iat0, 0.0), fs)
    if n < (1 << _LANE_BITS):
        # Three flag bits per 64-bit word, one 21-bit lane each: 3 sums instead of 8.
        for w, lut in enumerate(_FLAG_LUTS):
            sums = np.add.reduceat(lut[flags], fs)
            for lane in range(3):
                if 3 * w + lane < 8:
                    field = (sums >> np.uint64(_LANE_BITS * lane)) & _LANE_MASK
                    acc[:, A[_FLAG_NAMES[3 * w + lane]]] = field
    else:
        for bit, name in enumerate(_FLAG_NAMES):
            acc[:, A[name]] = np.add.reduceat((flags >> bit) & 1, fs, dtype=np.int64)
    # Firsts and lasts per direction, by position in the flow.
    pos = np.arange(n)
    tcp_pos = np.where(tcp, pos, n)
    ends = np.empty((4, nf), dtype=np.int64)
    ends[0] = np.minimum.reduceat(np.where(fwd, tcp_pos, n), fs)
    ends[1] = np.minimum.reduceat(np.where(bwd, tcp_pos, n), fs)
    ends[2] = np.maximum.reduceat(np.where(fwd, pos, -1), fs)
    ends[3] = np.maximum.reduceat(np.where(bwd, pos, -1), fs)
    ends[ends < 0] = n
    win = np.append(window.astype(np.float64), np.nan)
    tsx = np.append(ts, np.nan)
    acc[:, A["win_fwd"]] = win[ends[0]]
    acc[:, A["win_bwd"]] = win[ends[1]]
    acc[:, A["last_fwd_ts"]] = tsx[ends[2]]
    acc[:, A["last_bwd_ts"]] = tsx[ends[3]]
    return acc


def merge_acc(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Accumulators of a flow's earlier packets (``old``) followed by later ones."""
    out = np.empty_like(old)
    out[:, _S] = old[:, _S] + new[:, _S]
    out[:, _MIN] = np.minimum(old[:, _MIN], new[:, _MIN])
    out[:, _MAX] = np.maximum(old[:, _MAX], new[:, _MAX])
    out[:, _FIRST] = np.where(np.isnan(old[:, _FIRST]), new[:, _FIRST], old[:, _FIRST])
    out[:, _LAST] = np.where(np.isnan(new[:, _LAST]), old[:, _LAST], new[:, _LAST])
    return out


def stats_frame(acc: np.ndarray, first_ts, is_tcp, port_a, port_b, mask_port) -> pd.DataFrame:
    """The ``stats`` view of finished flows from their accumulators (float32 columns)."""
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
        "": (n, bf + bb, c["sq_fwd"] + c["sq_bwd"],
             np.minimum(c["min_fwd"], c["min_bwd"]), np.maximum(c["max_fwd"], c["max_bwd"])),
        "_fwd": (nf, bf, c["sq_fwd"], c["min_fwd"], c["max_fwd"]),
        "_bwd": (nb, bb, c["sq_bwd"], c["min_bwd"], c["max_bwd"]),
    }  # fmt: skip
    for d, moments in sizes.items():
        out.update(_summary(f"size{d}", *moments))
    for d, p in (("", "iat"), ("_fwd", "iatf"), ("_bwd", "iatb")):
        out.update(_summary(f"iat{d}", c[f"{p}_n"], c[f"{p}_sum"], c[f"{p}_sq"],
                            c[f"{p}_min"], c[f"{p}_max"]))  # fmt: skip
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
    return pd.DataFrame(arr, columns=list(out), copy=False)


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
    # What to zero depends only on (IP version, protocol, transport offset) -- a few
    # kinds -- and on the captured length: one row of a small mask table per packet.
    kind = (l4_rel << 2) | ((ver == 6) << 1) | (proto == 6)
    kinds, inv = np.unique(kind, return_inverse=True)
    small = width <= 256  # else the (kinds, length, B) table would be too large
    table = np.tril(np.ones((width + 1 if small else 1, width), dtype=np.uint8), -1)
    masks = np.empty((len(kinds), len(table), width), dtype=np.uint8)  # (kinds, length, B)
    for i, k in enumerate(kinds.tolist()):
        rel, v6, tcp = k >> 2, (k >> 1) & 1, k & 1
        p = np.ones(width, dtype=np.uint8)
        if options.mask_ip:
            if v6:
                p[8:40] = 0
            else:
                p[12:20] = 0
        if options.mask_checksum:
            if not v6:
                p[10:12] = 0
            p[rel + (16 if tcp else 6) : rel + (18 if tcp else 8)] = 0
        if options.mask_port:
            p[rel : rel + 4] = 0
        masks[i] = table * p if small else p
    if small:
        which = inv * (width + 1) + np.minimum(ip_cap, width)
        return np.multiply(rows, masks.reshape(-1, width)[which], out=rows)
    rows *= masks[inv, 0]
    rows *= np.arange(width)[None, :] < ip_cap[:, None]  # nothing past the captured packet
    return rows


_BLOCK = 128  # payload copied in blocks of this many bytes, then power-of-two tails


def fill_bytes(out: np.ndarray, sb, dst_row, dst_at, src_off, length) -> None:
    """Copy payload pieces: out[row, at:at+len] = buffer[off:off+len], for each piece.

    Pieces never overlap in ``out``. Every write is exact (whole blocks, then the
    tail split into 64, 32, ..., 1 byte parts), so no write depends on the order
    of another, and a handful of vectorised copies replace one copy per piece.
    """
    flat = out.reshape(-1)
    dst = dst_row * out.shape[1] + dst_at
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


def build_views(
    opts,
    sb,
    pk,
    order,
    fid_row,
    rank,
    fwd,
    ts,
    prev_ts,
    size,
    pay,
    flags,
    pay_cap,
    fs,
    fid,
    fill_before,
    cont_rows,
    carried,
) -> dict[str, np.ndarray]:
    """Tensor views of a chunk's flows (one row per flow, ``fid_row`` gives each packet's).

    Packets are the chunk's in flow order (``order`` maps them to decoded packets);
    ``rank`` counts each packet's place in its flow from the flow's very first packet;
    flows that continue from earlier chunks start from their ``carried`` rows.
    """
    nfc = len(fs)
    out: dict[str, np.ndarray] = {}
    if "seq" in opts.views:
        n_feat = len(SEQ_FEATURES)
        # One spare row past the end takes the packets beyond the first T of their flow:
        # when most packets have a row, writing all beats selecting them first.
        flat = np.zeros((nfc * opts.seq_len + 1, n_feat), dtype=np.float32)
        seq = flat[:-1].reshape(nfc, opts.seq_len, n_feat)
        if len(cont_rows):
            seq[cont_rows] = carried["seq"]
        in_seq = rank < opts.seq_len
        if in_seq.mean() > 0.5:
            dst = np.where(in_seq, fid_row * opts.seq_len + rank, len(flat) - 1)
            flat[dst] = seq_rows(fwd, size, ts - prev_ts, flags, pay)
        else:
            sel = np.flatnonzero(in_seq)
            flat[fid_row[sel] * opts.seq_len + rank[sel]] = seq_rows(
                fwd[sel], size[sel], ts[sel] - prev_ts[sel], flags[sel], pay[sel]
            )
        out["seq"] = seq
    if "pkt_bytes" in opts.views:
        pb = np.zeros((nfc, opts.n_pkts, opts.pkt_len), dtype=np.uint8)
        if len(cont_rows):
            pb[cont_rows] = carried["pkt_bytes"]
        sel = np.flatnonzero(rank < opts.n_pkts)
        o = order[sel]
        pb.reshape(-1, opts.pkt_len)[fid_row[sel] * opts.n_pkts + rank[sel]] = pkt_rows(
            sb, pk.ip_off[o], pk.ip_cap[o], pk.l4_rel[o], pk.ver[o], pk.proto[o], opts
        )
        out["pkt_bytes"] = pb
    if "bytes" in opts.views:
        by = np.zeros((nfc, opts.n_bytes), dtype=np.uint8)
        if len(cont_rows):
            by[cont_rows] = carried["bytes"]
        at = excl_cumsum_in_runs(pay_cap, fs, fid) + fill_before[fid]
        sel = np.flatnonzero((at < opts.n_bytes) & (pay_cap > 0))
        if len(sel):
            length = np.minimum(pay_cap[sel], opts.n_bytes - at[sel])
            fill_bytes(by, sb, fid_row[sel], at[sel], pk.pay_off[order[sel]], length)
        out["bytes"] = by
    return out
