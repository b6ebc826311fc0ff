"""Assembling decoded packets into bidirectional flows, one chunk at a time.

A flow is keyed by (file, protocol, {address, port} pair), direction-free; its
initiator (a) is the sender of its first packet. Packets are taken in capture
order. A packet starts a new flow of its key when

1. idle timeout: the largest timestamp of the file's TCP/UDP packets since the
   key's previous packet (this one included) exceeds that packet's time by more
   than ``idle_timeout``. For captures in time order this is simply "more than
   ``idle_timeout`` since the key's previous packet"; it is also what a meter that
   expires flows as its packet clock advances does when timestamps jump around,
   so one packet with a wild timestamp ends the flows it overtakes, once (nDPI's
   reader, and so NFStream, instead takes a timestamp that goes back as the latest
   one seen, which stops all timeouts of the capture until real time catches up
   with the latest one: after one wild timestamp, or in a capture merged from
   several, its flows run on through hours-long gaps);
2. active timeout: the flow's latest timestamp, this packet included, is more than
   ``active_timeout`` after its first packet;
3. TCP end: the flow has ended (an RST seen, or a FIN seen from both sides) and
   the packet is a pure SYN (SYN without ACK) that is not a retransmission of the
   flow's opening SYN (same sequence number: a stack retrying its connection
   after an RST, as NFStream counts it too). Anything else after the end
   (trailing ACKs, retransmitted FINs) stays in the ended flow.

These rules let a flow be closed at a chunk boundary with certainty once it can no
longer continue, so streaming in chunks gives exactly the flows of reading the
file whole. The vectorised pass applies rule 1 to each key's packets sorted
together; the few runs where rules 2-3 can fire are replayed packet by packet.

Keys are compared through 64-bit hashes: two different keys of one file would have
to collide on all 64 bits (about 2^-64 per pair) to be merged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flowsplit.reader import protocols as P
from flowsplit.reader import views as V

# the compiled range maximum, built by `pip install`; without it a NumPy sparse table
from flowsplit.reader.kernel import compiled as _kernel
from flowsplit.reader.packets import Packets
from flowsplit.reader.rangemax import RangeMax

_M1, _M2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)
_K1, _K2, _K3 = (np.uint64(k) for k in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))
_IDX_BITS = 20  # chunk packets are sorted with their index in the low bits of the key
_U33 = np.uint64(33)
_TENSOR_VIEWS = ("seq", "bytes", "pkt_bytes")


@dataclass
class FlowTable:
    """Flows as named columns (all of length n); the views only as requested."""

    cols: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.cols["h"])

    def take(self, idx) -> FlowTable:
        return FlowTable({k: v[idx] for k, v in self.cols.items()})

    @staticmethod
    def concat(tables: list[FlowTable]) -> FlowTable:
        if len(tables) == 1:
            return tables[0]
        return FlowTable({k: np.concatenate([t.cols[k] for t in tables]) for k in tables[0].cols})


def _mix(h: np.ndarray) -> np.ndarray:
    h = (h ^ (h >> _U33)) * _M1
    h = (h ^ (h >> _U33)) * _M2
    return h ^ (h >> _U33)


def endpoint_hash(addr_hi, addr_lo, port) -> np.ndarray:
    """64-bit hash of one (address, port) endpoint."""
    return _mix(addr_lo * _K1 + (addr_hi ^ (port.astype(np.uint64) * _K2)))


def _sort_by_key(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Order that groups equal hashes, keeping capture order within a group."""
    n = len(h)
    if n < (1 << _IDX_BITS):
        low = np.uint64((1 << _IDX_BITS) - 1)
        comp = np.sort((h & ~low) | np.arange(n, dtype=np.uint64))
        order = (comp & low).astype(np.int64)
        hs = h[order]
        # The sort used only the high bits: if two keys share them, sort exactly.
        top = comp >> np.uint64(_IDX_BITS)
        if not np.any((top[1:] == top[:-1]) & (hs[1:] != hs[:-1])):
            return order, hs
    order = np.argsort(h, kind="stable")
    return order, h[order]


@dataclass
class _KeyGroups:
    """A chunk's packets sorted by flow key, capture order kept within a key."""

    order: np.ndarray  # int64, decoded-packet position of each sorted packet
    hs: np.ndarray  # uint64, key hash of each sorted packet
    low: np.ndarray  # bool, sent by the endpoint with the lower hash
    gs: np.ndarray  # bool, first packet of its key in the chunk
    g: np.ndarray  # int64, positions where gs holds


