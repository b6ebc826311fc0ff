"""Flow assembly: keys, direction, timeouts, TCP end, streaming, several files."""

from __future__ import annotations

import random

import numpy as np
import pytest

from flowsplit.errors import ConfigError, InputError
from flowsplit.reader.flows import (
    FlowOptions,
    ReadReport,
    iter_flows,
    iter_flows_many,
    stats_columns,
    view_shapes,
)
from tests.data import _pcapgen as g

A, B, C = "10.0.0.1", "10.0.0.2", "10.0.0.3"


def seg(t, src, dst, sport, dport, flags=g.ACK, data=b""):
    return g.Packet(t, g.ether(g.ipv4(src, dst, 6, g.tcp(sport, dport, flags, data))))


def dgram(t, src, dst, sport, dport, data=b"x"):
    return g.Packet(t, g.ether(g.ipv4(src, dst, 17, g.udp(sport, dport, data))))


def flows_of(path, options=FlowOptions(views=()), **kw):
    out = []
    for b in iter_flows(path, options, ReadReport(), **kw):
        out += [
            (k, int(n), int(i))
            for k, n, i in zip(b.keys(), b.n_packets, b.first_index, strict=True)
        ]
    return out


def test_both_directions_make_one_flow_with_the_first_sender_as_initiator(tmp_path):
    pkts = [dgram(1, B, A, 53, 999), dgram(2, A, B, 999, 53), dgram(3, B, A, 53, 999)]
    path = g.write_pcap(tmp_path / "a.pcap", pkts)
    assert flows_of(path) == [(f"UDP|{B}|53|{A}|999", 3, 0)]


def test_keys_separate_protocols_ports_and_addresses(tmp_path):
    pkts = [dgram(1, A, B, 1, 2), seg(2, A, B, 1, 2), dgram(3, A, B, 1, 3), dgram(4, A, C, 1, 2)]
    flows = flows_of(g.write_pcap(tmp_path / "a.pcap", pkts))
    assert [n for _, n, _ in flows] == [1, 1, 1, 1]


def test_idle_timeout_starts_a_new_flow(tmp_path):
    pkts = [dgram(0, A, B, 1, 2), dgram(100, B, A, 2, 1), dgram(221, B, A, 2, 1)]
    flows = flows_of(g.write_pcap(tmp_path / "a.pcap", pkts))
    assert flows == [(f"UDP|{A}|1|{B}|2", 2, 0), (f"UDP|{B}|2|{A}|1", 1, 2)]
    short = flows_of(g.write_pcap(tmp_path / "a.pcap", pkts), FlowOptions(idle_timeout=50))
    assert len(short) == 3


def test_active_timeout_cuts_long_flows(tmp_path):
    pkts = [dgram(t, A, B, 1, 2) for t in range(0, 100, 10)]  # one packet every 10 s
    flows = flows_of(g.write_pcap(tmp_path / "a.pcap", pkts), FlowOptions(active_timeout=35))
    assert [n for _, n, _ in flows] == [4, 4, 2]  # 0..30, 40..70, 80..90
    assert [i for _, _, i in flows] == [0, 4, 8]


def test_tcp_end_keeps_trailing_packets_and_a_new_syn_starts_a_new_flow(tmp_path):
    conv = g.tcp_conversation(A, B, 4000, 80, t0=10.0)  # ends with FIN, FIN, ACK
    again = g.tcp_conversation(A, B, 4000, 80, t0=11.0, close=False, isn=7000)
    late = seg(10.9, B, A, 80, 4000, g.ACK)  # a trailing ACK after both FINs
    pkts = conv + [late] + again
    flows = flows_of(g.write_pcap(tmp_path / "a.pcap", pkts))
    assert [n for _, n, _ in flows] == [len(conv) + 1, len(again)]
    assert flows[1][2] == len(conv) + 1


