"""A small transformer over patches of packet bytes (in the spirit of YaTC).

Blocks: ``embed`` (bytes -> patch tokens), ``enc1`` .. ``encN`` (pre-norm transformer
encoder layers), ``head`` (norm, mean over the present tokens, logits).

A flow's input is cut into rows (``pkt_bytes``: one row per packet; ``bytes``: rows of
``patch`` bytes of the flow's payload) and each row into patches of ``patch`` bytes.
Each byte gets a learned vector (bytes are symbols, not intensities), a patch's
vectors are concatenated and projected to a token of ``dim``, and a learned position
(row, then patch within the row) is added: ``(B, rows * patches, dim)`` tokens, every
token attending to every other, as YaTC's flow encoder does over its packet patches.

Padding (packets a short flow does not have, payload past its end) is masked: the
tokens of an absent row take no part in attention nor in the final mean. Only one
tensor flows between blocks (split learning cuts between them), so the presence mask
rides along as the tokens' last channel, as in the recurrent models
(:class:`~flowsplit.models.layers.WithMask`): ``(B, T, dim + 1)``.

No batch normalisation (per-process statistics would part data-parallel training
from the centralised run); dropout is ``nn.Dropout`` modules only (attention weights
are not dropped), so the training loop's global-batch dropout masks cover them.

Sizes: the defaults (``dim`` 128, ``depth`` 4, ``heads`` 4, ``ff`` 256) give about
0.57 M parameters; YaTC's encoder is 2.1 M. The builder refuses more than
``MAX_PARAMS`` (2.5 M).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from flowsplit.errors import ConfigError
from flowsplit.models.base import BlockModel
from flowsplit.models.layers import presence_mask

MAX_PARAMS = 2_500_000
"""The most parameters the builder accepts (issue 32: at most 2.5 M)."""


class PatchEmbed(nn.Module):
    """Raw rows ``(B, *input_shape)`` -> tokens ``(B, rows * patches, dim + 1)``, mask last."""

    def __init__(self, rows: int, row_len: int, patch: int, embed: int, dim: int):
        super().__init__()
        self.rows, self.row_len, self.patch = int(rows), int(row_len), int(patch)
        self.patches = math.ceil(self.row_len / self.patch)
        self.pad = self.patches * self.patch - self.row_len
        self.bytes = nn.Embedding(256, embed)
        self.proj = nn.Linear(self.patch * embed, dim)
        self.row_pos = nn.Parameter(torch.zeros(self.rows, 1, dim))
        self.patch_pos = nn.Parameter(torch.zeros(1, self.patches, dim))
        nn.init.trunc_normal_(self.row_pos, std=0.02)
        nn.init.trunc_normal_(self.patch_pos, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        flat = x.reshape(b, -1)
        if flat.shape[1] < self.rows * self.row_len:  # bytes: the last row zero-padded
            flat = nn.functional.pad(flat, (0, self.rows * self.row_len - flat.shape[1]))
        rows = flat.reshape(b, self.rows, self.row_len)
        mask = presence_mask(rows)  # (B, rows): 1 up to the last non-zero row
        if self.pad:
            rows = nn.functional.pad(rows, (0, self.pad))
        idx = rows.to(torch.long).clamp_(0, 255)
        e = self.bytes(idx)  # (B, rows, patches * patch, embed)
        e = e.reshape(b, self.rows, self.patches, -1)
        tokens = self.proj(e) + self.row_pos + self.patch_pos  # (B, rows, patches, dim)
        tokens = tokens.reshape(b, self.rows * self.patches, -1)
        tmask = mask.repeat_interleave(self.patches, dim=1)  # (B, T)
        return torch.cat([tokens, tmask[..., None]], dim=-1)

    def extra_repr(self) -> str:
        return f"rows={self.rows}, row_len={self.row_len}, patch={self.patch}"


class EncoderLayer(nn.Module):
    """Pre-norm self-attention and feed-forward over ``(B, T, dim + 1)`` (mask last)."""

    def __init__(self, dim: int, heads: int, ff: int, dropout: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        # No projection biases: a key bias has no gradient at all (softmax ignores a
        # constant added to every score), so Adam would turn float noise into steps
        # and parted data-parallel runs from the centralised one (4.5e-4 in 6 steps).
        self.attn = nn.MultiheadAttention(dim, heads, dropout=0.0, bias=False, batch_first=True)
        self.drop1 = nn.Dropout(dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, ff), nn.GELU(), nn.Linear(ff, dim))
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z, mask = x[..., :-1], x[..., -1]
        h = self.norm1(z)
        a, _ = self.attn(h, h, h, key_padding_mask=mask == 0, need_weights=False)
        z = z + self.drop1(a)
        z = z + self.drop2(self.ff(self.norm2(z)))
        return torch.cat([z, mask[..., None]], dim=-1)


class TokenPool(nn.Module):
    """``(B, T, dim + 1)`` (mask last) -> ``(B, dim)``: layer norm, mean over present tokens."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z, mask = self.norm(x[..., :-1]), x[..., -1:]
        return (z * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def build_transformer(
    *,
    view: str,
    input_shape: Sequence[int],
    n_classes: int,
    patch: int = 16,
    embed: int = 16,
    dim: int = 128,
    depth: int = 4,
    heads: int = 4,
    ff: int = 256,
    dropout: float = 0.1,
) -> BlockModel:
    """Build the transformer.

    Args:
        view: ``pkt_bytes`` (``(P, B)``: one row per packet) or ``bytes`` (``(K,)`` or
            a square image: rows of ``patch`` bytes).
        input_shape: shape of one stored sample.
        n_classes: number of classes.
        patch: bytes per patch (token).
        embed: size of each byte's learned vector.
        dim: token width.
        depth: encoder layers (blocks ``enc1`` .. ``encN``).
        heads: attention heads (must divide ``dim``).
        ff: hidden width of each layer's feed-forward part.
        dropout: dropout after attention, feed-forward and before the logits.
    """
    shape = tuple(int(s) for s in input_shape)
    if patch < 1 or embed < 1 or dim < 1 or depth < 1 or heads < 1 or ff < 1:
        raise ConfigError("transformer sizes (patch, embed, dim, depth, heads, ff) must be >= 1")
    if dim % heads:
        raise ConfigError(f"transformer dim {dim} is not a multiple of heads {heads}")
    if view == "pkt_bytes":
        if len(shape) != 2:
            raise ConfigError(f"transformer over pkt_bytes needs (P, B) samples, got {shape}")
        rows, row_len = shape
    elif view == "bytes":
        n = math.prod(shape)
        rows, row_len = math.ceil(n / patch), patch
    else:
        raise ConfigError(f"transformer reads the pkt_bytes or bytes view, not {view!r}")
    blocks: list[tuple[str, nn.Module]] = [("embed", PatchEmbed(rows, row_len, patch, embed, dim))]
    blocks += [(f"enc{i + 1}", EncoderLayer(dim, heads, ff, dropout)) for i in range(depth)]
    blocks.append(
        ("head", nn.Sequential(TokenPool(dim), nn.Dropout(dropout), nn.Linear(dim, n_classes)))
    )
    model = BlockModel(
        blocks, view=view, input_shape=shape, n_classes=n_classes, name="transformer"
    )
    n_params = sum(p.numel() for p in model.parameters())
    if n_params > MAX_PARAMS:
        raise ConfigError(
            f"transformer with these sizes has {n_params:,} parameters, more than "
            f"{MAX_PARAMS:,}; lower dim, depth or ff"
        )
    return model
