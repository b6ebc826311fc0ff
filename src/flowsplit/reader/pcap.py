"""Capture formats: classic pcap and pcapng, walked into packet-record offsets.

Reading is two-phase, so that pure Python stays fast:

1. a tight loop walks the record headers (each length gives the next offset and
   nothing else is looked at), appending offsets to a list shared by all files of
   a chunk (:class:`~flowsplit.reader.staging.RecordBatch`);
2. every per-record field (timestamps, lengths, interface, link type) is gathered
   later with vectorised NumPy over all offsets of the chunk at once.

Every length field is checked before it is trusted: a record can never make the
walk stand still, run backwards or read outside the bytes that were read.
"""

from __future__ import annotations

import collections
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from flowsplit.errors import InputError
from flowsplit.reader.capfile import open_file

# the compiled record walks, built by `pip install`; without them Python walks
from flowsplit.reader.kernel import compiled as _kernel

MAX_CAPLEN = 262144  # libpcap's MAXIMUM_SNAPLEN: no sane record captures more
MAX_RECORD = MAX_CAPLEN + 8192  # a packet record or block, with headers and options

LINKTYPE_NAMES = {
    0: "NULL",
    1: "ETHERNET",
    9: "PPP",
    12: "RAW",
    14: "RAW",
    101: "RAW",
    104: "C_HDLC",
    105: "IEEE802_11",
    108: "LOOP",
    113: "LINUX_SLL",
    127: "IEEE802_11_RADIOTAP",
    192: "PPI",
    228: "IPV4",
    229: "IPV6",
    239: "NFLOG",
    276: "LINUX_SLL2",
}
SUPPORTED_LINKTYPES = frozenset(
    {0, 1, 9, 12, 14, 101, 104, 105, 108, 113, 127, 192, 228, 229, 239, 276}
)

# Per-record problems that strict mode turns into an InputError; the other reasons
# (non-IP frames, fragments, other protocols, ...) are normal traffic we do not use.
MALFORMED_REASONS = frozenset(
    {
        "truncated_record",
        "bad_caplen",
        "oversized_record",
        "bad_interface",
        "bad_block_trailer",
        "bad_block_length",
        "truncated_packet",
        "bad_ip_header",
        "bad_ipv6_ext",
        "bad_tcp_header",
        "bad_udp_header",
        "bad_tunnel_header",
    }
)

PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6),
    b"\xa1\xb2\xc3\xd4": (">", 1e-6),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9),
    b"\xa1\xb2\x3c\x4d": (">", 1e-9),
}
_RESYNC_SECONDS = 366 * 86400  # a record found after corruption is this close in time
_SHB = 0x0A0D0D0A
_BOM = 0x1A2B3C4D
_PACKET_BLOCKS = (2, 3, 6)  # obsolete packet, simple packet, enhanced packet
# Block types a resynchronisation may land on: interface, packets, name resolution,
# interface statistics, section header.
_KNOWN_BLOCKS = np.array([1, 2, 3, 4, 5, 6, _SHB], dtype=np.uint32)


@dataclass
class ReadReport:
    """Counters filled while reading one or many files."""

    n_packets: int = 0
    """Packet records read (every record, used or not)."""
    n_flow_packets: int = 0
    """TCP/UDP packets assigned to flows (a reassembled datagram counts once)."""
    n_merged: int = 0
    """Fragment records joined into a reassembled datagram beyond the one it counts as:
    ``n_packets == n_flow_packets + n_merged + sum(skipped.values())``."""
    skipped: collections.Counter = field(default_factory=collections.Counter)
    """Reason -> number of records not used (non_ip, ip_fragment, non_tcp_udp, ...)."""
    recovered: collections.Counter = field(default_factory=collections.Counter)
    """Rule -> records read by a recovery rule that a strict reader would skip
    (``ipv4_after_unknown_type``: an IPv4 header with a correct checksum behind a link
    type field that names no IP protocol). Counted as read, not skipped."""
    n_files: int = 0
    """Files opened successfully."""
    n_flows: int = 0
    """Flows emitted."""
    file_errors: list[tuple[str, str]] = field(default_factory=list)
    """(path, problem) of files given up on (only with ``on_error="skip"``)."""
    digests: dict[str, str] = field(default_factory=dict)
    """path -> digest of the file (the algorithm asked for), computed while reading it."""

    def skip(self, reason: str, n: int, path: str, *, strict: bool, where: str = "") -> None:
        """Count ``n`` unused records; in strict mode a malformed one raises InputError."""
        if n <= 0:
            return
        if strict and reason in MALFORMED_REASONS:
            raise InputError(path, f"{reason.replace('_', ' ')}{where}")
        self.skipped[reason] += int(n)


