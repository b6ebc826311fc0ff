"""A slow, obviously-correct reader built on dpkt: the yardstick for the fast one.

It decodes captures with dpkt (its own pcap/pcapng readers and link, IP, TCP and
UDP decoders), assembles flows packet by packet with a dictionary under the same
documented rules (:mod:`flowsplit.reader.assemble`), and builds the same four views
in plain Python. It shares no decoding code with the vectorised reader, so the two
agreeing means something. Used by ``scripts/validate_reader.py``, the throughput
benchmark (as the dpkt baseline) and the tests. Needs ``dpkt`` (a dev extra).
"""

from __future__ import annotations

import collections
import math
import socket
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# Link types dpkt decodes, and how.
_RAW = (12, 14, 101, 228, 229)
DPKT_LINKTYPES = frozenset({0, 1, 108, 113, 276, 9, *_RAW})


@dataclass
class RefFlow:
    """One flow as the reference sees it."""

    proto: int
    ip_a: str
    port_a: int
    ip_b: str
    port_b: int
    first_ts: float
    last_ts: float
    first_index: int
    last_pkt_ts: float = 0.0
    syn_seq: int = -1  # sequence number of the opening SYN (-1: the flow opened otherwise)
    n_packets: int = 0
    n_bytes: int = 0
    rst: bool = False
    fin_a: bool = False
    fin_b: bool = False
    # Per packet: (ts, previous packet's ts or None, from a, IP length, payload length,
    # TCP flags, TCP window, raw IP bytes captured, transport header offset).
    packets: list = field(default_factory=list)

    @property
    def key(self) -> str:
        l4 = "TCP" if self.proto == 6 else "UDP"
        return f"{l4}|{self.ip_a}|{self.port_a}|{self.ip_b}|{self.port_b}"


@dataclass
class RefResult:
    flows: list[RefFlow]
    n_packets: int = 0
    skipped: collections.Counter = field(default_factory=collections.Counter)
    error: str | None = None


def _ip_str(raw: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET6 if len(raw) == 16 else socket.AF_INET, raw)


def _vlan_key(dpkt, linktype: int, frame: bytes) -> int:
    """The 802.1Q/QinQ ids of an Ethernet frame as one number, outermost first."""
    if linktype != 1:
        return 0
    key = 0
    for tag in getattr(dpkt.ethernet.Ethernet(frame), "vlan_tags", None) or ():
        key = (key << 12) | tag.id
    return key


def _network_layer(dpkt, linktype: int, frame: bytes):
    """The dpkt IP/IP6 object of a frame, or a reason string."""
    if linktype == 1:
        l2 = dpkt.ethernet.Ethernet(frame)
        obj = l2.data
    elif linktype == 113:
        obj = dpkt.sll.SLL(frame).data
    elif linktype == 276:
        obj = dpkt.sll2.SLL2(frame).data
    elif linktype in (0, 108):
        obj = dpkt.loopback.Loopback(frame).data
    elif linktype == 9:  # with or without the address/control bytes
        ppp = dpkt.ppp.PPP if frame[:2] == b"\xff\x03" else dpkt.pppoe.PPP
        obj = ppp(frame).data
    elif linktype in _RAW:
        if not frame:
            return "truncated_packet"
        v = frame[0] >> 4
        obj = dpkt.ip.IP(frame) if v == 4 else dpkt.ip6.IP6(frame) if v == 6 else None
    else:
        return f"dpkt_linktype:{linktype}"
    while isinstance(obj, dpkt.pppoe.PPPoE | dpkt.ppp.PPP):  # PPPoE session: PPP inside
        obj = obj.data
    if isinstance(obj, dpkt.ip.IP | dpkt.ip6.IP6):
        return obj
    ip = _ipv4_by_checksum(dpkt, obj)
    return "non_ip" if ip is None else ip


