"""The dataset store: one directory per prepared dataset.

Layout of a dataset directory ``DIR``::

    DIR/manifest.json     schema version, sources, options, classes, counts, views, splits
    DIR/meta.parquet      one row per flow: flow_id, source, group, label, label_name, split, ...
    DIR/stats.parquet     the ``stats`` view (float32 columns), same row order as meta
    DIR/<view>.npy        tensor views (``seq``, ``bytes``, ``pkt_bytes``), memory-mappable

Rows are flows; row ``i`` of every file is the same flow. ``meta.split`` is one of
``train``, ``val``, ``test``. A dataset is written under a temporary name and renamed
into place at the end, so an interrupted ``prepare`` never leaves a half-written DIR
that looks complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
import tempfile
import time
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flowsplit import __version__
from flowsplit.errors import InputError
from flowsplit.inputs import read_json_input
from flowsplit.outputs import (  # noqa: F401  (re-exported: the dataset tools' writers)
    _umask,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    check_writable,
    named_os_error,
    output_file,
)
from flowsplit.reader.capfile import new_hash

SCHEMA_VERSION = 1
SPLITS = ("train", "val", "test")
TENSOR_VIEWS = ("seq", "bytes", "pkt_bytes")
ALL_VIEWS = (*TENSOR_VIEWS, "stats")
META_REQUIRED = ("flow_id", "source", "group", "label", "label_name", "split")


def file_digest(path: str | Path, algo: str = "blake3", chunk: int = 1 << 20) -> str:
    """Hex digest of a file (an algorithm of ``capfile.DIGESTS``), read in chunks
    (bounded memory)."""
    h = new_hash(algo)
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


class NpyAppender:
    """Append rows of a fixed trailing shape to a ``.npy`` file with bounded memory.

    The header is written with room for any final shape and rewritten by
    :meth:`close`, so the file is a valid ``.npy`` (format 1.0) that
    ``np.load(..., mmap_mode="r")`` opens without copying.
    """

    _HEADER_LEN = 128  # bytes, a multiple of 64 as numpy requires

    def __init__(self, path: str | Path, row_shape: tuple[int, ...], dtype: Any):
        self.path = Path(path)
        self.row_shape = tuple(int(s) for s in row_shape)
        self.dtype = np.dtype(dtype)
        self.n_rows = 0
        self._fh = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self._fh.write(b"\x00" * self._HEADER_LEN)

    def append(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        if rows.shape[1:] != self.row_shape:
            raise ValueError(
                f"{self.path.name}: rows of shape {rows.shape[1:]}, expected {self.row_shape}"
            )
        self._fh.write(memoryview(rows).cast("B"))  # the array's bytes, not a copy of them
        self.n_rows += rows.shape[0]

    def close(self) -> tuple[int, ...]:
        shape = (self.n_rows, *self.row_shape)
        header = {
            "descr": np.lib.format.dtype_to_descr(self.dtype),
            "fortran_order": False,
            "shape": shape,
        }
        text = repr(header).encode("latin1")
        prefix = b"\x93NUMPY\x01\x00"
        pad = self._HEADER_LEN - len(prefix) - 2 - len(text) - 1
        if pad < 0:
            raise ValueError("npy header does not fit")
        body = text + b" " * pad + b"\n"
        self._fh.seek(0)
        self._fh.write(prefix + len(body).to_bytes(2, "little") + body)
        self._fh.close()
        return shape

    def close_file(self) -> None:
        """Close the file without finishing it (it stays incomplete)."""
        if not self._fh.closed:
            self._fh.close()

    def abort(self) -> None:
        self.close_file()
        self.path.unlink(missing_ok=True)


@dataclass
class Dataset:
    """A prepared dataset, read lazily from its directory.

    Tensor views are memory-mapped, so opening a large dataset costs almost nothing
    and each DataParallel worker touches only the rows of its shard.
    """

    root: Path
    manifest: dict[str, Any]
    meta: pd.DataFrame
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    # --- what is in it -------------------------------------------------------------
    @property
    def classes(self) -> list[str]:
        return list(self.manifest["classes"])

    @property
    def n_classes(self) -> int:
        return len(self.manifest["classes"])

    @property
    def n_flows(self) -> int:
        return int(self.manifest["n_flows"])

    @property
    def views(self) -> list[str]:
        return list(self.manifest["views"])

    @property
    def labels(self) -> np.ndarray:
        return self.meta["label"].to_numpy(dtype=np.int64)

    def has_view(self, name: str) -> bool:
        return name in self.manifest["views"]

    def view_shape(self, name: str) -> tuple[int, ...]:
        """Shape of one sample of a view (without the leading flow axis)."""
        self._require_view(name)
        return tuple(self.manifest["views"][name]["shape"][1:])

    # --- data ------------------------------------------------------------------------
    def view(self, name: str, *, mmap: bool = True) -> np.ndarray:
        """The whole view as an array with one row per flow (``stats`` as float32)."""
        self._require_view(name)
        if name in self._cache:
            return self._cache[name]
        info = self.manifest["views"][name]
        path = self.root / info["file"]
        if name == "stats":
            arr = self.stats_frame().to_numpy(dtype=np.float32)
        else:
            arr = _read_dataset_file(
                path, lambda: np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
            )
        if list(arr.shape) != list(info["shape"]):
            raise InputError(
                path,
                f"holds shape {list(arr.shape)}, the manifest says {info['shape']}; prepare it again",
            )
        if name != "stats":
            _check_values(path, arr, info.get("dtype"))
        self._cache[name] = arr
        return arr

    def stats_frame(self) -> pd.DataFrame:
        self._require_view("stats")
        path = self.root / self.manifest["views"]["stats"]["file"]
        frame = _read_dataset_file(path, lambda: pd.read_parquet(path))
        for column, dtype in frame.dtypes.items():
            if not (pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)):
                raise InputError(
                    path, f"column {column!r} holds {dtype}, not numbers; prepare it again"
                )
        return frame

    def split_indices(self, split: str) -> np.ndarray:
        """Row indices of one split (``train``, ``val`` or ``test``), in store order."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
        return np.flatnonzero(self.meta["split"].to_numpy() == split)

    def xy(self, view: str, split: str) -> tuple[np.ndarray, np.ndarray]:
        """(X, y) of one split, X materialised in memory."""
        idx = self.split_indices(split)
        return np.asarray(self.view(view)[idx]), self.labels[idx]

    def _require_view(self, name: str) -> None:
        if name not in self.manifest["views"]:
            have = ", ".join(self.manifest["views"]) or "none"
            raise InputError(self.root, f"dataset has no view {name!r} (it has: {have})")


