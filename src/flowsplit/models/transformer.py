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
from flowsplit.models.checks import check_dropout, option_error
from flowsplit.models.layers import presence_mask

MAX_PARAMS = 2_500_000
"""The most parameters the builder accepts (issue 32: at most 2.5 M)."""


class PatchEmbed(nn.Module):
    """Raw rows ``(B, *input_shape)`` -> tokens ``(B, rows * patches, dim + 1)``, mask last."""

    def __init__(
        self,
        rows: int,
        row_len: int,
        patch: int,
        embed: int,
        dim: int,
        stem: int = 0,
        stem_rows: int = 1,
        stem_width: int = 64,
    ):
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
        # The convolutional stem (``stem`` > 0): over the byte vectors of ``stem_rows``
        # rows at a time (1: within a packet's row; all rows: the whole payload of the
        # bytes view), a convolution, a max-pool of 4, a second convolution to ``dim``
        # and a max-pool of the rest of a patch: one feature vector per patch, added to
        # its token. The projection reads a patch's bytes at fixed offsets; the stem
        # finds byte patterns wherever they sit, also across the patch's edges (as the
        # CNN does).
        self.segment = int(stem_rows) * self.patches * self.patch  # bytes per stem run
        self.stem = None
        if stem:
            k = int(stem)
            self.stem = nn.Sequential(
                nn.Conv1d(embed, stem_width, k, padding=k // 2),
                nn.GELU(),
                nn.MaxPool1d(4),
                nn.Conv1d(stem_width, dim, k, padding=k // 2),
                nn.GELU(),
                nn.MaxPool1d(self.patch // 4),
            )

    def patch_bytes(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B, *input_shape)`` -> the bytes of each token ``(B, T, patch)`` (long) and
        the tokens' presence ``(B, T)`` (float, 1 for a row up to the last non-zero one)."""
        b = x.shape[0]
        flat = x.reshape(b, -1)
        if flat.shape[1] < self.rows * self.row_len:  # bytes: the last row zero-padded
            flat = nn.functional.pad(flat, (0, self.rows * self.row_len - flat.shape[1]))
        rows = flat.reshape(b, self.rows, self.row_len)
        mask = presence_mask(rows)  # (B, rows): 1 up to the last non-zero row
        if self.pad:
            rows = nn.functional.pad(rows, (0, self.pad))
        idx = rows.to(torch.long).clamp_(0, 255)
        tmask = mask.repeat_interleave(self.patches, dim=1)  # (B, T)
        return idx.reshape(b, self.rows * self.patches, self.patch), tmask

    def forward(
        self,
        x: torch.Tensor,
        replace: torch.Tensor | None = None,
        token: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Tokens with the mask last; ``replace`` ``(B, T)`` (bool) swaps those tokens'
        byte content for ``token`` ``(dim,)`` before the positions are added (masked
        byte modelling, :class:`MaskedBytePretrainer`)."""
        b = x.shape[0]
        idx, tmask = self.patch_bytes(x)
        e = self.bytes(idx)  # (B, T, patch, embed)
        content = self.proj(e.reshape(b, self.rows, self.patches, -1))  # (B, rows, patches, dim)
        if self.stem is not None:
            seg = e.reshape(-1, self.segment, e.shape[-1]).transpose(1, 2)  # (B*, embed, L)
            content = content + self.stem(seg).transpose(1, 2).reshape(content.shape)
        if replace is not None:
            content = torch.where(
                replace.reshape(b, self.rows, self.patches, 1), token.to(content.dtype), content
            )
        tokens = content + self.row_pos + self.patch_pos  # (B, rows, patches, dim)
        tokens = tokens.reshape(b, self.rows * self.patches, -1)
        return torch.cat([tokens, tmask[..., None]], dim=-1)

    def extra_repr(self) -> str:
        return (
            f"rows={self.rows}, row_len={self.row_len}, patch={self.patch}, segment={self.segment}"
        )


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


def _check_sizes(
    patch: int, embed: int, dim: int, depth: int, heads: int, ff: int, stem: int, width: int
) -> None:
    if patch < 1 or embed < 1 or dim < 1 or depth < 1 or heads < 1 or ff < 1:
        raise ConfigError("transformer sizes (patch, embed, dim, depth, heads, ff) must be >= 1")
    if dim % heads:
        raise ConfigError(f"transformer dim {dim} is not a multiple of heads {heads}")
    if stem < 0 or (stem and stem % 2 == 0):
        raise ConfigError(f"transformer stem {stem}: give an odd kernel width, or 0 for none")
    if stem and (width < 1 or patch % 4):
        raise ConfigError(
            f"transformer stem needs stem_width >= 1 and patch a multiple of 4 "
            f"(got stem_width {width}, patch {patch})"
        )


def _patch_embed(
    view: str, shape: tuple[int, ...], patch: int, embed: int, dim: int, stem: int, width: int
) -> PatchEmbed:
    """The ``embed`` block for ``view``'s samples of ``shape``: rows of bytes (a packet
    each in ``pkt_bytes``; ``patch`` bytes of the payload in ``bytes``), and how many
    rows the stem runs across (one packet; the whole payload)."""
    if view == "pkt_bytes":
        if len(shape) != 2:
            raise ConfigError(f"transformer over pkt_bytes needs (P, B) samples, got {shape}")
        rows, row_len = shape
        stem_rows = 1
    elif view == "bytes":
        rows, row_len = math.ceil(math.prod(shape) / patch), patch
        stem_rows = rows
    else:
        raise ConfigError(f"transformer reads the pkt_bytes or bytes view, not {view!r}")
    return PatchEmbed(
        rows, row_len, patch, embed, dim, stem=stem, stem_rows=stem_rows, stem_width=width
    )


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
    stem: int = 0,
    stem_width: int = 64,
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
        stem: kernel width (odd) of the convolutional stem's two convolutions, whose
            features (one vector per patch, see :class:`PatchEmbed`) are added to the
            tokens (within a packet in ``pkt_bytes``, over the whole payload in
            ``bytes``); 0 (the default) for none. Needs ``patch`` a multiple of 4.
        stem_width: channels of the stem's first convolution.
    """
    shape = tuple(int(s) for s in input_shape)
    _check_sizes(patch, embed, dim, depth, heads, ff, stem, stem_width)
    check_dropout("transformer", "dropout", dropout)
    n_bytes = shape[-1] if view == "pkt_bytes" and len(shape) == 2 else math.prod(shape)
    if view in ("pkt_bytes", "bytes") and patch > n_bytes:  # all padding past the bytes
        what = "a packet's row" if view == "pkt_bytes" else "the payload"
        raise option_error(
            "transformer", "patch", patch, f"at most {n_bytes}, the bytes of {what} (shape {shape})"
        )
    embed_block = _patch_embed(view, shape, patch, embed, dim, stem, stem_width)
    blocks: list[tuple[str, nn.Module]] = [("embed", embed_block)]
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


# --- masked byte modelling (flowsplit pretrain) -------------------------------------

ENCODER_FORMAT = "flowsplit-pretrained-encoder"
"""The ``format`` of an encoder file written by ``flowsplit pretrain``."""
ENCODER_NAME = "encoder.pt"
"""The encoder file's name in a ``flowsplit pretrain -o DIR``."""
SHAPE_OPTIONS = ("patch", "embed", "dim", "depth", "heads", "ff", "stem", "stem_width")
"""The transformer options that decide its weights' shapes (all but dropout)."""
LATER_OPTIONS = {"stem": 0}
"""Shape options added after encoder files were first written: their value in a file
that does not name them (the value that builds the model those files were taken from)."""


def shape_options(options: dict) -> dict:
    """The options among ``options`` that decide the weights' shapes: :data:`SHAPE_OPTIONS`
    less ``stem_width`` when there is no stem (no weight depends on it then)."""
    out = {k: options[k] for k in SHAPE_OPTIONS if k in options}
    if not out.get("stem"):
        out.pop("stem_width", None)
    return out


def encoder_blocks(model: BlockModel) -> list[str]:
    """The blocks pre-training trains and fine-tuning starts from: all but the head."""
    return [name for name in model.block_names if name != "head"]


class MaskedBytePretrainer(nn.Module):
    """Masked byte modelling over a transformer's encoder (``embed``, ``enc1``..).

    A fraction ``mask_ratio`` of each flow's present tokens (patches of bytes; padding
    is never chosen) has its byte content replaced by a learned mask token (the
    position stays); the encoder's output at those tokens goes through a small head
    (layer norm, one linear layer) predicting each of the patch's bytes (256-way).
    The loss is the cross-entropy over the masked tokens' bytes only.
    """

    def __init__(self, model: BlockModel, mask_ratio: float = 0.3):
        super().__init__()
        if model.name != "transformer":
            raise ConfigError(f"masked byte modelling pre-trains the transformer, not {model.name}")
        if not 0.0 < mask_ratio < 1.0:
            raise ConfigError(f"mask ratio must be between 0 and 1, got {mask_ratio}")
        self.model = model
        self.mask_ratio = float(mask_ratio)
        embed: PatchEmbed = model.blocks["embed"]
        dim = embed.proj.out_features
        self.mask_token = nn.Parameter(torch.zeros(dim))
        nn.init.trunc_normal_(self.mask_token, std=0.02)
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, embed.patch * 256))

    def forward(
        self, x: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(loss, right, n)``: the mean cross-entropy over the masked tokens' bytes, and
        how many of those ``n`` bytes the head's top guess got right."""
        embed: PatchEmbed = self.model.blocks["embed"]
        target, present = embed.patch_bytes(x)  # (B, T, patch), (B, T)
        draw = torch.rand(present.shape, generator=generator, device=present.device)
        chosen = (draw < self.mask_ratio) & (present > 0)
        h = embed(x, replace=chosen, token=self.mask_token)
        for name in encoder_blocks(self.model)[1:]:
            h = self.model.blocks[name](h)
        logits = self.head(h[..., :-1][chosen])  # (M, patch * 256)
        goal = target[chosen].reshape(-1)  # (M * patch,)
        if goal.numel() == 0:
            zero = logits.sum() * 0.0
            return zero, torch.zeros((), dtype=torch.long), torch.zeros((), dtype=torch.long)
        logits = logits.reshape(-1, 256)
        loss = nn.functional.cross_entropy(logits, goal)
        right = (logits.argmax(-1) == goal).sum()
        return loss, right, torch.tensor(goal.numel())


def encoder_state(model: BlockModel, options: dict, **info) -> dict:
    """What ``flowsplit pretrain`` saves: the encoder blocks' weights and what they fit."""
    keep = tuple(f"blocks.{name}." for name in encoder_blocks(model))
    state = {
        k: v.detach().cpu().clone() for k, v in model.state_dict().items() if k.startswith(keep)
    }
    return {
        "format": ENCODER_FORMAT,
        "version": 1,
        "model": model.name,
        "view": model.view,
        "input_shape": list(model.input_shape),
        "options": {k: options[k] for k in SHAPE_OPTIONS},
        **info,
        "state": state,
    }


def load_encoder(model: BlockModel, path: str, options: dict | None = None) -> dict:
    """Start ``model``'s encoder blocks from a ``flowsplit pretrain`` output (its folder or
    its ``encoder.pt``); the head keeps its fresh weights. Returns the file's information.

    Everything that can be wrong with the file is one :class:`InputError` line: not
    there, not a weights file (read with ``weights_only=True``: no code runs), not an
    encoder, or an encoder of another view, input shape or model size."""
    from pathlib import Path

    from flowsplit.errors import InputError

    p = Path(path)
    if p.is_dir():
        p = p / ENCODER_NAME
    if not p.is_file():
        raise InputError(
            p,
            f"no such file: --init-from takes the -o folder of `flowsplit pretrain` (or its {ENCODER_NAME})",
        )
    if model.name != "transformer":
        raise ConfigError(
            f"--init-from {path}: pre-trained weights are for the transformer, not {model.name}"
        )
    try:
        doc = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - pickle, zip and torch errors of a wrong file
        raise InputError(
            p, f"not a weights file of `flowsplit pretrain` ({type(exc).__name__})"
        ) from None
    if (
        not isinstance(doc, dict)
        or doc.get("format") != ENCODER_FORMAT
        or not isinstance(doc.get("state"), dict)
    ):
        raise InputError(p, "is not an encoder written by `flowsplit pretrain`")
    shape = list(model.input_shape)
    if doc.get("view") != model.view or list(doc.get("input_shape", [])) != shape:
        raise InputError(
            p,
            f"encoder pre-trained on {doc.get('view')} {tuple(doc.get('input_shape', []))}, "
            f"this model reads {model.view} {tuple(shape)}: pretrain with the dataset's view "
            "and shape (pretrain --like DATASET)",
        )
    if options is not None:
        mine = shape_options(options)
        theirs = shape_options({**LATER_OPTIONS, **(doc.get("options") or {})})
        # stem_width is compared only where both have a stem (see shape_options); an
        # option the file does not name is left to the weights' shapes, checked below
        differ = [f"{k}={theirs[k]} (model {v})" for k, v in mine.items() if theirs.get(k, v) != v]
        if differ:
            raise InputError(
                p,
                f"encoder of another size: {', '.join(differ)}; give the same --model-option values",
            )
    keep = tuple(f"blocks.{name}." for name in encoder_blocks(model))
    own = {k: v for k, v in model.state_dict().items() if k.startswith(keep)}
    state = doc["state"]
    if set(state) != set(own) or any(
        tuple(state[k].shape) != tuple(v.shape) for k, v in own.items()
    ):
        raise InputError(p, "encoder weights do not fit this transformer (names or shapes differ)")
    with torch.no_grad():
        for k, v in own.items():
            v.copy_(state[k])
    return {k: v for k, v in doc.items() if k != "state"}
