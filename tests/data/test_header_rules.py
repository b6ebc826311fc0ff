"""The decoding and timing rules where flowsplit and NFStream (nDPI's reader) differ.

Each is deliberate (README, "Prepare a dataset"; ``RULES`` in
benchmarks/prepare_throughput.py names the disagreements on the nDPI corpus after
them): a packet with an invalid header is skipped and counted, as a receiving stack
drops it and Zeek does not count it, where nDPI reads whatever ports it finds; an IP
header behind a non-IP ethertype is read only when its IPv4 checksum is right; an IPv4
total length of 0 is segmentation offload, kept; a clock that steps back does not stop
the idle timeout. Every capture is written by the test and read with the compiled
kernel (when built) and without it.
"""

from __future__ import annotations

import pytest

from flowsplit.reader.flows import FlowOptions, ReadReport, iter_flows
from tests.data import _pcapgen as g
from tests.data.test_kernel import _kernel, kernel

A, B = "10.0.0.1", "10.0.0.2"
OPTS = FlowOptions(views=("seq",))
BOTH = pytest.mark.parametrize(
    "with_kernel",
    [
        pytest.param(True, marks=pytest.mark.skipif(_kernel is None, reason="kernel not built")),
        False,
    ],
)


def read(path, with_kernel: bool):
    """[(packets, bytes, first_ts)] of the capture's flows, in order, and the skips."""
    report = ReadReport()
    with kernel(with_kernel):
        flows = [
            (int(b.n_packets[i]), int(b.n_bytes[i]), float(b.first_ts[i]))
            for b in iter_flows(path, OPTS, report)
            for i in range(len(b))
        ]
    return sorted(flows, key=lambda f: f[2]), dict(report.skipped)


def segment(ts, payload=b"x" * 10, **tcp):
    """A TCP segment from A:4000 to B:80 over Ethernet."""
    return g.Packet(ts, g.ether(g.ipv4(A, B, 6, g.tcp(4000, 80, g.ACK, payload, **tcp))))


@BOTH
def test_a_segment_with_data_offset_below_5_is_not_a_packet_of_its_flow(tmp_path, with_kernel):
    # As in nDPI's reasm_crash capture: one PSH/ACK of a flow with a data offset of 0.
    # A receiver drops it (Linux: doff < 5 is a bad packet); NFStream counts it.
    pkts = [segment(1.0 + i / 10) for i in range(5)]
    pkts[2] = segment(1.2, doff=0)
    flows, skipped = read(g.write_pcap(tmp_path / "a.pcap", pkts), with_kernel)
    assert [n for n, _, _ in flows] == [4]
    assert skipped == {"bad_tcp_header": 1}


@BOTH
def test_a_tcp_header_past_the_ip_length_is_skipped(tmp_path, with_kernel):
    # A 32-byte TCP header (data offset 8) in an IP packet that holds only 24 bytes of it.
    seg = g.tcp(4000, 80, g.ACK, options=b"\x01" * 12)
    bad = g.Packet(1.1, g.ether(g.ipv4(A, B, 6, seg, total_len=20 + 24)))
    pkts = [segment(1.0), bad, segment(1.2)]
    flows, skipped = read(g.write_pcap(tmp_path / "a.pcap", pkts), with_kernel)
    assert [n for n, _, _ in flows] == [2]
    assert skipped == {"bad_tcp_header": 1}


def read_report(path, with_kernel: bool) -> ReadReport:
    report = ReadReport()
    with kernel(with_kernel):
        for _ in iter_flows(path, OPTS, report):
            pass
    return report


