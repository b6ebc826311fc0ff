# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled fast path of the packet decoder: the common case, one pass per record.

:func:`decode_common` decodes the records that take the common path through
:mod:`flowsplit.reader.packets` (Ethernet, Linux cooked v1/v2, raw IP or BSD
loopback, with any VLAN tags, then IPv4 without fragmentation or IPv6 without
extension headers, then a well-formed TCP or UDP header on a port that is not a
tunnel's) and leaves every other record, untouched, to the NumPy decoder: this
kernel only ever says "mine, with these fields" or "not mine". For the records it
takes, every field is the one ``PacketDecoder`` computes (``tests/data/
test_kernel.py`` compares the two on every record of generated and shared
captures), so the output does not depend on whether the extension is built.

The module also holds the compiled twins of the reader's other per-record and
per-packet passes (record walks, header gathers, view copies, flow accumulators,
``seq`` and ``stats`` rows, flow-key and row hashes, range maxima): each is used only
when the extension is built, beside its NumPy path, and equals it bit for bit
(``tests/data/test_kernel.py``).

The protocol numbers are those of :mod:`flowsplit.reader.protocols`; they are
repeated here as C constants, and :data:`CONSTANTS` exports them so that a test
checks they agree.
"""

from libc.math cimport INFINITY, NAN, sqrt
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy, memset
from cpython cimport array
from cpython.object cimport Py_SIZE

import array
import numpy as np

cdef enum:
    LT_NULL = 0
    LT_ETHERNET = 1
    LT_RAW = 12
    LT_RAW_14 = 14
    LT_RAW_101 = 101
    LT_LOOP = 108
    LT_LINUX_SLL = 113
    LT_IPV4 = 228
    LT_IPV6 = 229
    LT_LINUX_SLL2 = 276
    ET_IPV4 = 0x0800
    ET_IPV6 = 0x86DD
    ET_VLAN_Q = 0x8100
    ET_VLAN_AD = 0x88A8
    ET_VLAN_OLD = 0x9100
    ETH_HEADER = 14
    ETH_TYPE_AT = 12
    SLL_HEADER = 16
    SLL_TYPE_AT = 14
    SLL2_HEADER = 20
    LOOP_HEADER = 4
    AF_INET = 2
    VLAN_TAG = 4
    VLAN_ID_MASK = 0x0FFF
    IPV4_MIN_HEADER = 20
    IPV6_HEADER = 40
    IPV4_FLAGS_OFFSET_MASK = 0x3FFF
    IPV4_PROTO_AT = 9
    IPV6_DST_AT = 24
    PROTO_TCP = 6
    PROTO_UDP = 17
    TCP_MIN_HEADER = 20
    UDP_HEADER = 8
    TCP_SEQ_AT = 4
    TCP_SYN = 0x02
    TCP_ACK = 0x10
    UDP_PORT_VXLAN = 4789
    UDP_PORT_GENEVE = 6081
    UDP_PORT_GTP_U = 2152
    UDP_PORT_CAPWAP_DATA = 5247
    MAX_VLAN_TAGS = 4  # more tags than this: the NumPy decoder (ids would overflow 64 bits)

# The IPv6 extension headers the NumPy decoder follows (protocols.IPV6_EXTENSIONS).
cdef int[8] IPV6_EXTENSIONS = [0, 43, 60, 44, 51, 135, 139, 140]
cdef uint64_t V4_MAPPED = 0xFFFF00000000ULL

CONSTANTS = {
    "LT_NULL": LT_NULL, "LT_ETHERNET": LT_ETHERNET, "LT_RAW_IP": (LT_RAW, LT_RAW_14, LT_RAW_101),
    "LT_LOOP": LT_LOOP, "LT_LINUX_SLL": LT_LINUX_SLL, "LT_IPV4": LT_IPV4, "LT_IPV6": LT_IPV6,
    "LT_LINUX_SLL2": LT_LINUX_SLL2, "ET_IPV4": ET_IPV4, "ET_IPV6": ET_IPV6,
    "ET_VLAN": (ET_VLAN_Q, ET_VLAN_AD, ET_VLAN_OLD), "ETH_HEADER": ETH_HEADER,
    "ETH_TYPE_AT": ETH_TYPE_AT, "SLL_HEADER": SLL_HEADER, "SLL_TYPE_AT": SLL_TYPE_AT,
    "SLL2_HEADER": SLL2_HEADER, "LOOP_HEADER": LOOP_HEADER, "AF_INET": AF_INET,
    "VLAN_TAG": VLAN_TAG, "VLAN_ID_MASK": VLAN_ID_MASK, "IPV4_MIN_HEADER": IPV4_MIN_HEADER,
    "IPV6_HEADER": IPV6_HEADER, "IPV4_FLAGS_OFFSET_MASK": IPV4_FLAGS_OFFSET_MASK,
    "IPV4_PROTO_AT": IPV4_PROTO_AT, "IPV6_DST_AT": IPV6_DST_AT, "PROTO_TCP": PROTO_TCP,
    "PROTO_UDP": PROTO_UDP, "TCP_MIN_HEADER": TCP_MIN_HEADER, "UDP_HEADER": UDP_HEADER,
    "TCP_SEQ_AT": TCP_SEQ_AT, "TCP_SYN": TCP_SYN, "TCP_ACK": TCP_ACK,
    "UDP_PORT_VXLAN": UDP_PORT_VXLAN, "UDP_PORT_GENEVE": UDP_PORT_GENEVE,
    "UDP_PORT_GTP_U": UDP_PORT_GTP_U, "UDP_PORT_CAPWAP_DATA": UDP_PORT_CAPWAP_DATA,
    "IPV6_EXTENSIONS": tuple(IPV6_EXTENSIONS[k] for k in range(8)),
}


cdef inline uint64_t be16(const uint8_t* p) noexcept nogil:
    return (<uint64_t>p[0] << 8) | p[1]


cdef inline uint64_t be32(const uint8_t* p) noexcept nogil:
    return (<uint64_t>p[0] << 24) | (<uint64_t>p[1] << 16) | (<uint64_t>p[2] << 8) | p[3]


cdef inline uint64_t le32(const uint8_t* p) noexcept nogil:
    return (<uint64_t>p[3] << 24) | (<uint64_t>p[2] << 16) | (<uint64_t>p[1] << 8) | p[0]


cdef inline uint64_t be64(const uint8_t* p) noexcept nogil:
    return (be32(p) << 32) | be32(p + 4)


cdef inline bint is_vlan(uint64_t et) noexcept nogil:
    return et == ET_VLAN_Q or et == ET_VLAN_AD or et == ET_VLAN_OLD


cdef inline int64_t link_header(
    const uint8_t* f, int64_t lt, uint64_t* et
) noexcept nogil:
    """Offset of the network header and its ethertype; -1 when not a common link type."""
    cdef uint64_t fam, v
    if lt == LT_ETHERNET:
        et[0] = be16(f + ETH_TYPE_AT)
        return ETH_HEADER
    if lt == LT_LINUX_SLL:
        et[0] = be16(f + SLL_TYPE_AT)
        return SLL_HEADER
    if lt == LT_LINUX_SLL2:
        et[0] = be16(f)
        return SLL2_HEADER
    if lt == LT_RAW or lt == LT_RAW_14 or lt == LT_RAW_101:
        v = f[0] >> 4
        et[0] = ET_IPV4 if v == 4 else (ET_IPV6 if v == 6 else 0)
        return 0
    if lt == LT_IPV4 or lt == LT_IPV6:
        et[0] = ET_IPV4 if lt == LT_IPV4 else ET_IPV6
        return 0
    if lt == LT_NULL or lt == LT_LOOP:
        fam = min(le32(f), be32(f))  # the address family in either byte order
        if fam == AF_INET:
            et[0] = ET_IPV4
        elif fam == 24 or fam == 28 or fam == 30:  # protocols.AF_INET6_BSD
            et[0] = ET_IPV6
        else:
            et[0] = 0
        return LOOP_HEADER
    return -1


cdef inline bint is_ipv6_extension(uint64_t proto) noexcept nogil:
    cdef int k
    for k in range(8):
        if proto == <uint64_t>IPV6_EXTENSIONS[k]:
            return True
    return False


cdef struct Packet:
    # What decode_common writes per packet (PacketDecoder's names).
    int64_t l3, ip_off, ip_cap, ip_len, l4_rel, pay_rel, sport, dport, syn_seq
    uint64_t vlan, flags, window, l4proto
    bint is6, tcp


cdef inline bint link_layer(
    const uint8_t* f, int64_t lt, Packet* p, uint64_t* et
) noexcept nogil:
    """The network header's offset and ethertype, past any VLAN tags; False: not ours."""
    cdef int tags = 0
    p.l3 = link_header(f, lt, et)
    if p.l3 < 0:
        return False
    p.vlan = 0
    while is_vlan(et[0]) and tags < MAX_VLAN_TAGS:
        p.vlan = (p.vlan << 12) | (be16(f + p.l3) & VLAN_ID_MASK)
        et[0] = be16(f + p.l3 + 2)
        p.l3 += VLAN_TAG
        tags += 1
    # Non-IP, a shim other than VLAN (MPLS, PPPoE, LLC), or too many tags: NumPy's.
    return et[0] == ET_IPV4 or et[0] == ET_IPV6


cdef inline bint ip_layer(const uint8_t* ip, int64_t wirelen, Packet* p) noexcept nogil:
    """IPv4 (not a fragment) or IPv6 (no extension header): length and transport offset."""
    cdef uint64_t w0 = be64(ip), version = (w0 >> 60) & 15
    cdef int64_t ihl
    if p.is6:
        p.ip_len = <int64_t>((w0 >> 16) & 0xFFFF) + IPV6_HEADER
        if p.ip_len == IPV6_HEADER:  # 0: segmentation offload
            p.ip_len = max(wirelen - p.l3, <int64_t>IPV6_HEADER)
        p.l4proto = (w0 >> 8) & 0xFF
        p.l4_rel = IPV6_HEADER
        return version == 6 and not is_ipv6_extension(p.l4proto)
    ihl = <int64_t>((w0 >> 56) & 15) * 4
    if version != 4 or ihl < IPV4_MIN_HEADER or p.ip_cap < ihl:
        return False
    p.ip_len = <int64_t>((w0 >> 32) & 0xFFFF)
    if p.ip_len == 0:  # segmentation offload
        p.ip_len = wirelen - p.l3
    p.l4proto = ip[IPV4_PROTO_AT]
    p.l4_rel = ihl
    # A bad length, or a fragment (MF set or an offset): NumPy's.
    return p.ip_len >= ihl and (w0 & IPV4_FLAGS_OFFSET_MASK) == 0


cdef inline bint is_tunnel_port(int64_t sport, int64_t dport) noexcept nogil:
    return (
        dport == UDP_PORT_VXLAN
        or dport == UDP_PORT_GENEVE
        or dport == UDP_PORT_GTP_U
        or sport == UDP_PORT_GTP_U
        or dport == UDP_PORT_CAPWAP_DATA
        or sport == UDP_PORT_CAPWAP_DATA
    )


cdef inline bint transport(const uint8_t* ip, Packet* p) noexcept nogil:
    """A whole TCP or UDP header (UDP not on a tunnel port): ports, flags, window."""
    cdef uint64_t ports, tw
    cdef int64_t thl
    p.tcp = p.l4proto == PROTO_TCP
    if not p.tcp and p.l4proto != PROTO_UDP:
        return False
    if p.ip_cap < p.l4_rel + (TCP_MIN_HEADER if p.tcp else UDP_HEADER):
        return False
    ports = be32(ip + p.l4_rel)
    p.sport, p.dport = <int64_t>(ports >> 16), <int64_t>(ports & 0xFFFF)
    p.syn_seq = -1
    if not p.tcp:
        if is_tunnel_port(p.sport, p.dport):
            return False  # maybe a tunnel: NumPy decides
        p.flags = p.window = 0
        p.pay_rel = p.l4_rel + UDP_HEADER
        return p.ip_len >= p.pay_rel
    tw = be32(ip + p.l4_rel + 12)  # data offset, flags, window
    thl = <int64_t>((tw >> 28) & 15) * 4
    p.flags, p.window = (tw >> 16) & 0xFF, tw & 0xFFFF
    if (p.flags & (TCP_SYN | TCP_ACK)) == TCP_SYN:  # a pure SYN: its sequence number
        p.syn_seq = <int64_t>be32(ip + p.l4_rel + TCP_SEQ_AT)
    p.pay_rel = p.l4_rel + thl
    return thl >= TCP_MIN_HEADER and p.ip_len >= p.pay_rel


cdef inline bint decode_one(
    const uint8_t* b, Py_ssize_t size, int64_t off, int64_t caplen, int64_t wirelen,
    int64_t lt, Packet* p,
) noexcept nogil:
    """Decode one record if it takes the common path; False leaves it to NumPy."""
    cdef uint64_t et
    # Every byte read lies in [off, off + 128) or in the IP packet's captured bytes,
    # which must lie in the buffer: anything else is left to NumPy.
    if off < 0 or off + 128 > size:
        return False
    if not link_layer(b + off, lt, p, &et):
        return False
    p.is6 = et == ET_IPV6
    p.ip_cap = caplen - p.l3
    p.ip_off = off + p.l3
    if p.ip_cap < (IPV6_HEADER if p.is6 else IPV4_MIN_HEADER) or p.ip_off + p.ip_cap > size:
        return False
    return ip_layer(b + p.ip_off, wirelen, p) and transport(b + p.ip_off, p)


def decode_common(
    const uint8_t[::1] buf,
    const int64_t[::1] data_off,
    const int64_t[::1] caplen,
    const int64_t[::1] wirelen,
    const int32_t[::1] linktype,
    bint vlan_key,
    int64_t[::1] rows,
    uint8_t[::1] ver,
    uint8_t[::1] proto,
    uint64_t[:, ::1] addr,
    int64_t[:, ::1] fields,
):
    """Decode the common-case records; returns how many were taken.

    For the k-th record taken: ``rows[k]`` is its position in the input,
    ``addr[:, k]`` its (source hi, source lo, destination hi, destination lo) and
    ``fields[:, k]`` its (sport, dport, flags, window, syn_seq, ip_len, pay_len,
    ip_off, ip_cap, l4_rel, pay_off, pay_cap, vlan), as ``PacketDecoder`` names them
    (one row per field, so that each field's column is contiguous).
    """
    cdef Py_ssize_t n = data_off.shape[0], i, k = 0
    cdef const uint8_t* ip
    cdef Packet p
    with nogil:
        for i in range(n):
            if not decode_one(&buf[0], buf.shape[0], data_off[i], caplen[i], wirelen[i],
                              linktype[i], &p):
                continue
            ip = &buf[p.ip_off]
            rows[k] = i
            ver[k] = 6 if p.is6 else 4
            proto[k] = <uint8_t>p.l4proto
            if p.is6:
                addr[0, k], addr[1, k] = be64(ip + 8), be64(ip + 16)
                addr[2, k], addr[3, k] = be64(ip + IPV6_DST_AT), be64(ip + IPV6_DST_AT + 8)
            else:
                addr[0, k], addr[1, k] = 0, be32(ip + 12) | V4_MAPPED
                addr[2, k], addr[3, k] = 0, be32(ip + 16) | V4_MAPPED
            p.ip_cap = min(p.ip_cap, p.ip_len)
            fields[0, k], fields[1, k] = p.sport, p.dport
            fields[2, k], fields[3, k] = <int64_t>p.flags, <int64_t>p.window
            fields[4, k], fields[5, k] = p.syn_seq, p.ip_len
            fields[6, k], fields[7, k] = p.ip_len - p.pay_rel, p.ip_off
            fields[8, k], fields[9, k] = p.ip_cap, p.l4_rel
            fields[10, k] = p.ip_off + p.pay_rel
            fields[11, k] = max(p.ip_cap - p.pay_rel, <int64_t>0)
            fields[12, k] = <int64_t>p.vlan if vlan_key else 0
            k += 1
    return k



cdef inline uint64_t u32(const uint8_t* p, bint big) noexcept nogil:
    return be32(p) if big else le32(p)


cdef inline void push(array.array starts, Py_ssize_t off) except *:
    """Append ``off`` to an ``array('q')`` (grown geometrically, as ``append`` does)."""
    cdef Py_ssize_t n = Py_SIZE(starts)
    array.resize_smart(starts, n + 1)
    starts.data.as_longlongs[n] = off


def pcap_chain(
    const uint8_t[::1] buf, Py_ssize_t off, Py_ssize_t last, bint big, uint64_t max_caplen,
    array.array starts,
):
    """Follow classic pcap record headers from ``off``; returns the first one not taken.

    A record is taken (its offset appended to ``starts``) while it starts at or before
    ``last`` and its captured length is at most ``max_caplen``: the chain
    ``PcapSource.walk`` follows in Python.
    """
    cdef uint64_t caplen
    while off <= last:
        caplen = u32(&buf[off + 8], big)
        if caplen > max_caplen:
            break
        push(starts, off)
        off += 16 + <Py_ssize_t>caplen
    return off


def epb_chain(
    const uint8_t[::1] buf, Py_ssize_t off, Py_ssize_t stop, Py_ssize_t data_end, bint big,
    array.array starts,
):
    """Follow a run of pcapng enhanced packet blocks from ``off``.

    Returns (offset of the first block not taken, whether the walk reached ``stop``).
    A block is taken while it starts before ``stop``, has type 6 and a length of at
    least 32 that ends by ``data_end``: the run ``PcapngSource.walk`` follows in Python.
    """
    cdef uint64_t btype, blen
    cdef Py_ssize_t limit = max(stop, 0) + 7  # a header at off is read while off + 8 <= limit
    while off + 8 <= limit:
        btype = u32(&buf[off], big)
        blen = u32(&buf[off + 4], big)
        if btype != 6 or blen < 32 or off + <Py_ssize_t>blen > data_end:
            return off, False
        push(starts, off)
        off += <Py_ssize_t>blen
    return off, True


def gather_u32(
    const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] rels,
    const uint8_t[::1] big, int64_t[:, ::1] out,
):
    """``out[j, i]`` = the unsigned 32-bit word at ``starts[i] + rels[j]``.

    Big-endian where ``big[i]`` (``big`` empty: all little-endian), as
    ``RecordBatch._u32`` reads them; an offset outside the buffer raises IndexError.
    """
    cdef Py_ssize_t n = starts.shape[0], m = rels.shape[0], i, j
    cdef Py_ssize_t size = buf.shape[0]
    cdef int64_t at
    cdef bint any_big = big.shape[0] > 0
    if any_big and big.shape[0] != n:
        raise ValueError("big must be empty or one flag per start")
    for i in range(n):
        for j in range(m):
            at = starts[i] + rels[j]
            if at < 0 or at + 4 > size:
                raise IndexError(f"word at {at} is outside the {size}-byte buffer")
            out[j, i] = <int64_t>u32(&buf[at], any_big and big[i])
    return out


