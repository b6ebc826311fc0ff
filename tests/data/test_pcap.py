"""Capture formats, link types and network-layer decoding, on synthetic captures."""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

from flowsplit.errors import InputError
from flowsplit.reader.flows import FlowOptions, ReadReport, iter_flows
from tests.data import _pcapgen as g

OPTS = FlowOptions(views=("seq",))
A, B = "10.0.0.1", "10.0.0.2"
A6, B6 = "2001:db8::1", "2001:db8::2"


def read(path, **kw):
    """(flows as dicts, report) of one capture."""
    report = ReadReport()
    flows = []
    for b in iter_flows(path, kw.pop("options", OPTS), report, **kw):
        for i in range(len(b)):
            flows.append(
                {
                    "key": b.keys()[i],
                    "n": int(b.n_packets[i]),
                    "bytes": int(b.n_bytes[i]),
                    "first_ts": float(b.first_ts[i]),
                    "last_ts": float(b.last_ts[i]),
                    "first_index": int(b.first_index[i]),
                }
            )
    return flows, report


def udp4(ts, sport=1000, dport=53, payload=b"q", src=A, dst=B):
    return g.Packet(ts, g.ether(g.ipv4(src, dst, 17, g.udp(sport, dport, payload))))


def ip4_udp(sport=1000, dport=53, payload=b"q", src=A, dst=B) -> bytes:
    return g.ipv4(src, dst, 17, g.udp(sport, dport, payload))


def ip6_udp(sport=1000, dport=53, payload=b"q", ext=()) -> bytes:
    return g.ipv6(A6, B6, 17, g.udp(sport, dport, payload), ext=ext)


# --- classic pcap ------------------------------------------------------------------


@pytest.mark.parametrize("endian", ["<", ">"])
@pytest.mark.parametrize("nano", [False, True])
def test_pcap_byte_orders_and_resolutions(tmp_path, endian, nano):
    # Prepare: two packets 1.5 ms apart, one flow
    pkts = [udp4(1000.25), udp4(1000.2515, 53, 1000, src=B, dst=A)]
    path = g.write_pcap(tmp_path / "a.pcap", pkts, endian=endian, nano=nano)
    # Execute
    flows, report = read(path)
    # Assert
    assert report.n_packets == 2 and report.n_flow_packets == 2
    assert [f["key"] for f in flows] == [f"UDP|{A}|1000|{B}|53"]
    assert flows[0]["first_ts"] == pytest.approx(1000.25, abs=1e-9)
    assert flows[0]["last_ts"] - flows[0]["first_ts"] == pytest.approx(0.0015, abs=1e-7)
    assert flows[0]["bytes"] == 2 * (20 + 8 + 1)


def test_pcap_linktype_fcs_bits_are_ignored(tmp_path):
    path = g.write_pcap(tmp_path / "a.pcap", [udp4(1.0)], linktype=1 | 0x14000000)
    flows, _ = read(path)
    assert len(flows) == 1


# --- pcapng ------------------------------------------------------------------------


@pytest.mark.parametrize("endian", ["<", ">"])
@pytest.mark.parametrize("block", ["epb", "opb"])
def test_pcapng_byte_orders_and_blocks(tmp_path, endian, block):
    pkts = [udp4(50.0), udp4(50.5, 53, 1000, src=B, dst=A)]
    path = g.write_pcapng(tmp_path / "a.pcapng", pkts, endian=endian, block=block)
    flows, report = read(path)
    assert report.n_packets == 2
    assert flows[0]["n"] == 2 and flows[0]["first_ts"] == pytest.approx(50.0)
    assert flows[0]["last_ts"] == pytest.approx(50.5)


@pytest.mark.parametrize("tsresol,tol", [(3, 1e-3), (9, 1e-9), (0x80 | 10, 2**-10), (None, 1e-6)])
def test_pcapng_timestamp_resolution(tmp_path, tsresol, tol):
    pkts = [udp4(1234.0), udp4(1234.0 + 7 * tol)]
    path = g.write_pcapng(tmp_path / "a.pcapng", pkts, tsresol=[tsresol])
    flows, _ = read(path)
    assert flows[0]["first_ts"] == pytest.approx(1234.0, abs=1e-6)
    assert flows[0]["last_ts"] - flows[0]["first_ts"] == pytest.approx(7 * tol, rel=1e-3)


