"""IDX (MNIST-format) files of preprocessed byte sessions, such as USTC-TFC2016.

The DeepTraffic project publishes traffic sessions as 28x28 "images": the first
784 bytes of each session, one IDX3 file of images and one IDX1 file of labels,
optionally gzipped. flowsplit reads them into the ``bytes`` view (one row of 784
uint8 per session) with their labels; class names come from a known table for the
published sets, or from the user.
"""

from __future__ import annotations

import gzip
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flowsplit.errors import InputError

# Type codes of the IDX format (third byte of the magic number).
_IDX_DTYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

# Class names of the DeepTraffic preprocessings of USTC-TFC2016 (label index order).
KNOWN_CLASS_NAMES = {
    "20class": [
        "BitTorrent", "Facetime", "FTP", "Gmail", "MySQL", "Outlook", "Skype", "SMB",
        "Weibo", "WorldOfWarcraft", "Cridex", "Geodo", "Htbot", "Miuref", "Neris",
        "Nsis-ay", "Shifu", "Tinba", "Virut", "Zeus",
    ],
    "10class_benign": [
        "BitTorrent", "Facetime", "FTP", "Gmail", "MySQL", "Outlook", "Skype", "SMB",
        "Weibo", "WorldOfWarcraft",
    ],
    "10class_malware": [
        "Cridex", "Geodo", "Htbot", "Miuref", "Neris", "Nsis-ay", "Shifu", "Tinba",
        "Virut", "Zeus",
    ],
}  # fmt: skip

_IMAGES_RE = re.compile(r"^(?P<stem>.*)-images-idx3-ubyte(\.gz)?$")


@dataclass
class IdxSet:
    """One pair of IDX files: images flattened to rows, and their labels."""

    images_path: Path
    labels_path: Path
    rows: np.ndarray  # (n, 784) uint8
    labels: np.ndarray  # (n,) int64
    class_names: list[str]


def is_idx_file(path: Path) -> bool:
    name = path.name
    return "-idx1-ubyte" in name or "-idx3-ubyte" in name


