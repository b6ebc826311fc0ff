"""Finding the input files of `prepare`, and fingerprints of flow rows."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flowsplit.data.idx import is_idx_file
from flowsplit.errors import InputError
from flowsplit.reader.capfile import COMPRESSED_SUFFIXES, open_file

# the compiled row hashes, built by `pip install`; without them NumPy's matmul
from flowsplit.reader.kernel import compiled as _kernel

CAPTURE_SUFFIXES = {".pcap", ".pcapng", ".cap", ".dmp"}
_CAPTURE_MAGICS = {
    b"\xd4\xc3\xb2\xa1",
    b"\xa1\xb2\xc3\xd4",
    b"\x4d\x3c\xb2\xa1",
    b"\xa1\xb2\x3c\x4d",
    b"\x0a\x0d\x0d\x0a",
}


@dataclass(frozen=True)
class SourceFile:
    """One input file: where it is, which input root it came from, what it holds."""

    path: Path
    root: Path
    rel: str
    kind: str  # capture | flowcsv | idx
    size: int


def classify(path: Path) -> str | None:
    """The kind of an input file, from its name and (for captures) its first bytes.

    Captures may be gzip, zstd or xz-compressed (``x.pcap.gz``, or any name when the
    decompressed bytes start like a capture).
    """
    name = path.name.lower()
    if is_idx_file(path):
        return "idx"
    if name.endswith(".csv"):
        return "flowcsv"
    if path.suffix.lower() in CAPTURE_SUFFIXES:
        return "capture"
    inner = Path(name[: -len(path.suffix)]).suffix if name.endswith(COMPRESSED_SUFFIXES) else ""
    if inner in CAPTURE_SUFFIXES:
        return "capture"
    try:
        file, head = open_file(str(path))
        file.close()
    except InputError:
        return None
    return "capture" if head[:4] in _CAPTURE_MAGICS else None


def discover(inputs: list[str | Path]) -> list[SourceFile]:
    """Expand files and folders into the input files, in a stable order.

    Folders are searched recursively; hidden files and files of no known kind
    (README, port maps) are ignored there, but a file named explicitly must be
    of a known kind.
    """
    if not inputs:
        raise InputError("prepare", "no input files or folders given")
    out: list[SourceFile] = []
    seen: set[Path] = set()
    for item in inputs:
        p = Path(item)
        if not p.exists():
            raise InputError(p, "no such file or folder")
        if p.is_dir():
            candidates = sorted(
                q
                for q in p.rglob("*")
                if q.is_file() and not any(s.startswith(".") for s in q.relative_to(p).parts)
            )
            root = p
        else:
            candidates, root = [p], p.parent
        for q in candidates:
            kind = classify(q)
            if kind is None:
                if not p.is_dir():
                    raise InputError(q, "not a capture (pcap/pcapng), flow CSV or IDX file")
                continue
            rq = Path(os.path.abspath(q))  # not resolve(): realpath costs a syscall per part
            if rq in seen:
                continue
            seen.add(rq)
            rel = str(q.relative_to(root)) if p.is_dir() else q.name
            try:
                rel.encode("utf-8")  # names are stored in the manifest, meta and labels
            except UnicodeEncodeError:
                shown = os.fsencode(q).decode("utf-8", "backslashreplace")
                raise InputError(
                    shown,
                    "its name is not valid UTF-8 (class and file names are stored as "
                    "text); rename it",
                ) from None
            out.append(SourceFile(q, root, rel, kind, q.stat().st_size))
    if not out:
        raise InputError(inputs[0], "no capture, flow CSV or IDX files found")
    return out


_HASH_KEYS: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}


def row_hashes(arrays: list[np.ndarray]) -> np.ndarray:
    """A 128-bit fingerprint of every row over several arrays (same number of rows).

    Two random linear hashes over the rows' 64-bit words (wrapping arithmetic),
    summed over the arrays with a different key per array: equal rows always
    collide, different rows collide with negligible chance. One compiled pass per array
    when the kernel is built (``_kernel.add_row_hashes``), else an integer matmul per
    array; no concatenated copy either way, so it costs little beside reading.
    """
    n = arrays[0].shape[0]
    h1 = np.zeros(n, dtype=np.uint64)
    h2 = np.zeros(n, dtype=np.uint64)
    for i, a in enumerate(arrays):
        rows = np.ascontiguousarray(a).reshape(n, -1).view(np.uint8)
        pad = (-rows.shape[1]) % 8
        if pad:
            rows = np.concatenate([rows, np.zeros((n, pad), np.uint8)], axis=1)
        words = rows.view(np.uint64)  # (n, W)
        key = (i, words.shape[1])
        if key not in _HASH_KEYS:
            rng = np.random.default_rng([0x5EED, *key])
            k = rng.integers(1, 2**63, size=(2, words.shape[1]), dtype=np.uint64) | np.uint64(1)
            _HASH_KEYS[key] = (k[0], k[1])
        k1, k2 = _HASH_KEYS[key]
        if _kernel is not None:  # the same sums in one compiled pass
            _kernel.add_row_hashes(np.ascontiguousarray(words), k1, k2, h1, h2)
            continue
        with np.errstate(over="ignore"):
            # integer matmul wraps modulo 2**64, which is the hash we want
            h1 += words @ k1
            h2 += (words ^ np.uint64(0x9E3779B97F4A7C15)) @ k2
    out = np.empty((n, 2), dtype=np.uint64)
    out[:, 0], out[:, 1] = h1, h2
    return out.view("S16").ravel()