# --- readers' locks ------------------------------------------------------------------
# A process reading a dataset holds a shared POSIX lock on DIR/.lock for as long as
# it has the dataset open; `prepare` takes the lock exclusively (without waiting)
# before it replaces DIR, so a dataset a run is reading is never replaced under it.
# POSIX locks belong to a process, so a process never blocks itself, and closing any
# descriptor of the file drops them: each process keeps one descriptor per dataset,
# counted, in _READ_LOCKS.
LOCK_FILE = ".lock"
_READ_LOCKS: dict[tuple[int, int], list[int]] = {}  # (device, inode) -> [fd, users]


def _hold_read_lock(root: Path) -> tuple[int, int] | None:
    """Take (or share) this process's read lock on a dataset; its key, None if none."""
    path = root / LOCK_FILE
    try:
        st = os.stat(path)
    except OSError:
        return None  # written before locks existed, or not ours to lock
    key = (st.st_dev, st.st_ino)
    held = _READ_LOCKS.get(key)
    if held is not None:
        held[1] += 1
        return key
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    fcntl.lockf(fd, fcntl.LOCK_SH)  # waits only while a replace is renaming
    _READ_LOCKS[key] = [fd, 1]
    return key


def _release_read_lock(key: tuple[int, int] | None) -> None:
    held = _READ_LOCKS.get(key) if key is not None else None
    if held is None:
        return
    held[1] -= 1
    if held[1] <= 0:
        del _READ_LOCKS[key]
        os.close(held[0])


@contextlib.contextmanager
def exclusive_lock(root: Path):
    """Hold the dataset's lock exclusively; InputError if a process is reading it."""
    path = root / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        yield  # a dataset from before locks: nothing can be holding it
        return
    except OSError as exc:
        raise InputError(root, f"cannot lock ({exc.strerror}); not replaced") from None
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise InputError(
                root, "is in use by a running process (train, evaluate, ...); not replaced"
            ) from None
        yield
    finally:
        os.close(fd)