# Flow columns that are a field of the flow's first packet: column -> Packets field (the
# first packet's sender is endpoint a).
_FIRST_PACKET_COLUMNS = {
    "src": "src",
    "ver": "ver",
    "proto": "proto",
    "vlan": "vlan",
    "a_hi": "sa_hi",
    "a_lo": "sa_lo",
    "b_hi": "da_hi",
    "b_lo": "da_lo",
    "port_a": "sport",
    "port_b": "dport",
}

# Columns a continued flow keeps from its open state rather than from this chunk.
_CARRIED_COLUMNS = (
    "vlan",
    "a_hi",
    "a_lo",
    "b_hi",
    "b_lo",
    "port_a",
    "port_b",
    "init_low",
    "first_index",
    "first_ts",
    "syn_seq",
)


def _latest_since_previous(pk: Packets, order, gs, ts) -> np.ndarray:
    """Per sorted packet: the file's latest time since the key's previous packet.

    In time-ordered files this is the packet's own time. Where timestamps go
    backwards, it is a range maximum over capture order.
    """
    same_file = pk.src[1:] == pk.src[:-1]
    back = np.flatnonzero((pk.ts[1:] < pk.ts[:-1]) & same_file)
    if not len(back):
        return ts
    n = len(pk)
    if same_file.all():  # one file: all its packets
        rows = at = np.arange(n)
    else:
        rows = np.flatnonzero(np.isin(pk.src, pk.src[back]))  # those files' packets
        at = np.full(n, -1)
        at[rows] = np.arange(len(rows))
    j = np.flatnonzero(~gs)  # the key's previous packet is at j - 1
    j = j[at[order[j]] >= 0]
    latest = ts.copy()
    latest[j] = range_max(pk.ts[rows], at[order[j - 1]], at[order[j]])
    return latest


