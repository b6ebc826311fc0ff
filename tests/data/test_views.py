"""The four views of a small flow, against values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flowsplit.reader import views as V
from flowsplit.reader.flows import SEQ_FEATURES, FlowOptions, ReadReport, iter_flows
from tests.data import _pcapgen as g

A, B = "10.0.0.1", "10.0.0.2"
A6, B6 = "2001:db8::1", "2001:db8::2"


def conversation():
    """A -> B SYN, B -> A SYN/ACK, A -> B 'hello', B -> A 'world!' (IP packets)."""
    steps = [
        (10.00, A, B, 4000, 80, g.SYN, b"", 1000),
        (10.01, B, A, 80, 4000, g.SYN | g.ACK, b"", 2000),
        (10.03, A, B, 4000, 80, g.PSH | g.ACK, b"hello", 1001),
        (10.07, B, A, 80, 4000, g.PSH | g.ACK, b"world!", 2001),
    ]
    return [
        (t, g.ipv4(s, d, 6, g.tcp(sp, dp, f, data, window=w, src=s, dst=d), ident=7))
        for t, s, d, sp, dp, f, data, w in steps
    ]


def one_flow(tmp_path, packets, options, linktype=101):
    path = g.write_pcap(tmp_path / "f.pcap", packets, linktype=linktype)
    (batch,) = list(iter_flows(path, options, ReadReport()))
    assert len(batch) == 1
    return batch


def test_seq_rows_by_hand(tmp_path):
    opts = FlowOptions(seq_len=6)
    b = one_flow(tmp_path, conversation(), opts)
    seq = b.views["seq"][0]  # (T, F)
    assert seq.shape == (6, len(SEQ_FEATURES)) and seq.dtype == np.float32
    us = [0, 10_000, 20_000, 40_000]  # inter-arrival times in microseconds
    expected = [
        # size, log_iat, fin syn rst psh ack urg, payload, mask
        [40, 0, 0, 1, 0, 0, 0, 0, 0, 1],
        [-40, math.log1p(us[1]), 0, 1, 0, 0, 1, 0, 0, 1],
        [45, math.log1p(us[2]), 0, 0, 0, 1, 1, 0, 5, 1],
        [-46, math.log1p(us[3]), 0, 0, 0, 1, 1, 0, 6, 1],
    ]
    np.testing.assert_allclose(seq[:4], expected, rtol=1e-5, atol=1e-4)
    assert not seq[4:].any()  # padding rows, mask 0


def test_bytes_concatenates_payloads_in_packet_order(tmp_path):
    b = one_flow(tmp_path, conversation(), FlowOptions(n_bytes=16))
    assert bytes(b.views["bytes"][0]) == b"helloworld!" + b"\0" * 5
    short = one_flow(tmp_path, conversation(), FlowOptions(n_bytes=7))
    assert bytes(short.views["bytes"][0]) == b"hellowo"


def _masked(ip: bytes, width: int, zero: list[tuple[int, int]]) -> np.ndarray:
    row = bytearray(ip[:width].ljust(width, b"\0"))
    for lo, hi in zero:
        row[lo:hi] = bytes(hi - lo)
    return np.frombuffer(bytes(row), dtype=np.uint8)


@pytest.mark.parametrize(
    "mask_ip,mask_port,mask_checksum",
    [
        (True, True, True),
        (False, True, True),
        (True, False, True),
        (True, True, False),
        (False, False, False),
    ],
)
def test_pkt_bytes_masks_are_switches(tmp_path, mask_ip, mask_port, mask_checksum):
    opts = FlowOptions(
        n_pkts=5,
        pkt_len=48,
        pkt_layout="ip",
        mask_ip=mask_ip,
        mask_port=mask_port,
        mask_checksum=mask_checksum,
    )
    pkts = conversation()
    pb = one_flow(tmp_path, pkts, opts).views["pkt_bytes"][0]  # (P, B)
    zero = []
    if mask_ip:
        zero.append((12, 20))
    if mask_checksum:
        zero += [(10, 12), (36, 38)]  # IPv4 header checksum, TCP checksum
    if mask_port:
        zero.append((20, 24))
    for i, (_, ip) in enumerate(pkts):
        np.testing.assert_array_equal(pb[i], _masked(ip, 48, zero), err_msg=f"packet {i}")
    assert not pb[4].any()
    assert pb[0, 40:].sum() == 0  # a 40-byte packet: nothing after it


@pytest.fixture(params=["compiled", "numpy"])
def view_copies(request, monkeypatch):
    """Both ways of copying the payload into pkt_bytes rows: the extension's and NumPy's."""
    if request.param == "compiled" and V._kernel is None:
        pytest.skip("the compiled extension is not built")
    if request.param == "numpy":
        monkeypatch.setattr(V, "_kernel", None)
    return request.param


def test_pkt_bytes_payload_layout_by_hand(tmp_path, view_copies):
    """Default layout: direction, IP length, protocol, flags, header length, window, payload."""
    opts = FlowOptions(n_pkts=5, pkt_len=12)
    pb = one_flow(tmp_path, conversation(), opts).views["pkt_bytes"][0]
    want = [
        [1, 0, 40, 6, g.SYN, 20, 1000 >> 8, 1000 & 255, 0, 0, 0, 0],
        [2, 0, 40, 6, g.SYN | g.ACK, 20, 2000 >> 8, 2000 & 255, 0, 0, 0, 0],
        [1, 0, 45, 6, g.PSH | g.ACK, 20, 1001 >> 8, 1001 & 255, *b"hell"],
        [2, 0, 46, 6, g.PSH | g.ACK, 20, 2001 >> 8, 2001 & 255, *b"worl"],
        [0] * 12,  # no fifth packet: padding
    ]
    np.testing.assert_array_equal(pb, np.array(want, dtype=np.uint8))
    short = one_flow(tmp_path, conversation(), FlowOptions(n_pkts=5, pkt_len=5))
    np.testing.assert_array_equal(short.views["pkt_bytes"][0], np.array(want, np.uint8)[:, :5])


def test_pkt_bytes_payload_starts_at_one_column_for_ipv6_and_ip_options(tmp_path, view_copies):
    opts = FlowOptions(n_pkts=1, pkt_len=40)
    ip6 = g.ipv6(A6, B6, 17, g.udp(5353, 53, b"q" * 30 + b"end", src=A6, dst=B6))
    ip4 = g.ipv4(A, B, 17, g.udp(5353, 53, b"q" * 30 + b"end", src=A, dst=B), options=b"\x01" * 8)
    rows = [one_flow(tmp_path, [(1.0, ip)], opts).views["pkt_bytes"][0, 0] for ip in (ip6, ip4)]
    for row, size in zip(rows, (40 + 8 + 33, 28 + 8 + 33), strict=True):
        head = [1, size >> 8, size & 255, 17, 0, 8, 0, 0]
        np.testing.assert_array_equal(row, np.array([*head, *b"q" * 30, *b"en"], dtype=np.uint8))
    # a longer row: zero past the payload's end
    opts = FlowOptions(n_pkts=1, pkt_len=64)
    row = one_flow(tmp_path, [(1.0, ip6)], opts).views["pkt_bytes"][0, 0]
    assert bytes(row[8:41]) == b"q" * 30 + b"end" and not row[41:].any()


def test_pkt_bytes_of_ipv6_udp_and_ipv4_options(tmp_path):
    opts = FlowOptions(n_pkts=2, pkt_len=64, pkt_layout="ip")
    ip6 = g.ipv6(A6, B6, 17, g.udp(5353, 53, b"q" * 30, src=A6, dst=B6))
    pb = one_flow(tmp_path, [(1.0, ip6)], opts).views["pkt_bytes"][0]
    np.testing.assert_array_equal(pb[0], _masked(ip6, 64, [(8, 40), (40, 44), (46, 48)]))
    ip4 = g.ipv4(A, B, 17, g.udp(5353, 53, b"q" * 30, src=A, dst=B), options=b"\x01" * 8)
    pb = one_flow(tmp_path, [(1.0, ip4)], opts).views["pkt_bytes"][0]
    np.testing.assert_array_equal(pb[0], _masked(ip4, 64, [(12, 20), (10, 12), (28, 32), (34, 36)]))


def test_stats_by_hand(tmp_path):
    b = one_flow(tmp_path, conversation(), FlowOptions(mask_port=False))
    s = b.stats.iloc[0]
    assert all(b.stats.dtypes == np.float32)
    expected = {
        "duration": 0.07,
        "pkts": 4,
        "pkts_fwd": 2,
        "pkts_bwd": 2,
        "bytes": 171,
        "bytes_fwd": 85,
        "bytes_bwd": 86,
        "payload_bytes": 11,
        "payload_bytes_fwd": 5,
        "payload_bytes_bwd": 6,
        "payload_pkts_fwd": 1,
        "payload_pkts_bwd": 1,
        "size_min": 40,
        "size_mean": 42.75,
        "size_std": math.sqrt(30.75 / 4),
        "size_max": 46,
        "size_fwd_min": 40,
        "size_fwd_mean": 42.5,
        "size_fwd_std": 2.5,
        "size_fwd_max": 45,
        "size_bwd_min": 40,
        "size_bwd_mean": 43,
        "size_bwd_std": 3,
        "size_bwd_max": 46,
        "iat_min": 0.01,
        "iat_mean": 0.07 / 3,
        "iat_max": 0.04,
        "iat_std": math.sqrt((0.01**2 + 0.02**2 + 0.04**2) / 3 - (0.07 / 3) ** 2),
        "iat_fwd_min": 0.03,
        "iat_fwd_mean": 0.03,
        "iat_fwd_std": 0,
        "iat_fwd_max": 0.03,
        "iat_bwd_min": 0.06,
        "iat_bwd_mean": 0.06,
        "iat_bwd_std": 0,
        "iat_bwd_max": 0.06,
        "fin_count": 0,
        "syn_count": 2,
        "rst_count": 0,
        "psh_count": 2,
        "ack_count": 3,
        "urg_count": 0,
        "ece_count": 0,
        "cwr_count": 0,
        "pkts_per_s": 4 / 0.07,
        "bytes_per_s": 171 / 0.07,
        "down_up_ratio": 1,
        "bytes_down_up_ratio": 86 / 85,
        "init_win_fwd": 1000,
        "init_win_bwd": 2000,
        "is_tcp": 1,
        "port_server": 80,
        "port_client": 4000,
    }
    assert set(expected) == set(b.stats.columns)
    for col, value in expected.items():
        assert s[col] == pytest.approx(value, rel=1e-4, abs=1e-5), col


def test_stats_of_a_single_udp_packet_have_no_nans(tmp_path):
    b = one_flow(tmp_path, [(5.0, g.ipv4(A, B, 17, g.udp(1, 2, b"abc")))], FlowOptions())
    s = b.stats.iloc[0]
    assert not b.stats.isna().any().any() and "port_server" not in b.stats.columns
    assert s["pkts"] == 1 and s["duration"] == 0 and s["pkts_per_s"] == 0
    assert s["iat_max"] == 0 and s["init_win_fwd"] == 0 and s["is_tcp"] == 0


def test_only_requested_views_are_built(tmp_path):
    b = one_flow(tmp_path, conversation(), FlowOptions(views=("bytes",)))
    assert set(b.views) == {"bytes"} and b.stats is None


def test_metadata_is_unmasked(tmp_path):
    b = one_flow(tmp_path, conversation(), FlowOptions())
    assert (b.ip_a[0], b.port_a[0], b.ip_b[0], b.port_b[0]) == (A, 4000, B, 80)
    assert b.proto[0] == 6 and b.n_packets[0] == 4 and b.n_bytes[0] == 171
    assert b.first_ts[0] == pytest.approx(10.0) and b.last_ts[0] == pytest.approx(10.07)


def test_wide_pkt_bytes_rows(tmp_path):
    opts = FlowOptions(n_pkts=2, pkt_len=300, pkt_layout="ip", mask_checksum=False)
    pkts = conversation()
    pb = one_flow(tmp_path, pkts, opts).views["pkt_bytes"][0]
    np.testing.assert_array_equal(pb[1], _masked(pkts[1][1], 300, [(12, 20), (20, 24)]))


def test_an_unknown_pkt_layout_is_refused_by_name():
    from flowsplit.errors import ConfigError

    with pytest.raises(ConfigError, match="pkt_layout must be one of payload, ip, got 'tcp'"):
        FlowOptions(pkt_layout="tcp")