def test_pcapng_interfaces_with_own_link_type_and_resolution(tmp_path):
    # Prepare: interface 0 Ethernet in microseconds, interface 1 raw IPv4 in nanoseconds
    pkts = [
        g.Packet(10.0, g.ether(ip4_udp()), iface=0),
        g.Packet(10.000000123, ip4_udp(53, 1000, src=B, dst=A), iface=1),
        g.Packet(10.5, g.ether(ip4_udp(7, 8)), iface=0),
    ]
    path = g.write_pcapng(tmp_path / "a.pcapng", pkts, linktypes=(1, 228), tsresol=[None, 9])
    flows, report = read(path)
    assert report.n_packets == 3
    assert sorted(f["n"] for f in flows) == [1, 2]
    two = next(f for f in flows if f["n"] == 2)
    assert two["last_ts"] - two["first_ts"] == pytest.approx(123e-9, abs=1e-9)


def test_pcapng_skips_unknown_blocks_and_simple_packet_blocks(tmp_path):
    extra = g.custom_block(body=b"x" * 37) + g.custom_block(btype=4, body=b"\0" * 8)
    path = g.write_pcapng(tmp_path / "a.pcapng", [udp4(1.0), udp4(2.0)], block="spb", extra=extra)
    flows, report = read(path)
    assert report.n_packets == 2 and flows[0]["n"] == 2


def test_pcapng_second_section_with_other_byte_order(tmp_path):
    first = g.shb("<") + g.idb(1, endian="<") + g.epb(udp4(1.0), endian="<")
    second = g.shb(">") + g.idb(101, endian=">") + g.epb(g.Packet(2.0, ip4_udp()), endian=">")
    path = tmp_path / "a.pcapng"
    path.write_bytes(first + second)
    flows, report = read(path)
    assert report.n_packets == 2 and flows[0]["n"] == 2


def test_pcapng_unsupported_interface_is_counted(tmp_path):
    pkts = [g.Packet(1.0, b"\x00" * 40, iface=0), g.Packet(2.0, g.ether(ip4_udp()), iface=1)]
    path = g.write_pcapng(tmp_path / "a.pcapng", pkts, linktypes=(147, 1))
    flows, report = read(path)
    assert report.skipped["unsupported_linktype:147"] == 1 and len(flows) == 1


def test_pcapng_with_only_unsupported_interfaces_is_an_input_error(tmp_path):
    path = g.write_pcapng(tmp_path / "a.pcapng", [g.Packet(1.0, b"\0" * 40)], linktypes=(147,))
    with pytest.raises(InputError, match="no interface with a supported link type"):
        read(path)


# --- link types ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "linktype,frame",
    [
        (1, g.ether(ip4_udp())),
        (1, g.ether(ip4_udp(), vlans=[(0x8100, 5)])),
        (1, g.ether(ip4_udp(), vlans=[(0x88A8, 5), (0x8100, 6)])),
        (1, g.ether(ip4_udp(), vlans=[(0x9100, 5), (0x8100, 6)])),
        (1, g.ether(g.mpls(ip4_udp(), labels=(16, 17)), 0x8847)),
        (1, g.ether(struct.pack("!BBHH", 0x11, 0, 1, 30) + b"\x00\x21" + ip4_udp(), 0x8864)),
        (1, g.ether(ip6_udp(), 0x86DD)),
        (113, g.sll(ip4_udp())),
        (113, g.sll(ip6_udp(), 0x86DD)),
        (276, g.sll2(ip4_udp())),
        (0, g.null(ip4_udp(), 2, "<")),
        (0, g.null(ip4_udp(), 2, ">")),
        (0, g.null(ip6_udp(), 24, "<")),
        (0, g.null(ip6_udp(), 28, ">")),
        (108, g.null(ip6_udp(), 30, ">")),
        (101, ip4_udp()),
        (101, ip6_udp()),
        (12, ip4_udp()),
        (14, ip6_udp()),
        (228, ip4_udp()),
        (229, ip6_udp()),
        (9, g.ppp(ip4_udp())),
        (9, g.ppp(ip6_udp(), 0x0057, address_control=False)),
        (9, g.chdlc(ip4_udp())),
        (104, g.chdlc(ip4_udp())),
        (104, g.chdlc(g.mpls(ip4_udp()), 0x8847)),
        (192, g.ppi(g.ether(ip4_udp()))),
    ],
)
def test_link_types(tmp_path, linktype, frame):
    path = g.write_pcap(tmp_path / "a.pcap", [(1.0, frame)], linktype=linktype)
    flows, report = read(path)
    assert report.n_flow_packets == 1, report.skipped
    assert flows[0]["key"].endswith("|1000|" + flows[0]["key"].split("|")[3] + "|53")