@BOTH
def test_an_ipv4_header_with_a_correct_checksum_behind_a_non_ip_ethertype_is_read(
    tmp_path, with_kernel
):
    # A fuzzed ethertype (0x0801, 0x2800, 0): the IPv4 header after it is whole and its
    # checksum right, so the packet is read as IPv4 and counted as recovered.
    pkts = [segment(1.0)]
    for i, et in enumerate((0x0801, 0x2800, 0x0000)):
        ip = g.ipv4(A, B, 6, g.tcp(4000, 80, g.ACK, b"x" * 10), ident=7 + i)
        pkts.append(g.Packet(1.1 + i / 10, g.ether(ip, et)))
    pkts.append(segment(1.5))
    path = g.write_pcap(tmp_path / "a.pcap", pkts)
    flows, skipped = read(path, with_kernel)
    assert [n for n, _, _ in flows] == [5]
    assert skipped == {}
    assert read_report(path, with_kernel).recovered == {"ipv4_after_unknown_type": 3}


@BOTH
def test_no_ip_header_is_read_behind_a_non_ip_ethertype_unless_its_checksum_is_right(
    tmp_path, with_kernel
):
    # nDPI reads any frame whose first nibble is 4 or 6 as IP; flowsplit needs the
    # IPv4 header checksum: a wrong one, an IPv6 header (no checksum), an IHL below 5
    # and an ARP frame stay non-IP.
    ip = g.ipv4(A, B, 6, g.tcp(4000, 80, g.ACK, b"x" * 10))
    # IHL 4 with a checksum right over those 16 bytes: only the IHL check refuses it.
    h = bytearray(ip)
    h[0], h[10:12] = 0x44, b"\0\0"
    h[10:12] = g.checksum(bytes(h[:16])).to_bytes(2, "big")
    short_ihl = bytes(h)
    bad_sum = ip[:10] + bytes([ip[10] ^ 0xFF]) + ip[11:]
    v6 = g.ipv6("fe80::1", "fe80::2", 6, g.tcp(4000, 80, g.ACK, b"x" * 10))
    arp = bytes.fromhex("0001080006040001") + bytes(20)
    pkts = [segment(1.0)]
    for i, (body, et) in enumerate(
        ((bad_sum, 0x0801), (v6, 0x0801), (short_ihl, 0x0801), (ip, 0x0806), (arp, 0x0806))
    ):
        pkts.append(g.Packet(1.1 + i / 10, g.ether(body, et)))
    pkts.append(segment(1.7))
    path = g.write_pcap(tmp_path / "a.pcap", pkts)
    flows, skipped = read(path, with_kernel)
    assert [n for n, _, _ in flows] == [3]
    assert skipped == {"non_ip": 4}
    # The IPv4 header behind the ARP ethertype with a right checksum is read: the rule
    # trusts the checksum over the type field (nothing real sends IPv4 as ARP).
    assert read_report(path, with_kernel).recovered == {"ipv4_after_unknown_type": 1}


def test_the_dpkt_reference_reads_ipv4_behind_a_non_ip_ethertype_by_the_same_rule(tmp_path):
    pytest.importorskip("dpkt")
    from flowsplit.reader.reference import reference_flows

    ip = g.ipv4(A, B, 6, g.tcp(4000, 80, g.ACK, b"x" * 10))
    bad_sum = ip[:10] + bytes([ip[10] ^ 0xFF]) + ip[11:]
    pkts = [segment(1.0), g.Packet(1.1, g.ether(ip, 0x2800))]
    pkts += [g.Packet(1.2, g.ether(bad_sum, 0x2800)), segment(1.3)]
    ref = reference_flows(g.write_pcap(tmp_path / "a.pcap", pkts), OPTS, keep_packets=False)
    assert [f.n_packets for f in ref.flows] == [3]
    assert ref.skipped["non_ip"] == 1


