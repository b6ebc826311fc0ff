"""Decoding beyond plain Ethernet/IP: VLAN keys, tunnels, fragments, other link layers.

Every capture here is written by the test itself (tests/data/_pcapgen.py), so each
states exactly what is on the wire and what the reader must make of it.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest

from flowsplit.errors import InputError
from flowsplit.reader.flows import FlowOptions, ReadReport, iter_flows, iter_flows_many
from tests.data import _pcapgen as g

A, B, C, D = "10.0.0.1", "10.0.0.2", "192.168.7.1", "192.168.7.2"
A6, B6 = "2001:db8::1", "2001:db8::2"
OPTS = FlowOptions(views=("seq", "bytes"), n_bytes=128)


def read(path, options=OPTS):
    report = ReadReport()
    flows = {}
    for b in iter_flows(path, options, report):
        for i, key in enumerate(b.keys()):
            flows.setdefault(key, []).append(
                {
                    "n": int(b.n_packets[i]),
                    "bytes": int(b.n_bytes[i]),
                    "payload": b.views["bytes"][i],
                }
            )
    used = report.n_flow_packets + report.n_merged + sum(report.skipped.values())
    assert used == report.n_packets  # every record is a packet, merged, or skipped
    return flows, report


def inner_udp(payload=b"inner", sport=5000, dport=53):
    return g.ipv4(C, D, 17, g.udp(sport, dport, payload))


# --- VLAN ------------------------------------------------------------------------------


def test_one_five_tuple_in_three_vlans_is_three_flows(tmp_path):
    pkts = [
        (1.0 + i, g.ether(g.ipv4(A, B, 17, g.udp(1000, 53, b"q")), vlans=[(0x8100, vid)]))
        for i, vid in enumerate((10, 20, 30, 10))
    ]
    path = g.write_pcap(tmp_path / "v.pcap", pkts)
    flows, _ = read(path)
    assert [f["n"] for f in flows[f"UDP|{A}|1000|{B}|53"]] == [2, 1, 1]
    flows, _ = read(path, dataclasses.replace(OPTS, vlan_key=False))
    assert [f["n"] for f in flows[f"UDP|{A}|1000|{B}|53"]] == [4]


def test_qinq_inner_id_separates_flows(tmp_path):
    frame = lambda inner: g.ether(  # noqa: E731
        g.ipv4(A, B, 6, g.tcp(1000, 80)), vlans=[(0x88A8, 100), (0x8100, inner)]
    )
    path = g.write_pcap(tmp_path / "q.pcap", [(1.0, frame(5)), (2.0, frame(6)), (3.0, frame(5))])
    flows, _ = read(path)
    assert sorted(f["n"] for f in flows[f"TCP|{A}|1000|{B}|80"]) == [1, 2]


# --- tunnels ---------------------------------------------------------------------------

TUNNELS = {
    "ipip": lambda p: g.ether(g.ipv4(A, B, 4, p)),
    "6in4": lambda p: g.ether(g.ipv4(A, B, 41, g.ipv6(A6, B6, 17, g.udp(5000, 53, b"inner")))),
    "gre": lambda p: g.ether(g.ipv4(A, B, 47, g.gre(p, key=7, seq=1))),
    "gre_pptp": lambda p: g.ether(g.ipv4(A, B, 47, g.gre_pptp(g.ppp(p)))),
    "gre_pptp_no_ack": lambda p: g.ether(g.ipv4(A, B, 47, g.gre_pptp(g.ppp(p), ack=None))),
    "gre_teb": lambda p: g.ether(g.ipv4(A, B, 47, g.gre(g.ether(p), 0x6558))),
    "erspan1": lambda p: g.ether(g.ipv4(A, B, 47, g.gre(g.ether(p), 0x88BE))),
    "erspan2": lambda p: g.ether(g.ipv4(A, B, 47, g.gre(g.erspan2(g.ether(p)), 0x88BE, seq=3))),
    "erspan3": lambda p: g.ether(
        g.ipv4(A, B, 47, g.gre(g.erspan3(g.ether(p), subheader=True), 0x22EB, seq=3))
    ),
    "vxlan": lambda p: g.ether(g.ipv4(A, B, 17, g.udp(40000, 4789, g.vxlan(g.ether(p))))),
    "geneve": lambda p: g.ether(
        g.ipv4(A, B, 17, g.udp(40000, 6081, g.geneve(g.ether(p), options=b"\0" * 8)))
    ),
    "geneve_ip": lambda p: g.ether(g.ipv4(A, B, 17, g.udp(40000, 6081, g.geneve(p, 0x0800)))),
    "gtp_u": lambda p: g.ether(g.ipv4(A, B, 17, g.udp(2152, 2152, g.gtp_u(p)))),
    "gtp_u_ext": lambda p: g.ether(g.ipv4(A, B, 17, g.udp(2152, 2152, g.gtp_u(p, ext=True)))),
    "capwap_eth": lambda p: g.ether(
        g.ipv4(A, B, 17, g.udp(40000, 5247, g.capwap_data(g.ether(p))))
    ),
    "capwap_80211": lambda p: g.ether(
        g.ipv4(
            A,
            B,
            17,
            g.udp(40000, 5247, g.capwap_data(g.wlan_data(p, swapped=True), native_80211=True)),
        )
    ),
}


@pytest.mark.parametrize("name", sorted(TUNNELS))
def test_tunnels_are_opened_and_inner_flows_kept_apart(tmp_path, name):
    wrap = TUNNELS[name]
    # Two inner flows in one tunnel: one outer 5-tuple, two inner ones.
    pkts = [(1.0, wrap(inner_udp(sport=5000))), (1.5, wrap(inner_udp(sport=5001)))]
    pkts += [(2.0, wrap(inner_udp(sport=5000)))]
    flows, report = read(g.write_pcap(tmp_path / "t.pcap", pkts))
    if name == "6in4":
        assert flows[f"UDP|{A6}|5000|{B6}|53"][0]["n"] == 3
        return
    assert set(flows) == {f"UDP|{C}|5000|{D}|53", f"UDP|{C}|5001|{D}|53"}, name
    assert flows[f"UDP|{C}|5000|{D}|53"][0]["n"] == 2
    assert flows[f"UDP|{C}|5000|{D}|53"][0]["bytes"] == 2 * (20 + 8 + 5)  # inner IP lengths
    assert bytes(flows[f"UDP|{C}|5000|{D}|53"][0]["payload"][:10]) == b"innerinner"


def test_vxlan_network_ids_keep_tenants_apart(tmp_path):
    def wrap(vni):
        frame = g.ether(inner_udp(sport=5000))
        return g.ether(g.ipv4(A, B, 17, g.udp(40000, 4789, g.vxlan(frame, vni=vni))))

    pkts = [(1.0, wrap(7)), (2.0, wrap(8)), (3.0, wrap(7))]
    path = g.write_pcap(tmp_path / "t.pcap", pkts)
    flows, _ = read(path)
    assert sorted(f["n"] for f in flows[f"UDP|{C}|5000|{D}|53"]) == [1, 2]
    flows, _ = read(path, dataclasses.replace(OPTS, vlan_key=False))
    assert [f["n"] for f in flows[f"UDP|{C}|5000|{D}|53"]] == [3]


def test_outer_mode_keeps_the_tunnel_flow(tmp_path):
    wrap = TUNNELS["vxlan"]
    pkts = [(1.0, wrap(inner_udp(sport=5000))), (1.5, wrap(inner_udp(sport=5001)))]
    flows, _ = read(
        g.write_pcap(tmp_path / "t.pcap", pkts), dataclasses.replace(OPTS, tunnels="outer")
    )
    assert (
        list(flows) == [f"UDP|{A}|40000|{B}|4789"] and flows[f"UDP|{A}|40000|{B}|4789"][0]["n"] == 2
    )


def test_udp_on_a_tunnel_port_that_is_no_tunnel_stays_udp(tmp_path):
    pkts = [(1.0, g.ether(g.ipv4(A, B, 17, g.udp(40000, 4789, b"\0" * 16))))]  # no I flag
    flows, report = read(g.write_pcap(tmp_path / "t.pcap", pkts))
    assert list(flows) == [f"UDP|{A}|40000|{B}|4789"]


def test_unknown_gre_payload_is_counted(tmp_path):
    pkts = [(1.0, g.ether(g.ipv4(A, B, 47, g.gre(b"\0" * 20, 0x880B))))]  # GRE with PPP
    path = g.write_pcap(tmp_path / "t.pcap", pkts)
    flows, report = read(path)
    assert flows == {} and report.skipped["bad_tunnel_header"] == 1
    # --strict stops at it, as at any malformed header (it was once counted twice).
    with pytest.raises(InputError, match="bad tunnel header"):
        list(iter_flows(path, OPTS, ReadReport(), strict=True))


# --- fragments -------------------------------------------------------------------------


def _datagram(n=300):
    body = bytes(random.Random(1).randrange(256) for _ in range(n))
    return g.udp(1000, 53, body, src=A, dst=B), body


@pytest.mark.parametrize("order", ["in_order", "reversed", "shuffled"])
def test_ipv4_fragments_reassembled_in_any_order(tmp_path, order):
    seg, body = _datagram()
    frags = g.ipv4_fragments(A, B, 17, seg, 64)
    idx = list(range(len(frags)))
    if order == "reversed":
        idx.reverse()
    elif order == "shuffled":
        random.Random(3).shuffle(idx)
    pkts = [(1.0 + 0.01 * k, g.ether(frags[i])) for k, i in enumerate(idx)]
    pkts.append((2.0, g.ether(g.ipv4(B, A, 17, g.udp(53, 1000, b"reply")))))
    flows, report = read(g.write_pcap(tmp_path / "f.pcap", pkts))
    f = flows[f"UDP|{A}|1000|{B}|53"][0]
    assert f["n"] == 2 and f["bytes"] == 20 + len(seg) + 20 + 8 + 5
    assert bytes(f["payload"][:128]) == body[:128]  # the payload joined in datagram order
    assert report.n_merged == len(frags) - 1 and not report.skipped


def test_ipv6_fragments_reassembled(tmp_path):
    seg = g.udp(1000, 53, b"z" * 200, src=A6, dst=B6)
    frags = g.ipv6_fragments(A6, B6, 17, seg, 72)
    pkts = [(1.0 + 0.1 * i, g.ether(f, 0x86DD)) for i, f in enumerate(reversed(frags))]
    flows, report = read(g.write_pcap(tmp_path / "f.pcap", pkts))
    f = flows[f"UDP|{A6}|1000|{B6}|53"][0]
    assert f["n"] == 1 and f["bytes"] == 40 + len(seg) and report.n_merged == len(frags) - 1


def test_first_fragments_cut_by_the_snaplen_still_count(tmp_path):
    # As in nDPI's badpackets.pcap: first fragments of 1500-byte datagrams, captured
    # 300 bytes each. They cannot be joined, but they carry the ports.
    pkts = []
    for i in range(3):
        seg, _ = _datagram(2000)
        first = g.ipv4_fragments(A, B, 17, seg, 1480, ident=i)[0]
        pkts.append(g.Packet(1.0 + i, g.ether(first)[:300], wirelen=14 + len(first)))
    flows, report = read(g.write_pcap(tmp_path / "f.pcap", pkts))
    assert flows[f"UDP|{A}|1000|{B}|53"][0]["n"] == 3
    assert flows[f"UDP|{A}|1000|{B}|53"][0]["bytes"] == 3 * 1500  # the fragments' IP lengths


def test_missing_fragment_keeps_the_first_fragment_as_a_packet(tmp_path):
    # The datagram cannot be joined, but its first fragment carries the ports: it is
    # a packet of its flow (as NFStream counts it), the other fragments are counted.
    seg, body = _datagram()
    frags = g.ipv4_fragments(A, B, 17, seg, 64)
    del frags[2]
    pkts = [(1.0 + 0.01 * i, g.ether(f)) for i, f in enumerate(frags)]
    pkts.append((1.5, g.ether(g.ipv4(B, A, 17, g.udp(53, 1000, b"reply")))))
    flows, report = read(g.write_pcap(tmp_path / "f.pcap", pkts))
    # The datagram is given up when the file ends: its first fragment goes there,
    # after the reply, so B's reply opens the flow (the price of flows that do not
    # depend on where chunks of records are cut, fragments.py).
    (f,) = flows[f"UDP|{B}|53|{A}|1000"]
    assert f["n"] == 2 and f["bytes"] == 20 + 8 + 5 + 20 + 64  # the fragment's IP length
    assert bytes(f["payload"][:61]) == b"reply" + body[:56]  # its data after the UDP header
    assert report.skipped == {"ip_fragment_incomplete": len(frags) - 1}


def test_missing_first_fragment_gives_nothing_back(tmp_path):
    seg, _ = _datagram()
    frags = g.ipv4_fragments(A, B, 17, seg, 64)[1:]
    pkts = [(1.0 + 0.01 * i, g.ether(f)) for i, f in enumerate(frags)]
    flows, report = read(g.write_pcap(tmp_path / "f.pcap", pkts))
    assert flows == {} and report.skipped == {"ip_fragment_incomplete": len(frags)}


def test_ipv6_first_fragment_of_a_lost_datagram_counts(tmp_path):
    seg = g.udp(1000, 53, b"z" * 200, src=A6, dst=B6)
    frags = g.ipv6_fragments(A6, B6, 17, seg, 72)[:-1]  # the last one never comes
    pkts = [(1.0 + 0.1 * i, g.ether(f, 0x86DD)) for i, f in enumerate(frags)]
    flows, report = read(g.write_pcap(tmp_path / "f.pcap", pkts))
    assert [f["n"] for f in flows[f"UDP|{A6}|1000|{B6}|53"]] == [1]
    assert flows[f"UDP|{A6}|1000|{B6}|53"][0]["bytes"] == 40 + 72
    assert report.skipped == {"ip_fragment_incomplete": len(frags) - 1}


def test_fragments_time_out(tmp_path):
    seg, _ = _datagram()
    frags = g.ipv4_fragments(A, B, 17, seg, 64)
    # The last fragment comes 60 s after the first: past the 30 s timeout. The first
    # fragment stays a packet of its flow; the others held, and the late last one
    # (a datagram of its own that never completes), are counted.
    pkts = [(1.0, g.ether(f)) for f in frags[:-1]] + [(61.0, g.ether(frags[-1]))]
    flows, report = read(g.write_pcap(tmp_path / "f.pcap", pkts))
    assert [f["n"] for f in flows[f"UDP|{A}|1000|{B}|53"]] == [1]
    assert report.skipped == {"ip_fragment_incomplete": len(frags) - 1}


def test_first_fragment_given_up_in_a_later_chunk_joins_its_flow(tmp_path):
    # The datagram is given up (timeout) chunks after its first fragment: the fragment
    # still counts once, in its flow, whatever the chunk size.
    seg, _ = _datagram()
    frags = g.ipv4_fragments(A, B, 17, seg, 64)
    pkts = [(1.0, g.ether(frags[0])), (1.5, g.ether(g.ipv4(B, A, 17, g.udp(53, 1000, b"r"))))]
    pkts += [(2.0 + i, g.ether(g.ipv4(C, D, 17, g.udp(7, 9, b"x" * 200)))) for i in range(40)]
    path = g.write_pcap(tmp_path / "f.pcap", pkts)
    for chunk_bytes in (1500, 8 << 20):
        report = ReadReport()
        got = {}
        for b in iter_flows(path, OPTS, report, chunk_bytes=chunk_bytes):
            for i, key in enumerate(b.keys()):
                got.setdefault(key.split("|", 1)[1], []).append(int(b.n_packets[i]))
        key = sorted(k for k in got if "1000" in k)
        assert [got[k] for k in key] == [[2]], chunk_bytes
        assert report.n_flow_packets == 42 and not report.skipped, chunk_bytes


def test_overlapping_fragments_drop_the_datagram(tmp_path):
    seg, _ = _datagram()
    frags = g.ipv4_fragments(A, B, 17, seg, 64)
    evil = g.ipv4(A, B, 17, b"X" * 64, frag=4, mf=True, df=False)  # bytes 32-96: overlaps
    pkts = [(1.0 + 0.01 * i, g.ether(f)) for i, f in enumerate([frags[0], evil, *frags[1:]])]
    flows, report = read(g.write_pcap(tmp_path / "f.pcap", pkts))
    assert flows == {} and report.skipped["ip_fragment_overlap"] == len(frags) + 1


def test_duplicate_fragment_is_ignored(tmp_path):
    seg, _ = _datagram()
    frags = g.ipv4_fragments(A, B, 17, seg, 64)
    pkts = [(1.0 + 0.01 * i, g.ether(f)) for i, f in enumerate([frags[0], *frags])]
    flows, report = read(g.write_pcap(tmp_path / "f.pcap", pkts))
    assert flows[f"UDP|{A}|1000|{B}|53"][0]["n"] == 1
    assert report.skipped["ip_fragment_duplicate"] == 1


def test_fragments_across_chunks(tmp_path):
    seg, body = _datagram(3000)
    frags = g.ipv4_fragments(A, B, 17, seg, 1024)
    pkts = [(1.0 + 0.01 * i, g.ether(f)) for i, f in enumerate(frags)]
    report = ReadReport()
    path = g.write_pcap(tmp_path / "f.pcap", pkts)
    batches = list(iter_flows(path, OPTS, report, chunk_bytes=1500))
    assert [int(b.n_packets[0]) for b in batches] == [1]
    assert bytes(batches[0].views["bytes"][0]) == body[:128] and report.n_merged == 2


def test_fragmented_tunnel_is_reassembled_then_opened(tmp_path):
    inner = g.ipv4(C, D, 17, g.udp(5000, 53, b"i" * 400))
    outer_payload = g.gre(inner)
    frags = g.ipv4_fragments(A, B, 47, outer_payload, 128)
    pkts = [(1.0 + 0.01 * i, g.ether(f)) for i, f in enumerate(frags)]
    flows, report = read(g.write_pcap(tmp_path / "f.pcap", pkts))
    assert flows[f"UDP|{C}|5000|{D}|53"][0]["bytes"] == len(inner)


# --- other link layers -------------------------------------------------------------------


def test_llc_snap_frames(tmp_path):
    pkts = [(1.0, g.llc_snap_frame(g.ipv4(A, B, 17, g.udp(1000, 53, b"q"))))]
    flows, _ = read(g.write_pcap(tmp_path / "l.pcap", pkts))
    assert list(flows) == [f"UDP|{A}|1000|{B}|53"]


@pytest.mark.parametrize("qos", [True, False])
def test_radiotap_80211_data_frames(tmp_path, qos):
    pkts = [(1.0, g.radiotap_wlan(g.ipv4(A, B, 17, g.udp(1000, 53, b"q")), qos=qos))]
    flows, _ = read(g.write_pcap(tmp_path / "w.pcap", pkts, linktype=127))
    assert list(flows) == [f"UDP|{A}|1000|{B}|53"]


def test_nflog_records(tmp_path):
    pkts = [
        (1.0, g.nflog(g.ipv4(A, B, 6, g.tcp(1000, 80)))),
        (2.0, g.nflog(g.ipv6(A6, B6, 17, g.udp(1000, 53, b"q")), family=10)),
    ]
    flows, _ = read(g.write_pcap(tmp_path / "n.pcap", pkts, linktype=239))
    assert set(flows) == {f"TCP|{A}|1000|{B}|80", f"UDP|{A6}|1000|{B6}|53"}


@pytest.mark.parametrize("short", [False, True])
def test_pppoe_with_one_and_two_byte_protocols(tmp_path, short):
    frame = g.ether(g.pppoe(g.ipv4(A, B, 17, g.udp(1000, 53, b"q")), short=short), 0x8864)
    flows, _ = read(g.write_pcap(tmp_path / "p.pcap", [(1.0, frame)]))
    assert list(flows) == [f"UDP|{A}|1000|{B}|53"]


# --- compressed captures, and corrupt ones -----------------------------------------------


def _compress(kind: str, data: bytes) -> bytes:
    import gzip
    import lzma

    from flowsplit.reader.capfile import zstd

    if kind == "gz":
        return gzip.compress(data[:500]) + gzip.compress(data[500:])  # two members
    if kind == "xz":
        return lzma.compress(data)
    return zstd.compress(data)


@pytest.mark.parametrize("kind", ["gz", "zst", "xz"])
def test_compressed_captures_read_like_plain_ones(tmp_path, kind):
    pkts = [
        (1.0 + i, g.ether(g.ipv4(A, B, 17, g.udp(1000 + i % 4, 53, b"q" * i)))) for i in range(300)
    ]
    plain = g.write_pcap(tmp_path / "p.pcap", pkts)
    packed = tmp_path / f"p.pcap.{kind}"
    packed.write_bytes(_compress(kind, plain.read_bytes()))
    want, _ = read(plain)
    report = ReadReport()
    # Small chunks: the decompressed window slides across many reads.
    got = {}
    for b in iter_flows(packed, OPTS, report, chunk_bytes=2048):
        for i, key in enumerate(b.keys()):
            got.setdefault(key, []).append(int(b.n_packets[i]))
    assert got == {k: [f["n"] for f in v] for k, v in want.items()}
    assert report.n_packets == 300


def test_corrupt_gzip_is_a_file_error_naming_it(tmp_path):
    from flowsplit.errors import InputError

    pkts = [(1.0 + i, g.ether(g.ipv4(A, B, 17, g.udp(1000, 53, b"q" * 50)))) for i in range(200)]
    data = bytearray(_compress("gz", g.write_pcap(tmp_path / "p.pcap", pkts).read_bytes()))
    data[len(data) // 2 : len(data) // 2 + 20] = b"\0" * 20
    bad = tmp_path / "bad.pcap.gz"
    bad.write_bytes(bytes(data[: len(data) - 8]))
    with pytest.raises(InputError, match="bad.pcap.gz.*gzip"):
        read(bad)


@pytest.mark.parametrize("kind", ["gz", "zst", "xz"])
def test_a_compressed_capture_cut_short_is_a_file_error_naming_it(tmp_path, kind):
    from flowsplit.errors import InputError

    pkts = [(1.0 + i, g.ether(g.ipv4(A, B, 17, g.udp(1000, 53, b"q" * 50)))) for i in range(200)]
    data = _compress(kind, g.write_pcap(tmp_path / "p.pcap", pkts).read_bytes())
    bad = tmp_path / f"cut.pcap.{kind}"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"cut\.pcap\..*cut short"):
        read(bad)


@pytest.mark.parametrize("kind", ["gz", "zst", "xz"])
def test_a_member_ending_exactly_at_a_read_step_is_followed_by_the_next(
    tmp_path, kind, monkeypatch
):
    # Prepare: two members (gzip members, zstd frames, xz streams); each read step of the
    # compressed file ends exactly where the first member ends.
    from flowsplit.reader import capfile

    pkts = [(1.0 + i, g.ether(g.ipv4(A, B, 17, g.udp(1000, 53, b"q" * i)))) for i in range(300)]
    plain = g.write_pcap(tmp_path / "p.pcap", pkts).read_bytes()
    first = _compress(kind, plain[:500])
    packed = tmp_path / f"p.pcap.{kind}"
    packed.write_bytes(first + _compress(kind, plain[500:]))
    monkeypatch.setattr(capfile, "_READ", len(first))
    # Execute
    got, report = read(packed)
    want, _ = read(tmp_path / "p.pcap")
    # Assert: every packet, as from the plain file.
    assert {k: [f["n"] for f in v] for k, v in got.items()} == {
        k: [f["n"] for f in v] for k, v in want.items()
    }
    assert report.n_packets == 300


def test_prepare_finds_compressed_captures_in_folders(tmp_path):
    from flowsplit.data.sources import discover

    plain = g.write_pcap(tmp_path / "x.pcap", [(1.0, g.ether(g.ipv4(A, B, 17, g.udp(1, 2))))])
    folder = tmp_path / "in" / "dns"
    folder.mkdir(parents=True)
    (folder / "a.pcap.gz").write_bytes(_compress("gz", plain.read_bytes()))
    (folder / "b.zst").write_bytes(_compress("zst", plain.read_bytes()))  # found by content
    (folder / "notes.txt.gz").write_bytes(_compress("gz", b"hello"))
    assert [f.rel for f in discover([tmp_path / "in"])] == ["dns/a.pcap.gz", "dns/b.zst"]


@pytest.mark.parametrize("algo", ["blake3", "sha256"])
def test_digests_computed_while_reading_match_a_second_pass(tmp_path, algo):
    import hashlib

    import blake3

    from flowsplit.reader.flows import iter_flows_many

    pkts = [(1.0 + i, g.ether(g.ipv4(A, B, 17, g.udp(1000, 53, b"q" * i)))) for i in range(400)]
    plain = g.write_pcap(tmp_path / "p.pcap", pkts)
    packed = tmp_path / "p.pcap.gz"
    packed.write_bytes(_compress("gz", plain.read_bytes()))
    cut = tmp_path / "cut.pcap"  # ends inside a record: the reader stops early
    cut.write_bytes(plain.read_bytes()[:-7])
    report = ReadReport()
    paths = [plain, packed, cut]
    for _ in iter_flows_many(paths, OPTS, report, chunk_bytes=4096, digests=algo):
        pass
    second = {"blake3": blake3.blake3, "sha256": hashlib.sha256}[algo]
    for p in paths:
        assert report.digests[str(p)] == second(p.read_bytes()).hexdigest(), p.name


def test_reassembler_memory_is_bounded():
    import numpy as np

    from flowsplit.reader.fragments import Fragment, Reassembler

    report = ReadReport()
    r = Reassembler(report, max_datagrams=2, max_bytes=1000)
    r.begin_chunk(np.zeros(12, dtype=np.int32), np.arange(12.0) / 100)
    hdr = g.ipv4(A, B, 17, b"", mf=True, df=False)  # a first fragment's IPv4 header
    for i in range(3):  # three datagrams whose rest never comes: first fragment + one more
        r.add(Fragment((0, 0, b"a", i, 17), 0, i / 100, 0, True, b"x" * 100, hdr, 17, 2 * i, i))
        r.add(Fragment((0, 0, b"a", i, 17), 0, i / 100, 200, True, b"x" * 8, b"", 17, 2 * i + 1))
    assert len(r) == 2 and report.skipped == {"ip_fragment_memory": 1}
    r.add(Fragment((0, 0, b"a", 9, 17), 0, 0.09, 0, True, b"y" * 900, hdr, 17, 9, 9))
    assert len(r) == 1 and report.skipped["ip_fragment_memory"] == 3  # bytes bound too
    r.end_file(0)
    assert len(r) == 0 and report.skipped["ip_fragment_incomplete"] == 0
    # Each datagram given up hands its first fragment back, to go after the record
    # where it was given up: the fragment that needed the room, or the file's last.
    back = r.take_given_up()
    assert [(x.index, x.pos) for x in back] == [(0, 4), (1, 9), (2, 9), (9, 11)]
    packet = back[0].packet  # unfragmented now: MF cleared, its own length
    assert packet[20:] == b"x" * 100 and packet[6:8] == bytes(2) and packet[2:4] == bytes([0, 120])
    assert not r.take_given_up()


def test_datagram_over_the_memory_bound_is_given_up_even_when_complete():
    import numpy as np

    from flowsplit.reader.fragments import Fragment, Reassembler

    report = ReadReport()
    r = Reassembler(report, max_bytes=100)
    r.begin_chunk(np.zeros(2, dtype=np.int32), np.array([1.0, 1.1]))
    hdr = g.ipv4(A, B, 17, b"", mf=True, df=False)
    assert r.add(Fragment((0, 0, b"a", 1, 17), 0, 1.0, 0, True, b"x" * 56, hdr, 17, 0, 0)) is None
    assert r.add(Fragment((0, 0, b"a", 1, 17), 0, 1.1, 56, False, b"y" * 56, b"", 17, 1, 1)) is None
    assert len(r) == 0 and report.skipped == {"ip_fragment_memory": 1}
    assert [(x.index, x.pos) for x in r.take_given_up()] == [(0, 1)]


def test_datagram_times_out_at_the_record_that_passes_its_deadline():
    import numpy as np

    from flowsplit.reader.fragments import Fragment, Reassembler

    report = ReadReport()
    r = Reassembler(report, timeout=30.0)
    hdr = g.ipv4(A, B, 17, b"", mf=True, df=False)
    key = (0, 0, b"a", 1, 17)
    # Chunk 1: the first fragment at t=100 (record 1); the clock went back before it.
    r.begin_chunk(np.zeros(3, dtype=np.int32), np.array([500.0, 100.0, 120.0]))
    r.add(Fragment(key, 0, 100.0, 0, True, b"x" * 56, hdr, 17, 1, 1))
    assert r.expire(0) == 0
    assert len(r) == 1  # record 0 (t=500) came before it: it does not count
    # Chunk 2: t=125 is within 30 s, t=131 is past: given up there (record 1), before
    # its second fragment comes (record 2), which starts a datagram of its own.
    r.begin_chunk(np.zeros(4, dtype=np.int32), np.array([125.0, 131.0, 132.0, 133.0]))
    r.add(Fragment(key, 0, 132.0, 56, True, b"y" * 56, b"", 17, 2, 5))
    assert [(x.index, x.pos) for x in r.take_given_up()] == [(1, 1)]
    assert len(r) == 1 and report.skipped == {}
    assert r.expire(0) == 0 and r.end_file(0) == 1
    assert report.skipped == {"ip_fragment_incomplete": 1} and not r.take_given_up()


@pytest.mark.parametrize("back", [False, True])
@pytest.mark.parametrize("between", [2, 70])
def test_a_datagram_times_out_at_the_first_record_past_its_deadline(between, back):
    import numpy as np

    from flowsplit.reader.fragments import Fragment, Reassembler

    # Records exactly at the deadline (first fragment + 30 s) do not time it out; the
    # first after it does. With 2 of them the records are stepped through one by one,
    # with 70 (over 64) found on the running maximum, or, when a record before the
    # datagram is already past the deadline (the clock went back), by a scan: the same
    # record every way.
    head = [500.0] if back else []
    ts = [*head, 100.0, 110.0, *[130.0] * between, 130.5, 131.0, 140.0]
    h = len(head)
    report = ReadReport()
    r = Reassembler(report, timeout=30.0)
    hdr = g.ipv4(A, B, 17, b"", mf=True, df=False)
    key = (0, 0, b"a", 1, 17)
    r.begin_chunk(np.zeros(len(ts), dtype=np.int32), np.array(ts))
    r.add(Fragment(key, 0, 100.0, 0, True, b"x" * 56, hdr, 17, h, h))
    r.add(Fragment(key, 0, 110.0, 56, True, b"y" * 56, b"", 17, h + 1, h + 1))  # in time
    assert len(r) == 1 and not r.take_given_up()
    last = len(ts) - 1
    r.add(Fragment(key, 0, ts[last], 112, False, b"z" * 8, b"", 17, last, last))  # too late
    past = h + 2 + between  # the 130.5 s record
    assert [(x.index, x.pos) for x in r.take_given_up()] == [(h, past)]
    assert report.skipped == {"ip_fragment_incomplete": 1}  # the one held; the last waits


def _fragment_soup(rng: random.Random) -> list[tuple[float, bytes]]:
    """Flows with fragmented datagrams (some never complete; a fragment now and then
    inside IP-in-IP, the rest plain) among whole packets, the clock now and then
    jumping ahead past the timeouts or back."""
    hosts = [f"10.1.0.{i}" for i in range(1, 7)]
    pkts, t, ident = [], 2000.0, 1
    for _ in range(160):
        t += rng.choice([0.01, 0.5, 3.0, 3.0, 12.0, 40.0, -60.0])
        src, dst = rng.sample(hosts, 2)
        sport = rng.choice([1000, 1001])
        if rng.random() < 0.4:
            ident += 1
            seg = g.udp(sport, 53, bytes([ident % 251]) * rng.choice([100, 300]), src=src, dst=dst)
            frags = g.ipv4_fragments(src, dst, 17, seg, 64, ident=ident)
            if rng.random() < 0.4:
                frags.pop(rng.randrange(len(frags)))  # lost on the way
            rng.shuffle(frags)
            for f in frags:  # the rest of the datagram comes later, maybe much later
                if rng.random() < 0.25:
                    f = g.ipv4("172.16.0.1", "172.16.0.2", 4, f)  # through a tunnel
                pkts.append((t, g.ether(f)))
                t += rng.choice([0.01, 0.01, 2.0, 9.0, 35.0])
        else:
            pkts.append((t, g.ether(g.ipv4(src, dst, 17, g.udp(sport, 53, b"w" * 40)))))
    return pkts


@pytest.mark.parametrize("seed", range(6))
def test_flows_do_not_depend_on_the_chunk_size_when_fragments_time_out(tmp_path, seed):
    # Whether a datagram times out, and where its first fragment then lands among its
    # flow's packets, is decided by the capture alone: the same flows, packet for
    # packet, whatever the staging buffer's size, and whether a capture is read alone
    # or with another that shares its chunks.
    paths = [
        str(g.write_pcap(tmp_path / f"f{i}.pcap", _fragment_soup(random.Random(2 * seed + i))))
        for i in range(2)
    ]
    opts = dataclasses.replace(OPTS, idle_timeout=10.0, fragment_timeout=20.0)

    def flows(chunk_bytes, files=paths):
        report, out = ReadReport(), []
        for b in iter_flows_many(files, opts, report, chunk_bytes=chunk_bytes):
            for i, key in enumerate(b.keys()):
                seq = b.views["seq"][i].tobytes()
                src = files[int(b.source[i])]
                out.append((src, key, int(b.n_packets[i]), int(b.n_bytes[i]), seq))
        used = report.n_flow_packets + report.n_merged + sum(report.skipped.values())
        assert used == report.n_packets  # every record a packet, merged, or skipped
        return sorted(out), dict(report.skipped), report.n_merged

    alone = [flows(8 << 20, [p]) for p in paths]
    whole = (
        sorted(alone[0][0] + alone[1][0]),
        dict(Counter(alone[0][1]) + Counter(alone[1][1])),
        alone[0][2] + alone[1][2],
    )
    assert whole[1].get("ip_fragment_incomplete") and whole[2]  # both paths are exercised
    for chunk_bytes in (1500, 2600, 4096, 9000, 8 << 20):
        assert flows(chunk_bytes) == whole, chunk_bytes


def test_nested_tunnels_of_lost_fragments_are_all_counted(tmp_path):
    # IP-in-IP inside IP-in-IP inside ..., each level the first fragment of a datagram
    # whose rest never comes: each given up, opened, and its inner fragment given up
    # in turn, down to the UDP packet; every record accounted for (``read``).
    def first_fragment(src, dst, proto, payload, ident):
        payload += bytes(-len(payload) % 8 + 8)  # a second fragment is owed
        return g.ipv4(src, dst, proto, payload[:-8], mf=True, df=False, ident=ident)

    pkt = first_fragment(C, D, 17, g.udp(5000, 53, b"u" * 64, src=C, dst=D), 50)
    for level in range(3):
        pkt = first_fragment(f"10.{level + 1}.0.1", f"10.{level + 1}.0.2", 4, pkt, 60 + level)
    whole = g.ether(g.ipv4(A, B, 17, g.udp(7, 7, b"x")))
    flows, report = read(g.write_pcap(tmp_path / "n.pcap", [(1.0, g.ether(pkt)), (2.0, whole)]))
    assert [f["n"] for f in flows[f"UDP|{C}|5000|{D}|53"]] == [1]
    assert report.n_flow_packets == 2 and not report.skipped


def _datagram_mix(rng: random.Random) -> list[tuple[float, bytes]]:
    """Fragmented datagrams the reassembler and the at-once join both see: in order,
    reversed, shuffled, one identification reused back to back, a fragment lost,
    duplicated or overlapping, IPv6, inside IP-in-IP, late past the timeout, and the
    clock going back; among whole packets."""
    pkts, t = [], 5000.0
    for k in range(120):
        t += rng.choice([0.01, 0.2, 1.0, 25.0, -40.0])
        v6 = rng.random() < 0.25
        src, dst = (A6, B6) if v6 else (A, B)
        ident = 7 if rng.random() < 0.2 else k + 1  # 7: reused, some back to back
        seg = g.udp(
            1000 + k % 5, 53, bytes([k % 251]) * rng.choice([60, 200, 410]), src=src, dst=dst
        )
        if v6:
            frags = g.ipv6_fragments(src, dst, 17, seg, 64, ident=ident)
        else:
            frags = g.ipv4_fragments(src, dst, 17, seg, rng.choice([16, 64]), ident=ident)
        how = rng.choice(["order"] * 3 + ["reverse", "shuffle", "lose", "dup", "overlap"])
        if how == "reverse":
            frags.reverse()
        elif how == "shuffle":
            rng.shuffle(frags)
        elif how == "lose" and len(frags) > 1:
            frags.pop(rng.randrange(len(frags)))
        elif how == "dup":
            frags.insert(rng.randrange(len(frags) + 1), rng.choice(frags))
        elif how == "overlap" and not v6 and len(frags) > 1:
            frags[1] = g.ipv4(src, dst, 17, seg[8:72], frag=1, mf=True, df=False, ident=ident)
        for f in frags:
            if rng.random() < 0.1:
                f = g.ipv4(C, D, 4, f) if not v6 else f  # through a tunnel
            pkts.append((t, g.ether(f)))
            t += 35.0 if rng.random() < 0.03 else rng.choice([0.001, 0.05])
        if rng.random() < 0.3:
            pkts.append((t, g.ether(g.ipv4(A, B, 6, g.tcp(999, 80, g.ACK, b"p")))))
    return pkts


@pytest.fixture
def joined(monkeypatch):
    """How many datagrams each chunk's ``join_whole`` joined (it is wrapped to count)."""
    from flowsplit.reader.fragments import Reassembler

    counts: list[int] = []
    real = Reassembler.join_whole

    def counting(self, *args):
        out, left = real(self, *args)
        counts.append(sum(len(v) for v in out.values()))
        return out, left

    monkeypatch.setattr(Reassembler, "join_whole", counting)
    return counts


