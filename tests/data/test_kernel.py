"""The compiled reader kernel gives what the NumPy reader gives, record for record.

``flowsplit.reader._kernel`` is built by ``pip install``; the reader runs without it
(pure NumPy). Each test here decodes the same records both ways and requires the
same packets, fields, dtypes and skip counts: on captures of every link layer and
tunnel the tests can write, on randomly damaged copies of them (the kernel must
then decline or agree), and on the shared nDPI corpus.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from flowsplit.data import sources as SR
from flowsplit.reader import assemble as AS
from flowsplit.reader import packets as PK
from flowsplit.reader import pcap as PC
from flowsplit.reader import protocols as P
from flowsplit.reader import staging as ST
from flowsplit.reader import views as V
from flowsplit.reader.flows import FlowOptions, iter_flows_many
from flowsplit.reader.pcap import ReadReport
from flowsplit.reader.staging import iter_record_chunks
from tests.conftest import NDPI_DIR, needs_ndpi
from tests.data import _pcapgen as g

try:
    from flowsplit.reader import _kernel
except ImportError:  # reported by test_kernel_is_built
    _kernel = None

needs_kernel = pytest.mark.skipif(_kernel is None, reason="flowsplit.reader._kernel is not built")
A, B, A6, B6 = "10.0.0.1", "10.0.0.2", "2001:db8::1", "2001:db8::2"
# One interface per link type of the capture written below.
LINKTYPES = (1, 113, 276, 101, 0, 108, 228, 229, 9, 192)


def test_kernel_is_built():
    # `pip install .` (and so `make test` and CI) compiles it; the fallback is for
    # a source tree run without installing.
    assert _kernel is not None, "flowsplit.reader._kernel missing: run `pip install -e .`"


def test_every_kernel_user_takes_it_through_the_one_door():
    # reader.kernel is the one import of the compiled module; FLOWSPLIT_NO_KERNEL=1
    # closes it, so the NumPy fallbacks run everywhere (a fresh interpreter: it is read
    # once, at import).
    from flowsplit.reader import kernel as K

    assert all(m._kernel is K.compiled for m in USERS)
    probe = (
        "from flowsplit.reader import kernel, packets, views; "
        "print(kernel.available(), packets._kernel is None, views._kernel is None)"
    )
    for env, want in (("1", "False True True"), ("0", f"{_kernel is not None} False False")):
        out = subprocess.run(
            [sys.executable, "-c", probe],
            env={**os.environ, "FLOWSPLIT_NO_KERNEL": env},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        if env == "0" and _kernel is None:
            want = "False True True"
        assert " ".join(out) == want, (env, out)


@needs_kernel
def test_kernel_constants_are_the_protocol_modules():
    for name, value in _kernel.CONSTANTS.items():
        want = {"LT_RAW_IP": P.LT_RAW_IP}.get(name, getattr(P, name))
        assert value == want, name


# The modules that use the kernel when it is built.
USERS = (PK, PC, ST, V, AS, SR)


@contextlib.contextmanager
def kernel(on: bool):
    """The reader with the kernel (as installed) or without it (pure NumPy/Python)."""
    saved = [m._kernel for m in USERS]
    for m in USERS:
        m._kernel = _kernel if on else None
    try:
        yield
    finally:
        for m, k in zip(USERS, saved, strict=True):
            m._kernel = k


def decode_both(paths, chunk_bytes=1 << 14, **options):
    """Every chunk's decoded packets with the kernel and without, both reports, and
    how many packets the kernel decoded."""
    out, taken = [], []

    def counted(sb, recs, vlan_key):
        common, rest = decode_common(sb, recs, vlan_key)
        taken.append(0 if common is None else len(common))
        return common, rest

    decode_common = PK._decode_common
    for on in (True, False):
        PK._decode_common = counted
        with kernel(on):
            report = ReadReport()
            decoder = PK.PacketDecoder(report, **options)
            chunks = []
            for chunk in iter_record_chunks(
                paths, report, on_error="skip", chunk_bytes=chunk_bytes
            ):
                pk, _ = decoder.decode(chunk)
                chunks.append({f.name: getattr(pk, f.name).copy() for f in dataclasses.fields(pk)})
        PK._decode_common = decode_common
        out.append((chunks, report))
    return out, sum(taken)


def assert_same(paths, **options):
    ((fast, rf), (slow, rs)), taken = decode_both(paths, **options)
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow, strict=True):
        for name in a:
            assert a[name].dtype == b[name].dtype, name
            assert np.array_equal(a[name], b[name]), name
    assert rf.skipped == rs.skipped
    assert (rf.n_packets, rf.n_merged) == (rs.n_packets, rs.n_merged)
    return sum(len(c["src"]) for c in fast), taken


def frames() -> list[bytes]:
    """IP packets of many kinds: TCP, UDP, IPv6, tunnels, fragments, extension headers."""
    syn = g.tcp(1000, 80, g.SYN, seq=77, src=A, dst=B)
    packets = [
        g.ipv4(A, B, 6, syn),
        g.ipv4(A, B, 6, g.tcp(1000, 80, g.ACK, b"x" * 40, options=b"\1\1\1\1")),
        g.ipv4(A, B, 17, g.udp(53, 5353, b"q" * 20)),
        g.ipv4(A, B, 17, g.udp(4000, 4789, g.vxlan(g.ether(g.ipv4(A, B, 17, g.udp(1, 2)))))),
        g.ipv4(A, B, 17, g.udp(2152, 2152, g.gtp_u(g.ipv4(A, B, 6, g.tcp(5, 6))))),
        g.ipv4(A, B, 47, g.gre(g.ipv4(A, B, 17, g.udp(7, 8)))),
        g.ipv4(A, B, 4, g.ipv4(A, B, 6, g.tcp(9, 10))),
        g.ipv6(A6, B6, 6, g.tcp(443, 5000, g.SYN | g.ACK, b"y" * 10)),
        g.ipv6(A6, B6, 17, g.udp(123, 123, b"t" * 48)),
        g.ipv6(A6, B6, 0, bytes([17, 0, 1, 4, 0, 0, 0, 0]) + g.udp(1, 2)),  # hop-by-hop
        g.ipv4(A, B, 1, b"\x08\0" + b"\0" * 30),  # ICMP
        *g.ipv4_fragments(A, B, 17, g.udp(11, 12, b"f" * 100), 48),
    ]
    return packets


def link(lt: int, ip: bytes, rng: random.Random) -> bytes:
    """``ip`` framed for link type ``lt`` (Ethernet maybe with VLAN tags)."""
    et = 0x86DD if ip[0] >> 4 == 6 else 0x0800
    if lt == 1:
        tags = rng.choice([(), ((0x8100, 5),), ((0x88A8, 7), (0x8100, 9)), ((0x8100, 1),) * 5])
        return g.ether(ip, et, vlans=tags)
    if lt == 113:
        return g.sll(ip, et)
    if lt == 276:
        return g.sll2(ip, et)
    if lt in (0, 108):
        family = 2 if et == 0x0800 else rng.choice([24, 28, 30, 10])
        return g.null(ip, family, rng.choice("<>"))
    if lt == 9:
        return g.ppp(ip, 0x0021 if et == 0x0800 else 0x0057)
    if lt == 192:
        return g.ppi(g.ether(ip, et))
    return ip  # raw IP, and the IPv4/IPv6 link types


def damaged(data: bytes, rng: random.Random) -> tuple[bytes, int | None]:
    """A copy with a few bytes changed or cut, and maybe a different wire length."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        b[rng.randrange(min(len(b), 80))] = rng.randrange(256)
    if rng.random() < 0.3:
        b = b[: rng.randrange(len(b) + 1)]
    wirelen = rng.choice([None, None, len(b) + rng.randint(0, 50), max(len(b) - 10, 0)])
    return bytes(b), wirelen