@BOTH
def test_total_length_0_is_a_packet_of_its_flow_at_its_wire_length(tmp_path, with_kernel):
    # Segmentation offload on the capturing host leaves the IPv4 total length 0; the
    # packet is on the wire (NFStream drops it). Its length is the frame's.
    big = g.tcp(4000, 80, g.ACK, b"d" * 3000)
    pkts = [segment(1.0), g.Packet(1.1, g.ether(g.ipv4(A, B, 6, big, total_len=0))), segment(1.2)]
    flows, skipped = read(g.write_pcap(tmp_path / "a.pcap", pkts), with_kernel)
    assert flows == [(3, 2 * (20 + 20 + 10) + (20 + 20 + 3000), 1.0)]
    assert skipped == {}


@BOTH
def test_after_the_clock_steps_back_flows_still_end_at_their_idle_gaps(tmp_path, with_kernel):
    # Two captures merged end to end, the second from earlier times, with two sessions
    # of the same 5-tuple 600 s apart. NFStream holds its clock at 1002 s from there on
    # and makes one flow of all 9 packets; flowsplit counts the 600 s as idle time.
    # (A step back itself is no idle time: the first part's flow takes the next packets.)
    pkts = [segment(t) for t in (1000.0, 1001.0, 1002.0, 100.0, 101.0, 102.0, 700.0, 701.0, 702.0)]
    flows, skipped = read(g.write_pcap(tmp_path / "a.pcap", pkts), with_kernel)
    assert [(n, ts) for n, _, ts in flows] == [(3, 700.0), (6, 1000.0)]
    assert skipped == {}


def test_prepare_records_the_recovered_packets_in_the_manifest(tmp_path):
    from flowsplit.data.commands import format_summary
    from flowsplit.data.labels import LabelSpec
    from flowsplit.data.prepare import PrepareOptions, prepare_dataset

    pkts = []
    for k in range(30):  # 30 flows to split; the first has a frame behind a fuzzed ethertype
        t = 1.0 + k
        tcp = g.tcp(4000 + k, 80, g.ACK, bytes([k]) * 10)
        pkts += [
            g.Packet(t, g.ether(g.ipv4(A, B, 6, tcp))),
            g.Packet(t + 0.1, g.ether(g.ipv4(A, B, 6, tcp))),
        ]
    ip = g.ipv4(A, B, 6, g.tcp(4000, 80, g.ACK, b"y" * 10))
    pkts.insert(1, g.Packet(1.05, g.ether(ip, 0x2800)))
    path = g.write_pcap(tmp_path / "a.pcap", pkts)
    m = prepare_dataset([path], tmp_path / "ds", PrepareOptions(labels=LabelSpec(by="port")))
    assert m["recovered"] == {"ipv4_after_unknown_type": 1}
    assert "recovered: ipv4_after_unknown_type 1" in format_summary(m, tmp_path / "ds")
    assert m["read"]["n_flow_packets"] == 61
    assert "packets:non_ip" not in m["skipped"]


def test_the_dpkt_reference_keeps_the_ns_bit_out_of_the_flags_byte(tmp_path):
    # dpkt's TCP flags carry the NS bit (bit 8, in the data offset byte); a payload-
    # layout row holds the flags byte CWR..FIN only, in the fast reader and the reference.
    pytest.importorskip("dpkt")
    import numpy as np

    from flowsplit.reader.reference import reference_flows, reference_views

    seg = g.tcp(4000, 80, g.ACK, b"x" * 10)
    ns = seg[:12] + bytes([seg[12] | 1]) + seg[13:]
    pkts = [segment(1.0), g.Packet(1.1, g.ether(g.ipv4(A, B, 6, ns)))]
    path = g.write_pcap(tmp_path / "a.pcap", pkts)
    opts = FlowOptions(views=("pkt_bytes",))
    ours = [
        b.views["pkt_bytes"][i] for b in iter_flows(path, opts, ReadReport()) for i in range(len(b))
    ]
    ref = reference_flows(path, opts)
    assert len(ours) == len(ref.flows) == 1
    want = reference_views(ref.flows[0], opts)["pkt_bytes"]
    np.testing.assert_array_equal(ours[0], want)
    assert ours[0][1, 4] == g.ACK
