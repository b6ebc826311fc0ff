"""LSTM over per-packet sequences (``seq``) or over the rows of the payload-byte image.

Blocks: ``lstm1`` (input scaling + LSTM layer), ``lstm2`` (LSTM layer), ``fc``
(mean and max over time + dense), ``head`` (logits). Each LSTM block returns its
whole output sequence ``(B, T, H)`` so split learning can cut between them.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from flowsplit.errors import ConfigError
from flowsplit.models.base import BlockModel
from flowsplit.models.layers import (
    ByteEmbedding,
    ByteInput,
    ChannelsLast,
    Recurrent,
    SeqInput,
    SeqPool,
    frame_shape,
)


def build_lstm(
    *,
    view: str,
    input_shape: Sequence[int],
    n_classes: int,
    embed: int = 8,
    hidden_size: int = 96,
    hidden: int = 128,
    dropout: float = 0.2,
) -> BlockModel:
    """Build the LSTM.

    Args:
        view: ``seq`` (``(T, F)`` per-packet features) or ``bytes`` (read as the rows
            of an image: 784 bytes -> 28 steps of 28 bytes; ``(R, C)`` as stored).
        embed: bytes only: size of the byte embedding (a step is then a row's 28
            embedded bytes); 0 feeds bytes / 255.
        input_shape: shape of one stored sample.
        n_classes: number of classes.
        hidden_size: LSTM state size of both layers.
        hidden: width of the dense ``fc`` block.
        dropout: dropout after ``fc`` (0 disables it).
    """
    input_shape = tuple(int(s) for s in input_shape)
    if view == "seq":
        if len(input_shape) != 2:
            raise ConfigError(f"lstm over seq needs (T, F) samples, got shape {input_shape}")
        steps, n_feat = input_shape
        stem = SeqInput(n_feat)
    elif view == "bytes":
        if len(input_shape) == 2:
            steps, n_feat = input_shape
        else:
            steps, n_feat = frame_shape(input_shape[0])
        if embed:
            # (B, d, T, C) -> (B, T, C*d): one embedded image row per step
            stem = nn.Sequential(ByteEmbedding(embed, (steps, n_feat)), ChannelsLast(True))
            n_feat *= embed
        else:
            stem = ByteInput((steps, n_feat))  # (B, T, F): one image row per step
    else:
        raise ConfigError(f"lstm reads the seq or bytes view, not {view!r}")
    h = int(hidden_size)
    blocks = [
        ("lstm1", nn.Sequential(stem, Recurrent(nn.LSTM(n_feat, h, batch_first=True)))),
        ("lstm2", Recurrent(nn.LSTM(h, h, batch_first=True))),
        ("fc", nn.Sequential(SeqPool(), nn.Linear(2 * h, hidden), nn.ReLU(), nn.Dropout(dropout))),
        ("head", nn.Linear(hidden, n_classes)),
    ]
    return BlockModel(blocks, view=view, input_shape=input_shape, n_classes=n_classes, name="lstm")
