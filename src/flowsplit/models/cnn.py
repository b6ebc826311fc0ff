"""Convolutional network over payload bytes (1-D or as a 2-D image) or packet sequences.

Blocks: ``conv1`` (input embedding or scaling + conv + pool), ``conv2`` (conv),
``fc`` (global mean and max pooling + dense), ``head`` (logits).

Bytes go through a learned embedding (one vector per byte value: bytes are
symbols such as TLS record types, not intensities), then two convolutions; the
global mean and max over positions make the features independent of where a
pattern sits and of the input length. No batch normalisation: its statistics
are per-process, so data-parallel training would no longer be the centralised
optimisation on the same global batches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from flowsplit.errors import ConfigError
from flowsplit.models.base import BlockModel
from flowsplit.models.checks import (
    check_dropout,
    check_int,
    check_size,
    check_sizes,
    option_error,
)
from flowsplit.models.layers import ByteEmbedding, ByteInput, SeqInput, image_side


class GlobalPool(nn.Module):
    """``(B, C, *S)`` -> ``(B, 2C)``: mean and max over all positions."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(2)  # (B, C, S)
        return torch.cat([x.mean(2), x.amax(2)], dim=1)


class _Transpose(nn.Module):
    """``(B, T, F)`` -> ``(B, F, T)``: features become channels."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2)


def _check_fits(
    input_shape: tuple[int, ...], length: int, what: str, kernel: int, pool: int
) -> None:
    """Refuse a kernel (``kernel``: the one applied) so much longer than the ``length``
    it slides over (the bytes, packets or image side) that some of its taps never see
    the input (wider than ``2 * length - 1``: torch would pad the input to the kernel's
    size, gigabytes for a large one), and a pool (``pool``: the one applied) that leaves
    ``conv1`` no output position (torch would fail at the first batch)."""
    where = f"the {what} of the input, shape {input_shape}"
    widest = 2 * length - 1
    if kernel > widest:
        raise option_error("cnn", "kernel", kernel, f"at most {widest} (2 x {length} - 1, {where})")
    if length // pool == 0:
        raise option_error("cnn", "pool", pool, f"at most {length}, {where}")


def build_cnn(
    *,
    view: str,
    input_shape: Sequence[int],
    n_classes: int,
    dims: int = 1,
    embed: int = 32,
    channels: Sequence[int] = (64, 128),
    kernel: int = 5,
    pool: int = 4,
    hidden: int = 128,
    dropout: float = 0.2,
) -> BlockModel:
    """Build the CNN.

    Args:
        view: ``bytes`` (``(L,)`` or ``(S, S)`` payload bytes) or ``seq`` (``(T, F)``).
        input_shape: shape of one stored sample.
        n_classes: number of classes.
        dims: 1 for a 1-D convolution along the bytes (or packets), 2 for a 2-D
            convolution over the bytes as a square image (784 bytes -> 28x28).
        embed: size of the byte embedding; 0 feeds bytes / 255 as one channel.
        channels: output channels of ``conv1`` and ``conv2``.
        kernel: convolution kernel size (odd, at most twice the input length - 1; 2-D
            uses ``min(kernel, 3)``).
        pool: max-pool after ``conv1`` (1-D, at most the input length; 2-D pools 2x2;
            ``seq`` pools ``min(pool, 2)``).
        hidden: width of the dense ``fc`` block.
        dropout: dropout after ``fc`` (0 disables it).
    """
    input_shape = tuple(int(s) for s in input_shape)
    check_sizes("cnn", "channels", channels)
    c1, c2 = (int(c) for c in channels)
    n_in = math.prod(input_shape)
    check_int("cnn", "embed", embed, 0)
    check_int("cnn", "kernel", kernel, 1)
    check_int("cnn", "pool", pool, 1)
    check_size("cnn", "hidden", hidden)
    check_dropout("cnn", "dropout", dropout)
    if kernel % 2 == 0:
        raise ConfigError(f"cnn kernel must be odd so convolutions keep the size, got {kernel}")
    if dims not in (1, 2):
        raise ConfigError(f"cnn dims must be 1 or 2, got {dims}")
    if view == "bytes":
        side = image_side(n_in)
        if dims == 2 and side is None:
            raise ConfigError(
                f"cnn dims=2 needs a square byte image, but the bytes view has {n_in} bytes; "
                "use dims=1"
            )
        shape = (side, side) if dims == 2 else (n_in,)
        if dims == 2:  # pools 2x2 whatever pool says
            _check_fits(input_shape, side, "image side", min(kernel, 3), 2)
        else:
            _check_fits(input_shape, n_in, "length", kernel, pool)
        stem = ByteEmbedding(embed, shape) if embed else ByteInput((1, *shape))
        in_ch = embed or 1
    elif view == "seq":
        if len(input_shape) != 2:
            raise ConfigError(f"cnn over seq needs (T, F) samples, got shape {input_shape}")
        if dims != 1:
            raise ConfigError("cnn over seq is 1-D over packets; use dims=1")
        stem, in_ch = nn.Sequential(SeqInput(input_shape[1]), _Transpose()), input_shape[1]
        pool = min(pool, 2)  # a few dozen packets: keep resolution
        _check_fits(input_shape, input_shape[0], "number of packets", kernel, pool)
    else:
        raise ConfigError(f"cnn reads the bytes or seq view, not {view!r}")

    if dims == 2:
        k = min(kernel, 3)
        conv1 = nn.Conv2d(in_ch, c1, k, padding=k // 2)
        conv2 = nn.Conv2d(c1, c2, k, padding=k // 2)
        pool_layer: nn.Module = nn.MaxPool2d(2)
    else:
        conv1 = nn.Conv1d(in_ch, c1, kernel, padding=kernel // 2)
        conv2 = nn.Conv1d(c1, c2, kernel, padding=kernel // 2)
        pool_layer = nn.MaxPool1d(pool) if pool > 1 else nn.Identity()
    blocks = [
        ("conv1", nn.Sequential(stem, conv1, nn.ReLU(), pool_layer)),  # (B, C1, L/pool)
        ("conv2", nn.Sequential(conv2, nn.ReLU())),  # (B, C2, L/pool)
        (
            "fc",
            nn.Sequential(GlobalPool(), nn.Linear(2 * c2, hidden), nn.ReLU(), nn.Dropout(dropout)),
        ),
        ("head", nn.Linear(hidden, n_classes)),
    ]
    return BlockModel(blocks, view=view, input_shape=input_shape, n_classes=n_classes, name="cnn")
