"""Building blocks shared by the neural models.

Input preprocessing lives in modules here and sits *inside* each model's first
block, so a raw row of a dataset view (``uint8`` payload bytes, ``float32``
per-packet features) can be fed to a model as stored, by the training engines
and by split learning alike:

- :class:`ByteInput` turns payload bytes (0..255, any dtype) into floats in
  ``[0, 1]`` and reshapes them (to a 1-D signal, an image or a frame sequence);
- :class:`ByteEmbedding` maps each byte value to a learned vector instead;
- :class:`SeqInput` maps per-packet features through ``sign(x) * log1p(|x|)``
  (sizes in bytes and gaps in seconds span orders of magnitude) and then
  standardises each feature with buffers fitted on the training split by
  :func:`fit_input_scaler`; unfitted, it is the log transform alone.

The recurrent layers return their whole output sequence (see ``base.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn


def image_side(n: int) -> int | None:
    """Side of the square image with ``n`` pixels, or ``None`` if ``n`` is not a square."""
    side = math.isqrt(n)
    return side if side * side == n else None


def frame_shape(n: int) -> tuple[int, int]:
    """A near-square ``(h, w)`` with ``h * w == n`` and ``h <= w`` (64 -> 8x8, 48 -> 6x8)."""
    h = math.isqrt(n)
    while n % h:
        h -= 1
    return h, n // h


class ByteInput(nn.Module):
    """Payload bytes -> floats in [0, 1], reshaped to ``out_shape`` per sample."""

    def __init__(self, out_shape: Sequence[int]):
        super().__init__()
        self.out_shape = tuple(int(s) for s in out_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Bytes are 0..255 whatever dtype they arrive in, so always scale.
        x = x.to(torch.float32) / 255.0
        return x.reshape(x.shape[0], *self.out_shape)

    def extra_repr(self) -> str:
        return f"out_shape={self.out_shape}"


class ByteEmbedding(nn.Module):
    """Payload bytes -> a learned vector per byte value, channels first: ``(B, d, *out_shape)``.

    Byte values are symbols (0x16 opens a TLS handshake, 0x17 a record), not
    intensities: an embedding lets the first convolution see them as such.
    """

    def __init__(self, dim: int, out_shape: Sequence[int]):
        super().__init__()
        self.embed = nn.Embedding(256, dim)
        self.out_shape = tuple(int(s) for s in out_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idx = x.reshape(x.shape[0], *self.out_shape).to(torch.long).clamp_(0, 255)
        return self.embed(idx).movedim(-1, 1)  # (B, d, *out_shape)


class ChannelsLast(nn.Module):
    """Move the channel axis of ``(B, C, T, *S)`` after time: ``(B, T, C, *S)``.

    With ``flatten``: ``(B, T, C * prod(S))``, a feature vector per step.
    """

    def __init__(self, flatten: bool = False):
        super().__init__()
        self.flatten = flatten

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.movedim(1, 2)  # (B, T, C, *S)
        return x.flatten(2) if self.flatten else x


class SeqInput(nn.Module):
    """Per-packet features ``(B, T, F)`` -> signed log, standardised per feature."""

    def __init__(self, n_features: int, *, skip_padding: bool = False):
        super().__init__()
        # skip_padding: fit on present packets only (all-zero rows are padding), so the
        # statistics describe packets, not how short the flows are.
        self.skip_padding = skip_padding
        self.register_buffer("mean", torch.zeros(n_features))
        self.register_buffer("std", torch.ones(n_features))

    @staticmethod
    def _log(x: torch.Tensor) -> torch.Tensor:
        x = x.to(torch.float32)
        return torch.sign(x) * torch.log1p(x.abs())

    @torch.no_grad()
    def fit(self, x: torch.Tensor) -> None:
        """Set the per-feature mean and std from training rows ``(N, T, F)``."""
        rows = x.reshape(-1, x.shape[-1])  # (N*T, F)
        if self.skip_padding:
            present = rows[(rows != 0).any(1)]
            rows = present if len(present) > 1 else rows
        z = self._log(rows)
        self.mean.copy_(z.mean(0))
        # A constant feature (e.g. a flag never set) keeps std 1 instead of dividing by 0.
        std = z.std(0)
        self.std.copy_(torch.where(std > 1e-6, std, torch.ones_like(std)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self._log(x) - self.mean) / self.std  # (B, T, F)


def has_input_scaler(model: nn.Module) -> bool:
    """Whether ``model`` has an input standardisation to fit (:func:`fit_input_scaler`)."""
    return any(isinstance(m, SeqInput) for m in model.modules())


def fit_input_scaler(model: nn.Module, x_train: torch.Tensor | None) -> bool:
    """Fit the input standardisation of ``model``'s first block on training rows.

    Returns ``True`` when the model has a fitted scaler (a :class:`SeqInput`),
    ``False`` when its input needs no fitting (bytes). Call it before wrapping the
    model for data parallelism, on the same rows on every rank.
    """
    scalers = [m for m in model.modules() if isinstance(m, SeqInput)]
    if not scalers or x_train is None:
        return False
    for scaler in scalers:
        scaler.fit(torch.as_tensor(x_train))
    return True


class Recurrent(nn.Module):
    """An ``nn.LSTM``/``nn.GRU`` layer that returns only its output sequence ``(B, T, H)``."""

    def __init__(self, rnn: nn.RNNBase):
        super().__init__()
        self.rnn = rnn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)  # (B, T, H)
        return out


class SeqPool(nn.Module):
    """``(B, T, *F)`` -> ``(B, 2 * prod(F))``: mean and max over time, concatenated.

    Mean and max rather than the last step, because short flows are zero-padded at
    the end and their last step is padding.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(2)  # (B, T, F)
        return torch.cat([x.mean(1), x.amax(1)], dim=1)


