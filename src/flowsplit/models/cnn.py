"""Convolutional network over payload bytes (1-D signal or 2-D image) or packet sequences.

Blocks: ``conv1`` (input scaling + conv + pool), ``conv2`` (conv + pool), ``fc``
(flatten + dense), ``head`` (logits). No batch normalisation: its statistics are
per-process, so data-parallel training would no longer be the centralised
optimisation on the same global batches.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from flowsplit.errors import ConfigError
from flowsplit.models.base import BlockModel
from flowsplit.models.layers import ByteInput, SeqInput, image_side


def _pool_1d(length: int) -> int:
    # Long byte signals shrink faster than short packet sequences.
    return 4 if length >= 64 else 2 if length >= 4 else 1


def build_cnn(
    *,
    view: str,
    input_shape: Sequence[int],
    n_classes: int,
    dims: int | None = None,
    channels: Sequence[int] = (32, 64),
    kernel: int = 3,
    hidden: int = 128,
    dropout: float = 0.2,
) -> BlockModel:
    """Build the CNN.

    Args:
        view: ``bytes`` (raw payload, ``(L,)`` or ``(S, S)``) or ``seq`` (``(T, F)``).
        input_shape: shape of one stored sample.
        n_classes: number of classes.
        dims: 2 for an image over ``bytes`` (default when L is a square, e.g. 784 ->
            28x28), 1 for a 1-D convolution (default otherwise and for ``seq``).
        channels: output channels of ``conv1`` and ``conv2``.
        kernel: convolution kernel size (odd; padding keeps the size before pooling).
        hidden: width of the dense ``fc`` block.
        dropout: dropout after ``fc`` (0 disables it).
    """
    input_shape = tuple(int(s) for s in input_shape)
    c1, c2 = (int(c) for c in channels)
    n_in = 1
    for s in input_shape:
        n_in *= s
    if view == "bytes":
        side = image_side(n_in)
        dims = dims if dims is not None else (2 if side else 1)
        if dims == 2 and side is None:
            raise ConfigError(
                f"cnn dims=2 needs a square byte image, but the bytes view has {n_in} bytes; "
                "use dims=1"
            )
    elif view == "seq":
        if len(input_shape) != 2:
            raise ConfigError(f"cnn over seq needs (T, F) samples, got shape {input_shape}")
        if dims not in (None, 1):
            raise ConfigError("cnn over seq is 1-D over time; drop dims or use dims=1")
        dims = 1
    else:
        raise ConfigError(f"cnn reads the bytes or seq view, not {view!r}")
    if dims not in (1, 2):
        raise ConfigError(f"cnn dims must be 1 or 2, got {dims}")
    pad = kernel // 2

    if dims == 2:
        stem = ByteInput((1, side, side))  # (B, 1, S, S)
        conv, pool = nn.Conv2d, nn.MaxPool2d(2)
        p = 2
        out_len = (side // p // p) ** 2
    else:
        if view == "bytes":
            stem, n_ch, length = ByteInput((1, n_in)), 1, n_in  # (B, 1, L)
        else:
            t, f = input_shape
            # (B, T, F) -> (B, F, T): features are channels, the convolution runs over time.
            stem, n_ch, length = nn.Sequential(SeqInput(f), _Transpose()), f, t
        p = _pool_1d(length)
        conv, pool = nn.Conv1d, nn.MaxPool1d(p)
        out_len = length // p // p
    in_ch = 1 if dims == 2 else n_ch
    if out_len < 1:
        raise ConfigError(f"cnn input {input_shape} is too small for two pooling stages")

    blocks = [
        ("conv1", nn.Sequential(stem, conv(in_ch, c1, kernel, padding=pad), nn.ReLU(), pool)),
        ("conv2", nn.Sequential(conv(c1, c2, kernel, padding=pad), nn.ReLU(), pool)),
        (
            "fc",
            nn.Sequential(
                nn.Flatten(), nn.Linear(c2 * out_len, hidden), nn.ReLU(), nn.Dropout(dropout)
            ),
        ),
        ("head", nn.Linear(hidden, n_classes)),
    ]
    return BlockModel(blocks, view=view, input_shape=input_shape, n_classes=n_classes, name="cnn")


class _Transpose(nn.Module):
    """``(B, T, F)`` -> ``(B, F, T)``."""

    def forward(self, x):
        return x.transpose(1, 2)