def test_unsupported_link_type_for_the_whole_file(tmp_path):
    path = g.write_pcap(tmp_path / "a.pcap", [(1.0, b"\0" * 30)], linktype=147)
    with pytest.raises(InputError, match="unsupported link type 147"):
        read(path)


def test_non_ip_frames_are_counted(tmp_path):
    arp = g.ether(b"\0" * 28, 0x0806)
    path = g.write_pcap(tmp_path / "a.pcap", [(1.0, arp), udp4(2.0)])
    flows, report = read(path)
    assert report.skipped["non_ip"] == 1 and report.n_flow_packets == 1


# --- IP and transport ------------------------------------------------------------------


def test_ipv4_options_move_the_transport_header(tmp_path):
    frame = g.ether(g.ipv4(A, B, 17, g.udp(1000, 53, b"xyz"), options=b"\x94\x04\0\0" * 3))
    flows, report = read(g.write_pcap(tmp_path / "a.pcap", [(1.0, frame)]))
    assert flows[0]["key"] == f"UDP|{A}|1000|{B}|53" and flows[0]["bytes"] == 20 + 12 + 8 + 3


def test_ip_fragments_are_reassembled_or_counted(tmp_path):
    seg = g.udp(1000, 53, b"x" * 40)
    pkts = [
        (1.0, g.ether(g.ipv4(A, B, 17, seg[:24], mf=True, df=False))),  # first fragment
        (1.1, g.ether(g.ipv4(A, B, 17, seg[24:], frag=3, df=False))),  # last fragment
        (1.2, g.ether(ip6_udp(ext=[(44, struct.pack("!HI", 1, 7))]), 0x86DD)),  # M set
        (1.3, g.ether(ip6_udp(ext=[(44, struct.pack("!HI", 0, 7))]), 0x86DD)),  # atomic
    ]
    flows, report = read(g.write_pcap(tmp_path / "a.pcap", pkts))
    # The IPv4 pair is one datagram; the IPv6 first fragment never gets its rest, so
    # it is a packet of its own (it carries the ports).
    assert report.n_merged == 1 and not report.skipped
    assert report.n_flow_packets == 3
    by_key = {f["key"]: f for f in flows}
    assert by_key[f"UDP|{A}|1000|{B}|53"]["bytes"] == 20 + 8 + 40
    assert any(k.startswith(f"UDP|{A6}|1000|") for k in by_key)
    no_reassembly = dataclasses.replace(OPTS, reassemble=False)
    flows, report = read(g.write_pcap(tmp_path / "a.pcap", pkts), options=no_reassembly)
    assert report.skipped["ip_fragment"] == 3 and report.n_flow_packets == 1


def test_ipv6_extension_headers(tmp_path):
    ext = [(0, b"\1\4\0\0\0\0"), (43, b"\0" * 14), (60, b"\1\4\0\0\0\0"), (51, b"\0" * 10)]
    frame = g.ether(ip6_udp(payload=b"hello", ext=ext), 0x86DD)
    flows, report = read(g.write_pcap(tmp_path / "a.pcap", [(1.0, frame)]))
    assert report.n_flow_packets == 1
    assert flows[0]["key"] == f"UDP|{A6}|1000|{B6}|53"
    assert flows[0]["bytes"] == 40 + 8 + 16 + 8 + 12 + 8 + 5


def test_other_transport_protocols_are_counted(tmp_path):
    icmp = g.ether(g.ipv4(A, B, 1, b"\x08\0\0\0\0\0\0\0"))
    sctp = g.ether(g.ipv6(A6, B6, 132, b"\0" * 12), 0x86DD)
    flows, report = read(g.write_pcap(tmp_path / "a.pcap", [(1.0, icmp), (2.0, sctp)]))
    assert report.skipped["non_tcp_udp"] == 2 and flows == []