class Source:
    """An open capture file, read in pieces; subclasses know the record format."""

    def __init__(self, path: str, file, report: ReadReport, strict: bool):
        self.path, self.file = path, file  # a capfile.PlainFile or DecompressedFile
        self.report, self.strict = report, strict
        self.offset = 0  # file offset of the next record not consumed yet
        self.n_records = 0  # packet records met so far (numbers the next one)
        self.done = False
        self.error: InputError | None = None
        self.skip_bytes = 0  # set by a walk: a block too large to read, skipped unread

    def fail(self, problem: str) -> None:
        """End the file with a file-level problem (raised or recorded by the driver)."""
        self.error = InputError(self.path, problem)
        self.done = True

    def skip(self, reason: str, n: int = 1, where: str = "") -> None:
        self.report.skip(reason, n, self.path, strict=self.strict, where=where)

    def lost_record(self, reason: str, where: str, *, ends_file: bool = True) -> None:
        """A record we cannot use (cut short, or with an impossible length)."""
        self.n_records += 1
        self.report.n_packets += 1
        self.skip(reason, 1, f" (record {self.n_records - 1}{where})")
        self.done = self.done or ends_file

    def walk(self, mv: memoryview, pos: int, data_end: int, stop: int, at_eof: bool, batch):
        """Collect the records in mv[pos:data_end] that start before ``stop``.

        Returns the offset of the first record not consumed.
        """
        raise NotImplementedError

    def close(self) -> None:
        self.file.close()