def copy_pieces(
    const uint8_t[::1] buf, uint8_t[::1] out, const int64_t[::1] dst,
    const int64_t[::1] src, const int64_t[::1] length,
):
    """``out[dst[i] : dst[i] + length[i]] = buf[src[i] : src[i] + length[i]]`` for each i.

    ``views.fill_bytes`` in one pass; a piece outside either array raises IndexError.
    """
    cdef Py_ssize_t n = dst.shape[0], i
    cdef int64_t d, s, k
    if src.shape[0] != n or length.shape[0] != n:
        raise ValueError("dst, src and length must have one entry per piece")
    for i in range(n):
        d, s, k = dst[i], src[i], length[i]
        if k <= 0:
            continue
        if d < 0 or s < 0 or d + k > out.shape[0] or s + k > buf.shape[0]:
            raise IndexError(f"piece {i} ({k} bytes from {s} to {d}) is outside the arrays")
        memcpy(&out[d], &buf[s], <size_t>k)


def masked_rows(
    const uint8_t[::1] buf, const int64_t[::1] src, const int64_t[::1] length,
    const int64_t[::1] kind, const uint8_t[:, ::1] keep, uint8_t[:, ::1] out,
    const int64_t[::1] dst,
):
    """``out[dst[i], j] = buf[src[i] + j] * keep[kind[i], j]`` for ``j < length[i]``, else 0.

    The rows of the ``pkt_bytes`` view (``views.pkt_rows``): the first bytes of each
    packet from its IP header, masked, written straight into their rows of the view.
    """
    cdef Py_ssize_t n = src.shape[0], width = out.shape[1], i, j, m, w
    cdef Py_ssize_t n_words = (width + 7) // 8
    cdef int64_t s, d, k
    cdef const uint8_t* a
    cdef const uint8_t* mask
    cdef uint8_t* o
    cdef uint64_t x, y
    check_rows("masked_rows", n, {"length": length.shape[0], "kind": kind.shape[0], "dst": dst.shape[0]})
    if keep.shape[1] != width:
        raise ValueError(f"masked_rows: keep has {keep.shape[1]} columns, out {width}")
    # Each kind's mask as 64-bit words of 0x00/0xFF bytes: a row is masked 8 bytes at once
    # (a keep byte is 0 or 1, so buf * keep is buf AND 0xFF * keep).
    cdef uint8_t[:, ::1] bytes_ = np.zeros((keep.shape[0], n_words * 8), dtype=np.uint8)
    for k in range(keep.shape[0]):
        for j in range(width):
            if keep[k, j] > 1:
                raise ValueError("masked_rows: a keep byte is not 0 or 1")
            bytes_[k, j] = 0xFF * keep[k, j]
    for i in range(n):
        s, d, k = src[i], dst[i], kind[i]
        m = min(max(length[i], <int64_t>0), <int64_t>width)
        if s < 0 or s + width > buf.shape[0] or d < 0 or d >= out.shape[0]:
            raise IndexError(f"row {i} reads from {s} or writes row {d} outside the arrays")
        if k < 0 or k >= keep.shape[0]:
            raise IndexError(f"row {i} has mask {k} of {keep.shape[0]}")
        a, mask, o = &buf[s], &bytes_[k, 0], &out[d, 0]
        w = 0
        while w + 8 <= m:
            memcpy(&x, a + w, 8)
            memcpy(&y, mask + w, 8)
            x &= y
            memcpy(o + w, &x, 8)
            w += 8
        for j in range(w, m):
            o[j] = a[j] & mask[j]
        if m < width:
            memset(o + m, 0, <size_t>(width - m))


