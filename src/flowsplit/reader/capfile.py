"""Positional reads of a capture file, plain or compressed (gzip, zstd, xz).

The record walk reads a capture front to back in pieces, re-reading at most the
unfinished tail of the previous piece. A plain file is read with ``pread``; a
compressed one is decompressed as a stream into a window that starts at the
oldest offset still wanted, so memory stays bounded by one chunk whatever the
file's size. Compression is recognised by its magic bytes, not the file name.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import sys
import zlib

from flowsplit.errors import InputError

# Python 3.14's zstd module; backports.zstd is the same code for older Pythons.
if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

DIGESTS = ("blake3", "sha256")
"""Digests a capture can be given in the manifest: BLAKE3 (``b3sum``; about 3x faster
than SHA-256 on one core here) or SHA-256 (``sha256sum``)."""


def new_hash(name: str):
    """A fresh hash object of one of :data:`DIGESTS` (``update``, ``hexdigest``)."""
    if name == "sha256":
        return hashlib.sha256()
    if name == "blake3":
        from blake3 import blake3  # one thread: the reader's core

        return blake3()
    raise ValueError(f"digest must be one of {', '.join(DIGESTS)}, not {name!r}")


COMPRESSION_MAGICS = {
    b"\x1f\x8b": "gzip",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"\xfd7zXZ\x00": "xz",
}
COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd", ".xz")
_READ = 1 << 20  # compressed bytes read per step


def compression_of(head: bytes) -> str | None:
    """gzip, zstd or xz from a file's first bytes; None for an uncompressed file."""
    for magic, name in COMPRESSION_MAGICS.items():
        if head.startswith(magic):
            return name
    return None


class _Hashing:
    """A digest (:data:`DIGESTS`) of a file's bytes on disk, fed as the reader first
    reads them.

    The reader reads forwards (re-reading only an unfinished tail), so every byte is
    hashed once, in order; :meth:`hexdigest` reads and hashes whatever the reader
    never got to (a file given up on, a block skipped unread).
    """

    def __init__(self, fd: int, digest: str | None):
        self._fd = fd
        self._hash = new_hash(digest) if digest else None
        self._done = 0  # bytes of the file hashed so far

    def feed(self, data, offset: int) -> None:
        """``data`` is the file's bytes at ``offset`` (parts already hashed are skipped)."""
        if self._hash is None:
            return
        if offset > self._done:
            self._catch_up(offset)
        end = offset + len(data)
        if end > self._done:
            self._hash.update(memoryview(data)[self._done - offset :])
            self._done = end

    def _catch_up(self, offset: int | None) -> None:
        while offset is None or self._done < offset:
            want = _READ if offset is None else min(_READ, offset - self._done)
            block = os.pread(self._fd, want, self._done)
            if not block:
                return
            self._hash.update(block)
            self._done += len(block)

    def hexdigest(self) -> str | None:
        if self._hash is None:
            return None
        self._catch_up(None)
        return self._hash.hexdigest()


class PlainFile:
    """An uncompressed file: positional reads straight from the descriptor."""

    compression = None

    def __init__(self, path: str, fd: int, size: int, *, digest: str | None = None):
        self.path, self.fd, self.size = path, fd, size
        self.hashing = _Hashing(fd, digest)

    def read_into(self, view: memoryview, offset: int) -> int:
        """Fill ``view`` with the bytes at ``offset``; the number read."""
        n = os.preadv(self.fd, [view], offset)
        self.hashing.feed(view[:n], offset)
        return n

    def at_eof(self, offset: int) -> bool:
        """No byte at or after ``offset``."""
        return offset >= self.size

    def reaches(self, offset: int) -> bool:
        """The file has at least ``offset`` bytes."""
        return offset <= self.size

    def close(self) -> None:
        os.close(self.fd)


class DecompressedFile:
    """A compressed file read as its decompressed bytes, forwards only."""

    def __init__(
        self, path: str, fd: int, size: int, compression: str, *, digest: str | None = None
    ):
        self.path, self.fd, self.size, self.compression = path, fd, size, compression
        self.hashing = _Hashing(fd, digest)  # of the compressed bytes: the file on disk
        self._window = bytearray()  # decompressed bytes from self._base on
        self._base = 0
        self._file_pos = 0  # compressed bytes consumed
        self._done = False
        self._decoder = self._new_decoder()

    def _new_decoder(self):
        if self.compression == "gzip":
            return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        if self.compression == "xz":
            return lzma.LZMADecompressor()
        return zstd.ZstdDecompressor()

    def _more(self) -> None:
        """Decompress one more step into the window (sets _done at the end)."""
        raw = os.pread(self.fd, _READ, self._file_pos)
        self.hashing.feed(raw, self._file_pos)
        self._file_pos += len(raw)
        out, data = b"", raw
        try:
            while data:
                # Concatenated members (gzip, xz streams, zstd frames): a member that
                # ended, here or at the end of the last step, is followed by a new one.
                if self._decoder.eof:
                    self._decoder = self._new_decoder()
                out += self._decoder.decompress(data)
                data = self._decoder.unused_data if self._decoder.eof else b""
        except (zlib.error, lzma.LZMAError, zstd.ZstdError, EOFError) as exc:
            raise InputError(self.path, f"corrupt {self.compression} data ({exc})") from None
        self._window += out
        if not raw:
            if not self._decoder.eof:
                raise InputError(self.path, f"{self.compression} data cut short")
            self._done = True

    def _drop_before(self, offset: int) -> None:
        if offset < self._base:
            raise ValueError(f"{self.path}: read at {offset} before the window ({self._base})")
        del self._window[: offset - self._base]
        self._base = offset

    def read_into(self, view: memoryview, offset: int) -> int:
        self._drop_before(min(offset, self._base + len(self._window)))
        while self._base + len(self._window) < offset + len(view) and not self._done:
            self._more()
        start = offset - self._base
        n = max(min(len(view), len(self._window) - start), 0)
        view[:n] = self._window[start : start + n]
        return n

    def at_eof(self, offset: int) -> bool:
        while not self._done and self._base + len(self._window) <= offset:
            self._more()
        return self._done and offset >= self._base + len(self._window)

    def reaches(self, offset: int) -> bool:
        # Skipping forward: drop what is passed, so a huge skipped block costs no memory.
        while self._base + len(self._window) < offset and not self._done:
            self._drop_before(self._base + len(self._window))
            self._more()
        return self._base + len(self._window) >= offset

    def close(self) -> None:
        os.close(self.fd)


def open_file(
    path: str, *, digest: str | None = None
) -> tuple[PlainFile | DecompressedFile, bytes]:
    """The file, and its first 24 (decompressed) bytes; raises InputError.

    With ``digest`` (one of :data:`DIGESTS`) the file's digest is computed as it is
    read (``file.hashing.hexdigest()``).
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise InputError(path, f"cannot open ({exc.strerror or exc})") from None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            raise InputError(path, "empty file")
        kind = compression_of(os.pread(fd, 6, 0))
        if kind is None:
            f = PlainFile(path, fd, size, digest=digest)
        else:
            f = DecompressedFile(path, fd, size, kind, digest=digest)
        head = bytearray(24)
        n = f.read_into(memoryview(head), 0)
        return f, bytes(head[:n])
    except BaseException:
        os.close(fd)
        raise