def range_max(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Maximum of ``x[lo+1 .. hi]`` for each (lo, hi) pair (lo < hi)."""
    if _kernel is None or np.isnan(x).any():
        return RangeMax(x)(lo, hi)
    lo, hi = (np.ascontiguousarray(a, dtype=np.int64) for a in (lo, hi))
    out = np.empty(len(lo))
    by_hi = _order_of_distinct(hi, len(x))
    if by_hi is None:
        by_hi = np.argsort(hi, kind="stable")
    _kernel.range_max(np.ascontiguousarray(x, dtype=np.float64), lo, hi, by_hi, out)
    return out


def _order_of_distinct(keys: np.ndarray, bound: int) -> np.ndarray | None:
    """``np.argsort(keys, kind="stable")`` in linear time when the keys are distinct
    integers in [0, bound); None when they are not."""
    if not len(keys) or keys.min() < 0 or keys.max() >= bound:
        return None
    slot = np.full(bound, -1, dtype=np.int64)
    slot[keys] = np.arange(len(keys))
    order = slot[slot >= 0]
    return order if len(order) == len(keys) else None


class FlowAssembler:
    """Turns the packets of successive chunks into finished flows (see module doc)."""

    def __init__(self, options):
        self.opts = options
        self.open: FlowTable | None = None  # flows that may continue, sorted by hash

    def add_chunk(self, pk: Packets, sb, ended: list[int]) -> list[FlowTable]:
        """Add one chunk's packets; return the flows known to be finished.

        The first table holds the chunk's finished flows ordered by (file, first
        packet); a second one, if any, flows left open earlier that are now done.
        """
        op = self.open
        if len(pk) == 0:
            return self._retire_open(pk, ended, np.zeros(len(op) if op else 0, dtype=bool), None)
        keys = self._group_by_key(pk)
        cont_g = self._match_open(keys)
        touched = np.zeros(len(op) if op else 0, dtype=bool)
        touched[cont_g[cont_g >= 0]] = True
        new, cont_at = self._flow_starts(pk, keys, cont_g)
        starts = new | keys.gs
        fs = np.flatnonzero(starts)
        f, fp, cc, is_cont = self._chunk_flows(pk, keys, starts, fs, cont_at)
        fill_before = np.zeros(len(fs), dtype=np.int64)
        if is_cont.any():
            fill_before[is_cont] = op.cols["fill"][cc]
        f["fill"] = np.minimum(fill_before + np.add.reduceat(fp.pay_cap, fs), self.opts.n_bytes)

        # Which flows are finished: superseded in the chunk, timed out, or file ended.
        last_of_key = np.append(keys.gs[fs[1:]], True)
        final = ~last_of_key | self._expired(f, ended)
        # Output rows: finished flows by (file, first packet) first, then open ones.
        fin_idx = np.flatnonzero(final)
        fin_idx = fin_idx[np.lexsort((f["first_index"][fin_idx], f["src"][fin_idx]))]
        perm = np.concatenate([fin_idx, np.flatnonzero(~final)])
        row = np.empty(len(fs), dtype=np.int64)
        row[perm] = np.arange(len(fs))
        cols = {k: v[perm] for k, v in f.items()}
        views = [v for v in _TENSOR_VIEWS if v in self.opts.views]
        carried = {v: op.cols[v][cc] for v in views} if len(cc) else {}
        rows = V.FlowRows(row[fp.fid], fill_before, row[is_cont], carried)
        cols.update(V.build_views(self.opts, sb, pk, fp, rows))

        n_fin = len(fin_idx)
        done = FlowTable({k: v[:n_fin] for k, v in cols.items()})
        keep = FlowTable({k: v[n_fin:].copy() for k, v in cols.items()})
        continued = np.zeros(len(touched), dtype=bool)
        continued[cc] = True
        return [done, *self._retire_open(pk, ended, touched, keep, continued)]

    def _group_by_key(self, pk: Packets) -> _KeyGroups:
        h, low = self._key_hashes(pk)
        order, hs = _sort_by_key(h)
        gs = np.empty(len(pk), dtype=bool)
        gs[0] = True
        np.not_equal(hs[1:], hs[:-1], out=gs[1:])
        return _KeyGroups(order, hs, low[order], gs, np.flatnonzero(gs))

    def _key_hashes(self, pk: Packets) -> tuple[np.ndarray, np.ndarray]:
        """Each packet's flow key hash, and whether the endpoint with the lower hash sent it."""
        if _kernel is not None:  # the same arithmetic, one compiled pass
            h, low = np.empty(len(pk), dtype=np.uint64), np.empty(len(pk), dtype=bool)
            u64 = [np.ascontiguousarray(a, dtype=np.uint64) for a in (pk.sa_hi, pk.sa_lo)]
            u64 += [np.ascontiguousarray(a, dtype=np.uint64) for a in (pk.da_hi, pk.da_lo)]
            i64 = [np.ascontiguousarray(a, dtype=np.int64) for a in (pk.sport, pk.dport, pk.vlan)]
            _kernel.key_hashes(
                u64[0], u64[1], i64[0], u64[2], u64[3], i64[1],
                np.ascontiguousarray(pk.src, dtype=np.int32),
                np.ascontiguousarray(pk.proto, dtype=np.uint8),
                i64[2], self.opts.vlan_key, h, low.view(np.uint8),
            )  # fmt: skip
            return h, low
        es = endpoint_hash(pk.sa_hi, pk.sa_lo, pk.sport)
        ed = endpoint_hash(pk.da_hi, pk.da_lo, pk.dport)
        low = es < ed  # sent by the endpoint with the lower hash: a fixed side of each key
        small = (pk.src.astype(np.uint64) << np.uint64(8)) | pk.proto.astype(np.uint64)
        if self.opts.vlan_key:
            small ^= _mix(pk.vlan.astype(np.uint64) + _K2)
        return _mix((es + ed) ^ (small * _K3)), low

    def _match_open(self, keys: _KeyGroups) -> np.ndarray:
        """For each key group, the open flow of that key from earlier chunks (-1: none)."""
        op, hs, g = self.open, keys.hs, keys.g
        if op is None:
            return np.full(len(g), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(op.cols["h"], hs[g]), len(op) - 1)
        return np.where(op.cols["h"][at] == hs[g], at, -1)

    def _flow_starts(self, pk: Packets, keys: _KeyGroups, cont_g: np.ndarray):
        """Packets that start a new flow, and the open flow each group start continues."""
        opts, op, order, gs, g = self.opts, self.open, keys.order, keys.gs, keys.g
        ts, flags, syn_seq = pk.ts[order], pk.flags[order], pk.syn_seq[order]
        n = len(pk)
        # Rule 1 inside the chunk: the latest time seen since the key's previous packet.
        prev = np.empty(n)
        prev[0] = np.nan
        prev[1:] = ts[:-1]
        latest = _latest_since_previous(pk, order, gs, ts)
        new = latest - prev > opts.idle_timeout
        new[g] = True
        pure_syn = P.is_pure_syn(flags)
        cont_at = np.full(n, -1, dtype=np.int64)  # open flow continued at position j
        matched = cont_g >= 0
        if matched.any():
            # All rules at group starts, against the state of the open flow.
            gm, c = g[matched], cont_g[matched]
            oc = op.cols
            seen = np.maximum(oc["seen_max"][c], np.maximum.accumulate(pk.ts)[order[gm]])
            max_ts = np.maximum(oc["acc"][c, V.ACC["last_ts"]], ts[gm])
            done_before = oc["rst"][c] | (oc["fin_lo"][c] & oc["fin_hi"][c])
            new[gm] = (
                (seen - oc["last_pkt_ts"][c] > opts.idle_timeout)
                | (max_ts - oc["first_ts"][c] > opts.active_timeout)
                | (done_before & pure_syn[gm] & (syn_seq[gm] != oc["syn_seq"][c]))
            )
            cont_at[gm] = np.where(new[gm], -1, c)
        self._replay(new, gs, ts, flags, syn_seq, keys.low, pure_syn, cont_at)
        return new, cont_at

    def _chunk_flows(self, pk: Packets, keys: _KeyGroups, starts, fs, cont_at):
        """Columns of the chunk's flows (runs between flow starts) and their packets."""
        op, order, n = self.open, keys.order, len(pk)
        fid = np.cumsum(starts) - 1
        fe = np.append(fs[1:], n)
        cont = cont_at[fs]
        is_cont = cont >= 0
        cc = cont[is_cont]
        ts = pk.ts[order]
        p0 = order[fs]
        f = {"h": keys.hs[fs]}
        f.update({col: getattr(pk, field)[p0] for col, field in _FIRST_PACKET_COLUMNS.items()})
        f.update(
            init_low=keys.low[fs],
            first_index=pk.index[p0],
            first_ts=ts[fs],
            last_pkt_ts=ts[fe - 1],
            syn_seq=pk.syn_seq[p0],
            n=fe - fs,
        )
        # Latest time of the file after each flow's last packet (only the file read
        # last can continue in the next chunk; the others have ended).
        after = np.empty(n)
        after[-1] = -np.inf
        after[:-1] = np.maximum.accumulate(pk.ts[:0:-1])[::-1]
        f["seen_max"] = after[order[fe - 1]]
        n_before = np.zeros(len(fs), dtype=np.int64)
        if is_cont.any():
            for k in _CARRIED_COLUMNS:
                f[k][is_cont] = op.cols[k][cc]
            n_before[is_cont] = op.cols["n"][cc]
            f["n"] += n_before
        fp = self._flow_packets(pk, keys, fs, fid, f["init_low"], n_before, is_cont, cc)
        acc = V.accumulate(fp)
        flags, low = fp.flags, keys.low
        rst = np.add.reduceat((flags & P.TCP_RST) > 0, fs, dtype=np.int64) > 0
        fin = (flags & P.TCP_FIN) > 0
        fin_lo = np.add.reduceat(fin & low, fs, dtype=np.int64) > 0
        fin_hi = np.add.reduceat(fin & ~low, fs, dtype=np.int64) > 0
        if is_cont.any():
            oc = op.cols
            acc[is_cont] = V.merge_acc(oc["acc"][cc], acc[is_cont])
            rst[is_cont] |= oc["rst"][cc]
            fin_lo[is_cont] |= oc["fin_lo"][cc]
            fin_hi[is_cont] |= oc["fin_hi"][cc]
        f.update(acc=acc, rst=rst, fin_lo=fin_lo, fin_hi=fin_hi)
        return f, fp, cc, is_cont

    def _flow_packets(self, pk, keys, fs, fid, init_low, n_before, is_cont, cc) -> V.FlowPackets:
        """Per packet: direction, rank in its flow, times of previous packets."""
        order, n = keys.order, len(pk)
        ts = pk.ts[order]
        fwd = keys.low == init_low[fid]
        if _kernel is not None:
            prev_ts, prev_dir = self._previous_times(fs, fwd, ts, is_cont, cc)
        else:
            prev_ts, prev_dir = self._previous_times_numpy(fs, fid, fwd, ts, is_cont, cc)
        flags = pk.flags[order]
        return V.FlowPackets(
            order=order,
            fs=fs,
            fid=fid,
            fwd=fwd,
            rank=np.arange(n) - fs[fid] + n_before[fid],
            ts=ts,
            prev_ts=prev_ts,
            prev_dir=prev_dir,
            size=pk.ip_len[order].astype(np.float64),
            pay=pk.pay_len[order].astype(np.float64),
            pay_cap=pk.pay_cap[order],
            flags=flags,
            window=pk.window[order],
            tcp=(pk.proto[order[fs]] == P.PROTO_TCP)[fid],
        )

    def _previous_times(self, fs, fwd, ts, is_cont, cc):
        """Each packet's previous time in its flow, and in its direction: compiled."""
        carried = np.full((3, len(fs)), np.nan)
        if is_cont.any():
            oc = self.open.cols
            carried[0, is_cont] = oc["last_pkt_ts"][cc]
            carried[1, is_cont] = oc["acc"][cc, V.ACC["last_fwd_ts"]]
            carried[2, is_cont] = oc["acc"][cc, V.ACC["last_bwd_ts"]]
        prev_ts, prev_dir = np.empty(len(ts)), np.empty(len(ts))
        _kernel.previous_times(
            np.ascontiguousarray(fs, dtype=np.int64),
            fwd.view(np.uint8),
            np.ascontiguousarray(ts, dtype=np.float64),
            *carried,
            prev_ts,
            prev_dir,
        )
        return prev_ts, prev_dir

    def _previous_times_numpy(self, fs, fid, fwd, ts, is_cont, cc):
        """What ``_previous_times`` computes, with NumPy."""
        op, n = self.open, len(ts)
        prev_ts = np.empty(n)
        prev_ts[0] = np.nan
        prev_ts[1:] = ts[:-1]
        prev_ts[fs] = np.nan
        prev_f = self._prev_dir(fwd, fs, fid, ts)
        prev_b = self._prev_dir(~fwd, fs, fid, ts)
        if is_cont.any():
            oc = op.cols
            prev_ts[fs[is_cont]] = oc["last_pkt_ts"][cc]
            last_dir = np.full((len(fs), 2), np.nan)
            last_dir[is_cont, 0] = oc["acc"][cc, V.ACC["last_fwd_ts"]]
            last_dir[is_cont, 1] = oc["acc"][cc, V.ACC["last_bwd_ts"]]
            need = np.isnan(prev_f)
            prev_f[need] = last_dir[fid[need], 0]
            need = np.isnan(prev_b)
            prev_b[need] = last_dir[fid[need], 1]
        return prev_ts, np.where(fwd, prev_f, prev_b)

    def finish(self) -> FlowTable | None:
        """All flows still open (end of input), by (file, first packet)."""
        out, self.open = self.open, None
        if out is not None:
            out = out.take(np.lexsort((out.cols["first_index"], out.cols["src"])))
        return out

    # ------------------------------------------------------------------ helpers
    def _replay(self, new, gs, ts, flags, syn_seq, low, pure_syn, cont_at) -> None:
        """Rules 2-3 packet by packet, only in the runs where they may fire.

        ``syn_seq`` is the sequence number of each pure SYN (-1 otherwise), in key order.
        """
        opts, op = self.opts, self.open
        starts = new | gs
        fs = np.flatnonzero(starts)
        first = ts[fs]
        top = np.maximum.reduceat(ts, fs)
        c = cont_at[fs]
        cm = c >= 0
        carried = np.zeros((len(fs), 3), dtype=bool)
        opening = syn_seq[fs]  # the opening SYN's sequence number of each run (-1: none)
        if cm.any():
            first[cm] = op.cols["first_ts"][c[cm]]
            top[cm] = np.maximum(top[cm], op.cols["acc"][c[cm], V.ACC["last_ts"]])
            carried[cm] = np.stack([op.cols[k][c[cm]] for k in ("rst", "fin_lo", "fin_hi")], 1)
            opening[cm] = op.cols["syn_seq"][c[cm]]
        flagged = top - first > opts.active_timeout
        cand = np.flatnonzero(pure_syn & ~starts)
        rst, fin = (flags & P.TCP_RST) > 0, (flags & P.TCP_FIN) > 0
        if len(cand):
            # Has the run ended before each candidate SYN?
            fid = np.cumsum(starts) - 1
            seen = []
            for j, ev in enumerate((rst, fin & low, fin & ~low)):
                before = V.excl_cumsum_in_runs(ev.astype(np.int64), fs, fid)[cand] > 0
                seen.append(before | carried[fid[cand], j])
            ended = seen[0] | (seen[1] & seen[2])
            flagged[fid[cand[ended]]] = True
        if not flagged.any():
            return
        fe = np.append(fs[1:], len(ts))
        active_to = opts.active_timeout
        for k in np.flatnonzero(flagged).tolist():
            b, e = int(fs[k]), int(fe[k])
            t0, syn0 = float(first[k]), int(opening[k])
            # The latest time of the flow so far (a carried flow: before this chunk).
            t_max = float(op.cols["acc"][c[k], V.ACC["last_ts"]]) if cm[k] else t0
            r_, fl_, fh_ = (bool(x) for x in carried[k])
            for j in range(b, e):
                t_max = max(t_max, float(ts[j]))
                ended = (r_ or (fl_ and fh_)) and pure_syn[j] and int(syn_seq[j]) != syn0
                if j > b and (t_max - t0 > active_to or ended):
                    new[j] = True
                    t0 = t_max = float(ts[j])
                    syn0 = int(syn_seq[j])
                    r_ = fl_ = fh_ = False
                r_ = r_ or bool(rst[j])
                fl_ = fl_ or bool(fin[j] and low[j])
                fh_ = fh_ or bool(fin[j] and not low[j])

    @staticmethod
    def _prev_dir(is_dir, fs, fid, ts) -> np.ndarray:
        """Time of the previous packet in the same direction and flow (NaN if none)."""
        n = len(ts)
        last = np.maximum.accumulate(np.where(is_dir, np.arange(n), -1))
        prev = np.empty(n, dtype=np.int64)
        prev[0] = -1
        prev[1:] = last[:-1]
        ok = prev >= fs[fid]
        return np.where(ok, ts[prev], np.nan)

    def _expired(self, c: dict, ended: list[int]) -> np.ndarray:
        """Flows no later packet can join: their file ended, or they timed out."""
        opts = self.opts
        # Ended files by a table over file indices (np.isin costs far more on few flows).
        src = c["src"]
        gone = np.zeros(int(src.max(initial=0)) + 1, dtype=bool)
        gone[[e for e in ended if e < len(gone)]] = True
        done = gone[src]
        done |= c["seen_max"] - c["last_pkt_ts"] > opts.idle_timeout
        done |= c["acc"][:, V.ACC["last_ts"]] - c["first_ts"] > opts.active_timeout
        return done

    def _retire_open(self, pk, ended, touched, keep, continued=None) -> list[FlowTable]:
        """Replace the open flows; return those of the old ones that are finished."""
        op = self.open
        out, kept = [], [] if keep is None or not len(keep) else [keep]
        if op is not None:
            if continued is None:
                continued = touched
            untouched = ~touched
            c = op.cols
            if len(pk):
                # Untouched flows saw the chunk's packets of their file go by.
                top = {
                    s: float(pk.ts[pk.src == s].max())
                    for s in np.unique(c["src"]).tolist()
                    if (pk.src == s).any()
                }
                if top:
                    seen = np.array([top.get(s, -np.inf) for s in c["src"].tolist()])
                    c["seen_max"] = np.where(
                        untouched, np.maximum(c["seen_max"], seen), c["seen_max"]
                    )
            fin_o = untouched & self._expired(c, ended)
            done = np.flatnonzero((touched & ~continued) | fin_o)
            if len(done):
                done = done[np.lexsort((c["first_index"][done], c["src"][done]))]
                out.append(op.take(done))
            still = np.flatnonzero(untouched & ~fin_o)
            if len(still):
                kept.append(op.take(still))
        if kept:
            table = FlowTable.concat(kept)
            self.open = table.take(np.argsort(table.cols["h"], kind="stable"))
        else:
            self.open = None
        return out