def payload_heads(
    uint8_t[:, ::1] out, const int64_t[::1] dst, const uint8_t[::1] fwd,
    const int64_t[::1] ip_len, const uint8_t[::1] proto, const uint8_t[::1] flags,
    const int64_t[::1] thl, const int64_t[::1] window,
):
    """The 8 leading bytes of ``payload``-layout ``pkt_bytes`` rows, as
    ``views.payload_rows`` writes them: direction (1 or 2), IP length (big-endian,
    capped at 65535), protocol, TCP flags, transport header length (clipped to
    0..255), TCP window (big-endian, low 16 bits); fewer when the rows are narrower.
    """
    cdef Py_ssize_t n = dst.shape[0], width = min(out.shape[1], 8), i, j
    cdef int64_t size, win, d
    cdef uint8_t head[8]
    check_rows("payload_heads", n, {"fwd": fwd.shape[0], "ip_len": ip_len.shape[0],
               "proto": proto.shape[0], "flags": flags.shape[0], "thl": thl.shape[0],
               "window": window.shape[0]})
    for i in range(n):
        d = dst[i]
        if d < 0 or d >= out.shape[0]:
            raise IndexError(f"row {i} writes row {d} outside the view")
        size = min(ip_len[i], <int64_t>0xFFFF)
        win = window[i] & 0xFFFF
        head[0] = 1 if fwd[i] else 2
        head[1], head[2] = <uint8_t>(size >> 8), <uint8_t>(size & 0xFF)
        head[3], head[4] = proto[i], flags[i]
        head[5] = <uint8_t>min(max(thl[i], <int64_t>0), <int64_t>0xFF)
        head[6], head[7] = <uint8_t>(win >> 8), <uint8_t>(win & 0xFF)
        for j in range(width):
            out[d, j] = head[j]