class LastFrame(nn.Module):
    """``(B, T, C, H, W)`` -> ``(B, C, H, W)``: the recurrent state after the last frame.

    With ``masked``, the last channel is the presence mask and is dropped.
    """

    def __init__(self, masked: bool = False):
        super().__init__()
        self.masked = masked

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, -1, :-1] if self.masked else x[:, -1]


class MaskedFramePool(nn.Module):
    """``(B, T, C + 1, H, W)`` (mask last) -> ``(B, 2C)``: mean and max over present frames and positions.

    The convolutional counterpart of :class:`MaskedSeqPool`: every frame's state
    reaches the classifier directly (the gradient does not have to travel back
    through the whole recurrence from the last frame), and a pattern counts wherever
    it sits in the frame, as in the CNN's global pooling. Padding frames are ignored.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, m = x[:, :, :-1], x[:, :, -1:, :1, :1]  # (B, T, C, H, W), (B, T, 1, 1, 1)
        n = m.sum(1).clamp(min=1.0) * h.shape[-2] * h.shape[-1]  # (B, 1, 1, 1)
        mean = (h * m).sum((1, 3, 4)) / n.flatten(1)
        top = h.masked_fill(m == 0, float("-inf")).amax((1, 3, 4))
        return torch.cat([mean, top], dim=1)


class MaskedTimePool(nn.Module):
    """``(B, T, C + 1, H, W)`` (mask last) -> ``(B, 2C, H, W)``: mean and max over present frames.

    Position by position: in per-packet frames a position is a header field (the IP
    length, the protocol, the TCP flags), so it keeps its place; every frame's state
    still reaches the classifier directly. Padding frames are ignored.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, m = x[:, :, :-1], x[:, :, -1:, :1, :1]  # (B, T, C, H, W), (B, T, 1, 1, 1)
        mean = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
        top = h.masked_fill(m == 0, float("-inf")).amax(1)
        return torch.cat([mean, top], dim=1)


