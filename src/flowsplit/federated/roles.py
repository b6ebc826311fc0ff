"""The roles Client and EdgeAggregator (with CloudServer in ``server.py``): the step code.

Each role's ``run_round(plan)`` is a generator coroutine: it ``yield``s
:class:`~flowsplit.federated.protocol.Send` and ``Recv`` requests and receives the
answers, and it charges its own computations to the cost meter. The simulated
runner interleaves all coroutines in one process; the distributed runner runs one
per process over gloo. The message sequence of a round (per client batch ``k``,
clients in the round's service order):

- download: server -> aggregator: client part (and aggregator part), aggregator ->
  client: client part (``sfl``: the server sends one copy per client, relayed);
- train: client -> aggregator: activations, labels; aggregator -> server:
  activations at cut c (or the relayed cut-a activations), labels; end-to-end
  schemes then send activation gradients back down the same way;
- upload: client -> aggregator: client part, sample count; aggregator -> server:
  averaged client part, aggregator part, total count (``sfl``: relayed per client).

A peer that is lost (distributed runner: closed connection or missed deadline)
answers ``None``; an aggregator then tells the server with a ``None`` message
(a dropped-client notice) in the slot where the server expects that client's
next message, so both sides skip the client from then on.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from flowsplit.federated.aggregate import fedavg
from flowsplit.federated.config import SFLConfig
from flowsplit.federated.costs import CostMeter
from flowsplit.federated.optim import make_optimizer
from flowsplit.federated.parts import AuxHead, Part, flatten_state, load_flat_state
from flowsplit.federated.profile import PartCosts
from flowsplit.federated.protocol import (
    ACTIVATIONS,
    AGGREGATOR,
    CLIENT,
    CONTROL,
    DOWNLOAD,
    GRADIENTS,
    LABELS,
    MODEL,
    SERVER_ADDRESS,
    UPLOAD,
    Recv,
    Send,
)
from flowsplit.federated.schemes import RoundPlan, Scheme

Coroutine = Generator[Any, Any, None]


class TierModule(nn.Module):
    """One tier's trainable state: its part of the model and, under local losses, a head."""

    def __init__(self, part: Part, aux: AuxHead | None = None):
        super().__init__()
        self.part = part
        self.aux = aux


@dataclass
class RunContext:
    """What every role knows about the run."""

    scheme: Scheme
    config: SFLConfig
    costs: PartCosts
    assignment: np.ndarray
    n_samples: np.ndarray
    meter: CostMeter

    def make_optimizer(self, module: nn.Module):
        cfg = self.config
        return make_optimizer(
            cfg.optimizer,
            module.parameters(),
            lr=cfg.lr,
            momentum=cfg.momentum,
            weight_decay=cfg.weight_decay,
        )

    def aggregator_of(self, client: int) -> tuple[str, int]:
        return (AGGREGATOR, int(self.assignment[client]))

    def count_tensor(self, n: int) -> torch.Tensor:
        return torch.tensor([int(n)], dtype=torch.int64)


def averaging_flops(numel: int, n_inputs: int) -> float:
    # One multiply and one add per value per averaged copy.
    return 2.0 * numel * n_inputs


