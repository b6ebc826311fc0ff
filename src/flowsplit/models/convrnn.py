"""ConvLSTM and ConvGRU over a sequence of 2-D frames.

Frames come from ``pkt_bytes`` (one frame per packet: 16 packets of 64 bytes ->
16 frames of 8x8; in the default payload layout a frame's first row holds the
packet's header fields and the other seven its first 56 payload bytes) or from the
payload-byte image cut into horizontal strips (784 bytes -> 28x28 -> 7 frames of 4x28 with ``rows_per_frame=4``). The gates
are convolutions over the frame (see ``layers.ConvLSTMCell``/``ConvGRUCell``).

Blocks: ``rnn1`` (input scaling + framing + conv-recurrent layer), ``rnn2``
(conv-recurrent layer), ``fc`` (summary of ``rnn2``'s states, dense), ``head``.

The summary is by default (``pool="time"``) the mean and the max of the states over
the flow's frames, position by position: every packet's state reaches the classifier
directly, so the gradient need not travel back through the whole recurrence from the
last frame; with the last state alone (``pool="last"``) and Adam at 1e-3 the models
learnt slowly (nDPI 8-protocol set, validation macro-F1 after 3 epochs: ConvLSTM
0.33 that way, ConvGRU 0.45 with this summary at 1e-3 and 0.86 at 3e-3, the default
rate of these models, see ``models.defaults``).
The recurrent blocks return the whole sequence ``(B, T, Hd + 1, H, W)``, the
last channel the frames' presence mask: short flows are zero-padded to ``T``
packets, and a padding frame leaves the recurrent state as it was, so the last
frame's state is the state after the flow's last packet.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from torch import nn

from flowsplit.errors import ConfigError
from flowsplit.models.base import BlockModel
from flowsplit.models.checks import check_dropout, check_int, check_size, check_sizes, option_error
from flowsplit.models.layers import (
    ByteEmbedding,
    ByteInput,
    ChannelsLast,
    ConvRecurrent,
    LastFrame,
    MaskedFramePool,
    MaskedTimePool,
    WithMask,
    frame_shape,
    image_side,
)

ROWS_PER_FRAME = 4
"""The default ``rows_per_frame`` (``bytes``: 784 bytes -> 7 frames of 4x28)."""


def _frames(name: str, view: str, input_shape: tuple[int, ...], rows_per_frame: int):
    """(T, H, W) of the frame sequence a sample of ``view`` is cut into."""
    check_int(name, "rows_per_frame", rows_per_frame, 1)
    if view == "pkt_bytes":
        if len(input_shape) == 3:
            frames = input_shape
        elif len(input_shape) == 2:
            n_pkt, n_bytes = input_shape
            frames = (n_pkt, *frame_shape(n_bytes))
        else:
            raise ConfigError(f"pkt_bytes samples must be (P, L) or (P, H, W), got {input_shape}")
        # One frame per packet: rows_per_frame does not apply, but a value given that no
        # frame could have is a mistake to say (a packet's frame has frames[1] rows).
        if rows_per_frame > frames[1] and rows_per_frame != ROWS_PER_FRAME:
            raise option_error(
                name,
                "rows_per_frame",
                rows_per_frame,
                f"at most {frames[1]}, the rows of a packet's frame (pkt_bytes of shape "
                f"{input_shape}; the option applies to the bytes view only)",
            )
        return frames
    if view == "bytes":
        if len(input_shape) == 2:
            rows, cols = input_shape
        else:
            side = image_side(input_shape[0])
            rows, cols = (side, side) if side else frame_shape(input_shape[0])
        if rows % rows_per_frame:
            raise ConfigError(
                f"rows_per_frame={rows_per_frame} does not divide the {rows} image rows; "
                f"choose a divisor of {rows}"
            )
        return rows // rows_per_frame, rows_per_frame, cols
    raise ConfigError(f"convolutional recurrent models read pkt_bytes or bytes, not {view!r}")


def _build(
    cell: str,
    name: str,
    *,
    view: str,
    input_shape: Sequence[int],
    n_classes: int,
    channels: Sequence[int],
    embed: int,
    kernel: int,
    hidden: int,
    dropout: float,
    rows_per_frame: int,
    pool: str,
) -> BlockModel:
    if pool not in ("global", "time", "last"):
        raise ConfigError(f"{name} pool must be global, time or last, got {pool!r}")
    input_shape = tuple(int(s) for s in input_shape)
    check_sizes(name, "channels", channels)
    check_int(name, "embed", embed, 0)
    check_int(name, "kernel", kernel, 1)
    check_size(name, "hidden", hidden)
    check_dropout(name, "dropout", dropout)
    t, fh, fw = _frames(name, view, input_shape, rows_per_frame)
    widest = 2 * max(fh, fw) - 1  # wider, some taps never see the frame (it is padded)
    if kernel > widest:  # and the gates' weights grow as kernel**2
        raise option_error(
            name,
            "kernel",
            kernel,
            f"at most {widest} (2 x the larger side of a {fh}x{fw} frame - 1; {view} of "
            f"shape {input_shape})",
        )
    c1, c2 = (int(c) for c in channels)
    # Pool only dimensions that can take it (a 1-row strip stays 1 row high).
    if pool == "global":  # (B, 2 * C2): mean and max over present frames and positions
        summary, n_summary = [MaskedFramePool()], 2 * c2
    else:  # 2x2 max-pooled, position by position: the last state, or mean and max over time
        pool2 = (2 if fh >= 2 else 1, 2 if fw >= 2 else 1)
        first = LastFrame(masked=True) if pool == "last" else MaskedTimePool()
        summary = [first, nn.MaxPool2d(pool2), nn.Flatten()]
        n_summary = (1 if pool == "last" else 2) * c2 * (fh // pool2[0]) * (fw // pool2[1])
    if embed:  # (B, d, T, H, W) -> (B, T, d, H, W): d channels per frame
        stem, in_ch = nn.Sequential(ByteEmbedding(embed, (t, fh, fw)), ChannelsLast()), embed
    else:
        stem, in_ch = ByteInput((t, 1, fh, fw)), 1
    # The presence mask rides along as one more channel (see layers.WithMask): padding
    # frames (packets a short flow does not have) leave the recurrent state unchanged.
    blocks = [
        (
            "rnn1",
            nn.Sequential(WithMask(stem, t), ConvRecurrent(cell, in_ch, c1, kernel, masked=True)),
        ),
        ("rnn2", ConvRecurrent(cell, c1, c2, kernel, masked=True)),
        (
            "fc",
            nn.Sequential(*summary, nn.Linear(n_summary, hidden), nn.ReLU(), nn.Dropout(dropout)),
        ),
        ("head", nn.Linear(hidden, n_classes)),
    ]
    return BlockModel(blocks, view=view, input_shape=input_shape, n_classes=n_classes, name=name)


def build_convlstm(
    *,
    view: str,
    input_shape: Sequence[int],
    n_classes: int,
    channels: Sequence[int] = (16, 16),
    embed: int = 8,
    kernel: int = 3,
    hidden: int = 128,
    dropout: float = 0.2,
    rows_per_frame: int = ROWS_PER_FRAME,
    pool: str = "time",
) -> BlockModel:
    """Build the ConvLSTM.

    Args:
        view: ``pkt_bytes`` (``(P, L)`` or ``(P, H, W)``) or ``bytes`` (image strips).
        input_shape: shape of one stored sample.
        n_classes: number of classes.
        channels: hidden channels of ``rnn1`` and ``rnn2``.
        embed: size of the byte embedding (channels of each frame); 0 feeds bytes / 255.
        kernel: gate convolution kernel (odd).
        hidden: width of the dense ``fc`` block.
        dropout: dropout after ``fc`` (0 disables it).
        rows_per_frame: image rows per frame when reading ``bytes`` (must divide the
            image's rows). ``pkt_bytes`` has one frame per packet and ignores it (a value
            above a packet frame's rows is refused there).
        pool: what ``fc`` reads: ``global`` (mean and max of ``rnn2``'s states over
            the flow's frames and the frame's positions) or ``last`` (the state after
            the last frame, 2x2 max-pooled, position by position).
    """
    return _build("lstm", "convlstm", **locals())


def build_convgru(**options: Any) -> BlockModel:
    """Build the ConvGRU (the same keywords as :func:`build_convlstm`)."""
    bound = inspect.signature(build_convlstm).bind(**options)
    bound.apply_defaults()
    return _build("gru", "convgru", **bound.arguments)


# The registry reads a builder's options and their defaults from its signature.
build_convgru.__signature__ = inspect.signature(build_convlstm)  # type: ignore[attr-defined]
