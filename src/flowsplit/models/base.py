"""Neural models as ordered lists of named blocks.

Every neural model in flowsplit is a :class:`BlockModel`: blocks ``b_1 .. b_L``
applied in order, each taking one tensor and returning one tensor, the last one
the classifier head returning logits ``(B, n_classes)``. Split learning cuts a
model between any two blocks (see ``flowsplit.federated``), so nothing may flow
between blocks except that one tensor: a recurrent block returns its whole output
sequence, and a block that needs the last step takes it itself.

Model code is single-device and never imports ``torch.distributed``; parallelism
is applied by the engines.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch import nn


class BlockModel(nn.Module):
    """A model that is an ordered sequence of named blocks.

    Attributes:
        blocks: the blocks, in order (``nn.ModuleDict`` keeps insertion order).
        view: the dataset view the model reads (``seq``, ``bytes``, ``pkt_bytes``).
        input_shape: shape of one sample as stored in the view, without batch axis.
        n_classes: number of output logits.
    """

    def __init__(
        self,
        blocks: Sequence[tuple[str, nn.Module]],
        *,
        view: str,
        input_shape: Sequence[int],
        n_classes: int,
        name: str,
    ):
        super().__init__()
        if len(blocks) < 2:
            raise ValueError("a BlockModel needs at least two blocks (a body and a head)")
        self.blocks = nn.ModuleDict(OrderedDict(blocks))
        self.view = view
        self.input_shape = tuple(int(s) for s in input_shape)
        self.n_classes = int(n_classes)
        self.name = name

    @property
    def block_names(self) -> list[str]:
        return list(self.blocks.keys())

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks.values():
            x = block(x)
        return x

    def forward_range(self, x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        """Apply blocks ``start .. stop-1`` (0-based, Python slice semantics)."""
        for block in list(self.blocks.values())[start:stop]:
            x = block(x)
        return x