@pytest.mark.parametrize("room", [None, (500, 8192), (16 << 20, 2)])
@pytest.mark.parametrize("seed", range(5))
def test_datagrams_joined_at_once_equal_the_reassemblers(tmp_path, monkeypatch, joined, seed, room):
    # Datagrams whole within a chunk are joined without the reassembler
    # (Reassembler.join_whole); everything it lets through must come out exactly as the
    # reassembler alone makes it, whatever the chunk size, also when its memory is
    # small enough (bytes or datagrams) that it gives datagrams up for room.
    from flowsplit.reader import fragments, packets

    if room is not None:
        limits = fragments.Reassembler.__init__.__kwdefaults__
        monkeypatch.setitem(limits, "max_bytes", room[0])
        monkeypatch.setitem(limits, "max_datagrams", room[1])

    path = g.write_pcap(tmp_path / "m.pcap", _datagram_mix(random.Random(seed)))
    opts = dataclasses.replace(OPTS, fragment_timeout=30.0, idle_timeout=20.0)

    def flows(join, chunk_bytes):
        monkeypatch.setattr(packets, "_JOIN_WHOLE", join)
        report, out = ReadReport(), []
        for b in iter_flows_many([path], opts, report, chunk_bytes=chunk_bytes):
            for i, key in enumerate(b.keys()):
                seq = b.views["seq"][i].tobytes() + b.views["bytes"][i].tobytes()
                out.append((key, int(b.n_packets[i]), int(b.n_bytes[i]), seq))
        return out, dict(report.skipped), report.n_merged, report.n_flow_packets

    for chunk_bytes in (3000, 20000, 8 << 20):
        alone = flows(False, chunk_bytes)
        assert flows(True, chunk_bytes) == alone, chunk_bytes
    skipped = alone[1]
    assert skipped.get("ip_fragment_overlap") and skipped.get("ip_fragment_incomplete")
    assert bool(skipped.get("ip_fragment_memory")) == (room is not None)
    if room is None:
        assert sum(joined) > 30  # many took the join, many did not (the counts above)


