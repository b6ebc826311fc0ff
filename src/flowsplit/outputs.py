"""Writing a file the user keeps: atomically, only onto a regular file or a new path,
with errors that name the file the user asked for (never a temporary name).

The ground floor of every writer in flowsplit (datasets, runs, studies, reports, plans):
:func:`output_file` (what a write of a path replaces, refusing devices, FIFOs, sockets and
directories; a symbolic link is written through), :func:`check_writable` (before long
work), :func:`atomic_write_bytes` / :func:`atomic_write_text` / :func:`atomic_write_json`
(a temporary file beside the target, then a rename; permissions by the umask), and
:func:`named_os_error`.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from flowsplit.errors import InputError


def _umask() -> int:
    """The process's umask (read by setting it, then restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def output_file(path: str | Path) -> Path:
    """The file an atomic write of ``path`` replaces: ``path`` itself, or for a symbolic
    link the file it points to (written through, atomically, beside that file; the link
    stays a link). Only a regular file or a missing path is replaced: a directory,
    device, FIFO or socket at ``path`` (or at the link's end) is an :class:`InputError`
    naming it, before anything is computed or written.
    """
    path = Path(path)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target
    except OSError:
        return target  # not ours to judge (no permission...): the write says why
    for test, what in _NOT_REGULAR:
        if test(mode):
            via = f" (the link's target {target})" if target != path else ""
            raise InputError(
                path,
                f"is {what}{via}, not a regular file; flowsplit writes its outputs only "
                "onto a regular file or a new path",
            )
    return target


def check_writable(path: str | Path) -> Path:
    """Before long work: ``path`` may be written (:func:`output_file`) and its folder
    takes a new file (made and removed); else one line naming ``path``."""
    target = output_file(path)
    target.parent.mkdir(parents=True, exist_ok=True)  # its errors name the folder
    try:
        with tempfile.NamedTemporaryFile(prefix=f".{target.name}.", dir=target.parent):
            pass
    except OSError as exc:
        raise named_os_error(exc, path) from exc
    return target


def named_os_error(exc: OSError, path: str | Path) -> OSError:
    """``exc`` naming ``path`` (the file the user asked for, not a temporary name).

    pyarrow's write errors carry their errno only in the message (``[errno 28] ...``).
    """
    code = exc.errno
    if code is None and (found := re.search(r"\[errno (\d+)\]", str(exc), re.IGNORECASE)):
        code = int(found.group(1))
    return OSError(code, os.strerror(code) if code else str(exc), str(path))


def atomic_write_bytes(path: str | Path, data: bytes | memoryview, *, fsync: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it and a rename.

    ``path`` must be a regular file or missing (:func:`output_file`; a symbolic link
    is written through). The file gets the permissions a plain ``open`` would give it
    (the user's umask), not the private 0600 of the temporary file. An OS refusal (a
    full disk, a read-only file system, no permission) is an ``OSError`` naming
    ``path``, never the temporary file, which is removed.
    """
    shown = Path(path)
    path = output_file(shown)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise named_os_error(exc, shown) from exc
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise named_os_error(exc, shown) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(
        path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n"
    )


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