class OutputBusy(InputError):
    """Another flowsplit process is writing the same output."""


class OutputLock:
    """The writer's lock on an output path ``OUT`` (a dataset, run or study directory).

    ``OUT``'s sibling ``.OUT.lock`` is locked (``flock``, exclusive, not waited for)
    and holds who took it: a second ``prepare``, ``train`` or ``sfl run`` with the same
    ``-o`` is refused with a line naming the holder, instead of racing it to the final
    rename. The kernel drops the lock when its process ends however it ends, so a
    crashed run never blocks the next one; the file is removed on release. Temporary
    folders of earlier crashed writers (``.OUT.tmp-*``, ``.OUT.old-*``) are removed
    once the lock is held: nobody else may be writing them.
    """

    def __init__(self, out: str | Path):
        self.out = Path(out)
        if not self.out.name:  # "", "." or "/": with_name would fail inside
            raise InputError(
                self.out, "give the output a folder name of its own (not the current folder)"
            )
        self.path = self.out.with_name(f".{self.out.name}.lock")
        self._fd: int | None = None

    def acquire(self) -> OutputLock:
        try:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            while True:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = _read_holder(fd)
                    os.close(fd)
                    raise OutputBusy(
                        self.out,
                        f"is being written by another flowsplit ({holder}); wait for it to "
                        "finish or choose another -o",
                    ) from None
                try:
                    same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    break
                os.close(fd)  # the holder removed the file as we opened it: again
            info = {
                "pid": os.getpid(),
                "host": os.uname().nodename,
                "since": time.strftime("%Y-%m-%d %H:%M:%S"),
                "command": " ".join(["flowsplit", *sys.argv[1:]])[:300],
            }
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        except OSError as exc:
            if exc.filename is None or str(exc.filename) == str(self.path):
                raise named_os_error(exc, self.out) from exc  # the -o, not the lock file
            raise  # a folder above OUT that cannot be made: it names that
        self._fd = fd
        self.remove_stale()
        return self

    def remove_stale(self) -> None:
        """Remove the temporary folders and files crashed writers of ``OUT`` left."""
        for pattern in (f".{self.out.name}.tmp-*", f".{self.out.name}.old-*"):
            for stale in self.out.parent.glob(pattern):
                if stale.is_dir() and not stale.is_symlink():
                    shutil.rmtree(stale, ignore_errors=True)

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    """Who holds an output lock, in words, from the lock file's contents."""
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "a process that has just started"
    return f"pid {info['pid']} on {info.get('host', '?')} since {info.get('since', '?')}: " + str(
        info.get("command", "?")
    )


def check_target(out_dir: str | Path, *, overwrite: bool) -> None:
    """Raise InputError if a dataset may not be written to ``out_dir``.

    Refused: an existing dataset without ``overwrite``, one that a process is
    reading, a file, and a folder with other things in it.
    """
    out_dir = Path(out_dir)
    if (out_dir / "manifest.json").exists():
        if not overwrite:
            raise InputError(out_dir, "is a dataset already; --overwrite replaces it")
        with exclusive_lock(out_dir):
            pass
    elif out_dir.exists() and not out_dir.is_dir():
        raise InputError(out_dir, "exists and is not a directory; choose another -o")
    elif out_dir.is_dir() and any(out_dir.iterdir()):
        raise InputError(out_dir, "exists and is not a flowsplit dataset; refusing to replace it")


def _read_dataset_file(path: Path, read):
    """``read()`` of a dataset's file; a missing or damaged file is an :class:`InputError`."""
    if not path.is_file():
        raise InputError(path, "missing: the dataset is incomplete (prepare it again)")
    try:
        return read()
    except Exception as exc:  # noqa: BLE001 - NumPy and pyarrow raise several kinds for a bad file
        raise InputError(
            path, f"unreadable ({type(exc).__name__}: {exc}); prepare it again"
        ) from None


