"""IPv4 and IPv6 fragment reassembly, with bounded memory and timeouts.

Fragments leave the vectorised decode as columns (:class:`FragmentRows`). A datagram
whole within a chunk, whose fragments the reassembler would simply join, is joined
at once from them (:meth:`Reassembler.join_whole`: 97 % of the fragments of the nDPI
captures); every other fragment is added to the :class:`Reassembler` with the bytes
it carries (copied out of the staging buffer, so a datagram may span chunks). A
datagram is keyed by (file, VLAN ids, IP version, source, destination,
identification, protocol), as RFC 791 and RFC 8200 define it.

Decisions worth knowing:

- A completed datagram becomes one packet at the place and time of the fragment
  that completed it (what a receiving host sees); the other fragments are counted
  in ``ReadReport.n_merged``, not as skipped.
- Overlapping fragments discard the whole datagram (RFC 5722; Linux does the same
  for IPv4): ``ip_fragment_overlap``. An exact duplicate is ignored
  (``ip_fragment_duplicate``).
- A datagram is given up at the first later record of its file whose timestamp is
  more than ``timeout`` seconds after its first fragment's (the rule of flow idle
  timeouts, assemble.py: a timestamp that jumps ahead ends the datagrams it
  overtakes), or when its file ends: ``ip_fragment_incomplete``, one per fragment
  held.
- At most ``max_bytes`` of fragment data and ``max_datagrams`` datagrams are held;
  beyond that the oldest datagram is given up (``ip_fragment_memory``).
- A datagram given up on (incomplete or for memory) whose first fragment was seen
  hands that fragment back (:meth:`Reassembler.take_given_up`) as a packet of its own
  with its own time: it carries the ports, so its flow keeps the packet (as NFStream,
  which never reassembles, counts it); only the other fragments held are counted as
  skipped. A datagram dropped for overlapping fragments gives nothing back.
  The packet takes its place in capture order where the datagram is given up: just
  after the first record past its timeout, after the fragment that
  needed the room, or after the file's last record. Every one of those places is a
  record of the capture, so the flows do not depend on how the records were cut into
  chunks (the first fragment may lie chunks back); the price is that such a packet
  comes after the packets of its flow captured while its datagram was pending.
- Each file of a chunk is reassembled on its own, its fragments in record order
  (those inside tunnels too), before the next file's. Two cases can still depend on
  where the chunks are cut: a fragment found inside a datagram that itself completed
  or was given up joins after the plain fragments of its file in the chunk, and a
  capture whose clock goes back may leave a timed-out datagram held when memory runs
  out (the oldest are checked first, and the check stops at the first still in time).
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

import numpy as np

from flowsplit.reader import protocols as P

IPV4_MAX_DATAGRAM = 65535


@dataclass(slots=True)
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


@dataclass(slots=True)
class _Datagram:
    src: int
    first_ts: float  # time of the first fragment to arrive
    seen_chunk: int  # the records up to (seen_chunk, seen_pos) are known not to time it out
    seen_pos: int
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


@dataclass(slots=True)
class Completed:
    """A reassembled datagram: a whole IP packet, from its IP header."""

    packet: bytes
    n_fragments: int


@dataclass(slots=True)
class GivenUp:
    """The first fragment of a datagram given up on, as an unfragmented IP packet."""

    packet: bytes  # the fragment's IP header (MF cleared, length its own) and data
    src: int
    ts: float
    index: int  # record number in the file
    pos: int  # where it goes: after this record of the current chunk (-1: before them all)
    vlan: int


@dataclass(slots=True)
class FragmentRows:
    """Fragments found by one decode, as columns over the staging buffer. Datagrams
    whole within a chunk are joined from them at once (:meth:`Reassembler.join_whole`);
    the rest become :class:`Fragment` objects for the reassembler (:meth:`fragments`)."""

    ip_off: np.ndarray  # int64, the fragment's IP header in the buffer
    data_at: np.ndarray  # int64, its data from the IP header
    ip_len: np.ndarray  # int64, its IP length (its data ends there)
    is6: np.ndarray  # bool
    offset: np.ndarray  # int64, byte offset of its data in the datagram
    more: np.ndarray  # bool, MF / M flag
    ident: np.ndarray  # int64
    proto: np.ndarray  # int64, the transport protocol
    src: np.ndarray  # int64, file index
    ts: np.ndarray  # float64
    vlan: np.ndarray  # int64, the VLAN key of its record
    pos: np.ndarray  # int64, position of its record in the chunk
    index: np.ndarray  # int64, record number in its file

    def __len__(self) -> int:
        return len(self.ip_off)

    def take(self, rows: np.ndarray) -> FragmentRows:
        return FragmentRows(*(getattr(self, f)[rows] for f in _ROW_FIELDS))

    def fragments(self, mv: memoryview) -> list[Fragment]:
        """The rows as :class:`Fragment` objects (their bytes copied out of ``mv``)."""
        out = []
        cols = (getattr(self, f).tolist() for f in _ROW_FIELDS)
        for off, at, length, v6, offset, more, ident, proto, src, ts, vl, p, i in zip(
            *cols, strict=True
        ):
            key = _key(mv, off, v6, src, vl, ident, proto)
            header = _header(mv, off, v6, at) if offset == 0 else b""
            data = bytes(mv[off + at : off + length])
            out.append(Fragment(key, src, ts, offset, more, data, header, proto, p, i, vl))
        return out


def _key(mv: memoryview, off: int, v6: bool, src: int, vlan: int, ident: int, proto: int):
    """A datagram's key (RFC 791, RFC 8200): file, VLAN key, addresses, id, protocol."""
    if v6:
        addr = bytes(mv[off + P.IPV6_SRC_AT : off + P.IPV6_HEADER])
    else:
        addr = bytes(mv[off + P.IPV4_SRC_AT : off + P.IPV4_SRC_AT + 8])
    return (src, vlan, addr, ident, proto)


