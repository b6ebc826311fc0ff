"""Vectorised decoding of link, IP and transport headers of a chunk of records.

Every header field is read with NumPy over all records at once: fixed-width rows
are copied out of the staging buffer at each record's header offset (one memcpy
per row) and fields are columns of those rows. Records we cannot use get a reason
code, counted in the report, and drop out at the end.

Decisions worth knowing:

- IP fragments are never reassembled: any IPv4 packet with MF set or a non-zero
  fragment offset, and any IPv6 packet with a fragment header other than an atomic
  one (offset 0, M clear), is skipped as ``ip_fragment`` (even a first fragment
  that still carries the ports), so a flow's packet and byte counts never mix
  whole packets with pieces.
- Sizes are IP lengths: the IPv4 total length, or 40 + the IPv6 payload length.
  A length of 0 (segmentation offload in loopback captures) is replaced by the
  length on the wire. Link-layer padding after the IP packet is ignored.
- A packet cut short by the snapshot length is kept if its transport header is
  complete; its payload counts at its declared length, the ``bytes`` views see
  only what was captured.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from flowsplit.data.pcap import ReadReport
from flowsplit.data.staging import RecordChunk

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
)
(_OK, _TRUNC, _NON_IP, _BAD_IP, _FRAG, _OTHER_L4, _BAD_EXT, _BAD_TCP, _BAD_UDP, _BAD_LT) = range(
    len(REASONS)
)

ET_IPV4, ET_IPV6 = 0x0800, 0x86DD
_VLAN = (0x8100, 0x88A8, 0x9100)
_MPLS = (0x8847, 0x8848)
_PPPOE = 0x8864
_TUNNELS = np.array([*_VLAN, *_MPLS, _PPPOE])
_PPP_TO_ET = {0x0021: ET_IPV4, 0x0057: ET_IPV6, 0x0281: 0x8847, 0x0283: 0x8848}
_IPV6_EXT = np.array([0, 43, 60, 44, 51, 135, 139, 140])
_MAX_CHAIN = 8  # VLAN/MPLS/PPPoE headers, and IPv6 extension headers, followed per packet
_V4_MAPPED = np.uint64(0xFFFF00000000)
_MALFORMED_CODES = np.array([_TRUNC, _BAD_IP, _BAD_EXT, _BAD_TCP, _BAD_UDP])
_LINK_DECODERS = frozenset({0, 1, 9, 12, 14, 101, 104, 108, 113, 228, 229, 276})


@dataclass
class Packets:
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
    ip_len: np.ndarray  # int64, IP packet length on the wire
    pay_len: np.ndarray  # int64, transport payload length on the wire
    ip_off: np.ndarray  # int64, offset of the IP header in the staging buffer
    ip_cap: np.ndarray  # int64, bytes of the IP packet captured
    l4_rel: np.ndarray  # int64, offset of the transport header from the IP header
    pay_off: np.ndarray  # int64, offset of the payload in the staging buffer
    pay_cap: np.ndarray  # int64, payload bytes captured
    vlan: np.ndarray  # int64, the VLAN ids met on the way in (0: none), for the flow key

    def __len__(self) -> int:
        return len(self.src)

    def take(self, idx: np.ndarray) -> Packets:
        return Packets(*(getattr(self, f.name)[idx] for f in fields(self)))


def _ppp_to_ethertype(proto: np.ndarray) -> np.ndarray:
    et = np.zeros(len(proto), dtype=np.int64)
    for ppp, eth in _PPP_TO_ET.items():
        et[proto == ppp] = eth
    return et


def _link(lt: int, sb, off: np.ndarray) -> tuple[np.ndarray | int, np.ndarray]:
    """(offset of the network header, ethertype) for frames of one link type."""
    n = len(off)
    if lt == 1:  # Ethernet
        return 14, sb.word(off + 12, ">u2")
    if lt == 113:  # Linux cooked v1
        return 16, sb.word(off + 14, ">u2")
    if lt == 276:  # Linux cooked v2
        return 20, sb.word(off, ">u2")
    if lt in (0, 108):  # BSD loopback: address family in either byte order
        fam = np.minimum(sb.word(off, "<u4"), sb.word(off, ">u4"))
        et = np.where(fam == 2, ET_IPV4, np.where(np.isin(fam, (24, 28, 30)), ET_IPV6, 0))
        return 4, et
    if lt in (12, 14, 101):  # raw IP: the version nibble decides
        v = sb.word(off, "u1") >> 4
        return 0, np.where(v == 4, ET_IPV4, np.where(v == 6, ET_IPV6, 0))
    if lt in (228, 229):
        return 0, np.full(n, ET_IPV4 if lt == 228 else ET_IPV6)
    if lt == 104:  # Cisco HDLC: address, control, ethertype
        return 4, sb.word(off + 2, ">u2")
    if lt == 9:  # PPP, with or without address/control; some writers put C-HDLC here
        w = sb.word(off, ">u4")
        b0, b1 = w >> 24, (w >> 16) & 0xFF
        hdlc = (b0 == 0x0F) | (b0 == 0x8F)
        ac = (b0 == 0xFF) & (b1 == 0x03)
        short = (b0 & 1) == 1  # protocol-field compression: a one-byte protocol
        proto = np.where(ac, w & 0xFFFF, np.where(short, b0, w >> 16))
        et = np.where(hdlc, w & 0xFFFF, _ppp_to_ethertype(proto))
        return np.where(hdlc | ac, 4, np.where(short, 1, 2)), et
    raise AssertionError(f"link type {lt} has no decoder")


def decode_packets(chunk: RecordChunk, report: ReadReport, *, strict: bool = False) -> Packets:
    """Decode the records of a chunk; count and drop those that are not TCP/UDP over IP."""
    recs, sb = chunk.records, chunk.buffer
    word = sb.word
    n = len(recs)
    data_off, caplen, lt = recs.data_off, recs.caplen, recs.linktype
    reason = np.zeros(n, dtype=np.int8)
    if n and (lt == 192).any():
        data_off, caplen, lt = _strip_ppi(sb, recs, reason)
    if n and (lt == lt[0]).all():
        l3, et = _link_group(int(lt[0]), sb, data_off, reason, report)
        l3 = np.full(n, l3) if np.ndim(l3) == 0 else l3
    else:
        l3, et = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        for value in np.unique(lt).tolist():
            idx = np.flatnonzero(lt == value)
            l3[idx], et[idx] = _link_group(value, sb, data_off[idx], reason, report, idx)
    if np.isin(et, _TUNNELS).any():
        _follow_tunnels(sb, data_off, l3, et)
    ip_cap = caplen - l3
    is4, is6 = et == ET_IPV4, et == ET_IPV6
    _set(reason, ~is4 & ~is6, _NON_IP)
    _set(reason, ip_cap < 0, _TRUNC)

    ip_off = data_off + l3
    w0 = word(ip_off, ">u8")  # IP header bytes 0-7
    ver = (w0 >> 60) & 15
    ihl4 = ((w0 >> 56) & 15) * 4
    wire_ip = recs.wirelen - l3
    tot4 = (w0 >> 32) & 0xFFFF
    tot4 = np.where(tot4 == 0, wire_ip, tot4)  # 0: segmentation offload
    tot6 = ((w0 >> 16) & 0xFFFF) + 40
    tot6 = np.where(tot6 == 40, np.maximum(wire_ip, 40), tot6)
    ip_len = np.where(is6, tot6, tot4)
    _set(reason, np.where(is6, ip_cap < 40, ip_cap < 20), _TRUNC)
    _set(reason, np.where(is6, ver != 6, (ver != 4) | (ihl4 < 20)), _BAD_IP)
    _set(reason, is4 & (ip_cap < ihl4), _TRUNC)
    _set(reason, is4 & (tot4 < ihl4), _BAD_IP)
    _set(reason, is4 & ((w0 & 0x3FFF) != 0), _FRAG)  # MF set or a fragment offset
    proto = np.where(is6, (w0 >> 8) & 0xFF, word(ip_off + 9, "u1"))
    l4_rel = np.where(is6, 40, ihl4)
    if is6.any():
        chain = is6 & (reason == _OK) & np.isin(proto, _IPV6_EXT)
        if chain.any():
            _ipv6_chain(sb, np.flatnonzero(chain), ip_off, ip_cap, proto, l4_rel, reason)
    tcp = proto == 6
    _set(reason, ~tcp & (proto != 17), _OTHER_L4)
    _set(reason, ip_cap < l4_rel + np.where(tcp, 20, 8), _TRUNC)
    idx = np.flatnonzero(reason == _OK)  # the records still in play
    if len(idx) < n:
        _count(report, reason, recs, chunk, strict, caplen)
        tcp, ip_off, ip_cap, ip_len = tcp[idx], ip_off[idx], ip_cap[idx], ip_len[idx]
        l4_rel, proto, is6 = l4_rel[idx], proto[idx], is6[idx]
    l4 = ip_off + l4_rel
    ports = word(l4, ">u4")
    tw = word(l4 + 12, ">u4")  # data offset, flags, window
    thl = np.where(tcp, ((tw >> 28) & 15) * 4, 8)
    pay_rel = l4_rel + thl
    bad = np.where(tcp, (thl < 20) | (ip_len < pay_rel), ip_len < pay_rel)
    if bad.any():
        code = np.zeros(n, dtype=np.int8)
        code[idx[bad]] = np.where(tcp[bad], _BAD_TCP, _BAD_UDP)
        _count(report, code, recs, chunk, strict, caplen)
        keep = np.flatnonzero(~bad)
        tcp, ip_off, ip_cap, ip_len = tcp[keep], ip_off[keep], ip_cap[keep], ip_len[keep]
        l4_rel, proto, is6, idx = l4_rel[keep], proto[keep], is6[keep], idx[keep]
        ports, tw, pay_rel = ports[keep], tw[keep], pay_rel[keep]
    w1 = word(ip_off + 8, ">u8").view(np.uint64)  # IPv4: ..., source; IPv6: source high
    w2 = word(ip_off + 16, ">u8").view(np.uint64)  # IPv4: destination, ...
    mask32 = np.uint64(0xFFFFFFFF)
    sa_hi, sa_lo = np.zeros(len(w1), dtype=np.uint64), (w1 & mask32) | _V4_MAPPED
    da_hi, da_lo = np.zeros(len(w1), dtype=np.uint64), (w2 >> np.uint64(32)) | _V4_MAPPED
    if is6.any():
        i6 = np.flatnonzero(is6)
        sa_hi[i6], sa_lo[i6] = w1[i6], w2[i6]
        da_hi[i6] = word(ip_off[i6] + 24, ">u8").view(np.uint64)
        da_lo[i6] = word(ip_off[i6] + 32, ">u8").view(np.uint64)
    ip_cap = np.minimum(ip_cap, ip_len)
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
        flags=np.where(tcp, (tw >> 16) & 0xFF, 0).astype(np.uint8),
        window=np.where(tcp, tw & 0xFFFF, 0),
        ip_len=ip_len,
        pay_len=ip_len - pay_rel,
        ip_off=ip_off,
        ip_cap=ip_cap,
        l4_rel=l4_rel,
        pay_off=ip_off + pay_rel,
        pay_cap=np.maximum(ip_cap - pay_rel, 0),
        vlan=np.zeros(len(idx), dtype=np.int64),
    )


def _link_group(lt, sb, off, reason, report, idx=slice(None)):
    if lt == -1:  # a PPI header already found broken
        return 0, np.zeros(len(off), dtype=np.int64)
    if lt not in _LINK_DECODERS:
        reason[idx] = _BAD_LT
        report.skipped[f"unsupported_linktype:{lt}"] += len(off)
        return 0, np.zeros(len(off), dtype=np.int64)
    return _link(lt, sb, off)


def _set(reason: np.ndarray, cond: np.ndarray, code: int) -> None:
    """Give ``code`` to the records still fine where ``cond`` holds (first reason wins)."""
    reason[cond & (reason == _OK)] = code


def _strip_ppi(sb, recs, reason):
    """Step over PPI headers: the frame inside has the link type the header names."""
    data_off, caplen, lt = recs.data_off.copy(), recs.caplen.copy(), recs.linktype.copy()
    idx = np.flatnonzero(lt == 192)
    hlen = sb.word(data_off[idx] + 2, "<u2")
    dlt = sb.word(data_off[idx] + 4, "<u4")
    bad = (hlen < 8) | (hlen > caplen[idx])
    reason[idx[bad]] = _TRUNC
    data_off[idx] += np.where(bad, 0, hlen)
    caplen[idx] -= np.where(bad, 0, hlen)
    lt[idx] = np.where(bad, -1, dlt)  # a PPI inside PPI stays 192: not decoded
    return data_off, caplen, lt


def _follow_tunnels(sb, data_off, l3, et) -> None:
    """Step through VLAN tags, MPLS labels and PPPoE sessions to the IP header."""
    for _ in range(_MAX_CHAIN):
        sub = np.flatnonzero(np.isin(et, _TUNNELS))
        if not len(sub):
            return
        w = sb.word(data_off[sub] + l3[sub], ">u8")
        e = et[sub]
        vlan, mpls = np.isin(e, _VLAN), np.isin(e, _MPLS)
        v = (w >> 28) & 15  # version nibble after a 4-byte MPLS label
        inner = np.where(v == 4, ET_IPV4, np.where(v == 6, ET_IPV6, 0))
        after_mpls = np.where(((w >> 40) & 1) == 1, inner, e)  # bottom of the label stack?
        et[sub] = np.where(
            vlan, (w >> 32) & 0xFFFF, np.where(mpls, after_mpls, _ppp_to_ethertype(w & 0xFFFF))
        )
        l3[sub] += np.where(vlan | mpls, 4, 8)
    et[np.isin(et, _TUNNELS)] = 0  # too deep: not followed further


def _ipv6_chain(sb, sub, ip_off, ip_cap, proto, l4_rel, reason) -> None:
    """Follow IPv6 extension headers of the packets in ``sub`` to the transport header."""
    for _ in range(_MAX_CHAIN):
        nh = proto[sub]
        ext = np.isin(nh, _IPV6_EXT)
        sub, nh = sub[ext], nh[ext]
        if not len(sub):
            return
        off = l4_rel[sub]
        short = ip_cap[sub] < off + 8
        reason[sub[short]] = _TRUNC
        w = sb.word(ip_off[sub] + off, ">u8")
        frag_field = (w >> 32) & 0xFFFF
        frag = (nh == 44) & (((frag_field >> 3) != 0) | ((frag_field & 1) != 0))
        reason[sub[frag & ~short]] = _FRAG
        hlen = (w >> 48) & 0xFF
        size = np.where(nh == 44, 8, np.where(nh == 51, (hlen + 2) * 4, (hlen + 1) * 8))
        proto[sub] = (w >> 56) & 0xFF
        l4_rel[sub] = off + size
        sub = sub[~short & ~frag]
    reason[sub[np.isin(proto[sub], _IPV6_EXT)]] = _BAD_EXT


def _count(report, reason, recs, chunk, strict, caplen) -> None:
    """Add the reasons to the report (strict mode: raise on the first malformed packet)."""
    if strict:
        malformed = np.isin(reason, _MALFORMED_CODES)
        # Cut by the snapshot length is normal; shorter than its own wire length is not.
        malformed &= (reason != _TRUNC) | (caplen >= recs.wirelen)
        if malformed.any():
            i = int(np.argmax(malformed))
            name = REASONS[reason[i]]
            report.skip(
                name,
                1,
                chunk.paths[int(recs.src[i])],
                strict=True,
                where=f" (record {int(recs.index[i])})",
            )
    counts = np.bincount(reason.astype(np.int64), minlength=len(REASONS))
    for code in np.flatnonzero(counts).tolist():
        if code not in (_OK, _BAD_LT):
            report.skipped[REASONS[code]] += int(counts[code])
