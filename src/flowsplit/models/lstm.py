"""LSTM over packets' first bytes (``pkt_bytes``, one step per packet, the default),
per-packet features (``seq``) or the rows of the payload-byte image (``bytes``).

What it reads matters more than any setting below. Over ``pkt_bytes`` rows in the
``payload`` layout (the default of ``flowsplit prepare``: direction, IP length,
protocol, TCP flags, header length and window, then the packet's first payload
bytes, at the same column for every packet) the nDPI 8-protocol set's test macro-F1
was 0.991, 0.980 and 0.991 for seeds 0-2 (best validation 0.967, 0.964, 0.955),
against 0.866, 0.864 and 0.862 (validation 0.861, 0.876, 0.862) over the former
``ip`` layout (the first 64 bytes from the IP header on): there an IPv6 or
option-laden TCP header leaves few or no payload bytes in the row, the payload sits
at a different column for each header size, the direction is not in the row, and
the IP identification and TCP sequence numbers are per-flow noise to memorise
(training loss 0.02 while validation stalled at 0.86; zeroing them alone gave
validation 0.873, test 0.877, means over seeds 0-2). The settings below were chosen on the ``ip`` layout.

Blocks: ``lstm1`` (input features + LSTM layer), ``lstm2`` (LSTM layer), ``fc``
(mean, max and last output over the flow's packets + dense), ``head`` (logits).

What a recurrent model needs on packet sequences, and what each part is for:

- input: per-packet features are log-scaled and standardised with statistics of
  the training rows' packets (:func:`flowsplit.models.layers.fit_input_scaler`),
  and each packet's signed size (its direction and size bucket) gets a learned
  vector (:class:`~flowsplit.models.layers.SizeEmbedding`): sizes identify
  protocols by their exact values, not only their magnitude;
- length: short flows are zero-padded to ``T`` packets; the padding is masked
  (the mask rides along as the last channel of the tensor between blocks, the only
  thing split learning passes on) and the LSTMs run on packed sequences, so the
  recurrence ends at the flow's last packet and pooling ignores the padding.

Each LSTM block returns its whole output sequence ``(B, T, D * H + 1)`` (mask last;
``D`` = 2 with ``bidirectional``, else 1) so split learning can cut between them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import nn

from flowsplit.errors import ConfigError
from flowsplit.models.base import BlockModel
from flowsplit.models.checks import check_dropout, check_int, check_size
from flowsplit.models.layers import (
    ByteEmbedding,
    ByteInput,
    ChannelsLast,
    MaskedRecurrent,
    MaskedSeqPool,
    PacketFeatures,
    WithMask,
    frame_shape,
)


def build_lstm(
    *,
    view: str,
    input_shape: Sequence[int],
    n_classes: int,
    embed: int = 32,
    size_embed: int = 16,
    hidden_size: int = 128,
    hidden: int = 128,
    dropout: float = 0.2,
    bidirectional: bool = False,
    step_bytes: int = 0,
    input_dropout: float = 0.2,
) -> BlockModel:
    """Build the LSTM.

    Args:
        view: ``seq`` (``(T, F)`` per-packet features, feature 0 the signed packet size
            as the seq view stores it) or ``bytes`` (read as the rows of an image:
            784 bytes -> 28 steps of 28 bytes; ``(R, C)`` as stored).
        input_shape: shape of one stored sample.
        n_classes: number of classes.
        embed: pkt_bytes and bytes: size of the byte embedding (a step is then a
            packet's 64 or a row's 28 embedded bytes); 0 feeds bytes / 255. 32 (with
            ``input_dropout`` 0.2) by default: on the nDPI 8-protocol set
            (pkt_bytes) the best validation macro-F1 over seeds 0-2 was 0.875 against
            0.858 at 8 without input dropout (0.868 at 32 alone, 0.854 at 16), for
            about 2.7x the CPU per epoch (2.2 against 0.8 s, loaded machine); over
            seeds 0-4 validation 0.876, test 0.866 (0.856 before). On USTC-TFC2016
            (bytes) it left the test macro-F1 as it was (0.904, 0.884 for seeds 0, 1
            against 0.890, 0.889).
        size_embed: seq only: size of the packet-size embedding; 0 disables it.
        hidden_size: LSTM state size of both layers.
        hidden: width of the dense ``fc`` block.
        dropout: dropout after ``fc`` (0 disables it).
        bidirectional: run each LSTM layer in both directions (doubles its output and
            the CPU per step). Not the default: on the nDPI 8-protocol set (pkt_bytes,
            embed 8, seeds 0-4) it raised the best validation macro-F1 by 0.98 points on average
            (0.869 against 0.859; 4 of 5 seeds higher), under the 1 point set
            beforehand as worth twice the CPU, and left the test macro-F1 as it was
            (0.855 against 0.856).
        step_bytes: bytes only: payload bytes per step (must divide the stored length);
            0 reads the near-square image rows (784 bytes -> 28 steps of 28).
        input_dropout: dropout on each step's input features (0 disables it).
            Tried and not kept (seeds 0-2, validation, 0.858 baseline): hidden_size
            256 (0.850), Adam 3e-3 (0.852), 30 epochs with patience 8 (0.859), weight
            decay 1e-4 (0.859), dropout 0.5 (0.852), balanced class weights (0.825), a
            per-packet convolution (32 channels, kernel 3, max-pool 4) before the LSTM
            (0.838; 0.845 with embed 16).
    """
    input_shape = tuple(int(s) for s in input_shape)
    for option, value in (("embed", embed), ("size_embed", size_embed), ("step_bytes", step_bytes)):
        check_int("lstm", option, value, 0)
    check_size("lstm", "hidden_size", hidden_size)
    check_size("lstm", "hidden", hidden)
    check_dropout("lstm", "dropout", dropout)
    check_dropout("lstm", "input_dropout", input_dropout)
    stem, steps, n_feat = _stem(view, input_shape, int(embed), int(size_embed), int(step_bytes))
    h, dirs = int(hidden_size), 2 if bidirectional else 1
    if input_dropout:  # on the features only: the presence mask is appended after the stem
        stem = nn.Sequential(stem, nn.Dropout(float(input_dropout)))

    def lstm(n_in: int) -> MaskedRecurrent:
        return MaskedRecurrent(
            nn.LSTM(n_in, h, batch_first=True, bidirectional=bool(bidirectional))
        )

    blocks = [
        ("lstm1", nn.Sequential(WithMask(stem, steps), lstm(n_feat))),
        ("lstm2", lstm(dirs * h)),
        (
            "fc",
            nn.Sequential(
                MaskedSeqPool(), nn.Linear(3 * dirs * h, hidden), nn.ReLU(), nn.Dropout(dropout)
            ),
        ),
        ("head", nn.Linear(hidden, n_classes)),
    ]
    return BlockModel(blocks, view=view, input_shape=input_shape, n_classes=n_classes, name="lstm")


def _stem(
    view: str, input_shape: tuple[int, ...], embed: int, size_embed: int, step_bytes: int
) -> tuple[nn.Module, int, int]:
    """What turns a stored sample into LSTM steps: the stem, the steps and the features
    per step (see :func:`build_lstm`'s arguments)."""
    if view == "seq":
        if len(input_shape) != 2:
            raise ConfigError(f"lstm over seq needs (T, F) samples, got shape {input_shape}")
        steps, n_feat = input_shape
        return PacketFeatures(n_feat, size_embed), steps, n_feat + size_embed
    if view == "pkt_bytes":  # one step per packet: its first L bytes, embedded
        if len(input_shape) not in (2, 3):
            raise ConfigError(f"pkt_bytes samples must be (P, L) or (P, H, W), got {input_shape}")
        return _byte_steps(embed, input_shape[0], math.prod(input_shape[1:]))
    if view == "bytes":  # one image row per step
        n_bytes = math.prod(input_shape)
        if step_bytes:
            if n_bytes % step_bytes:
                raise ConfigError(
                    f"step_bytes={step_bytes} does not divide the {n_bytes} payload bytes"
                )
            return _byte_steps(embed, n_bytes // step_bytes, step_bytes)
        if len(input_shape) == 2:
            return _byte_steps(embed, *input_shape)
        return _byte_steps(embed, *frame_shape(input_shape[0]))
    raise ConfigError(f"lstm reads the pkt_bytes, bytes or seq view, not {view!r}")


def _byte_steps(embed: int, steps: int, n_feat: int) -> tuple[nn.Module, int, int]:
    """Bytes as steps: embedded, ``(B, d, T, C) -> (B, T, C*d)``, or / 255 without an
    embedding (``(B, T, F)``)."""
    if embed:
        stem = nn.Sequential(ByteEmbedding(embed, (steps, n_feat)), ChannelsLast(True))
        return stem, steps, n_feat * embed
    return ByteInput((steps, n_feat)), steps, n_feat
