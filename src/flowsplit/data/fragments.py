"""IPv4 and IPv6 fragment reassembly, with bounded memory and timeouts.

Fragments are rare next to whole packets, so they leave the vectorised path: each
one is handed to :class:`Reassembler` with the bytes it carries (copied out of the
staging buffer, so a datagram may span chunks). A datagram is keyed by (file,
VLAN ids, IP version, source, destination, identification, protocol), as RFC 791
and RFC 8200 define it.

Decisions worth knowing:

- A completed datagram becomes one packet at the place and time of the fragment
  that completed it (what a receiving host sees); the other fragments are counted
  in ``ReadReport.n_merged``, not as skipped.
- Overlapping fragments discard the whole datagram (RFC 5722; Linux does the same
  for IPv4): ``ip_fragment_overlap``. An exact duplicate is ignored
  (``ip_fragment_duplicate``).
- A datagram still incomplete ``timeout`` seconds (capture time) after its first
  fragment, or when its file ends, is given up: ``ip_fragment_incomplete``, one per
  fragment held.
- At most ``max_bytes`` of fragment data and ``max_datagrams`` datagrams are held;
  beyond that the oldest datagram is given up (``ip_fragment_memory``).
- A datagram given up on (incomplete or for memory) whose first fragment was seen
  hands that fragment back (:meth:`Reassembler.take_given_up`) as a packet of its own,
  at the fragment's place and time: it carries the ports, so its flow keeps the packet
  (as NFStream, which never reassembles, counts it); only the other fragments held are
  counted as skipped. A datagram dropped for overlapping fragments gives nothing back.
  When the fragment came in an earlier chunk of records than the one in which its
  datagram is given up, it goes before that chunk's packets: its flow counts it all
  the same, but its place among the flow's packets can differ from a read in one chunk.
- A fragment not captured whole (cut by the snapshot length) cannot be joined:
  ``ip_fragment_truncated``.
- The reassembled IPv6 datagram keeps the fixed header of its first fragment and
  drops the extension headers before the fragment header (they carry no flow
  information); an IPv4 one keeps the first fragment's header and options.
"""

from __future__ import annotations

import bisect
import struct
from collections import OrderedDict
from dataclasses import dataclass, field

from flowsplit.data import protocols as P

IPV4_MAX_DATAGRAM = 65535


@dataclass
class Fragment:
    """One fragment as the decoder hands it over."""

    key: tuple
    src: int  # file index
    ts: float
    offset: int  # byte offset of the data in the datagram
    more: bool  # MF / M flag
    data: bytes  # the fragment's part of the datagram payload
    header: bytes  # first fragment only: the IP header (IPv4 with options; IPv6 fixed 40)
    proto: int  # the transport protocol (IPv6: the fragment header's next header)
    pos: int = -1  # position of the fragment's record in its chunk
    index: int = -1  # record number of the fragment in its file
    vlan: int = 0  # the VLAN key of the fragment's record


@dataclass
class _Datagram:
    src: int
    first_ts: float
    pieces: dict[int, bytes] = field(default_factory=dict)  # offset -> data
    starts: list[int] = field(default_factory=list)  # the offsets of pieces, sorted
    covered: int = 0  # payload bytes held (pieces never overlap)
    max_end: int = 0  # the end of the last piece
    header: bytes = b""
    end: int | None = None  # total payload length, once the last fragment is seen
    held: int = 0  # fragments held (each counted when the datagram is resolved)
    nbytes: int = 0
    overlap: bool = False
    proto: int = 0
    first: Fragment | None = None  # the first fragment (offset 0), once seen
    first_chunk: int = -1  # the chunk the first fragment came in


@dataclass
class Completed:
    """A reassembled datagram: a whole IP packet, from its IP header."""

    packet: bytes
    n_fragments: int


@dataclass
class GivenUp:
    """The first fragment of a datagram given up on, as an unfragmented IP packet."""

    packet: bytes  # the fragment's IP header (MF cleared, length its own) and data
    src: int
    ts: float
    index: int  # record number in the file
    pos: int  # position of its record in the current chunk; -1: an earlier chunk
    vlan: int
    chunk: int  # serial number of the chunk its record came in


