"""SGD and Adam written out in a few tensor operations.

Same updates as ``torch.optim.SGD`` / ``torch.optim.Adam`` (single-tensor code
path), without their first-step import of ``torch._dynamo``, which costs seconds in
every freshly started role process of the distributed runner, and makes a client
that is merely warming up look silent to its aggregator.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import torch


class _Optimizer:
    def __init__(self, params: Iterable[torch.Tensor]):
        self.params = [p for p in params if p.requires_grad]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def _gradients(self, weight_decay: float) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        """``(index, parameter, gradient with L2 weight decay)`` of every parameter that
        has a gradient."""
        for k, p in enumerate(self.params):
            if p.grad is None:
                continue
            grad = p.grad
            if weight_decay:
                grad = grad.add(p, alpha=weight_decay)
            yield k, p, grad


class SGD(_Optimizer):
    """SGD with momentum and weight decay (PyTorch's formulation, dampening 0)."""

    def __init__(self, params, *, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__(params)
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    def state_dict(self) -> dict[str, Any]:
        """The momentum buffers (tensors, ``None`` before a parameter's first step)."""
        return {"buffers": [None if b is None else b.clone() for b in self.buffers]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffers = [None if b is None else b.clone() for b in state["buffers"]]

    @torch.no_grad()
    def step(self) -> None:
        for k, p, grad in self._gradients(self.weight_decay):
            if self.momentum:
                buf = self.buffers[k]
                if buf is None:
                    buf = self.buffers[k] = grad.clone()
                else:
                    buf.mul_(self.momentum).add_(grad)
                grad = buf
            p.add_(grad, alpha=-self.lr)


class Adam(_Optimizer):
    """Adam (Kingma and Ba, 2015) with L2 weight decay, as ``torch.optim.Adam``."""

    def __init__(
        self,
        params,
        *,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        super().__init__(params)
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.state = [
            (torch.zeros_like(p), torch.zeros_like(p)) for p in self.params
        ]  # (exp_avg, exp_avg_sq) per parameter
        self.steps = [0] * len(self.params)

    def state_dict(self) -> dict[str, Any]:
        """Moments and step counts per parameter (tensors and ints: ``weights_only`` loads it)."""
        return {
            "exp_avg": [m.clone() for m, _ in self.state],
            "exp_avg_sq": [v.clone() for _, v in self.state],
            "steps": list(self.steps),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pairs = zip(self.state, state["exp_avg"], state["exp_avg_sq"], strict=True)
        for (m, v), m_new, v_new in pairs:
            m.copy_(m_new)
            v.copy_(v_new)
        self.steps = [int(k) for k in state["steps"]]

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.betas
        for k, p, grad in self._gradients(self.weight_decay):
            exp_avg, exp_avg_sq = self.state[k]
            self.steps[k] += 1
            step = self.steps[k]
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step_size = self.lr / (1 - beta1**step)
            denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2**step)).add_(self.eps)
            p.addcdiv_(exp_avg, denom, value=-step_size)


def make_optimizer(
    name: str, params, *, lr: float, momentum: float = 0.0, weight_decay: float = 0.0
) -> SGD | Adam:
    """``sgd`` or ``adam`` over ``params``."""
    if name == "sgd":
        return SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    return Adam(params, lr=lr, weight_decay=weight_decay)