class PcapSource(Source):
    """Classic pcap: a 24-byte file header, then records with 16-byte headers."""

    def __init__(self, path, file, report, strict, head: bytes):
        super().__init__(path, file, report, strict)
        self.endian, self.tick = PCAP_MAGICS[head[:4]]
        if len(head) < 24:
            raise InputError(path, f"truncated pcap file header ({len(head)} of 24 bytes)")
        snaplen, lt_field = struct.unpack(self.endian + "II", head[16:24])
        # The upper bits of the link-type field carry FCS information, not the type.
        self.linktype = lt_field & 0xFFFF
        if self.linktype not in SUPPORTED_LINKTYPES:
            name = LINKTYPE_NAMES.get(self.linktype, "unknown")
            raise InputError(path, f"unsupported link type {self.linktype} ({name})")
        self.snaplen = snaplen if 0 < snaplen < MAX_CAPLEN else MAX_CAPLEN
        self.offset = 24
        self._lost_sync = False  # a corrupt record seen; looking for the next good one
        self._last_sec: int | None = None  # seconds of the last good record
        self._caplen_at = struct.Struct(self.endian + "I").unpack_from

    def walk(self, mv, pos, data_end, stop, at_eof, batch):
        if self._lost_sync:
            found = self._resync(mv, pos, data_end, at_eof)
            if self._lost_sync or self.done or found != pos:
                return found
        last = min(stop - 1, data_end - 16)  # the last offset a record may start at
        starts = batch.starts
        n0 = len(starts)
        off = pos
        if last >= pos:
            off = self._chain(mv, off, last, starts)
            caplen_at = self._caplen_at
            if off + 16 <= data_end and caplen_at(mv, off + 8)[0] > MAX_CAPLEN:
                # A length no capture can have: look for the next record that makes sense.
                self._register(batch, starts, n0, mv)
                where = f": {caplen_at(mv, off + 8)[0]} bytes"
                self.lost_record("bad_caplen", where, ends_file=False)
                return self._resync(mv, off + 1, data_end, at_eof)
            if len(starts) > n0:
                last_start = starts[-1]
                if last_start + 16 + caplen_at(mv, last_start + 8)[0] > data_end:
                    off = starts.pop()  # the last record is not all here yet
        self._register(batch, starts, n0, mv)
        if at_eof and off >= data_end:
            self.done = True
        elif at_eof and (
            off + 16 > data_end or off + 16 + self._caplen_at(mv, off + 8)[0] > data_end
        ):
            self.lost_record("truncated_record", " cut by end of file")
        return off

    def _chain(self, mv, off: int, last: int, starts) -> int:
        """Append the chain of records from ``off`` that start by ``last`` with a length
        a capture can have; the offset of the first record not taken."""
        if _kernel is not None:
            return _kernel.pcap_chain(mv, off, last, self.endian == ">", MAX_CAPLEN, starts)
        # mv8[off] is the caplen field of a record at off; the view ends so that
        # unpacking fails exactly past `last`, which ends the loop without a test.
        mv8 = mv[8 : last + 12]
        caplen_at, append = self._caplen_at, starts.append
        try:
            while True:
                append(off)
                (caplen,) = caplen_at(mv8, off)
                if caplen > MAX_CAPLEN:
                    break
                off += 16 + caplen
        except struct.error:
            pass
        return starts.pop()

    def _resync(self, mv, lo: int, data_end: int, at_eof: bool) -> int:
        """After a corrupt record: the offset of the next plausible record header.

        A header is plausible when its lengths are non-zero, fit the snapshot length and each
        other, its sub-second field fits the tick, its seconds are within a year of
        the last good record's, and the header its length points to is plausible
        too (or is the end of the file). Until one is found the walk keeps looking
        in the bytes read next; none before the end of the file ends it.
        """
        self._lost_sync = True
        n = data_end - lo - 16 + 1
        if n > 0:
            for c in np.flatnonzero(self._plausible(mv, lo, n)).tolist():
                nxt = lo + c + 16 + self._caplen_at(mv, lo + c + 8)[0]
                if nxt + 16 > data_end and not at_eof:
                    return lo + c  # decided once the bytes after it are read
                if (nxt == data_end and at_eof) or (
                    nxt + 16 <= data_end and self._plausible(mv, nxt, 1)[0]
                ):
                    self._lost_sync = False
                    return lo + c
        if at_eof:
            self._lost_sync, self.done = False, True
            return data_end
        return max(lo, data_end - 15)  # a header may start in the last 15 bytes

    def _plausible(self, mv, lo: int, n: int) -> np.ndarray:
        """Whether a record header could start at each of lo .. lo + n - 1."""
        buf = np.frombuffer(mv, dtype=np.uint8, count=n + 15, offset=lo)
        dt = np.dtype(self.endian + "u4")
        sec, frac, cap, wire = (
            np.ndarray((n,), dtype=dt, buffer=buf, offset=k, strides=(1,)) for k in (0, 4, 8, 12)
        )
        ok = (cap > 0) & (cap <= self.snaplen) & (cap <= wire) & (wire <= MAX_CAPLEN)
        ok &= frac < round(1 / self.tick)
        if self._last_sec is not None:
            ok &= np.abs(sec.astype(np.int64) - self._last_sec) < _RESYNC_SECONDS
        return ok

    def _register(self, batch, starts, n0: int, mv=None) -> None:
        n = len(starts) - n0
        if n and mv is not None:
            self._last_sec = struct.unpack_from(self.endian + "I", mv, starts[-1])[0]
        if n:
            batch.add_pcap(self, n)
            self.n_records += n
            self.report.n_packets += n


