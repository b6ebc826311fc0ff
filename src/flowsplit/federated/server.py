"""The CloudServer role: server part(s), the global model and its averaging.

See :mod:`flowsplit.federated.roles` for the message sequence all roles follow.
"""

from __future__ import annotations

import copy
from typing import Any

import torch.nn.functional as F
from torch import nn

from flowsplit.federated.aggregate import fedavg
from flowsplit.federated.parts import flatten_state, load_flat_state
from flowsplit.federated.protocol import (
    ACTIVATIONS,
    AGGREGATOR,
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
from flowsplit.federated.roles import Coroutine, RunContext, TierModule, averaging_flops
from flowsplit.federated.schemes import RoundPlan


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

    def run_round(self, plan: RoundPlan) -> Coroutine:
        ctx, scheme = self.ctx, self.ctx.scheme
        view = [int(i) for i in plan.order if int(i) not in self.lost]
        aggs = sorted({int(ctx.assignment[i]) for i in view})
        cstate = flatten_state(self.client_global)
        if scheme.edge_averaging:
            astate = flatten_state(self.aggregator_global)
            for j in aggs:
                yield Send((AGGREGATOR, j), cstate, MODEL, -1, DOWNLOAD)
                if scheme.three_tier:
                    yield Send((AGGREGATOR, j), astate, MODEL, -1, DOWNLOAD)
        else:
            for i in view:
                yield Send(ctx.aggregator_of(i), cstate, MODEL, i, DOWNLOAD)

        copies: dict[int, tuple[TierModule, Any]] = {}
        if scheme.server_copies:
            for i in view:
                module = copy.deepcopy(self.server_module)
                copies[i] = (module, ctx.make_optimizer(module))
        loss_sum, n_seen = 0.0, 0
        flops = float(ctx.costs.train_flops[2])
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
                x.requires_grad_(scheme.end_to_end)
                loss = F.cross_entropy(module.part(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                ctx.meter.charge_compute(self.address, flops * len(y), i)
                loss_sum += float(loss.detach()) * len(y)
                n_seen += len(y)
                if scheme.end_to_end:
                    yield Send(agg, x.grad, GRADIENTS, i)
        self.train_loss = loss_sum / n_seen if n_seen else float("nan")

        if scheme.edge_averaging:
            yield from self._collect_from_aggregators(aggs)
        else:
            yield from self._collect_from_clients(view)
        if copies:
            kept = [i for i in view if i not in self.lost]
            if kept:
                avg = fedavg([flatten_state(copies[i][0]) for i in kept], ctx.n_samples[kept])
                load_flat_state(self.server_module, avg)
                self._charge_average(avg.numel(), len(kept))

    def _collect_from_aggregators(self, aggs: list[int]) -> Coroutine:
        cs, as_, ns = [], [], []
        three = self.ctx.scheme.three_tier
        for j in aggs:
            c = yield Recv((AGGREGATOR, j), MODEL)
            a = (yield Recv((AGGREGATOR, j), MODEL)) if three and c is not None else None
            n = None
            if c is not None and (a is not None or not three):
                n = yield Recv((AGGREGATOR, j), CONTROL)
            if n is not None and int(n.item()) > 0:
                cs.append(c)
                as_.append(a)
                ns.append(int(n.item()))
        if not ns:
            return
        load_flat_state(self.client_global, fedavg(cs, ns))
        numel = cs[0].numel()
        if three:
            load_flat_state(self.aggregator_global, fedavg(as_, ns))
            numel += as_[0].numel()
        self._charge_average(numel, len(ns))

    def _collect_from_clients(self, view: list[int]) -> Coroutine:
        cs, ns = [], []
        for i in view:
            if i in self.lost:
                continue
            agg = self.ctx.aggregator_of(i)
            state = yield Recv(agg, MODEL)
            count = (yield Recv(agg, CONTROL)) if state is not None else None
            if count is None:
                self.lost.add(i)
                continue
            cs.append(state)
            ns.append(int(count.item()))
        if ns and sum(ns) > 0:
            load_flat_state(self.client_global, fedavg(cs, ns))
            self._charge_average(cs[0].numel(), len(cs))

    def _charge_average(self, numel: int, n_inputs: int) -> None:
        self.ctx.meter.charge_compute(self.address, averaging_flops(numel, n_inputs), -1, UPLOAD)
