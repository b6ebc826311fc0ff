"""Block profiles: FLOPs, parameters and activation sizes of every block of a model.

:func:`profile_model` runs each block once on a small batch and counts, per sample:

- forward FLOPs: matrix products and convolutions with PyTorch's own formulas
  (``torch.utils.flop_counter``), every other arithmetic op (pointwise, pooling,
  reductions, normalisation) at one FLOP per output element; recurrent layers are
  profiled with oneDNN switched off so that their matrix products are visible;
- parameters and the floating state a model message carries;
- the bytes of the block's output (what crosses a cut after it).

The backward/forward ratio is counted the same way, once per block *type* (the
class name of the block's module, or of its first layer for ``nn.Sequential``),
with the block's input requiring a gradient as it does behind any cut, and kept in
:attr:`BlockProfile.bwd_ratio_by_type`.

Everything here is pure data plus a few NumPy functions, so the planner can
evaluate every legal cut of a profile in microseconds (:func:`cut_table`).
"""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from flowsplit.federated.system.parts import AuxHead, aux_feature_shape, legal_cuts, state_numel
from flowsplit.models.base import BlockModel

# Ops that move or create data without arithmetic.
_FREE = {
    "view",
    "_unsafe_view",
    "reshape",
    "transpose",
    "t",
    "permute",
    "expand",
    "squeeze",
    "unsqueeze",
    "select",
    "slice",
    "detach",
    "alias",
    "clone",
    "copy_",
    "zeros",
    "zeros_like",
    "ones_like",
    "empty",
    "empty_like",
    "new_empty",
    "new_empty_strided",
    "new_zeros",
    "empty_strided",
    "stack",
    "cat",
    "split",
    "split_with_sizes",
    "unbind",
    "chunk",
    "_to_copy",
    "lift_fresh",
    "fill_",
    "zero_",
    "as_strided",
    "index",
    "_reshape_alias",
    "unsafe_split",
    "constant_pad_nd",
}


class _FlopCounter(TorchDispatchMode):
    """Count FLOPs of every aten op run inside the mode."""

    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func.overloadpacket
        if packet in flop_registry:
            self.flops += int(flop_registry[packet](*args, **kwargs, out_val=out))
        elif packet.__name__ not in _FREE:
            self.flops += _numel(out)
        return out


