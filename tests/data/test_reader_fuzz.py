"""Random damage to captures: the reader yields flows or raises InputError, nothing else."""

from __future__ import annotations

import gzip
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowsplit.errors import InputError
from flowsplit.reader.flows import FlowOptions, ReadReport, iter_flows, iter_flows_many
from tests.conftest import NDPI_DIR
from tests.data import _pcapgen as g

OPTS = FlowOptions(seq_len=4, n_bytes=32, n_pkts=2, pkt_len=32)
A, B = "10.0.0.1", "10.0.0.2"


def _seeds() -> list[bytes]:
    conv = g.tcp_conversation(A, B, 4000, 80) + [
        g.Packet(
            2.0,
            g.ether(g.ipv6("::1", "::2", 17, g.udp(1, 2, b"x" * 20), ext=[(0, b"\0" * 6)]), 0x86DD),
        ),
        g.Packet(
            3.0,
            g.ether(g.ipv4(A, B, 17, g.udp(5, 6, b"y"), options=b"\1" * 4), vlans=[(0x8100, 3)]),
        ),
    ]
    out = []
    for writer in (g.write_pcap, g.write_pcapng):
        path = _TMP / f"seed{len(out)}"
        out.append(writer(path, conv).read_bytes())
    ng = g.shb(">") + g.idb(1, endian=">", tsresol=9) + g.idb(101, endian=">")
    ng += b"".join(g.epb(p, endian=">", units=10**9) for p in conv[:4])
    ng += g.spb(conv[4], endian=">") + g.custom_block(">")
    out.append(ng)
    # Tunnels, fragments and the other link layers: their headers get damaged too.
    inner = g.ipv4("192.168.0.1", "192.168.0.2", 17, g.udp(7, 8, b"z" * 30))
    seg = g.udp(1000, 53, b"f" * 300, src=A, dst=B)
    frags = g.ipv4_fragments(A, B, 17, seg, 64) + g.ipv6_fragments("::1", "::2", 17, seg, 96)
    tun = [
        g.ether(g.ipv4(A, B, 47, g.gre(g.erspan2(g.ether(inner)), 0x88BE, seq=1))),
        g.ether(g.ipv4(A, B, 17, g.udp(9, 4789, g.vxlan(g.ether(inner))))),
        g.ether(g.ipv4(A, B, 17, g.udp(2152, 2152, g.gtp_u(inner, ext=True)))),
        g.ether(g.ipv4(A, B, 17, g.udp(9, 6081, g.geneve(inner, 0x0800, b"\0" * 4)))),
        g.ether(g.pppoe(inner, short=True), 0x8864),
        g.llc_snap_frame(inner),
        *(g.ether(f, 0x86DD if f[0] >> 4 == 6 else 0x0800) for f in frags),
    ]
    for name, frames, lt in (
        ("tun", tun, 1),
        ("rt", [g.radiotap_wlan(inner)] * 3, 127),
        ("nflog", [g.nflog(inner)] * 3, 239),
    ):
        pkts = [(1.0 + i, f) for i, f in enumerate(frames)]
        out.append(g.write_pcap(_TMP / f"{name}.pcap", pkts, linktype=lt).read_bytes())
    out.append(gzip.compress(out[0]))
    real = sorted((NDPI_DIR / "pcap").glob("*.pcap*")) if (NDPI_DIR / "pcap").is_dir() else []
    for p in [p for p in real if p.stat().st_size < 6000][:4]:
        out.append(p.read_bytes())
    return out


_TMP = None
SEEDS: list[bytes] = []


@pytest.fixture(scope="module", autouse=True)
def seeds(tmp_path_factory):
    global _TMP, SEEDS
    _TMP = tmp_path_factory.mktemp("seeds")
    SEEDS = _seeds()


INTERESTING = [0, 1, 4, 11, 12, 13, 16, 28, 32, 0x7FFF, 0xFFFF, 0x40000, 0x7FFFFFFF, 0xFFFFFFFF]


@st.composite
def damaged(draw) -> bytes:
    data = bytearray(SEEDS[draw(st.integers(0, len(SEEDS) - 1))])
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["cut", "flip", "length", "byte", "insert"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if kind == "cut":
            data = data[:at]
        elif kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte":
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:  # a 2- or 4-byte length field somewhere, in either byte order
            value = draw(st.sampled_from(INTERESTING))
            fmt = draw(st.sampled_from(["<I", ">I", "<H", ">H"]))
            value &= 0xFFFF if fmt[1] == "H" else 0xFFFFFFFF
            packed = struct.pack(fmt, value)
            data[at : at + len(packed)] = packed
    return bytes(data)


def _read_all(path, **kw) -> None:
    report = ReadReport()
    for batch in iter_flows(path, OPTS, report, chunk_bytes=kw.pop("chunk_bytes"), **kw):
        assert len(batch.views["seq"]) == len(batch)
    used = report.n_flow_packets + report.n_merged + sum(report.skipped.values())
    assert report.n_packets == used  # every record accounted for, once


@settings(
    max_examples=300,
    deadline=10_000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=damaged(), strict=st.booleans(), chunk=st.sampled_from([200, 4096, 1 << 20]))
def test_damaged_captures_yield_or_raise_input_error(tmp_path, data, strict, chunk):
    path = tmp_path / "damaged.pcap"
    path.write_bytes(data)
    try:
        _read_all(path, strict=strict, chunk_bytes=chunk)
    except InputError as exc:
        assert str(path) in str(exc)


def test_damaged_captures_in_one_stream(tmp_path):
    # Many damaged files read together: the bad ones are reported, the rest still read.
    paths = []
    for i, seed in enumerate(SEEDS):
        for cut in (3, len(seed) // 2, len(seed) - 5):
            p = tmp_path / f"f{i}-{cut}.pcap"
            p.write_bytes(seed[:cut])
            paths.append(p)
    report = ReadReport()
    n = sum(len(b) for b in iter_flows_many(paths, OPTS, report, on_error="skip", chunk_bytes=512))
    # A file is opened, or not; one opened may still fail later (a cut gzip stream).
    errors = [path for path, _ in report.file_errors]
    assert n > 0 and len(set(errors)) == len(errors)
    assert len(paths) <= report.n_files + len(errors) <= 2 * len(paths)
    assert report.n_packets == report.n_flow_packets + report.n_merged + sum(
        report.skipped.values()
    )