def range_max(
    const double[::1] x, const int64_t[::1] lo, const int64_t[::1] hi,
    const int64_t[::1] by_hi, double[::1] out,
):
    """``out[q] = max(x[lo[q] + 1 .. hi[q]])`` for each query (``lo < hi``), as
    ``assemble.RangeMax`` gives it; ``by_hi`` lists the queries in order of ``hi``.

    One pass over ``x`` with a stack of the positions whose value exceeds every later
    one so far: the maximum over ``(lo, hi]`` is at the first of them after ``lo``.
    ``x`` must hold no NaN (the caller checks).
    """
    cdef Py_ssize_t n = x.shape[0], nq = by_hi.shape[0], top = 0, q, t, a, b, mid
    cdef int64_t p = 0, h
    cdef int64_t[::1] stack = np.empty(max(n, 1), dtype=np.int64)
    for t in range(nq):
        q = by_hi[t]
        h = hi[q]
        if lo[q] < 0 or h >= n or lo[q] >= h:
            raise IndexError(f"query {q}: ({lo[q]}, {h}] is not a range of {n} values")
        while p <= h:  # push x[0 .. h]
            while top > 0 and x[stack[top - 1]] <= x[p]:
                top -= 1
            stack[top] = p
            top += 1
            p += 1
        a, b = 0, top - 1  # the first stack entry after lo[q] (the last one is h > lo)
        while a < b:
            mid = (a + b) // 2
            if stack[mid] > lo[q]:
                b = mid
            else:
                a = mid + 1
        out[q] = x[stack[a]]
    return out