def _numel(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel()
    if isinstance(obj, list | tuple):
        return sum(_numel(o) for o in obj)
    return 0


def _block_type(block: nn.Module) -> str:
    # nn.Sequential says nothing; the first non-input layer names what the block is.
    if isinstance(block, nn.Sequential) and len(block):
        inner = [type(m).__name__ for m in block]
        return "+".join(inner[:3])
    return type(block).__name__


@dataclass(frozen=True)
class BlockProfile:
    """Per-block costs of a model, per sample; arrays are indexed by block (0-based)."""

    model: str
    block_names: tuple[str, ...]
    block_types: tuple[str, ...]
    input_shape: tuple[int, ...]
    input_bytes: int
    """Bytes of one input sample as fed to the model."""
    n_classes: int
    fwd_flops: np.ndarray
    """Forward FLOPs per sample, shape (L,)."""
    params: np.ndarray
    """Trainable parameters per block, shape (L,)."""
    state_numel: np.ndarray
    """Floating state values per block (parameters + float buffers): a model message."""
    out_shapes: tuple[tuple[int, ...], ...]
    """Output shape of each block for one sample."""
    out_bytes: np.ndarray
    """Bytes of each block's output per sample (float32), shape (L,)."""
    bwd_ratio_by_type: dict[str, float] = field(default_factory=dict)
    """Backward FLOPs / forward FLOPs, measured once per block type."""

    @property
    def n_blocks(self) -> int:
        return len(self.block_names)

    @property
    def bwd_ratio(self) -> np.ndarray:
        """Backward/forward ratio of each block, shape (L,)."""
        return np.array([self.bwd_ratio_by_type[t] for t in self.block_types], dtype=np.float64)

    def legal_cuts(self) -> list[tuple[int, int]]:
        return legal_cuts(self.n_blocks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "block_names": list(self.block_names),
            "block_types": list(self.block_types),
            "input_shape": list(self.input_shape),
            "input_bytes": self.input_bytes,
            "n_classes": self.n_classes,
            "fwd_flops": self.fwd_flops.tolist(),
            "params": self.params.tolist(),
            "state_numel": self.state_numel.tolist(),
            "out_shapes": [list(s) for s in self.out_shapes],
            "out_bytes": self.out_bytes.tolist(),
            "bwd_ratio_by_type": dict(self.bwd_ratio_by_type),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BlockProfile:
        return cls(
            model=d["model"],
            block_names=tuple(d["block_names"]),
            block_types=tuple(d["block_types"]),
            input_shape=tuple(d["input_shape"]),
            input_bytes=int(d["input_bytes"]),
            n_classes=int(d["n_classes"]),
            fwd_flops=np.asarray(d["fwd_flops"], dtype=np.float64),
            params=np.asarray(d["params"], dtype=np.int64),
            state_numel=np.asarray(d["state_numel"], dtype=np.int64),
            out_shapes=tuple(tuple(s) for s in d["out_shapes"]),
            out_bytes=np.asarray(d["out_bytes"], dtype=np.int64),
            bwd_ratio_by_type={k: float(v) for k, v in d["bwd_ratio_by_type"].items()},
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


@contextlib.contextmanager
def _without_onednn():
    # oneDNN runs a whole recurrent layer as one opaque op; without it the layer's
    # matrix products reach the dispatcher and get counted.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the flag change warns about TF32 on CPU builds
        with torch.backends.mkldnn.flags(enabled=False):
            yield


def _count(fn) -> int:
    counter = _FlopCounter()
    with counter:
        fn()
    return counter.flops


def profile_model(model: BlockModel, *, batch_size: int = 4, seed: int = 0) -> BlockProfile:
    """Profile every block of ``model`` on a random batch of ``batch_size`` samples.

    The batch is random bytes (0..255) cast to float32, which every model's input
    block accepts; the numbers do not depend on the values, only on the shapes.
    """
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (batch_size, *model.input_shape), generator=gen).float()
    was_training = model.training
    model.eval()  # dropout off: its masks are not compute we want to count
    fwd, params, states, shapes, out_bytes, types = [], [], [], [], [], []
    ratios: dict[str, float] = {}
    try:
        with _without_onednn():
            for index, block in enumerate(model.blocks.values()):
                btype = _block_type(block)
                inp = x.detach().requires_grad_(index > 0)
                outs: list[torch.Tensor] = []
                flops = _count(lambda b=block, i=inp, o=outs: o.append(b(i)))
                out = outs[0]
                if btype not in ratios:
                    ratios[btype] = _measure_bwd_ratio(block, inp.detach(), flops)
                fwd.append(flops / batch_size)
                params.append(sum(p.numel() for p in block.parameters() if p.requires_grad))
                states.append(state_numel(block))
                shapes.append(tuple(out.shape[1:]))
                out_bytes.append(math.prod(out.shape[1:]) * out.element_size())
                types.append(btype)
                x = out.detach()
    finally:
        model.train(was_training)
    return BlockProfile(
        model=model.name,
        block_names=tuple(model.block_names),
        block_types=tuple(types),
        input_shape=tuple(model.input_shape),
        input_bytes=math.prod(model.input_shape) * 4,
        n_classes=model.n_classes,
        fwd_flops=np.asarray(fwd, dtype=np.float64),
        params=np.asarray(params, dtype=np.int64),
        state_numel=np.asarray(states, dtype=np.int64),
        out_shapes=tuple(shapes),
        out_bytes=np.asarray(out_bytes, dtype=np.int64),
        bwd_ratio_by_type=ratios,
    )


def _measure_bwd_ratio(block: nn.Module, inp: torch.Tensor, fwd_flops: int) -> float:
    inp = inp.requires_grad_(True)
    out = block(inp)
    grad = torch.ones_like(out)
    bwd = _count(lambda: out.backward(grad))
    block.zero_grad(set_to_none=True)
    # A block without arithmetic (or without anything to differentiate) costs
    # about as much backward as forward; 2.0 is the textbook value for layers.
    if fwd_flops <= 0 or bwd <= 0:
        return 2.0
    return bwd / fwd_flops


# --- costs of the parts at a cut -----------------------------------------------------


@dataclass(frozen=True)
class PartCosts:
    """Per-sample costs of the client, aggregator and server parts at cuts ``(a, c)``.

    ``train_flops`` is what one training sample costs each tier (forward + backward,
    plus the auxiliary head under local losses); ``state_numel`` is the size of each
    tier's model message (auxiliary heads included).
    """

    cuts: tuple[int, int]
    fwd_flops: np.ndarray
    """(3,) forward FLOPs per sample: client, aggregator, server."""
    train_flops: np.ndarray
    """(3,) forward + backward FLOPs per training sample."""
    state_numel: np.ndarray
    """(3,) float32 values in each tier's model message."""
    act_bytes: np.ndarray
    """(2,) activation bytes per sample crossing cut a and cut c."""
    act_shapes: tuple[tuple[int, ...], tuple[int, ...]]
    local_loss: bool

    @property
    def three_tier(self) -> bool:
        return self.cuts[1] > self.cuts[0]


def aux_head_cost(
    sample_shape: Sequence[int], n_classes: int, mode: str = "auto", max_features: int = 1024
) -> tuple[float, int]:
    """(training FLOPs per sample, state values) of the :class:`AuxHead` for ``sample_shape``."""
    n_in = aux_feature_shape(sample_shape, mode, max_features)
    # Linear forward 2*n_in*k, backward twice that; the pooling reads every input once.
    pool = math.prod(sample_shape) if n_in < math.prod(sample_shape) else 0
    flops = 3 * (2 * n_in * n_classes) + 2 * pool
    return float(flops), n_in * n_classes + n_classes


def part_costs(
    profile: BlockProfile,
    a: int,
    c: int,
    *,
    local_loss: bool = False,
    aux_mode: str = "auto",
    aux_max_features: int = 1024,
) -> PartCosts:
    """Costs of the three parts of ``profile`` cut at ``(a, c)`` (1-based cuts)."""
    L = profile.n_blocks
    if not (1 <= a <= c < L):
        raise ValueError(f"illegal cuts ({a}, {c}) for {L} blocks")
    bounds = [(0, a), (a, c), (c, L)]
    fwd = np.array([profile.fwd_flops[s:e].sum() for s, e in bounds])
    bwd = profile.fwd_flops * profile.bwd_ratio
    train = np.array([fwd[k] + bwd[s:e].sum() for k, (s, e) in enumerate(bounds)])
    state = np.array([profile.state_numel[s:e].sum() for s, e in bounds], dtype=np.int64)
    if local_loss:
        # The client part always ends in a head; the aggregator only when it has blocks.
        for tier, cut in ((0, a), (1, c)):
            if tier == 1 and c == a:
                continue
            flops, numel = aux_head_cost(
                profile.out_shapes[cut - 1], profile.n_classes, aux_mode, aux_max_features
            )
            train[tier] += flops
            state[tier] += numel
    return PartCosts(
        cuts=(a, c),
        fwd_flops=fwd,
        train_flops=train,
        state_numel=state,
        act_bytes=np.array([profile.out_bytes[a - 1], profile.out_bytes[c - 1]], dtype=np.int64),
        act_shapes=(profile.out_shapes[a - 1], profile.out_shapes[c - 1]),
        local_loss=local_loss,
    )


def cut_table(profile: BlockProfile) -> dict[str, np.ndarray]:
    """Every legal cut of ``profile`` with its costs, as columns (vectorised).

    Keys: ``a``, ``c`` (1-based), ``client_flops``, ``aggregator_flops``,
    ``server_flops`` (training FLOPs per sample, no auxiliary heads),
    ``client_params``, ``aggregator_params``, ``server_params``, ``act_a_bytes``,
    ``act_c_bytes`` (per sample), ``depth_client``, ``depth_aggregator`` (fractions
    of the blocks), ready for a surrogate model or an objective.
    """
    L = profile.n_blocks
    cuts = np.array(legal_cuts(L), dtype=np.int64)
    a, c = cuts[:, 0], cuts[:, 1]
    train = profile.fwd_flops * (1.0 + profile.bwd_ratio)
    cum_train = np.concatenate([[0.0], np.cumsum(train)])
    cum_params = np.concatenate([[0], np.cumsum(profile.params)])
    return {
        "a": a,
        "c": c,
        "client_flops": cum_train[a],
        "aggregator_flops": cum_train[c] - cum_train[a],
        "server_flops": cum_train[L] - cum_train[c],
        "client_params": cum_params[a],
        "aggregator_params": cum_params[c] - cum_params[a],
        "server_params": cum_params[L] - cum_params[c],
        "act_a_bytes": profile.out_bytes[a - 1],
        "act_c_bytes": profile.out_bytes[c - 1],
        "depth_client": a / L,
        "depth_aggregator": (c - a) / L,
    }


def client_memory_bytes(costs: PartCosts, batch_size: int) -> float:
    """Rough memory a client needs to train its part: weights, gradients and two
    optimiser moments (4 float32 copies of its state) plus its batch's activations
    kept for the backward pass (input-to-cut activations, taken as twice the cut's
    output)."""
    return 16.0 * costs.state_numel[0] + 2.0 * batch_size * costs.act_bytes[0]


def make_aux_head(profile: BlockProfile, cut: int, *, mode: str, max_features: int) -> AuxHead:
    """The auxiliary head for the output of block ``cut`` (1-based)."""
    return AuxHead(
        profile.out_shapes[cut - 1], profile.n_classes, mode=mode, max_features=max_features
    )