class PcapngSource(Source):
    """pcapng: blocks of (type, length, body, length); packets in EPB, SPB and OPB."""

    def __init__(self, path, file, report, strict, head: bytes):
        super().__init__(path, file, report, strict)
        if len(head) < 12:
            raise InputError(path, "truncated pcapng section header")
        self._set_section(head, 0, where="file header")
        self.interfaces: list[tuple[int, int, int, float]] = []  # linktype, snaplen, div, off
        self._any_supported = False
        self.last_ts = 0.0  # for simple packet blocks, which carry no timestamp
        self._lost_sync = False  # a corrupt block seen; looking for the next good one

    def _set_section(self, data, off: int, where: str) -> None:
        bom = struct.unpack_from("<I", data, off + 8)[0]
        if bom == _BOM:
            self.endian = "<"
        elif bom == 0x4D3C2B1A:
            self.endian = ">"
        else:
            raise InputError(self.path, f"bad pcapng byte-order magic 0x{bom:08x} ({where})")
        self._hdr = struct.Struct(self.endian + "II").unpack_from
        length = self._hdr(data, off)[1]
        if length < 28 or length % 4:
            raise InputError(self.path, f"section header block with impossible length {length}")

    def walk(self, mv, pos, data_end, stop, at_eof, batch):
        if self._lost_sync:
            found = self._resync(mv, pos, data_end, at_eof)
            if self._lost_sync or self.done or found != pos:
                return found
        stop = min(stop, data_end - 8)  # blocks start before this (a header must fit)
        hdr = self._hdr
        epbs = batch.starts
        n0 = len(epbs)
        off = pos
        mvl = mv[: max(stop, 0) + 7]  # unpacking a header at off fails exactly at off >= stop
        append = epbs.append
        runs = _EpbRuns(mv, data_end, stop)
        while True:
            if _kernel is not None:  # a run of enhanced packet blocks, compiled
                off, at_stop = _kernel.epb_chain(mv, off, stop, data_end, self.endian == ">", epbs)
                if at_stop:
                    break
                btype, blen = hdr(mvl, off)
            else:
                # Fastest path: a run of enhanced packet blocks found with NumPy; the
                # loop below then goes on from the first block the run does not cover.
                off = runs.extend(off, self.endian, epbs)
                try:  # fast path: a run of enhanced packet blocks
                    while True:
                        btype, blen = hdr(mvl, off)
                        if btype != 6 or blen < 32 or off + blen > data_end:
                            break
                        append(off)
                        off += blen
                except struct.error:
                    break
            # Slow path: any other block, or an EPB that needs a closer look.
            if btype == _SHB:
                if off + 12 > data_end:
                    break
                n0 = self._register(batch, n0)
                self._set_section(mv, off, where=f"offset {self.offset + off - pos}")
                hdr = self._hdr
                blen = hdr(mv, off)[1]  # the length in the new section's byte order
            if blen < 12 or blen % 4:
                # A corrupt block: look for the next block that makes sense.
                self._register(batch, n0)
                where = f" at offset {self.offset + off - pos}: length {blen}"
                self.lost_record("bad_block_length", where, ends_file=False)
                return self._resync(mv, off + 4, data_end, at_eof)
            if blen > MAX_RECORD:
                if btype in _PACKET_BLOCKS:
                    self.lost_record("oversized_record", f": {blen}-byte block", ends_file=False)
                self.skip_bytes = blen
                break
            if off + blen > data_end:
                break
            if btype == _SHB:
                self.interfaces = []
            elif btype == 1:
                n0 = self._register(batch, n0)  # packets before an interface use the old table
                self._add_interface(mv, off, blen)
            elif btype in _PACKET_BLOCKS:
                if btype == 6 or (btype == 2 and blen < 32) or (btype == 3 and blen < 16):
                    n0 = self._register(batch, n0)
                    self.lost_record("bad_caplen", f": {blen}-byte block", ends_file=False)
                else:  # simple or obsolete packet block: a run of its own
                    n0 = self._register(batch, n0)
                    append(off)
                    n0 = self._register(batch, n0, btype)
            off += blen  # other block types (name resolution, statistics, ...) are skipped
        self._register(batch, n0)
        if self.skip_bytes:
            return off
        if at_eof and off >= data_end:
            self.done = True
        elif at_eof and (off + 8 > data_end or off + hdr(mv, off)[1] > data_end):
            self.lost_record("truncated_record", " cut by end of file")
        if self.done and self.n_records and self.interfaces and not self._any_supported:
            lts = sorted({i[0] for i in self.interfaces})
            self.fail(f"no interface with a supported link type (link types {lts})")
        return off

    def _resync(self, mv, lo: int, data_end: int, at_eof: bool) -> int:
        """After a corrupt block: the offset of the next plausible block.

        Plausible: a known block type, a length that is a multiple of 4 and at most
        MAX_RECORD, and the same length repeated at the block's end. Every byte
        offset is tried: the junk before it need not be a multiple of 4 long.
        """
        self._lost_sync = True
        n = data_end - lo - 8 + 1
        if n > 0:
            buf = np.frombuffer(mv, dtype=np.uint8, count=n + 7, offset=lo)
            dt = np.dtype(self.endian + "u4")
            btype, blen = (
                np.ndarray((n,), dtype=dt, buffer=buf, offset=k, strides=(1,)) for k in (0, 4)
            )
            ok = np.isin(btype, _KNOWN_BLOCKS) & (blen >= 12) & (blen % 4 == 0)
            ok &= blen <= MAX_RECORD
            for k in np.flatnonzero(ok).tolist():
                at, length = lo + k, int(blen[k])
                if at + length > data_end:
                    if at_eof:
                        continue
                    return at  # decided once the rest of the block is read
                if self._hdr(mv, at + length - 8)[1] == length:
                    self._lost_sync = False
                    return at
        if at_eof:
            self._lost_sync, self.done = False, True
            return data_end
        return max(lo, data_end - 7)  # a header may start in the last 7 bytes

    def _add_interface(self, mv, off: int, blen: int) -> None:
        e = self.endian
        linktype, _, snaplen = struct.unpack_from(e + "HHI", mv, off + 8)
        div, tsoff = 10**6, 0.0
        opt, end = off + 16, off + blen - 4
        while opt + 4 <= end:
            code, olen = struct.unpack_from(e + "HH", mv, opt)
            if code == 0:
                break
            if code == 9 and olen >= 1 and opt + 5 <= end:
                v = mv[opt + 4]
                exp = v & 0x7F
                if (v & 0x80 and exp > 63) or (not v & 0x80 and exp > 19):
                    raise InputError(self.path, f"impossible timestamp resolution 0x{v:02x}")
                div = 2**exp if v & 0x80 else 10**exp
            elif code == 14 and olen >= 8 and opt + 12 <= end:
                tsoff = float(struct.unpack_from(e + "q", mv, opt + 4)[0])
            opt += 4 + ((olen + 3) & ~3)
        self.interfaces.append((linktype, snaplen, max(div, 1), tsoff))
        self._any_supported |= linktype in SUPPORTED_LINKTYPES

    def _register(self, batch, n0: int, kind: int = 6) -> int:
        """Hand the packet blocks appended since ``n0`` to the batch; the new ``n0``."""
        n = len(batch.starts) - n0
        if n:
            batch.add_ng(self, n, kind)
            self.n_records += n
            self.report.n_packets += n
        return len(batch.starts)