def capture(path, rng: random.Random, *, damage: bool):
    packets = []
    for k in range(600):
        iface = rng.randrange(len(LINKTYPES))
        ip = rng.choice(frames())
        if rng.random() < 0.2 and ip[0] >> 4 == 4:  # a length of 0: segmentation offload
            ip = ip[:2] + b"\0\0" + ip[4:]
        data, wirelen = link(LINKTYPES[iface], ip, rng), None
        if damage:
            data, wirelen = damaged(data, rng)
        packets.append(g.Packet(1000.0 + k * 0.01, data, wirelen, iface))
    return g.write_pcapng(path, packets, linktypes=LINKTYPES)


@needs_kernel
@pytest.mark.parametrize("damage", [False, True])
@pytest.mark.parametrize("options", [{}, {"tunnels": "outer", "vlan_key": False}])
def test_kernel_matches_numpy_on_written_captures(tmp_path, damage, options):
    rng = random.Random(13 + damage)
    paths = [capture(tmp_path / f"c{i}.pcapng", rng, damage=damage) for i in range(3)]
    n, taken = assert_same(paths, **options)
    assert n > 500 and taken > 200  # damaged or not, many are TCP/UDP; many the kernel's


@needs_kernel
@pytest.mark.parametrize("options", [{}, {"vlan_key": False}])
def test_packets_inside_tunnels_and_reassembled_datagrams_match_numpy(tmp_path, options):
    # No record here is the common case: every one is a fragment or a tunnel. What the
    # kernel decodes is what comes out of them (joined datagrams, inner packets), VLAN
    # tags met outside and inside alike; the packets and counts equal the NumPy path's.
    rng = random.Random(17)
    pkts, t = [], 1000.0
    for k in range(80):
        outer = rng.choice([(), ((0x8100, 5),), ((0x88A8, 7), (0x8100, 9))])
        seg = g.udp(2000 + k % 7, 53, bytes([k]) * rng.choice([100, 300]), src=A, dst=B)
        frags = g.ipv4_fragments(A, B, 17, seg, 64, ident=k + 1)
        if rng.random() < 0.2:
            frags.pop()  # never completes: its first fragment comes back on its own
        for f in frags:
            if rng.random() < 0.3:
                f = g.ipv4("172.16.0.1", "172.16.0.2", 4, f)  # IP-in-IP
            pkts.append((t, g.ether(f, vlans=outer)))
            t += rng.choice([0.01, 0.01, 40.0])
        inner = g.ether(
            g.ipv4(A, B, 6, g.tcp(1000 + k, 80, g.ACK, b"z" * 10)), vlans=((0x8100, 3),)
        )
        pkts.append((t, g.ether(g.ipv4(A, B, 17, g.udp(4000, 4789, g.vxlan(inner))), vlans=outer)))
    path = g.write_pcap(tmp_path / "inner.pcap", pkts)
    n, taken = assert_same([path], **options)
    assert n > 100 and taken > 90  # every VXLAN inner packet and joined datagrams too


