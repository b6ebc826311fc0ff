"""Per-epoch checkpoints, written atomically and read back without unpickling code.

A checkpoint is a plain dict of tensors, numbers, strings and lists (model and
optimiser state, the best weights so far, the history of every measured list),
so :func:`load_checkpoint` uses ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import io
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch

from flowsplit.errors import InputError
from flowsplit.outputs import atomic_write_bytes

CHECKPOINT_NAME = "checkpoint.pt"


def save_tensors(path: str | Path, state: dict[str, Any]) -> None:
    """``torch.save`` ``state`` to ``path`` atomically (temporary file, fsync, rename).

    A crash while writing leaves the previous file intact. Serialised in memory first:
    torch's own file writer reports a full disk as ``unexpected pos N vs M``; a plain
    write raises the ``OSError`` (ENOSPC, EROFS, EACCES) that the CLI turns into one
    line naming the file. The temporary file is removed on any failure; the file follows
    the umask like every other output, and only replaces a regular file or a missing path
    (:func:`flowsplit.outputs.atomic_write_bytes`).
    """
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(path, buf.getbuffer(), fsync=True)


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Write a training checkpoint atomically (:func:`save_tensors`), creating its folder."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_tensors(path, state)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint onto the CPU, refusing anything but plain data."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "no checkpoint to resume from (the run never finished an epoch)")
    ckpt = load_tensors(path, what="checkpoint")
    kinds = {"model": dict, "optimizer": dict, "history": dict, "best": dict, "epoch": int}
    if not isinstance(ckpt, dict):
        raise InputError(path, "is not a training checkpoint (not a table)")
    wrong = [k for k, kind in kinds.items() if not isinstance(ckpt.get(k), kind)]
    if wrong:
        raise InputError(path, f"is not a training checkpoint (bad or no {', '.join(wrong)})")
    return ckpt


def load_tensors(path: str | Path, *, what: str = "tensor file") -> Any:
    """``torch.load(weights_only=True)`` of ``path`` onto the CPU; a file that cannot be
    read so is an :class:`InputError` in a few words.

    torch's own messages run to many lines, and for a refused pickle they advise
    ``weights_only=False``, which flowsplit never does: they are not passed on.
    """
    path = Path(path)
    try:
        with warnings.catch_warnings():
            # Said of a foreign pickle just before refusing it: the refusal is the news.
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(path, map_location="cpu", weights_only=True)
    except OSError:
        raise  # a full disk or no permission: the CLI names the file
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user problem
        if isinstance(exc, pickle.UnpicklingError):
            problem = "damaged, or it holds pickled objects besides tensors, never loaded"
        else:
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
            problem = (
                f"{type(exc).__name__}: {first.split('. ')[0][:160]}"  # torch's first sentence
            )
        raise InputError(
            path, f"unreadable {what}: not a tensors-only PyTorch file ({problem})"
        ) from None