class _EpbRuns:
    """Runs of enhanced packet blocks in one walk's bytes, found with NumPy.

    The block chain is sequential (each length gives the next offset), but nearly
    every block of a capture is an EPB: every offset (in the chain's class modulo 4)
    whose words read like an EPB header with a matching trailer is a candidate, and
    runs of candidates that each end where the next begins are taken at once. A
    candidate inside a packet's bytes is never taken, because the chain is followed
    only by each taken block's own length. Every block taken is one the Python
    loop would take (type 6, length >= 32 and a multiple of 4, starting before
    ``stop``, ending by ``data_end``), so the loop resumes where a run ends with
    exactly the state it would have reached itself.
    """

    _MIN_BYTES = 4096  # below this the Python loop is as fast

    def __init__(self, mv, data_end: int, stop: int):
        self.mv, self.data_end, self.stop = mv, data_end, stop
        self._key = None  # (endian, offset % 4) of the candidates below
        self.cand = self.blen = self.nxt_ok = None

    def _candidates(self, off: int, endian: str) -> None:
        n = (self.stop - off + 3) // 4  # words that may start a block before stop
        end = self.data_end
        count = min(n + 1, (end - off) // 4)  # header words, within the bytes read
        if count < 2:
            self.cand = np.zeros(0, dtype=np.int64)
            return
        words = np.frombuffer(self.mv, dtype=np.dtype(endian + "u4"), count=count, offset=off)
        # Only the type word is looked at everywhere; the rest only where it is 6.
        i = np.flatnonzero(words[: min(n, count - 1)] == 6)
        length = words[i + 1].astype(np.int64)
        cand = off + 4 * i
        ok = (length >= 32) & (length % 4 == 0) & (cand + length <= end)
        cand, length = cand[ok], length[ok]
        trailer = np.ndarray(
            (end - 3,), dtype=np.dtype(endian + "u4"), buffer=self.mv, strides=(1,)
        )[cand + length - 4]
        keep = trailer == length
        self.cand, self.blen = cand[keep], length[keep]
        self.next_at = self.cand + self.blen
        # A run continues from candidate k to k + 1 when block k ends where k + 1 starts.
        self.breaks = np.flatnonzero(self.next_at[:-1] != self.cand[1:])

    def extend(self, off: int, endian: str, out: list) -> int:
        """Append the run of EPBs starting at ``off`` (if any) to ``out``; the offset
        after it."""
        if self.stop - off < self._MIN_BYTES:
            return off
        if self._key != (endian, off % 4):
            self._key = (endian, off % 4)
            self._candidates(off, endian)
        cand, parts = self.cand, []
        k = int(np.searchsorted(cand, off))
        while k < len(cand) and cand[k] == off:
            # The run goes on to the next break (or the last candidate).
            b = int(np.searchsorted(self.breaks, k))
            last = int(self.breaks[b]) if b < len(self.breaks) else len(cand) - 1
            parts.append(cand[k : last + 1])
            off = int(self.next_at[last])
            k = last + 1
            if k < len(cand) and cand[k] != off:
                k = int(np.searchsorted(cand, off))
        if parts:
            out.extend(np.concatenate(parts).tolist())
        return off


def open_capture(
    path: str | Path, report: ReadReport, *, strict: bool = False, digest: str | None = None
) -> Source:
    """Open a pcap or pcapng file (maybe gzip/zstd/xz-compressed), check its header.

    Raises InputError.
    """
    path = str(path)
    file, head = open_file(path, digest=digest)
    try:
        if head[:4] in PCAP_MAGICS:
            return PcapSource(path, file, report, strict, head)
        if head[:4] == b"\x0a\x0d\x0d\x0a":
            return PcapngSource(path, file, report, strict, head)
        what = f"{file.compression}-compressed file" if file.compression else "capture file"
        if len(head) < 4:
            raise InputError(path, f"not a {what} (only {len(head)} bytes)")
        raise InputError(path, f"not a pcap or pcapng {what} (magic 0x{head[:4].hex()})")
    except BaseException:
        file.close()
        raise
