"""Dropout masks drawn for the global batch, so N workers drop what one process drops.

``nn.Dropout`` draws its mask from the process's generator for the rows it sees: a
rank of a data-parallel run draws masks for its share of the batch from its own
stream, a centralised run for the whole batch from another, so the two runs differ
from the first step on. :class:`GlobalBatchDropout` draws, per call, the mask of the
whole global batch (``global_batch`` rows, even on a short last step) from a
generator seeded alike on every rank, and applies the rows of this rank: row ``j`` of
rank ``r`` is row ``j * N + r`` of the global batch, as :func:`~flowsplit.train.batches.
shard_order` deals them. Every rank draws the same numbers in the same order, so the
streams stay in step, and a rank's masks are the centralised run's masks of its rows.

Exact while every rank's dropout input has the same shape past the batch dimension (a
model that pads a batch to its longest sequence before a dropout would not).
"""

from __future__ import annotations

import torch
from torch import nn


class MaskSource:
    """The generator every :class:`GlobalBatchDropout` of a model draws from."""

    def __init__(self, *, world_size: int, rank: int, global_batch: int):
        self.world_size, self.rank, self.global_batch = world_size, rank, global_batch
        self.generator = torch.Generator()

    def reseed(self, seed: int) -> None:
        """Start a stream (once per epoch: the same seed on every rank)."""
        self.generator.manual_seed(seed)

    def keep_mask(self, shape: torch.Size, p: float) -> torch.Tensor:
        """This rank's rows of a global-batch mask: True where a unit is kept."""
        rows = max(self.global_batch, shape[0] * self.world_size)
        u = torch.rand((rows, *shape[1:]), generator=self.generator)
        return (u >= p)[self.rank :: self.world_size][: shape[0]]


class GlobalBatchDropout(nn.Dropout):
    """``nn.Dropout`` whose training mask comes from a shared :class:`MaskSource`."""

    def __init__(self, p: float, inplace: bool, source: MaskSource):
        super().__init__(p, inplace)
        self.source = source

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.p == 1.0:
            return x * 0.0
        keep = self.source.keep_mask(x.shape, self.p).to(device=x.device, dtype=x.dtype)
        return x * keep * (1.0 / (1.0 - self.p))


def use_global_masks(model: nn.Module, source: MaskSource) -> int:
    """Swap every plain ``nn.Dropout`` of ``model`` for a :class:`GlobalBatchDropout`.

    Dropout has no parameters or buffers: the state dict is unchanged. Returns how many
    modules were swapped.
    """
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                setattr(parent, name, GlobalBatchDropout(child.p, child.inplace, source))
                swapped += 1
    return swapped
