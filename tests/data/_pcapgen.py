"""A tiny writer of synthetic pcap / pcapng captures for tests.

Frames are built from small layer functions (``ether``, ``ipv4``, ``ipv6``, ``tcp``,
``udp``, ...) that return bytes, so a test states exactly what is on the wire.
Checksums are real (the reader must find and mask them at the right places).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

FIN, SYN, RST, PSH, ACK, URG, ECE, CWR = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071)."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _addr(a: str) -> bytes:
    return ipaddress.ip_address(a).packed


def tcp(
    sport: int,
    dport: int,
    flags: int = ACK,
    payload: bytes = b"",
    *,
    seq: int = 1,
    ack: int = 0,
    window: int = 8192,
    options: bytes = b"",
    src: str = "",
    dst: str = "",
    doff: int | None = None,
) -> bytes:
    """A TCP segment; with ``src``/``dst`` its checksum is computed."""
    options += b"\0" * (-len(options) % 4)
    off = doff if doff is not None else 5 + len(options) // 4
    hdr = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, off << 4, flags, window, 0, 0)
    seg = hdr + options + payload
    if src and dst:
        seg = _with_l4_checksum(seg, src, dst, 6, 16)
    return seg


def udp(sport: int, dport: int, payload: bytes = b"", *, src: str = "", dst: str = "") -> bytes:
    """A UDP datagram; with ``src``/``dst`` its checksum is computed."""
    seg = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    if src and dst:
        seg = _with_l4_checksum(seg, src, dst, 17, 6)
    return seg


def _with_l4_checksum(seg: bytes, src: str, dst: str, proto: int, at: int) -> bytes:
    s, d = _addr(src), _addr(dst)
    if len(s) == 4:
        pseudo = s + d + struct.pack("!BBH", 0, proto, len(seg))
    else:
        pseudo = s + d + struct.pack("!IxxxB", len(seg), proto)
    c = checksum(pseudo + seg) or 0xFFFF
    return seg[:at] + struct.pack("!H", c) + seg[at + 2 :]


def ipv4(
    src: str,
    dst: str,
    proto: int,
    payload: bytes,
    *,
    options: bytes = b"",
    ttl: int = 64,
    ident: int = 1,
    frag: int = 0,
    mf: bool = False,
    df: bool = True,
    total_len: int | None = None,
    ihl: int | None = None,
) -> bytes:
    """An IPv4 packet (``frag`` in 8-byte units); header checksum computed."""
    options += b"\0" * (-len(options) % 4)
    hl = ihl if ihl is not None else 5 + len(options) // 4
    tl = total_len if total_len is not None else 20 + len(options) + len(payload)
    ff = (0x4000 if df else 0) | (0x2000 if mf else 0) | frag
    hdr = (
        struct.pack(
            "!BBHHHBBH4s4s", 0x40 | hl, 0, tl, ident, ff, ttl, proto, 0, _addr(src), _addr(dst)
        )
        + options
    )
    hdr = hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:]
    return hdr + payload


def ipv6(
    src: str,
    dst: str,
    nh: int,
    payload: bytes,
    *,
    ext: Sequence[tuple[int, bytes]] = (),
    hlim: int = 64,
    plen: int | None = None,
) -> bytes:
    """An IPv6 packet; ``ext`` is a list of (header type, body) extension headers.

    Bodies are the bytes after the 2-byte (next header, length) prefix; they are
    padded to the header's unit (8 bytes; 4 for AH). Fragment headers (44) are
    given their full 6-byte body.
    """
    chain = b""
    types = [t for t, _ in ext] + [nh]
    for (t, body), nxt in zip(ext, types[1:], strict=True):
        if t == 44:
            chain += struct.pack("!BB", nxt, 0) + body[:6].ljust(6, b"\0")
        elif t == 51:
            body += b"\0" * (-(len(body) + 2) % 4)
            chain += struct.pack("!BB", nxt, (len(body) + 2) // 4 - 2) + body
        else:
            body += b"\0" * (-(len(body) + 2) % 8)
            chain += struct.pack("!BB", nxt, (len(body) + 2) // 8 - 1) + body
    first = types[0]
    body = chain + payload
    pl = plen if plen is not None else len(body)
    hdr = struct.pack("!IHBB16s16s", 6 << 28, pl, first, hlim, _addr(src), _addr(dst))
    return hdr + body


def ether(
    payload: bytes,
    ethertype: int = 0x0800,
    *,
    vlans: Sequence[tuple[int, int]] = (),
    src: bytes = b"\x02\0\0\0\0\1",
    dst: bytes = b"\x02\0\0\0\0\2",
) -> bytes:
    """An Ethernet II frame; ``vlans`` is a list of (tag type, VLAN id), outermost first."""
    tags = b""
    types = [t for t, _ in vlans] + [ethertype]
    for (_, vid), nxt in zip(vlans, types[1:], strict=True):
        tags += struct.pack("!HH", vid, nxt)
    frame = dst + src + struct.pack("!H", types[0]) + tags + payload
    return frame.ljust(60, b"\0")  # minimum frame size: the reader must ignore padding


def sll(payload: bytes, proto: int = 0x0800) -> bytes:
    return struct.pack("!HHH8sH", 0, 1, 6, b"\x02\0\0\0\0\1\0\0", proto) + payload


def sll2(payload: bytes, proto: int = 0x0800) -> bytes:
    return struct.pack("!HHIHBB8s", proto, 0, 2, 1, 0, 6, b"\x02\0\0\0\0\1\0\0") + payload


def null(payload: bytes, family: int = 2, endian: str = "<") -> bytes:
    return struct.pack(endian + "I", family) + payload


def ppp(payload: bytes, proto: int = 0x0021, address_control: bool = True) -> bytes:
    return (b"\xff\x03" if address_control else b"") + struct.pack("!H", proto) + payload


def chdlc(payload: bytes, proto: int = 0x0800) -> bytes:
    return struct.pack("!BBH", 0x0F, 0, proto) + payload


def ppi(frame: bytes, dlt: int = 1) -> bytes:
    field_ = struct.pack("<HH", 2, 4) + b"\0" * 4
    return struct.pack("<BBHI", 0, 0, 8 + len(field_), dlt) + field_ + frame


def mpls(payload: bytes, labels: Sequence[int] = (16,)) -> bytes:
    out = b""
    for i, label in enumerate(labels):
        bos = 1 if i == len(labels) - 1 else 0
        out += struct.pack("!I", (label << 12) | (bos << 8) | 64)
    return out + payload


@dataclass
class Packet:
    """One record: timestamp in seconds, frame bytes, optional wire length and interface."""

    ts: float
    data: bytes
    wirelen: int | None = None
    iface: int = 0


def write_pcap(
    path: str | Path,
    packets: Iterable[Packet | tuple[float, bytes]],
    *,
    linktype: int = 1,
    endian: str = "<",
    nano: bool = False,
    snaplen: int = 65535,
) -> Path:
    """Write a classic pcap file."""
    path = Path(path)
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = [struct.pack(endian + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    scale = 10**9 if nano else 10**6
    for p in packets:
        p = p if isinstance(p, Packet) else Packet(*p)
        sec = int(p.ts // 1)
        frac = round((p.ts - sec) * scale)
        if frac >= scale:
            sec, frac = sec + 1, frac - scale
        wl = p.wirelen if p.wirelen is not None else len(p.data)
        out.append(struct.pack(endian + "IIII", sec, frac, len(p.data), wl) + p.data)
    path.write_bytes(b"".join(out))
    return path


def _block(endian: str, btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    n = 12 + len(body)
    return struct.pack(endian + "II", btype, n) + body + struct.pack(endian + "I", n)


def shb(endian: str = "<") -> bytes:
    return _block(endian, 0x0A0D0D0A, struct.pack(endian + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def idb(
    linktype: int = 1,
    *,
    endian: str = "<",
    tsresol: int | None = None,
    tsoffset: int | None = None,
    snaplen: int = 0,
) -> bytes:
    opts = b""
    if tsresol is not None:
        opts += struct.pack(endian + "HHB3x", 9, 1, tsresol)
    if tsoffset is not None:
        opts += struct.pack(endian + "HHq", 14, 8, tsoffset)
    if opts:
        opts += struct.pack(endian + "HH", 0, 0)
    return _block(endian, 1, struct.pack(endian + "HHI", linktype, 0, snaplen) + opts)


def epb(p: Packet, *, endian: str = "<", units: int = 10**6, btype: int = 6) -> bytes:
    """An enhanced packet block (or an obsolete packet block with ``btype=2``)."""
    ticks = round(p.ts * units)
    wl = p.wirelen if p.wirelen is not None else len(p.data)
    if btype == 2:
        head = struct.pack(
            endian + "HHIIII", p.iface, 0, ticks >> 32, ticks & 0xFFFFFFFF, len(p.data), wl
        )
    else:
        head = struct.pack(
            endian + "IIIII", p.iface, ticks >> 32, ticks & 0xFFFFFFFF, len(p.data), wl
        )
    return _block(endian, btype, head + p.data)


def spb(p: Packet, *, endian: str = "<") -> bytes:
    wl = p.wirelen if p.wirelen is not None else len(p.data)
    return _block(endian, 3, struct.pack(endian + "I", wl) + p.data)


def custom_block(endian: str = "<", btype: int = 0x40000BAD, body: bytes = b"hello") -> bytes:
    return _block(endian, btype, body)


def write_pcapng(
    path: str | Path,
    packets: Iterable[Packet | tuple[float, bytes]],
    *,
    linktypes: Sequence[int] = (1,),
    endian: str = "<",
    tsresol: Sequence[int | None] | None = None,
    block: str = "epb",
    extra: bytes = b"",
) -> Path:
    """Write a one-section pcapng file, one interface per link type.

    ``tsresol`` gives each interface's if_tsresol byte (None: default microseconds);
    ``block`` is ``epb``, ``spb`` or ``opb``; ``extra`` is inserted after the IDBs.
    """
    path = Path(path)
    tsresol = list(tsresol) if tsresol is not None else [None] * len(linktypes)
    out = [shb(endian)]
    units = []
    for lt, r in zip(linktypes, tsresol, strict=True):
        out.append(idb(lt, endian=endian, tsresol=r))
        if r is None:
            units.append(10**6)
        else:
            units.append(2 ** (r & 0x7F) if r & 0x80 else 10 ** (r & 0x7F))
    out.append(extra)
    for p in packets:
        p = p if isinstance(p, Packet) else Packet(*p)
        if block == "spb":
            out.append(spb(p, endian=endian))
        else:
            out.append(
                epb(p, endian=endian, units=units[p.iface], btype=2 if block == "opb" else 6)
            )
    path.write_bytes(b"".join(out))
    return path


def tcp_conversation(
    a: str,
    b: str,
    sport: int,
    dport: int,
    t0: float = 1000.0,
    *,
    payloads: Sequence[tuple[str, bytes]] = (("a", b"hello"), ("b", b"world")),
    close: bool = True,
    dt: float = 0.01,
    v6: bool = False,
    isn: int = 1,
) -> list[Packet]:
    """Ethernet frames of a whole TCP connection: handshake, data, optional FIN close.

    ``isn`` is the sequence number of a's segments (its SYN's: the connection's)."""
    ip = ipv6 if v6 else ipv4
    et = 0x86DD if v6 else 0x0800
    steps: list[tuple[str, int, bytes]] = [("a", SYN, b""), ("b", SYN | ACK, b""), ("a", ACK, b"")]
    steps += [(side, PSH | ACK, data) for side, data in payloads]
    if close:
        steps += [("a", FIN | ACK, b""), ("b", FIN | ACK, b""), ("a", ACK, b"")]
    out = []
    for i, (side, flags, data) in enumerate(steps):
        s, d, sp, dp = (a, b, sport, dport) if side == "a" else (b, a, dport, sport)
        seg = tcp(sp, dp, flags, data, seq=isn if side == "a" else 1, src=s, dst=d)
        out.append(Packet(t0 + i * dt, ether(ip(s, d, 6, seg), et)))
    return out


