"""Cutting models into parts: the split model computes exactly what the whole model does."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from flowsplit.errors import ConfigError
from flowsplit.federated.system.parts import (
    AuxHead,
    check_cuts,
    flatten_state,
    legal_cuts,
    load_flat_state,
    split_model,
    state_numel,
)
from tests.federated._toy import toy_model

try:  # the registry models, when the models package provides them
    from flowsplit.models.registry import build_model, neural_models

    REGISTRY = neural_models()
except ImportError:  # pragma: no cover
    REGISTRY = []

# Small inputs per registry model: (view, sample shape).
REGISTRY_INPUTS = {
    "cnn": ("bytes", (64,)),
    "lstm": ("seq", (6, 4)),
    "convlstm": ("pkt_bytes", (3, 16)),
    "convgru": ("pkt_bytes", (3, 16)),
}


def _registry_model(name: str):
    view, shape = REGISTRY_INPUTS.get(name, ("bytes", (64,)))
    torch.manual_seed(0)
    return build_model(name, view=view, input_shape=shape, n_classes=5)


def _models():
    out = [
        (f"toy-{k}", lambda k=k: toy_model(input_shape=(32,), n_classes=3, kind=k))
        for k in ("mlp", "cnn", "rnn")
    ]
    out += [(name, lambda name=name: _registry_model(name)) for name in REGISTRY]
    return out


def _split_forward_backward(model, x, y, a, c):
    """Run the split model the way the roles do: detach and re-attach at each cut."""
    parts = split_model(model, a, c)
    act = parts.client(x)
    x_agg = act.detach().requires_grad_(True)
    h = parts.aggregator(x_agg)
    x_srv = h.detach().requires_grad_(True)
    out = parts.server(x_srv)
    F.cross_entropy(out, y).backward()
    if not parts.aggregator.is_empty:
        h.backward(x_srv.grad)
        act.backward(x_agg.grad)
    else:
        act.backward(x_srv.grad)
    grads = [p.grad for part in parts.parts for p in part.parameters()]
    return out, grads


@pytest.mark.parametrize(("name", "make"), _models(), ids=[n for n, _ in _models()])
def test_split_forward_and_backward_equal_the_whole_model_at_every_legal_cut(name, make):
    # Prepare: one model, a batch, the reference outputs and gradients of the whole model.
    model = make()
    model.eval()  # dropout off: the same function on both sides
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (5, *model.input_shape), generator=gen).float()
    y = torch.randint(0, model.n_classes, (5,), generator=gen)
    whole = copy.deepcopy(model)
    ref_out = whole(x)
    F.cross_entropy(ref_out, y).backward()
    ref_grads = [p.grad for p in whole.parameters()]
    for a, c in legal_cuts(model.n_blocks):
        # Execute
        out, grads = _split_forward_backward(copy.deepcopy(model), x, y, a, c)
        # Assert: same logits, same gradient for every parameter, in block order.
        torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6, msg=f"cut {(a, c)}")
        assert len(grads) == len(ref_grads)
        for g, ref in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-6, msg=f"cut {(a, c)}")


def test_legal_cuts_of_four_blocks_are_the_six_pairs_a_le_c_below_the_head():
    # Execute / Assert: 1 <= a <= c < 4.
    assert legal_cuts(4) == [(1, 1), (1, 2), (1, 3), (2, 2), (2, 3), (3, 3)]
    with pytest.raises(ConfigError, match="not legal"):
        check_cuts(4, 2, 4)  # the head must stay on the server
    with pytest.raises(ConfigError, match="not legal"):
        check_cuts(4, 3, 2)


def test_two_tier_cut_leaves_an_empty_aggregator_part_that_is_the_identity():
    # Prepare
    model = toy_model(input_shape=(32,), n_classes=3)
    # Execute
    parts = split_model(model, 2, 2)
    # Assert
    x = torch.randn(2, 16)
    assert parts.aggregator.is_empty
    assert torch.equal(parts.aggregator(x), x)
    assert parts.client.names == ["fc1", "fc2"] and parts.server.names == ["fc3", "head"]


@pytest.mark.parametrize(
    ("shape", "mode", "n_in"),
    [
        ((12,), "auto", 12),  # dense output: linear over it
        ((4, 6), "auto", 24),  # small sequence: flattened
        ((8, 300), "auto", 8 * 128),  # large: pooled to 1024 // 8 = 128 per channel
        ((5, 7), "last", 7),  # (T, H): last step
        ((5, 7), "mean", 7),  # (T, H): mean over steps
        ((3, 4, 6, 6), "auto", 3 * 4 * 6 * 6),  # ConvRNN-like (T, C, H, W), 432 <= 1024
        ((16, 14, 14), "auto", 16 * 64),  # conv map 3136 values -> 16 x 64
    ],
)
def test_aux_head_fits_any_block_output_shape(shape, mode, n_in):
    # Prepare
    head = AuxHead(shape, 5, mode=mode, max_features=1024)
    # Execute
    logits = head(torch.randn(3, *shape))
    # Assert: logits per sample, and the linear layer sized as computed by hand.
    assert logits.shape == (3, 5)
    assert head.linear.in_features == n_in


def test_flat_state_round_trip_includes_float_buffers_only():
    # Prepare: a module with a parameter, a float buffer and an integer buffer.
    module = torch.nn.BatchNorm1d(3)
    module.running_mean.fill_(2.0)
    # Execute
    flat = flatten_state(module)
    other = torch.nn.BatchNorm1d(3)
    load_flat_state(other, flat)
    # Assert: weight 3 + bias 3 + running mean 3 + running var 3 = 12 values; no counter.
    assert flat.numel() == state_numel(module) == 12
    assert torch.equal(other.running_mean, torch.full((3,), 2.0))
    with pytest.raises(ValueError, match="takes 12"):
        load_flat_state(other, torch.zeros(13))