class Client:
    """An edge device: holds a shard, trains the client part (and its head under local losses)."""

    def __init__(
        self, index: int, ctx: RunContext, module: TierModule, x: torch.Tensor, y: torch.Tensor
    ):
        self.index = index
        self.address = (CLIENT, index)
        self.ctx = ctx
        self.module = module
        self.x, self.y = x, y  # (n, *input_shape), (n,)

    def batches(self, round_index: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This round's batches: a fresh seeded shuffle of the shard per local epoch."""
        cfg = self.ctx.config
        rng = np.random.default_rng([cfg.seed, 104729, round_index, self.index])
        n = len(self.y)
        for _ in range(cfg.local_epochs):
            perm = torch.from_numpy(rng.permutation(n))
            for start in range(0, n, cfg.batch_size):
                idx = perm[start : start + cfg.batch_size]
                yield self.x[idx], self.y[idx]

    def run_round(self, plan: RoundPlan) -> Coroutine:
        ctx, i = self.ctx, self.index
        agg = ctx.aggregator_of(i)
        state = yield Recv(agg, MODEL)
        if state is None:
            return
        load_flat_state(self.module, state)
        opt = ctx.make_optimizer(self.module)
        flops = float(ctx.costs.train_flops[0])
        for xb, yb in self.batches(plan.round):
            act = self.module.part(xb)  # (B, *cut-a shape)
            yield Send(agg, act.detach(), ACTIVATIONS, i)
            yield Send(agg, yb, LABELS, i)
            opt.zero_grad(set_to_none=True)
            if ctx.scheme.end_to_end:
                grad = yield Recv(agg, GRADIENTS)
                if grad is None:
                    return
                act.backward(grad)
            else:
                F.cross_entropy(self.module.aux(act), yb).backward()
            opt.step()
            ctx.meter.charge_compute(self.address, flops * len(yb), i)
        yield Send(agg, flatten_state(self.module), MODEL, i, UPLOAD)
        yield Send(agg, ctx.count_tensor(len(self.y)), CONTROL, i, UPLOAD)


class EdgeAggregator:
    """An edge server: runs the aggregator part for its clients and averages their parts.

    In ``sfl`` it only relays its clients' messages (no compute, no averaging).
    """

    def __init__(self, index: int, ctx: RunContext, module: TierModule):
        self.index = index
        self.address = (AGGREGATOR, index)
        self.ctx = ctx
        self.module = module
        self.lost: set[int] = set()
        """Clients this aggregator gave up on."""
        self.notified: set[int] = set()
        """Lost clients the server has been told about (it skips them too)."""

    def run_round(self, plan: RoundPlan) -> Coroutine:
        ctx, scheme = self.ctx, self.ctx.scheme
        server = SERVER_ADDRESS
        # The clients the server expects this aggregator to serve this round.
        view = [
            int(i)
            for i in plan.order
            if ctx.assignment[i] == self.index and int(i) not in self.notified
        ]
        if not view:
            return
        opt = None
        cstate = None
        if scheme.edge_averaging:
            cstate = yield Recv(server, MODEL)
            if scheme.three_tier:
                astate = yield Recv(server, MODEL)
                load_flat_state(self.module, astate)
                opt = ctx.make_optimizer(self.module)
            for i in view:
                if i not in self.lost:
                    yield Send((CLIENT, i), cstate, MODEL, i, DOWNLOAD)
        else:
            for i in view:
                state = yield Recv(server, MODEL)
                if i not in self.lost:
                    yield Send((CLIENT, i), state, MODEL, i, DOWNLOAD)

        for step in range(plan.max_steps):
            for i in view:
                if step >= plan.n_batches[i] or i in self.notified:
                    continue
                x = y = None
                if i not in self.lost:
                    x = yield Recv((CLIENT, i), ACTIVATIONS, droppable=True)
                    if x is not None:
                        y = yield Recv((CLIENT, i), LABELS, droppable=True)
                    if y is None:
                        self.lost.add(i)
                if i in self.lost:
                    yield Send(server, None, CONTROL, i)
                    self.notified.add(i)
                    continue
                yield from self._train_step(i, x, y, opt)

        if scheme.edge_averaging:
            yield from self._upload_average(view, cstate)
        else:
            yield from self._upload_relay(view)

    def _train_step(self, i: int, x: torch.Tensor, y: torch.Tensor, opt) -> Coroutine:
        ctx, scheme = self.ctx, self.ctx.scheme
        server, client = SERVER_ADDRESS, (CLIENT, i)
        if not scheme.three_tier:  # a relay: forward up, and gradients back down
            yield Send(server, x, ACTIVATIONS, i)
            yield Send(server, y, LABELS, i)
            if scheme.end_to_end:
                grad = yield Recv(server, GRADIENTS)
                if grad is not None:
                    yield Send(client, grad, GRADIENTS, i)
            return
        x.requires_grad_(scheme.end_to_end)
        h = self.module.part(x)  # (B, *cut-c shape)
        yield Send(server, h.detach(), ACTIVATIONS, i)
        yield Send(server, y, LABELS, i)
        opt.zero_grad(set_to_none=True)
        if scheme.local_loss:
            F.cross_entropy(self.module.aux(h), y).backward()
        else:
            grad = yield Recv(server, GRADIENTS)
            if grad is None:
                return
            h.backward(grad)
        opt.step()
        ctx.meter.charge_compute(self.address, float(ctx.costs.train_flops[1]) * len(y), i)
        if scheme.end_to_end:
            yield Send(client, x.grad, GRADIENTS, i)

    def _upload_average(self, view: list[int], cstate: torch.Tensor) -> Coroutine:
        ctx, server = self.ctx, SERVER_ADDRESS
        states, counts = [], []
        for i in view:
            if i in self.lost:
                continue
            state = yield Recv((CLIENT, i), MODEL, droppable=True)
            count = (
                (yield Recv((CLIENT, i), CONTROL, droppable=True)) if state is not None else None
            )
            if count is None:
                self.lost.add(i)
                continue
            states.append(state)
            counts.append(int(count.item()))
        if states and sum(counts) > 0:
            avg = fedavg(states, counts)
            flops = averaging_flops(avg.numel(), len(states))
            ctx.meter.charge_compute(self.address, flops, -1, UPLOAD)
        else:  # every client lost: report the unchanged part with weight 0
            avg, counts = cstate, [0]
        yield Send(server, avg, MODEL, -1, UPLOAD)
        if ctx.scheme.three_tier:
            yield Send(server, flatten_state(self.module), MODEL, -1, UPLOAD)
        yield Send(server, ctx.count_tensor(sum(counts)), CONTROL, -1, UPLOAD)

    def _upload_relay(self, view: list[int]) -> Coroutine:
        server = SERVER_ADDRESS
        for i in view:
            if i in self.notified:
                continue
            state = count = None
            if i not in self.lost:
                state = yield Recv((CLIENT, i), MODEL, droppable=True)
                if state is not None:
                    count = yield Recv((CLIENT, i), CONTROL, droppable=True)
                if count is None:
                    self.lost.add(i)
            if i in self.lost:
                yield Send(server, None, CONTROL, i, UPLOAD)
                self.notified.add(i)
                continue
            yield Send(server, state, MODEL, i, UPLOAD)
            yield Send(server, count, CONTROL, i, UPLOAD)
