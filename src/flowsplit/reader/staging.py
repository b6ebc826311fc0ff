"""Streaming captures through one staging buffer, a chunk at a time.

Files are read into one reusable buffer of ``chunk_bytes`` (plus room for one
maximal record), several small files side by side, so that memory stays bounded
whatever the input and the vectorised stages work on large batches: the record
walks of all files in a chunk only collect offsets (:class:`RecordBatch`), and the
header fields of every record of the chunk are then gathered in one go.
"""

from __future__ import annotations

import array
import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Self, TypedDict

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from flowsplit.errors import InputError

# the compiled header gathers, built by `pip install`; without them NumPy gathers
from flowsplit.reader.kernel import compiled as _kernel
from flowsplit.reader.pcap import MAX_RECORD, ReadReport, Source, open_capture

WINDOW_PAD = 4096  # zero bytes after the buffer: fixed-width gathers never run off it
# Room after the records for a chunk's reassembled datagrams (StagingBuffer.with_extra),
# so that they are appended in place rather than to a copy of the whole buffer.
EXTRA_ROOM = 1 << 20
_NO_FLAGS = np.zeros(0, dtype=np.uint8)  # gather_u32: every record little-endian


class Columns:
    """A dataclass of equally long arrays, one per field: its length and row selection."""

    def __len__(self) -> int:
        return len(getattr(self, fields(self)[0].name))

    def take(self, idx: np.ndarray) -> Self:
        return type(self)(*(getattr(self, f.name)[idx] for f in fields(self)))


@dataclass
class Records(Columns):
    """Packet records (all arrays of length n), in capture order within each file."""

    src: np.ndarray  # int32, index of the file in the input list
    data_off: np.ndarray  # int64, offset of the frame in the staging buffer
    caplen: np.ndarray  # int64, bytes captured
    wirelen: np.ndarray  # int64, bytes on the wire
    ts: np.ndarray  # float64, seconds
    linktype: np.ndarray  # int32
    index: np.ndarray  # int64, record number in its file (0-based)

    @staticmethod
    def concat(parts: list[Records]) -> Records:
        if len(parts) == 1:
            return parts[0]
        if not parts:
            i64 = np.zeros(0, dtype=np.int64)
            i32 = np.zeros(0, dtype=np.int32)
            return Records(i32, i64, i64, i64, np.zeros(0), i32, i64)
        return Records(
            *(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Records))
        )


class StagingBuffer:
    """One reusable byte buffer, with cached fixed-width row views for gathers."""

    def __init__(self, chunk_bytes: int):
        self.chunk_bytes = max(int(chunk_bytes), 1)
        self.capacity = self.chunk_bytes + MAX_RECORD
        self._room = EXTRA_ROOM
        self.array = np.zeros(self.capacity + self._room + WINDOW_PAD, dtype=np.uint8)
        self.mv = memoryview(self.array)
        self._windows: dict[int, np.ndarray] = {}
        self._typed: dict[str, np.ndarray] = {}
        self._owner = self  # the buffer whose room with_extra fills
        self._extra_end = self.capacity  # end of what with_extra wrote into the room

    def word(self, offsets: np.ndarray, code: str) -> np.ndarray:
        """The integer of type ``code`` (``">u2"``, ``"<u4"``, ``">u8"``...) at each offset.

        Returned as int64 (64-bit words keep their bits). One unaligned load per
        offset through a byte-strided view: far cheaper than gathering rows.
        """
        view = self._typed.get(code)
        if view is None:
            dt = np.dtype(code)
            view = np.ndarray(
                shape=(len(self.array) - dt.itemsize + 1,),
                dtype=dt,
                buffer=self.array,
                strides=(1,),
            )
            self._typed[code] = view
        return view[offsets].astype(np.int64)

    def rows(self, offsets: np.ndarray, width: int) -> np.ndarray:
        """``width`` bytes at each offset: uint8 (n, width), one memcpy per row."""
        win = self._windows.get(width)
        if win is None:
            if width > WINDOW_PAD:
                raise ValueError(f"gather width {width} exceeds {WINDOW_PAD}")
            win = self._windows[width] = sliding_window_view(self.array, width)
        return win[offsets]

    def with_extra(self, blobs: list[bytes]) -> tuple[StagingBuffer, np.ndarray]:
        """This buffer with ``blobs`` appended after its bytes; their offsets.

        Used for reassembled IP datagrams, so that every packet of a chunk is read
        from one buffer. They go into the room kept after the records (the buffer
        returned shares this one's array) or, when they do not fit, into a copy.
        Either way the bytes after them read as zeros, as in a fresh buffer.
        """
        used = self.capacity
        lengths = np.array([len(b) for b in blobs], dtype=np.int64)
        offsets = used + np.cumsum(lengths) - lengths
        end = used + int(lengths.sum())
        owner = self._owner
        if end <= owner.capacity + owner._room:
            out = copy.copy(self)  # the same array and cached views
            out.capacity = end
            owner._extra_end = max(owner._extra_end, end)
        else:
            out = StagingBuffer.__new__(StagingBuffer)
            out.chunk_bytes, out.capacity = self.chunk_bytes, end
            out.array = np.zeros(out.capacity + WINDOW_PAD, dtype=np.uint8)
            out.array[:used] = self.array[:used]
            out.mv = memoryview(out.array)
            out._windows, out._typed = {}, {}
            out._owner, out._room, out._extra_end = out, 0, end
        for at, blob in zip(offsets.tolist(), blobs, strict=True):
            out.array[at : at + len(blob)] = np.frombuffer(blob, dtype=np.uint8)
        return out, offsets

    def clear_extra(self) -> None:
        """Zero the room after the records again (a new chunk is about to be decoded)."""
        if self._extra_end > self.capacity:
            self.array[self.capacity : self._extra_end] = 0
            self._extra_end = self.capacity


