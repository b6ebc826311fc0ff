"""What rank 0 tells the other ranks crosses as tensors (never pickles): two gloo processes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.conftest import free_port


def _worker(rank: int, port: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        from flowsplit.train.distributed import (
            broadcast_checkpoint,
            broadcast_flag,
            gather_floats,
        )

        layout = SimpleNamespace(ddp_enabled=True, device="cpu", is_main=rank == 0, world_size=2)
        ckpt = None
        if rank == 0:
            ckpt = {
                "epoch": 3,
                "model": {"w": torch.arange(6.0).reshape(2, 3)},
                "history": {"loss": [0.5, 0.25]},
                "best": {"stale": 1},
            }
        got = broadcast_checkpoint(ckpt, layout)
        assert got["epoch"] == 3 and got["history"]["loss"] == [0.5, 0.25]
        assert torch.equal(got["model"]["w"], torch.arange(6.0).reshape(2, 3))
        # Rank 0's decision wins, whatever the others hold.
        assert broadcast_flag(rank == 0, layout) is True
        assert broadcast_flag(rank == 1, layout) is False
        assert gather_floats(10.0 + rank, layout) == [10.0, 11.0]
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two gloo processes
def test_checkpoint_flag_and_floats_reach_every_rank():
    # A worker's failed assertion comes back as an exception from spawn.
    mp.spawn(_worker, args=(free_port(),), nprocs=2, join=True)