def test_rst_ends_a_flow_but_a_syn_alone_does_not(tmp_path):
    syn = seg(1.0, A, B, 5, 6, g.SYN)
    rst = seg(1.1, B, A, 6, 5, g.RST | g.ACK)
    new_syn = g.Packet(1.2, g.ether(g.ipv4(A, B, 6, g.tcp(5, 6, g.SYN, seq=999))))
    pkts = [syn, rst, new_syn]
    assert [n for _, n, _ in flows_of(g.write_pcap(tmp_path / "a.pcap", pkts))] == [2, 1]
    retransmit = [syn, seg(1.5, A, B, 5, 6, g.SYN), seg(1.6, B, A, 6, 5, g.SYN | g.ACK)]
    assert [n for _, n, _ in flows_of(g.write_pcap(tmp_path / "b.pcap", retransmit))] == [3]


def test_a_syn_retried_after_an_rst_stays_in_its_flow(tmp_path):
    # A stack refused with an RST retries the same SYN (same sequence number): one
    # connection attempt, as NFStream counts it; a SYN with a new one is a new flow.
    syn = seg(1.0, A, B, 5, 6, g.SYN)
    rst = seg(1.1, B, A, 6, 5, g.RST | g.ACK)
    pkts = [syn, rst, seg(1.6, A, B, 5, 6, g.SYN), rst, seg(2.1, A, B, 5, 6, g.SYN), rst]
    assert [n for _, n, _ in flows_of(g.write_pcap(tmp_path / "a.pcap", pkts))] == [6]
    other = g.Packet(2.5, g.ether(g.ipv4(A, B, 6, g.tcp(5, 6, g.SYN, seq=77))))
    pkts += [other, seg(2.6, A, B, 5, 6, g.SYN)]  # a new attempt, then its retry
    assert [n for _, n, _ in flows_of(g.write_pcap(tmp_path / "b.pcap", pkts))] == [6, 2]


def test_after_the_clock_goes_back_a_flow_is_timed_on_its_own_gaps(tmp_path):
    # After a packet at t=1000, later packets carry earlier times. nDPI (and so
    # NFStream) would count them all at 1000, one flow of 3; the 280 s gap between
    # the flow's own packets is idle time to us.
    pkts = [dgram(1000, A, C, 5, 6), dgram(10, A, B, 1, 2), dgram(20, A, B, 1, 2)]
    pkts += [dgram(300, A, B, 1, 2)]
    flows = flows_of(g.write_pcap(tmp_path / "a.pcap", pkts))
    assert sorted((i, n) for _, n, i in flows) == [(0, 1), (1, 2), (3, 1)]


def _random_capture(path, seed, n=400):
    """Many interleaved TCP and UDP flows with timeouts, ends and out-of-order times."""
    rng = random.Random(seed)
    hosts = [f"10.0.{i}.{j}" for i in range(2) for j in range(1, 4)]
    t, pkts = 1000.0, []
    for _ in range(n):
        t += rng.expovariate(1 / 20.0)
        a, b = rng.sample(hosts, 2)
        sp, dp = rng.choice([1000, 1001]), rng.choice([80, 53])
        if rng.random() < 0.5:
            a, b, sp, dp = b, a, dp, sp
        ts = t - rng.uniform(0, 300) if rng.random() < 0.02 else t
        if rng.random() < 0.5:
            flags = rng.choice([g.SYN, g.ACK, g.FIN | g.ACK, g.RST, g.PSH | g.ACK, g.SYN | g.ACK])
            seq = rng.choice([1, 2])  # SYNs both retried and new after a flow's end
            seg_ = g.tcp(sp, dp, flags, b"p" * 30, seq=seq)
            pkts.append(g.Packet(ts, g.ether(g.ipv4(a, b, 6, seg_))))
        else:
            pkts.append(
                g.Packet(
                    ts,
                    g.ether(
                        g.ipv6(f"::{a[-1]}", f"::{b[-1]}", 17, g.udp(sp, dp, b"d" * 100)), 0x86DD
                    ),
                )
            )
    return g.write_pcap(path, pkts)


def _everything(path, chunk_bytes):
    opts = FlowOptions(
        idle_timeout=60,
        active_timeout=400,
        mask_port=False,
        seq_len=8,
        n_bytes=100,
        n_pkts=4,
        pkt_len=48,
    )
    batches = list(iter_flows(path, opts, ReadReport(), chunk_bytes=chunk_bytes))
    order = []
    for b in batches:
        order += list(zip(b.first_index.tolist(), range(len(b)), [b] * len(b), strict=True))
    order.sort(key=lambda x: x[0])
    cols = {
        "meta": [
            (b.keys()[i], b.n_packets[i], b.n_bytes[i], b.first_ts[i], b.last_ts[i])
            for _, i, b in order
        ],
        **{
            v: np.stack([b.views[v][i] for _, i, b in order]) for v in ("seq", "bytes", "pkt_bytes")
        },
        "stats": np.stack([b.stats.iloc[i].to_numpy() for _, i, b in order]),
    }
    return cols