# --- tunnels and other encapsulations ----------------------------------------------


def gre(payload: bytes, proto: int = 0x0800, *, key: int | None = None, seq: int | None = None):
    """A GRE header (RFC 2784/2890) and its payload."""
    flags = (0x2000 if key is not None else 0) | (0x1000 if seq is not None else 0)
    out = struct.pack("!HH", flags, proto)
    if key is not None:
        out += struct.pack("!I", key)
    if seq is not None:
        out += struct.pack("!I", seq)
    return out + payload


def erspan2(frame: bytes, session: int = 1) -> bytes:
    """An ERSPAN type II header (8 bytes) and the mirrored Ethernet frame."""
    return struct.pack("!HHI", (1 << 12) | 0, session, 0) + frame


def erspan3(frame: bytes, session: int = 1, *, subheader: bool = False) -> bytes:
    """An ERSPAN type III header (12 bytes, + 8 with the O bit) and the mirrored frame."""
    hdr = struct.pack("!HHIHH", (2 << 12), session, 0, 0, 1 if subheader else 0)
    return hdr + (b"\0" * 8 if subheader else b"") + frame


def vxlan(frame: bytes, vni: int = 42) -> bytes:
    return struct.pack("!II", 0x08000000, vni << 8) + frame


def geneve(payload: bytes, proto: int = 0x6558, options: bytes = b"") -> bytes:
    return struct.pack("!BBHI", len(options) // 4, 0, proto, 42 << 8) + options + payload


def gtp_u(packet: bytes, teid: int = 7, *, ext: bool = False) -> bytes:
    """A GTP-U G-PDU; with ``ext`` one PDU session container extension header."""
    if not ext:
        return struct.pack("!BBHI", 0x30, 0xFF, len(packet), teid) + packet
    opt = struct.pack("!HBB", 0, 0, 0x85)  # sequence, N-PDU, next extension: PDU session
    ext_hdr = struct.pack("!BBBB", 1, 0, 9, 0)  # length 1 (4 bytes), content, next: none
    body = opt + ext_hdr + packet
    return struct.pack("!BBHI", 0x34, 0xFF, len(body), teid) + body


def llc_snap_frame(payload: bytes, ethertype: int = 0x0800) -> bytes:
    """An 802.3 frame with an LLC/SNAP header (the length field instead of an ethertype)."""
    llc = b"\xaa\xaa\x03\0\0\0" + struct.pack("!H", ethertype) + payload
    return b"\x02\0\0\0\0\2\x02\0\0\0\0\1" + struct.pack("!H", len(llc)) + llc


def radiotap_wlan(payload: bytes, ethertype: int = 0x0800, *, qos: bool = True) -> bytes:
    """A radiotap header, an 802.11 data frame (QoS or not) and LLC/SNAP."""
    rt = struct.pack("<BBHI", 0, 0, 8, 0)
    fc = 0x0088 if qos else 0x0008  # type data, subtype QoS data / data
    hdr = struct.pack("<HH", fc | 0x0100, 0) + b"\x02\0\0\0\0\1" * 3 + b"\0\0"
    if qos:
        hdr += b"\0\0"
    return rt + hdr + b"\xaa\xaa\x03\0\0\0" + struct.pack("!H", ethertype) + payload


def nflog(packet: bytes, family: int = 2) -> bytes:
    """An NFLOG record: header, a prefix TLV, then the payload TLV."""
    prefix = b"test\0"
    tlv1 = struct.pack("<HH", 4 + len(prefix), 10) + prefix
    tlv1 += b"\0" * (-len(tlv1) % 4)
    tlv2 = struct.pack("<HH", 4 + len(packet), 9) + packet
    return struct.pack("<BBH", family, 0, 0) + tlv1 + tlv2


def pppoe(packet: bytes, proto: int = 0x0021, *, short: bool = False) -> bytes:
    """A PPPoE session header and a PPP protocol field (one byte with ``short``)."""
    ppp_proto = struct.pack("!B", proto) if short else struct.pack("!H", proto)
    body = ppp_proto + packet
    return struct.pack("!BBHH", 0x11, 0, 1, len(body)) + body


def ipv4_fragments(
    src: str, dst: str, proto: int, payload: bytes, size: int, *, ident: int = 1
) -> list[bytes]:
    """The fragments of one IPv4 datagram, ``size`` payload bytes each (a multiple of 8)."""
    out = []
    for off in range(0, len(payload), size):
        more = off + size < len(payload)
        piece = payload[off : off + size]
        out.append(ipv4(src, dst, proto, piece, frag=off // 8, mf=more, df=False, ident=ident))
    return out


def ipv6_fragments(src: str, dst: str, nh: int, payload: bytes, size: int, ident: int = 9):
    """The fragments of one IPv6 packet, ``size`` payload bytes each (a multiple of 8)."""
    out = []
    for off in range(0, len(payload), size):
        more = off + size < len(payload)
        body = struct.pack("!HI", off | int(more), ident)
        out.append(ipv6(src, dst, nh, payload[off : off + size], ext=[(44, body)]))
    return out


def capwap_data(frame: bytes, *, native_80211: bool = False) -> bytes:
    """A CAPWAP data header (RFC 5415, 8 bytes) and an Ethernet or 802.11 frame."""
    wbid, t = (1, 1) if native_80211 else (0, 0)
    word = (2 << 19) | (wbid << 9) | (t << 8)  # HLEN 2 words, no optional fields
    return struct.pack("!II", word, 0) + frame


def wlan_data(payload: bytes, ethertype: int = 0x0800, *, swapped: bool = False) -> bytes:
    """An 802.11 data frame (no QoS) with LLC/SNAP; ``swapped``: frame control byte-swapped."""
    fc = struct.pack(">H" if swapped else "<H", 0x0108)  # data, ToDS
    hdr = fc + b"\0\0" + b"\x02\0\0\0\0\1" * 3 + b"\0\0"
    return hdr + b"\xaa\xaa\x03\0\0\0" + struct.pack("!H", ethertype) + payload


def gre_pptp(ppp_frame: bytes, *, call_id: int = 7, seq: int | None = 1, ack: int | None = 5):
    """An enhanced GRE (version 1, RFC 2637) header carrying a PPP frame."""
    flags = (
        0x2000 | 0x0001 | (0x1000 if seq is not None else 0) | (0x0080 if ack is not None else 0)
    )
    out = struct.pack("!HHHH", flags, 0x880B, len(ppp_frame), call_id)
    if seq is not None:
        out += struct.pack("!I", seq)
    if ack is not None:
        out += struct.pack("!I", ack)
    return out + ppp_frame