def read_idx(path: str | Path, max_bytes: int = 1 << 31) -> np.ndarray:
    """Read one IDX file (raw or gzipped) into an array of its declared shape."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            head = fh.read(4)
            if len(head) < 4:
                raise InputError(path, "empty or truncated IDX file (no magic number)")
            zero, type_code, ndim = struct.unpack(">HBB", head)
            if zero != 0 or type_code not in _IDX_DTYPES or not 1 <= ndim <= 4:
                raise InputError(path, f"not an IDX file (magic 0x{head.hex()})")
            dims_raw = fh.read(4 * ndim)
            if len(dims_raw) < 4 * ndim:
                raise InputError(path, "truncated IDX header")
            dims = struct.unpack(f">{ndim}I", dims_raw)
            dtype = _IDX_DTYPES[type_code]
            expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
            if expected > max_bytes:
                raise InputError(path, f"IDX header declares {expected} bytes, over the limit")
            data = fh.read(expected)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(path, f"cannot read IDX file ({exc})") from None
    if len(data) < expected:
        raise InputError(path, f"truncated IDX data: {len(data)} of {expected} bytes")
    return np.frombuffer(data, dtype=dtype).reshape(dims)


def find_idx_pairs(paths: list[Path]) -> list[tuple[Path, Path]]:
    """Pair every ``*-images-idx3-ubyte[.gz]`` with its ``*-labels-idx1-ubyte[.gz]``."""
    pairs = []
    by_name = {p.name: p for p in paths}
    for p in paths:
        m = _IMAGES_RE.match(p.name)
        if not m:
            continue
        stem = m.group("stem")
        label = next(
            (
                by_name[n]
                for n in (f"{stem}-labels-idx1-ubyte.gz", f"{stem}-labels-idx1-ubyte")
                if n in by_name
            ),
            None,
        )
        if label is None:
            raise InputError(p, f"no matching labels file {stem}-labels-idx1-ubyte[.gz] beside it")
        pairs.append((p, label))
    if not pairs and paths:
        raise InputError(paths[0], "IDX labels file without a matching *-images-idx3-ubyte file")
    return pairs


def guess_class_names(images_path: Path, n_classes: int) -> list[str] | None:
    """Class names of a known DeepTraffic set, judged from the file name."""
    name = images_path.name.lower()
    for key, names in KNOWN_CLASS_NAMES.items():
        prefix = key.split("_")[0]
        kind = key.split("_")[1] if "_" in key else None
        if name.startswith(prefix) and len(names) == n_classes and (kind is None or kind in name):
            return list(names)
    return None


def read_idx_set(
    images_path: Path, labels_path: Path, class_names: list[str] | None = None
) -> IdxSet:
    """Read a pair of IDX files into byte rows, labels and class names."""
    images = read_idx(images_path)
    labels = read_idx(labels_path).astype(np.int64)
    if labels.ndim != 1:
        raise InputError(labels_path, f"labels must be 1-D, got shape {labels.shape}")
    if images.shape[0] != labels.shape[0]:
        raise InputError(
            images_path,
            f"{images.shape[0]} images but {labels.shape[0]} labels in {labels_path.name}",
        )
    if images.dtype != np.uint8:
        raise InputError(images_path, f"expected unsigned bytes, got {images.dtype}")
    rows = images.reshape(images.shape[0], -1)
    n_classes = int(labels.max()) + 1 if len(labels) else 0
    if labels.size and labels.min() < 0:
        raise InputError(labels_path, "negative label")
    if class_names is None:
        class_names = guess_class_names(images_path, n_classes) or [
            f"class_{i}" for i in range(n_classes)
        ]
    elif len(class_names) < n_classes:
        raise InputError(
            labels_path,
            f"labels go up to {n_classes - 1} but only {len(class_names)} class names were given",
        )
    return IdxSet(images_path, labels_path, rows, labels, list(class_names))


BYTE_STATS_COLUMNS: tuple[str, ...] = (
    "len_nonzero_tail",
    "n_zero",
    "mean",
    "std",
    "entropy",
    "frac_printable",
    "frac_ascii_letters",
    "frac_high",
    *(f"hist_{i:02d}" for i in range(16)),
    *(f"byte_{i:02d}" for i in range(24)),
)


def byte_stats(rows: np.ndarray) -> np.ndarray:
    """Statistics of byte rows for tree models: (n, 48) float32.

    Payload bytes carry no packet timing, so for IDX sets the ``stats`` view is
    made of content statistics: length before the zero padding, byte-value
    histogram (16 bins), entropy, printable share, and the first 24 bytes
    (protocol headers in the payload, the field's strongest cue).
    """
    rows = np.asarray(rows, dtype=np.uint8)  # (n, K)
    n, k = rows.shape
    nz = rows != 0
    # position of the last non-zero byte + 1 = payload length before padding
    last = np.where(nz.any(axis=1), k - np.argmax(nz[:, ::-1], axis=1), 0)
    vals = rows.astype(np.float32)
    # one bincount over (row, value) pairs instead of a Python loop or np.add.at
    flat = np.repeat(np.arange(n, dtype=np.int64) * 256, k) + rows.ravel()
    counts = np.bincount(flat, minlength=n * 256).reshape(n, 256).astype(np.float32)
    hist = counts.reshape(n, 16, 16).sum(axis=2) / k
    p = counts / k
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.nansum(np.where(p > 0, p * np.log2(p), 0.0), axis=1)
    printable = ((rows >= 32) & (rows < 127)).mean(axis=1)
    letters = (((rows >= 65) & (rows <= 90)) | ((rows >= 97) & (rows <= 122))).mean(axis=1)
    high = (rows >= 128).mean(axis=1)
    first = vals[:, :24] if k >= 24 else np.pad(vals, ((0, 0), (0, 24 - k)))
    out = np.column_stack(
        [
            last,
            (~nz).sum(axis=1),
            vals.mean(axis=1),
            vals.std(axis=1),
            entropy,
            printable,
            letters,
            high,
            hist,
            first,
        ]
    ).astype(np.float32)
    return out