def test_tcp_with_options_and_tso_zero_length(tmp_path):
    seg = g.tcp(4000, 80, g.SYN, options=b"\x02\x04\x05\xb4", src=A, dst=B)
    tso = g.tcp(4000, 80, g.ACK, b"d" * 3000, src=A, dst=B)
    pkts = [(1.0, g.ether(g.ipv4(A, B, 6, seg))), (1.1, g.ether(g.ipv4(A, B, 6, tso, total_len=0)))]
    flows, report = read(g.write_pcap(tmp_path / "a.pcap", pkts))
    assert flows[0]["n"] == 2
    assert flows[0]["bytes"] == (20 + 24) + (20 + 20 + 3000)  # length 0: taken from the wire


def test_snaplen_cut_packet_keeps_its_wire_sizes(tmp_path):
    frame = g.ether(g.ipv4(A, B, 17, g.udp(1000, 53, b"z" * 500)))
    pkts = [g.Packet(1.0, frame[:60], wirelen=len(frame))]
    flows, report = read(g.write_pcap(tmp_path / "a.pcap", pkts, snaplen=60))
    assert flows[0]["bytes"] == 20 + 8 + 500 and report.skipped == {}


# --- records that are wrong -------------------------------------------------------------


def test_malformed_headers_are_counted_or_raised_in_strict_mode(tmp_path):
    pkts = [
        (1.0, g.ether(g.ipv4(A, B, 17, g.udp(1, 2, b"x"), ihl=4))),  # IHL < 5
        (1.1, g.ether(g.ipv4(A, B, 6, g.tcp(1, 2, doff=3)))),  # TCP data offset < 5
        (1.2, g.ether(g.ipv4(A, B, 17, g.udp(1, 2), total_len=10))),  # total < header
        (1.3, g.ether(g.ipv6(A6, B6, 0, b"\x00\x09" + b"\0" * 6), 0x86DD)),  # chain off the end
        udp4(2.0),
    ]
    path = g.write_pcap(tmp_path / "a.pcap", pkts)
    flows, report = read(path)
    assert report.skipped["bad_ip_header"] == 2
    assert report.skipped["bad_tcp_header"] == 1
    assert report.skipped["truncated_packet"] == 1
    assert len(flows) == 1
    with pytest.raises(InputError, match="bad ip header"):
        read(path, strict=True)


def test_long_ipv6_extension_chain_is_cut(tmp_path):
    ext = [(60, b"\0" * 6)] * 12
    frame = g.ether(ip6_udp(ext=ext), 0x86DD)
    _, report = read(g.write_pcap(tmp_path / "a.pcap", [(1.0, frame)]))
    assert report.skipped["bad_ipv6_ext"] == 1


def test_records_beyond_the_snaplen_are_kept(tmp_path):
    path = g.write_pcap(tmp_path / "a.pcap", [udp4(1.0), udp4(2.0)], snaplen=40)
    flows, report = read(path, strict=True)
    assert not report.skipped and flows[0]["n"] == 2
    ng = tmp_path / "a.pcapng"
    ng.write_bytes(g.shb() + g.idb(1, snaplen=40) + g.epb(udp4(1.0)) + g.epb(udp4(2.0)))
    flows, report = read(ng, strict=True)
    assert not report.skipped and flows[0]["n"] == 2


def test_records_cut_by_end_of_file(tmp_path):
    path = g.write_pcap(tmp_path / "a.pcap", [udp4(1.0), udp4(2.0)])
    data = path.read_bytes()
    for cut in (5, 20, 40):  # inside the last record's header, and inside its data
        p = tmp_path / f"cut{cut}.pcap"
        p.write_bytes(data[:-cut])
        flows, report = read(p)
        assert report.skipped["truncated_record"] == 1 and flows[0]["n"] == 1
        with pytest.raises(InputError, match="truncated record"):
            read(p, strict=True)


