"""Vectorised decoding of link, IP and transport headers of a chunk of records.

Every header field is read with NumPy over all records at once: fixed-width words
are loaded from the staging buffer at each record's header offset, and fields are
bits of those words. Records we cannot use get a reason code, counted in the
report, and drop out at the end. The layers, outside in:

1. link layer (:func:`_link_layer`): Ethernet, Linux cooked v1/v2, BSD loopback,
   raw IP, PPP, Cisco HDLC, PPI, 802.11 (with or without radiotap) and NFLOG, then
   VLAN tags, MPLS labels, PPPoE sessions and LLC/SNAP down to an IP header; the
   VLAN ids met go into the flow key;
2. IP (:func:`_ip_layer`): IPv4 with options, IPv6 with extension headers;
3. tunnels (:func:`_tunnel_inner`): IP-in-IP, GRE (with ERSPAN I-III,
   transparent Ethernet, and PPTP's version 1 with PPP), VXLAN, Geneve, GTP-U and CAPWAP data are opened and the inner
   packet decoded again from the link layer, so inner flows are classified (with
   ``tunnels="outer"`` the outer flow is kept instead);
4. fragments: IPv4 and IPv6 fragments go to a
   :class:`~flowsplit.reader.fragments.Reassembler`; a completed datagram is decoded
   like a raw IP packet, and so is the first fragment of a datagram given up on;
5. TCP/UDP: ports, flags, window, payload offsets.

Decisions worth knowing:

- Sizes are IP lengths: the IPv4 total length, or 40 + the IPv6 payload length.
  A length of 0 (segmentation offload in loopback captures) is replaced by the
  length on the wire. Link-layer padding after the IP packet is ignored.
- A packet cut short by the snapshot length is kept if its transport header is
  complete; its payload counts at its declared length, the ``bytes`` views see
  only what was captured.
- A tunnelled packet counts as one packet of its inner flow; its size is the inner
  IP length.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from flowsplit.reader import protocols as P
from flowsplit.reader.fragments import Fragment, FragmentRows, Reassembler, fragments_of

# the compiled fast path, built by `pip install`; without it NumPy decodes every record
from flowsplit.reader.kernel import compiled as _kernel
from flowsplit.reader.pcap import MALFORMED_REASONS, ReadReport
from flowsplit.reader.staging import Columns, RecordChunk, Records, StagingBuffer

REASONS = (
    "",
    "truncated_packet",
    "non_ip",
    "bad_ip_header",
    "ip_fragment",
    "non_tcp_udp",
    "bad_ipv6_ext",
    "bad_tcp_header",
    "bad_udp_header",
    "unsupported_linktype",
    "tunnel_too_deep",
    "bad_tunnel_header",
)
_OK, _TRUNC, _NON_IP, _BAD_IP, _FRAG, _OTHER_L4, _BAD_EXT, _BAD_TCP, _BAD_UDP = range(9)
_BAD_LT, _DEEP, _BAD_TUNNEL = 9, 10, 11
# The reasons strict mode raises on, as codes (one list, so the two cannot drift apart).
_MALFORMED_CODES = np.array([c for c, name in enumerate(REASONS) if name in MALFORMED_REASONS])

_SHIMS = np.array([*P.ET_VLAN, *P.ET_MPLS, P.ET_PPPOE_SESSION])
_IPV6_EXT = np.array(P.IPV6_EXTENSIONS)


def _table(values, size: int) -> np.ndarray:
    """Membership of small integers as a lookup table (``np.isin`` costs far more on
    the few records of a call)."""
    t = np.zeros(size, dtype=bool)
    t[np.asarray(values)] = True
    return t


_IS_SHIM = _table(_SHIMS, 1 << 16)  # by ethertype (16 bits)
_IS_VLAN = _table(P.ET_VLAN, 1 << 16)
_IS_MPLS = _table(P.ET_MPLS, 1 << 16)
_IS_IPV6_EXT = _table(_IPV6_EXT, 256)  # by next header (8 bits)
_IS_REASSEMBLED = _table(
    [P.PROTO_TCP, P.PROTO_UDP, P.PROTO_IPIP, P.PROTO_IPV6, P.PROTO_GRE], 256
)  # what a fragment may carry to be joined: transport, or a tunnel to open
_MAX_CHAIN = 8  # VLAN/MPLS/PPPoE headers, and IPv6 extension headers, followed per packet
_MAX_TUNNEL_DEPTH = 4  # tunnels inside tunnels opened per packet
_JOIN_WHOLE = True  # datagrams whole within a chunk joined at once (Reassembler.join_whole)
_V4_MAPPED = np.uint64(0xFFFF00000000)
_LINK_DECODERS = frozenset(
    {
        P.LT_NULL,
        P.LT_ETHERNET,
        P.LT_PPP,
        *P.LT_RAW_IP,
        P.LT_C_HDLC,
        P.LT_IEEE802_11,
        P.LT_LOOP,
        P.LT_LINUX_SLL,
        P.LT_IEEE802_11_RADIOTAP,
        P.LT_IPV4,
        P.LT_IPV6,
        P.LT_NFLOG,
        P.LT_LINUX_SLL2,
    }
)
TUNNEL_MODES = ("inner", "outer")


@dataclass
class Packets(Columns):
    """Decoded TCP/UDP packets of a chunk (all arrays of length n), in chunk order."""

    src: np.ndarray  # int32, file index
    index: np.ndarray  # int64, record number in the file
    ts: np.ndarray  # float64, seconds
    ver: np.ndarray  # uint8, 4 or 6
    proto: np.ndarray  # uint8, 6 or 17
    sa_hi: np.ndarray  # uint64, source address (IPv4 as ::ffff:a.b.c.d)
    sa_lo: np.ndarray  # uint64
    da_hi: np.ndarray  # uint64, destination address
    da_lo: np.ndarray  # uint64
    sport: np.ndarray  # int64
    dport: np.ndarray  # int64
    flags: np.ndarray  # uint8, TCP flags (0 for UDP)
    window: np.ndarray  # int64, TCP window (0 for UDP)
    syn_seq: np.ndarray  # int64, sequence number of a pure SYN (SYN without ACK); -1 otherwise
    ip_len: np.ndarray  # int64, IP packet length on the wire
    pay_len: np.ndarray  # int64, transport payload length on the wire
    ip_off: np.ndarray  # int64, offset of the IP header in the staging buffer
    ip_cap: np.ndarray  # int64, bytes of the IP packet captured
    l4_rel: np.ndarray  # int64, offset of the transport header from the IP header
    pay_off: np.ndarray  # int64, offset of the payload in the staging buffer
    pay_cap: np.ndarray  # int64, payload bytes captured
    vlan: np.ndarray  # int64, the VLAN ids met on the way in (0: none), for the flow key
    pos: np.ndarray  # int64, position of the packet's record in the chunk

    @staticmethod
    def concat(parts: list[Packets]) -> Packets:
        """Packets of several decodes, put back in record order."""
        parts = [p for p in parts if len(p)] or parts[:1]
        if len(parts) == 1:
            return parts[0]
        order = np.argsort(np.concatenate([p.pos for p in parts]), kind="stable")
        # Columns concatenated and gathered in one expression each (ndarray.take)
        return Packets(
            *(
                np.concatenate([getattr(p, f.name) for p in parts]).take(order)
                for f in fields(Packets)
            )
        )


@dataclass
class _Ip:
    """IP-layer fields of the records still in play (all arrays of one length)."""

    ip_off: np.ndarray  # offset of the IP header in the buffer
    ip_cap: np.ndarray  # bytes of the IP packet captured
    ip_len: np.ndarray  # IP length (header included)
    is6: np.ndarray
    proto: np.ndarray  # transport protocol (after IPv6 extension headers)
    l4_rel: np.ndarray  # offset of the transport header from the IP header
    frag: np.ndarray  # bool: a fragment (IPv4 MF or offset, IPv6 non-atomic fragment header)
    frag_rel: np.ndarray  # IPv6: offset of the fragment header (0 for IPv4)


class PacketDecoder:
    """Decodes chunks into TCP/UDP packets; holds the fragments that span chunks."""

    def __init__(
        self,
        report: ReadReport,
        *,
        strict: bool = False,
        vlan_key: bool = True,
        tunnels: str = "inner",
        reassemble: bool = True,
        fragment_timeout: float = 30.0,
    ):
        if tunnels not in TUNNEL_MODES:
            raise ValueError(f"tunnels must be one of {TUNNEL_MODES}, not {tunnels!r}")
        self.report, self.strict = report, strict
        self.vlan_key, self.tunnels = vlan_key, tunnels
        self.reassembler = Reassembler(report, timeout=fragment_timeout) if reassemble else None

    def decode(self, chunk: RecordChunk) -> tuple[Packets, StagingBuffer]:
        """The chunk's TCP/UDP packets and the buffer their offsets point into.

        The buffer is the chunk's, or a copy of it with reassembled datagrams
        appended when fragments completed in this chunk.
        """
        recs, sb = chunk.records, chunk.buffer
        rs = self.reassembler
        pos = np.arange(len(recs), dtype=np.int64)
        vlan = np.zeros(len(recs), dtype=np.int64)
        frags: list[FragmentRows] = []
        parts = self._decode_parts(chunk, sb, recs, pos, vlan, 0, frags)
        if rs is None or not (frags or len(rs)):
            return Packets.concat(parts), sb
        # File by file, in the chunk's order: its fragments join their datagrams in
        # record order, then what completes or is given up is decoded in turn (it may
        # hold fragments again), and a file that ended gives up the rest. So the
        # reassembler sees each file as it would in a chunk of its own.
        rs.begin_chunk(recs.src, recs.ts)
        if _JOIN_WHOLE:
            whole, left = rs.join_whole(frags, sb)
        else:
            whole, left = {}, fragments_of(frags, sb.mv)
        by_file: dict[int, list[Fragment]] = {}
        for f in sorted(left, key=lambda f: f.pos):
            by_file.setdefault(f.src, []).append(f)
        ended = set(chunk.ended)
        files = sorted(set(by_file) | set(whole) | rs.files(), key=rs.first_record)
        for src in files:
            got = whole.get(src, [])
            sb = self._settle(chunk, sb, parts, by_file.get(src, []), src, src in ended, got)
        return Packets.concat(parts), sb

    def _settle(self, chunk, sb, parts, frags, src: int, ended: bool, whole):
        """Reassemble one file's fragments of the chunk (see :meth:`decode`); ``whole``:
        the rows of its datagrams joined at once, as the reassembler completes them."""
        rs = self.reassembler
        rows = self._add(frags)
        if whole:  # in record order, as the reassembler completes them
            rows = sorted(rows + whole, key=lambda r: r[0])
        for _ in range(2 * _MAX_TUNNEL_DEPTH):
            if not rows:
                rs.expire(src)
                rows = _given_rows(rs.take_given_up())
            if not rows and ended:
                rs.end_file(src)
                rows = _given_rows(rs.take_given_up())
            if not rows:
                return sb
            inner: list[FragmentRows] = []
            sb, pks = self._decode_reassembled(chunk, sb, rows, inner)
            parts.extend(pks)
            found = fragments_of(inner, sb.mv)
            rows = self._add(sorted(found, key=lambda f: f.pos))
        # Tunnels of fragments nested too deep: what is left is counted, not decoded.
        if ended:
            rs.end_file(src)
        left = len(rows) + len(rs.take_given_up())
        if left:
            self.report.skipped["tunnel_too_deep"] += left
        return sb

    def _add(self, frags: list[Fragment]) -> list[tuple]:
        """Add fragments; the rows (see :func:`_given_rows`) of the datagrams completed."""
        rows = []
        for f in frags:
            got = self.reassembler.add(f)
            if got is not None:
                self.report.n_merged += got.n_fragments - 1
                rows.append((f.pos, got.packet, f.vlan, f.src, f.ts, f.index))
        return rows

    def _decode_reassembled(self, chunk, sb, rows, frags):
        """Decode whole datagrams as raw IP packets at their places: ``rows`` of
        (position, datagram, VLAN key, file, time, record number)."""
        at, data, vlan, src, ts, index = zip(*rows, strict=True)
        sb, offsets = sb.with_extra(list(data))
        at = np.array(at, dtype=np.int64)
        lengths = np.array([len(d) for d in data], dtype=np.int64)
        inner = Records(
            src=np.array(src, dtype=np.int32),
            data_off=offsets,
            caplen=lengths,
            wirelen=lengths,
            ts=np.array(ts, dtype=np.float64),
            linktype=np.full(len(at), P.LT_RAW, dtype=np.int32),
            index=np.array(index, dtype=np.int64),
        )
        vlan = np.array(vlan, dtype=np.int64)
        return sb, self._decode_parts(chunk, sb, inner, at, vlan, 1, frags)

    def _decode_parts(self, chunk, sb, recs: Records, pos, vlan, depth, frags) -> list[Packets]:
        """``recs`` (records, packets inside tunnels, reassembled datagrams) decoded: the
        compiled common case first, :meth:`_decode` (NumPy) for the rest. The parts
        come in no particular order; ``Packets.concat`` puts them in position order.

        ``vlan`` is the VLAN key met outside ``recs``; the kernel's tags met inside are
        stacked on it as :meth:`_decode` stacks them. Where two records share a
        position (first fragments given back after the same record) NumPy takes them
        all, so that ties keep the order :meth:`_decode` gives them.
        """
        common, rest = None, None
        if len(pos) < 2 or (pos[1:] > pos[:-1]).all():
            common, rest = _decode_common(sb, recs, self.vlan_key)
        if common is None:
            return [self._decode(chunk, sb, recs, pos, vlan, depth, frags)]
        rows = common.pos
        outer = vlan[rows]
        if self.vlan_key:
            common.vlan = np.where(common.vlan != 0, (outer << 24) ^ common.vlan, outer)
        else:
            common.vlan = outer
        common.pos = pos[rows]
        if not len(rest):
            return [common]
        sub = recs.take(rest)
        return [common, self._decode(chunk, sb, sub, pos[rest], vlan[rest], depth, frags)]

    def _decode(self, chunk, sb, recs: Records, pos, vlan, depth: int, frags) -> Packets:
        """Decode ``recs`` (records, or inner packets of tunnels) down to TCP/UDP."""
        n = len(recs)
        reason = np.zeros(n, dtype=np.int8)
        data_off, caplen, lt = recs.data_off, recs.caplen, recs.linktype
        if n and (lt == P.LT_PPI).any():
            data_off, caplen, lt = _strip_ppi(sb, recs, reason)
        l3, et, vlan_ids = _link_layer(sb, data_off, caplen, lt, reason, self.report)
        if self.vlan_key:
            vlan = np.where(vlan_ids != 0, (vlan << 24) ^ vlan_ids, vlan)
        ip = _ip_layer(sb, recs, data_off, l3, caplen, et, reason)
        parts = []
        if self.tunnels == "inner":
            tun = _tunnel_inner(sb, ip, reason)
            if tun is not None:
                rows, rel, inner_lt, vni = tun
                if depth >= _MAX_TUNNEL_DEPTH:
                    reason[rows] = _DEEP
                else:
                    reason[rows] = -1  # handed to the inner decode: counted there
                    inner = Records(
                        src=recs.src[rows],
                        data_off=ip.ip_off[rows] + rel,
                        caplen=np.maximum(ip.ip_cap[rows] - rel, 0),
                        wirelen=np.maximum(ip.ip_len[rows] - rel, 0),
                        ts=recs.ts[rows],
                        linktype=inner_lt.astype(np.int32),
                        index=recs.index[rows],
                    )
                    inner_vlan = vlan[rows]
                    if self.vlan_key:  # a virtual network is keyed like a VLAN
                        inner_vlan = np.where(
                            vni != 0, (inner_vlan << 25) ^ (vni << 1) ^ 1, inner_vlan
                        )
                    parts.extend(
                        self._decode_parts(
                            chunk, sb, inner, pos[rows], inner_vlan, depth + 1, frags
                        )
                    )
        frag = ip.frag & (reason == _OK)
        if frag.any():
            if self.reassembler is None:
                reason[frag] = _FRAG
            else:
                rows = np.flatnonzero(frag)
                taken = self._fragments(chunk, sb, recs, ip, rows, pos, vlan, frags)
                reason[rows[taken]] = -1  # counted by the reassembler
        parts.insert(0, self._transport(chunk, sb, recs, ip, reason, pos, vlan, caplen))
        return Packets.concat(parts)

    def _fragments(self, chunk, sb, recs, ip: _Ip, rows, pos, vlan, frags) -> np.ndarray:
        """Collect the fragments for reassembly (:meth:`decode` joins them), as columns.

        Returns which of ``rows`` it took. A first fragment cut short by the
        snapshot length cannot be joined, but it carries the ports: it is left to
        be decoded as a packet of its own (its size the fragment's IP length).
        """
        ip_off = ip.ip_off[rows]
        is6 = ip.is6[rows]
        # One 8-byte word per fragment holds what is needed of its header: IPv4 bytes
        # 0-7 (identification, flags, offset), or the IPv6 fragment header.
        w = np.where(is6, sb.word(ip_off + ip.frag_rel[rows], ">u8"), sb.word(ip_off, ">u8"))
        field6 = (w >> 32) & 0xFFFF
        proto = np.where(is6, (w >> 56) & 0xFF, sb.word(ip_off + P.IPV4_PROTO_AT, "u1"))
        offset = np.where(is6, field6 & ~7, (w & P.IPV4_OFFSET_MASK) * 8)
        more = np.where(is6, field6 & 1, w & P.IPV4_MF) != 0
        ident = np.where(is6, w & 0xFFFFFFFF, (w >> 16) & 0xFFFF)
        cut = ip.ip_cap[rows] < ip.ip_len[rows]
        other = ~_IS_REASSEMBLED[proto]
        skipped = self.report.skipped
        if other.any():
            skipped["non_tcp_udp"] += int(other.sum())
        lost = cut & ~other & (offset != 0)
        if lost.any():
            skipped["ip_fragment_truncated"] += int(lost.sum())
        taken = ~(cut & ~other & (offset == 0))
        keep = np.flatnonzero(~other & ~cut)
        if len(keep):
            r = rows[keep]
            frags.append(
                FragmentRows(
                    ip_off[keep],
                    np.where(is6, ip.frag_rel[rows] + P.IPV6_FRAG_HEADER, ip.l4_rel[rows])[keep],
                    ip.ip_len[r],
                    is6[keep],
                    offset[keep],
                    more[keep],
                    ident[keep],
                    proto[keep],
                    recs.src[r].astype(np.int64),
                    recs.ts[r],
                    vlan[r],
                    pos[r],
                    recs.index[r],
                )
            )
        return taken

    def _transport(self, chunk, sb, recs, ip: _Ip, reason, pos, vlan, caplen) -> Packets:
        """TCP/UDP fields of the records still fine; count the others."""
        n = len(recs)
        word = sb.word
        tcp = ip.proto == P.PROTO_TCP
        _set(reason, ~tcp & (ip.proto != P.PROTO_UDP), _OTHER_L4)
        l4_min = np.where(tcp, P.TCP_MIN_HEADER, P.UDP_HEADER)
        _set(reason, ip.ip_cap < ip.l4_rel + l4_min, _TRUNC)
        idx = np.flatnonzero(reason == _OK)  # the records still in play
        if len(idx) < n:
            self._count(reason, recs, chunk, caplen)
        tcp = tcp[idx]
        ip_off, ip_cap, ip_len = ip.ip_off[idx], ip.ip_cap[idx], ip.ip_len[idx]
        l4_rel, proto, is6 = ip.l4_rel[idx], ip.proto[idx], ip.is6[idx]
        l4 = ip_off + l4_rel
        ports = word(l4, ">u4")
        tw = word(l4 + 12, ">u4")  # TCP data offset, flags, window
        thl = np.where(tcp, ((tw >> 28) & 15) * 4, P.UDP_HEADER)
        pay_rel = l4_rel + thl
        bad = np.where(tcp, (thl < P.TCP_MIN_HEADER) | (ip_len < pay_rel), ip_len < pay_rel)
        if bad.any():
            code = np.zeros(n, dtype=np.int8)
            code[idx[bad]] = np.where(tcp[bad], _BAD_TCP, _BAD_UDP)
            self._count(code, recs, chunk, caplen)
            keep = np.flatnonzero(~bad)
            tcp, ip_off, ip_cap, ip_len = tcp[keep], ip_off[keep], ip_cap[keep], ip_len[keep]
            l4_rel, proto, is6, idx = l4_rel[keep], proto[keep], is6[keep], idx[keep]
            ports, tw, pay_rel = ports[keep], tw[keep], pay_rel[keep]
        sa_hi, sa_lo, da_hi, da_lo = _addresses(sb, ip_off, is6)
        ip_cap = np.minimum(ip_cap, ip_len)
        flags = np.where(tcp, (tw >> 16) & 0xFF, 0).astype(np.uint8)
        # A SYN's sequence number tells a retransmitted SYN (the same connection
        # attempt) from a new connection on the same ports; only pure SYNs load it.
        syn_seq = np.full(len(idx), -1, dtype=np.int64)
        syn = np.flatnonzero(tcp & P.is_pure_syn(flags))
        if len(syn):
            syn_seq[syn] = word(ip_off[syn] + l4_rel[syn] + P.TCP_SEQ_AT, ">u4")
        return Packets(
            src=recs.src[idx],
            index=recs.index[idx],
            ts=recs.ts[idx],
            ver=np.where(is6, 6, 4).astype(np.uint8),
            proto=proto.astype(np.uint8),
            sa_hi=sa_hi,
            sa_lo=sa_lo,
            da_hi=da_hi,
            da_lo=da_lo,
            sport=ports >> 16,
            dport=ports & 0xFFFF,
            flags=flags,
            window=np.where(tcp, tw & 0xFFFF, 0),
            syn_seq=syn_seq,
            ip_len=ip_len,
            pay_len=ip_len - pay_rel,
            ip_off=ip_off,
            ip_cap=ip_cap,
            l4_rel=l4_rel,
            pay_off=ip_off + pay_rel,
            pay_cap=np.maximum(ip_cap - pay_rel, 0),
            vlan=vlan[idx],
            pos=pos[idx],
        )

    def _count(self, reason, recs, chunk, caplen) -> None:
        """Add the reasons to the report (strict mode: raise on the first malformed packet)."""
        report = self.report
        if self.strict:
            malformed = np.isin(reason, _MALFORMED_CODES)
            # Cut by the snapshot length is normal; shorter than its own wire length is not.
            malformed &= (reason != _TRUNC) | (caplen >= recs.wirelen)
            if malformed.any():
                i = int(np.argmax(malformed))
                name = REASONS[reason[i]]
                where = f" (record {int(recs.index[i])})"
                report.skip(name, 1, chunk.paths[int(recs.src[i])], strict=True, where=where)
        counts = np.bincount(reason[reason > 0].astype(np.int64), minlength=len(REASONS))
        for code in np.flatnonzero(counts).tolist():
            if code != _BAD_LT:  # counted by link type where it was found
                report.skipped[REASONS[code]] += int(counts[code])


def _given_rows(given) -> list[tuple]:
    """Rows for :meth:`PacketDecoder._decode_reassembled` of first fragments given back."""
    return [(g.pos, g.packet, g.vlan, g.src, g.ts, g.index) for g in given]


_KERNEL_ADDR = ("sa_hi", "sa_lo", "da_hi", "da_lo")
"""The rows of ``_kernel.decode_common``'s ``addr``, as :class:`Packets` names them."""
_KERNEL_FIELDS = ("sport", "dport", "flags", "window", "syn_seq", "ip_len", "pay_len")
_KERNEL_FIELDS += ("ip_off", "ip_cap", "l4_rel", "pay_off", "pay_cap", "vlan")
"""The rows of ``_kernel.decode_common``'s ``fields``, as :class:`Packets` names them."""


def _decode_common(sb: StagingBuffer, recs: Records, vlan_key: bool):
    """The records of the common case decoded by the compiled kernel, and the rest.

    Returns (packets or None, positions of the records left to the NumPy decoder,
    or None for all of them when the kernel is not built). The kernel takes only
    records whose every field it computes as the NumPy path does.
    """
    n = len(recs)
    if _kernel is None or n == 0:
        return None, None
    rows = np.empty(n, dtype=np.int64)
    ver, proto = np.empty(n, dtype=np.uint8), np.empty(n, dtype=np.uint8)
    addr = np.empty((len(_KERNEL_ADDR), n), dtype=np.uint64)
    f = np.empty((len(_KERNEL_FIELDS), n), dtype=np.int64)
    k = _kernel.decode_common(
        sb.array,
        np.ascontiguousarray(recs.data_off, dtype=np.int64),
        np.ascontiguousarray(recs.caplen, dtype=np.int64),
        np.ascontiguousarray(recs.wirelen, dtype=np.int64),
        np.ascontiguousarray(recs.linktype, dtype=np.int32),
        vlan_key,
        rows,
        ver,
        proto,
        addr,
        f,
    )
    rows, f, addr = rows[:k], f[:, :k], addr[:, :k]
    rest = np.ones(n, dtype=bool)
    rest[rows] = False
    columns = dict(zip(_KERNEL_ADDR, addr, strict=True)) | dict(zip(_KERNEL_FIELDS, f, strict=True))
    columns["flags"] = columns["flags"].astype(np.uint8)
    packets = Packets(
        src=recs.src[rows],
        index=recs.index[rows],
        ts=recs.ts[rows],
        ver=ver[:k],
        proto=proto[:k],
        pos=rows,
        **columns,
    )
    return packets, np.flatnonzero(rest)


def _addresses(sb, ip_off, is6):
    """Source and destination addresses as (hi, lo) uint64 pairs; IPv4 v4-mapped."""
    word = sb.word
    w1 = word(ip_off + 8, ">u8").view(np.uint64)  # IPv4: ..., source; IPv6: source high
    w2 = word(ip_off + 16, ">u8").view(np.uint64)  # IPv4: destination, ...
    mask32 = np.uint64(0xFFFFFFFF)
    sa_hi, sa_lo = np.zeros(len(w1), dtype=np.uint64), (w1 & mask32) | _V4_MAPPED
    da_hi, da_lo = np.zeros(len(w1), dtype=np.uint64), (w2 >> np.uint64(32)) | _V4_MAPPED
    if is6.any():
        i6 = np.flatnonzero(is6)
        sa_hi[i6], sa_lo[i6] = w1[i6], w2[i6]
        da_hi[i6] = word(ip_off[i6] + P.IPV6_DST_AT, ">u8").view(np.uint64)
        da_lo[i6] = word(ip_off[i6] + P.IPV6_DST_AT + 8, ">u8").view(np.uint64)
    return sa_hi, sa_lo, da_hi, da_lo


# ----------------------------------------------------------------------- link layer
def _link_layer(sb, data_off, caplen, lt, reason, report):
    """(offset of the network header from the frame, ethertype, VLAN ids) per record."""
    n = len(data_off)
    if n and (lt == lt[0]).all():
        l3, et = _link_group(int(lt[0]), sb, data_off, reason, report)
        l3 = np.full(n, l3, dtype=np.int64) if np.ndim(l3) == 0 else l3.astype(np.int64)
    else:
        l3, et = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        for value in np.unique(lt).tolist():
            idx = np.flatnonzero(lt == value)
            l3[idx], et[idx] = _link_group(value, sb, data_off[idx], reason, report, idx)
    vlan = np.zeros(n, dtype=np.int64)
    llc = (et > 0) & (et <= P.ETH_MAX_LENGTH)
    if _IS_SHIM[et].any() or llc.any():
        _follow_shims(sb, data_off, l3, et, vlan)
    not_ip = (et != P.ET_IPV4) & (et != P.ET_IPV6)
    if not_ip.any():
        found = _ipv4_by_checksum(
            sb, data_off, l3, caplen, np.flatnonzero(not_ip & (reason == _OK))
        )
        if len(found):
            et[found], not_ip[found] = P.ET_IPV4, False
            report.recovered["ipv4_after_unknown_type"] += len(found)
    _set(reason, not_ip, _NON_IP)
    return l3, et, vlan


def _ipv4_by_checksum(sb, data_off, l3, caplen, rows) -> np.ndarray:
    """Read as IPv4 the frames of ``rows`` (their link layer names no IP protocol)
    whose network header is a whole IPv4 header with a correct header checksum.

    A type field corrupted or unknown to us then does not lose the packet. The
    checksum makes a false reading of another protocol's bytes as IPv4 about a
    1-in-65,536 event on top of the version, length and size checks (nDPI and
    NFStream read such a frame on its version nibble alone). Returns those of
    ``rows``; the caller reads them as IPv4 and counts them in
    ``report.recovered["ipv4_after_unknown_type"]``.
    """
    if not len(rows):
        return rows
    off = data_off[rows] + l3[rows]
    cap = caplen[rows] - l3[rows]
    head = np.where(cap >= P.IPV4_MIN_HEADER, sb.word(off, "u1"), 0)
    ihl = (head & 15) * 4
    ok = ((head >> 4) == 4) & (ihl >= P.IPV4_MIN_HEADER) & (cap >= ihl)
    if not ok.any():
        return rows[ok]
    rows, off, ihl = rows[ok], off[ok], ihl[ok]
    total = sb.word(off + 2, ">u2")
    s = np.zeros(len(rows), dtype=np.int64)
    for k in range(0, 60, 2):  # the ones' complement sum of the header's 16-bit words
        inside = k < ihl
        if not inside.any():
            break
        s += np.where(inside, sb.word(off + np.where(inside, k, 0), ">u2"), 0)
    for _ in range(3):
        s = (s & 0xFFFF) + (s >> 16)
    return rows[(s == 0xFFFF) & ((total == 0) | (total >= ihl))]


def _link_group(lt, sb, off, reason, report, idx=slice(None)):
    if lt == P.LT_BROKEN:
        return 0, np.zeros(len(off), dtype=np.int64)
    if lt not in _LINK_DECODERS:
        reason[idx] = _BAD_LT
        report.skipped[f"unsupported_linktype:{lt}"] += len(off)
        return 0, np.zeros(len(off), dtype=np.int64)
    return _link(lt, sb, off)


def _link(lt: int, sb, off: np.ndarray) -> tuple[np.ndarray | int, np.ndarray]:
    """(offset of the network header, ethertype) for frames of one link type."""
    n = len(off)
    if lt == P.LT_ETHERNET:
        return P.ETH_HEADER, sb.word(off + P.ETH_TYPE_AT, ">u2")
    if lt == P.LT_LINUX_SLL:
        return P.SLL_HEADER, sb.word(off + P.SLL_TYPE_AT, ">u2")
    if lt == P.LT_LINUX_SLL2:
        return P.SLL2_HEADER, sb.word(off + P.SLL2_TYPE_AT, ">u2")
    if lt in P.LT_LOOPBACK:  # the address family in either byte order
        fam = np.minimum(sb.word(off, "<u4"), sb.word(off, ">u4"))
        is6 = np.isin(fam, P.AF_INET6_BSD)
        et = np.where(fam == P.AF_INET, P.ET_IPV4, np.where(is6, P.ET_IPV6, 0))
        return P.LOOP_HEADER, et
    if lt in P.LT_RAW_IP:
        return 0, _ethertype_of_version(sb.word(off, "u1") >> 4)
    if lt in (P.LT_IPV4, P.LT_IPV6):
        return 0, np.full(n, P.ET_IPV4 if lt == P.LT_IPV4 else P.ET_IPV6)
    if lt == P.LT_C_HDLC:
        return P.C_HDLC_HEADER, sb.word(off + P.C_HDLC_TYPE_AT, ">u2")
    if lt == P.LT_PPP:
        return _ppp(sb, off)
    if lt == P.LT_IEEE802_11_RADIOTAP:
        rlen = sb.word(off + 2, "<u2")  # radiotap header length
        l3, et = _wlan(sb, off + rlen)
        return rlen + l3, et
    if lt == P.LT_IEEE802_11:
        return _wlan(sb, off)
    if lt == P.LT_NFLOG:
        return _nflog(sb, off)
    raise AssertionError(f"link type {lt} has no decoder")


def _ethertype_of_version(v: np.ndarray) -> np.ndarray:
    return np.where(v == 4, P.ET_IPV4, np.where(v == 6, P.ET_IPV6, 0))


def _ppp_to_ethertype(proto: np.ndarray) -> np.ndarray:
    et = np.zeros(len(proto), dtype=np.int64)
    for ppp, eth in P.PPP_TO_ETHERTYPE.items():
        et[proto == ppp] = eth
    return et


def _ppp(sb, off):
    """PPP, with or without address/control bytes; some writers put C-HDLC here."""
    w = sb.word(off, ">u4")
    b0, b1 = w >> 24, (w >> 16) & 0xFF
    hdlc = (b0 == P.C_HDLC_UNICAST) | (b0 == P.C_HDLC_MULTICAST)
    ac = (b0 == P.PPP_ADDRESS) & (b1 == P.PPP_CONTROL)
    short = (b0 & 1) == 1  # protocol-field compression: a one-byte protocol
    proto = np.where(ac, w & 0xFFFF, np.where(short, b0, w >> 16))
    et = np.where(hdlc, w & 0xFFFF, _ppp_to_ethertype(proto))
    return np.where(hdlc | ac, 4, np.where(short, 1, 2)), et


def _wlan(sb, off):
    """802.11 data frames: the header (its size set by its flags), then LLC/SNAP."""
    fc = sb.word(off, "<u2")  # frame control, little-endian on the air
    # Some CAPWAP access points send it byte-swapped; the LLC/SNAP check below keeps
    # this from turning any other frame into a data frame.
    swapped = sb.word(off, ">u2")
    fc = np.where(((fc >> 2) & 3) != P.WLAN_TYPE_DATA, swapped, fc)
    ftype, subtype = (fc >> 2) & 3, (fc >> 4) & 15
    to_ds, from_ds, order = (fc >> 8) & 1, (fc >> 9) & 1, (fc >> 15) & 1
    qos = (ftype == P.WLAN_TYPE_DATA) & ((subtype & 8) != 0)
    hlen = (
        P.WLAN_HEADER
        + np.where(to_ds & from_ds, P.WLAN_ADDR4, 0)
        + np.where(qos, P.WLAN_QOS, 0)
        + np.where(qos & (order == 1), P.WLAN_HT_CONTROL, 0)
    )
    protected = ((fc >> 14) & 1) == 1  # encrypted: nothing to read
    snap = sb.word(off + hlen, ">u4") >> 8
    is_snap = snap == (P.LLC_SNAP_SAP << 16 | P.LLC_SNAP_SAP << 8 | 3)
    et = sb.word(off + hlen + P.LLC_SNAP - 2, ">u2")
    ok = (ftype == P.WLAN_TYPE_DATA) & ~protected & is_snap & ((subtype & 4) == 0)
    return hlen + P.LLC_SNAP, np.where(ok, et, 0)


def _nflog(sb, off):
    """NFLOG: a 4-byte header, then TLVs; the packet is the payload TLV's value."""
    fam = sb.word(off, "u1")
    et = np.where(fam == P.AF_INET, P.ET_IPV4, np.where(fam == P.AF_INET6_LINUX, P.ET_IPV6, 0))
    tlv = np.full(len(off), P.NFLOG_HEADER, dtype=np.int64)
    found = np.zeros(len(off), dtype=bool)
    for _ in range(16):  # a handful of TLVs precede the payload in practice
        todo = np.flatnonzero(~found)
        if not len(todo):
            break
        length = sb.word(off[todo] + tlv[todo], "<u2")
        kind = sb.word(off[todo] + tlv[todo] + 2, "<u2") & 0x3FFF  # less nesting flags
        hit = kind == P.NFLOG_TLV_PAYLOAD
        found[todo[hit]] = True
        stuck = (length < 4) & ~hit
        tlv[todo[~hit]] += (length[~hit] + 3) & ~3
        et[todo[stuck]] = 0
        found[todo[stuck]] = True
    et[~found] = 0
    return tlv + 4, et


def _follow_shims(sb, data_off, l3, et, vlan) -> None:
    """Step through VLAN tags, MPLS labels, PPPoE sessions and LLC/SNAP to the IP header."""
    for _ in range(_MAX_CHAIN):
        llc = (et > 0) & (et <= P.ETH_MAX_LENGTH)
        sub = np.flatnonzero(_IS_SHIM[et] | llc)
        if not len(sub):
            return
        w = sb.word(data_off[sub] + l3[sub], ">u8")
        e = et[sub]
        is_vlan, is_mpls, is_llc = _IS_VLAN[e], _IS_MPLS[e], llc[sub]
        is_pppoe = e == P.ET_PPPOE_SESSION
        vlan[sub] = np.where(is_vlan, (vlan[sub] << 12) | ((w >> 48) & P.VLAN_ID_MASK), vlan[sub])
        v = (w >> 28) & 15  # version nibble after a 4-byte MPLS label
        after_mpls = np.where(((w >> 40) & 1) == 1, _ethertype_of_version(v), e)  # bottom?
        # PPPoE: 6 bytes, then a PPP protocol of two bytes, or one when compressed (odd).
        ppp_hi = (w >> 8) & 0xFF
        short = (ppp_hi & 1) == 1
        ppp_proto = np.where(short, ppp_hi, w & 0xFFFF)
        snap_ok = ((w >> 40) & 0xFFFFFF) == (P.LLC_SNAP_SAP << 16 | P.LLC_SNAP_SAP << 8 | 3)
        # Each row is exactly one of VLAN, MPLS, PPPoE or LLC (``sub``), LLC the rest.
        ppp_et = _ppp_to_ethertype(ppp_proto) if is_pppoe.any() else 0
        new = np.where(
            is_vlan,
            (w >> 32) & 0xFFFF,
            np.where(is_mpls, after_mpls, np.where(is_pppoe, ppp_et, w & 0xFFFF)),
        )
        et[sub] = np.where(is_llc & ~snap_ok, 0, new)
        step = np.where(
            is_vlan,
            P.VLAN_TAG,
            np.where(
                is_mpls,
                P.MPLS_LABEL,
                np.where(is_pppoe, P.PPPOE_HEADER + np.where(short, 1, 2), P.LLC_SNAP),
            ),
        )
        l3[sub] += step
    et[_IS_SHIM[et]] = 0  # too deep: not followed further


def _strip_ppi(sb, recs, reason):
    """Step over PPI headers: the frame inside has the link type the header names."""
    data_off, caplen, lt = recs.data_off.copy(), recs.caplen.copy(), recs.linktype.copy()
    idx = np.flatnonzero(lt == P.LT_PPI)
    hlen = sb.word(data_off[idx] + 2, "<u2")
    dlt = sb.word(data_off[idx] + 4, "<u4")
    bad = (hlen < 8) | (hlen > caplen[idx])
    reason[idx[bad]] = _TRUNC
    data_off[idx] += np.where(bad, 0, hlen)
    caplen[idx] -= np.where(bad, 0, hlen)
    lt[idx] = np.where(bad, P.LT_BROKEN, dlt)  # a PPI inside PPI stays 192: not decoded
    return data_off, caplen, lt


# ------------------------------------------------------------------------------- IP
def _ip_layer(sb, recs, data_off, l3, caplen, et, reason) -> _Ip:
    """IPv4/IPv6 header fields, and the transport header offset."""
    word = sb.word
    ip_cap = caplen - l3
    is4, is6 = et == P.ET_IPV4, et == P.ET_IPV6
    _set(reason, ip_cap < 0, _TRUNC)
    ip_off = data_off + l3
    w0 = word(ip_off, ">u8")  # IP header bytes 0-7
    ver = (w0 >> 60) & 15
    ihl4 = ((w0 >> 56) & 15) * 4
    wire_ip = recs.wirelen - l3
    tot4 = (w0 >> 32) & 0xFFFF
    tot4 = np.where(tot4 == 0, wire_ip, tot4)  # 0: segmentation offload
    tot6 = ((w0 >> 16) & 0xFFFF) + P.IPV6_HEADER
    tot6 = np.where(tot6 == P.IPV6_HEADER, np.maximum(wire_ip, P.IPV6_HEADER), tot6)
    ip_len = np.where(is6, tot6, tot4)
    _set(reason, np.where(is6, ip_cap < P.IPV6_HEADER, ip_cap < P.IPV4_MIN_HEADER), _TRUNC)
    _set(reason, np.where(is6, ver != 6, (ver != 4) | (ihl4 < P.IPV4_MIN_HEADER)), _BAD_IP)
    _set(reason, is4 & (ip_cap < ihl4), _TRUNC)
    _set(reason, is4 & (tot4 < ihl4), _BAD_IP)
    frag = is4 & ((w0 & P.IPV4_FLAGS_OFFSET_MASK) != 0)  # MF set or a fragment offset
    proto = np.where(is6, (w0 >> 8) & 0xFF, word(ip_off + P.IPV4_PROTO_AT, "u1"))
    l4_rel = np.where(is6, P.IPV6_HEADER, ihl4)
    frag_rel = np.zeros(len(ip_off), dtype=np.int64)
    if is6.any():
        chain = is6 & (reason == _OK) & _IS_IPV6_EXT[proto]
        if chain.any():
            sub = np.flatnonzero(chain)
            _ipv6_chain(sb, sub, ip_off, ip_cap, proto, l4_rel, reason, frag, frag_rel)
    return _Ip(ip_off, ip_cap, ip_len, is6, proto, l4_rel, frag, frag_rel)


def _ipv6_chain(sb, sub, ip_off, ip_cap, proto, l4_rel, reason, frag_out, frag_rel) -> None:
    """Follow IPv6 extension headers of the packets in ``sub`` to the transport header.

    A non-atomic fragment header ends the walk: the packet is marked a fragment,
    ``proto`` is the fragment header's next header and ``frag_rel`` its offset.
    """
    for _ in range(_MAX_CHAIN):
        nh = proto[sub]
        ext = _IS_IPV6_EXT[nh]
        sub, nh = sub[ext], nh[ext]
        if not len(sub):
            return
        off = l4_rel[sub]
        short = ip_cap[sub] < off + 8
        reason[sub[short]] = _TRUNC
        w = sb.word(ip_off[sub] + off, ">u8")
        frag_field = (w >> 32) & 0xFFFF
        is_frag_hdr = nh == P.PROTO_IPV6_FRAG
        frag = is_frag_hdr & (((frag_field >> 3) != 0) | ((frag_field & 1) != 0))
        frag_out[sub[frag & ~short]] = True
        frag_rel[sub[frag & ~short]] = off[frag & ~short]
        hlen = (w >> 48) & 0xFF
        size = np.where(
            is_frag_hdr,
            P.IPV6_FRAG_HEADER,
            np.where(nh == P.PROTO_AH, (hlen + 2) * 4, (hlen + 1) * 8),
        )
        proto[sub] = (w >> 56) & 0xFF
        l4_rel[sub] = off + size
        sub = sub[~short & ~frag]
    reason[sub[_IS_IPV6_EXT[proto[sub]]]] = _BAD_EXT


# --------------------------------------------------------------------------- tunnels
def _tunnel_inner(sb, ip: _Ip, reason):
    """Records that carry a tunnel: (rows, inner offset from the IP header, inner link
    type, VXLAN/Geneve network id or 0).

    Malformed tunnel headers are marked ``bad_tunnel_header``; None when no record
    of this set is a tunnel.
    """
    ok = (reason == _OK) & ~ip.frag
    proto = ip.proto
    l4 = ip.ip_off + ip.l4_rel
    ipip = ok & ((proto == P.PROTO_IPIP) | (proto == P.PROTO_IPV6))
    gre = ok & (proto == P.PROTO_GRE)
    udp = ok & (proto == P.PROTO_UDP) & (ip.ip_cap >= ip.l4_rel + P.UDP_HEADER)
    ports = np.zeros(len(proto), dtype=np.int64)
    u = np.flatnonzero(udp)
    ports[u] = sb.word(l4[u], ">u4")  # one load for both ports, UDP records only
    sport, dport = ports >> 16, ports & 0xFFFF
    vxlan = udp & (dport == P.UDP_PORT_VXLAN)
    geneve = udp & (dport == P.UDP_PORT_GENEVE)
    gtp = udp & ((dport == P.UDP_PORT_GTP_U) | (sport == P.UDP_PORT_GTP_U))
    capwap = udp & ((dport == P.UDP_PORT_CAPWAP_DATA) | (sport == P.UDP_PORT_CAPWAP_DATA))
    udp_tunnel = vxlan | geneve | gtp | capwap
    if not (ipip.any() or gre.any() or udp_tunnel.any()):
        return None
    n = len(proto)
    rel = np.zeros(n, dtype=np.int64)  # inner packet offset from the IP header
    lt = np.full(n, P.LT_RAW, dtype=np.int64)
    bad = np.zeros(n, dtype=bool)
    rel[ipip] = ip.l4_rel[ipip]
    _gre(sb, np.flatnonzero(gre), l4, ip.l4_rel, rel, lt, bad)
    for rows, fn in ((vxlan, _vxlan), (geneve, _geneve), (gtp, _gtp), (capwap, _capwap)):
        if rows.any():
            fn(sb, np.flatnonzero(rows), l4, ip.l4_rel, rel, lt, bad)
    tunnel = (ipip | gre | udp_tunnel) & ~bad
    # UDP on a tunnel port that is not a tunnel stays an ordinary UDP flow.
    udp_miss = udp_tunnel & bad
    _set(reason, (ipip | gre) & bad & ~udp_miss, _BAD_TUNNEL)
    rel = np.where(tunnel & (rel > ip.ip_cap), ip.ip_cap, rel)
    rows = np.flatnonzero(tunnel)
    if not len(rows):
        return None
    # VXLAN and Geneve name a virtual network (the same both ways): part of the key.
    vni = np.zeros(len(rows), dtype=np.int64)
    virtual = (vxlan | geneve)[rows]
    if virtual.any():
        vni[virtual] = sb.word(l4[rows[virtual]] + P.UDP_HEADER + 4, ">u4") >> 8
    return rows, rel[rows], lt[rows], vni


def _gre(sb, rows, l4, l4_rel, rel, lt, bad) -> None:
    if not len(rows):
        return
    at = l4[rows]
    flags, ptype = sb.word(at, ">u2"), sb.word(at + 2, ">u2")
    hlen = (
        P.GRE_HEADER
        + np.where(flags & P.GRE_C, 4, 0)
        + np.where(flags & P.GRE_K, 4, 0)
        + np.where(flags & P.GRE_S, 4, 0)
    )
    version = flags & 7
    # Version 1 (PPTP) carries PPP and may add an acknowledgment number.
    pptp = (version == 1) & (ptype == P.ET_PPP)
    hlen = hlen + np.where(pptp & ((flags & P.GRE_A) != 0), 4, 0)
    inner = l4_rel[rows] + hlen
    eth = ptype == P.ET_TEB
    # ERSPAN type I has no header and no sequence number; type II has both.
    erspan2 = ptype == P.ET_ERSPAN_2
    erspan2_hdr = np.where(flags & P.GRE_S, P.ERSPAN_2_HEADER, 0)
    erspan3 = ptype == P.ET_ERSPAN_3
    o_bit = sb.word(at + hlen + P.ERSPAN_3_HEADER - 1, "u1") & 1
    erspan3_hdr = P.ERSPAN_3_HEADER + np.where(o_bit == 1, P.ERSPAN_3_SUBHEADER, 0)
    inner = inner + np.where(erspan2, erspan2_hdr, 0) + np.where(erspan3, erspan3_hdr, 0)
    is_ip = (ptype == P.ET_IPV4) | (ptype == P.ET_IPV6)
    known = (version == 0) & (is_ip | eth | erspan2 | erspan3)
    rel[rows] = inner
    lt[rows] = np.where(is_ip, P.LT_RAW, np.where(pptp, P.LT_PPP, P.LT_ETHERNET))
    bad[rows] = ~(known | pptp)


def _vxlan(sb, rows, l4, l4_rel, rel, lt, bad) -> None:
    flags = sb.word(l4[rows] + P.UDP_HEADER, "u1")
    rel[rows] = l4_rel[rows] + P.UDP_HEADER + P.VXLAN_HEADER
    lt[rows] = P.LT_ETHERNET
    bad[rows] = (flags & 0x08) == 0  # the I flag: a valid VNI


def _geneve(sb, rows, l4, l4_rel, rel, lt, bad) -> None:
    at = l4[rows] + P.UDP_HEADER
    b0, ptype = sb.word(at, "u1"), sb.word(at + 2, ">u2")
    rel[rows] = l4_rel[rows] + P.UDP_HEADER + P.GENEVE_HEADER + (b0 & 0x3F) * 4
    is_ip = (ptype == P.ET_IPV4) | (ptype == P.ET_IPV6)
    lt[rows] = np.where(is_ip, P.LT_RAW, P.LT_ETHERNET)
    bad[rows] = ((b0 >> 6) != 0) | ~(is_ip | (ptype == P.ET_TEB))


def _gtp(sb, rows, l4, l4_rel, rel, lt, bad) -> None:
    at = l4[rows] + P.UDP_HEADER
    flags, msg = sb.word(at, "u1"), sb.word(at + 1, "u1")
    hlen = P.GTP_HEADER + np.where(flags & P.GTP_EXT_FLAGS, 4, 0)
    nxt = np.where(flags & P.GTP_E_FLAG, sb.word(at + hlen - 1, "u1"), 0)
    for _ in range(4):  # extension headers: length in 4-byte units, next type last
        more = nxt != 0
        if not more.any():
            break
        length = np.where(more, sb.word(at + hlen, "u1") * 4, 0)
        nxt = np.where(more & (length > 0), sb.word(at + hlen + length - 1, "u1"), 0)
        hlen = hlen + length
    rel[rows] = l4_rel[rows] + P.UDP_HEADER + hlen
    lt[rows] = P.LT_RAW
    ok = ((flags >> 5) == 1) & ((flags & 0x10) != 0) & (msg == P.GTP_G_PDU) & (nxt == 0)
    bad[rows] = ~ok


def _capwap(sb, rows, l4, l4_rel, rel, lt, bad) -> None:
    """CAPWAP data (RFC 5415): an 802.11 frame (T bit) or an Ethernet frame."""
    w = sb.word(l4[rows] + P.UDP_HEADER, ">u4")
    preamble, hlen = w >> 24, ((w >> 19) & 0x1F) * 4
    native = ((w >> P.CAPWAP_T_BIT) & 1) == 1
    rel[rows] = l4_rel[rows] + P.UDP_HEADER + hlen
    lt[rows] = np.where(native, P.LT_IEEE802_11, P.LT_ETHERNET)
    bad[rows] = (preamble != 0) | (hlen < 8) | (((w >> P.CAPWAP_F_BIT) & 1) == 1)


def _set(reason: np.ndarray, cond: np.ndarray, code: int) -> None:
    """Give ``code`` to the records still fine where ``cond`` holds (first reason wins)."""
    reason[cond & (reason == _OK)] = code