def add_row_hashes(
    const uint64_t[:, ::1] words, const uint64_t[::1] k1, const uint64_t[::1] k2,
    uint64_t[::1] h1, uint64_t[::1] h2,
):
    """``h1 += words @ k1`` and ``h2 += (words ^ 0x9E3779B97F4A7C15) @ k2``, modulo 2**64.

    ``sources.row_hashes``'s two linear hashes of each row; integer sums wrap the
    same way in any order, so this equals NumPy's matmul bit for bit.
    """
    cdef Py_ssize_t n = words.shape[0], w = words.shape[1], r, j
    cdef uint64_t a, b, x
    cdef uint64_t golden = 0x9E3779B97F4A7C15ULL
    check_rows("add_row_hashes", w, {"k1": k1.shape[0], "k2": k2.shape[0]})
    check_rows("add_row_hashes", n, {"h1": h1.shape[0], "h2": h2.shape[0]})
    with nogil:
        for r in range(n):
            a = 0
            b = 0
            for j in range(w):
                x = words[r, j]
                a += x * k1[j]
                b += (x ^ golden) * k2[j]
            h1[r] += a
            h2[r] += b


# The accumulator columns of views.ACC_COLS, in order (a test checks they agree).
ACC_COLS = (
    "n_fwd", "n_bwd", "bytes_fwd", "bytes_bwd", "sq_fwd", "sq_bwd",
    "pay_fwd", "pay_bwd", "paypk_fwd", "paypk_bwd",
    "iat_n", "iat_sum", "iat_sq", "iatf_n", "iatf_sum", "iatf_sq", "iatb_n", "iatb_sum", "iatb_sq",
    "fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr",
    "min_fwd", "min_bwd", "iat_min", "iatf_min", "iatb_min",
    "max_fwd", "max_bwd", "iat_max", "iatf_max", "iatb_max", "last_ts",
    "win_fwd", "win_bwd", "last_fwd_ts", "last_bwd_ts",
)
cdef enum:
    A_N = 0  # n_fwd; + 1 for the backward twin of each by-direction pair
    A_BYTES = 2
    A_SQ = 4
    A_PAY = 6
    A_PAYPK = 8
    A_IAT_N = 10
    A_IAT_SUM = 11
    A_IAT_SQ = 12
    A_IATD_N = 13  # iatf_n, iatf_sum, iatf_sq, then the three iatb columns
    A_FLAGS = 19
    A_MIN = 27  # min_fwd, min_bwd
    A_IAT_MIN = 29
    A_IATD_MIN = 30
    A_MAX = 32
    A_IAT_MAX = 34
    A_IATD_MAX = 35
    A_LAST_TS = 37
    A_WIN = 38
    A_LAST_DIR_TS = 40
    N_ACC = 42
    PW_BLOCK = 128


cdef inline double np_max(double a, double b) noexcept nogil:
    # numpy.maximum: a NaN in either wins
    return a if (a >= b or a != a) else b


cdef inline double np_min(double a, double b) noexcept nogil:
    return a if (a <= b or a != a) else b


cdef double pairwise_sum(const double* a, Py_ssize_t n) noexcept nogil:
    """NumPy's pairwise summation of float64 (``np.add.reduce``), step for step."""
    cdef Py_ssize_t i, j, n2
    cdef double res
    cdef double r[8]
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[i]
        return res
    if n <= PW_BLOCK:
        for j in range(8):
            r[j] = a[j]
        i = 8
        while i < n - (n % 8):
            for j in range(8):
                r[j] += a[i + j]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        while i < n:
            res += a[i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2)


cdef inline double reduceat_sum(const double* a, Py_ssize_t n) noexcept nogil:
    """``np.add.reduceat`` over one segment: its first value plus the pairwise sum of the rest."""
    if n == 1:
        return a[0]
    return a[0] + pairwise_sum(a + 1, n - 1)