class _Segments:
    """The segment table, read one column at a time (per record: column[segment])."""

    def __init__(self, table: np.ndarray):
        self.cols = np.ascontiguousarray(table.T)  # (8, n_seg)

    def col(self, k: int) -> np.ndarray:
        return self.cols[k]

    def at(self, k: int, rep: np.ndarray):
        """Column k for each record (a scalar when every segment agrees)."""
        c = self.cols[k]
        return c[0] if (c == c[0]).all() else c[rep]


class RecordBatch:
    """Record offsets collected by the walks of one chunk, decoded together.

    Walkers append record offsets to ``starts`` (files in order, each file's records
    in capture order) and describe each run of records of one kind with a segment;
    :meth:`build` then gathers every header field of the chunk at once.
    """

    # Segment layout: (file, n, kind, big-endian, p1, p2, p3, first record number);
    # kind 0 is a pcap record (p1 tick, p2 link type, p3 snaplen), 2/3/6 a pcapng
    # block (p1 first interface in the table, p2 interfaces, p3 last timestamp).
    def __init__(self, sb: StagingBuffer, report: ReadReport, strict: bool):
        self.sb, self.report, self.strict = sb, report, strict
        self.src = 0  # the file being walked
        self.starts = array.array("q")  # record offsets (int64), appended by the walks
        self._segs: list[tuple] = []
        self._ng_sources: list[tuple[int, Source]] = []
        self._ifaces: list[tuple[int, int, int, float]] = []
        self._paths: dict[int, str] = {}

    def add_pcap(self, s, n: int) -> None:
        self._paths[self.src] = s.path
        seg = (self.src, n, 0, s.endian == ">", s.tick, s.linktype, s.snaplen, s.n_records)
        self._segs.append(seg)

    def add_ng(self, s, n: int, kind: int = 6) -> None:
        self._paths[self.src] = s.path
        base = len(self._ifaces)
        self._ifaces.extend(s.interfaces)
        self._ng_sources.append((len(self._segs), s))
        big = s.endian == ">"
        self._segs.append((self.src, n, kind, big, base, len(s.interfaces), s.last_ts, s.n_records))

    def build(self) -> Records:
        """Gather and check the header fields of every record collected."""
        n = len(self.starts)
        if n == 0:
            return Records.concat([])
        starts = np.frombuffer(self.starts, dtype=np.int64).copy()
        segs = _Segments(np.array(self._segs, dtype=np.float64))
        counts = segs.col(1).astype(np.int64)
        rep = np.repeat(np.arange(len(counts)), counts)
        first = np.cumsum(counts) - counts
        index = (segs.col(7).astype(np.int64) - first)[rep] + np.arange(n)
        src = segs.col(0).astype(np.int32)[rep]
        kind = segs.col(2).astype(np.int64)[rep]
        big = segs.col(3)[rep] > 0 if segs.col(3).any() else None
        is_pcap = kind == 0
        if is_pcap.all():
            fields, keep = self._pcap(starts, segs, rep, big, src, index)
        elif not is_pcap.any():
            fields, keep = self._pcapng(starts, segs, rep, big, src, index, kind)
        else:  # both formats in this chunk: decode each on its own rows
            fields = [np.empty(n, dtype=np.int64) for _ in range(3)] + [
                np.empty(n),
                np.empty(n, dtype=np.int32),
            ]
            keep = np.empty(n, dtype=bool)
            for rows, fn in (
                (np.flatnonzero(is_pcap), self._pcap),
                (np.flatnonzero(~is_pcap), self._pcapng),
            ):
                sub = [
                    starts[rows],
                    segs,
                    rep[rows],
                    None if big is None else big[rows],
                    src[rows],
                    index[rows],
                ]
                part, ok = fn(*sub) if fn == self._pcap else fn(*sub, kind[rows])
                for full, value in zip(fields, part, strict=True):
                    full[rows] = value
                keep[rows] = True if ok is None else ok
            keep = None if keep.all() else keep
        recs = Records(src, *fields, index)
        return recs if keep is None else recs.take(keep)

    def _u32s(self, starts, rels: tuple[int, ...], big) -> list[np.ndarray]:
        """The 32-bit words at ``starts + rel`` for each rel (one pass when compiled)."""
        if _kernel is None:
            return [self._u32(starts + rel, big) for rel in rels]
        out = np.empty((len(rels), len(starts)), dtype=np.int64)
        flags = _NO_FLAGS if big is None else np.ascontiguousarray(big, dtype=np.uint8)
        _kernel.gather_u32(self.sb.array, starts, np.array(rels, dtype=np.int64), flags, out)
        return list(out)

    def _u32(self, offsets, big) -> np.ndarray:
        value = self.sb.word(offsets, "<u4")
        if big is None:
            return value
        swapped = value.astype("<u4").byteswap().astype(np.int64)
        return np.where(big, swapped, value)

    def _drop(self, reason: str, bad: np.ndarray, src: np.ndarray, index: np.ndarray) -> None:
        if bad.any():
            i = int(np.argmax(bad))
            where = f" (record {index[i]})"
            self.report.skip(
                reason, int(bad.sum()), self._paths[src[i]], strict=self.strict, where=where
            )

    def _pcap(self, starts, segs, rep, big, src, index):
        # A record longer than the file's snapshot length is kept: the walk has
        # already bounded every length (MAX_CAPLEN), and such writers exist.
        sec, frac, caplen, wirelen = self._u32s(starts, (0, 4, 8, 12), big)
        ts = sec + frac * segs.at(4, rep)
        linktype = np.broadcast_to(segs.at(5, rep), starts.shape).astype(np.int32)
        fields = (starts + 16, caplen, wirelen, ts, linktype)
        return fields, None

    def _pcapng(self, starts, segs, rep, big, src, index, kind):
        if _kernel is not None and (kind == 6).all():
            return self._epbs(starts, segs, rep, src, index)
        u32 = self._u32
        n = len(starts)
        blen, if_id, ts_hi, ts_lo, caplen, wirelen = self._u32s(starts, (4, 8, 12, 16, 20, 24), big)
        spb, opb = kind == 3, kind == 2
        if opb.any():  # an obsolete packet block has a 16-bit interface and drop count
            if_id = np.where(
                opb,
                np.where(big, if_id >> 16, if_id & 0xFFFF) if big is not None else if_id & 0xFFFF,
                if_id,
            )
        table = np.array(self._ifaces or [(0, 0, 1, 0.0)], dtype=np.float64)  # (n_ifaces, 4)
        n_if = segs.at(5, rep).astype(np.int64)
        ok_if = np.where(spb, n_if > 0, if_id < n_if)
        gi = segs.at(4, rep).astype(np.int64) + np.where(ok_if & ~spb, if_id, 0)
        gi = np.minimum(gi, len(table) - 1)
        snap = table[gi, 1].astype(np.int64)
        data_off = starts + 28
        if spb.any():  # a simple packet block: original length only, data at +12
            caplen = np.where(spb, np.minimum(if_id, blen - 16), caplen)
            caplen = np.where(spb & (snap > 0), np.minimum(caplen, snap), caplen)
            wirelen = np.where(spb, if_id, wirelen)
            data_off = starts + np.where(spb, 12, 28)
        ok_cap = spb | (caplen <= blen - 32)
        ok_trailer = u32(starts + blen - 4, big) == blen
        keep = ok_if & ok_cap & ok_trailer  # longer than the snapshot length: kept
        if not keep.all():
            self._drop("bad_interface", ~ok_if, src, index)
            self._drop("bad_block_trailer", ok_if & ~ok_trailer, src, index)
            self._drop("bad_caplen", ok_if & ok_trailer & ~ok_cap, src, index)
        hi = ts_hi.astype(np.uint64)
        ticks = (hi << np.uint64(32)) | ts_lo.astype(np.uint64)
        if (table[:, 2] == table[0, 2]).all():
            div = np.uint64(table[0, 2])
        else:
            div = table[gi, 2].astype(np.uint64)
        ts = (ticks // div).astype(np.float64) + (ticks % div) / div
        if table[:, 3].any():
            ts += table[gi, 3]
        if spb.any():
            # Simple packet blocks carry no timestamp: they take the previous record's.
            prev = np.maximum.accumulate(np.where(spb, -1, np.arange(n)))
            same = (prev >= 0) & (src[np.maximum(prev, 0)] == src)
            ts = np.where(spb, np.where(same, ts[np.maximum(prev, 0)], segs.at(6, rep)), ts)
        self._note_last_ts(ts, rep)
        linktype = table[gi, 0].astype(np.int32)
        return (data_off, caplen, wirelen, ts, linktype), (None if keep.all() else keep)

    def _note_last_ts(self, ts, rep) -> None:
        for seg, source in self._ng_sources:  # the last timestamp of each file, for later
            source.last_ts = float(ts[np.searchsorted(rep, seg, side="right") - 1])

    def _epbs(self, starts, segs, rep, src, index):
        """``_pcapng`` when every block is an enhanced packet block: one compiled pass."""
        n = len(starts)
        table = np.array(self._ifaces or [(0, 0, 1, 0.0)], dtype=np.float64)
        caplen, wirelen = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        ts, linktype = np.empty(n), np.empty(n, dtype=np.int32)
        problem = np.empty(n, dtype=np.uint8)
        _kernel.epb_fields(
            self.sb.array,
            starts,
            rep.astype(np.int64),
            segs.col(4).astype(np.int64),
            segs.col(5).astype(np.int64),
            (segs.col(3) > 0).astype(np.uint8),
            table[:, 0].astype(np.int32),
            table[:, 2].astype(np.uint64),
            np.ascontiguousarray(table[:, 3]),
            caplen,
            wirelen,
            ts,
            linktype,
            problem,
        )
        keep = None
        if problem.any():
            keep = problem == 0
            for code, reason in enumerate(("bad_interface", "bad_block_trailer", "bad_caplen"), 1):
                self._drop(reason, problem == code, src, index)
        self._note_last_ts(ts, rep)
        return (starts + 28, caplen, wirelen, ts, linktype), keep


@dataclass
class RecordChunk:
    """The records of one staging buffer, possibly from several files.

    Records are grouped by file, files in input order, each file's records in
    capture order. Only the chunk's last file may continue in the next chunk, where
    it comes first; every other file of the chunk is in ``ended``.
    """

    buffer: StagingBuffer
    records: Records
    ended: list[int]  # files that ended with this chunk (their last record is in it or before)
    paths: Sequence[str]

    def __len__(self) -> int:
        return len(self.records)


class ReadArgs(TypedDict, total=False):
    """How :func:`iter_record_chunks` reads captures (the flow readers pass them on)."""

    strict: bool
    """A malformed record raises InputError (default False: counted in ``report.skipped``)."""
    chunk_bytes: int
    """The staging buffer's size (default 8 MiB)."""
    on_error: str
    """A file-level problem: ``"raise"`` (default) or ``"skip"`` the rest of the file."""
    digests: str | None
    """A name of ``capfile.DIGESTS``: each file's digest, computed as it is read."""


def iter_record_chunks(
    paths: Sequence[str | Path],
    report: ReadReport,
    *,
    strict: bool = False,
    chunk_bytes: int = 8 << 20,
    on_error: str = "raise",
    digests: str | None = None,
) -> Iterator[RecordChunk]:
    """Stream the packet records of several captures, one staging buffer at a time.

    The buffer is reused: a chunk's bytes are valid until the next one is requested.
    With ``digests`` (a name of ``capfile.DIGESTS``) each file's digest is computed
    as it is read, into
    ``report.digests`` (one pass over the file, not two).
    With ``on_error="raise"`` a file-level problem raises InputError; with ``"skip"``
    it is recorded in ``report.file_errors`` and the file ends there (records read
    before the problem are kept).
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
    paths = [str(p) for p in paths]
    sb = _take_buffer(chunk_bytes)
    try:
        yield from _stream(paths, report, strict, on_error, sb, digests)
    finally:
        _give_back(sb)


def _stream(paths, report, strict, on_error, sb, digests) -> Iterator[RecordChunk]:
    batch = RecordBatch(sb, report, strict)
    ended: list[int] = []
    pos = 0

    def flush() -> RecordChunk:
        nonlocal batch, ended, pos
        sb.clear_extra()  # the last chunk's datagrams: its consumer is done with them
        chunk = RecordChunk(sb, batch.build(), ended, paths)
        batch, ended, pos = RecordBatch(sb, report, strict), [], 0
        return chunk

    for i, path in enumerate(paths):
        try:
            source = open_capture(path, report, strict=strict, digest=digests)
        except InputError as exc:
            if on_error == "raise":
                raise
            report.file_errors.append((path, exc.problem))
            continue
        report.n_files += 1
        try:
            while not source.done:
                batch.src = i
                try:
                    n_read = source.file.read_into(sb.mv[pos : sb.capacity], source.offset)
                    data_end = pos + n_read
                    at_eof = source.file.at_eof(source.offset + n_read)
                    next_off = source.walk(sb.mv, pos, data_end, sb.chunk_bytes, at_eof, batch)
                except InputError as exc:
                    if on_error == "raise":
                        raise
                    source.error, source.done = exc, True
                    break
                source.offset += next_off - pos
                if source.skip_bytes:  # a block too large to read: step over it unread
                    if not source.file.reaches(source.offset + source.skip_bytes):
                        source.lost_record("truncated_record", " cut by end of file")
                    source.offset += source.skip_bytes
                    source.skip_bytes = 0
                    pos = next_off
                    if pos < sb.chunk_bytes:
                        continue
                elif source.done:
                    pos = next_off
                    break
                elif next_off == pos == 0:
                    source.fail("a record does not fit in the staging buffer")
                    break
                yield flush()
            if source.error is not None:
                if on_error == "raise":
                    raise source.error
                report.file_errors.append((path, source.error.problem))
            if digests:
                report.digests[path] = source.file.hashing.hexdigest()
        finally:
            source.close()
        ended.append(i)
        if pos >= sb.chunk_bytes:
            yield flush()
    if batch.starts or ended:
        yield flush()


# Staging buffers are reused (one at a time per generator): a new one costs an 8 MB
# allocation and its cached views, noticeable when files are read one call each.
_POOL: list[StagingBuffer] = []


def _take_buffer(chunk_bytes: int) -> StagingBuffer:
    for i, sb in enumerate(_POOL):
        if sb.chunk_bytes == max(int(chunk_bytes), 1):
            return _POOL.pop(i)
    return StagingBuffer(chunk_bytes)


def _give_back(sb: StagingBuffer) -> None:
    if len(_POOL) < 2:
        _POOL.append(sb)
