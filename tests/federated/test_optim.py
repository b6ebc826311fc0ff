"""The runtime's hand-written optimisers make torch.optim's updates."""

from __future__ import annotations

import pytest
import torch

from flowsplit.federated.optim import make_optimizer


def _params(seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(4, 3, generator=gen).requires_grad_(), torch.randn(3, generator=gen)]


@pytest.mark.parametrize(
    ("name", "ours", "theirs"),
    [
        (
            "sgd",
            {"momentum": 0.9, "weight_decay": 0.01},
            lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01, foreach=False),
        ),
        (
            "adam",
            {"weight_decay": 0.01},
            lambda p: torch.optim.Adam(p, lr=0.1, weight_decay=0.01, foreach=False),
        ),
    ],
)
def test_updates_match_torch_optim(name, ours, theirs):
    a, b = _params(0), _params(0)
    opt_a = make_optimizer(name, a, lr=0.1, **ours)
    opt_b = theirs([b[0]])  # the second tensor needs no gradient: both skip it
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(5, 4, generator=gen)
    for _ in range(4):
        for params, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            ((x @ params[0]).tanh().sum() + params[1].sum()).backward()
            opt.step()
    torch.testing.assert_close(a[0], b[0], rtol=1e-6, atol=1e-7)
    assert torch.equal(a[1], b[1])  # never stepped