cdef int check_rows(str kernel, Py_ssize_t n, dict rows) except -1:
    """``rows`` maps array names to their lengths: each must be ``n``, since the kernel's
    loops index them freely; else ValueError naming the kernel and the first that is not."""
    for name, length in rows.items():
        if length != n:
            raise ValueError(f"{kernel}: {name} has length {length}, not {n}")
    return 0


cdef int check_flows(const int64_t[::1] fs, Py_ssize_t n) except -1:
    """Every flow ``f`` of ``fs`` (packets ``fs[f]`` up to the next start, or ``n``) is a
    non-empty range inside ``n`` packets: the loops over flows may then index freely."""
    cdef Py_ssize_t nf = fs.shape[0], f, b, e
    for f in range(nf):
        b = fs[f]
        e = fs[f + 1] if f + 1 < nf else n
        if b < 0 or e > n or b >= e:
            raise IndexError(f"flow {f} has no packets ({b}, {e})")
    return 0


def accumulate(
    const int64_t[::1] fs, const uint8_t[::1] fwd, const double[::1] size,
    const double[::1] pay, const double[::1] ts, const double[::1] prev_ts,
    const double[::1] prev_dir, const uint8_t[::1] flags, const int64_t[::1] window,
    const uint8_t[::1] tcp, double[::1] iat0, double[::1] iat_sq, double[:, ::1] acc,
):
    """``views.accumulate`` in one pass: the accumulators of each flow (packets of
    flow f at ``fs[f]`` up to the next start), columns as :data:`ACC_COLS`.

    Sums over whole numbers (counts, bytes, squares) are exact in any order; the
    float sums are taken in NumPy's order (``bincount``: one after another;
    ``add.reduceat``: pairwise), so every value equals the NumPy path's bit for bit.
    ``iat0`` and ``iat_sq`` are scratch (one per packet).
    """
    cdef Py_ssize_t n = ts.shape[0], nf = fs.shape[0], f, i, b, e, d, k
    cdef double t, x, x0
    cdef double* row
    cdef bint has
    check_rows("accumulate", n, {"fwd": fwd.shape[0], "size": size.shape[0], "pay": pay.shape[0],
               "prev_ts": prev_ts.shape[0], "prev_dir": prev_dir.shape[0],
               "flags": flags.shape[0], "window": window.shape[0], "tcp": tcp.shape[0],
               "iat0": iat0.shape[0], "iat_sq": iat_sq.shape[0]})
    check_rows("accumulate", nf, {"acc": acc.shape[0]})
    if acc.shape[1] != N_ACC:
        raise ValueError(f"accumulate: acc has {acc.shape[1]} columns, not {N_ACC}")
    check_flows(fs, n)
    with nogil:
        for f in range(nf):
            b = fs[f]
            e = fs[f + 1] if f + 1 < nf else n
            row = &acc[f, 0]
            for k in range(N_ACC):
                row[k] = 0.0
            for d in range(2):
                row[A_MIN + d] = INFINITY
                row[A_IATD_MIN + d] = INFINITY
                row[A_MAX + d] = -INFINITY
                row[A_WIN + d] = NAN
                row[A_LAST_DIR_TS + d] = NAN
            row[A_IAT_MIN] = INFINITY
            row[A_LAST_TS] = -INFINITY
            for i in range(b, e):
                d = 0 if fwd[i] else 1
                x = size[i]
                row[A_N + d] += 1.0
                row[A_BYTES + d] += x
                row[A_SQ + d] += x * x
                row[A_PAY + d] += pay[i]
                if pay[i] > 0:
                    row[A_PAYPK + d] += 1.0
                row[A_MIN + d] = np_min(row[A_MIN + d], x)
                row[A_MAX + d] = np_max(row[A_MAX + d], x)
                t = ts[i]
                row[A_LAST_TS] = np_max(row[A_LAST_TS], t)
                # all packets: time since the flow's previous packet
                x = np_max(t - prev_ts[i], 0.0)
                has = x == x
                x0 = x if has else 0.0
                iat0[i] = x0
                iat_sq[i] = x0 * x0
                if has:
                    row[A_IAT_N] += 1.0
                    row[A_IAT_MIN] = np_min(row[A_IAT_MIN], x)
                row[A_IAT_MAX] = np_max(row[A_IAT_MAX], x0)
                # one direction: time since its previous packet in the same direction
                x = np_max(t - prev_dir[i], 0.0)
                has = x == x
                x0 = x if has else 0.0
                if has:
                    row[A_IATD_N + 3 * d] += 1.0
                    row[A_IATD_MIN + d] = np_min(row[A_IATD_MIN + d], x)
                row[A_IATD_N + 3 * d + 1] += x0
                row[A_IATD_N + 3 * d + 2] += x0 * x0
                row[A_IATD_MAX + d] = np_max(row[A_IATD_MAX + d], x0)
                for k in range(8):
                    row[A_FLAGS + k] += (flags[i] >> k) & 1
                if tcp[i] and row[A_WIN + d] != row[A_WIN + d]:
                    row[A_WIN + d] = <double>window[i]
                row[A_LAST_DIR_TS + d] = t
            row[A_IAT_SUM] = reduceat_sum(&iat0[b], e - b)
            row[A_IAT_SQ] = reduceat_sum(&iat_sq[b], e - b)