def test_reading_resumes_after_a_corrupt_record(tmp_path):
    pkts = [udp4(1.0 + i, sport=1000 + i % 3) for i in range(68)]
    path = g.write_pcap(tmp_path / "a.pcap", pkts)
    data = bytearray(path.read_bytes())
    at = 24 + sum(16 + len(p.data) for p in pkts[:17])  # the 18th record's header
    data[at + 8 : at + 12] = struct.pack("<I", 0x7FFFFFFF)
    path.write_bytes(bytes(data))
    flows, report = read(path)
    assert report.skipped == {"bad_caplen": 1}  # one record lost, the other 67 read
    assert sum(f["n"] for f in flows) == 67 and report.n_packets == 68


def test_pcapng_reading_resumes_after_a_corrupt_block(tmp_path):
    pkts = [g.epb(udp4(1.0 + i, sport=1000 + i % 3)) for i in range(20)]
    bad = struct.pack("<II", 6, 30) + b"\x55" * 26  # an impossible length, then junk
    path = tmp_path / "a.pcapng"
    path.write_bytes(g.shb() + g.idb(1) + b"".join(pkts[:7]) + bad + b"".join(pkts[7:]))
    flows, report = read(path)
    assert report.skipped == {"bad_block_length": 1} and sum(f["n"] for f in flows) == 20


def test_corrupt_record_with_nothing_good_after_it_ends_the_file(tmp_path):
    path = g.write_pcap(tmp_path / "a.pcap", [udp4(1.0), udp4(2.0)])
    data = bytearray(path.read_bytes())
    data[24 + 16 + len(udp4(1.0).data) + 8 :] = b"\xff" * 40
    path.write_bytes(bytes(data))
    flows, report = read(path)
    assert report.skipped == {"bad_caplen": 1} and flows[0]["n"] == 1


@pytest.mark.parametrize(
    "content,problem",
    [
        (b"", "empty file"),
        (b"hello, this is not a capture\n" * 3, "not a pcap or pcapng capture"),
        (b"\xd4\xc3", "not a capture file"),
        (b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00", "truncated pcap file header"),
        (b"\x0a\x0d\x0d\x0a\x1c\x00\x00\x00\x00\x00\x00\x00", "byte-order magic"),
        (b"\x0a\x0d\x0d\x0a\x1c\x00", "truncated pcapng section header"),
    ],
)
def test_bad_files_raise_input_error(tmp_path, content, problem):
    path = tmp_path / "bad.pcap"
    path.write_bytes(content)
    with pytest.raises(InputError, match=problem) as exc:
        read(path)
    assert str(path) in str(exc.value)


@pytest.mark.parametrize("length", [0, 8, 30, 1 << 30])
def test_pcapng_impossible_or_huge_block_lengths(tmp_path, length):
    good = g.shb() + g.idb(1) + g.epb(udp4(1.0))
    path = tmp_path / "a.pcapng"
    path.write_bytes(good + struct.pack("<II", 6, length) + b"\0" * 64)
    if length in (0, 8, 30):  # shorter than a block, or not a multiple of 4
        flows, report = read(path)
        assert flows[0]["n"] == 1 and report.skipped == {"bad_block_length": 1}
        with pytest.raises(InputError, match="bad block length"):
            read(path, strict=True)
    else:  # longer than the file: the last block is cut short
        flows, report = read(path)
        assert flows[0]["n"] == 1 and report.skipped["truncated_record"] == 1


def test_pcapng_bad_interface_and_trailer_are_counted(tmp_path):
    bad_if = g.epb(g.Packet(2.0, g.ether(ip4_udp()), iface=3))
    bad_trailer = bytearray(g.epb(udp4(3.0)))
    bad_trailer[-4:] = struct.pack("<I", 999)
    path = tmp_path / "a.pcapng"
    path.write_bytes(g.shb() + g.idb(1) + g.epb(udp4(1.0)) + bad_if + bytes(bad_trailer))
    flows, report = read(path)
    assert report.skipped["bad_interface"] == 1 and report.skipped["bad_block_trailer"] == 1
    assert flows[0]["n"] == 1


def test_report_counts_every_record(tmp_path):
    pkts = [udp4(1.0), (1.5, g.ether(b"\0" * 28, 0x0806)), udp4(2.0, 5, 6)]
    flows, report = read(g.write_pcap(tmp_path / "a.pcap", pkts))
    assert report.n_packets == 3 and report.n_flow_packets == 2 and report.n_flows == 2
    assert [f["first_index"] for f in flows] == [0, 2]
    assert np.all(np.diff([f["first_index"] for f in flows]) > 0)