class ConvLSTMCell(nn.Module):
    """A convolutional LSTM cell (Shi et al., 2015): all four gates are convolutions.

    The input-to-gate convolution is applied to every frame at once by
    :class:`ConvRecurrent`; the cell adds the hidden-to-gate convolution per step.
    """

    n_gates = 4

    def __init__(self, hidden: int, kernel: int):
        super().__init__()
        self.hidden = hidden
        self.conv_h = nn.Conv2d(hidden, 4 * hidden, kernel, padding=kernel // 2, bias=False)

    def init_state(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, _, h, w = like.shape
        zeros = like.new_zeros(b, self.hidden, h, w)
        return zeros, zeros

    def forward(self, gx: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]):
        h, c = state  # (B, Hd, H, W) each
        i, f, o, g = (gx + self.conv_h(h)).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, (h, c)


class ConvGRUCell(nn.Module):
    """A convolutional GRU cell (Ballas et al., 2016): update, reset and candidate are convolutions."""

    n_gates = 3

    def __init__(self, hidden: int, kernel: int):
        super().__init__()
        self.hidden = hidden
        pad = kernel // 2
        self.conv_zr = nn.Conv2d(hidden, 2 * hidden, kernel, padding=pad, bias=False)
        self.conv_n = nn.Conv2d(hidden, hidden, kernel, padding=pad, bias=False)

    def init_state(self, like: torch.Tensor) -> torch.Tensor:
        b, _, h, w = like.shape
        return like.new_zeros(b, self.hidden, h, w)

    def forward(self, gx: torch.Tensor, h: torch.Tensor):
        gx_zr, gx_n = gx.split([2 * self.hidden, self.hidden], dim=1)
        z, r = torch.sigmoid(gx_zr + self.conv_zr(h)).chunk(2, dim=1)
        n = torch.tanh(gx_n + self.conv_n(r * h))
        h = (1 - z) * n + z * h
        return h, h


class ConvRecurrent(nn.Module):
    """Run a convolutional recurrent cell over frames ``(B, T, C, H, W)`` -> ``(B, T, Hd, H, W)``."""

    def __init__(
        self, cell: str, in_channels: int, hidden: int, kernel: int = 3, *, masked: bool = False
    ):
        super().__init__()
        self.masked = masked
        cells = {"lstm": ConvLSTMCell, "gru": ConvGRUCell}
        if cell not in cells:
            raise ValueError(f"cell must be one of {sorted(cells)}, got {cell!r}")
        if kernel % 2 == 0:
            raise ValueError(f"kernel must be odd so frames keep their size, got {kernel}")
        self.cell = cells[cell](hidden, kernel)
        # Input-to-gate convolution, with the gates' bias, for all frames in one call.
        self.conv_x = nn.Conv2d(
            in_channels, self.cell.n_gates * hidden, kernel, padding=kernel // 2
        )
        if cell == "lstm":
            # Forget-gate bias 1: remember by default at the start of training.
            with torch.no_grad():
                self.conv_x.bias[hidden : 2 * hidden].fill_(1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.masked:  # the last channel is the presence mask (see WithMask)
            x, mask = x[:, :, :-1], x[:, :, -1:]
        b, t = x.shape[:2]
        gx = self.conv_x(x.flatten(0, 1))  # (B*T, G*Hd, H, W)
        gx = gx.unflatten(0, (b, t))  # (B, T, G*Hd, H, W)
        # unbind, not gx[:, step] in the loop: the backward of each indexing would
        # allocate and zero a gradient the size of all of gx (a third of the time of a
        # training step was spent filling those zeros); unbind's backward is one stack.
        frames = gx.unbind(1)
        masks = mask[:, :, :, :1, :1].unbind(1) if self.masked else None  # (B, 1, 1, 1) each
        state = self.cell.init_state(frames[0])
        outs = []
        for step in range(t):
            h, new = self.cell(frames[step], state)
            if self.masked:
                # A padding frame leaves the state as it was: the last output is the
                # state after the flow's last packet, not after the padding.
                new = _blend(masks[step], new, state)
                h = new[0] if isinstance(new, tuple) else new
            state = new
            outs.append(h)
        out = torch.stack(outs, dim=1)  # (B, T, Hd, H, W)
        if self.masked:
            out = torch.cat([out, mask.expand(-1, -1, 1, *out.shape[3:])], dim=2)
        return out


def _blend(m: torch.Tensor, new, old):
    """``m * new + (1 - m) * old`` for a state tensor or a tuple of them."""
    if isinstance(new, tuple):
        return tuple(m * n + (1 - m) * o for n, o in zip(new, old, strict=True))
    return m * new + (1 - m) * old


def presence_mask(x: torch.Tensor) -> torch.Tensor:
    """``(B, T, ...)`` -> ``(B, T)`` float mask: 1 for steps up to the last non-zero one.

    The views pad short flows at the end with all-zero steps (a ``seq`` padding row,
    a ``pkt_bytes`` packet that is not there: a real packet's row never starts with
    a zero byte, its direction in the payload layout, its IP version in the ip
    layout; payload bytes past the flow's end). A step is present when it or any
    later step holds a non-zero value; the first step always counts, so every
    sequence has a length of at least 1.
    """
    nonzero = (x.reshape(x.shape[0], x.shape[1], -1) != 0).any(-1)  # (B, T)
    present = nonzero.flip(1).cummax(1).values.flip(1)
    present[:, 0] = True
    return present.to(torch.float32)


class WithMask(nn.Module):
    """Apply ``stem`` to raw rows and append their presence mask as a last channel.

    Only one tensor flows between blocks (split learning cuts between them), so the
    mask travels inside it: ``(B, T, D)`` -> ``(B, T, D + 1)``, or for frames
    ``(B, T, C, H, W)`` -> ``(B, T, C + 1, H, W)`` with the mask broadcast over the frame.
    ``steps`` reshapes the raw sample to ``(T, -1)`` for :func:`presence_mask`.
    """

    def __init__(self, stem: nn.Module, steps: int):
        super().__init__()
        self.stem = stem
        self.steps = int(steps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = presence_mask(x.reshape(x.shape[0], self.steps, -1))  # (B, T)
        z = self.stem(x)
        if z.dim() == 3:
            return torch.cat([z, mask[..., None]], dim=-1)
        m = mask[:, :, None, None, None].expand(-1, -1, 1, *z.shape[3:])
        return torch.cat([z, m], dim=2)


class SizeEmbedding(nn.Module):
    """A learned vector per (direction, packet-size bucket) of feature ``feature``.

    Sizes are symbols as much as magnitudes (a 20-byte STUN header, a DNS query, a
    1200-byte padded QUIC Initial): 8-byte buckets up to ``linear_max`` bytes, then
    one bucket per doubling (offloaded frames reach tens of kilobytes); the sign
    (the seq view's direction) doubles the table; index 0 is a zero size (padding).
    """

    def __init__(self, dim: int, feature: int = 0, width: int = 8, linear_max: int = 1536):
        super().__init__()
        self.feature, self.width, self.linear_max = int(feature), int(width), int(linear_max)
        self.n_linear = self.linear_max // self.width
        self.n_buckets = self.n_linear + 8  # doublings up to linear_max * 2**8 (393 KB)
        self.embed = nn.Embedding(1 + 2 * self.n_buckets, dim, padding_idx=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x[..., self.feature].to(torch.float32)  # (B, T), signed
        a = s.abs()
        big = torch.log2(a.clamp(min=self.linear_max) / self.linear_max).floor()
        bucket = torch.where(a < self.linear_max, a / self.width, self.n_linear + big)
        bucket = bucket.floor().clamp_(0, self.n_buckets - 1).long()
        idx = 1 + bucket + torch.where(s < 0, self.n_buckets, 0)
        return self.embed(torch.where(s == 0, 0, idx))  # (B, T, dim)


class PacketFeatures(nn.Module):
    """Raw ``seq`` rows ``(B, T, F)`` -> standardised features and a size embedding ``(B, T, F + d)``."""

    def __init__(self, n_features: int, size_embed: int = 16):
        super().__init__()
        self.scaler = SeqInput(n_features, skip_padding=True)
        self.size = SizeEmbedding(size_embed) if size_embed else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.scaler(x)
        return z if self.size is None else torch.cat([z, self.size(x)], dim=-1)


def _split_mask(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B, T, D + 1)`` -> features ``(B, T, D)`` and the mask ``(B, T)``."""
    return x[..., :-1], x[..., -1]


class MaskedRecurrent(nn.Module):
    """An ``nn.LSTM``/``nn.GRU`` over ``(B, T, D + 1)`` (mask last) that skips padding.

    The sequences are packed by length, so the recurrence stops at each flow's last
    packet instead of running on through padding; padding steps of the output are 0.
    Returns ``(B, T, H + 1)``, the mask carried on for the next block.
    """

    def __init__(self, rnn: nn.RNNBase):
        super().__init__()
        self.rnn = rnn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z, mask = _split_mask(x)
        lengths = mask.sum(1).to(torch.int64).clamp_(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(
            z, lengths, batch_first=True, enforce_sorted=False
        )
        out, _ = self.rnn(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=z.shape[1])
        return torch.cat([out, mask[..., None]], dim=-1)


class MaskedSeqPool(nn.Module):
    """``(B, T, H + 1)`` (mask last) -> ``(B, 3H)``: mean, max and last over present steps."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, mask = _split_mask(x)
        m = mask[..., None]  # (B, T, 1)
        n = m.sum(1).clamp(min=1.0)
        mean = (h * m).sum(1) / n
        top = h.masked_fill(m == 0, float("-inf")).amax(1)
        last = (n.squeeze(1).to(torch.int64) - 1).clamp(min=0)
        return torch.cat([mean, top, h[torch.arange(h.shape[0]), last]], dim=1)
