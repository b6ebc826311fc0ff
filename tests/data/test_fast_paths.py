"""The reader's NumPy fast path gives exactly what the plain path gives.

The pcapng walk takes runs of enhanced packet blocks with NumPy (``_EpbRuns``); it
is switched off here by its size threshold and the results compared (and with the
compiled walk of ``flowsplit.reader._kernel``, when built), on captures
with fake block headers in packet bytes, other blocks between the packets, two
sections of either byte order, and random damage.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from flowsplit.reader import pcap, staging
from flowsplit.reader.flows import FlowOptions, iter_flows
from flowsplit.reader.pcap import ReadReport
from flowsplit.reader.staging import iter_record_chunks
from tests.data import _pcapgen as g

A, B = "10.0.0.1", "10.0.0.2"
_KERNEL = pcap._kernel  # the compiled walks, or None when not built


def _fake_epb(endian: str) -> bytes:
    """Bytes that read like a whole 40-byte EPB (header and trailer) inside a payload."""
    return struct.pack(endian + "II", 6, 40) + b"\0" * 28 + struct.pack(endian + "I", 40)


def _capture(rng: np.random.Generator) -> bytes:
    out = []
    for section, endian in enumerate(("<", ">")):
        out += [g.shb(endian), g.idb(1, endian=endian), g.idb(101, endian=endian)]
        for i in range(400):
            pad = b"\0" * int(rng.integers(0, 4))
            payload = (
                pad + _fake_epb(endian) * int(rng.integers(0, 3)) + bytes(int(rng.integers(0, 200)))
            )
            frame = g.ipv4(A, B, 17, g.udp(1000 + section, 53, payload))
            iface = int(rng.integers(0, 2))
            data = g.ether(frame) if iface == 0 else frame
            p = g.Packet(10.0 + section * 100 + i * 0.01, data, iface=iface)
            out.append(g.epb(p, endian=endian))
            if i % 97 == 50:
                out.append(g.custom_block(endian))
            if i % 131 == 70:
                out.append(g.spb(g.Packet(0.0, g.ether(frame)), endian=endian))
            if i == 200:
                out.append(g.idb(1, endian=endian))
    return b"".join(out)


def _records(path, monkeypatch, fast: bool, chunk_bytes: int, compiled: bool = False):
    # Without the compiled walk (flowsplit.reader._kernel) unless asked for: the NumPy
    # runs are the fallback's fast path.
    monkeypatch.setattr(pcap, "_kernel", _KERNEL if compiled else None)
    monkeypatch.setattr(pcap._EpbRuns, "_MIN_BYTES", 0 if fast else 1 << 40)
    report = ReadReport()
    parts = []
    for ch in iter_record_chunks([path], report, chunk_bytes=chunk_bytes, on_error="skip"):
        r = ch.records
        # Offsets are into a reused buffer: compare the record bytes themselves.
        frames = [
            bytes(ch.buffer.mv[o : o + c])
            for o, c in zip(r.data_off.tolist(), r.caplen.tolist(), strict=True)
        ]
        parts.append(
            (
                r.caplen.tolist(),
                r.wirelen.tolist(),
                r.ts.tolist(),
                r.linktype.tolist(),
                r.index.tolist(),
                frames,
            )
        )
    return parts, dict(report.skipped), report.n_packets, report.file_errors


@pytest.mark.parametrize("chunk_bytes", [4096, 9000, 8 << 20])
@pytest.mark.parametrize("seed", range(6))
def test_epb_runs_match_the_python_walk(tmp_path, monkeypatch, seed, chunk_bytes):
    rng = np.random.default_rng(seed)
    data = bytearray(_capture(rng))
    if seed:  # damage: overwritten bytes, some at block boundaries' length words
        for at in rng.integers(0, len(data) - 4, size=int(rng.integers(1, 6))):
            data[at : at + 4] = rng.integers(0, 256, size=4, dtype=np.uint8).tobytes()
    path = tmp_path / "c.pcapng"
    path.write_bytes(bytes(data))
    slow = _records(path, monkeypatch, False, chunk_bytes)
    taken = []
    extend = pcap._EpbRuns.extend

    def spy(self, off, endian, out):
        n = len(out)
        new = extend(self, off, endian, out)
        taken.append(len(out) - n)
        return new

    monkeypatch.setattr(pcap._EpbRuns, "extend", spy)
    fast = _records(path, monkeypatch, True, chunk_bytes)
    assert fast == slow
    if _KERNEL is not None:  # and the compiled walk
        assert _records(path, monkeypatch, False, chunk_bytes, compiled=True) == slow
    assert sum(taken) > 0  # the NumPy runs did take blocks
    if not seed:
        assert slow[2] == 2 * (400 + 3) and not slow[1]  # every packet read, none skipped
        assert sum(taken) > 700  # nearly all of them in runs


def test_flows_match_with_and_without_fast_paths(tmp_path, monkeypatch):
    path = tmp_path / "c.pcapng"
    path.write_bytes(_capture(np.random.default_rng(99)))
    got = []
    for fast in (False, True, "compiled"):
        monkeypatch.setattr(pcap, "_kernel", _KERNEL if fast == "compiled" else None)
        monkeypatch.setattr(pcap._EpbRuns, "_MIN_BYTES", 0 if fast else 1 << 40)
        opts = FlowOptions(seq_len=4, n_bytes=32, n_pkts=2, pkt_len=32)
        rows = []
        for b in iter_flows(path, opts, ReadReport()):
            rows.append(
                [
                    b.proto.tolist(),
                    b.ip_a.tolist(),
                    b.port_a.tolist(),
                    b.first_ts.tolist(),
                    b.n_packets.tolist(),
                    b.n_bytes.tolist(),
                    b.first_index.tolist(),
                    {k: v.tobytes() for k, v in b.views.items()},
                    None if b.stats is None else b.stats.to_numpy().tobytes(),
                ]
            )
        got.append(rows)
    assert got[0] == got[1] == got[2] and got[0]


@pytest.mark.parametrize("chunk_bytes", [2048, 8 << 20])
def test_reassembled_datagrams_in_place_or_in_a_copy_give_the_same_flows(
    tmp_path, monkeypatch, chunk_bytes
):
    # Reassembled datagrams go into the staging buffer's spare room, or into a copy
    # of the buffer when they do not fit (room 0 here): the flows must not differ.
    pkts, t = [], 1.0
    for k in range(60):
        seg = g.udp(2000 + k % 7, 53, bytes(range(256)) * (1 + k % 3))
        for frag in g.ipv4_fragments(A, B, 17, seg, 64 + 8 * (k % 4), ident=k):
            pkts.append((t, g.ether(frag)))
            t += 0.01
        pkts.append((t, g.ether(g.ipv4(A, B, 6, g.tcp(3000 + k % 5, 80, g.ACK, b"p" * k)))))
    path = g.write_pcap(tmp_path / "frags.pcap", pkts)
    opts = FlowOptions(n_bytes=600, n_pkts=4, pkt_len=80)
    got = []
    for room in (staging.EXTRA_ROOM, 0):
        monkeypatch.setattr(staging, "EXTRA_ROOM", room)
        monkeypatch.setattr(staging, "_POOL", [])  # new buffers, with this room
        report = ReadReport()
        rows = [
            (b.keys(), b.n_packets.tolist(), {k: v.tobytes() for k, v in b.views.items()})
            for b in iter_flows(path, opts, report, chunk_bytes=chunk_bytes)
        ]
        got.append((rows, report.n_merged, dict(report.skipped)))
    assert got[0] == got[1]
    assert got[0][1] > 100  # fragments were joined