class Reassembler:
    """Fragments in, whole IP datagrams out; counts every fragment it gives up on."""

    def __init__(
        self, report, *, timeout: float = 30.0, max_bytes: int = 16 << 20, max_datagrams=8192
    ):
        self.report = report
        self.timeout, self.max_bytes, self.max_datagrams = timeout, max_bytes, max_datagrams
        self._pending: OrderedDict[tuple, _Datagram] = OrderedDict()  # oldest first
        self._bytes = 0
        self._chunk = 0  # serial number of the chunk being decoded
        self._given_up: list[GivenUp] = []

    def begin_chunk(self) -> None:
        """A new chunk starts: record positions from here on are in it."""
        self._chunk += 1

    def take_given_up(self) -> list[GivenUp]:
        """The first fragments handed back since the last call (see module doc)."""
        out, self._given_up = self._given_up, []
        for g in out:
            if g.chunk != self._chunk:
                g.pos = -1  # it goes before the current chunk's packets
        return out

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, frag: Fragment) -> Completed | None:
        """Add one fragment; the datagram it completes, if it completes one."""
        d = self._pending.get(frag.key)
        if d is not None and frag.ts - d.first_ts > self.timeout:
            self._drop(frag.key, "ip_fragment_incomplete")
            d = None
        if d is None:
            d = self._pending[frag.key] = _Datagram(frag.src, frag.ts)
        if not self._place(d, frag):
            return None
        self._make_room()
        if frag.key not in self._pending:
            return None  # given up to make room, even if this fragment completed it
        if d.end is None or not d.header:
            return None
        if d.covered != d.end:
            return None  # pieces never overlap, so equal sizes mean no hole is left
        del self._pending[frag.key]
        self._bytes -= d.nbytes
        payload = b"".join(d.pieces[k] for k in d.starts)
        return Completed(_rebuild(d.header, payload, frag.proto), d.held)

    def _place(self, d: _Datagram, frag: Fragment) -> bool:
        """Put the fragment's data in place; False when it adds nothing."""
        if d.overlap:  # already dropped: every later fragment goes the same way
            self.report.skipped["ip_fragment_overlap"] += 1
            return False
        lo, hi = frag.offset, frag.offset + len(frag.data)
        same = d.pieces.get(lo)
        if same is not None and same == frag.data and (frag.more or d.end == hi):
            self.report.skipped["ip_fragment_duplicate"] += 1
            return False
        # Pieces never overlap, so only the neighbours in offset order can overlap it.
        at = bisect.bisect_left(d.starts, lo)
        if at > 0:
            before = d.starts[at - 1]
            d.overlap |= before + len(d.pieces[before]) > lo
        if at < len(d.starts):
            d.overlap |= d.starts[at] < hi
        if hi > IPV4_MAX_DATAGRAM + P.IPV6_HEADER or (d.end is not None and hi > d.end):
            d.overlap = True  # past the end another fragment gave: no consistent datagram
        if not frag.more:
            if d.end is not None and d.end != hi:
                d.overlap = True
            d.end = hi
            d.overlap |= d.max_end > hi
        d.held += 1
        if d.overlap:
            # RFC 5722: drop the datagram and every fragment of it, now and later.
            self.report.skipped["ip_fragment_overlap"] += d.held
            d.held = 0
            self._bytes -= d.nbytes
            d.nbytes, d.pieces, d.starts, d.first = 0, {}, [], None
            return False
        d.pieces[lo] = frag.data
        d.starts.insert(at, lo)
        d.covered += hi - lo
        d.max_end = max(d.max_end, hi)
        if frag.header:
            d.header = frag.header
        if lo == 0:
            d.first, d.first_chunk, d.proto = frag, self._chunk, frag.proto
        d.nbytes += len(frag.data) + len(frag.header)
        self._bytes += len(frag.data) + len(frag.header)
        return True

    def _make_room(self) -> None:
        while self._pending and (
            self._bytes > self.max_bytes or len(self._pending) > self.max_datagrams
        ):
            self._drop(next(iter(self._pending)), "ip_fragment_memory")

    def _drop(self, key: tuple, reason: str) -> None:
        """Give the datagram up: its first fragment back as a packet, the rest counted."""
        d = self._pending.pop(key)
        self._bytes -= d.nbytes
        held, f = d.held, d.first
        if f is not None and d.header:
            held -= 1
            packet = _rebuild(d.header, d.pieces[0], d.proto)
            self._given_up.append(
                GivenUp(packet, f.src, f.ts, f.index, f.pos, f.vlan, d.first_chunk)
            )
        if held:
            self.report.skipped[reason] += held

    def expire(self, latest: dict[int, float], ended: list[int]) -> None:
        """Drop datagrams that timed out (``latest``: each file's latest time seen)
        or whose file ended."""
        ended_set = set(ended)
        for key in list(self._pending):
            d = self._pending[key]
            if d.src in ended_set or latest.get(d.src, d.first_ts) - d.first_ts > self.timeout:
                self._drop(key, "ip_fragment_incomplete")


def _rebuild(header: bytes, payload: bytes, proto: int) -> bytes:
    """The whole datagram: the first fragment's header, unfragmented, then the payload."""
    if header[0] >> 4 == 4:
        ihl = len(header)
        total = min(ihl + len(payload), IPV4_MAX_DATAGRAM)
        h = bytearray(header)
        h[2:4] = struct.pack("!H", total)
        h[6:8] = b"\0\0"  # no more fragments, offset 0
        h[P.IPV4_CHECKSUM] = b"\0\0"
        h[P.IPV4_CHECKSUM] = struct.pack("!H", _checksum(bytes(h)))
        return bytes(h) + payload[: total - ihl]
    h = bytearray(header[: P.IPV6_HEADER])
    h[4:6] = struct.pack("!H", min(len(payload), 0xFFFF))
    h[6] = proto
    return bytes(h) + payload


def _checksum(data: bytes) -> int:
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF
