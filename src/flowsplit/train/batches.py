"""Training rows batch by batch: each rank reads only the rows of its own shard.

A worker never holds the training split in memory. Per epoch it computes its
shard (:func:`shard_order`: every ``N``-th row of the epoch's permutation, as one
tensor rather than a Python list of every index), and per step
:class:`RowReader` reads that step's rows from the view's ``.npy`` file.

Why ``pread`` and not fancy indexing of the memory map: pages of a mapped file
that a process touches count in its resident memory, and a shard drawn afresh
every epoch touches, over a few epochs, nearly every page of the file; reads
through the page cache leave a worker's resident memory at a batch, whatever the
size of the dataset. The bytes read are the ones the memory map would give.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import torch


def epoch_rows(n: int, world_size: int, global_batch: int) -> int:
    """How many of the ``n`` training rows an epoch of ``world_size`` ranks trains on.

    All of them, unless the last global step would have fewer rows than ranks (a rank
    with no row would skip the step's all-reduce): that step's rows sit out, so at most
    ``world_size - 1`` rows, and none in a centralised run.
    """
    tail = n % global_batch
    return n - tail if 0 < tail < world_size else n


def shard_order(
    n: int, world_size: int, rank: int, seed: int, epoch: int, global_batch: int
) -> torch.Tensor:
    """Positions (into the ``n`` training rows) of ``rank``'s shard for ``epoch``, in order.

    The rows are permuted by a generator seeded ``seed + epoch`` (the permutation
    ``DistributedSampler(shuffle=True, seed=seed)`` draws after ``set_epoch(epoch)``,
    so the order depends on the seed and the epoch only) and cut into global steps of
    ``global_batch`` rows; rank ``r`` takes every ``world_size``-th row from position
    ``r``. With ``global_batch`` a multiple of ``world_size``, the rank's rows of
    global step ``k`` are then its ``k``-th slice of ``global_batch / world_size``
    rows, also on the short last step, where the ranks' shares differ by at most one
    row: the loop weighs each rank's loss by its share of the step
    (:func:`step_rows`), so N ranks take the centralised step on every global batch,
    the last one included. Unlike ``DistributedSampler(drop_last=True)``, no row sits
    out except as :func:`epoch_rows` says.
    """
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    perm = torch.randperm(n, generator=g)
    return perm[: epoch_rows(n, world_size, global_batch)][rank::world_size]


def shuffled_batches(n: int, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """One epoch of a plain minibatch loop: the indices of ``n`` rows in an order drawn
    from ``generator``, ``batch_size`` at a time (the last batch may be shorter)."""
    order = torch.randperm(n, generator=generator)
    for start in range(0, n, batch_size):
        yield order[start : start + batch_size]


def step_rows(used: int, global_batch: int, step: int) -> int:
    """Rows of global step ``step`` (0-based) of an epoch on ``used`` rows."""
    return min(global_batch, used - step * global_batch)


class RowReader:
    """Rows of one stored view read by index from its ``.npy`` file, in the order asked.

    ``view`` is what :meth:`flowsplit.data.store.Dataset.view` returns: a read-only
    memory map of a C-ordered ``.npy`` file, whose file name and data offset say
    where row ``i`` lies. An array that is not such a map (a view held in memory) is
    indexed directly.
    """

    def __init__(self, view: np.ndarray):
        self.shape = tuple(view.shape[1:])
        self.dtype = view.dtype
        self._array: np.ndarray | None = None
        self._fd: int | None = None
        filename = getattr(view, "filename", None)
        if isinstance(view, np.memmap) and filename and view.flags.c_contiguous:
            self._fd = os.open(filename, os.O_RDONLY)
            self._offset = int(view.offset)
            self._row_bytes = int(np.prod(self.shape, dtype=np.int64)) * view.dtype.itemsize
        else:
            self._array = view

    def read(self, rows: np.ndarray) -> np.ndarray:
        """The rows ``rows`` (row numbers of the view, any order), as an array in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        if self._array is not None:
            return np.asarray(self._array[rows])
        out = np.empty((len(rows), *self.shape), dtype=self.dtype)
        if not len(rows):
            return out
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        # One read per run of consecutive rows (a whole contiguous range in one call).
        starts = np.flatnonzero(np.diff(sorted_rows, prepend=sorted_rows[0] - 2) != 1)
        ends = np.append(starts[1:], len(rows))
        flat = out.reshape(len(rows), -1).view(np.uint8)
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            first, count = int(sorted_rows[a]), b - a
            data = os.pread(
                self._fd, count * self._row_bytes, self._offset + first * self._row_bytes
            )
            if len(data) != count * self._row_bytes:
                raise OSError(f"short read of rows {first}..{first + count - 1}")
            flat[order[a:b]] = np.frombuffer(data, dtype=np.uint8).reshape(count, -1)
        return out

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RowReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