@pytest.mark.parametrize("seed", [1, 2])
def test_streaming_in_tiny_chunks_equals_reading_whole(tmp_path, seed):
    path = _random_capture(tmp_path / "r.pcap", seed)
    whole = _everything(path, 8 << 20)
    assert len(whole["meta"]) > 30
    for chunk_bytes in (256, 1500, 7919):
        part = _everything(path, chunk_bytes)
        assert part["meta"] == whole["meta"]
        for v in ("seq", "bytes", "pkt_bytes", "stats"):
            np.testing.assert_array_equal(part[v], whole[v], err_msg=f"{v} at {chunk_bytes}")


def test_many_files_share_chunks_but_never_flows(tmp_path):
    a = g.write_pcap(tmp_path / "a.pcap", [dgram(1, A, B, 1, 2), dgram(2, B, A, 2, 1)])
    b = g.write_pcapng(tmp_path / "b.pcapng", [dgram(1.5, A, B, 1, 2)])
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"nope")
    c = g.write_pcap(tmp_path / "c.pcap", [dgram(3, A, B, 1, 2)], linktype=1)
    report = ReadReport()
    got = []
    for batch in iter_flows_many([a, b, bad, c], FlowOptions(views=()), report, on_error="skip"):
        got += list(zip(batch.source.tolist(), batch.n_packets.tolist(), strict=True))
    assert sorted(got) == [(0, 2), (1, 1), (3, 1)]
    assert report.n_files == 3 and report.file_errors[0][0] == str(bad)
    with pytest.raises(InputError, match="not a pcap or pcapng capture"):
        list(iter_flows_many([a, bad], FlowOptions(views=()), ReadReport()))


def test_options_are_checked():
    # Messages name the command-line option (--idle-timeout for idle_timeout).
    with pytest.raises(ConfigError, match="--idle-timeout must be > 0"):
        FlowOptions(idle_timeout=0)
    with pytest.raises(ConfigError, match="unknown view"):
        FlowOptions(views=("seq", "pictures"))
    with pytest.raises(ConfigError, match="--seq-len must be >= 1"):
        FlowOptions(seq_len=0)


def test_view_shapes_and_stats_columns():
    opts = FlowOptions(seq_len=5, n_bytes=10, n_pkts=3, pkt_len=20, views=("seq", "pkt_bytes"))
    assert view_shapes(opts) == {"seq": (5, 10), "pkt_bytes": (3, 20)}
    masked, unmasked = stats_columns(FlowOptions()), stats_columns(FlowOptions(mask_port=False))
    assert len(masked) >= 40 and "port_server" not in masked
    assert unmasked[-2:] == ("port_server", "port_client")


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_flow_rules_match_the_packet_by_packet_reference(tmp_path, seed):
    pytest.importorskip("dpkt")
    from flowsplit.reader.reference import reference_flows

    path = _random_capture(tmp_path / "r.pcap", seed, n=600)
    opts = FlowOptions(idle_timeout=60, active_timeout=400, views=())
    ref = reference_flows(path, opts, keep_packets=False)
    want = sorted((f.key, f.n_packets, f.first_index) for f in ref.flows)
    assert sorted(flows_of(path, opts, chunk_bytes=3000)) == want


def test_batches_can_be_subset(tmp_path):
    pkts = [dgram(1, A, B, 1, 2), dgram(2, A, C, 3, 4), dgram(3, B, C, 5, 6)]
    path = g.write_pcap(tmp_path / "a.pcap", pkts)
    (batch,) = list(iter_flows(path, FlowOptions(), ReadReport()))
    sub = batch.take(np.array([False, True, True]))
    assert len(sub) == 2 and sub.keys() == batch.keys()[1:]
    assert sub.views["seq"].shape == (2, 32, 10) and len(sub.stats) == 2
    np.testing.assert_array_equal(sub.first_index, [1, 2])