@needs_kernel
def test_packets_of_one_place_come_out_in_record_order(tmp_path):
    # Packets made at one place of the chunk (first fragments given back after the
    # same record) keep the order the NumPy path gives them, even when the kernel
    # could take some: here the earlier is the NumPy path's (a hop-by-hop header),
    # the later the kernel's, both of one flow.
    seg = g.udp(1000, 53, b"d" * 40, src=A6, dst=B6)
    hop = g.ipv6(A6, B6, 17, seg, ext=[(0, b"\x01\x04\0\0\0\0")])
    path = g.write_pcap(
        tmp_path / "raw.pcap", [(1.0, hop), (2.0, g.ipv6(A6, B6, 17, seg))], linktype=101
    )
    chunk = next(iter_record_chunks([path], ReadReport()))
    decoder = PK.PacketDecoder(ReadReport())
    got = []
    for pos in (np.array([7, 7]), np.array([7, 8])):
        args = (chunk, chunk.buffer, chunk.records, pos, np.zeros(2, dtype=np.int64), 1, [])
        inner = PK.Packets.concat(decoder._decode_parts(*args))
        numpy_path = decoder._decode(*args)
        assert inner.pay_len.tolist() == numpy_path.pay_len.tolist() == [40, 40]
        assert inner.index.tolist() == numpy_path.index.tolist() == [0, 1]
        got.append(inner)
    assert got[1].pos.tolist() == [7, 8]


