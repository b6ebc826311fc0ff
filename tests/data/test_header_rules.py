"""The decoding and timing rules where flowsplit and NFStream (nDPI's reader) differ.

Each is deliberate (README, "Prepare a dataset"; ``RULES`` in
benchmarks/prepare_throughput.py names the disagreements on the nDPI corpus after
them): a packet with an invalid header is skipped and counted, as a receiving stack
drops it and Zeek does not count it, where nDPI reads whatever ports it finds; an IPv4
total length of 0 is segmentation offload, kept; a clock that steps back does not stop
the idle timeout. Every capture is written by the test and read with the compiled
kernel (when built) and without it.
"""

from __future__ import annotations

import pytest

from flowsplit.data.flows import FlowOptions, ReadReport, iter_flows
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


@BOTH
def test_an_ip_packet_behind_a_non_ip_ethertype_is_not_read(tmp_path, with_kernel):
    # A fuzzed ethertype (0x0801): nDPI reads the IPv4 header that follows anyway.
    frame = g.ether(g.ipv4(A, B, 6, g.tcp(4000, 80, g.ACK, b"x" * 10)), 0x0801)
    pkts = [segment(1.0), g.Packet(1.1, frame), segment(1.2)]
    flows, skipped = read(g.write_pcap(tmp_path / "a.pcap", pkts), with_kernel)
    assert [n for n, _, _ in flows] == [2]
    assert skipped == {"non_ip": 1}


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