def _ipv4_by_checksum(dpkt, data):
    """dpkt's IPv4 packet of the bytes behind a type field that names no IP protocol,
    when they start with a whole IPv4 header whose checksum is right (the fast
    reader's rule for corrupted type fields); None otherwise."""
    if not isinstance(data, bytes) or len(data) < 20 or data[0] >> 4 != 4:
        return None
    hl = (data[0] & 15) * 4
    total = int.from_bytes(data[2:4], "big")
    if hl < 20 or len(data) < hl or 0 < total < hl:
        return None
    s = sum(int.from_bytes(data[i : i + 2], "big") for i in range(0, hl, 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    if s != 0xFFFF:
        return None
    try:
        return dpkt.ip.IP(data)
    except (dpkt.UnpackError, dpkt.NeedData):
        return None


def _transport(dpkt, ip, frame: bytes):
    """(proto, src, dst, l4 object, ip_len, l4 offset in the IP packet, raw IP) or a reason."""
    if isinstance(ip, dpkt.ip.IP):
        if ip.mf or ip.offset:
            return "ip_fragment"
        hl = ip.hl * 4
        ip_len = ip.len or len(bytes(ip))
        head = ip.pack_hdr()[:8]
        l4_rel = hl
    else:
        frag = ip.extension_hdrs.get(44)
        if frag is not None and (frag.frag_off or frag.m_flag):
            return "ip_fragment"
        ip_len = (
            ip.plen + 40
            if ip.plen
            else 40 + len(ip.data if isinstance(ip.data, bytes) else bytes(ip.data))
        )
        head = ip.pack_hdr()[:8]
        l4_rel = 40 + sum(e.length for e in ip.all_extension_headers)
    if getattr(ip, "p", getattr(ip, "nxt", None)) in (4, 41) and isinstance(
        ip.data, dpkt.ip.IP | dpkt.ip6.IP6
    ):
        return _transport(dpkt, ip.data, frame)  # IP-in-IP: the inner packet's flow
    if getattr(ip, "p", None) not in (6, 17):
        return "non_tcp_udp"
    l4 = ip.data
    if not isinstance(l4, dpkt.tcp.TCP | dpkt.udp.UDP):
        return "truncated_packet"
    at = frame.find(head)
    raw = frame[at:][:ip_len] if at >= 0 else b""
    return ip.p, ip.src, ip.dst, l4, ip_len, l4_rel, raw


def _decode_all(path, res: RefResult) -> list[tuple]:
    """(index, ts, proto, src, dst, l4, ip_len, l4_rel, raw) of every TCP/UDP packet."""
    import dpkt  # a dev extra: imported only when the reference is used

    out = []
    try:
        fh = open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        res.error = str(exc)
        return out
    with fh:
        magic = fh.read(4)
        fh.seek(0)
        try:
            reader = dpkt.pcapng.Reader(fh) if magic == b"\n\r\r\n" else dpkt.pcap.Reader(fh)
            linktype = reader.datalink()
        except Exception as exc:  # noqa: BLE001 - any dpkt failure is a finding
            res.error = f"{type(exc).__name__}: {exc}"
            return out
        it = iter(reader)
        index = -1
        while True:
            try:
                ts, frame = next(it)
            except StopIteration:
                break
            except Exception as exc:  # noqa: BLE001
                res.error = f"{type(exc).__name__}: {exc}"
                break
            index += 1
            res.n_packets += 1
            try:
                vlan = _vlan_key(dpkt, linktype, frame)
                ip = _network_layer(dpkt, linktype, frame)
                got = ip if isinstance(ip, str) else _transport(dpkt, ip, frame)
            except (dpkt.UnpackError, dpkt.NeedData, struct_error, IndexError):
                got = "truncated_packet"
            except Exception:  # noqa: BLE001 - dpkt on malformed input: count, go on
                got = "dpkt_decode_error"
            if isinstance(got, str):
                res.skipped[got] += 1
            else:
                out.append((index, float(ts), vlan, *got))
    return out


def reference_flows(path: str | Path, options, *, keep_packets: bool = True) -> RefResult:
    """Flows of one capture, read with dpkt and assembled packet by packet."""
    flows: list[RefFlow] = []
    res = RefResult(flows)
    packets = _decode_all(path, res)
    times = [p[1] for p in packets]  # (index, ts, vlan, ...)
    # Sparse table: latest time among the TCP/UDP packets in positions (q, p].
    table = [times]
    while 2 ** len(table) <= len(times):
        prev, step = table[-1], 2 ** (len(table) - 1)
        table.append([max(a, b) for a, b in zip(prev, prev[step:], strict=False)])

    def latest(q: int, p: int) -> float:
        k = (p - q).bit_length() - 1
        return max(table[k][q + 1], table[k][p - (1 << k) + 1])

    open_: dict[tuple, tuple[RefFlow, int]] = {}  # key -> (flow, position of its last packet)
    for pos, (index, ts, vlan, proto, src, dst, l4, ip_len, l4_rel, raw) in enumerate(packets):
        key = (proto, vlan if options.vlan_key else 0, *sorted([(src, l4.sport), (dst, l4.dport)]))
        flags = l4.flags if proto == 6 else 0
        pure_syn = (flags & 0x12) == 0x02
        seq = l4.seq if pure_syn else -1
        pay_len = ip_len - (l4_rel + len(l4) - len(l4.data))
        f, last = open_.get(key, (None, -1))
        if f is not None and (
            latest(last, pos) - f.last_pkt_ts > options.idle_timeout
            or max(f.last_ts, ts) - f.first_ts > options.active_timeout
            or ((f.rst or (f.fin_a and f.fin_b)) and pure_syn and seq != f.syn_seq)
        ):
            f = None
        if f is None:
            f = RefFlow(proto, _ip_str(src), l4.sport, _ip_str(dst), l4.dport, ts, ts, index)
            f.syn_seq = seq
            flows.append(f)
        open_[key] = (f, pos)
        from_a = (_ip_str(src), l4.sport) == (f.ip_a, f.port_a)
        f.n_packets += 1
        f.n_bytes += ip_len
        f.last_ts = max(f.last_ts, ts)
        f.rst |= bool(flags & 4)
        f.fin_a |= bool(flags & 1) and from_a
        f.fin_b |= bool(flags & 1) and not from_a
        if keep_packets:
            win = l4.win if proto == 6 else 0
            f.packets.append(
                (
                    ts,
                    f.last_pkt_ts if f.n_packets > 1 else None,
                    from_a,
                    ip_len,
                    pay_len,
                    flags,
                    win,
                    raw,
                    l4_rel,
                )
            )
        f.last_pkt_ts = ts
    return res


struct_error = __import__("struct").error


def reference_views(flow: RefFlow, options) -> dict[str, np.ndarray]:
    """The ``seq``, ``bytes`` and ``pkt_bytes`` views of one reference flow."""
    T, K, P, B = options.seq_len, options.n_bytes, options.n_pkts, options.pkt_len
    seq = np.zeros((T, 10), dtype=np.float32)
    payload = bytearray()
    pkt = np.zeros((P, B), dtype=np.uint8)
    for i, (ts, prev, from_a, ip_len, pay_len, flags, win_, raw, l4_rel) in enumerate(flow.packets):
        if i < T:
            iat = 0.0 if prev is None else max(ts - prev, 0.0)
            bits = [(flags >> k) & 1 for k in range(6)]
            seq[i] = [ip_len if from_a else -ip_len, math.log1p(iat * 1e6), *bits, pay_len, 1]
        if len(payload) < K:
            pay_rel = ip_len - pay_len
            payload += raw[pay_rel:]
        if i < P and options.pkt_layout == "payload":
            pay_rel = ip_len - pay_len
            size, win = min(ip_len, 0xFFFF), win_ & 0xFFFF  # win_ is 0 for UDP
            head = bytes(
                [
                    1 if from_a else 2,
                    size >> 8,
                    size & 0xFF,
                    flow.proto,
                    flags & 0xFF,  # dpkt's flags carry the NS bit above CWR..FIN
                    min(pay_rel - l4_rel, 0xFF),
                    win >> 8,
                    win & 0xFF,
                ]
            )
            row = (head + bytes(raw[pay_rel:]))[:B].ljust(B, b"\0")
            pkt[i] = np.frombuffer(row, dtype=np.uint8)
        elif i < P:
            row = bytearray(raw[:B].ljust(B, b"\0"))
            v6 = raw[0] >> 4 == 6
            proto = flow.proto
            zero = []
            if options.mask_ip:
                zero.append((8, 40) if v6 else (12, 20))
            if options.mask_checksum:
                if not v6:
                    zero.append((10, 12))
                at = l4_rel + (16 if proto == 6 else 6)
                zero.append((at, at + 2))
            if options.mask_port:
                zero.append((l4_rel, l4_rel + 4))
            for lo, hi in zero:
                for j in range(lo, min(hi, B)):
                    row[j] = 0
            pkt[i] = np.frombuffer(bytes(row), dtype=np.uint8)
    by = np.zeros(K, dtype=np.uint8)
    by[: min(K, len(payload))] = np.frombuffer(bytes(payload[:K]), dtype=np.uint8)
    return {"seq": seq, "bytes": by, "pkt_bytes": pkt}


def reference_stats(flow: RefFlow, mask_port: bool = True) -> dict[str, float]:
    """The ``stats`` view of one reference flow, computed directly from its packets."""
    pk = flow.packets
    out: dict[str, float] = {}
    ts = [p[0] for p in pk]
    dur = flow.last_ts - flow.first_ts
    fwd = [p for p in pk if p[2]]
    bwd = [p for p in pk if not p[2]]
    out["duration"] = dur
    out.update(pkts=len(pk), pkts_fwd=len(fwd), pkts_bwd=len(bwd))
    out.update(
        bytes=sum(p[3] for p in pk),
        bytes_fwd=sum(p[3] for p in fwd),
        bytes_bwd=sum(p[3] for p in bwd),
    )
    out.update(
        payload_bytes=sum(p[4] for p in pk),
        payload_bytes_fwd=sum(p[4] for p in fwd),
        payload_bytes_bwd=sum(p[4] for p in bwd),
        payload_pkts_fwd=sum(p[4] > 0 for p in fwd),
        payload_pkts_bwd=sum(p[4] > 0 for p in bwd),
    )

    def summary(prefix, xs):
        if not xs:
            return {f"{prefix}_{s}": 0.0 for s in ("min", "mean", "std", "max")}
        m = sum(xs) / len(xs)
        return {
            f"{prefix}_min": min(xs),
            f"{prefix}_mean": m,
            f"{prefix}_std": math.sqrt(max(sum(x * x for x in xs) / len(xs) - m * m, 0.0)),
            f"{prefix}_max": max(xs),
        }

    for d, group in (("", pk), ("_fwd", fwd), ("_bwd", bwd)):
        out.update(summary(f"size{d}", [p[3] for p in group]))
    iat = [max(b - a, 0.0) for a, b in zip(ts, ts[1:], strict=False)]
    out.update(summary("iat", iat))
    for d, group in (("_fwd", fwd), ("_bwd", bwd)):
        t = [p[0] for p in group]
        out.update(summary(f"iat{d}", [max(b - a, 0.0) for a, b in zip(t, t[1:], strict=False)]))
    for k, name in enumerate(("fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr")):
        out[f"{name}_count"] = sum((p[5] >> k) & 1 for p in pk)
    n, b = len(pk), out["bytes"]
    out["pkts_per_s"] = n / dur if dur > 0 else 0.0
    out["bytes_per_s"] = b / dur if dur > 0 else 0.0
    out["down_up_ratio"] = len(bwd) / max(len(fwd), 1)
    out["bytes_down_up_ratio"] = out["bytes_bwd"] / max(out["bytes_fwd"], 1)
    tcp = flow.proto == 6
    out["init_win_fwd"] = float(fwd[0][6]) if tcp and fwd else 0.0
    out["init_win_bwd"] = float(bwd[0][6]) if tcp and bwd else 0.0
    out["is_tcp"] = float(tcp)
    if not mask_port:
        out["port_server"] = flow.port_b
        out["port_client"] = flow.port_a
    return out