@needs_kernel
def test_kernel_matches_numpy_on_classic_pcap(tmp_path):
    rng = random.Random(5)
    frames_ = [link(1, rng.choice(frames()), rng) for _ in range(300)]
    path = g.write_pcap(tmp_path / "e.pcap", [(i * 0.5, f) for i, f in enumerate(frames_)])
    n, taken = assert_same([path])
    assert n > 200 and taken > 50


@needs_kernel
def test_kernel_takes_the_common_case(tmp_path):
    # Ordinary TCP/UDP over Ethernet is decoded by the kernel alone.
    pkts = [(i * 0.1, g.ether(g.ipv4(A, B, 6, g.tcp(1000, 80, g.ACK, b"z")))) for i in range(50)]
    path = g.write_pcap(tmp_path / "plain.pcap", pkts)
    chunk = next(iter_record_chunks([path], ReadReport()))
    common, rest = PK._decode_common(chunk.buffer, chunk.records, True)
    assert len(common) == 50 and len(rest) == 0


@needs_kernel
@needs_ndpi
@pytest.mark.shared_data
def test_kernel_matches_numpy_on_the_ndpi_corpus():
    paths = sorted(p for p in (NDPI_DIR / "pcap").iterdir() if p.is_file())
    n, taken = assert_same(paths, chunk_bytes=8 << 20)
    assert n > 100_000 and taken > 0.9 * n
    (fast, rf), (slow, rs) = records_both(paths, chunk_bytes=1 << 20)
    assert rf == rs and len(fast) == len(slow)
    for a, b in zip(fast, slow, strict=True):
        assert all(np.array_equal(a[name], b[name]) for name in a)


def records_both(paths, chunk_bytes=1 << 13):
    """Every chunk's records read with the kernel's walks and with Python's, and reports."""
    out = []
    for on in (True, False):
        with kernel(on):
            report, chunks = ReadReport(), []
            for chunk in iter_record_chunks(
                paths, report, on_error="skip", chunk_bytes=chunk_bytes
            ):
                r = chunk.records
                chunks.append({f.name: getattr(r, f.name).copy() for f in dataclasses.fields(r)})
        out.append((chunks, report))
    return out


def corrupted(path, rng: random.Random, n: int = 12) -> None:
    """Overwrite ``n`` random 4-byte words of a capture after its header with junk."""
    data = bytearray(path.read_bytes())
    for _ in range(n):
        at = rng.randrange(64, len(data) - 4)
        data[at : at + 4] = rng.choice([b"\xff\xff\xff\x7f", b"\0\0\0\0", rng.randbytes(4)])
    path.write_bytes(bytes(data))


@needs_kernel
@pytest.mark.parametrize("fmt", ["pcap", "pcap-be", "pcapng", "pcapng-be"])
@pytest.mark.parametrize("corrupt", [False, True])
def test_kernel_walks_match_python(tmp_path, fmt, corrupt):
    rng = random.Random(f"{fmt}-{corrupt}")  # a str seed: the same in every run
    paths = []
    for i in range(4):
        pkts = [g.Packet(5.0 + k, link(1, rng.choice(frames()), rng)) for k in range(150)]
        endian = ">" if fmt.endswith("-be") else "<"
        path = tmp_path / f"{i}.{fmt}"
        if fmt.startswith("pcapng"):
            g.write_pcapng(path, pkts, endian=endian)
        else:
            g.write_pcap(path, pkts, endian=endian)
        if corrupt:
            corrupted(path, rng)
        paths.append(path)
    (fast, rf), (slow, rs) = records_both(paths)
    assert len(fast) == len(slow) > 1
    for a, b in zip(fast, slow, strict=True):
        for name in a:
            assert a[name].dtype == b[name].dtype and np.array_equal(a[name], b[name]), name
    assert rf == rs  # counts, skip reasons and file errors alike
    assert rf.n_packets > 200  # junk may end a file early


def flows_both(paths, options, chunk_bytes=8 << 20):
    """Every flow batch's arrays, views and stats, with the kernel and without."""
    out = []
    for on in (True, False):
        with kernel(on):
            rows = []
            batches = iter_flows_many(
                paths, options, ReadReport(), on_error="skip", chunk_bytes=chunk_bytes
            )
            for b in batches:
                arrays = {k: v for k, v in vars(b).items() if isinstance(v, np.ndarray)}
                rows.append({**arrays, **b.views, "stats": b.stats.to_numpy()})
        out.append(rows)
    return out