def test_a_datagram_pending_from_an_earlier_chunk_is_not_joined_past(tmp_path, monkeypatch, joined):
    # A datagram still pending (a fragment lost) when a whole one of the same key comes
    # in the next chunk: the reassembler puts the new fragments into the pending one
    # (they overlap it: both dropped), so the join must leave them to it.
    from flowsplit.reader import packets

    seg1 = g.udp(1000, 53, b"a" * 200, src=A, dst=B)
    seg2 = g.udp(1001, 53, b"b" * 200, src=A, dst=B)
    first = g.ipv4_fragments(A, B, 17, seg1, 64, ident=7)
    del first[1]  # lost: the datagram stays pending
    filler = [g.ether(g.ipv4(C, D, 17, g.udp(9, 9, b"f" * 1200))) for _ in range(3)]
    frames = [
        *map(g.ether, first),
        *filler,
        *map(g.ether, g.ipv4_fragments(A, B, 17, seg2, 64, ident=7)),
    ]
    path = g.write_pcap(tmp_path / "p.pcap", [(1.0 + i * 0.01, f) for i, f in enumerate(frames)])

    def flows(join):
        monkeypatch.setattr(packets, "_JOIN_WHOLE", join)
        report = ReadReport()
        batches = iter_flows_many([path], OPTS, report, chunk_bytes=4000)
        return sorted(k for b in batches for k in b.keys()), dict(report.skipped)  # noqa: SIM118

    alone = flows(False)
    assert flows(True) == alone
    assert alone[1]["ip_fragment_overlap"] == 3 + 4 and f"UDP|{A}|1001|{B}|53" not in alone[0]
    joined.clear()
    monkeypatch.setattr(packets, "_JOIN_WHOLE", True)
    # with the pending datagram timed out first, the second is joined at once
    late = [(1.0, f) for f in map(g.ether, first)] + [
        (100.0 + i, f) for i, f in enumerate(frames[len(first) :])
    ]
    report = ReadReport()
    path2 = g.write_pcap(tmp_path / "q.pcap", late)
    batches = iter_flows_many([path2], OPTS, report, chunk_bytes=4000)
    keys = {k for b in batches for k in b.keys()}  # noqa: SIM118
    assert f"UDP|{A}|1001|{B}|53" in keys and sum(joined) == 1
    # one identification for datagrams back to back: each joined in turn
    joined.clear()
    again = [g.ether(f) for s in (seg1, seg2) for f in g.ipv4_fragments(A, B, 17, s, 64, ident=7)]
    path3 = g.write_pcap(tmp_path / "r.pcap", [(1.0 + i * 0.01, f) for i, f in enumerate(again)])
    report = ReadReport()
    n = sum(len(b) for b in iter_flows_many([path3], OPTS, report, chunk_bytes=4000))
    assert n == 2 and sum(joined) == 2 and report.n_merged == 6
    # longer than any IP datagram can be: the reassembler drops it, so the join must too
    joined.clear()
    huge = [g.ether(f) for f in g.ipv4_fragments(A, B, 17, b"x" * 66000, 1480, ident=8)]
    path4 = g.write_pcap(tmp_path / "h.pcap", [(1.0 + i * 0.01, f) for i, f in enumerate(huge)])
    report = ReadReport()
    assert not list(iter_flows_many([path4], OPTS, report))
    assert report.skipped == {"ip_fragment_overlap": len(huge)} and sum(joined) == 0
