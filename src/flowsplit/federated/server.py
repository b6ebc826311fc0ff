"""The CloudServer role: server part(s), the global model and its averaging.

See :mod:`flowsplit.federated.roles` for the message sequence all roles follow.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from flowsplit.errors import check_finite_loss
from flowsplit.federated.roles import RunContext, TierModule
from flowsplit.federated.schemes import RoundPlan
from flowsplit.federated.system.aggregate import averaging_flops, fedavg
from flowsplit.federated.system.parts import flatten_state, load_flat_state
from flowsplit.federated.system.protocol import (
    ACTIVATIONS,
    LABELS,
    SERVER_ADDRESS,
    UPLOAD,
    Coroutine,
    Recv,
)


class CloudServer:
    """The cloud: runs the server part(s), holds and averages the global model."""

    def __init__(
        self,
        ctx: RunContext,
        client_module: TierModule,
        aggregator_module: TierModule,
        server_module: TierModule,
    ):
        self.address = SERVER_ADDRESS
        self.ctx = ctx
        self.client_global = client_module
        self.aggregator_global = aggregator_module
        self.server_module = server_module
        self.server_opt = ctx.make_optimizer(server_module)
        self.lost: set[int] = set()
        self.train_loss = float("nan")

    def global_model(self) -> nn.Module:
        """The current global model (client, aggregator and server parts in a row)."""
        return nn.Sequential(
            self.client_global.part, self.aggregator_global.part, self.server_module.part
        )

    def train_on(self, i: int, x, y, module: TierModule, opt) -> float:
        """One optimiser step of ``module`` on client ``i``'s batch; returns the loss sum."""
        loss = F.cross_entropy(module.part(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        self.ctx.meter.charge_compute(
            self.address, float(self.ctx.costs.train_flops[2]) * len(y), i
        )
        return float(loss.detach()) * len(y)

    def charge_average(self, numel: int, n_inputs: int) -> None:
        """Charge averaging ``n_inputs`` copies of ``numel`` values."""
        self.ctx.meter.charge_compute(self.address, averaging_flops(numel, n_inputs), -1, UPLOAD)

    def run_round(self, plan: RoundPlan) -> Coroutine:
        ctx, scheme = self.ctx, self.ctx.scheme
        view = [int(i) for i in plan.order if int(i) not in self.lost]
        aggs = sorted({int(ctx.assignment[i]) for i in view})
        yield from scheme.server_download(self, view, aggs)
        copies = scheme.server_parts(self, view)
        loss_sum, n_seen = 0.0, 0
        for step in range(plan.max_steps):
            for i in view:
                if step >= plan.n_batches[i] or i in self.lost:
                    continue
                agg = ctx.aggregator_of(i)
                x = yield Recv(agg, ACTIVATIONS)
                y = (yield Recv(agg, LABELS)) if x is not None else None
                if y is None:
                    self.lost.add(i)
                    continue
                module, opt = copies.get(i, (self.server_module, self.server_opt))
                loss_sum += yield from scheme.server_step(self, i, x, y, module, opt)
                n_seen += len(y)
        self.train_loss = loss_sum / n_seen if n_seen else float("nan")
        yield from scheme.server_collect(self, view, aggs)
        if n_seen:  # checked after the round's messages
            check_finite_loss(self.train_loss, f"in round {plan.round + 1}", ctx.config.lr)
        if copies:  # per-client server parts (sfl v1): their average is the new one
            kept = [i for i in view if i not in self.lost]
            if kept:
                avg = fedavg([flatten_state(copies[i][0]) for i in kept], ctx.n_samples[kept])
                load_flat_state(self.server_module, avg)
                self.charge_average(avg.numel(), len(kept))
