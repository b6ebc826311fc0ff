"""Sharded reading: each rank's rows, batch by batch, as DistributedSampler and the memory map give them."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler

from flowsplit.train.batches import RowReader, epoch_rows, shard_order, step_rows
from flowsplit.train.distributed import CommMeter


@pytest.mark.parametrize(("n", "world"), [(10, 1), (10, 2), (12, 4)])
def test_shard_order_is_the_distributed_samplers_when_shards_are_even(n, world):
    for epoch in (0, 3):
        for rank in range(world):
            sampler = DistributedSampler(
                range(n), num_replicas=world, rank=rank, shuffle=True, seed=7, drop_last=True
            )
            sampler.set_epoch(epoch)
            assert shard_order(n, world, rank, 7, epoch, 4).tolist() == list(sampler)


@pytest.mark.parametrize(("n", "world", "batch"), [(45, 2, 16), (103, 4, 8), (40, 3, 12)])
def test_each_global_step_is_the_centralised_one_with_the_ranks_rows_interleaved(n, world, batch):
    central = shard_order(n, 1, 0, 5, 2, batch)
    shards = [shard_order(n, world, r, 5, 2, batch) for r in range(world)]
    per_rank = batch // world
    used = epoch_rows(n, world, batch)
    steps = [len(range(0, len(s), per_rank)) for s in shards]
    assert len(set(steps)) == 1  # every rank takes the same number of steps (no Join)
    for k in range(steps[0]):
        parts = [s[k * per_rank : (k + 1) * per_rank] for s in shards]
        rows = step_rows(used, batch, k)
        assert sum(len(p) for p in parts) == rows
        # Rank r holds rows r, r + N, ... of the centralised step k.
        merged = torch.empty(rows, dtype=torch.long)
        for r, p in enumerate(parts):
            merged[r::world] = p
        assert merged.tolist() == central[k * batch : k * batch + rows].tolist()
    assert used == n  # these tails hold at least one row per rank: nothing sits out


def test_only_a_last_step_with_fewer_rows_than_ranks_sits_out():
    # 33 rows, steps of 16: the last step's one row cannot go to 4 ranks.
    assert (epoch_rows(33, 4, 16), epoch_rows(36, 4, 16), epoch_rows(33, 1, 16)) == (32, 36, 33)
    shards = [set(shard_order(33, 4, r, 0, 1, 16).tolist()) for r in range(4)]
    assert sum(len(s) for s in shards) == len(set.union(*shards)) == 32


@pytest.mark.parametrize(("dtype", "shape"), [(np.uint8, (5,)), (np.float32, (3, 2))])
def test_row_reader_gives_what_the_memory_map_gives(tmp_path, dtype, shape):
    # Prepare: a stored view, opened the way the dataset store opens it.
    rng = np.random.default_rng(0)
    data = (rng.random((40, *shape)) * 250).astype(dtype)
    np.save(tmp_path / "v.npy", data)
    view = np.load(tmp_path / "v.npy", mmap_mode="r")
    # Unsorted, with runs of consecutive rows, a repeat, the first and last rows.
    rows = np.array([39, 3, 4, 5, 0, 17, 4, 38, 21, 20])
    # Execute
    with RowReader(view) as reader:
        got, empty = reader.read(rows), reader.read(np.array([], dtype=np.int64))
    # Assert
    np.testing.assert_array_equal(got, data[rows])
    assert got.dtype == data.dtype and empty.shape == (0, *shape)
    # An array held in memory is indexed directly, with the same result.
    np.testing.assert_array_equal(RowReader(data).read(rows), data[rows])


def test_exposed_communication_is_what_follows_the_last_launch():
    # Prepare: one step whose buckets were launched at 1.0 and 2.0 and done at 2.5 and 3.5:
    # after the last launch (all gradients computed) 1.5 s of waiting.
    meter = CommMeter()
    meter._intervals = [(1.0, 2.5), (2.0, 3.5)]
    meter._last_launch = 2.0
    # Execute
    meter.step_done()
    meter.step_done()  # a step without communication adds nothing
    # Assert
    assert meter.exposed_s == pytest.approx(1.5)
    assert meter.busy_time() == pytest.approx(2.5)


def test_peak_rss_is_the_workers_own_not_its_parents():
    # Prepare: a parent holding 800 MB starts a program (as the benchmarks start workers);
    # Linux carries ru_maxrss across exec, so that measure would report the parent's.
    ballast = bytearray(800 * 2**20)
    ballast[::4096] = b"\x01" * len(ballast[::4096])  # touch every page
    code = "from flowsplit.util import peak_rss_mb; print(peak_rss_mb())"
    # Execute
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # Assert: the child's own peak (a bare Python, about 13 MB) is well below the parent's.
    assert 5 < float(out.stdout) < 600
    del ballast