@needs_kernel
@pytest.mark.parametrize("damage", [False, True])
@pytest.mark.parametrize("pkt_len", [80, 300])  # the NumPy path masks these two differently
# Small chunks: flows continue from chunk to chunk with their carried times and views.
@pytest.mark.parametrize("chunk_bytes", [8 << 20, 3000])
def test_flows_and_views_match_with_and_without_kernel(tmp_path, damage, pkt_len, chunk_bytes):
    rng = random.Random(7 + damage)
    paths = [capture(tmp_path / f"c{i}.pcapng", rng, damage=damage) for i in range(2)]
    options = FlowOptions(n_bytes=300, n_pkts=4, pkt_len=pkt_len)
    fast, slow = flows_both(paths, options, chunk_bytes)
    assert len(fast) == len(slow) > 0
    for a, b in zip(fast, slow, strict=True):
        for name in a:
            assert a[name].dtype == b[name].dtype and np.array_equal(a[name], b[name]), name


@needs_kernel
@pytest.mark.parametrize("width", [5, 8, 64])
def test_payload_rows_match_numpy(width):
    # Both directions, IP lengths past 65535, header lengths past 255, windows past 16
    # bits, packets with no payload; rows written in any order, some left as padding.
    rng = np.random.default_rng(6)
    sb = ST.StagingBuffer(1 << 12)
    sb.array[: 1 << 12] = rng.integers(0, 256, 1 << 12, dtype=np.uint8)
    n = 300
    args = (
        rng.permutation(400)[:n],  # dst rows
        sb,
        rng.random(n) < 0.5,  # fwd
        rng.integers(0, 70000, n),  # ip_len
        rng.integers(0, 256, n).astype(np.uint8),  # proto
        rng.integers(0, 256, n).astype(np.uint8),  # flags
        rng.integers(0, 300, n),  # thl
        rng.integers(0, 1 << 20, n),  # window
        rng.integers(8, 3000, n),  # pay_off
        rng.integers(0, 100, n) * (rng.random(n) < 0.8),  # pay_cap
    )
    both = []
    for on in (True, False):
        with kernel(on):
            out = np.full((400, width), 7, dtype=np.uint8)
            V.payload_rows(out, *args)
            both.append(out)
    np.testing.assert_array_equal(both[0], both[1])
    assert (both[0][args[0], 0] == np.where(args[2], 1, 2)).all()


@needs_kernel
def test_range_max_matches_the_sparse_table():
    rng = np.random.default_rng(3)
    for trial in range(200):
        n = int(rng.integers(2, 300))
        x = [rng.normal(size=n), np.round(rng.normal(size=n), 1), np.sort(rng.normal(size=n))][
            trial % 3
        ]
        lo = rng.integers(0, n - 1, int(rng.integers(1, 200)))
        hi = lo + 1 + rng.integers(0, n, len(lo)) % (n - 1 - lo)
        got = AS.range_max(x, lo, hi)
        assert np.array_equal(got, AS.RangeMax(x)(lo, hi))
        assert got.tolist() == [x[a + 1 : b + 1].max() for a, b in zip(lo, hi, strict=True)]


@needs_kernel
def test_row_hashes_match_numpy():
    rng = np.random.default_rng(4)
    arrays = [
        rng.integers(0, 256, size=(50, 7, 3), dtype=np.uint8),
        rng.normal(size=(50, 5)).astype(np.float32),
        rng.integers(0, 2**63, size=(50, 2), dtype=np.uint64),
    ]
    both = []
    for on in (True, False):
        with kernel(on):
            both.append(SR.row_hashes(arrays))
    assert both[0].tolist() == both[1].tolist()
    assert len(set(both[0].tolist())) == 50