def _header(mv: memoryview, off: int, v6: bool, data_at: int) -> bytes:
    """A first fragment's IP header: IPv4 with its options, the fixed IPv6 header."""
    return bytes(mv[off : off + (P.IPV6_HEADER if v6 else data_at)])


_ROW_FIELDS = list(FragmentRows.__dataclass_fields__)


def fragments_of(rows: list[FragmentRows], mv: memoryview) -> list[Fragment]:
    """The :class:`Fragment` objects of several :class:`FragmentRows`, in order."""
    return [f for r in rows for f in r.fragments(mv)]


class Reassembler:
    """Fragments in, whole IP datagrams out; counts every fragment it gives up on.

    Per chunk of records: :meth:`begin_chunk`, :meth:`join_whole` for the datagrams
    whole in it, then each file's other fragments in record order (:meth:`add`),
    :meth:`expire` for its timeouts and, when the file ended, :meth:`end_file`; what
    was given up comes out of :meth:`take_given_up`.
    """

    def __init__(
        self, report, *, timeout: float = 30.0, max_bytes: int = 16 << 20, max_datagrams=8192
    ):
        self.report = report
        self.timeout, self.max_bytes, self.max_datagrams = timeout, max_bytes, max_datagrams
        self._pending: OrderedDict[tuple, _Datagram] = OrderedDict()  # oldest first
        self._bytes = 0
        self._given_up: list[GivenUp] = []
        self._chunk = 0  # serial number of the chunk being decoded
        self._ts = np.zeros(0)
        self._runs: dict[int, tuple[int, int]] = {}  # file -> its records' range in the chunk
        self._peak: np.ndarray | None = None  # running maximum of times within each run
        self._peak_list: list[float] = []
        self._tl: list[float] | None = None  # the times as a list, once needed

    def begin_chunk(self, src: np.ndarray, ts: np.ndarray) -> None:
        """A chunk's records start (file and time of each, grouped by file)."""
        self._chunk += 1
        self._ts, self._peak, self._tl = ts, None, None
        n = len(src)
        if not n:
            self._runs = {}
        elif src[0] == src[-1]:
            self._runs = {int(src[0]): (0, n)}
        else:
            cuts = [0, *(np.flatnonzero(np.diff(src)) + 1).tolist(), n]
            self._runs = {int(src[a]): (a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)}

    def files(self) -> set[int]:
        """The files that have datagrams pending."""
        return {d.src for d in self._pending.values()}

    def first_record(self, src: int) -> int:
        """Where the file's records start in this chunk (-1: it has none in it)."""
        run = self._runs.get(src)
        return -1 if run is None else run[0]

    def expire(self, src: int) -> int:
        """Give up the file's datagrams that timed out in this chunk; how many."""
        run = self._runs.get(src)
        if run is None:
            return 0
        out = 0
        for key in [k for k, d in self._pending.items() if d.src == src]:
            at = self._timed_out(self._pending[key], run[1] - 1)
            if at is not None:
                self._drop(key, "ip_fragment_incomplete", at)
                out += 1
        return out

    def end_file(self, src: int) -> int:
        """The file ended in this chunk: give up its datagrams, after its last record."""
        run = self._runs.get(src)
        at = -1 if run is None else run[1] - 1
        keys = [k for k, d in self._pending.items() if d.src == src]
        for key in keys:
            self._drop(key, "ip_fragment_incomplete", at)
        return len(keys)

    def take_given_up(self) -> list[GivenUp]:
        """The first fragments handed back since the last call (see module doc), in
        the order they go among the chunk's packets."""
        out, self._given_up = self._given_up, []
        out.sort(key=lambda g: (g.pos, g.src, g.index))
        return out

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, frag: Fragment) -> Completed | None:
        """Add one fragment; the datagram it completes, if it completes one."""
        d = self._pending.get(frag.key)
        if d is not None:
            at = self._timed_out(d, frag.pos)
            if at is not None:
                self._drop(frag.key, "ip_fragment_incomplete", at)
                d = None
        if d is None:
            d = _Datagram(frag.src, frag.ts, self._chunk, frag.pos)
            self._pending[frag.key] = d
        if not self._place(d, frag):
            return None
        self._make_room(frag.pos)
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

    def join_whole(
        self, rows: list[FragmentRows], sb
    ) -> tuple[dict[int, list[tuple]], list[Fragment]]:
        """Datagrams whole within the chunk, joined at once; the other fragments.

        The reassembler takes a key's fragments in record order; where a datagram
        ends (its last fragment, "more" not set, comes last) the next one of that key
        starts. So each key's fragments are cut after each last fragment, and a key is
        joined here when every piece is a datagram :meth:`add` would complete at its
        last fragment with nothing else happening to it: the fragments tile it exactly
        (no hole, overlap or duplicate), no record between its first fragment and its
        last is more than the timeout after the first (the records between are its
        file's), the key is not pending from an earlier chunk, and the chunk's
        fragments cannot fill the memory (so nothing is given up for room). Fragments
        inside tunnels count like the others: they have their record's place and time.

        Call it after :meth:`begin_chunk`, before the chunk's other fragments are
        added; ``sb`` is the chunk's staging buffer. Returns, per file, the rows
        :meth:`~flowsplit.reader.packets.PacketDecoder._decode_reassembled` takes (as
        :meth:`add` completes them), and the fragments left for :meth:`add`, in the
        order found.
        """
        mv = sb.mv
        rest = [r for r in rows if len(r)]
        out: dict[int, list[tuple]] = {}
        if not rest:
            return out, []
        fr = FragmentRows(*(np.concatenate([getattr(r, f) for r in rest]) for f in _ROW_FIELDS))
        size = fr.ip_len - fr.data_at
        header = np.where(fr.offset == 0, np.where(fr.is6, P.IPV6_HEADER, fr.data_at), 0)
        n = len(fr)
        fits = self._bytes + int((size + header).sum()) <= self.max_bytes
        if not fits or len(self) + n > self.max_datagrams or n < 2:
            return out, fragments_of(rest, mv)
        order, key_start, ss, se, ok, pos, last = self._pieces(fr, sb, size)
        # A key is joined here only if all its pieces are (else the reassembler takes it all),
        # and nothing of it is pending.
        kstart = np.flatnonzero(key_start[ss])  # each key's first piece
        key_ok = np.minimum.reduceat(ok, kstart)
        for k in np.flatnonzero(key_ok).tolist():
            r = int(order[ss[kstart[k]]])
            key = _key(mv, int(fr.ip_off[r]), bool(fr.is6[r]), int(fr.src[r]), int(fr.vlan[r]),
                       int(fr.ident[r]), int(fr.proto[r]))  # fmt: skip
            key_ok[k] = key not in self._pending
        piece_ok = np.repeat(key_ok, np.diff(np.append(kstart, len(ss))))
        if not piece_ok.any():
            return out, fragments_of(rest, mv)
        rows = self._join(fr, mv, order, ss, se, piece_ok, pos, last, out)
        taken = np.zeros(n, dtype=bool)
        taken[rows] = True
        left = np.flatnonzero(~taken)  # found order: the rows were concatenated in it
        return out, fr.take(left).fragments(mv) if len(left) else []

    def _pieces(self, fr: FragmentRows, sb, size: np.ndarray):
        """:meth:`join_whole`'s datagrams: the fragments by key (file, VLAN key, version,
        addresses, id, protocol), cut after each last one, each piece by offset; which
        pieces tile a datagram exactly within the timeout. Returns the sorted order, where
        each key starts, the pieces' starts and ends, whether each is whole, and the
        sorted fragments' record positions and each piece's last one."""
        n = len(fr)
        # Key columns: file, VLAN key, version, the addresses as 64-bit words, id, protocol.
        a = [
            sb.word(fr.ip_off + np.where(fr.is6, 8 + 8 * k, P.IPV4_SRC_AT), ">u8") for k in range(4)
        ]
        for k in range(1, 4):
            a[k] = np.where(fr.is6, a[k], 0)
        keys = [fr.src, fr.vlan, fr.is6.astype(np.int64), *a, fr.ident, fr.proto]
        # Each key's fragments in record order, cut after each last fragment ("more" not
        # set): one datagram per piece, as the reassembler takes them one after another.
        order = np.lexsort([fr.pos, *keys[::-1]])
        key_start = np.zeros(n, dtype=bool)
        key_start[0] = True
        for k in keys:
            ks = k[order]
            key_start[1:] |= ks[1:] != ks[:-1]
        cut = key_start.copy()
        cut[1:] |= ~fr.more[order][:-1]
        seg = np.cumsum(cut) - 1
        order = order[np.lexsort([fr.offset[order], seg])]  # each piece by offset
        ss = np.flatnonzero(cut)
        se = np.append(ss[1:], n)
        off, sz, more, pos = fr.offset[order], size[order], fr.more[order], fr.pos[order]
        # Tiling: the first at offset 0, each next where the one before ends, "more" on all
        # but the last.
        bad = sz <= 0
        bad[:-1] |= (off[1:] != off[:-1] + sz[:-1]) & ~cut[1:]
        bad |= more != np.append(~cut[1:], False)
        bad[ss] |= off[ss] != 0
        ok = (np.add.reduceat(bad, ss) == 0) & (se - ss >= 2)
        ok &= off[se - 1] + sz[se - 1] <= IPV4_MAX_DATAGRAM + P.IPV6_HEADER
        # No timeout: no record after its first fragment, up to its last, more than the
        # timeout after the first (the records between are its file's: files are runs).
        first = np.minimum.reduceat(pos, ss)
        last = np.maximum.reduceat(pos, ss)
        if ok.any():
            lo, hi = first[ok], last[ok]
            ts = np.append(self._ts, 0.0)  # reduceat's bounds stay inside
            top = np.maximum.reduceat(ts, np.column_stack([lo + 1, hi + 1]).ravel())[::2]
            ok[ok] = top <= self._ts[lo] + self.timeout
        return order, key_start, ss, se, ok, pos, last

    def _join(self, fr: FragmentRows, mv, order, ss, se, piece_ok, pos, last, out) -> np.ndarray:
        """The whole pieces joined into packets, added to ``out`` per file (as :meth:`add`
        completes them); returns the joined fragments' rows."""
        in_piece = np.repeat(piece_ok, se - ss)  # over the sorted fragments
        rows = order[in_piece]  # the joined fragments, piece by piece, by offset
        # Each piece completes at its last fragment in record order.
        at = order[np.flatnonzero(in_piece & (pos == np.repeat(last, se - ss)))]
        first = order[ss[piece_ok]]
        sizes = (se - ss)[piece_ok]
        starts = (fr.ip_off[rows] + fr.data_at[rows]).tolist()
        ends = (fr.ip_off[rows] + fr.ip_len[rows]).tolist()
        data = [mv[x:y] for x, y in zip(starts, ends, strict=True)]
        cuts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        heads = zip(
            *(x[first].tolist() for x in (fr.ip_off, fr.is6, fr.data_at, fr.proto)), strict=True
        )
        tails = zip(
            *(x[at].tolist() for x in (fr.pos, fr.vlan, fr.src, fr.ts, fr.index)), strict=True
        )
        for k, ((o, v6, da, proto), (p, vlan, src, ts, index)) in enumerate(
            zip(heads, tails, strict=True)
        ):
            payload = b"".join(data[cuts[k] : cuts[k + 1]])
            packet = _rebuild(_header(mv, o, v6, da), payload, proto)
            out.setdefault(src, []).append((p, packet, vlan, src, ts, index))
        self.report.n_merged += int(sizes.sum()) - len(sizes)
        return rows

    def _ts_list(self) -> list[float]:
        if self._tl is None:
            self._tl = self._ts.tolist()
        return self._tl

    def _timed_out(self, d: _Datagram, upto: int) -> int | None:
        """The first record of ``d``'s file in this chunk, after its first fragment and
        up to record ``upto``, more than the timeout after that fragment (None: none).
        Records found not to time it out are not looked at again."""
        run = self._runs.get(d.src)
        if run is None or upto < 0:
            return None
        a, b = run
        lo = max(d.seen_pos + 1, a) if d.seen_chunk == self._chunk else a
        hi = min(upto, b - 1) + 1
        if lo >= hi:
            return None
        at = self._first_past(a, lo, hi, d.first_ts + self.timeout)
        if at is None:
            d.seen_chunk, d.seen_pos = self._chunk, hi - 1
        return at

    def _first_past(self, a: int, lo: int, hi: int, deadline: float) -> int | None:
        """The first record in [lo, hi) (of the run starting at ``a``) after ``deadline``."""
        if hi - lo <= 64:  # the usual case: a fragment soon after its datagram's others
            ts = self._ts_list()
            for r in range(lo, hi):
                if ts[r] > deadline:
                    return r
            return None
        if self._peak is None:
            peak = np.empty(len(self._ts))
            for s, e in self._runs.values():
                peak[s:e] = np.maximum.accumulate(self._ts[s:e])
            self._peak, self._peak_list = peak, peak.tolist()
        pl = self._peak_list
        if lo == a or pl[lo - 1] <= deadline:
            # No record of the run before ``lo`` is past the deadline: the first after it
            # that is, is where the running maximum first passes it.
            if pl[hi - 1] <= deadline:
                return None
            at = a + int(np.searchsorted(self._peak[a:hi], deadline, side="right"))
            return at if at < hi else None
        # A record before ``lo`` is already past it (the clock went back): look at them.
        past = np.flatnonzero(self._ts[lo:hi] > deadline)
        return lo + int(past[0]) if len(past) else None

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
            d.first, d.proto = frag, frag.proto
        d.nbytes += len(frag.data) + len(frag.header)
        self._bytes += len(frag.data) + len(frag.header)
        return True

    def _make_room(self, at: int) -> None:
        if self._bytes <= self.max_bytes and len(self._pending) <= self.max_datagrams:
            return
        # Datagrams that timed out by now go first, as incomplete, where they timed out
        # (oldest first, which in a capture in time order are the first to time out).
        for key in list(self._pending):
            d = self._pending[key]
            past = self._timed_out(d, at)
            if past is None:
                break
            self._drop(key, "ip_fragment_incomplete", past)
        while self._pending and (
            self._bytes > self.max_bytes or len(self._pending) > self.max_datagrams
        ):
            self._drop(next(iter(self._pending)), "ip_fragment_memory", at)

    def _drop(self, key: tuple, reason: str, at: int) -> None:
        """Give the datagram up: its first fragment back as a packet (to go after
        record ``at`` of the chunk), the rest counted."""
        d = self._pending.pop(key)
        self._bytes -= d.nbytes
        held, f = d.held, d.first
        if f is not None and d.header:
            held -= 1
            packet = _rebuild(d.header, d.pieces[0], d.proto)
            self._given_up.append(GivenUp(packet, f.src, f.ts, f.index, at, f.vlan))
        if held:
            self.report.skipped[reason] += held


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
