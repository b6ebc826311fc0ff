"""Hand-made cost tables and small real instances for the planner tests."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from flowsplit.federated.schemes import get_scheme
from flowsplit.federated.system.presets import generate_topology
from flowsplit.federated.system.profile import BlockProfile
from flowsplit.planner.costs import AGG, CHAIN_A, COUNT, FEATURES, N_BASIS, CostTable


def queue_table(work, chain=None, inv_speed=None) -> CostTable:
    """One cut pair whose only costs are each client's chain (``chain[i, j]``) and its
    aggregator work ``work[i] * inv_speed[j]``, so the round delay is
    ``max_j max(max chain, sum of work on j)``: a makespan problem done by hand."""
    work = np.asarray(work, dtype=float)
    n = len(work)
    inv_speed = np.ones(2) if inv_speed is None else np.asarray(inv_speed, dtype=float)
    a = len(inv_speed)
    chain = np.zeros((n, a)) if chain is None else np.asarray(chain, dtype=float)
    coef = np.zeros((n, 1, len(FEATURES), N_BASIS))
    coef[:, 0, CHAIN_A, 0] = 1.0  # chain = latency matrix, which holds the chains
    coef[:, 0, AGG, 2] = work  # aggregator queue = work * 1 / speed
    coef[:, 0, COUNT, 5] = 1.0
    zeros_pa = np.zeros((1, a))
    return CostTable(
        cuts=((1, 1),),
        coef=coef,
        latency=chain,
        inv_bandwidth=np.zeros((n, a)),
        agg_basis=np.stack([inv_speed, np.zeros(a), np.zeros(a), np.ones(a)]),
        linked=np.ones((n, a), dtype=bool),
        d_fix=zeros_pa,
        d_lin=zeros_pa,
        u_fix=zeros_pa,
        u_lin=zeros_pa,
        server_load=np.zeros(1),
        server_avg_fix=np.zeros(1),
        server_avg_per_agg=np.zeros(1),
        bytes_fix=np.zeros(1),
        bytes_per_agg=np.zeros(1),
        scheme=get_scheme("hsfl"),
    )


def small_profile() -> BlockProfile:
    """A 4-block profile with round numbers (a CNN-like shape: big early activations)."""
    return BlockProfile(
        model="toy",
        block_names=("b1", "b2", "b3", "head"),
        block_types=("conv", "conv", "fc", "fc"),
        input_shape=(100,),
        input_bytes=400,
        n_classes=4,
        fwd_flops=np.array([2e5, 1e6, 1e5, 1e3]),
        params=np.array([100, 2000, 20000, 400]),
        state_numel=np.array([100, 2000, 20000, 400]),
        out_shapes=((200,), (100,), (32,), (4,)),
        out_bytes=np.array([800, 400, 128, 16]),
        bwd_ratio_by_type={"conv": 2.0, "fc": 2.0},
    )


def random_topology(n: int, a: int, seed: int, *, partial_links: bool = False):
    """A seeded heterogeneous topology with shard sizes (some empty) and, optionally,
    missing links (every client keeps at least one)."""
    rng = np.random.default_rng(seed)
    topo = generate_topology(n, a, seed=seed)
    samples = rng.integers(0, 300, n)
    bw = topo.ca_bandwidth.copy()
    if partial_links:
        bw *= rng.random((n, a)) < 0.6
        bw[np.arange(n), rng.integers(0, a, n)] = 1e7
    return replace(topo, client_samples=samples, ca_bandwidth=bw)