def _check_values(path: Path, arr: np.ndarray, dtype: str | None) -> None:
    """A tensor view as ``prepare`` writes it: the manifest's dtype in this machine's
    byte order, and (floats) finite values; else an :class:`InputError` naming it.
    The finite check reads the file once, in chunks (about 1 s per GB)."""
    if not arr.dtype.isnative:
        raise InputError(path, f"holds {arr.dtype.str} values (not in this machine's byte "
                         "order): not written by prepare; prepare it again")  # fmt: skip
    if dtype is not None and arr.dtype != np.dtype(dtype):
        raise InputError(path, f"holds {arr.dtype} values, the manifest says {dtype}; "
                         "prepare it again")  # fmt: skip
    if arr.dtype.kind != "f" or arr.size == 0:
        return
    flat = arr.reshape(len(arr), -1)
    step = max(1, (64 << 20) // max(1, flat.shape[1] * arr.dtype.itemsize))
    for start in range(0, len(flat), step):
        chunk = np.asarray(flat[start : start + step])
        bad = ~np.isfinite(chunk)
        if bad.any():
            row = start + int(np.flatnonzero(bad.any(axis=1))[0])
            raise InputError(
                path, f"holds NaN or infinite values (first in row {row}); prepare it again"
            )


_SECTIONS = {
    "options": dict,
    "skipped": dict,
    "read": dict,
    "recovered": dict,
    "small_classes": dict,
    "sources": list,
}
"""Sections of a manifest that readers take as they are, by their JSON type."""


def _manifest_problem(manifest: dict[str, Any], meta: pd.DataFrame) -> str | None:
    """What makes a manifest (and its meta table) unusable, or None."""
    classes, views, n = manifest.get("classes"), manifest.get("views"), manifest.get("n_flows")
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        return "no list of class names ('classes')"
    if not isinstance(n, int):
        return "no flow count ('n_flows')"
    if not isinstance(views, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("file"), str) and isinstance(v.get("shape"), list)
        for v in views.values()
    ):
        return "no table of views ('views', each with a file and a shape)"
    if len(set(classes)) != len(classes):
        return "a class name repeats in 'classes'"
    for key in ("class_counts", "splits"):
        table = manifest.get(key)
        if not isinstance(table, dict) or not all(isinstance(v, int) for v in table.values()):
            return f"no table of counts ({key!r})"
    for key, kind in _SECTIONS.items():
        if key in manifest and not isinstance(manifest[key], kind):
            return f"{key!r} is not a JSON {'object' if kind is dict else 'array'}"
    for name, v in views.items():
        try:
            np.dtype(v.get("dtype", "float32"))
        except TypeError:
            return f"view {name!r} has no valid dtype ({v.get('dtype')!r})"
    missing = [c for c in META_REQUIRED if c not in meta.columns]
    if missing:
        return f"meta.parquet lacks the columns {sorted(missing)}"
    if len(meta) != n:
        return f"meta.parquet has {len(meta)} rows for n_flows {n}"
    labels = meta["label"]
    if len(labels) and not pd.api.types.is_integer_dtype(labels):
        return f"meta.parquet's labels are {labels.dtype}, not class indices"
    out = np.flatnonzero((labels < 0) | (labels >= len(classes))) if len(labels) else []
    if len(out):
        return (
            f"meta.parquet has label {int(labels.iat[out[0]])} (row {int(out[0])}), outside the "
            f"{len(classes)} classes"
        )
    return None


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of a dataset just written (no checks, no lock: see load_dataset)."""
    return json.loads((Path(path) / "manifest.json").read_text(encoding="utf-8"))


def load_dataset(path: str | Path) -> Dataset:
    """Open a dataset directory written by :func:`write_dataset`."""
    root = Path(path)
    manifest_path = root / "manifest.json"
    if not root.is_dir():
        raise InputError(root, "not a dataset directory (run `flowsplit prepare` first)")
    if not manifest_path.is_file():
        raise InputError(root, "no manifest.json: not a flowsplit dataset")
    manifest = read_json_input(manifest_path)
    if not isinstance(manifest, dict):
        raise InputError(manifest_path, "is not a dataset manifest (not a JSON object)")
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise InputError(
            manifest_path, f"schema version {version}, this flowsplit reads {SCHEMA_VERSION}"
        )
    meta_path = root / "meta.parquet"
    meta = _read_dataset_file(meta_path, lambda: pd.read_parquet(meta_path))
    problem = _manifest_problem(manifest, meta)
    if problem:
        raise InputError(manifest_path, f"{problem}: the dataset is damaged (prepare it again)")
    ds = Dataset(root=root, manifest=manifest, meta=meta)
    key = _hold_read_lock(root)
    if key is not None:
        weakref.finalize(ds, _release_read_lock, key)
    return ds


class DatasetWriter:
    """Write a dataset directory atomically, rows streamed in batches.

    Usage::

        with DatasetWriter(out_dir, views={"seq": ((32, 5), np.float32)}) as w:
            w.append(meta_df, {"seq": arr}, stats_df)
            w.finish(classes=[...], manifest_extra={...})

    ``finish`` may be given ``meta`` (the collected metadata with ``label`` and
    ``split`` filled in) and ``keep`` (a boolean mask or index array over the rows
    appended so far): rows keep their appended order. Until ``finish`` returns, the
    data lives under ``DIR.tmp-*``; the final rename replaces an existing DIR only
    then, and only when no process has it open (see :func:`exclusive_lock`).
    """

    def __init__(
        self,
        out_dir: str | Path,
        views: Mapping[str, tuple[tuple[int, ...], Any]],
        *,
        overwrite: bool = True,
    ):
        self.out_dir = Path(out_dir)
        check_target(self.out_dir, overwrite=overwrite)
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self.tmp_dir = Path(
            tempfile.mkdtemp(prefix=f".{self.out_dir.name}.tmp-", dir=self.out_dir.parent)
        )
        self._appenders: dict[str, NpyAppender] = {}
        try:
            self._raw_dir = self.tmp_dir / "_raw"
            self._raw_dir.mkdir()
            self._views = {n: (tuple(shape), np.dtype(dt)) for n, (shape, dt) in views.items()}
            for name, (shape, dt) in self._views.items():
                self._appenders[name] = NpyAppender(self._raw_dir / f"{name}.npy", shape, dt)
        except BaseException:
            self.abort()  # no temporary folder left behind
            raise
        self._meta: list[pd.DataFrame] = []
        self._stats: list[pd.DataFrame] = []
        self.n_rows = 0
        self._done = False

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._done:
            self.abort()

    def append(
        self,
        meta: pd.DataFrame,
        views: Mapping[str, np.ndarray] | None = None,
        stats: pd.DataFrame | None = None,
    ) -> None:
        """Append a batch of flows: metadata rows plus the matching view rows."""
        n = len(meta)
        views = dict(views or {})
        missing = set(self._appenders) - set(views)
        if missing:
            raise ValueError(f"batch lacks views {sorted(missing)}")
        for name, arr in views.items():
            if arr.shape[0] != n:
                raise ValueError(f"view {name}: {arr.shape[0]} rows for {n} flows")
            self._appenders[name].append(arr)
        if stats is not None:
            if len(stats) != n:
                raise ValueError(f"stats: {len(stats)} rows for {n} flows")
            self._stats.append(stats.reset_index(drop=True))
        self._meta.append(meta.reset_index(drop=True))
        self.n_rows += n

    def collected_meta(self) -> pd.DataFrame:
        """All metadata appended so far (one row per appended flow)."""
        if not self._meta:
            return pd.DataFrame()
        return pd.concat(self._meta, ignore_index=True)

    def finish(
        self,
        *,
        classes: list[str],
        meta: pd.DataFrame | None = None,
        keep: np.ndarray | None = None,
        manifest_extra: Mapping[str, Any] | None = None,
        chunk_rows: int = 65536,
    ) -> Path:
        """Select the kept rows, write the final files and rename into place.

        ``meta`` replaces the collected metadata (same number of rows as appended,
        with the ``split`` and ``label`` columns filled in); ``keep`` selects rows.
        """
        meta = self.collected_meta() if meta is None else meta.reset_index(drop=True)
        if len(meta) != self.n_rows:
            raise ValueError(f"meta has {len(meta)} rows, {self.n_rows} were appended")
        keep_idx = np.arange(self.n_rows) if keep is None else _as_index(keep, self.n_rows)
        missing = [c for c in META_REQUIRED if c not in meta.columns]
        if missing:
            raise ValueError(f"meta lacks columns {missing}")
        final_meta = meta.iloc[keep_idx].reset_index(drop=True)
        final_meta["flow_id"] = np.arange(len(final_meta), dtype=np.int64)
        views_info = self._write_views(keep_idx, chunk_rows)
        final_meta.to_parquet(self.tmp_dir / "meta.parquet", index=False)
        shutil.rmtree(self._raw_dir, ignore_errors=True)
        manifest = _manifest(final_meta, classes, views_info, manifest_extra)
        atomic_write_json(self.tmp_dir / "manifest.json", manifest)
        (self.tmp_dir / LOCK_FILE).touch()
        os.chmod(self.tmp_dir, 0o777 & ~_umask())  # mkdtemp makes it private
        self._rename_into_place()
        return self.out_dir

    def _write_views(self, keep_idx: np.ndarray, chunk_rows: int) -> dict[str, Any]:
        """The kept rows of every view, in their final files; the views' manifest part."""
        views_info: dict[str, Any] = {}
        every_row = len(keep_idx) == self.n_rows and bool(
            (keep_idx == np.arange(self.n_rows)).all()
        )
        for name, app in self._appenders.items():
            shape = app.close()
            final = self.tmp_dir / f"{name}.npy"
            if every_row:  # the staged file is the final one, byte for byte
                os.replace(app.path, final)
            else:
                raw = np.load(app.path, mmap_mode="r")
                out = NpyAppender(final, raw.shape[1:], raw.dtype)
                for start in range(0, len(keep_idx), chunk_rows):
                    out.append(np.asarray(raw[keep_idx[start : start + chunk_rows]]))
                shape = out.close()
                del raw
                app.path.unlink()
            views_info[name] = {
                "file": f"{name}.npy",
                "shape": list(shape),
                "dtype": str(np.dtype(self._views[name][1])),
            }
        if self._stats:
            stats = pd.concat(self._stats, ignore_index=True).iloc[keep_idx].reset_index(drop=True)
            stats = stats.astype(np.float32)
            stats.to_parquet(self.tmp_dir / "stats.parquet", index=False)
            views_info["stats"] = {
                "file": "stats.parquet",
                "shape": [len(stats), stats.shape[1]],
                "dtype": "float32",
                "columns": list(stats.columns),
            }
        return views_info

    def _rename_into_place(self) -> None:
        if self.out_dir.exists():
            old = self.out_dir.with_name(f".{self.out_dir.name}.old-{os.getpid()}")
            with exclusive_lock(self.out_dir):
                os.replace(self.out_dir, old)
                os.replace(self.tmp_dir, self.out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(self.tmp_dir, self.out_dir)
        self._done = True

    def abort(self) -> None:
        for app in self._appenders.values():
            with contextlib.suppress(OSError):  # a full disk fails the close's flush too
                app.close_file()
        shutil.rmtree(self.tmp_dir, ignore_errors=True)
        self._done = True


def _manifest(final_meta, classes, views_info, manifest_extra) -> dict[str, Any]:
    """The manifest of a finished dataset: counts, views, and the caller's extras."""
    labels = final_meta["label"].to_numpy(dtype=np.int64)
    counts = (
        np.bincount(labels, minlength=len(classes)) if len(labels) else np.zeros(len(classes), int)
    )
    split_counts = {s: int((final_meta["split"] == s).sum()) for s in SPLITS}
    manifest: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "flowsplit_version": __version__,
        "n_flows": len(final_meta),
        "classes": list(classes),
        "class_counts": {c: int(n) for c, n in zip(classes, counts, strict=True)},
        "views": {},
        "splits": split_counts,
    }
    extra = dict(manifest_extra or {})
    extra_views = extra.pop("views", {})
    for name, info in views_info.items():
        info.update(extra_views.get(name, {}))
        manifest["views"][name] = info
    for key, value in extra.items():
        manifest.setdefault(key, value)
    return manifest


def _as_index(keep: np.ndarray | Iterable[int], n: int) -> np.ndarray:
    keep = np.asarray(keep)
    if keep.dtype == bool:
        if keep.shape != (n,):
            raise ValueError(f"keep mask of shape {keep.shape}, expected ({n},)")
        return np.flatnonzero(keep)
    return keep.astype(np.int64)


def write_dataset(
    out_dir: str | Path,
    *,
    meta: pd.DataFrame,
    classes: list[str],
    views: Mapping[str, np.ndarray] | None = None,
    stats: pd.DataFrame | None = None,
    manifest_extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write a whole in-memory dataset in one call (tests, small converters)."""
    views = dict(views or {})
    spec = {name: (arr.shape[1:], arr.dtype) for name, arr in views.items()}
    with DatasetWriter(out_dir, spec) as writer:
        writer.append(meta, views, stats)
        return writer.finish(classes=classes, manifest_extra=manifest_extra)