@needs_kernel
def test_accumulate_matches_numpy_bit_for_bit():
    # Long flows (over 128 packets) take NumPy's pairwise sums past their first block;
    # timestamps out of order and carried previous times give negative and NaN gaps.
    assert _kernel.ACC_COLS == V.ACC_COLS
    rng = np.random.default_rng(5)
    for trial in range(120):
        nf = int(rng.integers(1, 30))
        lens = rng.integers(1, (3, 20, 300, 2000)[trial % 4], nf)
        n, fs = int(lens.sum()), np.cumsum(lens) - lens
        fid = np.repeat(np.arange(nf), lens)
        ts = np.cumsum(rng.exponential(0.01, n)) + 1e9
        if trial % 5 == 0:
            ts = ts[rng.permutation(n)]
        prev_ts = np.concatenate([[np.nan], ts[:-1]])
        prev_ts[fs] = np.nan
        if trial % 3 == 0:
            prev_ts[fs[::2]] = ts[fs[::2]] - rng.random(len(fs[::2]))
        fp = V.FlowPackets(
            order=np.arange(n),
            fs=fs,
            fid=fid,
            fwd=rng.random(n) < 0.6,
            rank=np.zeros(n, dtype=np.int64),
            ts=ts,
            prev_ts=prev_ts,
            prev_dir=np.where(rng.random(n) < 0.2, np.nan, ts - rng.exponential(0.02, n)),
            size=rng.integers(20, 1500, n).astype(np.float64),
            pay=(rng.integers(0, 3, n) * rng.integers(0, 1400, n)).astype(np.float64),
            pay_cap=np.zeros(n, dtype=np.int64),
            flags=rng.integers(0, 256, n).astype(np.uint8),
            window=rng.integers(0, 65536, n),
            tcp=(rng.random(nf) < 0.7)[fid],
        )
        both = []
        for on in (True, False):
            with kernel(on):
                both.append(V.accumulate(fp))
        assert both[0].tobytes() == both[1].tobytes(), trial


@needs_kernel
@pytest.mark.parametrize("vlan_key", [True, False])
def test_key_hashes_match_numpy(vlan_key):
    rng = np.random.default_rng(6)
    n = 5000
    u64 = [rng.integers(0, 2**64, n, dtype=np.uint64) for _ in range(4)]
    pk = PK.Packets(
        src=rng.integers(0, 600, n).astype(np.int32),
        index=np.arange(n),
        ts=np.zeros(n),
        ver=np.full(n, 4, dtype=np.uint8),
        proto=rng.choice([6, 17], n).astype(np.uint8),
        sa_hi=u64[0],
        sa_lo=u64[1],
        da_hi=u64[2],
        da_lo=u64[3],
        sport=rng.integers(0, 65536, n),
        dport=rng.integers(0, 65536, n),
        **{k: np.zeros(n, dtype=np.int64) for k in ("window", "syn_seq", "ip_len", "pay_len")},
        **{k: np.zeros(n, dtype=np.int64) for k in ("ip_off", "ip_cap", "l4_rel", "pay_off")},
        flags=np.zeros(n, dtype=np.uint8),
        pay_cap=np.zeros(n, dtype=np.int64),
        vlan=rng.integers(0, 2**36, n),
        pos=np.arange(n),
    )
    asm = AS.FlowAssembler(FlowOptions(vlan_key=vlan_key))
    both = []
    for on in (True, False):
        with kernel(on):
            both.append(asm._key_hashes(pk))
    for a, b in zip(*both, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)


