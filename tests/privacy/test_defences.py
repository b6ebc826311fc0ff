"""Defences: the noise has the ratio it claims, quantisation the levels, parsing fails clearly."""

from __future__ import annotations

import math

import pytest
import torch

from flowsplit.errors import ConfigError
from flowsplit.privacy.defences import (
    GaussianNoise,
    Quantize,
    gaussian_epsilon,
    parse_defence,
    parse_defences,
)


def test_noise_has_the_requested_noise_to_signal_ratio():
    torch.manual_seed(0)
    z = torch.randn(50, 400) * torch.linspace(0.1, 10, 50)[:, None]  # rows of very different scale
    noisy = GaussianNoise(0.5)(z)
    ratio = (noisy - z).pow(2).mean(1).sqrt() / z.pow(2).mean(1).sqrt()
    assert torch.allclose(ratio, torch.full_like(ratio, 0.5), atol=0.06)


def test_quantize_uses_at_most_two_to_the_bits_levels_and_passes_gradients():
    z = torch.randn(4, 100, requires_grad=True)
    q = Quantize(2)(z)
    for row in q.detach():
        assert len(torch.unique(row)) <= 4
    assert (q.detach() - z.detach()).abs().max() <= (z.max() - z.min()).item() / 6 + 1e-6
    q.sum().backward()
    assert torch.equal(z.grad, torch.ones_like(z))  # straight-through


def test_parse_defence():
    assert parse_defence("noise:0.25").params() == {"ratio": 0.25}
    assert parse_defence("quant").params() == {"bits": 2}
    assert [d.kind for d in parse_defences("nopeek:1,quant:4")] == ["nopeek", "quant"]
    assert parse_defences("none") == ()
    for bad in ("blur:1", "noise:x", "quant:0", "quant:2.5", "noise:-1"):
        with pytest.raises(ConfigError):
            parse_defence(bad)


def test_gaussian_epsilon_formula():
    # ratio sqrt(dim) * sqrt(2 ln(1.25/delta)) * 2 gives epsilon 1.
    dim, delta = 100, 1e-5
    ratio = 2 * math.sqrt(dim) * math.sqrt(2 * math.log(1.25 / delta))
    assert gaussian_epsilon(ratio, dim, delta) == pytest.approx(1.0)
    assert gaussian_epsilon(0.0, dim) == math.inf
