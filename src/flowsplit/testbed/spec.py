"""What a testbed emulates: nodes (CPU share) and the rate of every directed link.

A :class:`TestbedSpec` is plain data, validated once; :class:`~flowsplit.testbed.bed.Testbed`
builds it. Two ways to make one:

- :meth:`TestbedSpec.cluster`: N identical nodes of a data-parallel cluster, every
  node's outgoing traffic shaped to one rate (a token bucket, as a NIC's line rate);
- :meth:`TestbedSpec.from_topology`: the nodes of a split-learning topology (the TOML
  ``sfl run --topology`` reads): server, aggregators, clients, in the dist runner's
  rank order (server 0, aggregator ``j`` at ``1 + j``, client ``i`` at ``1 + A + i``),
  each directed client-aggregator and aggregator-server link at the topology's
  bandwidth, CPU shares in the ratios of the topology's compute speeds.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from flowsplit.errors import ConfigError

MAX_NODES = 250
"""Nodes in one testbed at most (each a network namespace on one /24 bridge)."""
MIN_CPU = 0.02
"""Smallest CPU share a node may get (cores): below it a worker hardly runs at all."""


@dataclass(frozen=True)
class NodeSpec:
    """One emulated host."""

    name: str
    """Unique, e.g. ``node0``, ``server``, ``aggregator1``, ``client7``."""
    cpu: float | None = None
    """CPU share in cores (cgroup quota / period), e.g. 0.25; None: unlimited."""
    mbit: float | None = None
    """Default rate of everything this node sends, Mbit/s (None: unshaped)."""
    rates: dict[str, float] = field(default_factory=dict)
    """Rate of what this node sends to a given node (name -> Mbit/s), overriding ``mbit``."""
    speed: float | None = None
    """The compute speed the node stands for (FLOP/s, from a topology), for reference."""


@dataclass(frozen=True)
class TestbedSpec:
    """Nodes of one testbed, in rank order."""

    __test__ = False  # not a pytest test class despite the name

    nodes: tuple[NodeSpec, ...]
    name: str = "testbed"
    cpu_period_us: int = 10_000
    """cgroup CFS period (µs). Short (10 ms) so a throttled node waits at most a few
    ms for its next slice; the quota of a node is ``cpu * period``."""
    info: dict[str, Any] = field(default_factory=dict)
    """Where the spec came from (topology name, scaling of speeds to CPU shares)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        self.validate()

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first value that cannot be built."""
        if not self.nodes:
            raise ConfigError(f"testbed {self.name!r}: needs at least one node")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ConfigError(f"testbed {self.name!r}: node names repeat: {names}")
        if len(self.nodes) > MAX_NODES:
            raise ConfigError(
                f"testbed {self.name!r}: {len(self.nodes)} nodes, at most {MAX_NODES}"
            )
        if not 1000 <= self.cpu_period_us <= 1_000_000:
            raise ConfigError(f"cpu period {self.cpu_period_us} µs: must be 1000..1000000")
        for n in self.nodes:
            if n.cpu is not None and not (math.isfinite(n.cpu) and n.cpu >= MIN_CPU):
                raise ConfigError(f"node {n.name!r}: cpu {n.cpu} must be >= {MIN_CPU} cores")
            rates = ([n.mbit] if n.mbit is not None else []) + list(n.rates.values())
            if any(not (math.isfinite(r) and r > 0) for r in rates):
                raise ConfigError(f"node {n.name!r}: link rates must be > 0 Mbit/s, got {rates}")
            unknown = set(n.rates) - set(names)
            if unknown:
                raise ConfigError(f"node {n.name!r}: rates to unknown nodes {sorted(unknown)}")
        total = self.total_cpu
        cores = os.cpu_count() or 1
        if total > cores + 1e-9:
            raise ConfigError(
                f"testbed {self.name!r}: CPU shares add up to {total:g} cores, more than the "
                f"{cores} this machine has (the quotas would not hold); lower --cpu"
            )

    @property
    def total_cpu(self) -> float:
        return sum(n.cpu for n in self.nodes if n.cpu is not None)

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def quota_us(self, node: NodeSpec) -> int | None:
        """The node's cgroup quota per period, µs (None: unlimited)."""
        if node.cpu is None:
            return None
        return max(1000, round(node.cpu * self.cpu_period_us))

    @classmethod
    def cluster(
        cls,
        n_nodes: int,
        node: NodeSpec | None = None,
        *,
        cpu_period_us: int = 10_000,
    ) -> TestbedSpec:
        """``n_nodes`` nodes like ``node`` (its CPU share and rate; default
        ``NodeSpec("node")``: unlimited, unshaped), named after it: ``node0..``.

        ``TestbedSpec.cluster(4, NodeSpec("node", cpu=0.25, mbit=100))``."""
        if not 1 <= n_nodes <= MAX_NODES:
            raise ConfigError(f"a cluster has 1 to {MAX_NODES} nodes, not {n_nodes}")
        node = node or NodeSpec("node")
        nodes = [replace(node, name=f"{node.name}{k}") for k in range(n_nodes)]
        return cls(
            tuple(nodes),
            name=f"cluster-{n_nodes}",
            cpu_period_us=cpu_period_us,
            info={"kind": "cluster", "mbit": node.mbit, "cpu_per_node": node.cpu},
        )

    @classmethod
    def from_topology(
        cls,
        topology,
        *,
        cpu_budget: float | None = None,
        max_cpu: float = 1.0,
        cpu_period_us: int = 10_000,
    ) -> TestbedSpec:
        """The nodes and links of a split-learning topology (a path or a ``Topology``).

        CPU shares keep the ratios of the compute speeds: the fastest node gets
        ``max_cpu`` cores unless the shares would add up to more than ``cpu_budget``
        (default: this machine's cores), in which case all are scaled down together.
        A node whose share would fall below :data:`MIN_CPU` gets :data:`MIN_CPU`
        (listed in ``info["clamped"]``: its ratio is not the topology's). Bandwidths
        (B/s) become Mbit/s per directed link, both directions at the link's rate;
        latencies are not emulated (``info["latency_emulated"] = False``).
        """
        from flowsplit.federated.system.topology import Topology, read_topology

        topo = topology if isinstance(topology, Topology) else read_topology(Path(topology))
        n, a = topo.n_clients, topo.n_aggregators
        names = ["server"] + [f"aggregator{j}" for j in range(a)] + [f"client{i}" for i in range(n)]
        speeds = [float(topo.server_speed)]
        speeds += [float(s) for s in topo.aggregator_speed] + [float(s) for s in topo.client_speed]
        budget = float(os.cpu_count() or 1) if cpu_budget is None else float(cpu_budget)
        for value, what in ((budget, "--cpu-budget"), (max_cpu, "the largest CPU share")):
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{what} must be a positive number of cores, got {value}")
        fastest = max(speeds)
        top = min(max_cpu, budget * fastest / sum(speeds))
        shares = [top * s / fastest for s in speeds]
        clamped = [nm for nm, c in zip(names, shares, strict=True) if c < MIN_CPU]
        shares = [max(MIN_CPU, c) for c in shares]
        rates: dict[str, dict[str, float]] = {nm: {} for nm in names}
        for i in range(n):
            for j in range(a):
                bw = float(topo.ca_bandwidth[i, j])
                if bw > 0:
                    mbit = bw * 8 / 1e6
                    rates[f"client{i}"][f"aggregator{j}"] = mbit
                    rates[f"aggregator{j}"][f"client{i}"] = mbit
        for j in range(a):
            mbit = float(topo.as_bandwidth[j]) * 8 / 1e6
            rates[f"aggregator{j}"]["server"] = mbit
            rates["server"][f"aggregator{j}"] = mbit
        nodes = tuple(
            NodeSpec(nm, cpu=c, rates=rates[nm], speed=s)
            for nm, c, s in zip(names, shares, speeds, strict=True)
        )
        return cls(
            nodes,
            name=topo.name,
            cpu_period_us=cpu_period_us,
            info={
                "kind": "topology",
                "topology": topo.name,
                "flops_per_core": fastest / top,
                "clamped": clamped,
                "latency_emulated": False,
            },
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cpu_period_us": self.cpu_period_us,
            "info": self.info,
            "nodes": [
                {"name": n.name, "cpu": n.cpu, "mbit": n.mbit, "rates": n.rates, "speed": n.speed}
                for n in self.nodes
            ],
        }
