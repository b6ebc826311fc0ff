"""The roles Client and EdgeAggregator (with CloudServer in ``server.py``): the step code.

Each role's ``run_round(plan)`` is a generator coroutine: it ``yield``s
:class:`~flowsplit.federated.system.protocol.Send` and ``Recv`` requests and receives the
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

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from flowsplit.federated.config import SFLConfig
from flowsplit.federated.optim import make_optimizer
from flowsplit.federated.schemes import RoundPlan, Scheme, receive_pair
from flowsplit.federated.system.costs import CostMeter
from flowsplit.federated.system.parts import AuxHead, Part, flatten_state, load_flat_state
from flowsplit.federated.system.profile import PartCosts
from flowsplit.federated.system.protocol import (
    ACTIVATIONS,
    AGGREGATOR,
    CLIENT,
    CONTROL,
    LABELS,
    MODEL,
    SERVER_ADDRESS,
    UPLOAD,
    Coroutine,
    Recv,
    Send,
)


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

    def use_round(self, plan: RoundPlan) -> None:
        """Route and charge ``plan``'s round: its clients' aggregators, and the meter
        on its network."""
        self.assignment = plan.assignment
        if self.meter.topology is not plan.topology:
            self.meter.set_topology(plan.topology)

    def aggregator_of(self, client: int) -> tuple[str, int]:
        return (AGGREGATOR, int(self.assignment[client]))

    def count_tensor(self, n: int) -> torch.Tensor:
        return torch.tensor([int(n)], dtype=torch.int64)


class Client:
    """An edge device: holds a shard, trains the client part (and its head under local losses)."""

    def __init__(
        self,
        index: int,
        ctx: RunContext,
        module: TierModule,
        x: torch.Tensor,
        y: torch.Tensor,
        uid: int | None = None,
    ):
        self.index = index
        """Its index in the round (its address); the client itself unless clients are sampled."""
        self.uid = index if uid is None else int(uid)
        """The registered client it is (seeds its batch order)."""
        self.address = (CLIENT, index)
        self.ctx = ctx
        self.module = module
        self.x, self.y = x, y  # (n, *input_shape), (n,)

    def batches(self, round_index: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This round's batches: a fresh seeded shuffle of the shard per local epoch."""
        cfg = self.ctx.config
        rng = np.random.default_rng([cfg.seed, 104729, round_index, self.uid])
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
            if not (yield from ctx.scheme.client_backward(self, act, yb)):
                return
            opt.step()
            ctx.meter.charge_compute(self.address, flops * len(yb), i)
        yield Send(agg, flatten_state(self.module), MODEL, i, UPLOAD)
        yield Send(agg, ctx.count_tensor(len(self.y)), CONTROL, i, UPLOAD)


class EdgeAggregator:
    """An edge server: runs the aggregator part for its clients and averages their parts.

    What it does with a batch, and whether it averages or relays, is the scheme's
    (``scheme.aggregator_download`` / ``aggregator_step`` / ``aggregator_upload``).
    """

    def __init__(self, index: int, ctx: RunContext, module: TierModule):
        self.index = index
        self.address = (AGGREGATOR, index)
        self.ctx = ctx
        self.module = module
        self.opt = None
        """The aggregator part's optimiser, fresh each round it receives the part."""
        self.lost: set[int] = set()
        """Clients this aggregator gave up on."""
        self.notified: set[int] = set()
        """Lost clients the server has been told about (it skips them too)."""

    def charge_train(self, client: int, n: int) -> None:
        """Charge the aggregator part's training compute on ``n`` samples of ``client``."""
        flops = float(self.ctx.costs.train_flops[1]) * n
        self.ctx.meter.charge_compute(self.address, flops, client)

    def run_round(self, plan: RoundPlan) -> Coroutine:
        ctx, scheme = self.ctx, self.ctx.scheme
        # The clients the server expects this aggregator to serve this round.
        view = [
            int(i)
            for i in plan.order
            if ctx.assignment[i] == self.index
            and int(i) not in self.notified
            and plan.takes_part(int(i))
        ]
        if not view:
            return
        self.opt = None
        cstate = yield from scheme.aggregator_download(self, view)
        for step in range(plan.max_steps):
            for i in view:
                if step >= plan.n_batches[i] or i in self.notified:
                    continue
                x, y = yield from receive_pair(self.lost, i, ACTIVATIONS, LABELS)
                if i in self.lost:
                    yield Send(SERVER_ADDRESS, None, CONTROL, i)
                    self.notified.add(i)
                    continue
                yield from scheme.aggregator_step(self, i, x, y)
        yield from scheme.aggregator_upload(self, view, cstate)