@needs_kernel
@pytest.mark.parametrize("mask_port", [True, False])
def test_stats_rows_match_numpy(mask_port):
    # Accumulators of real-looking flows, plus flows with no packet in a direction
    # (infinite minima, NaN windows), zero durations and one-packet flows.
    rng = np.random.default_rng(7)
    nf = 400
    acc = V.empty_acc(nf)
    for name in ("n_fwd", "n_bwd", "iat_n", "iatf_n", "iatb_n", *V._FLAG_NAMES):
        acc[:, V.ACC[name]] = rng.integers(0, 50, nf) * (rng.random(nf) < 0.8)
    for name in ("bytes_fwd", "bytes_bwd", "pay_fwd", "pay_bwd", "paypk_fwd", "paypk_bwd"):
        acc[:, V.ACC[name]] = rng.integers(0, 10**6, nf)
    for name in ("sq_fwd", "sq_bwd", "iat_sum", "iat_sq", "iatf_sum", "iatf_sq", "iatb_sum"):
        acc[:, V.ACC[name]] = rng.exponential(3.0, nf) * 1e3
    acc[:, V.ACC["iatb_sq"]] = rng.exponential(1e-6, nf)  # std from a negative difference
    for name in ("min_fwd", "min_bwd", "iat_min", "iatf_min", "iatb_min"):
        acc[:, V.ACC[name]] = np.where(rng.random(nf) < 0.2, np.inf, rng.random(nf) * 100)
    for name in ("max_fwd", "max_bwd", "iat_max", "iatf_max", "iatb_max"):
        acc[:, V.ACC[name]] = np.where(rng.random(nf) < 0.2, -np.inf, rng.random(nf) * 1e4)
    first = 1e9 + rng.random(nf) * 100
    acc[:, V.ACC["last_ts"]] = first + np.where(rng.random(nf) < 0.3, 0.0, rng.random(nf) * 50)
    for name in ("win_fwd", "win_bwd"):
        acc[:, V.ACC[name]] = np.where(rng.random(nf) < 0.3, np.nan, rng.integers(0, 65536, nf))
    ports = [rng.integers(0, 65536, nf) for _ in range(2)]
    is_tcp = rng.random(nf) < 0.5
    both = []
    for on in (True, False):
        with kernel(on):
            both.append(V.stats_frame(acc, first, is_tcp, *ports, mask_port))
    a, b = both
    assert list(a.columns) == list(b.columns) == list(V.stats_columns(mask_port))
    assert a.to_numpy().dtype == np.float32
    assert a.to_numpy().tobytes() == b.to_numpy().tobytes()


@needs_kernel
def test_the_per_flow_passes_refuse_a_flow_without_packets():
    # Flow 1 of fs = [0, 2, 2] over 2 packets is empty: the loops that index a flow's
    # packets without bounds checks must refuse it before they start.
    n, fs = 2, np.array([0, 2, 2], dtype=np.int64)
    u8, f64 = np.zeros(n, np.uint8), np.zeros(n)
    with pytest.raises(IndexError, match="flow 1 has no packets"):
        _kernel.previous_times(
            fs, u8, f64, *(np.zeros(3) for _ in range(3)), f64.copy(), f64.copy()
        )
    acc = np.zeros((3, len(V.ACC_COLS)))
    with pytest.raises(IndexError, match="flow 1 has no packets"):
        _kernel.accumulate(
            fs,
            u8,
            f64,
            f64,
            f64,
            f64,
            f64,
            u8,
            np.zeros(n, np.int64),
            u8,
            f64.copy(),
            f64.copy(),
            acc,
        )


@needs_kernel
def test_the_kernels_name_the_array_of_the_wrong_length():
    # Each kernel indexes its arrays without bounds checks, so one array a row short
    # must be refused up front, by name, before any row is read or written.
    n = 5
    u8, i64, f64 = np.zeros(n, np.uint8), np.zeros(n, np.int64), np.zeros(n)
    u64 = np.zeros(n, np.uint64)
    h, low = np.zeros(n, np.uint64), np.zeros(n - 1, np.uint8)
    with pytest.raises(ValueError, match=r"^key_hashes: low has length 4, not 5$"):
        _kernel.key_hashes(
            u64, u64, i64, u64, u64, i64, i64.astype(np.int32), u8, i64, True, h, low
        )
    assert not h.any()
    fs = np.array([0, 3], dtype=np.int64)
    carried = [np.zeros(2), np.zeros(2), np.zeros(1)]
    with pytest.raises(ValueError, match=r"^previous_times: carried_bwd has length 1, not 2$"):
        _kernel.previous_times(fs, u8, f64, *carried, f64.copy(), f64.copy())
    out = np.zeros((n, 9), np.float32)
    with pytest.raises(ValueError, match=r"^seq_rows: out has 9 columns, not 10$"):
        _kernel.seq_rows(i64, u8, f64, f64, u8, f64, out)