def seq_rows(
    const int64_t[::1] dst, const uint8_t[::1] fwd, const double[::1] size,
    const double[::1] log_iat, const uint8_t[::1] flags, const double[::1] pay,
    float[:, ::1] out,
):
    """Rows of the ``seq`` view (``views.seq_rows``), written straight into place:
    ``out[dst[i]]`` for each packet i with ``dst[i] >= 0``.

    ``log_iat`` is the second feature already computed (NumPy's ``log1p``, whose
    last bit may differ from the C library's).
    """
    cdef Py_ssize_t n = dst.shape[0], i, k
    cdef int64_t d
    cdef float* row
    check_rows("seq_rows", n, {"fwd": fwd.shape[0], "size": size.shape[0],
               "log_iat": log_iat.shape[0], "flags": flags.shape[0], "pay": pay.shape[0]})
    if out.shape[1] != 10:
        raise ValueError(f"seq_rows: out has {out.shape[1]} columns, not 10")
    for i in range(n):
        if dst[i] >= out.shape[0]:
            raise IndexError(f"packet {i} goes to row {dst[i]} of {out.shape[0]}")
    with nogil:
        for i in range(n):
            d = dst[i]
            if d < 0:
                continue
            row = &out[d, 0]
            row[0] = <float>(size[i] if fwd[i] else -size[i])
            row[1] = <float>log_iat[i]
            for k in range(6):
                row[2 + k] = <float>((flags[i] >> k) & 1)
            row[8] = <float>pay[i]
            row[9] = 1.0


