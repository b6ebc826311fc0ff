"""Named topologies and a seeded topology generator.

Reference numbers (documented choices, not measurements): an edge client (phone,
Raspberry-Pi-class box) trains at about 1e10 FLOP/s, an edge aggregator (a small
server) at 2e11, the cloud server at 2e12; a client reaches its aggregator over
100 Mbit/s with 5 ms latency, an aggregator reaches the cloud over 1 Gbit/s with
20 ms latency.

Presets (``--topology NAME``):

- ``homogeneous``: every client, aggregator and link at the reference values;
- ``heterogeneous``: client speeds log-normal around the reference (x0.1 .. x10),
  memories 256 MiB .. 2 GiB, client links log-normal in bandwidth, latency by distance;
- ``slow-uplinks``: reference compute, 1 Mbit/s / 30 ms client links and a
  100 Mbit/s / 50 ms backbone, so communication dominates;
- ``many-clients``: many clients, few aggregators (default 100 and 4), mildly
  heterogeneous: aggregator queues dominate;
- ``random``: :func:`generate_topology` with its defaults.

Counts given on the command line override a preset's defaults.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

import numpy as np

from flowsplit.errors import ConfigError
from flowsplit.federated.system.topology import Topology, read_topology

CLIENT_SPEED = 1e10
AGGREGATOR_SPEED = 2e11
SERVER_SPEED = 2e12
CLIENT_LINK = (0.005, 12.5e6)  # latency s, bandwidth B/s (100 Mbit/s)
BACKBONE_LINK = (0.020, 125e6)  # 1 Gbit/s
MIB = 2**20


def _uniform(
    n: int,
    a: int,
    *,
    name: str,
    description: str,
    seed: int | None,
    client_link: tuple[float, float] = CLIENT_LINK,
    backbone_link: tuple[float, float] = BACKBONE_LINK,
) -> Topology:
    """Reference compute everywhere; every client link and every backbone link alike."""
    return Topology(
        name=name,
        description=description,
        seed=seed,
        client_speed=np.full(n, CLIENT_SPEED),
        client_memory=np.full(n, 1024 * MIB, dtype=np.int64),
        client_samples=np.zeros(n, dtype=np.int64),
        aggregator_speed=np.full(a, AGGREGATOR_SPEED),
        server_speed=SERVER_SPEED,
        ca_latency=np.full((n, a), client_link[0]),
        ca_bandwidth=np.full((n, a), client_link[1]),
        as_latency=np.full(a, backbone_link[0]),
        as_bandwidth=np.full(a, backbone_link[1]),
    )


def homogeneous(n_clients: int = 10, n_aggregators: int = 2, seed: int = 0) -> Topology:
    """Every node and link at the reference values."""
    return _uniform(
        n_clients,
        n_aggregators,
        name="homogeneous",
        description="identical clients, aggregators and links at the reference values",
        seed=seed,
    )


def generate_topology(
    n_clients: int,
    n_aggregators: int,
    seed: int = 0,
    *,
    name: str = "random",
    speed_sigma: float = 1.0,
    bandwidth_sigma: float = 0.7,
    latency_per_unit: float = 0.040,
    client_speed: float = CLIENT_SPEED,
    client_link: tuple[float, float] = CLIENT_LINK,
    backbone_link: tuple[float, float] = BACKBONE_LINK,
    aggregator_speed: float = AGGREGATOR_SPEED,
    description: str = "seeded random geometry: log-normal speeds and bandwidths",
) -> Topology:
    """A random topology, the same for the same arguments.

    Clients and aggregators sit uniformly in a unit square; a client-aggregator
    link's latency is ``client_link[0] + latency_per_unit * distance``, its bandwidth
    log-normal (``bandwidth_sigma``) around ``client_link[1]``; client speeds are
    log-normal (``speed_sigma``) around ``client_speed``, clipped to x0.1 .. x10;
    aggregator speeds vary by x0.5 .. x2.
    """
    if n_clients < 1 or n_aggregators < 1:
        raise ConfigError("a topology needs at least 1 client and 1 aggregator")
    rng = np.random.default_rng(seed)
    clients_xy = rng.random((n_clients, 2))
    aggs_xy = rng.random((n_aggregators, 2))
    dist = np.linalg.norm(clients_xy[:, None, :] - aggs_xy[None, :, :], axis=2)  # (N, A)
    speed = client_speed * np.exp(rng.normal(0.0, speed_sigma, n_clients))
    speed = np.clip(speed, client_speed / 10, client_speed * 10)
    bw = client_link[1] * np.exp(rng.normal(0.0, bandwidth_sigma, (n_clients, n_aggregators)))
    return Topology(
        name=name,
        description=description,
        seed=seed,
        client_speed=speed,
        client_memory=rng.choice([256, 512, 1024, 2048], n_clients).astype(np.int64) * MIB,
        client_samples=np.zeros(n_clients, dtype=np.int64),
        aggregator_speed=aggregator_speed * 2.0 ** rng.uniform(-1, 1, n_aggregators),
        server_speed=SERVER_SPEED,
        ca_latency=client_link[0] + latency_per_unit * dist,
        ca_bandwidth=bw,
        as_latency=backbone_link[0] * rng.uniform(0.5, 2.0, n_aggregators),
        as_bandwidth=np.full(n_aggregators, backbone_link[1]),
    )


def heterogeneous(n_clients: int = 10, n_aggregators: int = 2, seed: int = 0) -> Topology:
    """Clients differ by up to x100 in speed; links by distance and log-normal bandwidth."""
    return generate_topology(
        n_clients,
        n_aggregators,
        seed,
        name="heterogeneous",
        description="heterogeneous clients: log-normal speeds and link bandwidths",
    )


def slow_uplinks(n_clients: int = 10, n_aggregators: int = 2, seed: int = 0) -> Topology:
    """Reference compute over slow links: 1 Mbit/s clients, 100 Mbit/s backbone."""
    return _uniform(
        n_clients,
        n_aggregators,
        name="slow-uplinks",
        description="1 Mbit/s, 30 ms client links and a 100 Mbit/s, 50 ms backbone",
        seed=seed,
        client_link=(0.030, 125e3),
        backbone_link=(0.050, 12.5e6),
    )


def many_clients(n_clients: int = 100, n_aggregators: int = 4, seed: int = 0) -> Topology:
    """Many mildly heterogeneous clients sharing few aggregators."""
    return generate_topology(
        n_clients,
        n_aggregators,
        seed,
        name="many-clients",
        speed_sigma=0.5,
        bandwidth_sigma=0.3,
        description="many clients, few aggregators: aggregator queues dominate",
    )


PRESETS: dict[str, Callable[..., Topology]] = {
    "homogeneous": homogeneous,
    "heterogeneous": heterogeneous,
    "slow-uplinks": slow_uplinks,
    "many-clients": many_clients,
    "random": lambda n_clients=10, n_aggregators=2, seed=0: generate_topology(
        n_clients, n_aggregators, seed
    ),
}


CLIENT_BYTES = (80, 600)
"""Memory of a run per client: ``80 x aggregators + 600`` bytes (the link matrices; the
partition and the round's per-client states). Measured by
``benchmarks/client_memory.py``: 79 and 578 from the peak RSS of ``sfl run`` at 3 and
30 aggregators, 100,000 and 1,000,000 clients (docs/sfl-scale.md)."""


def _check_memory(n_clients: int, n_aggregators: int) -> None:
    """Refuse counts whose run would not fit the available memory: ``--clients
    99999999`` used to be killed for memory after a minute, without a word."""
    from flowsplit.util import available_memory

    need = n_clients * (CLIENT_BYTES[0] * n_aggregators + CLIENT_BYTES[1])
    have = available_memory()
    if need > have:
        raise ConfigError(
            f"--clients {n_clients} x --aggregators {n_aggregators}: a run needs about "
            f"{need / 2**30:.1f} GiB (about {need // max(n_clients, 1)} bytes a client), more "
            f"than the {have / 2**30:.1f} GiB available"
        )


def resolve_topology(
    spec: str, *, n_clients: int | None = None, n_aggregators: int | None = None, seed: int = 0
) -> Topology:
    """A preset name or a TOML file path -> a :class:`Topology`.

    Counts given here override a preset's defaults; for a file they must match it.
    """
    for given, what in ((n_clients, "clients"), (n_aggregators, "aggregators")):
        if given is not None and given < 1:
            raise ConfigError(f"--{what} {given}: a topology needs at least 1 of them")
    if spec in PRESETS:
        if n_clients is not None or n_aggregators is not None:  # a preset's own are small
            defaults = inspect.signature(PRESETS[spec]).parameters
            _check_memory(
                n_clients or defaults["n_clients"].default,
                n_aggregators or defaults["n_aggregators"].default,
            )
        kwargs = {"seed": seed}
        if n_clients is not None:
            kwargs["n_clients"] = n_clients
        if n_aggregators is not None:
            kwargs["n_aggregators"] = n_aggregators
        return PRESETS[spec](**kwargs)
    path = Path(spec)
    if path.suffix.lower() != ".toml" and not path.exists():
        raise ConfigError(
            f"topology {spec!r} is neither a preset ({', '.join(PRESETS)}) nor a .toml file"
        )
    topo = read_topology(path)
    for given, have, what in (
        (n_clients, topo.n_clients, "clients"),
        (n_aggregators, topo.n_aggregators, "aggregators"),
    ):
        if given is not None and given != have:
            raise ConfigError(
                f"{path} describes {have} {what} but {given} were asked for; "
                f"drop --{what} or edit the file"
            )
    return topo
