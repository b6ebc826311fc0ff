"""Cutting a :class:`~flowsplit.models.base.BlockModel` into client, aggregator and server parts.

A model is blocks ``b_1 .. b_L`` (1-based, the last one the classifier head). Cut
points ``1 <= a <= c < L`` give three parts: client ``b_1..b_a``, aggregator
``b_{a+1}..b_c`` (empty when ``a == c``: two tiers) and server ``b_{c+1}..b_L``.

What crosses a cut is the one tensor a block returns. For a recurrent block
(LSTM, ConvLSTM, ConvGRU) that is its whole output sequence ``(B, T, H)`` (or
``(B, T, C, H, W)``): the next part starts its own recurrence from a zero state
and gradients flow back into every time step, so a cut after a recurrent block
sends ``T`` times the activations of a cut after a dense block, and the hidden
state itself never travels.

Local-loss training (``hsfl-ll``) adds an :class:`AuxHead` after the client and
the aggregator parts: a small linear classifier over the part's output, pooled
when it is large, so it fits any output shape.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from flowsplit.errors import ConfigError
from flowsplit.federated.system import AUX_MODES
from flowsplit.models.base import BlockModel


def legal_cuts(n_blocks: int) -> list[tuple[int, int]]:
    """Every ``(a, c)`` with ``1 <= a <= c < n_blocks`` (``a == c``: two tiers)."""
    return [(a, c) for a in range(1, n_blocks) for c in range(a, n_blocks)]


def check_cuts(n_blocks: int, a: int, c: int) -> None:
    """Raise :class:`ConfigError` unless ``(a, c)`` is a legal cut of an ``n_blocks`` model."""
    if not (1 <= a <= c < n_blocks):
        raise ConfigError(
            f"cuts ({a}, {c}) are not legal for a model of {n_blocks} blocks: "
            f"need 1 <= a <= c <= {n_blocks - 1} (the head, block {n_blocks}, stays on the server)"
        )


class Part(nn.Module):
    """Blocks ``first+1 .. last`` (1-based) of a model, applied in order; empty = identity."""

    def __init__(self, blocks: Sequence[tuple[str, nn.Module]], first: int):
        super().__init__()
        self.names = [name for name, _ in blocks]
        self.layers = nn.ModuleList([block for _, block in blocks])
        self.first = first  # number of blocks before this part

    @property
    def is_empty(self) -> bool:
        return len(self.layers) == 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


@dataclass
class SplitModel:
    """The three parts of one model at cuts ``(a, c)``; ``aggregator`` is empty when a == c."""

    client: Part
    aggregator: Part
    server: Part
    cuts: tuple[int, int]

    @property
    def parts(self) -> tuple[Part, Part, Part]:
        return self.client, self.aggregator, self.server

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.server(self.aggregator(self.client(x)))


def split_model(model: BlockModel, a: int, c: int) -> SplitModel:
    """Copy ``model``'s blocks into client/aggregator/server parts at cuts ``(a, c)``.

    The parts own deep copies, so training them never touches ``model``.
    """
    check_cuts(model.n_blocks, a, c)
    blocks = [(name, copy.deepcopy(block)) for name, block in model.blocks.items()]
    return SplitModel(
        client=Part(blocks[:a], 0),
        aggregator=Part(blocks[a:c], a),
        server=Part(blocks[c:], c),
        cuts=(a, c),
    )


def join_parts(*parts: nn.Module) -> nn.Sequential:
    """One module applying ``parts`` in order (for evaluation of the global model)."""
    return nn.Sequential(*parts)


# --- auxiliary heads (local losses) -------------------------------------------------


def aux_feature_shape(sample_shape: Sequence[int], mode: str, max_features: int) -> int:
    """Features an :class:`AuxHead` feeds its linear layer for outputs of ``sample_shape``."""
    shape = tuple(int(s) for s in sample_shape)
    if mode not in AUX_MODES:
        raise ConfigError(f"aux head mode {mode!r}: choose one of {', '.join(AUX_MODES)}")
    if len(shape) <= 1 or mode == "flatten":
        return math.prod(shape)
    if mode in ("last", "mean"):
        return math.prod(shape[1:])
    total = math.prod(shape)
    if total <= max_features:
        return total
    return shape[0] * _pooled_len(shape, max_features)


def _pooled_len(shape: tuple[int, ...], max_features: int) -> int:
    rest = math.prod(shape[1:])
    return max(1, min(rest, max_features // shape[0]))


class AuxHead(nn.Module):
    """A linear classifier over any block output, for local losses.

    Modes for a sample shape ``(d1, d2, ...)``:

    - ``auto``: flatten when the output has at most ``max_features`` values, else
      average-pool the trailing axes (flattened) down to ``max_features // d1``
      values per leading slice, then flatten;
    - ``flatten``: flatten everything (may be large);
    - ``last`` / ``mean``: for sequence outputs ``(T, H, ...)``, take the last step
      or the mean over steps, then flatten.
    """

    def __init__(
        self,
        sample_shape: Sequence[int],
        n_classes: int,
        *,
        mode: str = "auto",
        max_features: int = 1024,
    ):
        super().__init__()
        self.sample_shape = tuple(int(s) for s in sample_shape)
        self.mode = mode
        self.max_features = int(max_features)
        n_in = aux_feature_shape(self.sample_shape, mode, self.max_features)
        self.pool_len = (
            _pooled_len(self.sample_shape, self.max_features)
            if mode == "auto" and len(self.sample_shape) > 1 and n_in < math.prod(self.sample_shape)
            else None
        )
        self.linear = nn.Linear(n_in, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() > 2:
            if self.mode == "last":
                x = x[:, -1]
            elif self.mode == "mean":
                x = x.mean(1)
            elif self.pool_len is not None:
                x = F.adaptive_avg_pool1d(x.flatten(2), self.pool_len)  # (B, d1, pool_len)
        return self.linear(x.flatten(1))  # (B, n_classes)


# --- flat model states (what a "model" message carries) ------------------------------


def state_tensors(module: nn.Module) -> list[torch.Tensor]:
    """The floating-point parameters and buffers of ``module`` in ``state_dict`` order.

    Integer buffers (e.g. BatchNorm's ``num_batches_tracked``) stay local: they are
    counters, not weights to average.
    """
    return [t for t in module.state_dict(keep_vars=True).values() if t.is_floating_point()]


def state_numel(module: nn.Module) -> int:
    """Number of values :func:`flatten_state` puts in a message."""
    return sum(t.numel() for t in state_tensors(module))


def flatten_state(module: nn.Module) -> torch.Tensor:
    """All floating state of ``module`` as one float32 vector (a detached copy)."""
    tensors = state_tensors(module)
    if not tensors:
        return torch.zeros(0, dtype=torch.float32)
    return torch.cat([t.detach().reshape(-1).to(torch.float32) for t in tensors])


@torch.no_grad()
def load_flat_state(module: nn.Module, flat: torch.Tensor) -> None:
    """Copy a vector made by :func:`flatten_state` back into ``module``."""
    offset = 0
    for t in state_tensors(module):
        n = t.numel()
        t.copy_(flat[offset : offset + n].view_as(t))
        offset += n
    if offset != flat.numel():
        raise ValueError(f"state vector has {flat.numel()} values, the module takes {offset}")