def epb_fields(
    const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] seg,
    const int64_t[::1] seg_base, const int64_t[::1] seg_n_if, const uint8_t[::1] seg_big,
    const int32_t[::1] if_linktype, const uint64_t[::1] if_div, const double[::1] if_tsoff,
    int64_t[::1] caplen, int64_t[::1] wirelen, double[::1] ts, int32_t[::1] linktype,
    uint8_t[::1] problem,
):
    """The header fields of enhanced packet blocks (``RecordBatch._pcapng`` when every
    block is one), one pass per block.

    Block i starts at ``starts[i]`` and belongs to walk segment ``seg[i]``, whose
    interfaces are rows ``seg_base .. seg_base + seg_n_if`` of the interface table
    (link type, timestamp divisor, timestamp offset). ``problem[i]`` is 0 for a good
    block, else 1 (no such interface), 2 (trailer length differs) or 3 (captured
    length past the block), in the order ``_pcapng`` checks them.
    """
    cdef Py_ssize_t n = starts.shape[0], n_tab = if_linktype.shape[0], size = buf.shape[0], i
    cdef int64_t at, s, gi
    cdef uint64_t blen, if_id, ticks, div
    cdef bint big
    check_rows("epb_fields", n, {"seg": seg.shape[0], "caplen": caplen.shape[0],
               "wirelen": wirelen.shape[0], "ts": ts.shape[0], "linktype": linktype.shape[0],
               "problem": problem.shape[0]})
    check_rows("epb_fields", seg_base.shape[0],
               {"seg_n_if": seg_n_if.shape[0], "seg_big": seg_big.shape[0]})
    check_rows("epb_fields", n_tab, {"if_div": if_div.shape[0], "if_tsoff": if_tsoff.shape[0]})
    if n_tab == 0:
        raise ValueError("epb_fields: no interfaces")
    for i in range(n):
        at, s = starts[i], seg[i]
        if s < 0 or s >= seg_base.shape[0]:
            raise IndexError(f"block {i} has segment {s} of {seg_base.shape[0]}")
        if at < 0 or at + 28 > size:
            raise IndexError(f"block at {at} is outside the {size}-byte buffer")
        big = seg_big[s]
        blen = u32(&buf[at + 4], big)
        if blen < 4 or at + <int64_t>blen > size:
            raise IndexError(f"block at {at} of length {blen} is outside the buffer")
        if_id = u32(&buf[at + 8], big)
        ticks = (u32(&buf[at + 12], big) << 32) | u32(&buf[at + 16], big)
        caplen[i] = <int64_t>u32(&buf[at + 20], big)
        wirelen[i] = <int64_t>u32(&buf[at + 24], big)
        if <int64_t>if_id < seg_n_if[s]:
            gi = seg_base[s] + <int64_t>if_id
            problem[i] = 0
        else:
            gi = seg_base[s]
            problem[i] = 1
        gi = min(gi, <int64_t>(n_tab - 1))
        if problem[i] == 0 and u32(&buf[at + <int64_t>blen - 4], big) != blen:
            problem[i] = 2
        elif problem[i] == 0 and caplen[i] > <int64_t>blen - 32:
            problem[i] = 3
        div = if_div[gi]
        ts[i] = <double>(ticks // div) + <double>(ticks % div) / <double>div + if_tsoff[gi]
        linktype[i] = if_linktype[gi]
    return n


def previous_times(
    const int64_t[::1] fs, const uint8_t[::1] fwd, const double[::1] ts,
    const double[::1] carried_last, const double[::1] carried_fwd,
    const double[::1] carried_bwd, double[::1] prev_ts, double[::1] prev_dir,
):
    """Per packet of flows laid out one after another (flow f from ``fs[f]``): the time
    of the flow's previous packet and of its previous packet in the same direction
    (``FlowAssembler._flow_packets``). Before a flow's first packet here, those of
    earlier chunks: ``carried_*[f]`` (NaN: none).
    """
    cdef Py_ssize_t n = ts.shape[0], nf = fs.shape[0], f, i, b, e
    cdef double last, last_f, last_b
    check_rows("previous_times", n,
               {"fwd": fwd.shape[0], "prev_ts": prev_ts.shape[0], "prev_dir": prev_dir.shape[0]})
    check_rows("previous_times", nf, {"carried_last": carried_last.shape[0],
               "carried_fwd": carried_fwd.shape[0], "carried_bwd": carried_bwd.shape[0]})
    check_flows(fs, n)
    with nogil:
        for f in range(nf):
            b = fs[f]
            e = fs[f + 1] if f + 1 < nf else n
            last, last_f, last_b = carried_last[f], carried_fwd[f], carried_bwd[f]
            for i in range(b, e):
                prev_ts[i] = last
                last = ts[i]
                if fwd[i]:
                    prev_dir[i] = last_f
                    last_f = last
                else:
                    prev_dir[i] = last_b
                    last_b = last


cdef inline uint64_t mix64(uint64_t h) noexcept nogil:
    h = (h ^ (h >> 33)) * 0xFF51AFD7ED558CCDULL
    h = (h ^ (h >> 33)) * 0xC4CEB9FE1A85EC53ULL
    return h ^ (h >> 33)


def key_hashes(
    const uint64_t[::1] sa_hi, const uint64_t[::1] sa_lo, const int64_t[::1] sport,
    const uint64_t[::1] da_hi, const uint64_t[::1] da_lo, const int64_t[::1] dport,
    const int32_t[::1] src, const uint8_t[::1] proto, const int64_t[::1] vlan, bint vlan_key,
    uint64_t[::1] h, uint8_t[::1] low,
):
    """``FlowAssembler._group_by_key``'s hashes: each packet's direction-free flow key
    hash, and whether its sender is the endpoint with the lower hash (the same
    unsigned 64-bit arithmetic as ``assemble.endpoint_hash`` and ``assemble._mix``).
    """
    cdef Py_ssize_t n = sa_hi.shape[0], i
    cdef uint64_t k1 = 0x9E3779B97F4A7C15ULL, k2 = 0xBF58476D1CE4E5B9ULL
    cdef uint64_t k3 = 0x94D049BB133111EBULL, es, ed, small
    check_rows("key_hashes", n, {"sa_lo": sa_lo.shape[0], "sport": sport.shape[0],
               "da_hi": da_hi.shape[0], "da_lo": da_lo.shape[0], "dport": dport.shape[0],
               "src": src.shape[0], "proto": proto.shape[0], "vlan": vlan.shape[0],
               "h": h.shape[0], "low": low.shape[0]})
    with nogil:
        for i in range(n):
            es = mix64(sa_lo[i] * k1 + (sa_hi[i] ^ (<uint64_t>sport[i] * k2)))
            ed = mix64(da_lo[i] * k1 + (da_hi[i] ^ (<uint64_t>dport[i] * k2)))
            low[i] = es < ed
            small = (<uint64_t>src[i] << 8) | proto[i]
            if vlan_key:
                small = small ^ mix64(<uint64_t>vlan[i] + k2)
            h[i] = mix64((es + ed) ^ (small * k3))


cdef inline void summary(
    float* out, double n, double total, double sq, double mn, double mx
) noexcept nogil:
    """``views._summary``: min, mean, std and max from count, sum, sum of squares."""
    cdef double safe = np_max(n, 1.0), mean = total / safe
    out[0] = <float>(mn if n > 0 else 0.0)
    out[1] = <float>mean
    out[2] = <float>sqrt(np_max(sq / safe - mean * mean, 0.0))
    out[3] = <float>(mx if n > 0 else 0.0)


def stats_rows(
    const double[:, ::1] acc, const double[::1] first_ts, const uint8_t[::1] is_tcp,
    const int64_t[::1] port_a, const int64_t[::1] port_b, bint mask_port, float[:, ::1] out,
):
    """The ``stats`` view's rows (``views.stats_frame``) from the flows' accumulators
    (columns as :data:`ACC_COLS`), in ``views.stats_columns`` order, with the same
    float64 arithmetic before the cast to float32."""
    cdef Py_ssize_t nf = acc.shape[0], f, k, d
    cdef const double* c
    cdef float* o
    cdef double n, dur, safe, bytes_, a, b
    check_rows("stats_rows", nf, {"first_ts": first_ts.shape[0], "is_tcp": is_tcp.shape[0],
               "port_a": port_a.shape[0], "port_b": port_b.shape[0], "out": out.shape[0]})
    if acc.shape[1] != N_ACC or out.shape[1] != (51 if mask_port else 53):
        raise ValueError(f"stats_rows: acc has {acc.shape[1]} columns (not {N_ACC}) or out "
                         f"{out.shape[1]} (not {51 if mask_port else 53})")
    with nogil:
        for f in range(nf):
            c, o = &acc[f, 0], &out[f, 0]
            n = c[A_N] + c[A_N + 1]
            bytes_ = c[A_BYTES] + c[A_BYTES + 1]
            dur = c[A_LAST_TS] - first_ts[f]
            o[0] = <float>dur
            o[1], o[2], o[3] = <float>n, <float>c[A_N], <float>c[A_N + 1]
            o[4], o[5], o[6] = <float>bytes_, <float>c[A_BYTES], <float>c[A_BYTES + 1]
            o[7] = <float>(c[A_PAY] + c[A_PAY + 1])
            o[8], o[9] = <float>c[A_PAY], <float>c[A_PAY + 1]
            o[10], o[11] = <float>c[A_PAYPK], <float>c[A_PAYPK + 1]
            summary(o + 12, n, bytes_, c[A_SQ] + c[A_SQ + 1], np_min(c[A_MIN], c[A_MIN + 1]),
                    np_max(c[A_MAX], c[A_MAX + 1]))
            for d in range(2):
                summary(o + 16 + 4 * d, c[A_N + d], c[A_BYTES + d], c[A_SQ + d], c[A_MIN + d],
                        c[A_MAX + d])
            summary(o + 24, c[A_IAT_N], c[A_IAT_SUM], c[A_IAT_SQ], c[A_IAT_MIN], c[A_IAT_MAX])
            for d in range(2):
                summary(o + 28 + 4 * d, c[A_IATD_N + 3 * d], c[A_IATD_N + 3 * d + 1],
                        c[A_IATD_N + 3 * d + 2], c[A_IATD_MIN + d], c[A_IATD_MAX + d])
            for k in range(8):
                o[36 + k] = <float>c[A_FLAGS + k]
            safe = dur if dur > 0 else 1.0
            o[44] = <float>(n / safe if dur > 0 else 0.0)
            o[45] = <float>(bytes_ / safe if dur > 0 else 0.0)
            o[46] = <float>(c[A_N + 1] / np_max(c[A_N], 1.0))
            o[47] = <float>(c[A_BYTES + 1] / np_max(c[A_BYTES], 1.0))
            a, b = c[A_WIN], c[A_WIN + 1]
            o[48] = <float>(0.0 if a != a else a)
            o[49] = <float>(0.0 if b != b else b)
            o[50] = 1.0 if is_tcp[f] else 0.0
            if not mask_port:
                o[51], o[52] = <float>port_b[f], <float>port_a[f]
