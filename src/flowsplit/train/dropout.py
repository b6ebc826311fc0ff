"""Dropout masks drawn for the global batch, so N workers drop what one process drops.

``nn.Dropout`` draws its mask from the process's generator for the rows it sees: a
rank of a data-parallel run draws masks for its share of the batch from its own
stream, a centralised run for the whole batch from another, so the two runs differ
from the first step on. :class:`GlobalBatchDropout` draws each row's mask from a
stream of its own, seeded by (epoch seed, dropout call, row of the global batch): row
``j`` of rank ``r`` is row ``j * N + r`` of the global batch, as
:func:`~flowsplit.train.batches.shard_order` deals them, so a rank's masks are the
centralised run's masks of its rows, and each rank draws only its own rows (no more
random numbers than ``nn.Dropout``; a draw for the whole global batch on every rank
had cost the LSTM 16 % of a 2-worker epoch on nDPI8, this way none measurable).

Exact while every rank's dropout input has the same shape past the batch dimension (a
model that pads a batch to its longest sequence before a dropout would not).
"""

from __future__ import annotations

import torch
from torch import nn

_MASK = (1 << 63) - 1
_K1, _K2, _K3 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


class MaskSource:
    """The streams every :class:`GlobalBatchDropout` of a model draws from."""

    def __init__(self, *, world_size: int, rank: int):
        self.world_size, self.rank = world_size, rank
        self.generator = torch.Generator()
        self.seed, self.calls = 0, 0

    def reseed(self, seed: int) -> None:
        """Start an epoch's streams (the same seed on every rank)."""
        self.seed, self.calls = seed, 0

    def keep_mask(self, shape: torch.Size, p: float) -> torch.Tensor:
        """This rank's rows of a global-batch mask: True where a unit is kept."""
        self.calls += 1
        base = (self.seed * _K1 + self.calls * _K2) & _MASK
        u = torch.empty(tuple(shape))
        for j in range(shape[0]):
            row = j * self.world_size + self.rank  # its row of the global batch
            self.generator.manual_seed((base ^ (row * _K3)) & _MASK)
            torch.rand(tuple(shape[1:]), generator=self.generator, out=u[j])
        return u >= p


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
