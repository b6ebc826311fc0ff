"""Streaming captures through one staging buffer, a chunk at a time.

Files are read into one reusable buffer of ``chunk_bytes`` (plus room for one
maximal record), several small files side by side, so that memory stays bounded
whatever the input and the vectorised stages work on large batches: the record
walks of all files in a chunk only collect offsets (:class:`RecordBatch`), and the
header fields of every record of the chunk are then gathered in one go.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from flowsplit.data.pcap import MAX_RECORD, ReadReport, Source, open_capture
from flowsplit.errors import InputError

WINDOW_PAD = 4096  # zero bytes after the buffer: fixed-width gathers never run off it


@dataclass
class Records:
    """Packet records (all arrays of length n), in capture order within each file."""

    src: np.ndarray  # int32, index of the file in the input list
    data_off: np.ndarray  # int64, offset of the frame in the staging buffer
    caplen: np.ndarray  # int64, bytes captured
    wirelen: np.ndarray  # int64, bytes on the wire
    ts: np.ndarray  # float64, seconds
    linktype: np.ndarray  # int32
    index: np.ndarray  # int64, record number in its file (0-based)

    def __len__(self) -> int:
        return len(self.src)

    def take(self, idx: np.ndarray) -> Records:
        return Records(*(getattr(self, f.name)[idx] for f in fields(self)))

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
        self.array = np.zeros(self.capacity + WINDOW_PAD, dtype=np.uint8)
        self.mv = memoryview(self.array)
        self._windows: dict[int, np.ndarray] = {}
        self._typed: dict[str, np.ndarray] = {}

    def word(self, offsets: np.ndarray, code: str) -> np.ndarray:
        """The integer of type ``code`` (``">u2"``, ``"<u4"``, ``">u8"``...) at each offset.

        Returned as int64 (64-bit words keep their bits). One unaligned load per
        offset through a byte-strided view: far cheaper than gathering rows.
        """
        view = self._typed.get(code)
        if view is None:
            dt = np.dtype(code)
            view = np.ndarray(
                shape=(len(self.array) - dt.itemsize + 1,), dtype=dt, buffer=self.array,
                strides=(1,),
            )  # fmt: skip
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


class RecordBatch:
    """Record offsets collected by the walks of one chunk, decoded together."""

    def __init__(self, sb: StagingBuffer, report: ReadReport, strict: bool):
        self.sb, self.report, self.strict = sb, report, strict
        self.src = 0  # the file being walked
        self._starts: dict[tuple[str, str], list[int]] = {}
        self._segs: dict[tuple[str, str], list[tuple]] = {}
        self._ifaces: list[tuple[int, int, int, float]] = []
        self._ready: list[Records] = []
        self._last_key: dict[int, tuple[str, str]] = {}
        self._paths: dict[int, str] = {}
        self._needs_sort = False

    def _seg(self, key: tuple[str, str], source: Source, seg: tuple) -> None:
        self._segs.setdefault(key, []).append(seg)
        self._paths[self.src] = source.path
        if self._last_key.setdefault(self.src, key) != key:
            self._needs_sort = True  # this file's records sit in two lists

    def pcap_starts(self, endian: str) -> list[int]:
        return self._starts.setdefault(("pcap", endian), [])

    def ng_starts(self, endian: str) -> list[int]:
        return self._starts.setdefault(("ng", endian), [])

    def add_pcap(self, s, n: int) -> None:
        self._seg(("pcap", s.endian), s, (self.src, n, s.tick, s.linktype, s.snaplen, s.n_records))

    def add_ng(self, s, n: int) -> None:
        base = len(self._ifaces)
        self._ifaces.extend(s.interfaces)
        self._seg(("ng", s.endian), s, (self.src, n, base, len(s.interfaces), s.n_records))

    def add_ng_blocks(self, s, blocks: list[tuple[int, int]]) -> None:
        """Packet blocks of mixed types from one file: decoded now, on their own."""
        self._paths[self.src] = s.path
        if self._last_key.setdefault(self.src, ("ready", "")) != ("ready", ""):
            self._needs_sort = True
        arr = np.array(blocks, dtype=np.int64)  # (n, 2): offset, block type
        n = len(arr)
        src = np.full(n, self.src, dtype=np.int32)
        one = np.ones(n, dtype=np.int64)
        recs = self._ng_records(
            arr[:, 0], arr[:, 1], src, s.n_records + np.arange(n), 0 * one,
            len(s.interfaces) * one, list(s.interfaces), s.endian, source=s,
        )  # fmt: skip
        if recs is not None:
            self._ready.append(recs)

    def build(self) -> Records:
        """Gather and check the header fields of every record collected."""
        parts = []
        for key, starts in self._starts.items():
            if not starts:
                continue
            segs = np.array(self._segs[key], dtype=np.float64)  # (n_seg, k)
            counts = segs[:, 1].astype(np.int64)
            starts_a = np.array(starts, dtype=np.int64)
            rep = np.repeat(np.arange(len(segs)), counts)
            first = np.cumsum(counts) - counts
            index = segs[rep, -1].astype(np.int64) + np.arange(len(starts_a)) - first[rep]
            src = segs[rep, 0].astype(np.int32)
            if key[0] == "pcap":
                recs = self._pcap_records(starts_a, segs, rep, src, index, key[1])
            else:
                base, n_if = segs[rep, 2].astype(np.int64), segs[rep, 3].astype(np.int64)
                btype = np.full(len(starts_a), 6, dtype=np.int64)
                recs = self._ng_records(
                    starts_a, btype, src, index, base, n_if, self._ifaces, key[1]
                )
            if recs is not None:
                parts.append(recs)
        recs = Records.concat(parts + self._ready)
        if self._needs_sort:
            recs = recs.take(np.lexsort((recs.index, recs.src)))
        elif len(recs) and np.any(recs.src[1:] < recs.src[:-1]):
            # Files of different formats sit in different lists: put them back in order.
            recs = recs.take(np.argsort(recs.src, kind="stable"))
        return recs

    def _drop(self, reason: str, bad: np.ndarray, src: np.ndarray, index: np.ndarray) -> None:
        if bad.any():
            i = int(np.argmax(bad))
            where = f" (record {index[i]})"
            self.report.skip(reason, int(bad.sum()), self._paths[src[i]], strict=self.strict,
                             where=where)  # fmt: skip

    def _pcap_records(self, starts, segs, rep, src, index, endian) -> Records | None:
        word, code = self.sb.word, endian + "u4"
        caplen = word(starts + 8, code)
        bad = caplen > segs[rep, 4]
        self._drop("caplen_gt_snaplen", bad, src, index)
        ts = word(starts, code) + word(starts + 4, code) * segs[rep, 2]
        linktype = segs[rep, 3].astype(np.int32)
        recs = Records(src, starts + 16, caplen, word(starts + 12, code), ts, linktype, index)
        return recs.take(~bad) if bad.any() else recs

    def _ng_records(self, starts, btype, src, index, if_base, n_if, ifaces, endian, source=None):
        n = len(starts)
        word, code = self.sb.word, endian + "u4"
        blen = word(starts + 4, code)
        spb = btype == 3
        if_id = word(starts + 8, code)
        if (btype == 2).any():
            if_id = np.where(btype == 2, word(starts + 8, endian + "u2"), if_id)
        if_id = np.where(spb, 0, if_id)
        table = np.array(ifaces or [(0, 0, 1, 0.0)], dtype=np.float64)  # (n_ifaces, 4)
        ok_if = if_id < n_if
        gi = np.minimum(if_base + np.where(ok_if, if_id, 0), len(table) - 1)
        snap = table[gi, 1].astype(np.int64)
        caplen, wirelen, data_off = word(starts + 20, code), word(starts + 24, code), starts + 28
        if spb.any():
            orig = word(starts + 8, code)
            caplen = np.where(spb, np.minimum(orig, blen - 16), caplen)
            caplen = np.where(spb & (snap > 0), np.minimum(caplen, snap), caplen)
            wirelen = np.where(spb, orig, wirelen)
            data_off = starts + np.where(spb, 12, 28)
        ok_cap = spb | (caplen <= blen - 32)
        ok_trailer = word(starts + blen - 4, code) == blen
        ok_snap = spb | (snap <= 0) | (caplen <= snap)
        keep = ok_if & ok_cap & ok_snap & ok_trailer
        if not keep.all():
            self._drop("bad_interface", ~ok_if, src, index)
            self._drop("bad_block_trailer", ok_if & ~ok_trailer, src, index)
            self._drop("bad_caplen", ok_if & ok_trailer & ~ok_cap, src, index)
            self._drop("caplen_gt_snaplen", ok_if & ok_trailer & ok_cap & ~ok_snap, src, index)
        ticks = (word(starts + 12, code).astype(np.uint64) << np.uint64(32)) | word(
            starts + 16, code
        ).astype(np.uint64)
        if len(table) == 1 or (table[:, 2] == table[0, 2]).all():
            div = np.uint64(table[0, 2])
        else:
            div = table[gi, 2].astype(np.uint64)
        ts = (ticks // div).astype(np.float64) + (ticks % div) / div
        if table[:, 3].any():
            ts += table[gi, 3]
        if source is not None and n:
            # Simple packet blocks carry no timestamp: they take the last one seen.
            idx = np.maximum.accumulate(np.where(spb, -1, np.arange(n)))
            ts = np.where(idx >= 0, ts[np.maximum(idx, 0)], source.last_ts)
            source.last_ts = float(ts[-1])
        linktype = table[gi, 0].astype(np.int32)
        recs = Records(src, data_off, caplen, wirelen, ts, linktype, index)
        if not keep.all():
            recs = recs.take(keep)
        return recs if len(recs) else None


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


def iter_record_chunks(
    paths: Sequence[str | Path],
    report: ReadReport,
    *,
    strict: bool = False,
    chunk_bytes: int = 8 << 20,
    on_error: str = "raise",
) -> Iterator[RecordChunk]:
    """Stream the packet records of several captures, one staging buffer at a time.

    The buffer is reused: a chunk's bytes are valid until the next one is requested.
    With ``on_error="raise"`` a file-level problem raises InputError; with ``"skip"``
    it is recorded in ``report.file_errors`` and the file ends there (records read
    before the problem are kept).
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
    paths = [str(p) for p in paths]
    sb = StagingBuffer(chunk_bytes)
    batch = RecordBatch(sb, report, strict)
    ended: list[int] = []
    pos = 0

    def flush() -> RecordChunk:
        nonlocal batch, ended, pos
        chunk = RecordChunk(sb, batch.build(), ended, paths)
        batch, ended, pos = RecordBatch(sb, report, strict), [], 0
        return chunk

    for i, path in enumerate(paths):
        try:
            source = open_capture(path, report, strict=strict)
        except InputError as exc:
            if on_error == "raise":
                raise
            report.file_errors.append((path, exc.problem))
            continue
        report.n_files += 1
        try:
            while not source.done:
                batch.src = i
                room = min(sb.capacity - pos, source.size - source.offset)
                n_read = os.preadv(source.fd, [sb.mv[pos : pos + room]], source.offset)
                data_end = pos + n_read
                at_eof = source.offset + n_read >= source.size
                try:
                    next_off = source.walk(sb.mv, pos, data_end, sb.chunk_bytes, at_eof, batch)
                except InputError as exc:
                    if on_error == "raise":
                        raise
                    source.error, source.done = exc, True
                    break
                source.offset += next_off - pos
                if source.skip_bytes:  # a block too large to read: step over it unread
                    if source.offset + source.skip_bytes > source.size:
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
        finally:
            source.close()
        ended.append(i)
        if pos >= sb.chunk_bytes:
            yield flush()
    if len(batch._starts) or batch._ready or ended:
        yield flush()
